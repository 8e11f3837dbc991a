"""torch.compile(model, backend="fxopt"): presets on Dynamo's graphs, eager or handed to Inductor."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import transformers

import fxopt
from fxopt import _core, tuning
from fxopt.runtime.depthwise_conv import depthwise_conv2d
from fxopt.runtime.onednn_conv import conv_pointwise
from fxopt.runtime.prefill_attention import attention_f32
from fxopt.runtime.onednn_linear import linear_pointwise
from fxopt.runtime.pointwise_conv import pointwise_conv2d
from conftest import build_model, tiny_bert_config, token_inputs
from fxopt.optimization.compile_backend import CompiledGraph, fxopt_backend
from norm_models import tiny_resnet
from test_fold_pad_in_conv import tf_mobilenet_v2

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    """Each test compiles from scratch (Dynamo caches compiled frames per code object)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compiled_graphs(
    model: torch.nn.Module, options: dict[str, Any] | None = None
) -> tuple[Any, list[CompiledGraph]]:
    """`model` compiled with fxopt's backend, and the graphs the backend returned to Dynamo."""
    graphs: list[CompiledGraph] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Any:
        compiled = fxopt_backend(gm, example_inputs, **kwargs)
        graphs.append(compiled)
        return compiled

    return torch.compile(model, backend=backend, options=options), graphs


def targets(gm: torch.fx.GraphModule) -> list[Any]:
    return [node.target for node in gm.graph.nodes if node.op == "call_function"]


def test_backend_is_registered_by_import() -> None:
    assert "fxopt" in torch._dynamo.list_backends()


def test_bert_compiled_with_fxopt_matches_eager_and_is_optimized() -> None:
    model = build_model(transformers.BertModel, tiny_bert_config(attn_implementation="eager"))
    compiled, graphs = compiled_graphs(model)
    for inputs in (token_inputs(2, 8), token_inputs(3, 11)):
        report = fxopt.verify(model, compiled, inputs)
        assert report.ok, str(report)
    optimized = graphs[0].graph_module
    # default: attention to SDPA in both layers, each layer's q, k and v merged into one Linear
    # (13 Linears, 9 left), every Linear as oneDNN's fused linear
    assert torch.nn.functional.softmax not in targets(optimized)
    assert targets(optimized).count(linear_pointwise) == 13 - 2 * 2
    assert torch._C._nn.linear not in targets(optimized)


def test_by_name_bert_matches_eager() -> None:
    model = build_model(transformers.BertModel, tiny_bert_config())
    compiled = torch.compile(model, backend="fxopt")
    report = fxopt.verify(model, compiled, token_inputs(2, 8))
    assert report.ok, str(report)


def test_resnet_compiled_with_fxopt_folds_batch_norms_and_matches_eager() -> None:
    model = tiny_resnet()
    compiled, graphs = compiled_graphs(model)
    for batch in (2, 3):
        report = fxopt.verify(model, compiled, torch.randn(batch, 3, 32, 32))
        assert report.ok, str(report)
    optimized = graphs[0].graph_module
    assert torch.nn.functional.batch_norm not in targets(optimized)
    # every convolution stays one call: ATen's, oneDNN's on a packed weight or (1x1) fxopt's,
    # where measured faster
    calls = targets(optimized)
    assert calls.count(torch.conv2d) + calls.count(conv_pointwise) + calls.count(pointwise_conv2d) == 8
    # the model's own weights are untouched: folding made copies
    assert all(isinstance(p, torch.nn.Parameter) for p in model.parameters())


def test_by_name_resnet_matches_eager() -> None:
    model = tiny_resnet()
    compiled = torch.compile(model, backend="fxopt")
    report = fxopt.verify(model, compiled, torch.randn(2, 3, 32, 32))
    assert report.ok, str(report)


