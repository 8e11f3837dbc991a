"""The engine's graph stays attached to the GraphModule between transformations: reused while
nothing changed it, re-imported after any edit it did not make; and a graph no pass changed
is neither synced nor recompiled."""

from __future__ import annotations

import gc
import operator
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.fx
from torch import nn
from torch.fx import GraphModule
from torch.fx.passes.shape_prop import ShapeProp

import fxopt._core
import fxopt.engine.bridge
from fxopt.optimization import (
    ChangeTrueDivToMulByInverse,
    FuseBatchNorm1dInLinear,
    FuseBatchNorm2dInConv2d,
    MergeLinears,
    Transformation,
    compose,
)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k = nn.Linear(4, 4), nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.q(x) / 2 + self.k(x) * 3)


class MulToDiv(Transformation):
    """A user's own pass: `a * c` becomes `a / (1 / c)`, edited on fx nodes."""

    def transform(self, graph_module: GraphModule) -> GraphModule:
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and node.target == operator.mul:
                node.target = operator.truediv
                node.args = (node.args[0], 1 / node.args[1])
                self.mark_as_transformed(node)
        return graph_module


X = torch.randn(3, 4)


def _gm() -> GraphModule:
    torch.manual_seed(0)
    return torch.fx.symbolic_trace(Net().eval())


@pytest.fixture
def gm() -> GraphModule:
    return _gm()


