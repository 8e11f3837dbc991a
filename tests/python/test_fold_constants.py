"""FoldConstants on a user's module that transforms its weights in forward, in both dialects."""

from __future__ import annotations

import pytest
import torch
import torch.fx

import fxopt
from conftest import token_inputs
from fxopt.optimization import EliminateDeadCode, FoldConstants, compose


class ScaledProjection(torch.nn.Module):
    """Computes its effective weight and a bias from a buffer on every call."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8, 6))
        self.register_buffer("gain", torch.linspace(0.5, 1.5, 8))

    def forward(self, x):  # type: ignore[no-untyped-def]  # fx keeps string annotations
        effective = (self.weight * self.gain[:, None]).t()
        return x @ effective + torch.log1p(self.gain)


@pytest.mark.parametrize("mode", ["symbolic", "export"])
def test_weight_arithmetic_is_computed_once_and_reverses_exactly(mode: str) -> None:
    model = ScaledProjection().eval()
    x = torch.randn(5, 6)
    gm = fxopt.trace(model, example_inputs=(x,), mode=mode)
    expected = gm(x)
    code_before = gm.code
    params_before = {k: v.clone() for k, v in gm.state_dict().items()}
    fold = FoldConstants()
    t = compose(fold, EliminateDeadCode())

    t(gm)
    # Each value the matmul and the add read from stored tensors only is now one stored tensor
    # (symbolic_trace already computed the buffer's part while tracing; export did not).
    folded = [n for n in gm.graph.nodes if n.op == "get_attr" and str(n.target).startswith("_folded_")]
    assert len(folded) >= 1 and len(fold.report.changed) == len(folded)
    calls = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    assert len(calls) == 2  # only what reads x is left: the matmul and the add
    with torch.no_grad():
        assert torch.equal(gm(x), expected)  # the same ops, run once ahead of time

    t(gm, reverse=True)
    assert gm.code == code_before
    assert torch.equal(gm(x), expected)
    after = gm.state_dict()
    assert sorted(after) == sorted(params_before)
    assert all(torch.equal(after[k], v) for k, v in params_before.items())


def test_bert_buffer_slices_fold_in_a_dynamo_graph_and_reverse(tiny_bert: torch.nn.Module) -> None:
    inputs = token_inputs(2, 8)
    gm = fxopt.trace(tiny_bert, example_inputs=inputs, mode="dynamo")
    expected = gm(**inputs)
    code_before = gm.code
    fold = FoldConstants()
    t = compose(fold, EliminateDeadCode())

    t(gm)
    # BERT slices its token-type buffer to the sequence length: constant in a static trace.
    assert len(fold.report.changed) >= 1
    for name in fold.report.changed:
        node = next(n for n in gm.graph.nodes if n.name == name)
        assert node.op == "get_attr" and isinstance(getattr(gm, node.target), torch.Tensor)
    actual = gm(**inputs)
    assert torch.equal(actual["last_hidden_state"], expected["last_hidden_state"])

    t(gm, reverse=True)
    assert gm.code == code_before
    assert torch.equal(gm(**inputs)["last_hidden_state"], expected["last_hidden_state"])
