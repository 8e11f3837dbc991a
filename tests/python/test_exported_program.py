"""fxopt.optimize(ExportedProgram) -> ExportedProgram, saved as .pt2 and loaded without fxopt."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import transformers
from torch import nn

import fxopt
from conftest import build_model, cache_key, tiny_bert_config, tiny_gpt2_config, token_inputs
from fxopt.optimization.exported import savable, save_pt2
from fxopt.optimization import compose
from fxopt.optimization.presets import build_all, preset_passes

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3)))


def conv_net() -> ConvNet:
    torch.manual_seed(0)
    model = ConvNet().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    return model


def call_targets(program: torch.export.ExportedProgram) -> list[object]:
    return [node.target for node in program.graph.nodes if node.op == "call_function"]


def test_bert_program_is_optimized_with_the_same_signature() -> None:
    model = build_model(transformers.BertModel, tiny_bert_config(attn_implementation="eager"))
    auto = torch.export.Dim.AUTO
    shapes = {"input_ids": {0: auto, 1: auto}, "attention_mask": {0: auto, 1: auto}}
    program = torch.export.export(model, (), token_inputs(2, 8), strict=False, dynamic_shapes=shapes)
    optimized = fxopt.optimize(program)
    assert isinstance(optimized, torch.export.ExportedProgram)
    assert optimized.call_spec.in_spec == program.call_spec.in_spec
    # eager attention became SDPA in both layers
    assert call_targets(program).count(torch.ops.aten.softmax.int) == 2
    assert torch.ops.aten.softmax.int not in call_targets(optimized)
    assert len(optimized.graph.nodes) < len(program.graph.nodes)
    for inputs in (token_inputs(2, 8), token_inputs(3, 11)):  # dynamic sizes survive
        report = fxopt.verify(model, optimized.module(), inputs)
        assert report.ok, str(report)


def test_batch_norm_folds_into_the_state_dict() -> None:
    model = conv_net()
    program = torch.export.export(model, (torch.randn(2, 3, 8, 8),), strict=False)
    optimized = fxopt.optimize(program)
    assert torch.ops.aten.batch_norm.default in call_targets(program)
    assert not any("batch_norm" in str(target) for target in call_targets(optimized))
    folded = [name for name in optimized.state_dict if name.endswith("_fused")]
    assert folded, list(optimized.state_dict)
    report = fxopt.verify(model, optimized.module(), (torch.randn(2, 3, 8, 8),))
    assert report.ok, str(report)
    # the input program is untouched
    assert torch.ops.aten.batch_norm.default in call_targets(program)


def test_saved_pt2_runs_where_fxopt_cannot_be_imported(tmp_path: Path) -> None:
    model = conv_net()
    x = torch.randn(2, 3, 8, 8)
    optimized = fxopt.optimize(torch.export.export(model, (x,), strict=False))
    path = tmp_path / "model.pt2"
    torch.export.save(optimized, path)
    torch.save(x, tmp_path / "x.pt")
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["fxopt"] = None  # any import of fxopt now fails
        import torch
        program = torch.export.load({str(path)!r})
        x = torch.load({str(tmp_path / "x.pt")!r})
        torch.save(program.module()(x), {str(tmp_path / "out.pt")!r})
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded_output = torch.load(tmp_path / "out.pt")
    assert torch.equal(loaded_output, optimized.module()(x))
    torch.testing.assert_close(loaded_output, model(x), rtol=1e-4, atol=1e-5)


def test_a_traced_gpt2_saved_as_pt2_runs_without_transformers(tmp_path: Path) -> None:
    # What `fxopt optimize --save model.pt2` writes: ModelOutput and DynamicCache come back in
    # torch's own containers, so loading needs neither fxopt nor transformers.
    model = build_model(transformers.GPT2Model, tiny_gpt2_config())
    passes, _ = savable(preset_passes("default"))
    traced = fxopt.trace(model, example_inputs=token_inputs(2, 8), mode="dynamo")
    graph_module = compose(*build_all(passes), inplace=False)(traced)
    assert len(graph_module.graph.nodes) < len(traced.graph.nodes)
    path = tmp_path / "gpt2.pt2"
    save_pt2(graph_module, (), token_inputs(2, 8), path)
    inputs = token_inputs(3, 11)  # other sizes than the traced ones
    torch.save(inputs, tmp_path / "inputs.pt")
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["fxopt"] = None
        sys.modules["transformers"] = None
        import torch
        module = torch.export.load({str(path)!r}).module()
        output = module(**torch.load({str(tmp_path / "inputs.pt")!r}))
        torch.save(output, {str(tmp_path / "out.pt")!r})
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = torch.load(tmp_path / "out.pt")
    with torch.no_grad():
        expected = model(**inputs)
    key = cache_key(expected)
    assert type(loaded) is dict and list(loaded) == ["last_hidden_state", key]
    torch.testing.assert_close(loaded["last_hidden_state"], expected.last_hidden_state, rtol=1e-4, atol=1e-5)
    cache = expected[key]
    layers = [tensor for layer in cache.layers for tensor in (layer.keys, layer.values)]
    assert len(loaded[key]) == len(layers) == 2 * model.config.n_layer
    for got, want in zip(loaded[key], layers):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_program_without_example_inputs_is_refused_clearly() -> None:
    model = conv_net()
    program = torch.export.export(model, (torch.randn(2, 3, 8, 8),), strict=False)
    program.example_inputs = None  # type: ignore[assignment]
    with pytest.raises(ValueError, match="needs the ExportedProgram's example inputs"):
        fxopt.optimize(program)
