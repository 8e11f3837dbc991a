"""ChangePrecision in both graph dialects: Linear / Conv / matmul run in float16 or bfloat16 while
the graph's inputs, outputs and other ops keep their dtypes; reverse restores weights bit for bit."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxopt
from torch.fx.passes.shape_prop import ShapeProp
from conftest import token_inputs
from fxopt.optimization import ChangePrecision, FuseBatchNormInConv, compose
from norm_models import (
    assert_outputs_close,
    assert_outputs_equal,
    assert_same_tensors,
    check_reverse,
    outputs,
    tensor_states,
    tiny_resnet,
    trace,
    trace_vision,
)

TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 6e-2}


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, 6)
        self.head = nn.Linear(6, 6, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x)).mean((2, 3))
        y = self.fc(h)
        return self.head(y @ y.transpose(0, 1) @ y).softmax(-1)


def check_low_outputs_and_reverse(t: ChangePrecision, gm: torch.fx.GraphModule, model: nn.Module,
                                  caller: dict, x: torch.Tensor, expected: list[torch.Tensor], code: str,
                                  states: dict) -> None:  # type: ignore[type-arg]  # fmt: skip
    """Outputs keep float32 and stay close; the caller's model is untouched (copy-on-write);
    reverse restores outputs, code and tensors exactly."""
    got = outputs(gm, x)
    assert [g.dtype for g in got] == [torch.float32]
    assert_outputs_close(got, expected, atol=TOLERANCE[t.dtype], rtol=TOLERANCE[t.dtype])
    assert_same_tensors(model, caller, same_storage=True)
    check_reverse(t, gm, (x,), expected, code, states)
    assert_same_tensors(model, caller, same_storage=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_without_dtypes_each_op_runs_in_low_precision_between_casts(dtype: torch.dtype) -> None:
    model = Mixed().eval()
    caller = tensor_states(model)
    x = torch.randn(2, 3, 5, 5)
    gm = trace(model, (x,), "symbolic")  # symbolic_trace records no dtypes
    expected, code, states, nodes = outputs(gm, x), gm.code, tensor_states(gm), len(gm.graph.nodes)
    t = ChangePrecision(dtype)

    t(gm)
    assert len(t.report.changed) == 5 and t.report.skipped == []  # conv, fc, two matmuls, head
    assert len(t.get_transformed_nodes(gm)) == 5
    name = str(dtype).removeprefix("torch.")
    # Each op reads its operands cast down (two for a matmul) and is cast back once.
    casts = [n for n in gm.graph.nodes if n.name.startswith("to")]
    assert len(casts) == 7 and len([n for n in gm.graph.nodes if n.name.startswith("type_as")]) == 5
    low = {n: p.dtype for n, p in gm.named_parameters() if p.dtype == dtype}
    assert sorted(low) == sorted(f"{m}_{name}.{p}" for m, p in
                                 [("conv", "weight"), ("conv", "bias"), ("fc", "weight"), ("fc", "bias"), ("head", "weight")])  # fmt: skip
    assert len(gm.graph.nodes) == nodes + 12
    assert not t.preserves_computation
    check_low_outputs_and_reverse(t, gm, model, caller, x, expected, code, states)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dialect", ["export", "shape-prop"])
def test_with_dtypes_the_whole_graph_is_lowered(dialect: str, dtype: torch.dtype) -> None:
    model = Mixed().eval()
    caller = tensor_states(model)
    x = torch.randn(2, 3, 5, 5)
    if dialect == "export":
        gm = trace(model, (x,), "export")
    else:
        gm = torch.fx.symbolic_trace(model)
        ShapeProp(gm).propagate(x)
    expected, code, states = outputs(gm, x), gm.code, tensor_states(gm)
    t = ChangePrecision(dtype)

    t(gm)
    # One cast on entry, one back on exit; every stored float tensor converted once.
    casts = [n for n in gm.graph.nodes if n.target in ("to", torch.ops.aten.to.dtype)]
    assert len(casts) == 2
    assert casts[0].args[0].op == "placeholder" and casts[0].args[1] == dtype
    assert casts[1].args[1] == torch.float32 and list(casts[1].users)[0].op == "output"
    assert not [n for n in gm.graph.nodes if n.target in ("type_as", torch.ops.aten.type_as.default)]
    used = {n: p for n, p in gm.named_parameters() if n.split(".")[0].endswith(str(dtype)[6:]) or n.endswith(str(dtype)[6:])}
    assert len(used) == 5 and all(p.dtype == dtype for p in used.values())
    assert t.report.skipped == [] and len(t.report.changed) == 2 + (5 if dialect == "export" else 3)
    check_low_outputs_and_reverse(t, gm, model, caller, x, expected, code, states)


class Islands(nn.Module):
    """What transformers models do with dtypes: a float mask made from int ids, a norm in float32
    that casts back to "its" dtype (traced as float32), a softmax asking for float32."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.out = nn.Linear(8, 8)
        self.weight = nn.Parameter(torch.rand(8) + 0.5)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        bias = (1.0 - mask.to(torch.float32)) * -1e4  # float32 created from int64
        h = self.fc(x)
        dtype = h.dtype
        variance = h.to(torch.float32).pow(2).mean(-1, keepdim=True)
        h = self.weight * (h * torch.rsqrt(variance + 1e-6)).to(dtype)
        scores = (h @ h.transpose(-1, -2) + bias[:, None, :]).softmax(-1, dtype=torch.float32)
        return self.out(scores @ h), mask.sum(-1)


