"""FuseLinearActivationOneDnn on an exported BERT and a user's MLP traced symbolically."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx
import transformers

import fxopt
from conftest import build_model, tiny_bert_config, token_inputs
from fxopt.runtime.onednn_linear import linear_pointwise
from fxopt.optimization.hardware import onednn_bfloat16_available, onednn_linear_available
from fxopt.optimization import ChangePrecision, FuseLinearActivationOneDnn
from linear_models import assert_same_parameters, param_states

ONEDNN = linear_pointwise

pytestmark = pytest.mark.skipif(
    not onednn_linear_available(), reason="this torch has no oneDNN fused linear"
)


def fused(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.target == ONEDNN]


def count(gm: torch.fx.GraphModule, target: Any) -> int:
    return sum(1 for n in gm.graph.nodes if n.target == target)


def assert_close_relative(actual: torch.Tensor, expected: torch.Tensor, rtol: float) -> None:
    error = (actual - expected).abs().max() / expected.abs().max()
    assert error <= rtol, f"relative error {error:.3g}"


def hidden(result: Any) -> torch.Tensor:
    return result["last_hidden_state"]


def test_exported_bert_fuses_linears_and_gelu(tmp_path: Path) -> None:
    config = tiny_bert_config(hidden_size=64, num_attention_heads=4, intermediate_size=128)
    model = build_model(transformers.BertModel, config)
    inputs = token_inputs(2, 8)
    gm = fxopt.trace(model, mode="export")
    before = param_states(gm)
    expected = hidden(gm(**inputs))
    linears = count(gm, torch.ops.aten.linear.default)
    gelus = count(gm, torch.ops.aten.gelu.default)
    assert (linears, gelus) == (6 * 2 + 1, 2)  # q, k, v, out, up, down per layer; the pooler
    t = FuseLinearActivationOneDnn()

    t(gm)
    assert len(t.report.changed) == linears
    assert t.report.skipped == []
    assert count(gm, torch.ops.aten.linear.default) == 0
    assert count(gm, torch.ops.aten.gelu.default) == 0  # folded into the up projections
    assert count(gm, torch.ops.aten.tanh.default) == 0  # the pooler's tanh too
    attrs = sorted(str(n.args[3]) for n in fused(gm))
    assert attrs == ["gelu"] * 2 + ["none"] * 10 + ["tanh"]
    up = next(n for n in fused(gm) if n.args[3] == "gelu")
    assert up.args[1].target == "encoder.layer.0.intermediate.dense.weight"  # plain, not reordered
    with torch.no_grad():
        eager = model(**inputs)
    assert_close_relative(hidden(gm(**inputs)), eager.last_hidden_state, 1e-5)
    assert_close_relative(gm(**inputs)["pooler_output"], eager.pooler_output, 1e-5)

    # Plain weights: deep copies and saved files work and compute the same.
    copied = copy.deepcopy(gm)
    assert torch.equal(hidden(copied(**inputs)), hidden(gm(**inputs)))
    fxopt.save(gm, tmp_path / "bert.pt")
    loaded = fxopt.load(tmp_path / "bert.pt")
    assert len(fused(loaded)) == linears
    assert torch.equal(hidden(loaded(**inputs)), hidden(gm(**inputs)))

    t(gm, reverse=True)
    assert count(gm, torch.ops.aten.linear.default) == linears
    assert count(gm, torch.ops.aten.gelu.default) == gelus
    assert fused(gm) == []
    assert_same_parameters(gm, before, same_storage=True)
    assert torch.equal(hidden(gm(**inputs)), expected)

    FuseLinearActivationOneDnn()(copied, reverse=True)  # a new instance, on a copy
    assert torch.equal(hidden(copied(**inputs)), expected)


def test_bfloat16_linears_after_change_precision() -> None:
    model = build_model(transformers.BertModel, tiny_bert_config())
    inputs = token_inputs(2, 8)
    gm = fxopt.trace(model, mode="export")
    expected = hidden(gm(**inputs))
    ChangePrecision(torch.bfloat16)(gm)
    low = hidden(gm(**inputs))
    t = FuseLinearActivationOneDnn()

    t(gm)
    if onednn_bfloat16_available():
        assert len(t.report.changed) == 6 * 2 + 1
        weights = [gm.get_parameter(str(n.args[1].target)) for n in fused(gm)]
        assert all(w.dtype == torch.bfloat16 for w in weights)
        # Same bfloat16 products, summed by another GEMM: close to ChangePrecision's result.
        cosine = torch.nn.functional.cosine_similarity(
            hidden(gm(**inputs)).flatten(), expected.flatten(), dim=0
        )
        assert cosine > 0.999
        torch.testing.assert_close(hidden(gm(**inputs)), low, rtol=2e-2, atol=2e-2)
    else:
        assert {reason for _, reason in t.report.skipped} == {
            "its weight is bfloat16; oneDNN's fused linear runs float32 here"
        }
    t(gm, reverse=True)
    assert torch.equal(hidden(gm(**inputs)), low)


class MLP(torch.nn.Module):
    """Linear -> GELU(tanh), Linear -> ReLU (in place), F.linear -> SiLU, a residual reader."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.act = torch.nn.GELU(approximate="tanh")
        self.mid = torch.nn.Linear(32, 32, bias=False)
        self.relu = torch.nn.ReLU(inplace=True)
        self.w = torch.nn.Parameter(torch.randn(16, 32) / 8)
        self.b = torch.nn.Parameter(torch.randn(16))
        self.out = torch.nn.Linear(16, 16)

    # No annotations: under `from __future__ import annotations` fx records them as strings,
    # which torch.save cannot pickle (a torch limitation, unrelated to the pass).
    def forward(self, x):  # type: ignore[no-untyped-def]
        h = self.relu(self.mid(self.act(self.up(x))))
        h = torch.nn.functional.silu(torch.nn.functional.linear(h, self.w, self.b))
        y = self.out(h)
        return y + torch.sigmoid(y)  # `out` has two readers: fused without its activation


