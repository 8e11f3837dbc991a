"""ConvWeightsChannelsLast on real CNNs in both dialects: the same outputs, channels-last
activations, a graph that deep-copies and saves, and an exact reverse."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import pytest
import torch

import fxopt
from fxopt.optimization import ChangePrecision, ConvWeightsChannelsLast, FuseBatchNormInConv, compose
from norm_models import (
    DIALECTS,
    assert_outputs_close,
    check_reverse,
    outputs,
    tensor_states,
    tiny_mobilenet_v2,
    tiny_resnet,
    trace_vision,
)


def conv2d_count(gm: torch.fx.GraphModule) -> int:
    modules = dict(gm.named_modules())
    return sum(
        (n.op == "call_module" and isinstance(modules[n.target], torch.nn.Conv2d))
        or n.target is torch.ops.aten.conv2d.default
        for n in gm.graph.nodes
    )


@pytest.mark.parametrize("build", [tiny_resnet, tiny_mobilenet_v2])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_weights_become_channels_last(build, dialect: str) -> None:  # type: ignore[no-untyped-def]
    model = build()
    pixels = torch.randn(2, 3, 32, 32)
    gm, args = trace_vision(model, pixels, dialect)
    expected, code, states = outputs(gm, *args), gm.code, tensor_states(gm)
    t = ConvWeightsChannelsLast()

    t(gm)
    assert len(t.report.changed) == conv2d_count(gm) > 0 and t.report.skipped == []
    laid_out = [p for name, p in gm.named_parameters() if "channels_last" in name]
    assert len(laid_out) == len(t.report.changed)
    assert all(p.is_contiguous(memory_format=torch.channels_last) for p in laid_out)
    assert any(not p.is_contiguous() for p in laid_out)  # 1x1 kernels are both
    got = outputs(gm, *args)
    assert_outputs_close(got, expected, atol=1e-4, rtol=1e-4)
    check_reverse(t, gm, args, expected, code, states)


def test_layout_survives_deepcopy_and_save_and_composes_with_bfloat16() -> None:
    model = tiny_resnet()
    pixels = torch.randn(1, 3, 32, 32)
    gm, args = trace_vision(model, pixels, "export")
    expected, code, states = outputs(gm, *args), gm.code, tensor_states(gm)
    fast = compose(FuseBatchNormInConv(), ConvWeightsChannelsLast(), ChangePrecision(torch.bfloat16))
    fast(gm)
    for copied in (copy.deepcopy(gm), _save_load(gm)):
        weights = [p for name, p in copied.named_parameters() if "channels_last" in name]
        assert weights and all(p.is_contiguous(memory_format=torch.channels_last) for p in weights)
        assert_outputs_close(outputs(copied, *args), expected, atol=0.1, rtol=0.1)
    check_reverse(fast, gm, args, expected, code, states)


def _save_load(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "model.pt"
        fxopt.save(gm, path)  # what `fxopt optimize --save m.pt` writes
        return fxopt.load(path)
