"""ChangeTrueDivToMulByInverse on every division form, in both dialects."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx

from fxopt.optimization import ChangeTrueDivToMulByInverse


class Divisions(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x / 8
        b = torch.div(a, 3.0)
        c = b.div(0.7)
        d = torch.true_divide(c, 5)
        e = torch.div(d, other=2.5)
        return e + x / x.size(-1)


class Unsupported(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x / y, torch.div(x, 2.0, rounding_mode="floor"), x / 0, 4.0 / x


def _targets(gm: torch.fx.GraphModule) -> list[object]:
    return [n.target for n in gm.graph.nodes if n.op in ("call_function", "call_method")]


def test_every_symbolic_form_becomes_a_multiplication_and_reverses_exactly() -> None:
    gm = torch.fx.symbolic_trace(Divisions())
    x = torch.randn(3, 4)
    expected = gm(x)
    code, targets = gm.code, _targets(gm)
    t = ChangeTrueDivToMulByInverse()

    t(gm)
    assert operator.truediv not in _targets(gm)[:1]
    assert torch.div not in _targets(gm) and torch.true_divide not in _targets(gm)
    assert "div" not in _targets(gm)
    assert len(t.get_transformed_nodes(gm)) == 5
    assert t.report is not None and len(t.report.changed) == 5
    # x / x.size(-1): the divisor is a graph value, so it stays a division.
    assert [name for name, _ in t.report.skipped] == ["truediv_1"]
    torch.testing.assert_close(gm(x), expected)
    assert len(list(gm.graph.nodes)) == len(targets) + 2  # nodes are changed, none added

    t(gm, reverse=True)
    assert gm.code == code
    assert _targets(gm) == targets
    assert not t.get_transformed_nodes(gm)
    divisors = [n.args[1] if len(n.args) > 1 else n.kwargs["other"] for n in gm.graph.nodes
                if n.op in ("call_function", "call_method") and n.target in
                (operator.truediv, torch.div, "div", torch.true_divide) and n.name != "truediv_1"]
    assert divisors == [8, 3.0, 0.7, 5, 2.5]
    assert [type(d) for d in divisors] == [int, float, float, int, float]
    assert torch.equal(gm(x), expected)


def test_unsupported_divisions_are_skipped_with_reasons() -> None:
    gm = torch.fx.symbolic_trace(Unsupported())
    code = gm.code
    t = ChangeTrueDivToMulByInverse()
    t(gm)
    assert gm.code == code
    assert t.report is not None and t.report.changed == []
    reasons = dict(t.report.skipped)
    assert "not a constant" in reasons["truediv"]
    assert "rounding_mode" in reasons["div"]
    assert reasons["truediv_1"] == "divides by zero"
    # 4.0 / x: operator.truediv whose dividend is a number
    assert "dividend" in reasons["truediv_2"]


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) / 4.0 + x / 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_exported_graph_aten_div(dtype: torch.dtype) -> None:
    model = Scaled().to(dtype).eval()
    x = torch.randn(2, 8, dtype=dtype)
    gm = torch.export.export(model, (x,), strict=False).module()
    expected = gm(x)
    code = gm.code
    divs = [n for n in gm.graph.nodes if n.target == torch.ops.aten.div.Tensor]
    assert len(divs) == 2

    t = ChangeTrueDivToMulByInverse()
    t(gm)
    assert not [n for n in gm.graph.nodes if n.target == torch.ops.aten.div.Tensor]
    muls = t.get_transformed_nodes(gm)
    assert [n.target for n in muls] == [torch.ops.aten.mul.Tensor] * 2
    assert [n.args[1] for n in muls] == [0.25, 1 / 3]
    torch.testing.assert_close(gm(x), expected)

    t(gm, reverse=True)
    assert gm.code == code
    assert [n.args[1] for n in gm.graph.nodes if n.target == torch.ops.aten.div.Tensor] == [4.0, 3]
    assert torch.equal(gm(x), expected)


def test_transformers_model_export_dialect() -> None:
    from transformers import ConvBertConfig, ConvBertModel

    # ConvBERT still scales attention scores with `/ math.sqrt(head_size)`.
    config = ConvBertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64, vocab_size=100, embedding_size=32)
    model = ConvBertModel(config).eval()
    ids = torch.randint(0, 100, (2, 7))
    gm = torch.export.export(model, (), {"input_ids": ids}, strict=False).module()
    expected = gm(input_ids=ids)
    t = ChangeTrueDivToMulByInverse()
    t(gm)
    assert t.report is not None
    assert len(t.report.changed) == 2  # one per layer
    assert all(n.args[1] == 0.25 for n in t.get_transformed_nodes(gm))  # 1 / sqrt(16)
    out = gm(input_ids=ids)
    torch.testing.assert_close(out.last_hidden_state, expected.last_hidden_state)
    t(gm, reverse=True)
    assert torch.equal(gm(input_ids=ids).last_hidden_state, expected.last_hidden_state)
