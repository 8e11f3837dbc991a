"""Dynamo traces keep no copy of the model's tensors unless a real-value run reads them.

Torch's export copies every pre-existing tensor so that running part of the graph on real
values (`assume_constant_result`, a branch on a constant tensor) cannot write into the model;
fxopt copies only when such a run happens. The trace must stay as it was, and such a run must
still leave the model's tensors untouched.
"""

from __future__ import annotations


import pytest
import torch
import transformers
from torch import nn

import fxopt
from conftest import build_model, counted_calls, tiny_bert_config, token_inputs, trace_without


@pytest.fixture()
def copies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the tensor copies Dynamo's export keeps for real-value runs."""
    from torch._dynamo.variables import builder

    return counted_calls(monkeypatch, builder, "clone_input")


def test_a_dynamo_trace_copies_no_weight_and_keeps_its_graph(copies: list[int]) -> None:
    model = build_model(transformers.BertModel, tiny_bert_config())
    inputs = token_inputs(2, 9)
    uncopied = fxopt.trace(model, example_inputs=inputs, mode="dynamo")
    assert copies == []

    copying = trace_without("tensors_uncopied", model, inputs)
    assert len(copies) >= 2 * len(list(model.parameters()))
    assert uncopied.code == copying.code
    longer = token_inputs(3, 13)
    with torch.no_grad():
        expected = model(**longer).last_hidden_state
        assert torch.equal(uncopied(**longer).last_hidden_state, expected)
        assert torch.equal(copying(**longer).last_hidden_state, expected)


@torch._dynamo.assume_constant_result
def _doubled_sum(t: torch.Tensor) -> float:
    t.mul_(2)  # a real-value run that writes into what it reads
    return float(t.sum())


class _ScaledByBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(3))
        self.linear = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * _doubled_sum(self.scale)


def test_a_real_value_run_reads_a_copy_and_leaves_the_model_alone(copies: list[int]) -> None:
    model = _ScaledByBuffer().eval()
    x = torch.randn(2, 3)
    graph = fxopt.trace(model, example_inputs={"x": x}, mode="dynamo")
    assert torch.equal(model.scale, torch.ones(3))
    assert len(copies) >= 1
    with torch.no_grad():
        assert torch.allclose(graph(x), model.linear(x) * 6.0)
