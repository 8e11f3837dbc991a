"""FusePointwiseConv on transformers' MobileNetV2, in float32 and lowered to bfloat16, as
fxopt.trace and torch.export record it: every 1x1 convolution, with the residual add after a
projection and the ReLU6 after an expansion, becomes one call of fxopt's kernel with the graph's
outputs, the presets run it, reverse restores the graph exactly; the runtime function runs
ATen's convolution for what its kernel does not take."""

from __future__ import annotations

import copy
import operator
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import fxopt
from fxopt import _core
from fxopt.optimization import (
    ChangePrecision,
    FoldPadInConv,
    FuseBatchNormInConv,
    FusePointwiseConv,
    compose,
    presets,
)
from fxopt.runtime.pointwise_conv import pointwise_conv2d
from norm_models import assert_outputs_close, check_reverse, count, outputs, tensor_states, tiny_resnet, trace_vision
from test_fold_pad_in_conv import CONVS, tf_mobilenet_v2, traced
from test_onednn_conv import _pickled, _save_load

KERNEL = _core.pointwise_conv_vectorized(False)
"""Whether this CPU runs the kernel's vector paths (AVX2); elsewhere the pass leaves the graph."""

ADDS = (operator.add, torch.add, torch.ops.aten.add.Tensor)


def pointwise(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is pointwise_conv2d]


def is_pointwise(node: torch.fx.Node, gm: torch.fx.GraphModule) -> bool:
    weight = node.args[1]
    shape = gm.get_parameter(weight.target).shape if isinstance(weight, torch.fx.Node) else None
    geometry = list(node.args[3:7]) + [1] * (7 - len(node.args))
    return shape is not None and tuple(shape[2:]) == (1, 1) and geometry[0] in (1, [1, 1]) and geometry[3] == 1


def cosines(got: list[torch.Tensor], expected: list[torch.Tensor]) -> list[float]:
    return [float(F.cosine_similarity(g.double().flatten(), e.double().flatten(), 0)) for g, e in zip(got, expected)]


def mobilenet(
    dialect: str, dtype: torch.dtype, batch: int = 1
) -> tuple[torch.fx.GraphModule, torch.Tensor, list[torch.Tensor]]:
    """The graph as the presets leave it for the pass (batch norms and pads folded, then the
    lowering to `dtype`), its input and the float32 model's outputs on it. A batch of 2 or more
    is traced as a symbol."""
    model = tf_mobilenet_v2()
    pixels = torch.randn(batch, 3, 32, 32)
    gm = traced(model, pixels, dialect)
    lowering = [ChangePrecision(dtype)] if dtype != torch.float32 else []
    compose(FuseBatchNormInConv(), FoldPadInConv(), *lowering, inplace=True)(gm)
    return gm, pixels, outputs(model, pixels)


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dialect", ["dynamo", "export"])
def test_1x1_convolutions_their_adds_and_relu6_become_one_call(dialect: str, dtype: torch.dtype, batch: int) -> None:
    # At a symbolic batch the residual's shape equals the convolution's by its symbol: the add is
    # taken in as at batch 1 (it was left out while symbolic sizes all read -1).
    gm, pixels, float32 = mobilenet(dialect, dtype, batch)
    args: tuple[Any, ...] = (pixels,)
    expected, code, states = outputs(gm, *args), gm.code, tensor_states(gm)
    convs = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in CONVS]
    ones = [n.name for n in convs if is_pointwise(n, gm)]
    residuals = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in ADDS and set(n.args) & set(convs)]
    assert 0 < len(ones) < len(convs) and residuals

    t = FusePointwiseConv()
    t(gm)
    if not KERNEL:
        assert t.report.changed == [] and pointwise(gm) == []
        return
    assert len(t.report.changed) == len(ones) == len(pointwise(gm))
    assert count(gm, *CONVS) == len(convs) - len(ones)
    calls = pointwise(gm)
    assert sum(call.args[3] is not None for call in calls) == len(residuals)  # the adds taken in
    assert any(call.args[4:] == (0.0, 6.0) for call in calls)  # ReLU6 after an expansion
    skipped = dict(t.report.skipped)
    assert all("not a 1x1 convolution" in skipped[n.name] for n in convs if n.name not in ones)
    got = outputs(gm, *args)
    assert all(g.dtype == e.dtype for g, e in zip(got, expected))
    if dtype == torch.float32:  # the same products summed in another order
        scale = max(float(e.abs().max()) for e in expected)
        assert_outputs_close(got, expected, atol=1e-5 * scale, rtol=1e-5)
    else:
        # Each call rounds its float32 sums to bfloat16 once, where ATen's bfloat16 convolution
        # rounds its own way; over 34 calls the two drift apart by a few bfloat16 steps (cosine
        # 0.99982 here), each as close to the float32 model as the other (0.99968 both).
        assert min(cosines(got, expected)) > 0.9995
        assert min(cosines(got, float32)) > min(cosines(expected, float32)) - 1e-4
    check_reverse(t, gm, args, expected, code, states)


