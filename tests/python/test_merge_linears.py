"""MergeLinears on symbolic (call_module) and exported (aten.linear) graphs of real models."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.fx
import transformers

from conftest import build_model, linear_calls, tiny_gpt2_config, token_inputs
import fxopt
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


class Attention(torch.nn.Module):
    """q / k / v read the same input (v without a bias); `shared` is called twice."""

    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Linear(8, 6)
        self.k = torch.nn.Linear(8, 6)
        self.v = torch.nn.Linear(8, 4, bias=False)
        self.shared = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = torch.softmax(q @ k.transpose(-1, -2), -1)
        return torch.cat([scores @ v, self.shared(x), self.shared(self.shared(x))], -1)


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = Attention()
        self.gate = torch.nn.Linear(20, 5)  # root-level modules, paths without dots
        self.up = torch.nn.Linear(20, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.attn(x)
        return self.gate(h) * self.up(h)


def test_symbolic_graph_merges_and_reverses_exactly() -> None:
    model = Model().eval()
    eager_before = param_states(model)
    gm = torch.fx.symbolic_trace(model)
    code, nodes, biases = gm.code, node_count(gm), linear_biases(gm)
    x = torch.randn(2, 3, 8)
    expected = gm(x)
    t = MergeLinears()

    t(gm)
    assert node_count(gm) == nodes + 2  # one merged Linear per group; members become slices
    assert [n.name for n in t.get_transformed_nodes(gm)] == [
        "attn_q_k_v_merged", "attn_q", "attn_k", "attn_v", "gate_up_merged", "gate", "up",
    ]  # fmt: skip
    assert [n.target for n in gm.graph.nodes if n.name in ("attn_q", "gate")] == [torch.narrow] * 2
    merged = gm.get_submodule("attn.q_k_v_merged")
    assert (merged.in_features, merged.out_features) == (8, 16)
    assert torch.equal(merged.bias[12:], torch.zeros(4))  # v had no bias
    assert isinstance(gm.get_submodule("gate_up_merged"), torch.nn.Linear)
    assert not hasattr(gm.attn, "q") and not hasattr(gm, "gate")
    reasons = dict(t.report.skipped)
    assert "shared by 3 Linears" in reasons["attn_shared"]
    torch.testing.assert_close(gm(x), expected)

    t(gm, reverse=True)
    assert gm.code == code
    assert not t.get_transformed_nodes(gm)
    assert linear_biases(gm) == biases  # v.bias is None again, not zeros
    assert torch.equal(gm(x), expected)
    assert_same_parameters(gm, eager_before, same_storage=False)
    assert_independent_storage(gm)
    assert_same_parameters(model, eager_before, same_storage=True)  # the caller's model


# Per layer, bert merges q/k/v (with biases: 6 get_attr become 2, plus the merged Linear);
# llama merges q/k/v (no biases: 3 become 1) and gate/up (2 become 1), two layers each.
@pytest.mark.parametrize(
    "name, groups, members, node_delta", [("bert", 2, 6, -6), ("llama", 4, 10, -2)]
)
def test_exported_transformers_models(
    name: str, groups: int, members: int, node_delta: int
) -> None:
    model = tiny_models()[name]
    eager_before = param_states(model)
    inputs = token_inputs(2, 7)
    gm = export(model, inputs)
    expected = gm(**inputs).last_hidden_state
    gm_before = param_states(gm)
    code, nodes = gm.code, node_count(gm)
    t = MergeLinears()

    t(gm)
    changed = t.get_transformed_nodes(gm)
    targets = [n.target for n in changed]
    assert targets.count(torch.ops.aten.linear.default) == groups
    assert targets.count(torch.ops.aten.slice.Tensor) == members
    assert node_count(gm) == nodes + node_delta
    torch.testing.assert_close(gm(**inputs).last_hidden_state, expected)
    assert len(t.report.skipped) > 0  # the Linears that read their input alone

    # Reverse on a deep copy (a later bridge session, with new tensor handles) and in place.
    copied = copy.deepcopy(gm)
    t(copied, reverse=True)
    t(gm, reverse=True)
    for restored in (copied, gm):
        assert restored.code == code  # recreated get_attr reads back where export put them
        assert torch.equal(restored(**inputs).last_hidden_state, expected)
        assert_same_parameters(restored, gm_before, same_storage=False)
        assert_independent_storage(restored)
        assert not t.get_transformed_nodes(restored)
    assert_same_parameters(model, eager_before, same_storage=True)


def test_gpt2_conv1d_is_not_a_linear() -> None:
    """GPT-2 projects with transformers' Conv1D (addmm in the exported graph; c_attn is already
    one fused q/k/v projection): nothing to merge. Its lm_head Linear shares its weight with the
    token embedding, which the pass reports instead of merging."""
    model = build_model(transformers.GPT2LMHeadModel, tiny_gpt2_config(use_cache=False))
    inputs = token_inputs(2, 7)
    gm = export(model, inputs)
    code = gm.code
    t = MergeLinears()
    t(gm)
    assert gm.code == code
    assert t.report is not None and t.report.changed == []
    assert [reason for _, reason in t.report.skipped] == [
        "tensor 'lm_head.weight' is also read elsewhere"
    ]


def test_pretrained_minilm(minilm: transformers.BertModel) -> None:  # noqa: F811
    eager_before = param_states(minilm)
    inputs = minilm_inputs()
    gm = export(minilm, inputs)
    expected = gm(**inputs).last_hidden_state
    t = MergeLinears()
    t(gm)
    merged = [n for n in t.get_transformed_nodes(gm) if n.target == torch.ops.aten.linear.default]
    assert len(merged) == minilm.config.num_hidden_layers
    torch.testing.assert_close(gm(**inputs).last_hidden_state, expected, rtol=1e-5, atol=1e-5)
    t(gm, reverse=True)
    assert torch.equal(gm(**inputs).last_hidden_state, expected)
    assert_same_parameters(minilm, eager_before, same_storage=True)


def test_reverse_follows_the_merged_weights() -> None:
    """Reverse slices the merged tensors as they are now: after .double() the restored Linears
    are double too, and a change to a merged weight shows in the member it belongs to."""
    model = Model().eval()
    gm = torch.fx.symbolic_trace(model)
    t = MergeLinears()
    t(gm)
    gm.double()
    with torch.no_grad():
        gm.gate_up_merged.weight[5:] *= 2  # rows of `up`
    t(gm, reverse=True)
    assert gm.up.weight.dtype == torch.float64
    assert torch.equal(gm.up.weight, model.up.weight.double() * 2)
    assert torch.equal(gm.gate.weight, model.gate.weight.double())


def test_composes_with_itself_out_of_place() -> None:
    model = Model().eval()
    gm = torch.fx.symbolic_trace(model)
    code = gm.code
    x = torch.randn(2, 3, 8)
    pipeline = compose(MergeLinears(), inplace=False)
    merged = pipeline(gm)
    assert gm.code == code  # inplace=False leaves the input alone
    torch.testing.assert_close(merged(x), gm(x))
    restored = pipeline(merged, reverse=True)
    assert restored.code == code
    assert torch.equal(restored(x), gm(x))


class TiedPair(torch.nn.Module):
    """Two Linears sharing one weight Parameter (biases of their own), reading one input."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 3)
        self.b = torch.nn.Linear(4, 3)
        self.b.weight = self.a.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) * self.b(x)


