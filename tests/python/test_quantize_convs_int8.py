"""QuantizeConvsInt8 on real CNNs (transformers' ResNet and MobileNetV2) in both dialects, its
runtime call against the arithmetic it stands for, and the `fast` preset with calibration.

The suite runs with static kernel choices (FXOPT_TUNING=static): every convolution the pass can
quantize is offered int8, so calibration alone decides which stay float. Whether int8 pays on a
CPU is the benchmark's question (bench/latency.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import fxopt
from fxopt import _core
from fxopt.optimization import (
    ChangePrecision, ConvWeightsChannelsLast, FuseBatchNormInConv, QuantizeConvsInt8, RemoveNoOps, compose,
)
from fxopt.optimization.hardware import onednn_bfloat16_available, onednn_conv_available
from fxopt.runtime import static_int8_conv
from fxopt.runtime.static_int8_conv import int8_conv2d, multiplied_weight, quantize_u8
from capped_cpu import run_capped_at_avx2
from norm_models import DIALECTS, check_reverse, count, outputs, tensor_states, tiny_mobilenet_v2, tiny_resnet, trace_vision
from fxopt.verification.verify import cosine_similarity

pytestmark = pytest.mark.skipif(
    not (static_int8_conv.available() and onednn_conv_available()),
    reason="this torch has no oneDNN int8 convolution",
)


needs_int8_here = pytest.mark.skipif(
    not static_int8_conv.exact_here(),
    reason="no int8 dot products here (VNNI): QuantizeConvsInt8 leaves every convolution float "
    "(test_without_int8_dot_products_every_convolution_stays_float)",
)


def int8_convs(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.target is int8_conv2d]


def conv_nodes(gm: torch.fx.GraphModule) -> int:
    return count(gm, torch.nn.Conv2d, torch.conv2d, torch.ops.aten.conv2d.default)


def stored(gm: torch.fx.GraphModule, path: str) -> torch.Tensor:
    """The tensor a get_attr node reads."""
    owner, _, name = path.rpartition(".")
    return getattr(gm.get_submodule(owner) if owner else gm, name)


def quantized_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scales = (w.abs().amax(dim=(1, 2, 3)) / 127).float()
    return torch.round(w / scales[:, None, None, None]).to(torch.int8), scales


def multiplied(values: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The float weight this CPU's int8 convolution multiplies: 63 levels where oneDNN's sums
    would saturate (no VNNI), the stored ones elsewhere."""
    exact_values, exact_scales = multiplied_weight(values, scales)
    return exact_values.float() * exact_scales[:, None, None, None]


