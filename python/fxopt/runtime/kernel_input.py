"""What fxopt's weight-only kernels (cpp/kernels/) need of the activations, checked once for both.

The kernels read raw memory: the wrappers check every size and layout they rely on, then pass
addresses. Inference only: results have no autograd history.
"""

from __future__ import annotations

import torch


_NARROW = (torch.bfloat16, torch.float16)


def kernel_input(name: str, x: torch.Tensor, k: int) -> torch.Tensor:
    """x as the kernels read it: float32 on the CPU, last dimension k, contiguous. bfloat16 and
    float16 activations (a graph lowered after the pass: the call returns their dtype,
    `kernel_result`) are widened here."""
    if x.dim() < 1 or x.shape[-1] != k:
        raise ValueError(f"{name}: x {tuple(x.shape)} does not end in {k}")
    if x.dtype in _NARROW:
        x = x.float()
    if x.dtype != torch.float32 or not x.is_cpu:  # is_cpu: a fifth of device.type's cost per call
        raise TypeError(f"{name}: float CPU activations, not {x.dtype} on {x.device}")
    return x.contiguous()


def kernel_result(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The float32 result y in the dtype of the activations x the caller passed."""
    return y if x.dtype == y.dtype else y.to(x.dtype)


def kernel_output(x: torch.Tensor, n: int) -> torch.Tensor:
    """The uninitialized [..., n] float32 result for x [..., k]. Sizes unpacked: a torch.Size
    built by concatenation cost a decoding step's small Linear a second microsecond."""
    return torch.empty(*x.shape[:-1], n)