def test_explicit_dtypes_keep_islands_and_follow_the_lowered_graph() -> None:
    model = Islands().eval()
    x, mask = torch.randn(2, 5, 8), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    gm = trace(model, (x, mask), "export")
    expected, code, states = outputs(gm, x, mask), gm.code, tensor_states(gm)
    t = ChangePrecision(torch.bfloat16)

    t(gm)
    got = outputs(gm, x, mask)
    assert [g.dtype for g in got] == [torch.float32, torch.int64]  # int outputs are not cast
    assert torch.equal(got[1], expected[1])
    assert_outputs_close(got, expected, atol=6e-2, rtol=6e-2)
    to_nodes = [n for n in gm.graph.nodes if n.target is torch.ops.aten.to.dtype]
    # The mask (float32 from int64) stays float32; the casts traced as float32 -> float32 now
    # name bfloat16; the softmax's float32 result is cast down once, for the matmul.
    assert [n.args[1] for n in to_nodes if n.args[0].name == "mask"] == [torch.float32]
    check_reverse(t, gm, (x, mask), expected, code, states)


def test_ops_already_in_low_precision_are_skipped() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)).eval()
    model[1].half()
    gm = torch.fx.symbolic_trace(model)
    t = ChangePrecision(torch.bfloat16)
    t(gm)
    assert t.report.changed == ["_0"]
    assert t.report.skipped == [("_1", "its weight is float16, not float32 or float64")]


def test_only_float16_and_bfloat16() -> None:
    with pytest.raises(ValueError, match="float16 or torch.bfloat16"):
        ChangePrecision(torch.float32)


def test_tiny_bert_in_bfloat16(tiny_bert) -> None:  # type: ignore[no-untyped-def]
    inputs = token_inputs(2, 8)
    gm = fxopt.trace(tiny_bert, input_names=list(inputs), mode="export")
    run = lambda: outputs(lambda: gm(**inputs))
    expected, states = run(), tensor_states(gm)
    t = ChangePrecision(torch.bfloat16)

    t(gm)
    assert len(t.report.changed) >= 12  # 6 Linears and 2 attention matmuls per layer
    assert_outputs_close(run(), expected, atol=0.1, rtol=0.1)
    t(gm, reverse=True)
    assert_outputs_equal(run(), expected)
    assert_same_tensors(gm, states, same_storage=True)


def test_composes_with_batch_norm_folding_and_reverses() -> None:
    model = tiny_resnet()
    pixels = torch.randn(1, 3, 32, 32)
    gm, args = trace_vision(model, pixels, "export")
    expected, code, states = outputs(gm, *args), gm.code, tensor_states(gm)
    both = compose(FuseBatchNormInConv(), ChangePrecision(torch.bfloat16))
    both(gm)
    assert_outputs_close(outputs(gm, *args), expected, atol=0.1, rtol=0.1)
    check_reverse(both, gm, args, expected, code, states)
