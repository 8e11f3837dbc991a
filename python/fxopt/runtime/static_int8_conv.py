"""The target of a convolution ``QuantizeConvsInt8`` put in int8 (cpp/passes/quantize_convs_int8.h).

The pass stores each weight as int8 values with one scale per output channel and calibrates one
scale and zero point for the convolution's input on real inputs (static quantization). Each call
quantizes its input to uint8 with them (fxopt's kernel, kernels/quantize_u8.h: one pass, in the
input's own dtype), runs oneDNN's int8 convolution (``onednn.qconv2d_pointwise``: VNNI or AMX
code; on a CPU without them the pass offers no int8 convolution, `exact_here`) on the weight
packed once for this input size and scale (`packing.py`), with the residual add and the
activation as post-ops, and returns the input's dtype: in a graph lowered to bfloat16 it reads
and writes bfloat16 (ChangePrecision leaves it in its input's dtype, cpp/ops/dtype_flow.h), its
scales and bias float32.

oneDNN adds the residual into its operand in place (its int8 convolution has no out-of-place
add): the call adds into a copy, so the graph's value is never written, unless the pass found
that nothing else reads the residual (`residual_dies`), as a ResNet block's input is read by its
last convolution only; then it adds into the residual's own memory.

Where the pass measured it faster (its `int8_fxopt` candidate), a 1x1 convolution's call runs
fxopt's kernel instead (kernel "fxopt", kernels/int8_pointwise_conv.h): the quantization, the
VNNI product, the scales, bias, residual (only read) and clamp in one call on a weight packed
once, with a few microseconds around the work where oneDNN's call through torch costs 25-35.
Inference only: the result has no autograd history.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .. import _core
from . import dynamic_int8, graph_leaf
from .packing import PackCache

_KERNEL_DTYPES = (torch.float32, torch.bfloat16)


def available() -> bool:
    """Whether this torch has oneDNN's int8 convolution with its residual form."""
    onednn = getattr(torch.ops, "onednn", None)
    try:
        return onednn is not None and bool(onednn.qconv_prepack) and bool(onednn.qconv2d_pointwise.binary)
    except (AttributeError, RuntimeError):
        return False


def exact_here() -> bool:
    """Whether QuantizeConvsInt8 may offer oneDNN's int8 convolution on this CPU: where it has
    int8 dot products (VNNI or AMX-INT8). Elsewhere oneDNN's sums saturate (`multiplied_weight`
    keeps a graph quantized on another CPU exact), and on an AVX2-only Zen 3 with two threads an
    8 -> 16 channel stride-2 1x1 convolution gave results up to 1.3 apart from one run to the
    next (5 of 100 calls): convolutions stay float there."""
    return available() and not dynamic_int8.sums_saturate("onednn")


