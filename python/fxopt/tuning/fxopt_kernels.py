"""Candidates that run fxopt's own kernels (cpp/kernels/), registered like those of kernels.py.

`fxopt_int8` for a weight-only int8 Linear and `fxopt_int4` for a 4-bit one: float32 activations
times int8 weight rows (kernels/int8_weight_mm.h through runtime/int8_weight_linear.py), or
activations rounded to int8 per row times 4-bit groups with VNNI (or AVX2) dot products
(kernels/int4_weight_mm.h through runtime/int4_weight_linear.py), which
QuantizeLinearsWeightOnly emits where they measure fastest. `fxopt` for a depthwise convolution
(kernels/depthwise_conv.h through runtime/depthwise_conv.py), against `left`: what the later
passes make of it, FuseDepthwiseConv's query; the same for a 1x1 convolution
(kernels/pointwise_conv.h through runtime/pointwise_conv.py), FusePointwiseConv's query. And
`float32_fxopt` / `bfloat16_fxopt` for QuantizeConvsInt8's query: a convolution one of those
kernels takes, left in float, as they run it; and `int8_fxopt`, its int8 call on fxopt's 1x1
kernel (kernels/int8_pointwise_conv.h, AVX512-VNNI).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .. import _core
from ..engine.tensor_ops import TorchTensorOps
from ..optimization import hardware
from ..runtime import onednn_conv
from ..runtime.depthwise_conv import depthwise_conv2d
from ..runtime.int4_weight_linear import int4_weight_linear
from ..runtime.int8_weight_linear import int8_weight_linear
from ..runtime.pointwise_conv import pointwise_conv2d
from .kernels import (
    _ACTIVATIONS,
    _POST_OPS,
    INT4_GROUP_SIZE,
    Builder,
    Problem,
    Runner,
    Weights,
    _conv_left,
    _conv_operands,
    int8_conv,
    random_operand,
    register,
)

_WEIGHTS = TorchTensorOps()


def _has_avx2() -> bool:
    # The kernels' vector paths: AVX-512 (int4: with VNNI), else AVX2 with FMA and F16C.
    # Elsewhere their plain C++ loops run: correct, never faster than float32.
    return "avx2" in hardware.cpu_flags() or "avx512_f" in hardware.cpu_flags()


def _own_kernel(bits: int) -> Builder:
    """The chain QuantizeLinearsWeightOnly emits with fxopt's kernel: float32 throughout."""

    def build(problem: Problem) -> Runner:
        tokens, in_features, out_features = problem.shape
        generator = torch.Generator().manual_seed(0)
        x = random_operand(tokens, in_features, generator=generator)
        weight = random_operand(out_features, in_features, generator=generator, scale=in_features**-0.5)
        bias = None if problem.variant.endswith("no_bias") else random_operand(out_features, generator=generator)
        linear: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
        if bits == 8:
            values, scales = _WEIGHTS.quantize_rows_int8(weight)
            linear = int8_weight_linear
        else:
            values, scales = _WEIGHTS.quantize_groups_int4(weight, INT4_GROUP_SIZE, "fxopt")
            linear = int4_weight_linear

        def run(w: Weights) -> object:
            values, scales, bias = w
            y = linear(x, values, scales)
            return y if bias is None else y + bias

        return Runner(run, (values, scales, bias))

    return build


register("int8_weight_only", "fxopt_int8", _has_avx2, _own_kernel(8))
register("int4_weight_only", "fxopt_int4", _has_avx2, _own_kernel(4))


_CLAMPS = {"none": (None, None), "relu": (0.0, None), "relu6": (0.0, 6.0)}
"""The activations FuseDepthwiseConv and FusePointwiseConv take into the call, as the kernel's
clamp bounds."""


