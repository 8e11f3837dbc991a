"""Semantics of the Optimum-compatible transformation framework."""

from __future__ import annotations

import copy
import operator
import subprocess
import sys

import pytest
import torch
import torch.fx
from torch.fx import GraphModule

import fxopt._core
import fxopt.engine.bridge
import fxopt.optimization as fo
from fxopt.optimization import (
    ChangeTrueDivToMulByInverse,
    DeepCopy,
    LintAndRecompile,
    ReversibleTransformation,
    Transformation,
    compose,
)


class ChangeMulToAdd(Transformation):
    """The example of the Optimum documentation: a user's own pass editing fx nodes."""

    def transform(self, graph_module: GraphModule) -> GraphModule:
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and node.target == operator.mul:
                node.target = operator.add
                self.mark_as_transformed(node)
        return graph_module


class MulToMulTimesTwo(ReversibleTransformation):
    """The reversible example of the Optimum documentation."""

    def transform(self, graph_module: GraphModule) -> GraphModule:
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and node.target == operator.mul:
                x, y = node.args
                node.args = (x, 2 * y)
                self.mark_as_transformed(node)
        return graph_module

    def reverse(self, graph_module: GraphModule) -> GraphModule:
        for node in self.get_transformed_nodes(graph_module):
            x, y = node.args
            node.args = (x, y // 2 if isinstance(y, int) else y / 2)
            self.mark_as_restored(node)
        return graph_module


class Recorder(ReversibleTransformation):
    """Appends its name to a shared log in each direction."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self._log = log

    def transform(self, graph_module: GraphModule) -> GraphModule:
        self._log.append(f"+{self.name}")
        return graph_module

    def reverse(self, graph_module: GraphModule) -> GraphModule:
        self._log.append(f"-{self.name}")
        return graph_module


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x) / 4
        return y * 3


def _gm() -> GraphModule:
    torch.manual_seed(0)
    return torch.fx.symbolic_trace(Net())


X = torch.randn(2, 4)


def test_module_exposes_optimum_names() -> None:
    for name in ("Transformation", "ReversibleTransformation", "compose", "DeepCopy",
                 "LintAndRecompile", "ChangeTrueDivToMulByInverse"):
        assert hasattr(fo, name)


def test_signature_is_stable_across_processes_and_pure() -> None:
    code = ("from fxopt.optimization import ChangeTrueDivToMulByInverse as T;"
            "print(T().signature)")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.strip() for _ in range(2)}
    t = ChangeTrueDivToMulByInverse()
    before = dict(vars(t))
    assert runs == {t.signature}
    assert vars(t) == before  # computing it added nothing to the instance


def test_signature_depends_on_class_and_parameters() -> None:
    log: list[str] = []
    assert Recorder("a", log).signature == Recorder("a", []).signature
    assert Recorder("a", log).signature != Recorder("b", log).signature
    assert ChangeMulToAdd().signature != MulToMulTimesTwo().signature


def test_marks_are_per_transformation_and_survive_deepcopy_unshared() -> None:
    gm = _gm()
    a, b = MulToMulTimesTwo(), ChangeTrueDivToMulByInverse()
    a(gm)
    b(gm)
    assert [n.name for n in a.get_transformed_nodes(gm)] == ["mul"]
    assert [n.name for n in b.get_transformed_nodes(gm)] == ["truediv"]
    clone = copy.deepcopy(gm)
    assert [n.name for n in a.get_transformed_nodes(clone)] == ["mul"]
    a(clone, reverse=True)  # restoring the copy leaves the original's marks alone
    assert a.get_transformed_nodes(clone) == []
    assert [n.name for n in a.get_transformed_nodes(gm)] == ["mul"]


def test_deepcopy_then_reverse_restores_the_copy_only() -> None:
    gm = _gm()
    expected = gm(X)
    code = gm.code
    t = ChangeTrueDivToMulByInverse()
    t(gm)
    copied = DeepCopy()(gm)
    t(copied, reverse=True)
    assert copied.code == code
    assert torch.equal(copied(X), expected)
    assert gm.code != code and len(t.get_transformed_nodes(gm)) == 1


def test_compose_applies_left_to_right_and_reverses_right_to_left() -> None:
    log: list[str] = []
    composition = compose(Recorder("a", log), Recorder("b", log), Recorder("c", log))
    gm = _gm()
    composition(gm)
    composition(gm, reverse=True)
    assert log == ["+a", "+b", "+c", "-c", "-b", "-a"]


def test_compose_with_python_and_builtin_members() -> None:
    gm = _gm()
    expected = gm(X)
    code = gm.code
    composition = compose(ChangeTrueDivToMulByInverse(), MulToMulTimesTwo())
    composition(gm)
    # truediv became a mul by 0.25 which the user's pass then doubled, as did the plain mul
    muls = [n for n in gm.graph.nodes if n.target == operator.mul]
    assert [n.args[1] for n in muls] == [0.5, 6]
    torch.testing.assert_close(gm(X), expected * 2 * 2)
    composition(gm, reverse=True)
    assert gm.code == code
    assert torch.equal(gm(X), expected)


def test_non_reversible_user_pass_inside_compose() -> None:
    gm = _gm()
    x = X
    y = gm.fc(x)
    composition = compose(ChangeTrueDivToMulByInverse(), ChangeMulToAdd())
    composition(gm)
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [operator.add] * 2
    torch.testing.assert_close(gm(x), y + 0.25 + 3)
    with pytest.raises(TypeError, match="non-reversible"):
        composition(gm, reverse=True)


def test_compose_not_inplace_never_touches_its_input() -> None:
    gm = _gm()
    code = gm.code
    composition = compose(ChangeTrueDivToMulByInverse(), MulToMulTimesTwo(), inplace=False)
    out = composition(gm)
    assert out is not gm and gm.code == code
    assert all("fxopt_transformations" not in n.meta for n in gm.graph.nodes)
    composition(gm, reverse=True)  # reversing the untransformed input must not edit it either
    assert gm.code == code
    back = composition(out, reverse=True)
    assert back is not out and back.code == code
    assert out.code != code


def test_compose_without_arguments_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        compose()
    with pytest.raises(TypeError):
        compose(ChangeMulToAdd)  # a class, not an instance


def test_compose_recompiles_once_and_syncs_once(monkeypatch: pytest.MonkeyPatch) -> None:
    gm = _gm()
    counts = {"recompile": 0, "sync": 0, "bridge": 0}
    recompile, sync, init = GraphModule.recompile, fxopt.engine.bridge.Bridge.sync, fxopt.engine.bridge.Bridge.__init__

    def counting(name: str, fn):  # type: ignore[no-untyped-def]
        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            counts[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(GraphModule, "recompile", counting("recompile", recompile))
    monkeypatch.setattr(fxopt.engine.bridge.Bridge, "sync", counting("sync", sync))
    monkeypatch.setattr(fxopt.engine.bridge.Bridge, "__init__", counting("bridge", init))
    first, second = ChangeTrueDivToMulByInverse(), ChangeTrueDivToMulByInverse()
    compose(first, second, LintAndRecompile())(gm, lint_and_recompile=False)
    assert counts == {"recompile": 1, "sync": 1, "bridge": 1}
    assert first.report is not None and first.report.changed == ["truediv"]
    assert second.report is not None and second.report.changed == []  # same signature: done


def test_failure_while_syncing_leaves_the_graph_module_untouched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gm = _gm()
    code = gm.code
    metas = [dict(n.meta) for n in gm.graph.nodes]

    targets_when_failing = []

    def failing(self, *args):  # type: ignore[no-untyped-def]
        # fx's args setter calls it; the division's new target is set by then and must be undone
        targets_when_failing.append(self.target)
        raise RuntimeError("injected failure")

    monkeypatch.setattr(torch.fx.Node, "_update_args_kwargs", failing, raising=False)
    t = ChangeTrueDivToMulByInverse()
    with pytest.raises(RuntimeError, match="injected failure"):
        t(gm)
    monkeypatch.undo()
    assert targets_when_failing == [operator.mul]
    gm.recompile()
    assert gm.code == code
    assert [dict(n.meta) for n in gm.graph.nodes] == metas
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [
        operator.truediv, operator.mul]


def test_failing_pass_names_the_node_and_changes_nothing() -> None:
    gm = _gm()
    t = ChangeTrueDivToMulByInverse()
    t(gm)
    transformed = t.get_transformed_nodes(gm)[0]
    transformed.meta["fxopt_reversal"] = ((t.signature, (("target", "_operator.truediv"),)),)
    code, args = gm.code, transformed.args
    with pytest.raises(fo.TransformationError, match="'truediv'.*divisor"):
        t(gm, reverse=True)
    assert gm.code == code and transformed.args == args
    assert t.transformed(transformed)


def test_reverse_in_a_later_session_from_metadata_alone() -> None:
    gm = _gm()
    expected = gm(X)
    ChangeTrueDivToMulByInverse()(gm)
    # a new instance: nothing but the graph's metadata connects it to the first run
    ChangeTrueDivToMulByInverse()(gm, reverse=True)
    assert torch.equal(gm(X), expected)
    assert [n.args[1] for n in gm.graph.nodes if n.target == operator.truediv] == [4]