@pytest.mark.parametrize("preset", ["default", "fast"])
def test_the_presets_run_it_before_the_onednn_convolutions(preset: str) -> None:
    specs = presets.preset_passes(preset)
    assert specs.index("FusePointwiseConv") > specs.index("FuseDepthwiseConv")
    if "FuseConvActivationOneDnn" in specs:
        assert specs.index("FusePointwiseConv") < specs.index("FuseConvActivationOneDnn")
    assert "FusePointwiseConv" not in presets.preset_passes(preset, "meta")
    model = tf_mobilenet_v2()
    pixels = torch.randn(1, 3, 32, 32)
    optimized = fxopt.optimize(model, preset, example_inputs={"pixel_values": pixels})
    assert (len(pointwise(optimized)) > 0) == KERNEL
    assert min(cosines(outputs(optimized, pixels), outputs(model, pixels))) > 0.999


@pytest.mark.parametrize(("pixels", "in_channels", "out_channels"), [(7, 16, 96), (5, 33, 24), (4, 96, 40)])
@pytest.mark.parametrize("bounds", [(0.0, 6.0), (None, None), (0.0, None)])
@pytest.mark.parametrize("add", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_call_computes_convolution_residual_and_clamp(
    pixels: int, in_channels: int, out_channels: int, bounds: tuple[float | None, float | None], add: bool,
    dtype: torch.dtype,
) -> None:  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, in_channels, pixels, pixels + 1, generator=generator).to(dtype)
    weight = (torch.randn(out_channels, in_channels, 1, 1, generator=generator) * in_channels**-0.5).to(dtype)
    bias = torch.randn(out_channels, generator=generator).to(dtype)
    residual = torch.randn(2, out_channels, pixels, pixels + 1, generator=generator).to(dtype) if add else None
    expected = F.conv2d(x.double(), weight.double(), bias.double())
    expected = expected if residual is None else expected + residual.double()
    expected = expected.clamp(*bounds) if bounds != (None, None) else expected
    got = pointwise_conv2d(x, weight, bias, residual, *bounds)
    assert got.dtype == dtype and got.shape == expected.shape
    assert got.is_contiguous(memory_format=torch.channels_last)
    # Float32 sums (of exact products), in bfloat16 rounded once: within its step.
    tolerance = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1e-3, 2**-8)}[dtype]
    assert torch.allclose(got.double(), expected, atol=tolerance[0], rtol=tolerance[1])
    # One unbatched image gives the batch's first.
    unbatched = None if residual is None else residual[0]
    assert torch.equal(pointwise_conv2d(x[0], weight, bias, unbatched, *bounds), got[0])


def test_what_the_kernel_does_not_take_runs_atens_convolution() -> None:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(1, 8, 3, 3, generator=generator, dtype=torch.float64)
    weight = torch.randn(5, 8, 1, 1, generator=generator, dtype=torch.float64)
    residual = torch.randn(1, 5, 3, 3, generator=generator, dtype=torch.float64)
    # float64: ATen's convolution, add and clamp, bit for bit, channels-last as the kernel's.
    expected = (F.conv2d(x, weight, None) + residual).clamp(0.0, 6.0)
    got = pointwise_conv2d(x, weight, None, residual, 0.0, 6.0)
    assert torch.equal(got, expected) and got.is_contiguous(memory_format=torch.channels_last)
    # A residual that broadcasts (not the result's shape) is not the kernel's either: bfloat16
    # summed in float32 and rounded once, as the kernel rounds.
    row = torch.randn(1, 5, 1, 3, generator=generator).bfloat16()
    xb, wb = x.bfloat16(), weight.bfloat16()
    once = (F.conv2d(xb.float(), wb.float(), None) + row.float()).bfloat16()
    assert torch.equal(pointwise_conv2d(xb, wb, None, row, None, None), once)


@pytest.mark.skipif(not KERNEL, reason="the kernel's vector paths need AVX2; the pass leaves the graph elsewhere")
def test_the_graph_copies_saves_pickles_and_packs_again_after_a_weight_changes() -> None:
    # ResNet's bottlenecks (a symbolic MobileNetV2 graph calls torch.fx's `_assert_is_none`,
    # which torch.load's re-trace registers as a wrapped function under its qualified name,
    # breaking every later trace of the process).
    model = tiny_resnet()
    pixels = torch.randn(1, 3, 32, 32)
    for dialect in ("export", "symbolic"):
        gm, args = trace_vision(model, pixels, dialect)
        expected = outputs(gm, *args)
        FusePointwiseConv()(gm)
        copies = [copy.deepcopy(gm), _save_load(gm)] if dialect == "export" else [_pickled(gm)]
        for copied in copies:  # a pickled symbolic graph traces its code again: one node per call
            assert len(pointwise(copied)) == len(pointwise(gm)) > 0
            assert_outputs_close(outputs(copied, *args), expected, atol=1e-4, rtol=1e-4)
    # An in-place update of a weight (or its bias) packs again.
    x = torch.randn(1, 8, 3, 3)
    weight, bias = torch.randn(5, 8, 1, 1), torch.randn(5)
    for _ in range(2):
        torch.testing.assert_close(pointwise_conv2d(x, weight, bias, None, None, None), F.conv2d(x, weight, bias))
        with torch.no_grad():
            weight.mul_(-2)
            bias.add_(1)
