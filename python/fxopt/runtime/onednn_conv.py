"""The target of a convolution FuseConvActivationOneDnn fused (cpp/passes/fuse_conv_activation_onednn.h).

oneDNN runs a convolution on a weight in its own blocked layout. Given a plain weight, ATen's
convolution reorders it on every call, which at batch 1 costs about as much as the convolution
itself; here the weight is packed once per input size (`mkldnn._reorder_convolution_weight`)
and kept while it lives unchanged (`packing.py`), and the residual add and the activation run
as post-ops of the same call. The result is channels-last, whatever the input's layout. In a
dtype this CPU's oneDNN refuses, ATen's ops compute the same (onednn_fallback.py).
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
def conv_pointwise(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    residual: torch.Tensor | None,
    attr: str,
    scalars: Sequence[float],
    algorithm: str | None,
) -> torch.Tensor:
    """attr(conv2d(x, weight, bias, stride, padding, dilation, groups) [+ residual]).

    `attr`, `scalars` and `algorithm` name the activation as oneDNN does ("none", "relu",
    "hardtanh" with [0, 6], "gelu" with "tanh", ...). x is a 4-D CPU tensor of the weight's
    dtype (3-D: one unbatched image). Inference only: the result has no autograd history.
    """
    if x.dim() == 3:
        unbatched = None if residual is None else residual[None]
        batch = conv_pointwise(
            x[None], weight, bias, stride, padding, dilation, groups, unbatched, attr, scalars, algorithm
        )
        return batch[0]
    if not onednn_runs("convolution", weight.dtype, _probe):
        with torch.no_grad():
            y = F.conv2d(x, weight, bias, stride, padding, dilation, groups)
            y = y if residual is None else y + residual
            return activation(y, attr, scalars, algorithm).contiguous(memory_format=torch.channels_last)
    # oneDNN's operand order: padding, stride, dilation, groups.
    geometry = (list(padding), list(stride), list(dilation), groups)

    def pack() -> torch.Tensor:
        return torch.ops.mkldnn._reorder_convolution_weight(weight.contiguous(), *geometry, list(x.shape))

    variant = (x.shape, x.dtype, tuple(padding), tuple(stride), tuple(dilation), groups)
    packed = _PACKED.get(weight, (), variant, pack)
    with torch.no_grad():
        if residual is None:
            return torch.ops.mkldnn._convolution_pointwise(x, packed, bias, *geometry, attr, scalars, algorithm)
        return torch.ops.mkldnn._convolution_pointwise.binary(
            x, residual, packed, bias, *geometry, "add", None, None if attr == "none" else attr, scalars, algorithm
        )


def _probe(dtype: torch.dtype) -> torch.Tensor:
    one = torch.ones(1, 1, 1, 1, dtype=dtype)
    packed = torch.ops.mkldnn._reorder_convolution_weight(one, [0, 0], [1, 1], [1, 1], 1, [1, 1, 1, 1])
    return torch.ops.mkldnn._convolution_pointwise(one, packed, None, [0, 0], [1, 1], [1, 1], 1, "none", [], None)
