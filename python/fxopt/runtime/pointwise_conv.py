"""The call FusePointwiseConv gives a 1x1 convolution (with the residual add and the ReLU / ReLU6
after it) where fxopt's kernel measured faster (kernels/pointwise_conv.h).

The graph keeps the convolution's own weight and bias; the kernel's packed form (the weight in
blocks of 32 output channels, bfloat16 input channels in pairs, then the bias in float32) is
made on the first call and kept while they live (runtime/packing.py). Calls the kernel does not
take (another dtype, an input that is not on the CPU, a CPU without the dtype's vector path:
AVX512-BF16 for bfloat16, AVX2 for float32) run the same computation in ATen. Inference only:
the result has no autograd history.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import _core
from . import graph_leaf
from .packing import PackCache

_PACKED: PackCache[torch.Tensor] = PackCache()

_DTYPES = (torch.float32, torch.bfloat16)


def _pack(weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    out_channels, in_channels = weight.shape[0], weight.shape[1]
    rows = weight.detach().reshape(out_channels, in_channels).contiguous()
    shift = None if bias is None else bias.detach().float().contiguous()
    bfloat16 = weight.dtype == torch.bfloat16
    packed = torch.empty(_core.pointwise_packed_bytes(out_channels, in_channels, bfloat16), dtype=torch.uint8)
    bias_address = 0 if shift is None else shift.data_ptr()
    _core.pointwise_pack(rows.data_ptr(), bias_address, out_channels, in_channels, bfloat16, packed.data_ptr())
    return packed


def _takes(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None) -> bool:
    if x.dim() != 4 or x.dtype not in _DTYPES or weight.dtype != x.dtype:
        return False
    if not (x.is_cpu and weight.is_cpu and _core.pointwise_conv_vectorized(x.dtype == torch.bfloat16)):
        return False
    if residual is None:
        return True
    shape = (x.shape[0], weight.shape[0], x.shape[2], x.shape[3])
    return residual.dtype == x.dtype and residual.is_cpu and tuple(residual.shape) == shape


@graph_leaf
def pointwise_conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    residual: torch.Tensor | None,
    lower: float | None,
    upper: float | None,
) -> torch.Tensor:
    """clamp(conv2d(x, weight, bias) [+ residual], lower, upper).

    x [N, C, H, W] (or [C, H, W]), weight [out, C, 1, 1], both float32 or both bfloat16;
    residual the result's shape and dtype (None: no add); lower / upper: the clamp's bounds
    (None: unbounded). The result is channels-last, as oneDNN's convolution returns it.
    """
    if x.dim() == 3:
        unbatched = None if residual is None else residual[None]
        return pointwise_conv2d(x[None], weight, bias, unbatched, lower, upper)[0]
    if not _takes(x, weight, residual):
        # Summed and rounded once in float32 at least, as the kernel does: a bfloat16
        # convolution and add would round twice.
        wide = torch.promote_types(x.dtype, torch.float32)
        with torch.no_grad():
            y = F.conv2d(x.to(wide), weight.to(wide), None if bias is None else bias.to(wide))
            if residual is not None:
                y = y + residual.to(wide)
            y = y if lower is None and upper is None else y.clamp(lower, upper)
            return y.to(x.dtype).contiguous(memory_format=torch.channels_last)
    batch, _, height, width = x.shape
    out_channels, in_channels = weight.shape[0], weight.shape[1]
    packed = _PACKED.get(weight, (bias,), (), _pack, weight, bias)
    x = x.contiguous(memory_format=torch.channels_last)
    if residual is not None:
        residual = residual.contiguous(memory_format=torch.channels_last)
    y = torch.empty(batch, out_channels, height, width, dtype=x.dtype, memory_format=torch.channels_last)
    _core.pointwise_conv(
        [batch * height * width, in_channels, out_channels],
        -float("inf") if lower is None else lower, float("inf") if upper is None else upper,
        x.dtype == torch.bfloat16, x.data_ptr(), packed.data_ptr(),
        0 if residual is None else residual.data_ptr(), y.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
    return y
