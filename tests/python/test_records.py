"""Reverse on a reversal record that no longer fits fails one way and changes nothing.

A record lives in `node.meta`, where a user's pass, an old version or a careless copy can change
it. Every pass reads its record through the engine's RecordReader, so a field that does not fit
is always the same TransformationError, naming the node, the record (the signature) and the
field, and the GraphModule stays exactly as it was.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx
from torch import nn
from torch.fx import GraphModule

import fxopt.optimization as fo


class _Div(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / 8


class _Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(4, 5)
        self.k = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.q(x) + self.k(x)


class _Dead(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.relu(x)  # traced, then unused
        return x * 2


class _ConvBn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


def _replace(record: tuple[Any, ...], key: str, value: Any) -> tuple[Any, ...]:
    return tuple((k, value if k == key else v) for k, v in record)


def _corrupt(gm: GraphModule, signature: str, key: str, value: Any) -> str:
    """Replaces field `key` of the first record `signature` left; returns that node's name."""
    for node in gm.graph.nodes:
        entries = node.meta.get("fxopt_reversal", ())
        if any(sig == signature and any(k == key for k, _ in record) for sig, record in entries):
            node.meta["fxopt_reversal"] = tuple(
                (sig, _replace(record, key, value) if sig == signature else record)
                for sig, record in entries)
            return str(node.name)
    raise AssertionError(f"no record of {signature} has a field {key!r}")


# (model, input, transformation, field to corrupt, value, field the error names, problem)
CASES: list[tuple[Callable[[], nn.Module], tuple[int, ...], Callable[[], fo.Transformation], str, Any,
                  str, str]] = [
    (_Div, (2, 3), fo.ChangeTrueDivToMulByInverse, "target", 5, "target", "is not a string (5)"),
    (_Attention, (2, 4), fo.MergeLinears, "start", "zero", "start", "is not an integer ('zero')"),
    (_Dead, (2, 3), fo.EliminateDeadCode, "removed", ((5,),), "removed[0][0]",
     "is not a tuple (5)"),
    (_ConvBn, (1, 3, 6, 6), fo.FuseBatchNorm2dInConv2d, "params", ("module", 5, "conv_fused"),
     "params[1]", "is not a string (5)"),
]


@pytest.mark.parametrize("model, shape, transformation, key, value, field, problem", CASES,
                         ids=[c[2].__name__ for c in CASES])
def test_reverse_on_a_corrupted_record_fails_one_way_and_changes_nothing(
        model: Callable[[], nn.Module], shape: tuple[int, ...],
        transformation: Callable[[], fo.Transformation], key: str, value: Any, field: str,
        problem: str) -> None:
    torch.manual_seed(0)
    gm = torch.fx.symbolic_trace(model().eval())
    x = torch.randn(shape)
    t = transformation()
    t(gm)
    node = _corrupt(gm, t.signature, key, value)
    code = gm.code
    metas = [dict(n.meta) for n in gm.graph.nodes]
    state = {name: tensor.clone() for name, tensor in gm.state_dict().items()}
    expected = gm(x)

    message = f"node '{node}': reversal record {t.signature} does not fit: field '{field}' {problem}"
    with pytest.raises(fo.TransformationError, match=re.escape(message)):
        t(gm, reverse=True)

    assert gm.code == code
    assert [dict(n.meta) for n in gm.graph.nodes] == metas
    assert gm.state_dict().keys() == state.keys()
    assert all(torch.equal(gm.state_dict()[name], tensor) for name, tensor in state.items())
    assert torch.equal(gm(x), expected)
