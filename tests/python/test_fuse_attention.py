"""FuseAttentionToSdpa on users' attention modules (symbolic and exported) and on transformers'
eager attention (BERT, GPT-2, exported): SDPA nodes per attention, outputs against eager, skips
with their reasons, and exact reverse."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import transformers
from torch import nn

import fxopt
from conftest import build_model, tiny_bert_config, tiny_gpt2_config, token_inputs
from fxopt.optimization import FuseAttentionToSdpa
from norm_models import DIALECTS, assert_outputs_close, check_reverse, outputs, tensor_states, trace

SDPA = (F.scaled_dot_product_attention, torch.ops.aten.scaled_dot_product_attention.default)
MATMUL = (torch.matmul, torch.ops.aten.matmul.default)
SOFTMAX = (F.softmax, torch.ops.aten.softmax.int, torch.ops.aten._softmax.default)


def count(gm: torch.fx.GraphModule, targets: tuple[Any, ...], methods: tuple[str, ...] = ()) -> int:
    """call_function nodes of `targets` (also the `@` operator for matmul) and call_method nodes
    named in `methods`."""
    import operator

    funcs = targets + ((operator.matmul,) if torch.matmul in targets else ())
    return sum(
        (n.op == "call_function" and n.target in funcs) or (n.op == "call_method" and n.target in methods)
        for n in gm.graph.nodes
    )


class TwoAttentions(nn.Module):
    """Two self-attentions in the spellings users write. The first: `/ math.sqrt(d)`,
    masked_fill(mask == 0, -inf) with a causal mask, F.softmax in float32 cast back with
    `.to(q.dtype)`, nn.Dropout. The second: the scale on q, k.permute(0, 1, 3, 2), an additive
    float mask, nn.Softmax(dim=-1), F.dropout(training=self.training)."""

    def __init__(self, hidden: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.qkv1, self.qkv2 = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.drop = nn.Dropout(0.1)
        self.softmax = nn.Softmax(dim=-1)

    def split(self, qkv: nn.Linear, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, t, c = x.shape
        q, k, v = qkv(x).split(c, dim=2)
        return tuple(y.view(b, t, self.heads, self.head_dim).transpose(1, 2) for y in (q, k, v))

    def merge(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return y.transpose(1, 2).reshape(x.shape)

    def forward(self, x: torch.Tensor, causal: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        q, k, v = self.split(self.qkv1, x)
        a = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        a = a.masked_fill(causal == 0, float("-inf"))
        a = F.softmax(a, dim=-1, dtype=torch.float32).to(q.dtype)
        h = self.merge(self.drop(a) @ v, x)
        q, k, v = self.split(self.qkv2, h)
        a = self.softmax((q * self.head_dim**-0.5) @ k.permute(0, 1, 3, 2) + bias)
        a = F.dropout(a, p=0.1, training=self.training)
        return self.out(self.merge(a @ v, x))


def attention_inputs(batch: int = 2, length: int = 6) -> tuple[torch.Tensor, ...]:
    x = torch.randn(batch, length, 32)
    causal = torch.tril(torch.ones(length, length))
    bias = torch.zeros(batch, 1, 1, length)
    bias[1, ..., -2:] = torch.finfo(torch.float32).min  # padding keys of the second sequence
    return x, causal, bias


@pytest.mark.parametrize("dialect", DIALECTS)
def test_user_attention_module(dialect: str) -> None:
    model = TwoAttentions().eval()
    args = attention_inputs()
    gm = trace(model, args, dialect)
    with torch.no_grad():
        eager = model(*args)
    expected, code, states = outputs(gm, *args), gm.code, tensor_states(gm)
    assert count(gm, MATMUL, ("matmul",)) == 4 and count(gm, SOFTMAX) >= 1
    t = FuseAttentionToSdpa()

    t(gm)
    assert t.report is not None and len(t.report.changed) == 2
    # The first product of each attention is no attention's end: reported, not changed.
    assert len(t.report.skipped) == 2
    assert all("is not a softmax" in reason for _, reason in t.report.skipped)
    assert count(gm, SDPA) == 2
    assert count(gm, MATMUL, ("matmul",)) == 0 and count(gm, SOFTMAX) == 0
    assert not any(n.op == "call_module" and n.target in ("drop", "softmax") for n in gm.graph.nodes)
    sdpa = [n for n in gm.graph.nodes if n.target in SDPA]
    assert [n.kwargs["scale"] for n in sdpa] == pytest.approx([1 / math.sqrt(8), 8**-0.5])
    assert_outputs_close(outputs(gm, *args), [eager], atol=1e-5, rtol=1e-5)

    check_reverse(t, gm, args, expected, code, states)
    assert gm.code == code  # every statement back in its place


def test_symbolic_graph_code_after_fusion() -> None:
    """What the user sees: k untransposed, the masked_fill turned into an additive mask, scale
    as a number."""
    gm = torch.fx.symbolic_trace(TwoAttentions().eval())
    FuseAttentionToSdpa()(gm)
    assert "torch.where(eq, -inf, 0.0)" in gm.code
    assert "scaled_dot_product_attention(transpose, transpose_1, transpose_2, attn_mask = attn_mask" in gm.code


class ReturnsWeights(nn.Module):
    """An attention that also returns its probabilities (like output_attentions=True)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = (q @ k.transpose(-2, -1) * 0.5).softmax(-1)
        return probs @ v, probs


