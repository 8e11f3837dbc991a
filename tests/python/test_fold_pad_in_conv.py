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

PADS = (torch.nn.functional.pad, torch._C._nn.pad, torch.ops.aten.constant_pad_nd.default, torch.ops.aten.pad.default)
CONVS = (torch.conv2d, torch.ops.aten.conv2d.default)
CONV_MODULES = (torch.nn.Conv2d,)


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
    return fxopt.trace(model, example_inputs={"pixel_values": pixels}, mode=dialect)


def pad_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target in PADS]


@pytest.mark.parametrize("dialect", ["sized", "dynamo", "export"])
def test_symmetric_pads_fold_and_stride_two_same_pads_stay(dialect: str) -> None:
    model = tf_mobilenet_v2()
    pixels = torch.randn(1, 3, 32, 32)
    gm = traced(model, pixels, dialect)
    args: tuple[Any, ...] = (pixels,)
    expected, code, states = outputs(gm, *args), gm.code, tensor_states(gm)
    pads = pad_nodes(gm)
    # A pad is asymmetric exactly where TF "same" padding pads an odd total (stride 2 here).
    asymmetric = [p.name for p in pads if list(p.args[1][::2]) != list(p.args[1][1::2])]
    convs = count(gm, *CONVS, *CONV_MODULES)
    assert len(pads) == convs and 0 < len(asymmetric) < len(pads)

    t = FoldPadInConv()
    t(gm)
    assert len(t.report.changed) == len(pads) - len(asymmetric)
    assert sorted(p.name for p in pad_nodes(gm)) == sorted(asymmetric)
    assert {node: "differently" in reason for node, reason in t.report.skipped} == dict.fromkeys(asymmetric, True)
    assert count(gm, *CONVS, *CONV_MODULES) == convs
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


def test_a_folded_convolution_keeps_the_value_fx_recorded(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The convolution a fold makes computes what the one it replaces did: its fx node gets that
    node's recorded value (meta "val"), so a later run reads its sizes as it read the first
    one's: every convolution after it is timed at its own sizes, none left to the static
    fallback as "sizes unknown" (MobileNetV2's expansion convolutions after a projection were)."""
    from fxopt.optimization import FuseBatchNormInConv, FuseConvActivationOneDnn
    from fxopt.tuning import chooser as chooser_module
    from fxopt.tuning.cache import ChoiceCache

    model = tf_mobilenet_v2()
    gm = fxopt.trace(model, example_inputs={"pixel_values": torch.randn(1, 3, 32, 32)}, mode="dynamo")
    recorded = {n.name: n.meta["val"] for n in gm.graph.nodes if n.op == "call_function" and n.target in CONVS}
    readers = {n.name: next(iter(n.users)).name for n in pad_nodes(gm)}
    t = FoldPadInConv()
    t(gm)
    made = [n for n in gm.graph.nodes if n.name in set(map(str, t.report.changed))]
    assert made and all(n.target in CONVS for n in made)
    skipped = {node for node, _ in t.report.skipped}
    folded = [reader for pad, reader in readers.items() if pad not in skipped]
    assert sorted(id(n.meta["val"]) for n in made) == sorted(id(recorded[name]) for name in folded)
    assert all(not isinstance(n.meta["val"].shape[0], int) for n in made)  # the batch, symbolic

    chooser = fxopt.tuning.current()
    monkeypatch.setattr(chooser, "mode", "measure")
    monkeypatch.setattr(chooser, "cache", ChoiceCache(tmp_path))
    timings = {"aten": 1.0, "onednn": 0.5, "onednn_fused": 0.5}
    monkeypatch.setattr(chooser_module, "best_times", lambda runners, **_: {n: timings[n] for n in runners})
    FuseBatchNormInConv()(gm)  # as the presets do: each convolution then reads the one before
    assert any(user.target in CONVS for n in made for user in n.users)
    convs = count(gm, *CONVS)
    fuse = FuseConvActivationOneDnn()
    fuse(gm)
    assert len(fuse.report.choices) == convs
    assert {c.how for c in fuse.report.choices} <= {"measured", "cached"}, fuse.report.choices