def test_user_mlp_in_symbolic_mode(tmp_path: Path) -> None:
    model = MLP().eval()
    gm = fxopt.trace(model, mode="symbolic")
    before = param_states(gm)
    code = gm.code
    x = torch.randn(2, 5, 16)
    expected = gm(x)
    t = FuseLinearActivationOneDnn()

    t(gm)
    assert [(n.args[3], n.args[4], n.args[5]) for n in fused(gm)] == [
        ("gelu", [], "tanh"), ("relu", [], None), ("swish", [], None), ("none", [], None),
    ]  # fmt: skip
    assert [n.op for n in gm.graph.nodes].count("call_module") == 0
    assert fused(gm)[1].args[2] is None  # mid has no bias
    assert count(gm, torch.sigmoid) == 1
    with torch.no_grad():
        assert_close_relative(gm(x), model(x), 1e-5)

    copied = copy.deepcopy(gm)
    torch.save(gm, tmp_path / "mlp.pt")
    loaded = torch.load(tmp_path / "mlp.pt", weights_only=False)  # traces the code again
    assert len(fused(loaded)) == len(fused(gm))  # each fused call one node, not traced through
    assert torch.equal(loaded(x), gm(x))
    assert torch.equal(copied(x), gm(x))

    t(gm, reverse=True)
    assert gm.code == code
    assert_same_parameters(gm, before, same_storage=True)
    assert torch.equal(gm(x), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_the_packed_weight_computes_what_the_plain_op_does_and_follows_the_weight(dtype: torch.dtype) -> None:
    if dtype == torch.bfloat16 and not onednn_bfloat16_available():
        pytest.skip("oneDNN runs no native bfloat16 here")
    weight = torch.randn(24, 16).to(dtype)
    bias = torch.randn(24).to(dtype)
    plain = torch.ops.mkldnn._linear_pointwise.default
    # oneDNN may take another kernel for a packed weight (one float32 row: a blocked GEMM, not
    # a GEMV): the same sums in another order.
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 0, "atol": 0}
    # One packing for every row count (a prompt, then one token at a time) and rank.
    for x in (torch.randn(7, 16), torch.randn(1, 16), torch.randn(2, 3, 16)):
        x = x.to(dtype)
        got = linear_pointwise(x, weight, bias, "gelu", [], "tanh")
        torch.testing.assert_close(got, plain(x, weight, bias, "gelu", [], "tanh"), **tolerance)
    with torch.no_grad():
        weight.mul_(-3)  # an in-place update packs again
    x = torch.randn(4, 16).to(dtype)
    expected = plain(x, weight, None, "none", [], None)
    torch.testing.assert_close(linear_pointwise(x, weight, None, "none", [], None), expected, **tolerance)