def _depthwise(own: bool) -> Builder:
    """Query shape (cpp/passes/fuse_depthwise_conv.cc): the input's N, C, H, W (before the pad),
    kernel height and width, stride, then the zeros above, below, left and right; variant: the
    activation, then ",no_bias". fxopt's call (`own`), or the graph as the later passes leave
    it: the pad where the sides differ, then oneDNN's fused convolution (ATen's without it)."""

    def build(problem: Problem) -> Runner:
        n, c, h, w, kh, kw, sh, sw, top, bottom, left, right = problem.shape
        activation, *flags = problem.variant.split(",")
        dtype = getattr(torch, problem.dtype)
        generator = torch.Generator().manual_seed(0)
        x = random_operand(n, c, h, w, generator=generator).to(dtype).contiguous(memory_format=torch.channels_last)
        weight = random_operand(c, 1, kh, kw, generator=generator, scale=(kh * kw) ** -0.5).to(dtype)
        bias = None if "no_bias" in flags else random_operand(c, generator=generator).to(dtype)
        stride, sides = [sh, sw], [top, bottom, left, right]
        if own:
            lower, upper = _CLAMPS[activation]
            return Runner(
                lambda wb: depthwise_conv2d(x, wb[0], wb[1], stride, sides, lower, upper), (weight, bias), (x,)
            )
        symmetric = top == bottom and left == right
        padding = [top, left] if symmetric else [0, 0]
        attr, scalars, algorithm = _POST_OPS.get(activation, ("none", [], None))
        act = _ACTIVATIONS[activation]

        def left_as_it_is(wb: Weights) -> torch.Tensor:
            image = x if symmetric else F.pad(x, (left, right, top, bottom))
            if hardware.onednn_conv_available():
                return onednn_conv.conv_pointwise(
                    image, wb[0], wb[1], stride, padding, [1, 1], c, None, attr, scalars, algorithm
                )
            return act(F.conv2d(image, wb[0], wb[1], stride, padding, 1, c))

        return Runner(left_as_it_is, (weight, bias), (x,))

    return build


register("depthwise_conv2d", "left", lambda: True, _depthwise(own=False))
register("depthwise_conv2d", "fxopt", _core.depthwise_conv_vectorized, _depthwise(own=True))


def _pointwise(problem: Problem) -> Runner:
    """FusePointwiseConv's call. The query is a convolution's (ConvFusion::choice_shape, variant
    the activation, ",add", ",no_bias"), `left` what FuseConvActivationOneDnn makes of it."""
    o = _conv_operands(problem)
    lower, upper = _CLAMPS[o.activation]
    return Runner(
        lambda w: pointwise_conv2d(o.x, w[0], w[1], o.residual, lower, upper), (o.weight, o.bias), o.activations
    )


register("pointwise_conv2d", "left", lambda: True, _conv_left)
# Available where the float32 path runs (AVX2); a bfloat16 call on a CPU without AVX512-BF16
# runs ATen's convolution, as `left` would.
register("pointwise_conv2d", "fxopt", lambda: _core.pointwise_conv_vectorized(False), _pointwise)


def _own_conv(problem: Problem) -> Runner:
    """A convolution QuantizeConvsInt8 leaves in float (its query: ConvFusion::choice_shape in
    the float dtype) as FusePointwiseConv or FuseDepthwiseConv then runs it: the clamp in the
    call where the kernel takes the activation, the residual add in the call (1x1) or after it."""
    o = _conv_operands(problem)
    stride, padding, _, groups = o.geometry
    act = _ACTIVATIONS[o.activation]
    clamped = o.activation in _CLAMPS and (groups == 1 or o.residual is None)
    lower, upper = _CLAMPS[o.activation] if clamped else (None, None)

    def run(w: Weights) -> torch.Tensor:
        weight, bias = w
        if groups == 1:
            y = pointwise_conv2d(o.x, weight, bias, o.residual, lower, upper)
        else:
            sides = [padding[0], padding[0], padding[1], padding[1]]
            y = depthwise_conv2d(o.x, weight, bias, stride, sides, lower, upper)
            y = y if o.residual is None else y + o.residual
        return y if clamped else act(y)

    return Runner(run, (o.weight, o.bias), o.activations)


register("int8_conv2d", "float32_fxopt", lambda: _core.pointwise_conv_vectorized(False), _own_conv)
register("int8_conv2d", "bfloat16_fxopt", lambda: _core.pointwise_conv_vectorized(False), _own_conv)
register("int8_conv2d", "int8_fxopt", _core.int8_pointwise_conv_vectorized, int8_conv("fxopt"))