def test_where_sums_saturate_the_multiplied_weight_keeps_63_levels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Channels beyond 63 levels are requantized to 63 (each within three quarters of its new
    step of the stored weight), the others kept as they are; where the sums do not saturate the
    stored tensors are the ones multiplied."""
    values = torch.tensor([[127, -64, 5, 0], [63, -20, 1, 2], [-90, 45, 30, -1]], dtype=torch.int8).view(3, 4, 1, 1)
    scales = torch.tensor([0.01, 0.02, 0.03])
    monkeypatch.setattr(static_int8_conv.dynamic_int8, "sums_saturate", lambda engine: False)
    assert multiplied_weight(values, scales) == (values, scales)
    monkeypatch.setattr(static_int8_conv.dynamic_int8, "sums_saturate", lambda engine: engine == "onednn")
    exact_values, exact_scales = multiplied_weight(values, scales)
    peaks = exact_values.abs().amax(dim=(1, 2, 3))
    assert exact_values.dtype == torch.int8 and peaks.tolist() == [63, 63, 63]
    assert torch.equal(exact_values[1], values[1]) and exact_scales[1] == scales[1]
    stored = values.float() * scales.view(-1, 1, 1, 1)
    error = (exact_values.float() * exact_scales.view(-1, 1, 1, 1) - stored).abs().amax(dim=(1, 2, 3))
    assert bool((error <= 0.75 * exact_scales + 1e-7).all()) and float(error[0]) > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quantize_u8_is_its_definition_in_the_inputs_layout(dtype: torch.dtype) -> None:
    x = (torch.randn(2, 8, 5, 7) * 3).to(dtype).contiguous(memory_format=torch.channels_last)
    x[0, 0, 0, :3] = torch.tensor([0.5, 1.5, 2.5]) * 0.25  # ties at scale 0.25
    q = quantize_u8(x, 0.25, 3)
    expected = torch.clamp(torch.round(x.float() * (1 / 0.25)) + 3, 0, 255).to(torch.uint8)
    assert q.dtype == torch.uint8 and q.stride() == x.stride()
    assert torch.equal(q, expected)
    assert q[0, 0, 0, :3].tolist() == [3, 5, 5]  # 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, then + 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("attr", "scalars", "activation"), [
    ("none", [], lambda y: y), ("relu", [], F.relu), ("hardtanh", [0.0, 6.0], F.relu6), ("swish", [], F.silu),
])  # fmt: skip
def test_int8_conv2d_computes_the_quantized_convolution(dtype, attr, scalars, activation) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    x = torch.randn(1, 8, 9, 9)
    w, b = torch.randn(12, 4, 3, 3) * 0.2, torch.randn(12)
    values, scales = quantized_weight(w)
    x_scale, zero = (float(x.max()) - float(x.min())) / 255, round(-float(x.min()) / ((float(x.max()) - float(x.min())) / 255))
    y = int8_conv2d(x.to(dtype), values, scales, b, [2, 2], [1, 1], [1, 1], 2, x_scale, zero, None, attr, scalars, None)
    # What it stands for: x rounded to its 256 levels, the weight to its int8 values.
    xq = (quantize_u8(x.to(dtype), x_scale, zero).float() - zero) * x_scale
    expected = activation(F.conv2d(xq, multiplied(values, scales), b, 2, 1, 1, 2))
    assert y.dtype == dtype and y.shape == expected.shape
    assert y.is_contiguous(memory_format=torch.channels_last)
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(y.float(), expected, atol=tolerance * float(expected.abs().max()), rtol=0)


def test_int8_conv2d_adds_into_a_copy_of_the_residual() -> None:
    torch.manual_seed(1)
    x, r = torch.randn(1, 8, 6, 6), torch.randn(1, 8, 6, 6)
    values, scales = quantized_weight(torch.randn(8, 8, 1, 1) * 0.3)
    kept = r.clone()
    y = int8_conv2d(x, values, scales, None, [1, 1], [0, 0], [1, 1], 1, 8 / 255, 128, r, "relu", [], None)
    xq = (quantize_u8(x, 8 / 255, 128).float() - 128) * (8 / 255)
    expected = F.relu(F.conv2d(xq, multiplied(values, scales)) + r)
    torch.testing.assert_close(y, expected, atol=1e-4, rtol=0)
    assert torch.equal(r, kept)  # the graph's value is not written
    unbatched = int8_conv2d(x[0], values, scales, None, [1, 1], [0, 0], [1, 1], 1, 8 / 255, 128, r[0], "relu", [], None)
    torch.testing.assert_close(unbatched, y[0])
    with pytest.raises(TypeError, match="int8 values"):
        int8_conv2d(x, values.float(), scales, None, [1, 1], [0, 0], [1, 1], 1, 0.1, 0, None, "none", [], None)


def test_int8_conv2d_adds_into_a_residual_that_dies_with_the_same_result() -> None:
    torch.manual_seed(1)
    x, r = torch.randn(1, 8, 6, 6), torch.randn(1, 8, 6, 6).contiguous(memory_format=torch.channels_last)
    values, scales = quantized_weight(torch.randn(8, 8, 1, 1) * 0.3)
    args = (values, scales, None, [1, 1], [0, 0], [1, 1], 1, 8 / 255, 128)
    copied = int8_conv2d(x, *args, r, "relu", [], None)
    dying = r.clone()
    assert torch.equal(int8_conv2d(x, *args, dying, "relu", [], None, True), copied)
    assert torch.equal(int8_conv2d(x[0], *args, r.clone()[0], "relu", [], None, True), copied[0])


def _one_by_one_operands(dtype: torch.dtype, channels: tuple[int, int], size: int, residual: bool):  # type: ignore[no-untyped-def]
    torch.manual_seed(6)
    cin, cout = channels
    x = (torch.randn(1, cin, size, size) * 2).to(dtype).contiguous(memory_format=torch.channels_last)
    values, scales = quantized_weight(torch.randn(cout, cin, 1, 1) * 0.1)
    r = torch.randn(1, cout, size, size).to(dtype).contiguous(memory_format=torch.channels_last) if residual else None
    return x, values, scales, torch.randn(cout), r


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("attr", "scalars", "residual"), [
    ("none", [], False), ("relu", [], True), ("hardtanh", [0.0, 6.0], False), ("none", [], True),
])  # fmt: skip
@pytest.mark.parametrize(("channels", "size"), [((64, 96), 9), ((18, 7), 5), ((3, 40), 1)])
def test_fxopts_int8_kernel_is_the_onednn_call(dtype, attr, scalars, residual, channels, size) -> None:  # type: ignore[no-untyped-def]
    """kernel="fxopt" runs fxopt's 1x1 kernel (where the CPU has AVX512-VNNI; oneDNN's call
    elsewhere): the same quantized arithmetic, exact integer sums, so its result is oneDNN's up
    to the last bits of the float32 scaling (and of bfloat16's rounding), and the definition's.
    Channel counts fill whole 32-channel blocks, part of one, and leave input channels that are
    no multiple of four; the residual is read, never written."""
    x, values, scales, bias, r = _one_by_one_operands(dtype, channels, size, residual)
    kept = None if r is None else r.clone()
    args = (values, scales, bias, [1, 1], [0, 0], [1, 1], 1, 6 / 255, 120, r, attr, scalars, None, False)
    own, onednn = int8_conv2d(x, *args, "fxopt"), int8_conv2d(x, *args, "onednn")
    assert own.dtype == dtype and own.shape == onednn.shape
    assert own.is_contiguous(memory_format=torch.channels_last)
    xq = (quantize_u8(x, 6 / 255, 120).float() - 120) * (6 / 255)
    expected = F.conv2d(xq, multiplied(values, scales), bias)
    expected = expected if r is None else expected + r.float()
    expected = {"none": expected, "relu": F.relu(expected), "hardtanh": F.relu6(expected)}[attr]
    tolerance = (1e-5 if dtype == torch.float32 else 8e-3) * float(expected.abs().max())
    torch.testing.assert_close(own.float(), onednn.float(), atol=tolerance, rtol=0)
    torch.testing.assert_close(own.float(), expected, atol=tolerance, rtol=0)
    assert r is None or torch.equal(r, kept)
    unbatched = int8_conv2d(x[0], *args[:9], None if r is None else r[0], *args[10:], "fxopt")
    assert torch.equal(unbatched, own[0])


def test_calls_fxopts_int8_kernel_does_not_take_run_on_onednn() -> None:
    """A 3x3 or strided convolution, or an activation the kernel has no clamp for, asked of
    fxopt's kernel, runs oneDNN's call: bit for bit its result. An unknown kernel is refused."""
    torch.manual_seed(7)
    x = torch.randn(1, 8, 6, 6)
    values, scales = quantized_weight(torch.randn(8, 8, 3, 3) * 0.2)
    one, one_scales = quantized_weight(torch.randn(8, 8, 1, 1) * 0.2)
    calls = [
        (values, scales, [1, 1], [1, 1], "relu", []),
        (one, one_scales, [2, 2], [0, 0], "relu", []),
        (one, one_scales, [1, 1], [0, 0], "swish", []),
    ]
    for w, s, stride, padding, attr, scalars in calls:
        args = (w, s, None, stride, padding, [1, 1], 1, 8 / 255, 128, None, attr, scalars, None, False)
        assert torch.equal(int8_conv2d(x, *args, "fxopt"), int8_conv2d(x, *args, "onednn"))
    with pytest.raises(ValueError, match="kernel 'mkl'"):
        int8_conv2d(x, *calls[0][:2], None, [1, 1], [1, 1], [1, 1], 1, 0.1, 0, None, "relu", [], None, False, "mkl")


@needs_int8_here
@pytest.mark.parametrize("dialect", DIALECTS)
def test_pinned_to_fxopts_int8_kernel_the_1x1_convolutions_run_there_and_reverse_exactly(dialect: str) -> None:
    """QuantizeConvsInt8 gives the 1x1 convolutions (stride 1; none, ReLU or ReLU6 after them)
    the call on fxopt's int8 kernel where the chooser picks it (pinned here; measured in a
    preset), the others oneDNN's; the outputs are the oneDNN graph's up to float32 rounding, and
    reverse restores the float graph bit for bit."""
    model = tiny_mobilenet_v2()
    torch.manual_seed(8)
    pixels, calibration = torch.randn(2, 3, 32, 32), torch.randn(2, 3, 32, 32)
    gm, args = trace_vision(model, pixels, dialect)
    compose(FuseBatchNormInConv(), ConvWeightsChannelsLast())(gm)
    expected, code, states = outputs(gm, *args), gm.code, tensor_states(gm)
    cal_args = trace_vision(model, calibration, dialect)[1]

    def quantized(pin: str, inplace: bool) -> tuple[QuantizeConvsInt8, torch.fx.GraphModule]:
        t = QuantizeConvsInt8(calibrate=True, min_cosine=0.99)
        with fxopt.tuning.pinned(int8_conv2d=pin):
            t.calibrate_on(cal_args)
            return t, compose(t, inplace=inplace)(gm)

    _, onednn = quantized("int8_onednn", inplace=False)
    t, own = quantized("int8_fxopt", inplace=True)
    assert own is gm
    kernels = [n.args[15] for n in int8_convs(own)]
    one_by_one = [
        n.args[1].target for n in int8_convs(own)
        if tuple(stored(own, n.args[1].target).shape[2:]) == (1, 1) and n.args[4] == [1, 1]
    ]  # fmt: skip
    # Without AVX512-VNNI the pinned kernel is not this CPU's: every call stays on oneDNN's.
    own_kernel = len(one_by_one) if _core.int8_pointwise_conv_vectorized() else 0
    assert one_by_one and kernels.count("fxopt") == own_kernel and "onednn" in kernels
    assert all(n.args[15] == "onednn" for n in int8_convs(onednn))
    for a, b in zip(outputs(own, *args), outputs(onednn, *args)):
        torch.testing.assert_close(a, b, atol=1e-4 * float(b.abs().max()), rtol=0)
    check_reverse(t, own, args, expected, code, states)


class _ReadAfterTheAdd(torch.nn.Module):
    """`r` is read by `a`, by the add `a`'s int8 call takes in, then by `b`: that call must add
    into a copy. `y` is read by nothing after `b`'s add: that call may add into it."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.a, self.b = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 1), torch.nn.Conv2d(8, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r = torch.relu(self.stem(x))
        y = torch.relu(self.a(r) + r)
        return self.b(r) + y


