"""FuseDepthwiseConv on transformers' MobileNetV2 with TensorFlow padding, as fxopt.trace and
torch.export record it: every depthwise convolution, with its one-sided "same" pad and its ReLU6,
becomes one call of fxopt's kernel with the model's outputs, in float32 and after a bfloat16
lowering, the presets run it, reverse restores the graph exactly; the runtime function runs
ATen's convolution for what its kernel does not take."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import fxopt
from fxopt import _core
from fxopt.optimization import ChangePrecision, FoldPadInConv, FuseBatchNormInConv, FuseDepthwiseConv, compose, presets
from fxopt.runtime.depthwise_conv import depthwise_conv2d
from norm_models import assert_outputs_close, check_reverse, count, outputs, tensor_states
from test_fold_pad_in_conv import CONVS, pad_nodes, tf_mobilenet_v2, traced

KERNEL = _core.depthwise_conv_vectorized()
"""Whether this CPU runs the kernel's vector paths (AVX2); elsewhere the pass leaves the graph."""


def depthwise(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is depthwise_conv2d]


def is_depthwise(node: torch.fx.Node, gm: torch.fx.GraphModule) -> bool:
    weight = node.args[1]
    groups = node.args[6] if len(node.args) > 6 else node.kwargs.get("groups", 1)
    shape = gm.get_parameter(weight.target).shape if isinstance(weight, torch.fx.Node) else None
    return shape is not None and shape[1] == 1 and groups == shape[0] > 1


@pytest.mark.parametrize("dialect", ["dynamo", "export"])
def test_depthwise_convolutions_their_pads_and_relu6_become_one_call(dialect: str) -> None:
    model = tf_mobilenet_v2()
    pixels = torch.randn(1, 3, 32, 32)
    gm = traced(model, pixels, dialect)
    compose(FuseBatchNormInConv(), FoldPadInConv(), inplace=True)(gm)  # as the presets run them first
    args: tuple[Any, ...] = (pixels,)
    expected, code, states = outputs(gm, *args), gm.code, tensor_states(gm)
    convs = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in CONVS]
    dw = [n.name for n in convs if is_depthwise(n, gm)]
    pads = pad_nodes(gm)
    one_sided = [p for p in pads if p.users and is_depthwise(next(iter(p.users)), gm)]
    assert 0 < len(dw) < len(convs) and one_sided

    t = FuseDepthwiseConv()
    t(gm)
    if not KERNEL:
        assert t.report.changed == [] and depthwise(gm) == []
        return
    assert len(t.report.changed) == len(dw) == len(depthwise(gm))
    assert count(gm, *CONVS) == len(convs) - len(dw)
    assert len(pad_nodes(gm)) == len(pads) - len(one_sided)
    assert all(call.args[5] == 0.0 and call.args[6] == 6.0 for call in depthwise(gm))  # ReLU6 taken in
    assert any(call.args[4][0] != call.args[4][1] for call in depthwise(gm))  # a one-sided pad
    skipped = dict(t.report.skipped)
    assert all("not depthwise" in skipped[n.name] for n in convs if n.name not in dw)
    got = outputs(gm, *args)
    scale = max(float(e.abs().max()) for e in expected)
    assert scale > 1e-3
    assert_outputs_close(got, expected, atol=1e-5 * scale, rtol=1e-5)
    check_reverse(t, gm, args, expected, code, states)


@pytest.mark.skipif(not KERNEL, reason="the kernel's vector paths need AVX2; the pass leaves the graph elsewhere")
def test_after_a_bfloat16_lowering_the_kernel_reads_and_writes_bfloat16() -> None:
    model = tf_mobilenet_v2()
    pixels = torch.randn(1, 3, 32, 32)
    gm = fxopt.trace(model, example_inputs={"pixel_values": pixels})
    compose(FuseBatchNormInConv(), FoldPadInConv(), ChangePrecision(torch.bfloat16), inplace=True)(gm)
    lowered = outputs(gm, pixels)
    t = FuseDepthwiseConv()
    t(gm)
    assert depthwise(gm) and len(t.report.changed) == len(depthwise(gm))
    got = outputs(gm, pixels)
    # Each call rounds its float32 sums to bfloat16 once, where ATen's bfloat16 convolution
    # rounds its own way: within a few bfloat16 steps of the lowered graph's outputs.
    for g, e in zip(got, lowered):
        assert g.dtype == e.dtype
        cos = F.cosine_similarity(g.double().flatten(), e.double().flatten(), 0)
        assert float(cos) > 0.9999, float(cos)
    t.reverse(gm)
    assert depthwise(gm) == []
    for g, e in zip(outputs(gm, pixels), lowered):
        assert torch.equal(g, e)


def test_the_presets_run_it_before_the_onednn_convolutions() -> None:
    for name in ("default", "fast"):
        specs = presets.preset_passes(name)
        assert specs.index("FuseDepthwiseConv") > specs.index("FoldPadInConv")
        if "FuseConvActivationOneDnn" in specs:
            assert specs.index("FuseDepthwiseConv") < specs.index("FuseConvActivationOneDnn")
    assert "FuseDepthwiseConv" not in presets.preset_passes("default", "meta")
    model = tf_mobilenet_v2()
    pixels = torch.randn(1, 3, 32, 32)
    optimized = fxopt.optimize(model, "default", example_inputs={"pixel_values": pixels})
    assert (len(depthwise(optimized)) > 0) == KERNEL
    expected = outputs(model, pixels)
    scale = max(float(e.abs().max()) for e in expected)
    assert_outputs_close(outputs(optimized, pixels), expected, atol=1e-4 * scale, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize(
    ("stride", "sides", "bounds"),
    [([1, 1], [1, 1, 1, 1], (0.0, 6.0)), ([2, 2], [0, 1, 0, 1], (None, None)), ([2, 1], [2, 0, 1, 3], (0.0, None))],
)
def test_the_call_computes_pad_convolution_and_clamp(
    dtype: torch.dtype, stride: list[int], sides: list[int], bounds: tuple[float | None, float | None]
) -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 19, 9, 11, generator=generator).to(dtype)
    weight = torch.randn(19, 1, 3, 3, generator=generator).to(dtype)
    bias = torch.randn(19, generator=generator).to(dtype)
    top, bottom, left, right = sides
    expected = F.conv2d(F.pad(x.double(), (left, right, top, bottom)), weight.double(), bias.double(), stride, 0, 1, 19)
    expected = expected.clamp(*bounds) if bounds != (None, None) else expected
    got = depthwise_conv2d(x, weight, bias, stride, sides, *bounds)
    assert got.dtype == dtype and got.shape == expected.shape
    tolerance = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 2e-2}[dtype]
    assert torch.allclose(got.double(), expected, atol=tolerance * float(expected.abs().max()), rtol=tolerance)
    # One unbatched image; a weight in another dtype than the input runs ATen's (which refuses it).
    assert torch.equal(depthwise_conv2d(x[1], weight, bias, stride, sides, *bounds), got[1])
    if dtype != torch.float64:
        with pytest.raises(RuntimeError):
            depthwise_conv2d(x, weight.double(), bias.double(), stride, sides, *bounds)
