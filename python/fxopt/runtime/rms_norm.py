"""RMSNorm of float32 rows by fxopt's kernel (kernels/rms_norm.h): what a decoding step's
RMSNorm modules run under optimize_model's decoding presets (optimization/norm_step.py)."""

from __future__ import annotations

import torch

from .. import _core


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * (x / sqrt(mean(x^2, -1) + eps)) for a contiguous float32 CPU x [..., n] and a
    float32 weight [n]; within a few float32 roundings of transformers' RMSNorm."""
    n = weight.numel()
    if x.dtype != torch.float32 or weight.dtype != torch.float32 or not x.is_cpu or x.shape[-1] != n:
        raise TypeError(
            f"rms_norm: float32 CPU x [..., {n}] and weight, not {x.dtype} {tuple(x.shape)}, {weight.dtype}"
        )
    x = x.contiguous()
    weight = weight.detach().contiguous()
    y = torch.empty_like(x)
    if x.numel():
        _core.rms_norm(x.data_ptr(), x.numel() // n, n, weight.data_ptr(), eps, y.data_ptr())
    return y
