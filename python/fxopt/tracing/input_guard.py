"""Input checks at the top of a Dynamo graph, so a call it cannot take says so.

Dynamo specialises every dimension the model's Python depends on (`if x.shape[1] == 16`, a
Linear's feature size), and `torch._dynamo.export` drops the guards that would refuse other
sizes: such a graph called on another size may run a branch traced for the example's, or fail
deep inside with an error that names no input. fxopt puts the checks back as plain calls
(`getattr`, `len`, `operator`, `torch._assert`), so the graph still loads with torch alone, and
a refused call raises one AssertionError naming the input, the shapes the graph takes and the
shape it got. The dtype is not checked: a graph traced on an int64 mask also computes with a float
one where the model does (GroupViT), and one that cannot fails in the op that refuses it, as the
eager model does.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable

import torch
from torch.fx import Graph, GraphModule, Node
from torch.fx.node import Argument
from torch.fx.experimental.symbolic_shapes import is_concrete_int


def guard_inputs(
    graph_module: GraphModule, input_names: list[str], notes: dict[str, str] | None = None
) -> None:
    """Insert, before the first computation, a rank and fixed-size check per tensor input.

    `notes` (per input name) says why sizes of that input are fixed and how to free them; it
    ends the message of a refused call.
    """
    graph = graph_module.graph
    placeholders = graph.find_nodes(op="placeholder")
    first = next(node for node in graph.nodes if node.op != "placeholder")
    for name, node in zip(input_names, placeholders):
        traced = node.meta.get("val")
        if not isinstance(traced, torch.Tensor):
            continue
        sizes = [int(size) if is_concrete_int(size) else None for size in traced.shape]
        with graph.inserting_before(first):
            _check_shape(graph_module, node, name, sizes, traced.dtype, (notes or {}).get(name))
    graph_module.recompile()


def _check_shape(
    graph_module: GraphModule,
    node: Node,
    name: str,
    sizes: list[int | None],
    dtype: torch.dtype,
    note: str | None,
) -> None:
    # torch re-traces a pickled GraphModule's code with fx proxies when loading it, so every
    # step is an op fx records (no len(), no string formatting, no tuple comparison), and the
    # size the caller passed reaches the message as the second item of its tuple.
    graph = graph_module.graph
    takes = "[" + ", ".join("*" if size is None else str(size) for size in sizes) + "]"
    what = str(dtype).removeprefix("torch.")
    size = graph.call_method("size", (node,))
    message: tuple[Argument, ...] = (
        f"fxopt: input {name!r} must have shape {takes} (* is any size; traced on {what}), got",
        size,
        *([note] if note else []),
    )
    rank = graph.call_method("dim", (node,))
    graph.call_function(torch._assert, (graph.call_function(operator.eq, (rank, len(sizes))), message))
    same = [
        graph.call_function(operator.eq, (graph.call_function(operator.getitem, (size, dim)), fixed))
        for dim, fixed in enumerate(sizes)
        if fixed is not None
    ]
    if same:
        graph.call_function(torch._assert, (functools.reduce(_both(graph), same), message))


def _both(graph: Graph) -> Callable[[Node, Node], Node]:
    return lambda left, right: graph.call_function(operator.and_, (left, right))
