"""The target of a weight-only int8 Linear that runs fxopt's own kernel (kernels/int8_weight_mm.h).

A Linear without bias: float32 activations of any rank times int8 weight rows with one float32
scale per row. QuantizeLinearsWeightOnly emits a call of this function where the kernel chooser
measured it fastest (a decoding step's few rows); taking x as it comes, leading sizes included,
spares the graph the flatten and unflatten around ATen's 2-D kernel (half the per-call cost at
one token). Inference only: the result has no autograd history.
"""

from __future__ import annotations

import torch

from .. import _core


def int8_weight_linear(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """x [..., k] float32 @ (weight [n, k] int8 * scales [n] float32)ᵀ -> [..., n] float32."""
    n, k = weight.shape
    # The kernel reads raw memory: every size and layout it relies on is checked here.
    if x.dim() < 1 or x.shape[-1] != k or scales.shape != (n,):
        raise ValueError(f"int8_weight_linear: x {tuple(x.shape)}, weight {(n, k)}, scales {tuple(scales.shape)}")
    if weight.dtype != torch.int8 or scales.dtype != torch.float32 or x.dtype != torch.float32:
        dtypes = (x.dtype, weight.dtype, scales.dtype)
        raise TypeError(f"int8_weight_linear: float32 x, int8 weight, float32 scales; not {dtypes}")
    if x.device.type != "cpu" or not (weight.is_contiguous() and scales.is_contiguous()):
        raise ValueError("int8_weight_linear: CPU tensors, weight and scales contiguous")
    x = x.contiguous()
    y = torch.empty(x.shape[:-1] + (n,))
    _core.int8_weight_mm(x.data_ptr(), x.numel() // k, k, weight.data_ptr(), scales.data_ptr(), n, y.data_ptr())
    return y
