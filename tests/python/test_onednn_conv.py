"""FuseConvActivationOneDnn on real CNNs (transformers' ResNet and MobileNetV2) in both dialects:
the same outputs, the residual adds and activations inside the calls, packing that follows the
weights, graphs that deep-copy and save, and an exact reverse."""

from __future__ import annotations

import copy
import io
import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import fxopt
import fxopt.tuning
from fxopt.optimization import ChangePrecision, ConvWeightsChannelsLast, FuseBatchNormInConv, FuseConvActivationOneDnn, compose
from fxopt.optimization.hardware import onednn_bfloat16_available, onednn_conv_available
from fxopt.runtime.onednn_conv import conv_pointwise
from norm_models import (
    DIALECTS,
    assert_outputs_close,
    check_reverse,
    count,
    outputs,
    tensor_states,
    tiny_mobilenet_v2,
    tiny_resnet,
    trace_vision,
)

pytestmark = pytest.mark.skipif(not onednn_conv_available(), reason="this torch has no oneDNN convolution")


def fused_calls(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.target is conv_pointwise]


def conv_calls(gm: torch.fx.GraphModule) -> int:
    return count(gm, torch.nn.Conv2d, torch.conv2d, torch.ops.aten.conv2d.default)


def computing_nodes(gm: torch.fx.GraphModule) -> int:
    """Nodes other than get_attr reads (a module's weight is read through one once fused)."""
    return sum(n.op != "get_attr" for n in gm.graph.nodes)


@pytest.mark.parametrize("build", [tiny_resnet, tiny_mobilenet_v2])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_convolutions_their_adds_and_activations_become_one_call(build, dialect: str) -> None:  # type: ignore[no-untyped-def]
    model = build()
    pixels = torch.randn(2, 3, 32, 32)
    gm, args = trace_vision(model, pixels, dialect)
    FuseBatchNormInConv()(gm)  # as in the presets: the activations then follow the convolutions
    expected, code, states = outputs(gm, *args), gm.code, tensor_states(gm)
    convs, nodes = conv_calls(gm), computing_nodes(gm)
    t = FuseConvActivationOneDnn()

    t(gm)
    calls = fused_calls(gm)
    assert len(calls) == len(t.report.changed) == convs > 0, t.report.skipped
    assert conv_calls(gm) == 0
    post_ops = {(n.args[7] is not None, n.args[8]) for n in calls}
    if build is tiny_resnet:  # bottlenecks: conv + ReLU, and conv + residual + ReLU in one call
        assert (False, "relu") in post_ops and (True, "relu") in post_ops
    else:  # MobileNetV2's ReLU6 reaches the graph as hardtanh(0, 6)
        assert any(n.args[8] == "hardtanh" and list(n.args[9]) == [0.0, 6.0] for n in calls)
    fused_ops = sum((n.args[7] is not None) + (n.args[8] != "none") for n in calls)
    assert computing_nodes(gm) == nodes - fused_ops
    got = outputs(gm, *args)
    assert all(t.is_contiguous(memory_format=torch.channels_last) for t in got if t.dim() == 4)
    assert_outputs_close(got, expected, atol=1e-4, rtol=1e-4)
    check_reverse(t, gm, args, expected, code, states)