def _read_after_the_add(pixels: torch.Tensor, dialect: str) -> tuple[torch.fx.GraphModule, tuple[torch.Tensor]]:
    torch.manual_seed(5)
    model = _ReadAfterTheAdd().eval()
    mode = "export" if dialect == "export" else "symbolic"
    return fxopt.trace(model, example_inputs=(pixels,), mode=mode, dynamic=False), (pixels,)  # static: adds fuse


@needs_int8_here
@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("build", ["resnet", "read_after"])
def test_a_residual_nothing_reads_after_its_add_is_added_into_in_place(build: str, dialect: str) -> None:
    """A bottleneck's input is read by its first convolution, then by the add its last one takes
    in: nothing reads it after that call, which adds into it instead of a copy. Every other
    residual (one read later, the graph's input) is copied; the outputs are the copying graph's,
    bit for bit, and the caller's input is never written."""
    torch.manual_seed(4)
    pixels, calibration = torch.randn(2, 3, 32, 32), torch.randn(2, 3, 32, 32)
    if build == "resnet":
        model = tiny_resnet()
        gm, args = trace_vision(model, pixels, dialect)
        calibration_args = trace_vision(model, calibration, dialect)[1]
    else:
        gm, args = _read_after_the_add(pixels, dialect)
        calibration_args = (calibration,)
    step = QuantizeConvsInt8(calibrate=True, min_cosine=0.9)
    step.calibrate_on(calibration_args)
    out = compose(RemoveNoOps(), FuseBatchNormInConv(), ConvWeightsChannelsLast(), step, inplace=False)(gm)
    order = {n: i for i, n in enumerate(out.graph.nodes)}
    with_residual = [n for n in int8_convs(out) if isinstance(n.args[10], torch.fx.Node)]
    for call in with_residual:  # never a value read later, nor the caller's
        residual = call.args[10]
        if any(order[user] > order[call] for user in residual.users) or residual.op == "placeholder":
            assert call.args[14] is False, call.name
    assert any(call.args[14] is True for call in with_residual)
    if build == "read_after":
        assert [call.args[14] for call in with_residual] == [False, True]

    copying = copy.deepcopy(out)
    for node in int8_convs(copying):
        node.args = (*node.args[:14], False, *node.args[15:])
    copying.recompile()
    given = args[0].clone()  # the graph's input: the images, or the embedder's features
    assert all(torch.equal(a, b) for a, b in zip(outputs(out, *args), outputs(copying, *args)))
    assert torch.equal(args[0], given)


