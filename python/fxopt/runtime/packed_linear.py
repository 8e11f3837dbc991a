"""The call FuseLinearActivationOneDnn gives a Linear where fxopt's float GEMM measured fastest
(kernels/pointwise_conv.h: a 1x1 convolution of a channels-last image is the same product, a
token a pixel), with a ReLU / ReLU6 after it as the kernel's clamp.

Why: on CPUs where ATen's GEMM (MKL) and oneDNN's fall behind, the kernel on a weight packed
once is level at one thread and ahead at two, where it splits the output features over torch's
threads: two Zen 3 cores, 128 tokens, medians of 9 interleaved rounds, against ATen's linear:
384 -> 1536 0.89 / 1.01 ms, 768 -> 3072 3.80 / 4.55, 3072 -> 768 5.24 / 6.08 (ONNX Runtime's
MLAS: 1.06, 4.39, 4.26 in another run). The graph keeps the Linear's own weight and bias; the
packed form is made on the first call and kept while they live (runtime/packing.py). Calls the
kernel does not take (another dtype, a tensor not on the CPU, a CPU without the dtype's vector
path: AVX2 for float32, AVX512-BF16 for bfloat16) run ATen's linear, summed in float32 at least
and rounded once, as the kernel does. Inference only: the result has no autograd history.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import _core
from . import graph_leaf
from .pointwise_conv import packed

_DTYPES = (torch.float32, torch.bfloat16)


def _takes(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (
        x.dtype in _DTYPES
        and weight.dtype == x.dtype
        and x.is_cpu
        and weight.is_cpu
        and _core.pointwise_conv_vectorized(x.dtype == torch.bfloat16)
    )


@graph_leaf
def packed_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, lower: float | None, upper: float | None
) -> torch.Tensor:
    """clamp(linear(x, weight, bias), lower, upper): x [..., in] and weight [out, in] both
    float32 or both bfloat16; lower / upper the clamp's bounds (None: unbounded)."""
    if not _takes(x, weight):
        wide = torch.promote_types(x.dtype, torch.float32)
        with torch.no_grad():
            y = F.linear(x.to(wide), weight.to(wide), None if bias is None else bias.to(wide))
            y = y if lower is None and upper is None else y.clamp(lower, upper)
            return y.to(x.dtype)
    out_features, in_features = weight.shape
    rows = x.reshape(-1, in_features).contiguous()
    y = torch.empty(*x.shape[:-1], out_features, dtype=x.dtype)
    _core.pointwise_conv(
        [rows.shape[0], in_features, out_features],
        -float("inf") if lower is None else lower, float("inf") if upper is None else upper,
        x.dtype == torch.bfloat16, rows.data_ptr(), packed(weight, bias).data_ptr(), 0, y.data_ptr(),
        torch.get_num_threads(),
    )  # fmt: skip
    return y