def test_packing_follows_the_weight_and_the_graph_copies_and_saves() -> None:
    model = tiny_resnet()
    pixels = torch.randn(1, 3, 32, 32)
    gm, args = trace_vision(model, pixels, "export")
    expected = outputs(gm, *args)
    compose(FuseConvActivationOneDnn())(gm)
    assert_outputs_close(outputs(gm, *args), expected, atol=1e-4, rtol=1e-4)
    for copied in (copy.deepcopy(gm), _save_load(gm)):
        assert fused_calls(copied)
        assert_outputs_close(outputs(copied, *args), expected, atol=1e-4, rtol=1e-4)
    # A symbolic trace also pickles with torch.save (an exported one does not).
    symbolic, symbolic_args = trace_vision(model, pixels, "symbolic")
    symbolic_expected = outputs(symbolic, *symbolic_args)
    compose(FuseConvActivationOneDnn())(symbolic)
    pickled = _pickled(symbolic)
    assert len(fused_calls(pickled)) == len(fused_calls(symbolic)) > 0
    assert_outputs_close(outputs(pickled, *symbolic_args), symbolic_expected, atol=1e-4, rtol=1e-4)

    # An input of another size and an in-place update of a weight each get a packing of their
    # own; an unbatched image runs as a batch of one.
    x = torch.randn(1, 4, 9, 7)
    w = torch.randn(6, 4, 3, 3)
    for _ in range(2):
        y = conv_pointwise(x, w, None, [1, 1], [1, 1], [1, 1], 1, None, "none", [], None)
        torch.testing.assert_close(y, F.conv2d(x, w, None, 1, 1), atol=1e-4, rtol=1e-4)
        x = torch.randn(2, 4, 5, 5)
    with torch.no_grad():
        w.mul_(-2)
    y = conv_pointwise(x, w, None, [1, 1], [1, 1], [1, 1], 1, None, "relu", [], None)
    torch.testing.assert_close(y, F.relu(F.conv2d(x, w, None, 1, 1)), atol=1e-4, rtol=1e-4)
    r = torch.randn(6, 5, 5)
    y = conv_pointwise(x[0], w, None, [1, 1], [1, 1], [1, 1], 1, r, "relu", [], None)
    torch.testing.assert_close(y, F.relu(F.conv2d(x[0], w, None, 1, 1) + r), atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(not onednn_bfloat16_available(), reason="oneDNN runs no native bfloat16 here")
def test_fuses_the_bfloat16_convolutions_a_lowering_made() -> None:
    model = tiny_mobilenet_v2()
    pixels = torch.randn(1, 3, 32, 32)
    gm, args = trace_vision(model, pixels, "export")
    expected, code, states = outputs(gm, *args), gm.code, tensor_states(gm)
    fast = compose(FuseBatchNormInConv(), ConvWeightsChannelsLast(), ChangePrecision(torch.bfloat16),
                   FuseConvActivationOneDnn())  # fmt: skip
    fast(gm)
    calls = fused_calls(gm)
    assert calls and conv_calls(gm) == 0
    assert {n.args[1].meta["val"].dtype for n in calls if "val" in n.args[1].meta} <= {torch.bfloat16}
    assert_outputs_close(outputs(gm, *args), expected, atol=0.1, rtol=0.05)
    check_reverse(fast, gm, args, expected, code, states)


def test_a_convolution_measured_faster_in_aten_stays() -> None:
    gm, args = trace_vision(tiny_resnet(), torch.randn(1, 3, 32, 32), "export")
    code = gm.code
    t = FuseConvActivationOneDnn()
    with fxopt.tuning.pinned(conv2d="aten"):
        t(gm)
    assert not t.report.changed and gm.code == code
    assert {reason for _, reason in t.report.skipped} == {
        "ATen's convolution was measured faster here (see the pass's choices)"
    }


def test_a_convolution_is_timed_against_the_most_fused_call_only(tmp_path, monkeypatch) -> None:
    """Per convolution: ATen against oneDNN's fused call where an add or activation fuses, else
    against the packed call; the packed call without what could fuse is no candidate. Each pick
    changes the graph as it says (timings injected)."""
    from fxopt.tuning import chooser as chooser_module
    from fxopt.tuning.cache import ChoiceCache

    chooser = fxopt.tuning.current()
    monkeypatch.setattr(chooser, "mode", "measure")
    monkeypatch.setattr(chooser, "cache", ChoiceCache(tmp_path))
    timed: list[tuple[str, ...]] = []

    def best_times(runners, **_):  # type: ignore[no-untyped-def]
        timed.append(tuple(runners))
        for run in runners.values():
            run()  # each candidate runs on the query's operands
        return {name: 0.5 if name.startswith("onednn") else 1.0 for name in runners}

    monkeypatch.setattr(chooser_module, "best_times", best_times)
    # Traced on one image the batch stays symbolic: every convolution is measured at the batch
    # it was traced at (its input's hint, or the graph's for an input the pass itself made).
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 1),
    ).eval()
    pixels = torch.randn(1, 3, 16, 16)
    gm = fxopt.trace(model, example_inputs=(pixels,), mode="dynamo")
    expected = gm(pixels)
    t = FuseConvActivationOneDnn()
    out = compose(t, inplace=False)(gm)
    assert sorted(timed) == [("aten", "onednn"), ("aten", "onednn"), ("aten", "onednn_fused")]
    measured = sorted(c.picked for c in t.report.choices if c.how == "measured")
    assert measured == ["onednn", "onednn", "onednn_fused"]
    assert len(fused_calls(out)) == 3 and count(out, torch.nn.functional.relu) == 0
    assert_outputs_close(out(pixels), expected, atol=1e-5, rtol=1e-5)