def test_a_weight_made_under_inference_mode_is_packed_too() -> None:
    # optimize_model lowers a block's weights on its first call, which an encode() or a
    # pipeline makes under torch.inference_mode: such tensors have no version counter.
    with torch.inference_mode():
        weight, x = torch.randn(8, 4), torch.randn(3, 4)
        for _ in range(2):
            torch.testing.assert_close(linear_pointwise(x, weight, None, "none", [], None), x @ weight.T)


@pytest.mark.parametrize(("attr", "scalars", "algorithm", "reference"), [
    ("none", [], None, lambda y: y),
    ("gelu", [], "tanh", lambda y: torch.nn.functional.gelu(y, approximate="tanh")),
    ("gelu", [], "none", torch.nn.functional.gelu),
    ("relu", [], None, torch.relu),
    ("hardtanh", [0.0, 6.0], None, torch.nn.functional.relu6),
    ("swish", [], None, torch.nn.functional.silu),
    ("sigmoid", [], None, torch.sigmoid),
    ("tanh", [], None, torch.tanh),
    ("hardswish", [], None, torch.nn.functional.hardswish),
])  # fmt: skip
def test_where_onednn_refuses_the_dtype_aten_computes_the_same(monkeypatch, attr, scalars, algorithm, reference) -> None:  # type: ignore[no-untyped-def]
    """A call in a dtype this CPU's oneDNN refuses (float16 without AVX512-FP16, a graph loaded
    on another CPU) runs ATen's linear and activation: what oneDNN computes, up to rounding.
    Refusal is simulated for float32 here, so the two paths meet on every CPU."""
    from fxopt.runtime import onednn_fallback

    torch.manual_seed(0)
    x, weight, bias = torch.randn(5, 16), torch.randn(24, 16), torch.randn(24)
    onednn = linear_pointwise(x, weight, bias, attr, scalars, algorithm)
    monkeypatch.setitem(onednn_fallback._RUNS, ("linear", torch.float32), False)
    aten = linear_pointwise(x, weight, bias, attr, scalars, algorithm)
    torch.testing.assert_close(aten, onednn, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(aten, reference(torch.nn.functional.linear(x, weight, bias)))
    with pytest.raises(ValueError, match="post-op 'elu'"):
        linear_pointwise(x, weight, bias, "elu", [], None)


def test_lowered_to_float16_after_the_fusion_the_graph_runs() -> None:
    """compose(FuseLinearActivationOneDnn(), ChangePrecision(torch.float16)) on a module-level
    graph: the fused calls read the modules' weights through get_attr nodes the fusion made,
    which the lowering casts with their input (one dtype per call), and each call runs, on
    oneDNN where it takes float16, else on ATen; outputs float32 and close to eager's."""
    from fxopt.optimization import compose
    from torch.fx.passes.shape_prop import ShapeProp

    model = MLP().eval()
    x = torch.randn(2, 5, 16)
    gm = fxopt.trace(model, mode="symbolic")
    ShapeProp(gm).propagate(x)  # the dtypes a lowering needs
    out = compose(FuseLinearActivationOneDnn(), ChangePrecision(torch.float16), inplace=False)(gm)
    assert fused(out)
    with torch.no_grad():
        ShapeProp(out).propagate(x)  # runs it, recording each value's dtype
        y = out(x)
    for call in fused(out):
        operands = [a for a in call.args[:3] if isinstance(a, torch.fx.Node)]
        assert {a.meta["tensor_meta"].dtype for a in operands} == {torch.float16}, call.name
    assert y.dtype == torch.float32
    assert_close_relative(y, model(x), 1e-2)
