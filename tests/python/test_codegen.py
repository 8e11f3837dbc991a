"""The engine's generated forward (`fxopt.engine.codegen`) is torch's `python_code`, byte for byte.

Every check compares the engine's PythonCode with the one torch generates for the same graph:
the source, the globals (same names, the very same objects), the line map and the prologue
start. The coverage matrix runs the same comparison after its pipeline on every architecture
(`model_coverage.codegen_difference`, its stage "generated code"); the bench graphs and hand-built graphs here hit each
rule of fx's generator, and the declines fall back to torch.
"""

from __future__ import annotations

import copy
import math
import operator
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx
from torch import nn
from torch.fx._lazy_graph_module import _LazyGraphModule

from fxopt.engine import bridge, checked_torch, codegen
from fxopt.optimization import ChangeTrueDivToMulByInverse, MergeLinears, compose

from model_coverage import codegen_difference

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import pass_speed  # noqa: E402


def attached(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    bridge.attached(gm)
    return gm


def gelu(x: Any) -> Any:
    """A callable outside torch: fx names it as a global."""
    return x


def add(x: Any, y: Any) -> Any:
    """Shares its name with `_operator.add`'s nodes."""
    return x


class Everything(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.layers = nn.Sequential(nn.ReLU(), nn.Tanh())

    def forward(self, x: torch.Tensor, y: int = 3, z: str = "a'b\\c") -> Any:
        a = self.linear(x) + 1e-05
        b = a * float("inf") - 100000.0
        c = b[:, 1:2, None, ...]
        d = c.to(torch.float16).to(torch.device("cpu")).to(memory_format=torch.contiguous_format)
        e = torch.nn.functional.gelu(d, approximate="tanh")
        f = self.layers(e).reshape(-1, 4).transpose(0, 1)
        g = f / math.sqrt(2.0) ** 2 // 3 % 5
        h = -g @ g.T > 0.5
        i = ~h | (h & h) ^ h
        return {"out": i, "y": (g,), "s": [f, 1.5e300, -0.0, 1e16, 2**70, 'q"\n\t'], "z": z}


def test_symbolic_trace_of_every_printed_form() -> None:
    gm = attached(torch.fx.symbolic_trace(Everything()))
    assert codegen_difference(gm) == ""


def hand_built() -> torch.fx.GraphModule:
    """Inplace operators, getattr both ways, names that collide with globals and builtins,
    defaults, kwargs, slices, sizes, dtypes and annotations."""
    root = nn.Module()
    root.register_buffer("weight", torch.ones(2))
    graph = torch.fx.Graph()
    x = graph.placeholder("x", type_expr=torch.Tensor)
    scale = graph.placeholder("scale", default_value=1.0)
    graph.placeholder("*args")
    graph.placeholder("**kwargs")
    clash = graph.call_function(torch.relu, (x,), name="test_codegen_gelu")
    own = graph.call_function(gelu, (clash,), name="gelu")
    other = graph.call_function(gelu, (own,))
    summed = graph.call_function(add, (other, scale))
    built_in = graph.call_function(operator.add, (summed, 2))
    graph.call_function(operator.iadd, (built_in, 1))
    graph.call_function(operator.setitem, (built_in, (slice(None), 0), 0.0))
    attr = graph.call_function(getattr, (built_in, "shape"))
    size = graph.call_function(getattr, (built_in, "not an identifier"))
    default = graph.call_function(getattr, (built_in, "missing", None))
    weight = graph.get_attr("weight")
    view = graph.call_method("view", (built_in, torch.Size([2, -1])), {"dtype": torch.float32})
    maxed = graph.call_function(max, (1, 2), name="max")
    tensor_type = graph.call_function(torch.zeros, (3,), {"dtype": torch.int64})
    tensor_type.type = torch.Tensor
    out = graph.output((view, weight, attr, size, default, maxed, {"k": tensor_type}))
    out.type = "Tuple[Tensor, ...]"
    return torch.fx.GraphModule(root, graph)


def test_hand_built_graph() -> None:
    assert codegen_difference(attached(hand_built())) == ""


@pytest.mark.parametrize("family", sorted(pass_speed.FAMILIES))
def test_bench_graphs_after_compose(family: str) -> None:
    graph_family = pass_speed.FAMILIES[family]
    gm = pass_speed.build_graph(graph_family, 2, 32, 4)
    pass_speed.fxopt_composition(pass_speed.shared_passes())(gm)
    assert codegen_difference(gm) == ""


def test_compose_recompiles_with_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """compose's recompile takes the engine's code, and it is the code torch would generate."""
    gm = pass_speed.build_graph(pass_speed.FAMILIES["bert"], 2, 32, 4)
    inputs = pass_speed.FAMILIES["bert"].inputs(32)
    expected = gm(*inputs)
    used: list[bool] = []
    recompile = codegen.recompile
    monkeypatch.setattr(codegen, "recompile", lambda m: used.append(recompile(m)) or used[-1])
    compose(ChangeTrueDivToMulByInverse(), MergeLinears())(gm)
    assert used == [True]
    assert gm.code == gm.graph.python_code("self").src
    assert "python_code" not in gm.graph.__dict__
    torch.testing.assert_close(gm(*inputs), expected)


def test_declines_without_a_current_attached_session() -> None:
    gm = torch.fx.symbolic_trace(Everything())
    assert codegen.python_code(gm) is None  # never attached
    bridge.attached(gm)
    node = next(iter(gm.graph.nodes))
    node.name = "renamed"  # a user's own edit behind the session's back
    assert codegen.python_code(gm) is None


def _edit_args(gm: torch.fx.GraphModule) -> None:
    node = next(n for n in gm.graph.nodes if n.op == "call_function" and len(n.args) == 2)
    node.args = (node.args[0], node.args[0])


def _edit_target(gm: torch.fx.GraphModule) -> None:
    node = next(n for n in gm.graph.nodes if n.target is operator.add)
    node.target = operator.sub


def _edit_kwargs(gm: torch.fx.GraphModule) -> None:
    node = next(n for n in gm.graph.nodes if n.op == "call_method" and n.kwargs)
    node.kwargs = {}


def _add_node(gm: torch.fx.GraphModule) -> None:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    with gm.graph.inserting_before(output):
        gm.graph.call_function(torch.relu, (next(iter(gm.graph.nodes)),))


def _remove_node(gm: torch.fx.GraphModule) -> None:
    _add_node(gm)
    bridge.detach(gm)
    bridge.attached(gm)  # a session that imported the added node
    gm.graph.erase_node(next(n for n in gm.graph.nodes if n.target is torch.relu))


def _reorder(gm: torch.fx.GraphModule) -> None:
    first, second = [n for n in gm.graph.nodes if n.op == "call_method"][:2]
    if first.next is not second:
        first.next.prepend(first)  # swaps first with the node after it; still a valid order
    else:
        second.append(first)


@pytest.mark.parametrize("edit", [_edit_args, _edit_target, _edit_kwargs, _add_node, _remove_node, _reorder])
def test_declines_after_fx_edits_behind_the_session(edit: Any) -> None:
    """Any edit of the fx graph since the last import or sync: the engine's graph no longer
    mirrors it, so torch generates the code."""
    gm = attached(torch.fx.symbolic_trace(Everything()))
    edit(gm)
    assert codegen.python_code(gm) is None
    assert codegen.recompile(gm) is False
    assert gm.code == gm.graph.python_code("self").src


def test_declines_on_core_edits_not_synced() -> None:
    gm = torch.fx.symbolic_trace(Everything())
    session = bridge.attached(gm)
    transformation = ChangeTrueDivToMulByInverse()
    session.run(transformation.core_pass, transformation.core_options(), transformation.signature, False)
    assert session.session.edit_count() > 0
    assert codegen.python_code(gm) is None
    session.sync()
    assert codegen_difference(gm) == ""


def test_module_changes_do_not_stop_the_engine() -> None:
    """The code depends on the fx graph only: a replaced submodule still gets the engine's code."""
    gm = torch.fx.symbolic_trace(Everything())
    session = bridge.attached(gm)
    gm.linear = nn.Linear(4, 4)
    assert not session.current()
    code = codegen.python_code(gm)
    assert code is not None and code.src == gm.graph.python_code("self").src


def test_counter_text_and_blank_lines_follow_fx() -> None:
    """fx drops any line holding `# COUNTER: n` (a string argument's text too) and maps the
    lines after it to node n."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    noted = graph.call_function(torch.add, (x, "# COUNTER: 7"))
    graph.output(graph.call_function(torch.add, (noted, "# COUNTER: x")))
    assert codegen_difference(attached(torch.fx.GraphModule(nn.Module(), graph))) == ""


@pytest.mark.parametrize("variable", ["FX_GRAPH_SHOW_META", "FX_GRAPH_SHOW_STRIDE"])
def test_declines_on_fx_debug_output(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    gm = attached(torch.fx.symbolic_trace(Everything()))
    monkeypatch.setenv(variable, "1")
    assert codegen.python_code(gm) is None
    assert codegen.recompile(gm) is False
    assert gm.code == gm.graph.python_code("self").src


def test_declines_on_other_torch_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    gm = attached(torch.fx.symbolic_trace(Everything()))
    monkeypatch.setattr(checked_torch, "TESTED_TORCH", ("0.1",))
    assert codegen.python_code(gm) is None


def test_declines_on_what_it_does_not_print() -> None:
    """A tensor constant in the arguments, a wrapped function, a lazy GraphModule."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.add, (x, torch.ones(1))))
    assert codegen.python_code(attached(torch.fx.GraphModule(nn.Module(), graph))) is None

    wrapped = attached(torch.fx.symbolic_trace(Everything()))
    next(iter(wrapped.graph.nodes)).meta["is_wrapped"] = True
    bridge.detach(wrapped)
    assert codegen.python_code(attached(wrapped)) is None

    traced = torch.fx.symbolic_trace(Everything())
    lazy = _LazyGraphModule(traced, copy.deepcopy(traced.graph))
    assert codegen.python_code(attached(lazy)) is None


def test_floats_print_as_python_repr() -> None:
    """The engine prints floats itself: Python's shortest round-trip repr and its layout."""
    generator = torch.Generator().manual_seed(0)
    mantissas = torch.rand(300, generator=generator, dtype=torch.float64).tolist()
    exponents = torch.randint(-30, 30, (300,), generator=generator).tolist()
    values = [m * 10.0**e for m, e in zip(mantissas, exponents)]
    values += [0.1, 1e-05, 1e-4, 1e16, 1e15, 123456789012345678.0, 5e-324, 1.7976931348623157e308]
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.add, (x, values)))
    assert codegen_difference(attached(torch.fx.GraphModule(nn.Module(), graph))) == ""


def test_lambdas() -> None:
    """fx names a lambda after its source line, as a global."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(lambda value: value, (x,)))
    assert codegen_difference(attached(torch.fx.GraphModule(nn.Module(), graph))) == ""


def test_annotations() -> None:
    """Torch types, unions of them with None, postponed (string) annotations, builtins."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x", type_expr=torch.Tensor | None)
    y = graph.placeholder("y", type_expr="torch.Tensor")
    z = graph.placeholder("z", type_expr=int)
    n = graph.placeholder("n", type_expr=type(None))
    total = graph.call_function(operator.add, (x, y))
    total.type = "torch.Tensor"
    out = graph.output((total, z, n))
    out.type = tuple
    assert codegen_difference(attached(torch.fx.GraphModule(nn.Module(), graph))) == ""