@pytest.mark.parametrize("options", [{"preset": "all-preserving"}, {"inductor": True}])
def test_options_pick_a_preset_or_hand_on_to_inductor(options: dict[str, Any]) -> None:
    model = tiny_resnet()
    compiled, graphs = compiled_graphs(model, options)
    report = fxopt.verify(model, compiled, torch.randn(2, 3, 32, 32))
    assert report.ok, str(report)
    assert torch.nn.functional.batch_norm not in targets(graphs[0].graph_module)


def test_bert_with_inductor_leaves_linear_fusion_to_inductor() -> None:
    model = build_model(transformers.BertModel, tiny_bert_config())
    compiled, graphs = compiled_graphs(model, {"inductor": True})
    report = fxopt.verify(model, compiled, token_inputs(2, 8))
    assert report.ok, str(report)
    assert linear_pointwise not in targets(graphs[0].graph_module)


@pytest.mark.skipif(not _core.prefill_attention_f32_available(), reason="the float32 attention kernel needs AVX2")
@pytest.mark.parametrize("inductor", [False, True])
def test_fxopts_attention_kernel_runs_eagerly_and_inductor_gets_sdpa(inductor: bool) -> None:
    # The kernel chooser's measured pick, pinned: static tuning (the tests') keeps SDPA.
    model = build_model(transformers.BertModel, tiny_bert_config())
    with tuning.pinned(attention="fxopt_f32"):
        compiled, graphs = compiled_graphs(model, {"inductor": inductor})
        report = fxopt.verify(model, compiled, token_inputs(2, 8))
    assert report.ok, str(report)
    assert (attention_f32 in targets(graphs[0].graph_module)) == (not inductor)


@pytest.mark.parametrize("inductor", [False, True])
def test_depthwise_convolutions_run_fxopts_kernel_eagerly_and_inductors_when_handed_on(inductor: bool) -> None:
    model = tf_mobilenet_v2()
    compiled, graphs = compiled_graphs(model, {"inductor": inductor})
    report = fxopt.verify(model, compiled, torch.randn(1, 3, 32, 32))
    assert report.ok, str(report)
    fused = depthwise_conv2d in targets(graphs[0].graph_module)
    assert fused == (not inductor and _core.depthwise_conv_vectorized())


@pytest.mark.parametrize("inductor", [False, True])
def test_bfloat16_1x1_convolutions_run_fxopts_kernel_eagerly_and_inductors_when_handed_on(inductor: bool) -> None:
    # `fast`: bfloat16 calls where the CPU has it natively, float32 ones elsewhere.
    model = tf_mobilenet_v2()
    compiled, graphs = compiled_graphs(model, {"preset": "fast", "inductor": inductor})
    pixels = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        expected, got = model(pixels).last_hidden_state, compiled(pixels).last_hidden_state
    assert got.dtype == expected.dtype
    assert float(torch.nn.functional.cosine_similarity(got.double().flatten(), expected.double().flatten(), 0)) > 0.999
    fused = pointwise_conv2d in targets(graphs[0].graph_module)
    assert fused == (not inductor and _core.pointwise_conv_vectorized(False))


@pytest.mark.parametrize(
    "options, message",
    [
        ({"preset": "fastest"}, "preset 'fastest' is not one of"),
        ({"presets": "fast"}, r"unknown \['presets'\]"),
        ({"inductor": "yes"}, "inductor must be a bool"),
    ],
)
def test_bad_options_raise_a_clear_error(options: dict[str, Any], message: str) -> None:
    model = tiny_resnet()
    compiled = torch.compile(model, backend="fxopt", options=options)
    with pytest.raises(Exception, match=message):
        compiled(torch.randn(2, 3, 32, 32))


def test_entry_point_works_without_importing_fxopt() -> None:
    script = textwrap.dedent(
        """
        import sys
        import torch
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).eval()
        x = torch.randn(2, 3, 8, 8)
        assert "fxopt" not in sys.modules
        compiled = torch.compile(model, backend="fxopt")
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x))
        assert "fxopt" in sys.modules  # torch loaded it through the entry point
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