@pytest.fixture
def counts(gm: GraphModule, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How often, once `gm` exists, the bridge imported a graph, replayed edits onto one, and
    fx recompiled."""
    counted = {"import": 0, "replay": 0, "recompile": 0}

    def counting(name: str, fn):  # type: ignore[no-untyped-def]
        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            counted[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(fxopt.engine.bridge.Bridge, "__init__", counting("import", fxopt.engine.bridge.Bridge.__init__))
    monkeypatch.setattr(fxopt.engine.bridge, "_replay", counting("replay", fxopt.engine.bridge._replay))
    monkeypatch.setattr(GraphModule, "recompile", counting("recompile", GraphModule.recompile))
    yield counted


def _divisions(gm: GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.target == operator.truediv)


def test_a_graph_no_pass_changed_is_neither_synced_nor_recompiled(gm: GraphModule, counts: dict[str, int]) -> None:
    code = gm.code
    FuseBatchNorm1dInLinear()(gm)  # the batch norm reads a sum, not a Linear: nothing to fold
    compose(FuseBatchNorm1dInLinear(), FuseBatchNorm2dInConv2d())(gm)
    assert counts == {"import": 1, "replay": 0, "recompile": 0}
    assert gm.code == code


def test_consecutive_transformations_reuse_the_engine_graph(gm: GraphModule, counts: dict[str, int]) -> None:
    expected = gm(X)
    div, merge = ChangeTrueDivToMulByInverse(), MergeLinears()
    div(gm)
    merge(gm)
    merge(gm, reverse=True)
    div(gm, reverse=True)
    assert counts["import"] == 1
    assert counts["replay"] == counts["recompile"] == 4
    assert _divisions(gm) == 1 and torch.equal(gm(X), expected)


def test_a_users_edit_between_transformations_is_seen(gm: GraphModule, counts: dict[str, int]) -> None:
    expected = gm(X)
    div = ChangeTrueDivToMulByInverse()
    div(gm)
    assert _divisions(gm) == 0
    MulToDiv()(gm)  # edits fx nodes: the attached engine graph is stale
    assert _divisions(gm) == 2
    div(gm)
    assert counts["import"] == 2
    # The user's new division is converted; the one made of div's own multiplication carries
    # div's mark, so div leaves it (a transformation applies once per node).
    assert _divisions(gm) == 1
    torch.testing.assert_close(gm(X), expected)


def test_edits_of_arguments_nodes_and_modules_invalidate_the_engine_graph(gm: GraphModule, counts: dict[str, int]) -> None:
    div = ChangeTrueDivToMulByInverse()
    div(gm, reverse=True)  # nothing to reverse: imports, changes nothing
    imports = 1
    edits = [
        lambda: _node(gm, "truediv").update_arg(1, 4),  # an argument
        lambda: _node(gm, "truediv").meta.update(fxopt_transformations=("x",)),  # fxopt metadata
        lambda: _append_node(gm),  # a node
        lambda: gm.add_module("extra", nn.Identity()),  # the paths taken
        lambda: ShapeProp(gm).propagate(X),  # recorded value facts
        lambda: gm.train(),  # a plain attribute of a called module
        lambda: setattr(gm.q, "weight", nn.Parameter(torch.ones(4, 4))),  # a tensor
        lambda: setattr(gm, "k", nn.Linear(4, 4)),  # a module
        lambda: gm.norm.register_buffer("extra", torch.zeros(1)),  # a new buffer
        lambda: gm._modules.update(q=gm._modules.pop("q")),  # the order of the modules
    ]
    for edit in edits:
        edit()
        div(gm, reverse=True)
        imports += 1
        assert counts["import"] == imports
    div(gm, reverse=True)
    assert counts["import"] == imports  # unchanged since: reused


class Constants(nn.Module):
    """Reads a plain tensor attribute (not a parameter or buffer) and a nested buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.offset = torch.ones(4)
        self.inner = nn.Module()
        self.inner.register_buffer("scale", torch.full((4,), 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + self.offset) * self.inner.scale / 2


def test_replacing_a_tensor_a_get_attr_reads_invalidates_the_engine_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    gm = torch.fx.symbolic_trace(Constants())
    assert {n.target for n in gm.graph.nodes if n.op == "get_attr"} == {"offset", "inner.scale"}
    imports = {"n": 0}
    init = fxopt.engine.bridge.Bridge.__init__

    def counting(self, *args):  # type: ignore[no-untyped-def]
        imports["n"] += 1
        init(self, *args)

    monkeypatch.setattr(fxopt.engine.bridge.Bridge, "__init__", counting)
    div = ChangeTrueDivToMulByInverse()
    div(gm)
    div(gm)
    assert imports["n"] == 1  # unchanged: reused
    gm.offset = torch.zeros(4)  # a plain attribute: no module table holds it
    div(gm)
    assert imports["n"] == 2
    gm.inner.scale = torch.full((4,), 3.0)  # the same buffer slot, a new tensor
    div(gm)
    assert imports["n"] == 3
    torch.testing.assert_close(gm(X), X * 3 / 2)


def _append_node(gm: GraphModule) -> None:
    with gm.graph.inserting_before(_node(gm, "output")):
        gm.graph.call_function(torch.relu, (_node(gm, "x"),))


def _node(gm: GraphModule, name: str) -> torch.fx.Node:
    return next(n for n in gm.graph.nodes if n.name == name)


def test_a_failing_pass_detaches_the_engine_graph() -> None:
    gm = _gm()
    t = ChangeTrueDivToMulByInverse()
    t(gm)
    node = t.get_transformed_nodes(gm)[0]
    node.meta["fxopt_reversal"] = ((t.signature, (("target", "_operator.truediv"),)),)
    with pytest.raises(fxopt._core.PassError):
        t(gm, reverse=True)
    assert fxopt.engine.bridge._ATTACHED not in gm.graph.__dict__


def test_a_deep_copy_does_not_share_the_engine_graph() -> None:
    import copy

    gm = _gm()
    ChangeTrueDivToMulByInverse()(gm)
    assert fxopt.engine.bridge._ATTACHED in gm.graph.__dict__
    assert fxopt.engine.bridge._ATTACHED not in copy.deepcopy(gm).graph.__dict__


def test_an_attached_session_does_not_keep_its_graph_module_alive() -> None:
    gm = _gm()
    MergeLinears()(gm)
    ref = weakref.ref(gm)
    del gm
    gc.collect()
    assert ref() is None


class Shadowing(nn.Module):
    """A class attribute named like a parameter: getattr finds the class attribute first."""

    scale = 2.0

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(2, 2)
        self.register_buffer("stat", torch.ones(2))
        self._parameters["scale"] = nn.Parameter(torch.zeros(1))
        self.label = "plain"


def test_attribute_lookup_finds_what_getattr_finds() -> None:
    root = nn.Sequential(Shadowing())
    paths = ["", "0", "0.inner", "0.inner.weight", "0.stat", "0.scale", "0.label", "0.training", "0.forward"]
    for path in paths:
        expected: object = root
        for part in path.split(".") if path else ():
            expected = getattr(expected, part)
        found = fxopt.engine.bridge._lookup(root, path)
        assert found is expected or (callable(found) and found == expected), path
    assert fxopt.engine.bridge._lookup(root, "0.missing", None) is None
    with pytest.raises(AttributeError, match="'0.inner.nothing'"):
        fxopt.engine.bridge._lookup(root, "0.inner.nothing")


def test_the_stub_is_what_stubgen_generates(tmp_path: Path) -> None:
    stub = Path(fxopt.__file__).with_name("_core.pyi")
    generated = tmp_path / "_core.pyi"
    subprocess.run(
        [sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "fxopt._core", "-o", str(generated)],
        check=True,
    )
    assert generated.read_text() == stub.read_text(), (
        "python/fxopt/_core.pyi is stale: python -m nanobind.stubgen -m fxopt._core -o python/fxopt/_core.pyi"
    )
