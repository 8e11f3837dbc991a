"""MoveActivationBeforeReshape on GPT-2, whose MLP views its Conv1D product back to [batch, seq,
features] before the GELU: the GELU moves next to its Linear with the same bits, reverse is
exact, and in `default` the oneDNN fusion then takes it into the Linear's call."""

from __future__ import annotations

import pytest
import torch
import transformers

import fxopt
from conftest import build_model, tiny_gpt2_config, token_inputs
from fxopt.optimization import FuseTanhGelu, MoveActivationBeforeReshape, RecognizeLinears, compose, hardware
from fxopt.runtime.onednn_linear import linear_pointwise
from norm_models import check_reverse, count, outputs, tensor_states

GELUS = (torch._C._nn.gelu, torch.ops.aten.gelu.default)
LINEARS = (torch._C._nn.linear, torch.ops.aten.linear.default)


def gpt2() -> transformers.GPT2Model:
    return build_model(transformers.GPT2Model, tiny_gpt2_config(n_layer=3))


@pytest.mark.parametrize("mode", ["dynamo", "export"])
def test_each_gelu_moves_before_its_view_with_the_same_bits(mode: str) -> None:
    model = gpt2()
    inputs = token_inputs(2, 9)
    gm = fxopt.trace(model, example_inputs=inputs, mode=mode)
    compose(FuseTanhGelu(), RecognizeLinears(), inplace=True)(gm)
    args = (inputs["input_ids"], inputs["attention_mask"])
    expected, code, states = outputs(gm, *args), gm.code, tensor_states(gm)
    gelus = [n for n in gm.graph.nodes if n.target in GELUS]
    assert len(gelus) == 3
    readers_of_linears = sum(n.args[0].target in LINEARS for n in gelus)
    if mode == "dynamo":  # sizes computed at run time: the views stay, the GELUs read them
        assert readers_of_linears == 0

    t = MoveActivationBeforeReshape()
    t(gm)
    moved = [n for n in gm.graph.nodes if n.target in GELUS]
    assert len(moved) == 3 and all(n.args[0].target in LINEARS for n in moved)
    # Those that read a view before moved; a graph whose views RecognizeLinears removed (known
    # sizes) had none to move.
    assert len(t.report.changed) == 3 - readers_of_linears
    assert all(torch.equal(a, b) for a, b in zip(outputs(gm, *args), expected, strict=True))
    check_reverse(t, gm, args, expected, code, states)


@pytest.mark.skipif(not hardware.onednn_linear_available(), reason="no oneDNN linear in this torch")
def test_default_fuses_gpt2s_gelu_into_its_linear() -> None:
    model = gpt2()
    inputs = token_inputs(1, 16)
    with fxopt.tuning.pinned(linear="onednn_fused"):
        optimized = fxopt.optimize(model, "default", example_inputs=inputs)
    assert count(optimized, *GELUS) == 0
    fused = [n for n in optimized.graph.nodes if n.target is linear_pointwise and n.args[3] == "gelu"]
    assert len(fused) == 3
    expected = model(**inputs).last_hidden_state
    torch.testing.assert_close(optimized(**inputs)["last_hidden_state"], expected, atol=1e-4, rtol=1e-4)