@pytest.mark.parametrize("transformation", [MergeLinears, FuseBiasInLinear])
def test_tied_weights_come_back_tied(transformation: type) -> None:
    torch.manual_seed(0)
    gm = torch.fx.symbolic_trace(TiedPair().eval())
    assert gm.a.weight is gm.b.weight
    x = torch.randn(2, 4)
    expected, code, nodes, before = gm(x), gm.code, node_count(gm), param_states(gm)
    t = transformation()

    out = t(copy.deepcopy(gm))  # reverse in a later bridge session, as after a deep copy
    assert node_count(out) == nodes + 1  # the merged Linear / the ones column
    assert len(t.get_transformed_nodes(out)) == 3
    torch.testing.assert_close(out(x), expected)

    restored = t(out, reverse=True)
    assert restored.a.weight is restored.b.weight  # the tie comes back
    assert restored.code == code and torch.equal(restored(x), expected)
    assert_same_parameters(restored, before, same_storage=False)


def _albert() -> transformers.AlbertModel:
    """A small ALBERT: one layer's weights serve every one of its three layers."""
    config = transformers.AlbertConfig(
        vocab_size=100, embedding_size=16, hidden_size=32, num_hidden_layers=3,
        num_attention_heads=4, intermediate_size=37, max_position_embeddings=64,
    )  # fmt: skip
    return build_model(transformers.AlbertModel, config)


def _weight_read(gm: torch.fx.GraphModule, node: torch.fx.Node) -> str:
    return str(node.target) if node.op == "call_module" else str(node.args[1].target)


@pytest.mark.parametrize("mode", ["dynamo", "sized"])
def test_albert_shared_query_key_value_merge_once_for_every_layer(mode: str) -> None:
    model = _albert()
    inputs = token_inputs(2, 8)
    with torch.no_grad():
        eager = model(**inputs).last_hidden_state
    gm = fxopt.trace(model, example_inputs=inputs, mode=mode)
    code, nodes, before = gm.code, node_count(gm), param_states(gm)
    assert len(linear_calls(gm)) == 20  # 3 layers x 6 + 2
    t = MergeLinears()

    out = t(copy.deepcopy(gm))
    transformed = set(t.get_transformed_nodes(out))
    merged = [n for n in linear_calls(out) if n in transformed]
    assert len(merged) == 3  # one merged q/k/v call per layer...
    assert len({_weight_read(out, n) for n in merged}) == 1  # ...all reading one merged weight
    assert len(linear_calls(out)) == 20 - 9 + 3
    if mode == "dynamo":  # six weight reads fewer; module calls read none, and the split stays
        assert node_count(out) < nodes
    shared = {name for name, _ in gm.named_parameters() if "query" in name}
    assert len(shared) == 2 and not shared & dict(out.named_parameters()).keys()
    with torch.no_grad():
        torch.testing.assert_close(out(**inputs)["last_hidden_state"], eager, atol=1e-5, rtol=1e-5)

    restored = t(out, reverse=True)
    assert restored.code == code
    assert_same_parameters(restored, before, same_storage=False)
    with torch.no_grad():
        assert torch.equal(restored(**inputs)["last_hidden_state"], gm(**inputs)["last_hidden_state"])
