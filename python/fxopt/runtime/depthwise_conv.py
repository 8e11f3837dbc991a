"""The call FuseDepthwiseConv gives a depthwise convolution (with the zero pad before it and the
ReLU / ReLU6 after it) where fxopt's kernel measured faster (kernels/depthwise_conv.h).

The graph keeps the convolution's own weight and bias; the kernel's packed form (every tap's
weights across the channels, then the bias) is made on the first call and kept while they live
(runtime/packing.py). Calls the kernel does not take (another dtype, an input that is not on the
CPU, a CPU without AVX2) run the same computation in ATen. Inference only: the result has no
autograd history.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .. import _core
from . import graph_leaf
from .packing import PackCache

_PACKED: PackCache[torch.Tensor] = PackCache()

_DTYPES = (torch.float32, torch.bfloat16)


def _pack(weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    channels, taps = weight.shape[0], weight.shape[2] * weight.shape[3]
    filters = weight.detach().reshape(channels, taps).float().contiguous()
    shift = None if bias is None else bias.detach().float().contiguous()
    packed = torch.empty(_core.depthwise_packed_size(channels, taps))
    bias_address = 0 if shift is None else shift.data_ptr()
    _core.depthwise_pack(filters.data_ptr(), bias_address, channels, taps, packed.data_ptr())
    return packed


@graph_leaf
def depthwise_conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    lower: float | None,
    upper: float | None,
) -> torch.Tensor:
    """clamp(conv2d(pad(x, padding), weight, bias, stride, groups=channels), lower, upper).

    x [N, C, H, W] (or [C, H, W]) of the weight's dtype, weight [C, 1, kh, kw]; padding: zeros
    above, below, left and right; lower / upper: the clamp's bounds (None: unbounded). The result
    is channels-last, as oneDNN's convolution returns it.
    """
    if x.dim() == 3:
        return depthwise_conv2d(x[None], weight, bias, stride, padding, lower, upper)[0]
    top, bottom, left, right = padding
    if (
        x.dim() != 4
        or x.dtype not in _DTYPES
        or x.dtype != weight.dtype
        or not x.is_cpu
        or not weight.is_cpu
        or not _core.depthwise_conv_vectorized()
    ):
        with torch.no_grad():
            y = F.conv2d(F.pad(x, (left, right, top, bottom)), weight, bias, list(stride), 0, 1, weight.shape[0])
            y = y if lower is None and upper is None else y.clamp(lower, upper)
            return y.contiguous(memory_format=torch.channels_last)
    batch, channels, height, width = x.shape
    kernel_h, kernel_w = weight.shape[2], weight.shape[3]
    out_h = (height + top + bottom - kernel_h) // stride[0] + 1
    out_w = (width + left + right - kernel_w) // stride[1] + 1
    packed = _PACKED.get(weight, (bias,), (), _pack, weight, bias)
    x = x.contiguous(memory_format=torch.channels_last)
    y = torch.empty(batch, channels, out_h, out_w, dtype=x.dtype, memory_format=torch.channels_last)
    sizes = [batch, channels, height, width, kernel_h, kernel_w, stride[0], stride[1], top, left, out_h, out_w]
    _core.depthwise_conv(
        sizes, -float("inf") if lower is None else lower, float("inf") if upper is None else upper,
        x.dtype == torch.bfloat16, x.data_ptr(), packed.data_ptr(), y.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
    return y