def quantize_u8(x: torch.Tensor, scale: float, zero_point: int) -> torch.Tensor:
    """clamp(round(x / scale) + zero_point, 0, 255) as uint8, in x's (dense) layout; x float32
    or bfloat16, on the CPU."""
    q = torch.empty_like(x, dtype=torch.uint8)
    if x.numel():
        bfloat16, threads = x.dtype == torch.bfloat16, torch.get_num_threads()
        _core.quantize_u8(x.data_ptr(), bfloat16, x.numel(), 1.0 / scale, zero_point, q.data_ptr(), threads)
    return q


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 values (weight's shape) and float32 scales per output channel, max |W[o]| / 127: as
    QuantizeConvsInt8 stores them (TensorOps::quantize_rows_int8), for calibration and timing."""
    w = weight.detach().float()
    scales = (w.abs().amax(dim=tuple(range(1, w.dim()))) / 127).clamp_min(torch.finfo(torch.float32).tiny)
    return torch.round(w / scales.view(-1, *[1] * (w.dim() - 1))).to(torch.int8), scales


def input_quantization(low: float, high: float) -> tuple[float, int] | None:
    """The uint8 scale and zero point of values in [low, high]: the range widened to hold 0 (so
    zero padding stays exact) in 255 steps; None for an empty or non-finite range."""
    low, high = min(low, 0.0), max(high, 0.0)
    if not (high > low) or not all(abs(v) != float("inf") for v in (low, high)):
        return None
    scale = (high - low) / 255
    return scale, int(min(max(round(-low / scale), 0), 255))


_PACKED: PackCache[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = PackCache()
_OWN_PACKED: PackCache[torch.Tensor] = PackCache()

KERNELS = ("onednn", "fxopt")
"""Who runs a call: oneDNN's int8 convolution, or fxopt's 1x1 kernel (see above)."""

# The clamp fxopt's kernel applies for an activation oneDNN names: (lower, upper).
_CLAMPS = {"none": (-float("inf"), float("inf")), "relu": (0.0, float("inf"))}


def _own_clamp(
    values: torch.Tensor, stride: Sequence[int], padding: Sequence[int], groups: int,
    attr: str, scalars: Sequence[float],
) -> tuple[float, float] | None:  # fmt: skip
    """The clamp fxopt's kernel applies for this call, None if the kernel does not run it: it
    takes 1x1 convolutions of stride 1, no padding and one group, with no activation, ReLU or
    ReLU6 (hardtanh 0..6), where the CPU has AVX512-VNNI."""
    unit = values.shape[2:] == (1, 1) and tuple(stride) == (1, 1) and tuple(padding) == (0, 0)
    if not (unit and groups == 1 and _core.int8_pointwise_conv_vectorized()):
        return None
    if attr == "hardtanh" and len(scalars) == 2:
        return float(scalars[0]), float(scalars[1])
    return _CLAMPS.get(attr)


def _own_pack(
    values: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None, x_scale: float, x_zero_point: int
) -> torch.Tensor:
    out_channels, in_channels = values.shape[0], values.shape[1]
    rows = values.reshape(out_channels, in_channels).contiguous()
    w_scales = scales.contiguous()
    shift = None if bias is None else bias.detach().float().contiguous()
    packed = torch.empty(_core.int8_pointwise_packed_bytes(out_channels, in_channels), dtype=torch.uint8)
    _core.int8_pointwise_pack(
        rows.data_ptr(), w_scales.data_ptr(), 0 if shift is None else shift.data_ptr(),
        out_channels, in_channels, x_scale, x_zero_point, packed.data_ptr(),
    )  # fmt: skip
    return packed


def _own_conv(
    x: torch.Tensor, values: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None,
    x_scale: float, x_zero_point: int, residual: torch.Tensor | None, clamp: tuple[float, float],
) -> torch.Tensor:  # fmt: skip
    """The call on fxopt's kernel: x a 4-D float32 or bfloat16 CPU tensor."""
    batch, _, height, width = x.shape
    out_channels, in_channels = values.shape[0], values.shape[1]
    quantization = (x_scale, x_zero_point)
    packed = _OWN_PACKED.get(values, (scales, bias), quantization, _own_pack, values, scales, bias, *quantization)
    x = x.contiguous(memory_format=torch.channels_last)
    if residual is not None:
        residual = residual.to(dtype=x.dtype, memory_format=torch.channels_last)
    y = torch.empty(batch, out_channels, height, width, dtype=x.dtype, memory_format=torch.channels_last)
    _core.int8_pointwise_conv(
        [batch * height * width, in_channels, out_channels], clamp[0], clamp[1], x.dtype == torch.bfloat16,
        x.data_ptr(), x_scale, x_zero_point, packed.data_ptr(),
        0 if residual is None else residual.data_ptr(), y.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
    return y


def multiplied_weight(values: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The int8 weight and scales oneDNN's convolution multiplies here: the stored ones, or where
    its sums saturate (a CPU without VNNI or AMX-INT8) each channel beyond the levels its Linears
    get there (`dynamic_int8.weight_max`: 63) requantized to them, so that every sum is exact;
    requantizing the stored levels costs at most a quarter level more than quantizing the float
    weight."""
    levels = dynamic_int8.weight_max("onednn")
    peaks = values.abs().amax(dim=tuple(range(1, values.dim()))).float()
    if not bool((peaks > levels).any()):
        return values, scales
    factors = torch.where(peaks > levels, peaks / levels, torch.ones_like(peaks))
    shape = (-1, *[1] * (values.dim() - 1))
    return torch.round(values.float() / factors.view(shape)).to(torch.int8), scales * factors


def _pack(
    values: torch.Tensor,
    scales: torch.Tensor,
    geometry: tuple[list[int], list[int], list[int], int],
    x_shape: Sequence[int],
    x_scale: float,
    x_zero_point: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The weight in oneDNN's layout for this input, its scales and its zero points."""

    def make() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        exact_values, exact_scales = multiplied_weight(values, scales)
        weight = exact_values.contiguous(memory_format=torch.channels_last)
        packed = torch.ops.onednn.qconv_prepack(weight, exact_scales, x_scale, x_zero_point, *geometry, list(x_shape))
        return packed, exact_scales, torch.zeros(len(scales), dtype=torch.long)

    variant = (tuple(x_shape), x_scale, x_zero_point, tuple(map(tuple, geometry[:3])), geometry[3])
    return _PACKED.get(values, (scales,), variant, make)


@graph_leaf
def int8_conv2d(
    x: torch.Tensor,
    values: torch.Tensor,
    scales: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    x_scale: float,
    x_zero_point: int,
    residual: torch.Tensor | None,
    attr: str,
    scalars: Sequence[float],
    algorithm: str | None,
    residual_dies: bool = False,
    kernel: str = "onednn",
) -> torch.Tensor:
    """attr(conv2d(q(x), values * scales[:, None, None, None], bias, stride, padding, dilation,
    groups) [+ residual]) in x's dtype, q(x) = (quantize_u8(x) - x_zero_point) * x_scale.

    `values` is the int8 weight [out, in / groups, kh, kw], `scales` its float32 per-channel
    scales; x a 4-D CPU float tensor (3-D: one unbatched image); `attr`, `scalars` and
    `algorithm` name the activation as oneDNN does ("none", "relu", "hardtanh" with [0, 6],
    "hardswish", "swish"; "relu" or "none" with a residual). The result is channels-last.
    `residual_dies`: nothing reads the residual after this call, which may then write into it.
    `kernel`: one of KERNELS; a call fxopt's kernel does not take (`_own_clamp`) runs on oneDNN's.
    """
    if x.dim() == 3:
        unbatched = None if residual is None else residual[None]
        batch = int8_conv2d(
            x[None], values, scales, bias, stride, padding, dilation, groups, x_scale, x_zero_point,
            unbatched, attr, scalars, algorithm, residual_dies, kernel,
        )
        return batch[0]
    if kernel not in KERNELS:
        raise ValueError(f"int8_conv2d: kernel {kernel!r}, expected one of {', '.join(KERNELS)}")
    if values.dtype != torch.int8 or scales.dtype != torch.float32 or values.dim() != 4:
        raise TypeError(
            f"int8_conv2d: 4-D int8 values and float32 scales, not {values.dtype} {tuple(values.shape)}, {scales.dtype}"
        )
    if x.dim() != 4 or not x.is_cpu or not x.is_floating_point():
        raise TypeError(f"int8_conv2d: a 4-D float CPU input, not {x.dtype} {tuple(x.shape)} on {x.device}")
    work = x if x.dtype in _KERNEL_DTYPES else x.float()
    clamp = _own_clamp(values, stride, padding, groups, attr, scalars) if kernel == "fxopt" else None
    if clamp is not None:
        y = _own_conv(work, values, scales, bias, x_scale, x_zero_point, residual, clamp)
        return y if y.dtype == x.dtype else y.to(x.dtype)
    work = work.contiguous(memory_format=torch.channels_last)
    geometry = (list(stride), list(padding), list(dilation), groups)
    with torch.no_grad():
        qx = quantize_u8(work, x_scale, x_zero_point)
        packed, scales, zeros = _pack(values, scales, geometry, work.shape, x_scale, x_zero_point)
        bias = None if bias is None else bias.float()
        if residual is None:
            y = torch.ops.onednn.qconv2d_pointwise(
                qx, x_scale, x_zero_point, packed, scales, zeros, bias, *geometry,
                1.0, 0, work.dtype, attr, scalars, algorithm,
            )
        else:
            accumulator = residual.to(dtype=work.dtype, memory_format=torch.channels_last, copy=not residual_dies)
            y = torch.ops.onednn.qconv2d_pointwise.binary(
                qx, x_scale, x_zero_point, packed, scales, zeros, accumulator, bias, *geometry,
                1.0, 0, work.dtype, 1.0, 0, "sum", 1.0, None if attr == "none" else attr, scalars, algorithm,
            )
    return y if y.dtype == x.dtype else y.to(x.dtype)
