"""ChangeActivation and GeluToTanhApproximation in both graph dialects: which nodes change, how
much the outputs move, skips, and exact reverse."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fxopt
from conftest import token_inputs
from fxopt.optimization import ChangeActivation, GeluToTanhApproximation
from norm_models import (
    DIALECTS,
    assert_outputs_close,
    assert_outputs_equal,
    check_reverse,
    outputs,
    tensor_states,
    trace,
)


class Activations(nn.Module):
    """Every spelling symbolic_trace produces: modules, functions and methods."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.gelu, self.gelu_tanh = nn.GELU(), nn.GELU(approximate="tanh")
        self.relu, self.silu = nn.ReLU(), nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        g = self.gelu(h) + F.gelu(h) + self.gelu_tanh(h)
        r = self.relu(h) + torch.relu(h) + h.relu() + F.relu(h)
        return g * r + self.silu(h)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_gelu_becomes_tanh_approximation_and_back(dialect: str) -> None:
    model = Activations().eval()
    x = torch.randn(3, 6)
    gm = trace(model, (x,), dialect)
    expected, code, states, nodes = outputs(gm, x), gm.code, tensor_states(gm), len(gm.graph.nodes)
    t = GeluToTanhApproximation()

    t(gm)
    changed = ["gelu", "gelu_1"]
    assert t.report.changed == changed
    # The GELU that already approximates is not the source: skipped, with the reason.
    skipped = "gelu_tanh" if dialect == "symbolic" else "gelu_2"
    assert t.report.skipped == [(skipped, "computes gelu_tanh, not gelu")]
    assert [n.name for n in t.get_transformed_nodes(gm)] == changed
    assert len(gm.graph.nodes) == nodes
    for node in t.get_transformed_nodes(gm):
        assert node.kwargs == {"approximate": "tanh"}
    assert not t.preserves_computation
    assert_outputs_close(outputs(gm, x), expected, atol=1e-2, rtol=1e-2)  # close, not equal
    assert not torch.equal(outputs(gm, x)[0], expected[0])

    check_reverse(t, gm, (x,), expected, code, states)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_relu_becomes_gelu(dialect: str) -> None:
    model = Activations().eval()
    x = torch.randn(3, 6)
    gm = trace(model, (x,), dialect)
    expected, code, states = outputs(gm, x), gm.code, tensor_states(gm)
    t = ChangeActivation("relu", "gelu")

    t(gm)
    assert len(t.report.changed) == 4 and t.report.skipped == []
    target = torch.ops.aten.gelu.default if dialect == "export" else F.gelu
    assert {n.target for n in t.get_transformed_nodes(gm)} == {target}
    assert all(n.op == "call_function" for n in t.get_transformed_nodes(gm))
    with torch.no_grad():  # what the model computes with every ReLU a GELU
        h = model.fc(x)
        want = (2 * F.gelu(h) + F.gelu(h, approximate="tanh")) * 4 * F.gelu(h) + F.silu(h)
    torch.testing.assert_close(outputs(gm, x)[0], want)

    check_reverse(t, gm, (x,), expected, code, states)


def test_in_place_activation_on_a_shared_value_is_skipped() -> None:
    class InPlace(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.act = nn.ReLU(inplace=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x * 2
            return self.act(y) + y  # the in-place ReLU also changes what `+ y` reads

    gm = torch.fx.symbolic_trace(InPlace())
    t = ChangeActivation("relu", "silu")
    t(gm)
    assert t.report.skipped == [("act", "works in place on a value other nodes read")]


def test_tiny_bert(tiny_bert) -> None:  # type: ignore[no-untyped-def]
    """transformers' GELUActivation calls F.gelu: aten.gelu in the exported graph (BertModel
    does not trace symbolically under transformers 5)."""
    inputs = token_inputs(2, 8)
    gm = fxopt.trace(tiny_bert, input_names=list(inputs), mode="export")
    run = lambda: outputs(lambda: gm(**inputs))
    expected, code = run(), gm.code
    t = GeluToTanhApproximation()

    t(gm)
    assert len(t.report.changed) == 2  # one GELU per layer
    assert_outputs_close(run(), expected, atol=1e-2, rtol=1e-2)
    t(gm, reverse=True)
    assert_outputs_equal(run(), expected)
    assert sorted(gm.code.splitlines()) == sorted(code.splitlines())


def test_unknown_activation_is_a_value_error() -> None:
    gm = torch.fx.symbolic_trace(Activations())
    with pytest.raises(ValueError, match="unknown activation 'swish'.*known: relu"):
        ChangeActivation("swish", "relu")(gm)