@needs_int8_here
@pytest.mark.parametrize("build", [tiny_resnet, tiny_mobilenet_v2])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_calibrated_convolutions_go_int8_within_the_bound_and_reverse_exactly(build, dialect: str) -> None:  # type: ignore[no-untyped-def]
    model = build()
    torch.manual_seed(2)
    pixels, calibration, held_out = (torch.randn(2, 3, 32, 32) for _ in range(3))
    gm, args = trace_vision(model, pixels, dialect)
    compose(FuseBatchNormInConv(), ConvWeightsChannelsLast())(gm)  # as in the presets
    expected, code, states = outputs(gm, *args), gm.code, tensor_states(gm)
    convs, attributes = conv_nodes(gm), set(dict(gm.named_buffers())) | set(dict(gm.named_parameters()))
    cal_args = trace_vision(model, calibration, dialect)[1]
    held_args = trace_vision(model, held_out, dialect)[1]
    t = QuantizeConvsInt8(calibrate=True, min_cosine=0.999)
    copy_in = copy.deepcopy(gm)
    with fxopt.tuning.pinned(int8_conv2d="int8_onednn"):  # what goes int8 is accuracy's call alone
        t.calibrate_on(cal_args, [held_args])
        out = compose(t, inplace=False)(gm)
    assert out is not gm and gm.code == code  # inplace=False leaves the input alone
    calls = int8_convs(out)
    assert len(calls) == len(t.report.changed) > 0
    assert len(calls) + conv_nodes(out) == convs  # each convolution int8 or kept in float
    assert len(t.input_scales) == len(calls)
    assert all(0 < scale and 0 <= zero <= 255 for scale, zero in t.input_scales.values())
    if build is tiny_resnet:  # a bottleneck's residual add and ReLU run inside the int8 call
        assert any(n.args[10] is not None and n.args[11] == "relu" for n in calls)
    # The bound holds where it was calibrated and checked; on other inputs it holds statistically
    # (the scales are static: values beyond the calibration's range are clipped).
    for inputs, bound in ((cal_args, 0.999), (held_args, 0.999), (args, 0.99)):
        got, want = outputs(out, *inputs), outputs(copy_in, *inputs)
        assert not all(torch.equal(a, b) for a, b in zip(got, want))  # int8: not the float result
        assert min(cosine_similarity(b, a) for a, b in zip(got, want) if a.is_floating_point()) >= bound
    with fxopt.tuning.pinned(int8_conv2d="int8_onednn"):
        t(gm)  # in place, then back
    check_reverse(t, gm, args, expected, code, states)
    assert set(dict(gm.named_buffers())) | set(dict(gm.named_parameters())) == attributes


