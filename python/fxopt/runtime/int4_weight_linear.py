"""The target of a weight-only int4 Linear that runs fxopt's own kernel (kernels/int4_weight_mm.h).

A Linear without bias: float32 activations of any rank (rounded to int8 per row inside the
kernel) times 4-bit weights packed two per byte ([n, k / 2] uint8, the kernel's layout) with a
float16 scale and minimum per group of columns ([n, 2, k / group]). QuantizeLinearsWeightOnly
emits a call of this function where the kernel chooser measured it fastest; like the int8 one
it takes x with its leading sizes and splits the output channels over torch's thread count.
Inference only: the result has no autograd history.
"""

from __future__ import annotations

import torch

from .. import _core
from .kernel_input import kernel_input, kernel_output, kernel_result
from . import graph_leaf


@graph_leaf
def int4_weight_linear(x: torch.Tensor, packed: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """x [..., k] @ (the int4 weight [n, k] of packed and params)ᵀ -> [..., n], computed in float32
    (bfloat16 and float16 x: widened, the result in their dtype)."""
    n, half = packed.shape
    k = 2 * half
    groups = params.shape[-1] if params.dim() == 3 else 0
    if packed.dtype != torch.uint8 or params.dtype != torch.float16:
        raise TypeError(f"int4_weight_linear: uint8 packed, float16 params; not {packed.dtype}, {params.dtype}")
    if params.shape != (n, 2, groups) or groups == 0 or k % groups or (k // groups) % 32:
        raise ValueError(f"int4_weight_linear: packed {tuple(packed.shape)}, params {tuple(params.shape)}")
    if not (packed.is_contiguous() and params.is_contiguous()):
        raise ValueError("int4_weight_linear: packed and params contiguous")
    given, x = x, kernel_input("int4_weight_linear", x, k)
    y = kernel_output(x, n)
    _core.int4_weight_mm(
        x.data_ptr(),
        x.numel() // k,
        k,
        packed.data_ptr(),
        params.data_ptr(),
        k // groups,
        n,
        y.data_ptr(),
        torch.get_num_threads(),
    )
    return kernel_result(y, given)