def test_presets_run_it_where_onednn_convolves() -> None:
    model = tiny_resnet()
    pixels = torch.randn(1, 3, 32, 32)
    for preset in ("default", "fast"):
        optimized = fxopt.optimize(model, preset, example_inputs={"pixel_values": pixels})
        assert fused_calls(optimized)
        report = fxopt.verify(model, optimized, {"pixel_values": pixels})
        # `default` keeps float32 results; `fast` may lower to bfloat16 (its bound: cosine 0.999)
        assert report.ok if preset == "default" else min(row.cosine for row in report.rows) >= 0.999, report


def _pickled(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """torch.save / torch.load, which traces the graph's code again: the fused call stays one
    node (fxopt.runtime.graph_leaf) instead of being traced through."""
    buffer = io.BytesIO()
    torch.save(gm, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert isinstance(loaded, torch.fx.GraphModule)
    return loaded


def _save_load(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "model.pt"
        fxopt.save(gm, path)
        return fxopt.load(path)


@pytest.mark.parametrize(("attr", "scalars", "residual"), [
    ("none", [], False), ("relu", [], True), ("hardtanh", [0.0, 6.0], False), ("swish", [], False),
])  # fmt: skip
def test_where_onednn_refuses_the_dtype_aten_computes_the_same(monkeypatch, attr, scalars, residual) -> None:  # type: ignore[no-untyped-def]
    """A call in a dtype this CPU's oneDNN refuses (a float16 lowering without AVX512-FP16, a
    graph loaded on another CPU) runs ATen's convolution, add and activation: oneDNN's result
    up to rounding, channels-last as oneDNN returns it. Refusal is simulated for float32, so the
    two paths meet on every CPU."""
    from fxopt.runtime import onednn_fallback

    torch.manual_seed(0)
    x = torch.randn(2, 4, 7, 7).contiguous(memory_format=torch.channels_last)
    weight, bias = torch.randn(6, 4, 3, 3) * 0.3, torch.randn(6)
    r = torch.randn(2, 6, 4, 4) if residual else None
    args = (x, weight, bias, [2, 2], [1, 1], [1, 1], 1, r, attr, scalars, None)
    onednn = conv_pointwise(*args)
    monkeypatch.setitem(onednn_fallback._RUNS, ("convolution", torch.float32), False)
    aten = conv_pointwise(*args)
    assert aten.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(aten, onednn, rtol=1e-5, atol=1e-5)
    reference = F.conv2d(x, weight, bias, 2, 1)
    reference = reference if r is None else reference + r
    reference = {"none": reference, "relu": F.relu(reference), "hardtanh": F.relu6(reference), "swish": F.silu(reference)}[attr]
    torch.testing.assert_close(aten, reference)
