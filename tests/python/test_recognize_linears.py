"""RecognizeLinears on GPT-2 (Conv1D's addmm, torch.export) and on a user's x @ W.t() + b."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.fx
import transformers

import fxopt
from conftest import build_model, tiny_gpt2_config, token_inputs
from fxopt.optimization import (
    ChangePrecision,
    FuseBiasInLinear,
    MergeLinears,
    RecognizeLinears,
)
from linear_models import assert_same_parameters, param_states

LAYERS = 2


def gpt2_config() -> transformers.GPT2Config:
    return tiny_gpt2_config(n_layer=LAYERS, n_embd=64, n_head=4, use_cache=False)


def count(gm: torch.fx.GraphModule, target: Any) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target == target)


def first_output(result: Any) -> torch.Tensor:
    return result[0] if isinstance(result, tuple) else next(iter(result.values()))


def stored(gm: torch.fx.GraphModule, node: torch.fx.Node) -> torch.Tensor:
    assert node.op == "get_attr"
    value: Any = gm
    for part in str(node.target).split("."):
        value = getattr(value, part)
    return value


aten = torch.ops.aten


@pytest.mark.parametrize("model_class", [transformers.GPT2Model, transformers.GPT2LMHeadModel])
@pytest.mark.parametrize("dynamic", [True, False])
def test_gpt2_conv1d_becomes_linear_and_reverses_exactly(model_class: Any, dynamic: bool) -> None:
    model = build_model(model_class, gpt2_config())
    inputs = token_inputs(2, 8)
    gm = fxopt.trace(model, mode="export", dynamic=dynamic)
    before = param_states(gm)
    expected = first_output(gm(**inputs))
    views, linears = count(gm, aten.view.default), count(gm, aten.linear.default)
    assert count(gm, aten.addmm.default) == 4 * LAYERS  # c_attn, c_proj, c_fc, mlp.c_proj
    t = RecognizeLinears()

    t(gm)
    assert len(t.report.changed) == 4 * LAYERS
    assert t.report.skipped == []  # attention runs in SDPA: no other matrix product
    assert count(gm, aten.addmm.default) == 0
    assert count(gm, aten.linear.default) == linears + 4 * LAYERS
    # Static shapes prove Conv1D's views only flatten the leading dims: both go. Dynamic
    # exports record symbolic sizes, which prove nothing, so the views stay around the Linear.
    assert count(gm, aten.view.default) == views - (0 if dynamic else 2 * 4 * LAYERS)
    prefix = "transformer." if hasattr(gm, "transformer") else ""
    c_attn = gm.get_submodule(prefix + "h.0.attn.c_attn")
    # A view of the Conv1D's weight, not a copy: the graph holds no more bytes than the model.
    assert torch.equal(c_attn.weight_t, c_attn.weight.t())
    assert c_attn.weight_t.untyped_storage().data_ptr() == c_attn.weight.untyped_storage().data_ptr()
    assert isinstance(c_attn.weight_t, torch.nn.Parameter)
    with torch.no_grad():
        eager = first_output(model(**inputs))
    torch.testing.assert_close(first_output(gm(**inputs)), eager, rtol=1e-5, atol=1e-5)

    t(gm, reverse=True)
    assert count(gm, aten.addmm.default) == 4 * LAYERS
    assert count(gm, aten.view.default) == views
    assert not hasattr(c_attn, "weight_t")
    assert_same_parameters(gm, before, same_storage=True)
    assert torch.equal(first_output(gm(**inputs)), expected)


def test_linear_passes_fire_on_gpt2_once_recognized() -> None:
    model = build_model(transformers.GPT2LMHeadModel, gpt2_config())
    inputs = token_inputs(2, 8)
    gm = fxopt.trace(model, mode="export", dynamic=False)
    expected = first_output(gm(**inputs))
    fuse = FuseBiasInLinear()
    fuse(copy.deepcopy(gm))
    assert fuse.report.changed == []  # nothing to fire on before: lm_head has no bias

    RecognizeLinears()(gm)
    probe = copy.deepcopy(gm)
    fuse(probe)
    assert sum(name.startswith("linear") for name in fuse.report.changed) == 4 * LAYERS
    torch.testing.assert_close(first_output(probe(**inputs)), expected, rtol=1e-5, atol=1e-5)
    merge = MergeLinears()
    merge(copy.deepcopy(gm))  # GPT-2 has one projection per input: considered, nothing to merge
    reasons = dict(merge.report.skipped)
    assert reasons.pop("linear") == "tensor 'lm_head.weight' is also read elsewhere"  # tied
    assert list(reasons.values()) == [
        "no other Linear with the same dtype, device and requires_grad reads its input"
    ] * (4 * LAYERS)

    ChangePrecision(torch.bfloat16)(gm)
    low = [n for n in gm.graph.nodes if n.target == aten.linear.default]
    assert len(low) == 4 * LAYERS + 1
    assert all(stored(gm, n.args[1]).dtype == torch.bfloat16 for n in low)
    cosine = torch.nn.functional.cosine_similarity(
        first_output(gm(**inputs)).flatten(), expected.flatten(), dim=0
    )
    assert cosine > 0.999


class Projections(torch.nn.Module):
    """Three hand-written Linears on one input, in three spellings, and an attention product."""

    def __init__(self) -> None:
        super().__init__()
        self.wq = torch.nn.Parameter(torch.randn(6, 8))
        self.bq = torch.nn.Parameter(torch.randn(6))
        self.wk = torch.nn.Parameter(torch.randn(6, 8))
        self.register_buffer("bk", torch.randn(6))
        self.wv = torch.nn.Parameter(torch.randn(8, 4))  # stored [in, out], as in Conv1D

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = x @ self.wq.t() + self.bq
        k = self.bk + torch.matmul(x, self.wk.T)
        v = x.matmul(self.wv)
        scores = torch.softmax(q @ k.transpose(-1, -2), -1)
        return scores @ v


def test_user_module_in_symbolic_mode_then_merge_linears() -> None:
    model = Projections().eval()
    gm = fxopt.trace(model, mode="symbolic")
    before = param_states(gm)
    code = gm.code
    x = torch.randn(2, 5, 8)
    expected = gm(x)
    recognize, merge = RecognizeLinears(), MergeLinears()

    recognize(gm)
    assert len(recognize.report.changed) == 3
    assert {reason for _, reason in recognize.report.skipped} == {
        "its second operand is not a stored weight (a get_attr tensor, or one transposed)"
    }  # the two attention products
    linears = [n for n in gm.graph.nodes if n.target == torch._C._nn.linear]
    assert len(linears) == 3
    assert [n.args[1].target for n in linears] == ["wq", "wk", "wv_t"]  # only wv is copied
    assert count(gm, torch.matmul) == 0 and gm.wv_t.shape == (4, 8)
    with torch.no_grad():
        torch.testing.assert_close(gm(x), model(x), rtol=1e-5, atol=1e-5)

    merge(gm)
    # q and v merge (v gets zero bias rows); k's bias is a buffer, not a parameter: kept apart.
    assert merge.report.changed == ["wq_wv_t_merged", "linear", "linear_2"]
    assert [name for name, _ in merge.report.skipped] == ["linear_1"]
    assert count(gm, torch.narrow) == 2
    torch.testing.assert_close(gm(x), expected, rtol=1e-5, atol=1e-5)

    merge(gm, reverse=True)
    recognize(gm, reverse=True)
    assert not hasattr(gm, "wv_t")
    assert_same_parameters(gm, before, same_storage=False)  # MergeLinears re-slices its members
    assert torch.equal(gm.bk, model.bk)
    assert torch.equal(gm(x), expected)
    assert "torch.matmul(x, getattr_1)" in gm.code and "linear" not in gm.code
    assert len(gm.code) == len(code)


def test_a_state_dict_loaded_later_reaches_the_recognized_linears() -> None:
    """Weights loaded into the model's names after the pass (fine-tuned ones, say) are what the
    Linears read: they read the Conv1D weights through views."""
    model = build_model(transformers.GPT2Model, gpt2_config())
    inputs = token_inputs(2, 8)
    gm = fxopt.trace(model, mode="export", dynamic=False)
    RecognizeLinears()(gm)
    other = build_model(transformers.GPT2Model, gpt2_config())
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.mul_(1.5)
        expected = first_output(other(**inputs))
    gm.load_state_dict(other.state_dict(), strict=False)
    torch.testing.assert_close(first_output(gm(**inputs)), expected, rtol=1e-5, atol=1e-5)


def test_reverse_works_on_a_deep_copy() -> None:
    model = build_model(transformers.GPT2Model, gpt2_config())
    inputs = token_inputs(2, 8)
    gm = fxopt.trace(model, mode="export", dynamic=False)
    expected = first_output(gm(**inputs))
    RecognizeLinears()(gm)
    copied = copy.deepcopy(gm)
    RecognizeLinears()(copied, reverse=True)  # a new instance, on a copy: needs only the graph
    assert count(copied, aten.addmm.default) == 4 * LAYERS
    assert torch.equal(first_output(copied(**inputs)), expected)
