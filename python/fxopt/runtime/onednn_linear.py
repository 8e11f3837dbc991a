"""The target of a Linear FuseLinearActivationOneDnn fused (cpp/passes/fuse_linear_activation_onednn.h).

oneDNN multiplies with a weight in its own blocked layout. Given a plain weight, its linear
reorders that weight on every call; here the weight is packed once
(`mkldnn._reorder_linear_weight`, for any number of rows) and kept while it lives unchanged
(`packing.py`), and the activation runs as a post-op of the same call. The results are the
plain call's up to rounding (bit for bit at most shapes; one float32 row takes a blocked GEMM
instead of a GEMV, another order of the same sums). Measured on a Zen 4 core (one thread,
bfloat16): 128x384x384 0.225 -> 0.197 ms, 128x768x3072 3.25 -> 2.94 ms, one row of 384x1536
0.064 -> 0.038 ms; whole models 1.03-1.07x (bench/linear_packing.py). In a dtype this CPU's
oneDNN refuses (a later float16 lowering, a graph loaded on another CPU) the call runs ATen's
linear and activation instead (onednn_fallback.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .onednn_fallback import activation, onednn_runs
from .packing import PackCache
from . import graph_leaf

_PACKED: PackCache[torch.Tensor] = PackCache()


@graph_leaf
def linear_pointwise(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    attr: str,
    scalars: Sequence[float],
    algorithm: str | None,
) -> torch.Tensor:
    """attr(linear(x, weight, bias)), as `torch.ops.mkldnn._linear_pointwise` computes it.

    `attr`, `scalars` and `algorithm` name the activation as oneDNN does ("none", "relu",
    "gelu" with "tanh", "hardtanh" with [0, 6], ...). x is a CPU tensor of the weight's dtype,
    of any rank. Inference only: like the op, it has no backward.
    """
    if not onednn_runs("linear", weight.dtype, _probe):
        with torch.no_grad():
            return activation(F.linear(x, weight, bias), attr, scalars, algorithm)
    packed = _PACKED.get(weight, (), weight.dtype, _pack, weight)
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, attr, scalars, algorithm)


def _probe(dtype: torch.dtype) -> torch.Tensor:
    one = torch.ones(1, 1, dtype=dtype)
    return torch.ops.mkldnn._linear_pointwise(one, _pack(one), None, "none", [], None)


def _pack(weight: torch.Tensor) -> torch.Tensor:
    # None: a layout for any number of rows, so one packed copy serves every sequence length.
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), None)