def test_skips_attention_whose_weights_are_returned() -> None:
    gm = torch.fx.symbolic_trace(ReturnsWeights())
    code = gm.code
    t = FuseAttentionToSdpa()
    t(gm)
    assert t.report is not None and t.report.changed == []
    assert ("matmul_1", "the intermediate value 'softmax' is also read by 'output' outside the attention") in (
        t.report.skipped
    )
    assert gm.code == code


def test_skips_dropout_in_training() -> None:
    model = TwoAttentions().train()
    gm = torch.fx.symbolic_trace(model)  # F.dropout(training=True) and nn.Dropout in training
    code = gm.code
    t = FuseAttentionToSdpa()
    t(gm)
    assert t.report is not None and t.report.changed == []
    reasons = [reason for _, reason in t.report.skipped]
    assert any(r.startswith("the dropout 'drop' is active") for r in reasons)
    assert any(r.startswith("the dropout 'dropout' is active") for r in reasons)
    assert gm.code == code


def export(model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.fx.GraphModule:
    return fxopt.trace(model, input_names=list(inputs), example_inputs=inputs, mode="export")


@pytest.mark.parametrize(
    "model_class, config",
    [
        (transformers.BertModel, tiny_bert_config(attn_implementation="eager")),
        (transformers.GPT2Model, tiny_gpt2_config(attn_implementation="eager", use_cache=False)),
    ],
    ids=["bert", "gpt2"],
)
def test_transformers_eager_attention(model_class: type, config: transformers.PretrainedConfig) -> None:
    model = build_model(model_class, config)
    assert model.config._attn_implementation == "eager"
    inputs = token_inputs(2, 8)  # the second row ends in two padding tokens
    with torch.no_grad():
        eager = model(**inputs).last_hidden_state
        unmasked = model(**(inputs | {"attention_mask": torch.ones_like(inputs["attention_mask"])}))
    assert not torch.allclose(eager, unmasked.last_hidden_state, atol=1e-3)  # masking matters
    gm = export(model, inputs)
    expected, code = gm(**inputs).last_hidden_state, gm.code
    layers = config.num_hidden_layers
    assert count(gm, MATMUL) == 2 * layers and count(gm, SOFTMAX) == layers
    t = FuseAttentionToSdpa()

    t(gm)
    assert t.report is not None and len(t.report.changed) == layers
    assert count(gm, SDPA) == layers
    assert count(gm, MATMUL) == 0 and count(gm, SOFTMAX) == 0
    for node in t.get_transformed_nodes(gm):
        assert node.target is torch.ops.aten.scaled_dot_product_attention.default
        assert node.kwargs["scale"] == pytest.approx((config.hidden_size // config.num_attention_heads) ** -0.5)
        assert node.kwargs["attn_mask"] is not None  # the padding mask, passed through
    torch.testing.assert_close(gm(**inputs).last_hidden_state, eager, atol=1e-5, rtol=1e-5)

    copied = copy.deepcopy(gm)
    for restored in (t(copied, reverse=True), t(gm, reverse=True)):
        assert restored.code == code
        assert torch.equal(restored(**inputs).last_hidden_state, expected)
        assert not t.get_transformed_nodes(restored)