def test_lowered_to_bfloat16_the_int8_calls_stay_in_bfloat16_with_float32_scales() -> None:
    if not onednn_bfloat16_available():
        pytest.skip("this CPU has no native bfloat16 convolution")
    model = tiny_resnet()
    pixels = torch.randn(1, 3, 32, 32)
    gm, args = trace_vision(model, pixels, "export")
    step = QuantizeConvsInt8(calibrate=True, min_cosine=0.99, compare_with=torch.bfloat16)
    step.calibrate_on(args)
    out = compose(FuseBatchNormInConv(), ConvWeightsChannelsLast(), step, ChangePrecision(torch.bfloat16), inplace=False)(gm)
    calls = int8_convs(out)
    assert calls
    casts = [n for n in out.graph.nodes if n.target in (torch.ops.aten._to_copy.default, torch.ops.aten.to.dtype)]
    for call in calls:  # no cast between consecutive int8 convolutions
        assert all(user.target is int8_conv2d or user not in casts for user in call.users)
        assert stored(out, call.args[2].target).dtype == torch.float32  # scales
        assert stored(out, call.args[1].target).dtype == torch.int8
    (y,) = [t for t in outputs(out, *args) if t.dim() == 4][:1]
    assert y.dtype == torch.float32  # the graph's outputs keep their dtype
    reference = [t for t in outputs(gm, *args) if t.dim() == 4][0]
    assert cosine_similarity(reference, y) >= 0.99


