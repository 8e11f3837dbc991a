"""Dynamo traces skip the shape guard function export throws away, and nothing else does.

The skip must leave the traced graph as it was (same code, same outputs, same refusal of
inputs the trace cannot take), must not reach exports with dynamic-shape constraints (that
guard is how they report a specialised dimension) and must not reach torch.compile.
"""

from __future__ import annotations


import pytest
import torch
import transformers
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import fxopt
from conftest import build_model, counted_calls, tiny_bert_config, token_inputs, trace_without
from fxopt.tracing.unbuilt_guards import shape_guards_unbuilt


@pytest.fixture()
def shape_guards_built(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the shape guard functions Dynamo produces."""
    return counted_calls(monkeypatch, ShapeEnv, "produce_guards_verbose")


def test_a_dynamo_trace_builds_no_shape_guard_and_keeps_its_graph(shape_guards_built: list[int]) -> None:
    model = build_model(transformers.BertModel, tiny_bert_config())
    inputs = token_inputs(2, 9)
    skipped = fxopt.trace(model, example_inputs=inputs, mode="dynamo")
    assert shape_guards_built == []

    full = trace_without("shape_guards_unbuilt", model, inputs)
    assert len(shape_guards_built) >= 1
    assert skipped.code == full.code
    longer = token_inputs(3, 13)
    with torch.no_grad():
        expected = model(**longer).last_hidden_state
        assert torch.equal(skipped(**longer).last_hidden_state, expected)
        assert torch.equal(full(**longer).last_hidden_state, expected)


def test_an_input_the_trace_fixed_is_still_refused() -> None:
    model = build_model(transformers.BertModel, tiny_bert_config())
    inputs = token_inputs(2, 9)
    traced = fxopt.trace(model, example_inputs=inputs, mode="dynamo", dynamic=False)
    with pytest.raises(AssertionError, match="input_ids"):
        traced(**token_inputs(2, 10))


def test_an_export_with_constraints_still_reports_a_specialised_dimension() -> None:
    def fixed_batch(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(4, -1) * 2

    batch = torch.export.Dim("batch")
    with shape_guards_unbuilt(), pytest.raises(Exception, match="batch"):
        torch._dynamo.export(fixed_batch, dynamic_shapes={"x": {0: batch}})(torch.randn(4, 3))


def test_torch_compile_inside_the_context_keeps_its_shape_guards(shape_guards_built: list[int]) -> None:
    torch._dynamo.reset()

    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    compiled = torch.compile(double, backend="eager", dynamic=True)
    with shape_guards_unbuilt():
        assert torch.equal(compiled(torch.ones(3)), torch.full((3,), 2.0))
    assert len(shape_guards_built) >= 1
    torch._dynamo.reset()
