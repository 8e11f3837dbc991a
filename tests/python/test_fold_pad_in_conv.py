"""FoldPadInConv on transformers' MobileNetV2 with TensorFlow padding (every convolution reads an
explicit F.pad), as fxopt.trace and torch.export record it: symmetric pads become the
convolutions' own padding with the same outputs, the stride-2 "same" pads stay with their
reason, the presets run it, and reverse restores the graph exactly."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers

import fxopt
from conftest import build_model
from fxopt.optimization import FoldPadInConv, presets
from norm_models import assert_outputs_close, check_reverse, count, outputs, tensor_states

PADS = (torch._C._nn.pad, torch.ops.aten.constant_pad_nd.default, torch.ops.aten.pad.default)
CONVS = (torch.conv2d, torch.ops.aten.conv2d.default)


def tf_mobilenet_v2() -> transformers.MobileNetV2Model:
    config = transformers.MobileNetV2Config(image_size=32, depth_multiplier=0.25, min_depth=4, tf_padding=True)
    model = build_model(transformers.MobileNetV2Model, config)
    # Weights that keep activations of order one through the network (transformers' small
    # initialisation shrinks them to ~1e-21 over 50 layers, where any difference would hide).
    generator = torch.Generator().manual_seed(1)
    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d):
            fan_in = module.weight[0].numel()
            module.weight.data.normal_(0.0, (2.0 / fan_in) ** 0.5, generator=generator)
    return model


def traced(model: torch.nn.Module, pixels: torch.Tensor, dialect: str) -> torch.fx.GraphModule:
    if dialect == "export":
        return torch.export.export(model, (pixels,), strict=False).module()
    return fxopt.trace(model, example_inputs={"pixel_values": pixels})


def pad_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target in PADS]


@pytest.mark.parametrize("dialect", ["dynamo", "export"])
def test_symmetric_pads_fold_and_stride_two_same_pads_stay(dialect: str) -> None:
    model = tf_mobilenet_v2()
    pixels = torch.randn(1, 3, 32, 32)
    gm = traced(model, pixels, dialect)
    args: tuple[Any, ...] = (pixels,)
    expected, code, states = outputs(gm, *args), gm.code, tensor_states(gm)
    pads = pad_nodes(gm)
    # A pad is asymmetric exactly where TF "same" padding pads an odd total (stride 2 here).
    asymmetric = [p.name for p in pads if list(p.args[1][::2]) != list(p.args[1][1::2])]
    convs = count(gm, *CONVS)
    assert len(pads) == convs and 0 < len(asymmetric) < len(pads)

    t = FoldPadInConv()
    t(gm)
    assert len(t.report.changed) == len(pads) - len(asymmetric)
    assert sorted(p.name for p in pad_nodes(gm)) == sorted(asymmetric)
    assert {node: "differently" in reason for node, reason in t.report.skipped} == dict.fromkeys(asymmetric, True)
    assert count(gm, *CONVS) == convs
    got = outputs(gm, *args)
    scale = max(float(e.abs().max()) for e in expected)
    assert scale > 1e-3  # activations of order one: a misplaced pad would show
    assert_outputs_close(got, expected, atol=1e-5 * scale, rtol=1e-5)
    check_reverse(t, gm, args, expected, code, states)


def test_presets_fold_the_pads_before_the_onednn_convolutions() -> None:
    model = tf_mobilenet_v2()
    pixels = torch.randn(1, 3, 32, 32)
    assert "FoldPadInConv" in presets.preset_passes("default")
    gm = fxopt.trace(model, example_inputs={"pixel_values": pixels})
    optimized = fxopt.optimize(model, "default", example_inputs={"pixel_values": pixels})
    assert 0 < len(pad_nodes(optimized)) < len(pad_nodes(gm))
    expected = outputs(model, pixels)
    scale = max(float(e.abs().max()) for e in expected)
    assert_outputs_close(outputs(optimized, pixels), expected, atol=1e-4 * scale, rtol=1e-4)
