"""The engine's lint (`fxopt.engine.lint`): clean graphs pass without torch's lint, and every
problem torch's lint reports is still reported with torch's own error."""

from __future__ import annotations

import operator
from collections.abc import Callable

import pytest
import torch
import torch.fx
from torch import nn
from torch.fx import GraphModule

from fxopt import _core
from fxopt.engine.lint import lint


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(4, 4))
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) * self.scale + 1


def _gm() -> GraphModule:
    return torch.fx.symbolic_trace(Net())


def _node(gm: GraphModule, name: str) -> torch.fx.Node:
    return next(n for n in gm.graph.nodes if n.name == name)


def _clean(gm: GraphModule) -> bool:
    return _core.fx_graph_lints_clean(graph=gm.graph, module_type=nn.Module)


def test_a_clean_graph_is_proved_clean_natively(monkeypatch: pytest.MonkeyPatch) -> None:
    gm = _gm()
    assert _clean(gm)

    def not_called(self: torch.fx.Graph) -> None:
        raise AssertionError("torch's lint ran on a graph the engine proved clean")

    monkeypatch.setattr(torch.fx.Graph, "lint", not_called)
    lint(gm.graph)


def _use_before_definition(gm: GraphModule) -> None:
    _node(gm, "mul").prepend(_node(gm, "add"))  # add now reads mul before it is defined


def _foreign_argument(gm: GraphModule) -> None:
    other = torch.fx.Graph().placeholder("y")
    _node(gm, "add").update_arg(0, other)


def _duplicate_name(gm: GraphModule) -> None:
    _node(gm, "add").name = "mul"


def _missing_module(gm: GraphModule) -> None:
    del gm.inner._modules["0"]


def _module_target_not_a_module(gm: GraphModule) -> None:
    _node(gm, "inner_0").target = "scale"


def _missing_attribute(gm: GraphModule) -> None:
    del gm._buffers["scale"]


def _function_target_not_callable(gm: GraphModule) -> None:
    _node(gm, "add").target = 3


def _module_target_not_a_string(gm: GraphModule) -> None:
    _node(gm, "inner_0").target = operator.add


@pytest.mark.parametrize(
    "break_graph",
    [_use_before_definition, _foreign_argument, _duplicate_name, _missing_module,
     _module_target_not_a_module, _missing_attribute, _function_target_not_callable,
     _module_target_not_a_string],
)  # fmt: skip
def test_every_problem_is_reported_with_torchs_error(break_graph: Callable[[GraphModule], None]) -> None:
    gm = _gm()
    break_graph(gm)
    with pytest.raises((RuntimeError, ValueError)) as torchs:
        gm.graph.lint()
    assert not _clean(gm)
    with pytest.raises(type(torchs.value)) as ours:
        lint(gm.graph)
    assert str(ours.value) == str(torchs.value)


def test_a_graph_without_owning_module_skips_the_target_checks() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_module("nowhere", (x,)))
    graph.lint()  # no module to check targets against
    assert _core.fx_graph_lints_clean(graph=graph, module_type=nn.Module)
