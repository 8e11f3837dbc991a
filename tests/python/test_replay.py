"""The native replay of the engine's edit log (bindings/replay.h): the GraphModule it writes
computes what the engine's graph does, on checked and unchecked torch versions alike, and any
failure part-way leaves the GraphModule, its modules and its parameters exactly as they were."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.fx
from torch import nn
from torch.fx import GraphModule

from fxopt.engine import checked_torch
from fxopt.optimization import FuseBiasInLinear, MergeLinears, compose


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
        self.out = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = (self.q(x) @ self.k(x).transpose(-1, -2)).softmax(-1)
        return self.out(scores @ self.v(x))


X = torch.randn(2, 5, 8)


def _gm() -> GraphModule:
    torch.manual_seed(0)
    return torch.fx.symbolic_trace(Attention().eval())


def _transform() -> GraphModule:
    """MergeLinears then FuseBiasInLinear: nodes and modules created, rewired, retargeted and
    removed."""
    gm = _gm()
    compose(MergeLinears(), FuseBiasInLinear())(gm)
    return gm


def _state(gm: GraphModule) -> tuple[str, list[tuple[str, nn.Module]], dict[str, torch.Tensor]]:
    """The code, the modules by identity and the tensors by identity."""
    return gm.code, list(gm.named_modules()), dict(gm.state_dict(keep_vars=True))


def test_setters_route_writes_what_the_direct_route_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    direct = _transform()
    monkeypatch.setattr(checked_torch, "TESTED_TORCH", ("0.1",))  # an unchecked torch version
    assert not checked_torch.internals_checked()
    through_setters = _transform()
    expected = _gm()(X)
    assert through_setters.code == direct.code
    assert str(through_setters.graph) == str(direct.graph)
    torch.testing.assert_close(through_setters(X), expected)
    torch.testing.assert_close(direct(X), expected)
    assert len([n for n in direct.graph.nodes if n.op == "call_module"]) == 2  # qkv merged, out


@pytest.mark.parametrize("failing_call", [1, 2, 3])
def test_a_failure_part_way_restores_graph_modules_and_parameters(
    monkeypatch: pytest.MonkeyPatch, failing_call: int
) -> None:
    gm = _gm()
    before = _state(gm)
    reference = copy.deepcopy(gm)
    calls = {"n": 0}
    create_node = torch.fx.Graph.create_node

    def failing(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == failing_call:  # every edit before it, module edits too, is undone
            raise RuntimeError("injected failure")
        return create_node(self, *args, **kwargs)

    monkeypatch.setattr(torch.fx.Graph, "create_node", failing)
    with pytest.raises(RuntimeError, match="injected failure"):
        compose(MergeLinears(), FuseBiasInLinear())(gm)
    monkeypatch.undo()
    code, modules, tensors = _state(gm)
    assert [(path, id(m)) for path, m in modules] == [(path, id(m)) for path, m in before[1]]
    assert {k: id(v) for k, v in tensors.items()} == {k: id(v) for k, v in before[2].items()}
    gm.recompile()
    assert gm.code == before[0]
    assert str(gm.graph) == str(reference.graph)
    assert torch.equal(gm(X), reference(X))
    # and the graph still transforms once nothing fails
    compose(MergeLinears(), FuseBiasInLinear())(gm)
    torch.testing.assert_close(gm(X), reference(X))


def test_retargeted_nodes_are_never_filed_as_calls_of_a_module_path() -> None:
    """fx files nodes by (op, target) and keeps every key it ever used: a node turned from a
    module call into a function call gets its target before its op."""
    if not checked_torch.internals_checked():
        pytest.skip(f"fx's lookup table is checked on torch {checked_torch.TESTED_TORCH} only")
    gm = _transform()
    table = gm.graph._find_nodes_lookup_table
    assert [key for key in table.table if key[0] == "call_function" and isinstance(key[1], str)] == []
    assert sum(len(nodes) for nodes in table.table.values()) == len(gm.graph.nodes)
