"""FuseBiasInLinear on symbolic (call_module) and exported (aten.linear) graphs of real models."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.fx
import torch.nn.functional as F
import transformers

from conftest import token_inputs
from fxopt.optimization import FuseBiasInLinear, MergeLinears, compose
from linear_models import (
    assert_independent_storage,
    assert_same_parameters,
    export,
    linear_biases,
    minilm,  # noqa: F401  (fixture)
    minilm_inputs,
    node_count,
    param_states,
    tiny_models,
)


class Heads(torch.nn.Module):
    """Three Linears on one input (one without a bias, one with a single output), then one more."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(6, 4)
        self.score = torch.nn.Linear(6, 1)
        self.plain = torch.nn.Linear(6, 4, bias=False)
        self.out = torch.nn.Linear(9, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.cat([self.a(x), self.score(x), self.plain(x)], -1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_symbolic_graph_shares_one_ones_column_per_input(dtype: torch.dtype) -> None:
    model = Heads().to(dtype).eval()
    eager_before = param_states(model)
    gm = torch.fx.symbolic_trace(model)
    code, nodes, biases = gm.code, node_count(gm), linear_biases(gm)
    x = torch.randn(2, 5, 6, dtype=dtype)
    expected = gm(x)
    t = FuseBiasInLinear()

    t(gm)
    pads = [n for n in gm.graph.nodes if n.target is F.pad]
    assert len(pads) == 2  # one for x (shared by a and score), one for the cat
    assert node_count(gm) == nodes + 2
    assert {n.name for n in t.get_transformed_nodes(gm)} == {"pad", "a", "score", "pad_1", "out"}
    assert dict(t.report.skipped) == {"plain": "has no bias"}
    assert gm.a.bias is None and gm.a.in_features == 7 and gm.a.weight.shape == (4, 7)
    assert gm.score.weight.shape == (1, 7)
    assert torch.equal(gm.a.weight[:, -1], model.a.bias)
    assert F.pad(x, (0, 1), value=1.0).dtype == dtype
    torch.testing.assert_close(gm(x), expected)

    copied = copy.deepcopy(gm)
    for restored in (copied, gm):
        t(restored, reverse=True)
        assert restored.code == code
        assert linear_biases(restored) == biases
        assert torch.equal(restored(x), expected)
        assert_same_parameters(restored, eager_before, same_storage=False)
        assert_independent_storage(restored)
    assert_same_parameters(model, eager_before, same_storage=True)


def test_exported_bert() -> None:
    model = tiny_models()["bert"]
    eager_before = param_states(model)
    inputs = token_inputs(2, 7)
    gm = export(model, inputs)
    expected = gm(**inputs).last_hidden_state
    gm_before = param_states(gm)
    nodes = node_count(gm)
    t = FuseBiasInLinear()

    t(gm)
    linears = [n for n in gm.graph.nodes if n.target == torch.ops.aten.linear.default]
    pads = [n for n in gm.graph.nodes if n.target == torch.ops.aten.constant_pad_nd.default]
    # Per layer: q/k/v share a padded input; attention output, intermediate and output have one
    # each; plus the pooler.
    assert len(linears) == 13 and len(pads) == 2 * 4 + 1
    assert all(len(n.args) == 2 and n.args[0] in pads for n in linears)
    assert node_count(gm) == nodes - 13 + len(pads)  # bias get_attr nodes go
    linear_biases = {n for n in gm_before if n.endswith(".bias") and "LayerNorm" not in n}
    assert len(linear_biases) == 13 and not linear_biases & set(dict(gm.named_parameters()))
    torch.testing.assert_close(gm(**inputs).last_hidden_state, expected)

    copied = copy.deepcopy(gm)
    t(copied, reverse=True)
    t(gm, reverse=True)
    for restored in (copied, gm):
        assert torch.equal(restored(**inputs).last_hidden_state, expected)
        assert_same_parameters(restored, gm_before, same_storage=False)
        assert_independent_storage(restored)
    assert_same_parameters(model, eager_before, same_storage=True)


def test_bias_free_llama_is_left_alone() -> None:
    model = tiny_models()["llama"]
    inputs = token_inputs(2, 7)
    gm = export(model, inputs)
    code = gm.code
    t = FuseBiasInLinear()
    t(gm)
    assert gm.code == code
    assert t.report is not None and t.report.changed == []
    assert {reason for _, reason in t.report.skipped} == {"has no bias"}


def test_pretrained_minilm(minilm: transformers.BertModel) -> None:  # noqa: F811
    eager_before = param_states(minilm)
    inputs = minilm_inputs()
    gm = export(minilm, inputs)
    expected = gm(**inputs).last_hidden_state
    t = FuseBiasInLinear()
    t(gm)
    assert len(t.get_transformed_nodes(gm)) == 6 * (6 + 4) + 2  # layers x (linears + pads), pooler
    torch.testing.assert_close(gm(**inputs).last_hidden_state, expected, rtol=1e-5, atol=1e-5)
    t(gm, reverse=True)
    assert torch.equal(gm(**inputs).last_hidden_state, expected)
    assert_same_parameters(minilm, eager_before, same_storage=True)


def test_after_merge_linears_in_one_composition() -> None:
    """The merged q/k/v Linear gets the bias column too; reversing the composition undoes the
    fusion first, then the merge."""
    model = tiny_models()["bert"]
    inputs = token_inputs(2, 7)
    gm = export(model, inputs)
    code = gm.code
    expected = gm(**inputs).last_hidden_state
    gm_before = param_states(gm)
    pipeline = compose(MergeLinears(), FuseBiasInLinear())
    pipeline(gm)
    merged = [n for n in gm.graph.nodes if n.name.endswith("_merged")]
    assert len(merged) == 2 and all(n.args[0].target == torch.ops.aten.constant_pad_nd.default
                                    for n in merged)  # fmt: skip
    torch.testing.assert_close(gm(**inputs).last_hidden_state, expected)
    pipeline(gm, reverse=True)
    assert torch.equal(gm(**inputs).last_hidden_state, expected)
    assert_same_parameters(gm, gm_before, same_storage=False)
    # The same statements; recreated get_attr reads sit next to their Linear, not at the top.
    assert sorted(gm.code.splitlines()) == sorted(code.splitlines())
