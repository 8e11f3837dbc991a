"""ChangePrecision in both graph dialects: Linear / Conv / matmul run in float16 or bfloat16 while
the graph's inputs, outputs and other ops keep their dtypes; reverse restores weights bit for bit."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxopt
from conftest import token_inputs
from fxopt.optimization import ChangePrecision, FuseBatchNormInConv, compose
from norm_models import (
    DIALECTS,
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


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_linear_conv_matmul_run_in_low_precision(dialect: str, dtype: torch.dtype) -> None:
    model = Mixed().eval()
    caller = tensor_states(model)
    x = torch.randn(2, 3, 5, 5)
    gm = trace(model, (x,), dialect)
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
    if dialect == "symbolic":
        assert sorted(low) == sorted(f"{m}_{name}.{p}" for m, p in
                                     [("conv", "weight"), ("conv", "bias"), ("fc", "weight"), ("fc", "bias"), ("head", "weight")])  # fmt: skip
        assert len(gm.graph.nodes) == nodes + 12
    else:
        assert sorted(low) == sorted(f"{m}.{p}_{name}" for m, p in
                                     [("conv", "weight"), ("conv", "bias"), ("fc", "weight"), ("fc", "bias"), ("head", "weight")])  # fmt: skip
    assert not t.preserves_computation
    got = outputs(gm, x)
    assert [g.dtype for g in got] == [torch.float32]
    assert_outputs_close(got, expected, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])
    assert_same_tensors(model, caller, same_storage=True)  # copy-on-write

    check_reverse(t, gm, (x,), expected, code, states)
    assert_same_tensors(model, caller, same_storage=True)


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
