"""Graph statistics: what a transformation changed, in counts a user can check at a glance.

A pass's report lists nodes by name; these counts say what that amounts to (three `linear`
calls became one, a `div` became a `mul`), and whether parameters grew (FuseBiasInLinear) or
shrank (BatchNorm folding).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import torch
from rich.table import Table
from torch.fx import GraphModule, Node


@dataclass(frozen=True)
class GraphStats:
    nodes: int
    by_op: dict[str, int]
    """Nodes per FX op kind (placeholder, get_attr, call_function, call_module, ...)."""
    by_target: dict[str, int]
    """Calls per operation: function name, `.method`, or the module class of call_module."""
    modules: int
    """Distinct submodules the graph calls (call_module targets)."""
    parameters: int
    """Elements of the tensors the graph uses: get_attr tensors and the parameters and buffers of
    called modules, each tensor once. Tensors still registered but no longer read (originals a
    copy-on-write pass keeps for `reverse`) are not counted: they cost memory, not compute."""
    parameter_bytes: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def graph_stats(graph_module: GraphModule) -> GraphStats:
    """Count the nodes, calls, modules and parameters of `graph_module`."""
    nodes = list(graph_module.graph.nodes)
    modules = dict(graph_module.named_modules())
    calls = Counter(_target_label(node, modules) for node in nodes if node.op.startswith("call_"))
    called = {str(node.target) for node in nodes if node.op == "call_module" and str(node.target) in modules}
    tensors = _used_tensors(graph_module, nodes, [modules[path] for path in called])
    return GraphStats(
        nodes=len(nodes),
        by_op=dict(Counter(node.op for node in nodes)),
        by_target=dict(calls.most_common()),
        modules=len(called),
        parameters=sum(t.numel() for t in tensors.values()),
        parameter_bytes=sum(t.numel() * t.element_size() for t in tensors.values()),
    )


def _used_tensors(
    graph_module: GraphModule, nodes: list[Node], called: list[torch.nn.Module]
) -> dict[int, torch.Tensor]:
    """The tensors the graph reads, by identity (a tensor shared by two paths counts once)."""
    tensors: dict[int, torch.Tensor] = {}
    for node in nodes:
        if node.op == "get_attr":
            value = _attribute(graph_module, str(node.target))
            if isinstance(value, torch.Tensor):
                tensors[id(value)] = value
    for module in called:
        tensors.update((id(t), t) for t in (*module.parameters(), *module.buffers()))
    return tensors


def _attribute(root: torch.nn.Module, path: str) -> Any:
    value: Any = root
    for name in path.split("."):
        value = getattr(value, name, None)
    return value


def _target_label(node: Node, modules: dict[str, torch.nn.Module]) -> str:
    if node.op == "call_module":
        module = modules.get(str(node.target))
        return type(module).__name__ if module is not None else str(node.target)
    if node.op == "call_method":
        return f".{node.target}"
    if isinstance(node.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(node.target)
    name = getattr(node.target, "__name__", str(node.target))
    namespace: str = getattr(node.target, "__module__", None) or ""
    return f"{namespace.removeprefix('_')}.{name}" if namespace else name


def stats_table(before: GraphStats, after: GraphStats) -> Table:
    """Before / after / change, for totals and for every operation whose count changed.

    Unchanged operations are left out: in a 1,000-node graph they would bury the few that matter.
    """
    table = Table(title="graph statistics")
    table.add_column("")
    for column in ("before", "after", "change"):
        table.add_column(column, justify="right")

    def row(label: str, old: int, new: int) -> None:
        change = new - old
        table.add_row(label, f"{old:,}", f"{new:,}", f"{change:+,}" if change else "")

    row("nodes", before.nodes, after.nodes)
    for op in sorted(set(before.by_op) | set(after.by_op)):
        row(f"  {op}", before.by_op.get(op, 0), after.by_op.get(op, 0))
    targets = sorted(set(before.by_target) | set(after.by_target))
    for target in targets:
        old, new = before.by_target.get(target, 0), after.by_target.get(target, 0)
        if old != new:
            row(f"  calls of {target}", old, new)
    row("modules called", before.modules, after.modules)
    row("parameters used", before.parameters, after.parameters)
    row("parameter bytes used", before.parameter_bytes, after.parameter_bytes)
    return table
