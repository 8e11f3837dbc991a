"""The target of a weight-only int8 Linear that runs fxopt's own kernel (kernels/int8_weight_mm.h).

A Linear without bias: float32 activations of any rank times int8 weight rows with one float32
scale per row. QuantizeLinearsWeightOnly emits a call of this function where the kernel chooser
measured it fastest (a decoding step's few rows); taking x as it comes, leading sizes included,
spares the graph the flatten and unflatten around ATen's 2-D kernel (half the per-call cost at
one token). The kernel splits its output channels over torch's thread count. Inference only: the
result has no autograd history.
"""

from __future__ import annotations

import torch

from .. import _core
from .kernel_input import kernel_input, kernel_output, kernel_result
from . import graph_leaf


@graph_leaf
def int8_weight_linear(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """x [..., k] @ (weight [n, k] int8 * scales [n] float32)ᵀ -> [..., n], computed in float32
    (bfloat16 and float16 x: widened, the result in their dtype)."""
    n, k = weight.shape
    if weight.dtype != torch.int8 or scales.dtype != torch.float32:
        raise TypeError(f"int8_weight_linear: int8 weight, float32 scales; not {weight.dtype}, {scales.dtype}")
    if scales.shape != (n,):
        raise ValueError(f"int8_weight_linear: weight {(n, k)}, scales {tuple(scales.shape)}")
    if not (weight.is_contiguous() and scales.is_contiguous()):
        raise ValueError("int8_weight_linear: weight and scales contiguous")
    given, x = x, kernel_input("int8_weight_linear", x, k)
    y = kernel_output(x, n)
    _core.int8_weight_mm(
        x.data_ptr(), x.numel() // k, k, weight.data_ptr(), scales.data_ptr(), n, y.data_ptr(), torch.get_num_threads()
    )
    return kernel_result(y, given)