@needs_int8_here
def test_fast_with_calibration_quantizes_resnet_convolutions() -> None:
    model = tiny_resnet()
    torch.manual_seed(3)
    pixels, calibration, held_out = (torch.randn(1, 3, 32, 32) for _ in range(3))
    fast = fxopt.optimize(model, "fast", example_inputs=(pixels,), calibration=(calibration,), held_out=[(held_out,)])
    assert int8_convs(fast)
    for inputs in ((pixels,), (held_out,)):
        report = fxopt.verify(model, fast, inputs)
        assert report.min_cosine is not None and report.min_cosine >= 0.999
    without = fxopt.optimize(model, "fast", example_inputs=(pixels,))
    assert not int8_convs(without)


@needs_int8_here
def test_int8_graph_copies_saves_loads_and_reverses(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The graph holds plain tensors (int8 values, float32 scales) and calls a function by name:
    it deep-copies and round-trips through fxopt.save / fxopt.load, packing again after."""
    model = tiny_resnet()
    pixels = torch.randn(1, 3, 32, 32)
    gm, args = trace_vision(model, pixels, "export")
    step = QuantizeConvsInt8(calibrate=True, min_cosine=0.99)
    step.calibrate_on(args)
    pipeline = compose(FuseBatchNormInConv(), ConvWeightsChannelsLast(), step, inplace=False)
    out = pipeline(gm)
    assert int8_convs(out)
    expected = outputs(out, *args)
    fxopt.save(out, tmp_path / "int8.fxopt")
    for loaded in (copy.deepcopy(out), fxopt.load(tmp_path / "int8.fxopt")):
        assert len(int8_convs(loaded)) == len(int8_convs(out))
        assert all(torch.equal(a, b) for a, b in zip(outputs(loaded, *args), expected))
        assert all(torch.equal(a, b) for a, b in zip(outputs(pipeline(loaded, reverse=True), *args), outputs(gm, *args)))


def test_without_int8_dot_products_every_convolution_stays_float() -> None:
    """On a CPU without VNNI (here: capped at AVX2) oneDNN's int8 convolution is never a
    candidate: calibrated QuantizeConvsInt8 leaves every convolution float, saying why, and
    `fast` with calibration gives the float graph's outputs."""
    script = (
        "import torch, fxopt\n"
        "from fxopt.runtime import static_int8_conv\n"
        "from fxopt.optimization import QuantizeConvsInt8\n"
        "import sys; sys.path.insert(0, " + repr(str(Path(__file__).parent)) + ")\n"
        "from norm_models import tiny_resnet, trace_vision\n"
        "assert static_int8_conv.available() and not static_int8_conv.exact_here()\n"
        "model = tiny_resnet()\n"
        "pixels = torch.randn(1, 3, 32, 32)\n"
        "gm, args = trace_vision(model, pixels, 'export')\n"
        "step = QuantizeConvsInt8(calibrate=True, min_cosine=0.99)\n"
        "step.calibrate_on(args)\n"
        "out = step(gm)\n"
        "assert not step.report.changed and step.report.skipped\n"
        "assert not [n for n in out.graph.nodes if n.target is static_int8_conv.int8_conv2d]\n"
        "assert {c.picked for c in step.report.choices} <= {'float32', 'float32_fxopt'}, step.report.choices\n"
        "print('ok')\n"
    )
    run_capped_at_avx2(script)


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="compares with"):
        QuantizeConvsInt8(compare_with=torch.float16)
    gm, _ = trace_vision(tiny_resnet(), torch.randn(1, 3, 32, 32), "export")
    t = QuantizeConvsInt8({"no_such_node": (0.1, 0)})
    out = compose(t, inplace=False)(gm)
    assert not int8_convs(out) and not t.report.changed
    assert t.report.skipped and all("no calibrated input scale" in why for _, why in t.report.skipped)
