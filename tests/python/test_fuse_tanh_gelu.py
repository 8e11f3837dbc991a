"""FuseTanhGelu on GPT-2, whose MLP computes gelu_new in eight elementwise ops, as fxopt.trace
(Dynamo) and torch.export record it: one gelu call per layer with the same outputs, an exact
reverse, and the presets run it."""

from __future__ import annotations

import pytest
import torch
import transformers

import fxopt
from conftest import build_model, tiny_gpt2_config, token_inputs
from fxopt.optimization import FuseTanhGelu, presets
from fxopt.runtime.onednn_linear import linear_pointwise
from norm_models import assert_outputs_close, check_reverse, count, outputs, tensor_states

GELUS = (torch._C._nn.gelu, torch.ops.aten.gelu.default)
TANHS = (torch.tanh, torch.ops.aten.tanh.default)


def gpt2() -> transformers.GPT2Model:
    return build_model(transformers.GPT2Model, tiny_gpt2_config(n_layer=3))


def traced(model: torch.nn.Module, inputs: dict[str, torch.Tensor], dialect: str) -> torch.fx.GraphModule:
    mode = "export" if dialect == "export" else "dynamo"
    return fxopt.trace(model, example_inputs=inputs, mode=mode)


@pytest.mark.parametrize("dialect", ["dynamo", "export"])
def test_each_layers_written_out_gelu_becomes_one_call(dialect: str) -> None:
    model = gpt2()
    inputs = token_inputs(2, 9)
    gm = traced(model, inputs, dialect)
    args = (inputs["input_ids"], inputs["attention_mask"])
    expected, code, states = outputs(gm, *args), gm.code, tensor_states(gm)
    assert count(gm, *TANHS) == 3 and count(gm, *GELUS) == 0
    nodes = len(gm.graph.nodes)

    t = FuseTanhGelu()
    t(gm)
    assert len(t.report.changed) == 3 and t.report.skipped == []
    assert count(gm, *TANHS) == 0 and count(gm, *GELUS) == 3
    gelus = [n for n in gm.graph.nodes if n.target in GELUS]
    assert all(n.kwargs == {"approximate": "tanh"} for n in gelus)
    assert len(gm.graph.nodes) == nodes - 3 * 7  # eight nodes each became one
    assert_outputs_close(outputs(gm, *args), expected, atol=1e-5, rtol=1e-5)
    check_reverse(t, gm, args, expected, code, states)


def test_default_computes_gelu_in_one_call() -> None:
    model = gpt2()
    inputs = token_inputs(1, 16)
    assert "FuseTanhGelu" in presets.preset_passes("default")
    optimized = fxopt.optimize(model, "default", example_inputs=inputs)
    # One gelu per layer: a call of its own, or inside the Linear before it (oneDNN's fusion,
    # once MoveActivationBeforeReshape put it after that Linear).
    fused = sum(n.target is linear_pointwise and n.args[3] == "gelu" for n in optimized.graph.nodes)
    assert count(optimized, *TANHS) == 0 and count(optimized, *GELUS) + fused == 3
    expected = outputs(lambda: model(**inputs))
    assert_outputs_close(outputs(lambda: optimized(**inputs)), expected, atol=1e-4, rtol=1e-4)
