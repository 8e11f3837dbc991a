"""The candidate kernels a pass may ask about, each runnable alone on a problem's shapes.

A kernel is registered under the op the engine names in its query (`linear`, `int8_linear`) and
the candidate name the pass uses. `available` says whether this torch and CPU run it natively: a
kernel that cannot win here (an int8 matmul without VNNI/AMX, say) is never timed or picked.
`build` returns a `Runner`: the kernel once on random operands of the problem's shape, dtype and
variant, which is all the timing needs, with its weights apart so that the timing can stream
copies of them as a decoding step does (`streams_weights`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from typing import Any

import torch
import torch.nn.functional as F

from ..engine.tensor_ops import TorchTensorOps
from ..optimization import hardware
from ..runtime import dynamic_int8, onednn_conv, onednn_linear, per_token_int8, static_int8_conv

_WEIGHTS = TorchTensorOps()
"""Weights are quantized exactly as the passes have them quantized (the engine's TensorOps)."""


_BLOCK = 1 << 16


def random_operand(*shape: int, generator: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    """Normal float32 values of `shape` for a timed candidate: one block drawn, then repeated.

    A kernel's speed does not depend on which (normal, non-denormal) values it multiplies, and
    drawing every value of GPT-2's 768x50257 head took 0.4 s of its 2.6 s of tuning.
    """
    count = math.prod(shape)
    block = torch.randn(min(count, _BLOCK), generator=generator) * scale
    return block.repeat(-(-count // block.numel()))[:count].view(shape)


@dataclass(frozen=True)
class Problem:
    """What one query asks about: the op, its sizes (no symbolic ones left), dtype and variant."""

    op: str
    shape: tuple[int, ...]
    dtype: str
    variant: str


STREAMED_TOKENS = 16
"""Linear problems of at most this many tokens stream their weights: at so few rows a call is
reading its weight, and in a model that weight comes from memory (a decoding step reads every
weight once, more bytes than any cache holds)."""

LINEAR_OPS = ("linear", "int8_linear", "int8_weight_only", "int4_weight_only")
"""Ops whose query shape is (tokens, in_features, out_features)."""


def streams_weights(problem: Problem) -> bool:
    return problem.op in LINEAR_OPS and problem.shape[0] <= STREAMED_TOKENS


TIMED_WEIGHT_ELEMENTS = 1 << 22
"""A Linear problem of many tokens is timed on at most this many weight elements (16 MiB in
float32), its output features cut to fit. Past a few thousand output features a Linear's time
grows at one rate per candidate, so the cut keeps the verdict: measured on a Zen 4 core at 128
tokens x 768 input features, 50257 output features (GPT-2's head) against 5440: float32 oneDNN /
ATen 0.53 / 0.62, bfloat16 0.84 / 0.83, int8 (oneDNN, fbgemm, per token against bfloat16) 0.49,
0.64, 0.83 / 0.58, 0.60, 0.70, the same pick in each. Timing the whole head took 1.3 of GPT-2's
1.6 s of tuning under `default` (a float32 call takes 80-210 ms), 2.4 s under `fast`."""


MIN_TIMED_FEATURES = 4096
"""The fewest output features a cut problem keeps, whatever its input features: at 2048 the
int8 kernels' order already differed from the head's (fbgemm ahead of oneDNN)."""


def timed_problem(problem: Problem) -> Problem:
    """What measuring `problem` times: itself, or for a compute-bound Linear over
    TIMED_WEIGHT_ELEMENTS the same with fewer output features. The cut keeps the remainder of
    the features modulo 64, so an unaligned width (50257) stays unaligned for the kernels."""
    if problem.op not in LINEAR_OPS or streams_weights(problem):
        return problem
    tokens, in_features, out_features = problem.shape
    if in_features * out_features <= TIMED_WEIGHT_ELEMENTS:
        return problem
    tail = out_features % 64
    cut = tail + max(MIN_TIMED_FEATURES, (TIMED_WEIGHT_ELEMENTS // in_features - tail) // 64 * 64)
    return replace(problem, shape=(tokens, in_features, min(cut, out_features)))


Weights = tuple[Any, ...]
"""A candidate's weights: tensors, None for an absent bias (Any: each kernel unpacks its own)."""


@dataclass(frozen=True)
class Runner:
    """One candidate on one problem: `run(weights)`, once per call of the runner. `weights` are
    the tensors a model reads from memory at each call; `activations`, where given, those that
    come hot from the op before, which timing reads after its eviction (measure.py): a
    convolution's input and residual, hundreds of kilobytes at MobileNetV2's early sizes, that a
    forward finds in the core's cache. `copy` gives a runner on copies of the weights, so that
    timing can cycle through more bytes than the caches hold."""

    run: Callable[[Weights], object]
    weights: Weights
    activations: tuple[torch.Tensor | None, ...] = ()

    def __call__(self) -> object:
        return self.run(self.weights)

    @property
    def weight_bytes(self) -> int:
        return sum(w.untyped_storage().nbytes() for w in self.weights if w is not None)

    def copy(self) -> Runner:
        return Runner(self.run, tuple(None if w is None else w.clone() for w in self.weights), self.activations)


Builder = Callable[[Problem], Runner]


@dataclass(frozen=True)
class Kernel:
    available: Callable[[], bool]
    build: Builder


KERNELS: dict[str, dict[str, Kernel]] = {}


def register(op: str, name: str, available: Callable[[], bool], build: Builder) -> None:
    KERNELS.setdefault(op, {})[name] = Kernel(available, build)


def kernel(op: str, name: str) -> Kernel | None:
    return KERNELS.get(op, {}).get(name)


def _always() -> bool:
    return True


_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "none": lambda x: x,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "hardswish": F.hardswish,
    "relu6": F.relu6,
}

# oneDNN's post-op spelling of each activation: (attr, scalars, algorithm).
_POST_OPS: dict[str, tuple[str, list[float], str | None]] = {
    "gelu": ("gelu", [], "none"),
    "gelu_tanh": ("gelu", [], "tanh"),
    "relu6": ("hardtanh", [0.0, 6.0], None),
    "silu": ("swish", [], None),
    **{name: (name, [], None) for name in ("relu", "sigmoid", "tanh", "hardswish")},
}


@dataclass(frozen=True)
class _LinearOperands:
    x: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor | None
    activation: str
    outliers: int
    """Input channels an int8 Linear leaves to a float product (QuantizeLinearsInt8's option)."""


def operands_released() -> None:
    """Forgets the operands the candidates of the last query shared (`_linear_operands`,
    `_conv_operands`): the chooser calls it once that query is timed."""
    _linear_operands.cache_clear()
    _conv_operands.cache_clear()


# The candidates of one query run on the same operands (their timing evicts what a call leaves
# in the core's cache, see measure.py): drawn once, and a weight oneDNN packs is packed once for
# its fused and plain candidates. Drawing them per candidate took 0.08 s of ResNet-50's tuning.
@lru_cache(maxsize=1)
def _linear_operands(problem: Problem) -> _LinearOperands:
    """The variant: the activation, then ",no_bias" and ",outliers=<count>" where they apply."""
    tokens, in_features, out_features = problem.shape
    dtype = getattr(torch, problem.dtype)
    activation, *flags = problem.variant.split(",")
    outliers = next((int(flag.removeprefix("outliers=")) for flag in flags if flag.startswith("outliers=")), 0)
    generator = torch.Generator().manual_seed(0)
    return _LinearOperands(
        random_operand(tokens, in_features, generator=generator).to(dtype),
        random_operand(out_features, in_features, generator=generator, scale=in_features**-0.5).to(dtype),
        None if "no_bias" in flags else random_operand(out_features, generator=generator).to(dtype),
        activation or "none",
        outliers,
    )


def _aten_linear(problem: Problem) -> Runner:
    o = _linear_operands(problem)
    act = _ACTIVATIONS[o.activation]
    return Runner(lambda w: act(F.linear(o.x, *w)), (o.weight, o.bias))


def _onednn_linear(fused: bool) -> Builder:
    def build(problem: Problem) -> Runner:
        o = _linear_operands(problem)
        linear = onednn_linear.linear_pointwise  # what the graph runs: the weight packed once
        fused_here = fused and o.activation != "none"
        attr, scalars, algorithm = _POST_OPS[o.activation] if fused_here else ("none", [], None)
        act = (lambda y: y) if fused_here else _ACTIVATIONS[o.activation]
        return Runner(lambda w: act(linear(o.x, w[0], w[1], attr, scalars, algorithm)), (o.weight, o.bias))

    return build


def _int8_weights(kernel: str, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`weight` quantized as QuantizeLinearsInt8 quantizes it for `kernel`: int8 rows and their
    scales (the rows transposed for `_int_mm`)."""
    if kernel != "int8_per_token":
        return _WEIGHTS.quantize_rows_int8(weight, dynamic_int8.weight_max(kernel.removeprefix("int8_")))
    values, scales = _WEIGHTS.quantize_rows_int8(weight)
    return values.t().contiguous(), scales


def _int8_apply(
    kernel: str,
    x: torch.Tensor,
    values: torch.Tensor,
    scales: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str = "none",
    outliers: list[int] | None = None,
    outlier_weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """The Linear with `_int8_weights`' values, the activations quantized at run time as the
    graph quantizes them, in x's dtype; the per-token kernel applies `activation` (the packed
    ones leave it to the caller)."""
    if kernel != "int8_per_token":
        engine = kernel.removeprefix("int8_")
        return dynamic_int8.dynamic_int8_linear(x, values, scales, bias, engine, outliers, outlier_weight)
    return per_token_int8.per_token_int8_linear(x, values, scales, bias, activation, outliers, outlier_weight)


def _with_outliers(
    kernel: str, weight: torch.Tensor, outliers: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor, list[int] | None, torch.Tensor | None]:
    """`_int8_weights` of `weight` with its columns for `outliers` zeroed (as QuantizeLinearsInt8
    stores them), the channels and the float weight's columns for them, transposed."""
    if not outliers:
        return (*_int8_weights(kernel, weight), None, None)
    channels = list(outliers)
    kept = torch.ones(weight.shape[1], dtype=weight.dtype)
    kept[channels] = 0
    return (*_int8_weights(kernel, weight * kept), channels, weight[:, channels].t().float().contiguous())


def int8_linear(
    kernel: str, weight: torch.Tensor, bias: torch.Tensor | None, outliers: Sequence[int] = ()
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The Linear QuantizeLinearsInt8 makes of `weight` and `bias` with `kernel`
    (cpp/passes/quantize_linears_int8.h), as a function of x: the weight quantized as the pass
    quantizes it, the activations at run time as the graph does, the input channels `outliers`
    left to their float product (the pass's option of that name).
    Calibration runs it to see the error each Linear will have; timing runs it to see its
    speed."""
    values, scales, channels, outlier_weight = _with_outliers(kernel, weight, outliers)
    return lambda x: _int8_apply(kernel, x, values, scales, bias, "none", channels, outlier_weight)


def _int8_kernel(kernel: str) -> Builder:
    """`kernel` on float32 weights, on activations of the problem's dtype (a lowered graph's
    bfloat16: the packed engines cast inside the call, the per-token kernel reads it as it is),
    with the problem's activation: applied by the per-token kernel, after the packed ones."""

    def build(problem: Problem) -> Runner:
        o = _linear_operands(replace(problem, dtype="float32"))
        # With as many outlier channels as the Linear has (which ones does not change the time).
        values, scales, channels, outlier_weight = _with_outliers(kernel, o.weight, range(o.outliers))
        x = o.x.to(getattr(torch, problem.dtype))
        fused = kernel == "int8_per_token"
        activation, act = (o.activation, _ACTIVATIONS["none"]) if fused else ("none", _ACTIVATIONS[o.activation])
        return Runner(
            lambda w: act(_int8_apply(kernel, x, w[0], w[1], w[2], activation, channels, outlier_weight)),
            (values, scales, o.bias),
        )

    return build


def _linear_left(problem: Problem) -> Runner:
    """The Linear an int8 query leaves as it is, as the oneDNN fusion that follows would run it
    (its activation fused) where this torch has oneDNN's linear, else in ATen."""
    if hardware.onednn_linear_available():
        return _onednn_linear(fused=True)(problem)
    return _aten_linear(problem)


def _float32_linear(problem: Problem) -> Runner:
    """The Linear a weight-only query starts from: float32, whatever the kernel's activations."""
    return _aten_linear(replace(problem, dtype="float32"))


def _int8_weight_only(problem: Problem) -> Runner:
    """The chain QuantizeLinearsWeightOnly emits for 8 bits (its casts included), in ATen."""
    o = _linear_operands(replace(problem, dtype="float32"))
    activations = getattr(torch, problem.dtype)
    values, scales = _WEIGHTS.quantize_rows_int8(o.weight)

    def run(w: Weights) -> object:
        values, scales, bias = w
        y = torch.ops.aten._weight_int8pack_mm(o.x.to(activations), values, scales).float()
        return y if bias is None else y + bias

    return Runner(run, (values, scales.to(activations), o.bias))


WHOLE_SHAPE_OPS = ("conv2d", "int8_conv2d", "depthwise_conv2d", "pointwise_conv2d")
"""Ops whose query shape lists every size of their input, not a token count (-1) and the rest."""


@dataclass(frozen=True)
class _ConvOperands:
    x: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor | None
    residual: torch.Tensor | None
    geometry: tuple[list[int], list[int], list[int], int]  # stride, padding, dilation, groups
    activation: str

    @property
    def activations(self) -> tuple[torch.Tensor | None, ...]:
        return (self.x, self.residual)


@lru_cache(maxsize=1)
def _conv_operands(problem: Problem) -> _ConvOperands:
    """Query shape (cpp/passes/fuse_conv_activation_onednn.cc): the input's N, C, H, W, the
    output channels, kernel height and width, stride, padding, dilation (2 each) and groups;
    variant: the activation, then ",add" and ",no_bias" where they apply (",owned": see
    `_int8_conv`). Channels-last
    tensors, as the graph has them after ConvWeightsChannelsLast."""
    n, c, h, w, out, kh, kw, sh, sw, ph, pw, dh, dw, groups = problem.shape
    activation, *flags = problem.variant.split(",")
    dtype = getattr(torch, problem.dtype)
    generator = torch.Generator().manual_seed(0)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        t = random_operand(*shape, generator=generator, scale=scale).to(dtype)
        return t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t

    x = randn(n, c, h, w)
    weight = randn(out, c // groups, kh, kw, scale=(c // groups * kh * kw) ** -0.5)
    geometry = ([sh, sw], [ph, pw], [dh, dw], groups)
    out_h, out_w = (
        (size + 2 * p - d * (k - 1) - 1) // s + 1 for size, p, d, k, s in ((h, ph, dh, kh, sh), (w, pw, dw, kw, sw))
    )
    return _ConvOperands(
        x, weight, None if "no_bias" in flags else randn(out), randn(n, out, out_h, out_w) if "add" in flags else None,
        geometry, activation,
    )  # fmt: skip


def _conv(fused: bool | None) -> Builder:
    """ATen's convolution (fused None), oneDNN's packed one with the add and activation after it
    (False) or in the same call (True)."""

    def build(problem: Problem) -> Runner:
        o = _conv_operands(problem)
        act = _ACTIVATIONS[o.activation]
        stride, padding, dilation, groups = o.geometry
        if fused:
            attr, scalars, algorithm = _POST_OPS.get(o.activation, ("none", [], None))

            def fused_conv(w: Weights) -> torch.Tensor:
                weight, bias = w
                return onednn_conv.conv_pointwise(
                    o.x, weight, bias, stride, padding, dilation, groups, o.residual, attr, scalars, algorithm
                )

            return Runner(fused_conv, (o.weight, o.bias), o.activations)

        def conv(w: Weights) -> torch.Tensor:
            weight, bias = w
            if fused is None:
                return F.conv2d(o.x, weight, bias, stride, padding, dilation, groups)
            return onednn_conv.conv_pointwise(
                o.x, weight, bias, stride, padding, dilation, groups, None, "none", [], None
            )

        return Runner(
            lambda w: act(conv(w) if o.residual is None else conv(w) + o.residual), (o.weight, o.bias), o.activations
        )

    return build


def _conv_left(problem: Problem) -> Runner:
    """A convolution as FuseConvActivationOneDnn runs it (ATen's where torch has no oneDNN
    convolution): one QuantizeConvsInt8 leaves in float, or FusePointwiseConv does."""
    return _conv(fused=True if hardware.onednn_conv_available() else None)(problem)


def int8_conv(kernel: str) -> Builder:
    """QuantizeConvsInt8's call on `kernel` (static_int8_conv.KERNELS): the input quantized to
    uint8 at run time, the weight int8 per output channel, the add and the activation in the
    same call."""
    return partial(_int8_conv, kernel)


def _int8_conv(kernel: str, problem: Problem) -> Runner:
    o = _conv_operands(problem)
    values, scales = static_int8_conv.quantize_weight(o.weight)
    bias = None if o.bias is None else o.bias.float()
    x_scale, zero_point = static_int8_conv.input_quantization(float(o.x.min()), float(o.x.max())) or (1.0, 0)
    attr, scalars, algorithm = _POST_OPS.get(o.activation, ("none", [], None))
    owned = "owned" in problem.variant.split(",")  # the call adds into the residual, no copy

    def run(w: Weights) -> torch.Tensor:
        values, scales, bias = w
        return static_int8_conv.int8_conv2d(
            o.x, values, scales, bias, *o.geometry, x_scale, zero_point, o.residual, attr, scalars, algorithm, owned,
            kernel,
        )  # fmt: skip

    return Runner(run, (values, scales, bias), o.activations)


INT4_GROUP_SIZE = 32
"""int4 candidates are timed with this many columns per scale (the decode-int4 preset's): the
query names the Linear's shape, not the pass's group size."""


def _int4_weight_only(problem: Problem) -> Runner:
    """The chain QuantizeLinearsWeightOnly emits for 4 bits with ATen's kernel (casts included)."""
    o = _linear_operands(replace(problem, dtype="float32"))
    activations = getattr(torch, problem.dtype)
    packed, scales_and_zeros = _WEIGHTS.quantize_groups_int4(o.weight, INT4_GROUP_SIZE)

    def run(w: Weights) -> object:
        packed, scales_and_zeros, bias = w
        x = o.x.to(activations)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, INT4_GROUP_SIZE, scales_and_zeros).float()
        return y if bias is None else y + bias

    return Runner(run, (packed, scales_and_zeros.to(activations), o.bias))


def _has_int4_weight_kernel() -> bool:
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")


def _has_int8_weight_kernel() -> bool:
    return hasattr(torch.ops.aten, "_weight_int8pack_mm")


register("linear", "aten", _always, _aten_linear)
register("linear", "onednn", hardware.onednn_linear_available, _onednn_linear(fused=False))
register("linear", "onednn_fused", hardware.onednn_linear_available, _onednn_linear(fused=True))
register("conv2d", "aten", _always, _conv(fused=None))
register("conv2d", "onednn", hardware.onednn_conv_available, _conv(fused=False))
register("conv2d", "onednn_fused", hardware.onednn_conv_available, _conv(fused=True))
register("int8_conv2d", "float32", _always, _conv_left)
register("int8_conv2d", "bfloat16", _always, _conv_left)  # the convolution left to a bfloat16 lowering
register("int8_conv2d", "int8_onednn", static_int8_conv.exact_here, int8_conv("onednn"))
register("int8_linear", "float32", _always, _linear_left)
register("int8_linear", "bfloat16", _always, _linear_left)  # the Linear left to a bfloat16 lowering
register("int8_linear", "int8_per_token", per_token_int8.available, _int8_kernel("int8_per_token"))
for _engine in dynamic_int8.ENGINES:
    _name = f"int8_{_engine}"
    register("int8_linear", _name, partial(dynamic_int8.available, _engine), _int8_kernel(_name))
register("int8_weight_only", "float32", _always, _float32_linear)
register("int8_weight_only", "int8_weight_only", _has_int8_weight_kernel, _int8_weight_only)
register("int4_weight_only", "float32", _always, _float32_linear)
register("int4_weight_only", "int4_weight_only", _has_int4_weight_kernel, _int4_weight_only)
