"""Trace a stack of identical layers twice and copy the rest, instead of tracing every one.

Dynamo traces Python one bytecode at a time, and a transformer's layers are most of that work:
on one Zen 4 core BERT-base's 12 layers took 3-4 s of a 4-5 s trace, about 0.25 s each, though
every layer runs the same code on weights of the same shapes. So a stack of three or more
layers that look alike (a `ModuleList` / `Sequential` run of one class with equal parameter
shapes and equal settings, only an index such as `layer_idx` differing) is shortened to its
first two layers in a shallow copy of the model that Dynamo traces (the model itself is not
touched), and the second layer's part of the graph is copied for every further layer,
reading that layer's weights and the previous copy's values.

Tracing two layers, not one, is what makes the copy safe to wire: the second layer's nodes
show which values come from the layer before (its input), which are shared by every layer
(the mask, position embeddings) and which the rest of the model reads after the stack. The
two traced layers must match node for node (same operations, same constants, weights at the
same paths below their layer), nothing after the stack may read the first layer's values, and
the stitched graph must give the model's own outputs, bit for bit, on the example inputs;
where any of that fails the model is traced whole, as before.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.fx import GraphModule, Node
from torch.utils import _pytree as pytree

_MIN_LAYERS = 3
"""A stack of two gains nothing: both layers are traced anyway."""

_MODULE_TABLES = frozenset(nn.Module().__dict__)
"""nn.Module's own bookkeeping (parameters, buffers, children, hooks, training)."""


@dataclasses.dataclass(frozen=True)
class Stack:
    """A run of alike layers: `container`'s children `first` .. `first + count - 1`."""

    path: str
    container: nn.Module
    first: int
    count: int

    def layer_path(self, index: int) -> str:
        return f"{self.path}.{index}" if self.path else str(index)


def find_stacks(model: nn.Module) -> list[Stack]:
    """Every ModuleList / Sequential whose last three or more children are alike (see
    `_alike`), outermost first; containers inside a found stack's layers are left alone."""
    stacks: list[Stack] = []
    for path, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)):
            continue
        if any(path.startswith(stack.path + ".") for stack in stacks):
            continue
        children = list(module._modules.values())
        if list(module._modules) != [str(i) for i in range(len(children))]:
            continue
        first = len(children) - 1
        while first > 0 and _alike(children[first - 1], first - 1, children, first):
            first -= 1
        if len(children) - first >= _MIN_LAYERS:
            stacks.append(Stack(path, module, first, len(children) - first))
    return stacks


def _alike(layer: nn.Module | None, index: int, children: Sequence[nn.Module | None], last: int) -> bool:
    """Whether `layer` (child `index`) is alike every child `index + 1` .. end, given those are
    alike each other (`last` is the first of them)."""
    reference = children[last]
    if layer is None or reference is None or layer is reference:
        return False
    if any(child is layer for child in children[last:]):
        return False
    return _same_structure(layer, reference, last - index)


def _same_structure(a: nn.Module, b: nn.Module, offset: int) -> bool:
    """Same module tree (classes, train / eval), same parameter and buffer names, shapes and
    dtypes, no hooks, and equal plain settings but for integers that differ by the layers'
    distance `offset` (a layer's own index, e.g. `layer_idx`)."""
    modules_a, modules_b = list(a.named_modules()), list(b.named_modules())
    if [(p, type(m), m.training) for p, m in modules_a] != [(p, type(m), m.training) for p, m in modules_b]:
        return False
    for (_, sub_a), (_, sub_b) in zip(modules_a, modules_b):
        if _hooked(sub_a) or _hooked(sub_b) or not _same_settings(sub_a, sub_b, offset):
            return False
    tensors_a = [*a.named_parameters(remove_duplicate=False), *a.named_buffers(remove_duplicate=False)]
    tensors_b = [*b.named_parameters(remove_duplicate=False), *b.named_buffers(remove_duplicate=False)]
    return [_tensor_key(n, t) for n, t in tensors_a] == [_tensor_key(n, t) for n, t in tensors_b]


def _tensor_key(name: str, tensor: torch.Tensor) -> tuple[Any, ...]:
    return (name, tuple(tensor.shape), tensor.dtype, tensor.device, tensor.requires_grad)


def _hooked(module: nn.Module) -> bool:
    """Hooks are per instance: a hook on one layer would be copied to the others."""
    return bool(
        module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
        or module._backward_pre_hooks or module._state_dict_hooks
    )


def _same_settings(a: nn.Module, b: nn.Module, offset: int) -> bool:
    settings_a = {k: v for k, v in a.__dict__.items() if k not in _MODULE_TABLES}
    settings_b = {k: v for k, v in b.__dict__.items() if k not in _MODULE_TABLES}
    if settings_a.keys() != settings_b.keys():
        return False
    for key, value in settings_a.items():
        other = settings_b[key]
        if value is other:
            continue
        if type(value) is int and type(other) is int and other - value == offset:
            continue
        if type(value) is not type(other) or isinstance(value, torch.Tensor):
            return False
        try:
            if not bool(value == other):
                return False
        except Exception:  # values without a plain equality are not provably the same
            return False
    return True


def shortened(model: nn.Module, stacks: list[Stack]) -> nn.Module:
    """A shallow copy of `model` in which each stack's container holds its layers up to the
    second of the run (the model's forward iterates what the container holds). Only the modules
    on the paths to the containers are copied, sharing every tensor and setting; the model
    itself is left alone, as another thread may be running it. No stacks: the model itself."""
    if not stacks:
        return model
    copies = {"": _shallow_copy(model)}
    for stack in stacks:
        parts = stack.path.split(".") if stack.path else []
        for depth in range(1, len(parts) + 1):
            path, parent = ".".join(parts[:depth]), ".".join(parts[: depth - 1])
            if path not in copies:
                copies[path] = _shallow_copy(copies[parent]._modules[parts[depth - 1]])
                copies[parent]._modules[parts[depth - 1]] = copies[path]
        container = copies[stack.path]
        container._modules = {k: v for k, v in container._modules.items() if int(k) < stack.first + 2}
    return copies[""]


def _shallow_copy(module: nn.Module | None) -> nn.Module:
    assert module is not None  # a path to a found stack has no empty slot
    clone = copy.copy(module)
    clone._modules = dict(module._modules)
    return clone


def stamp_layers(graph_module: GraphModule, stacks: list[Stack]) -> bool:
    """Copy each stack's second traced layer for its untraced layers, in `graph_module` whose
    attributes carry the model's paths (`restore_model_names`). False, with the graph as it
    was, when a stack's traced layers do not match node for node."""
    plans = []
    for stack in stacks:
        plan = _plan(graph_module, stack)
        if plan is None:
            return False
        plans.append(plan)
    for plan in plans:
        plan.apply(graph_module.graph)
    graph_module.graph.lint()
    graph_module.recompile()
    return True


def computes_model(graph_module: GraphModule, model: nn.Module, inputs: dict[str, Any]) -> bool:
    """Whether a graph (stitched, or traced by `sized`) gives `model`'s outputs bit for bit on `inputs` with token
    inputs cut to two tokens where the graph takes any length (the check then costs two
    forwards on two tokens, not on the example), or, where the cut inputs do not run alike, on
    `inputs` themselves."""
    cut = _cut_tokens(graph_module, inputs)
    return _same_outputs(graph_module, model, cut) or (cut is not inputs and _same_outputs(graph_module, model, inputs))


def _cut_tokens(graph_module: GraphModule, inputs: dict[str, Any]) -> dict[str, Any]:
    """`inputs` with each integer tensor (ids, masks: batch, sequence) cut to its first two
    positions where the graph keeps the sequence symbolic; `inputs` itself when none is."""
    placeholders = graph_module.graph.find_nodes(op="placeholder")
    cut = dict(inputs)
    for (name, value), node in zip(inputs.items(), placeholders):
        traced = node.meta.get("example_value", node.meta.get("val"))
        if (
            isinstance(value, torch.Tensor)
            and isinstance(traced, torch.Tensor)
            and not value.is_floating_point()
            and value.dim() >= 2
            and isinstance(traced.shape[1], torch.SymInt)
            and value.shape[1] > 2
        ):
            cut[name] = value[:, :2].clone()
    return inputs if all(cut[name] is value for name, value in inputs.items()) else cut


def _same_outputs(graph_module: GraphModule, model: nn.Module, inputs: dict[str, Any]) -> bool:
    try:
        with torch.no_grad():
            # forward itself: GraphModule's call prints the generated code of a failing line
            ours, ours_spec = pytree.tree_flatten(graph_module.forward(**inputs))
            # Flattened: assert_close has no comparison for a key/value cache object.
            theirs, their_spec = pytree.tree_flatten(model(**inputs))
            if ours_spec != their_spec:
                return False
            torch.testing.assert_close(ours, theirs, rtol=0, atol=0, equal_nan=True)
    except Exception:  # any difference or failure: the copies are not trusted
        return False
    return True


@dataclasses.dataclass
class _Plan:
    """How a stack's layers are copied: `second` is the traced layer copied, `first` the one
    before it (whose values the second reads as its input)."""

    stack: Stack
    first: list[Node]
    second: list[Node]

    def apply(self, graph: torch.fx.Graph) -> None:
        inside = set(self.second)
        after = {node: [u for u in node.users if u not in inside] for node in self.second}
        last = self.second
        for index in range(self.stack.first + 2, self.stack.first + self.stack.count):
            last = self._copy(graph, last, index)
        for node, copied in zip(self.second, last):
            for user in after[node]:
                user.replace_input_with(node, copied)

    def _copy(self, graph: torch.fx.Graph, previous: list[Node], index: int) -> list[Node]:
        """The second layer's nodes again after `previous` (the layer before, node for node),
        reading layer `index`'s weights and `previous` where the second layer reads the first."""
        traced, layer = self.stack.layer_path(self.stack.first + 1), self.stack.layer_path(index)
        module = self.stack.container._modules[str(index)]
        assert module is not None  # find_stacks takes no empty slots
        wired = dict(zip(self.first, previous))
        anchor = previous[-1]
        for node in self.second:
            with graph.inserting_after(anchor):
                anchor = graph.node_copy(node, lambda value: wired.get(value, value))
            if anchor.op in ("get_attr", "call_module"):
                anchor.target = layer + str(node.target)[len(traced) :]
            _relabel_module_stack(anchor, traced, layer, module)
            wired[node] = anchor
        return [wired[node] for node in self.second]


def _plan(graph_module: GraphModule, stack: Stack) -> _Plan | None:
    """The stack's two traced layers, checked to match node for node with the second reading
    the first only as its input, and nothing after them reading the first."""
    nodes = list(graph_module.graph.nodes)
    paths = [stack.layer_path(stack.first), stack.layer_path(stack.first + 1)]
    first, second = ([n for n in nodes if _in_layer(n, path)] for path in paths)
    if not first or len(first) != len(second):
        return None
    order = {node: i for i, node in enumerate(nodes)}
    for region in (first, second):
        if order[region[-1]] - order[region[0]] + 1 != len(region):
            return None  # not one block of the graph: other code runs amid the layer
    if order[first[-1]] > order[second[0]]:
        return None
    in_first = {node: i for i, node in enumerate(first)}
    in_second = {node: i for i, node in enumerate(second)}
    for a, b in zip(first, second):
        if not _same_node(a, b, paths, in_first, in_second):
            return None
    if any(user not in in_first and user not in in_second for node in first for user in node.users):
        return None  # the model keeps a value of every layer (hidden states): copies would not
    return _Plan(stack, first, second)


def _same_node(a: Node, b: Node, paths: list[str], in_first: dict[Node, int], in_second: dict[Node, int]) -> bool:
    """`b` (second layer) does what `a` (first layer) does: same operation and constants, a
    weight at the same path below its layer, values of its own layer at the same positions,
    the first layer's values where `a` reads the layers' input, the same outside values else."""
    if a.op != b.op:
        return False
    if a.op in ("get_attr", "call_module"):
        ta, tb = str(a.target), str(b.target)
        if not (ta.startswith(paths[0] + ".") and tb.startswith(paths[1] + ".")):
            return False
        if ta[len(paths[0]) :] != tb[len(paths[1]) :]:
            return False
    elif a.target != b.target:
        return False
    shape_a, leaves_a = _flatten((a.args, a.kwargs))
    shape_b, leaves_b = _flatten((b.args, b.kwargs))
    if shape_a != shape_b:
        return False
    for x, y in zip(leaves_a, leaves_b):
        if isinstance(x, Node) and isinstance(y, Node):
            if y in in_second:
                if in_second[y] != in_first.get(x):
                    return False
            elif y in in_first:
                if x in in_first or x in in_second:
                    return False  # the input of the first layer is a value from before it
            elif x is not y:
                return False
        elif isinstance(x, Node) or isinstance(y, Node) or not _same_constant(x, y):
            return False
    return True


def _flatten(value: Any) -> tuple[Any, list[Any]]:
    """A node's arguments as a hashable shape and the values in it (nodes and constants)."""
    leaves: list[Any] = []

    def walk(item: Any) -> Any:
        if isinstance(item, (tuple, list)):
            return (type(item), tuple(walk(v) for v in item))
        if isinstance(item, dict):
            return (dict, tuple((k, walk(v)) for k, v in item.items()))
        if isinstance(item, slice):
            return (slice, walk(item.start), walk(item.stop), walk(item.step))
        leaves.append(item)
        return None

    return walk(value), leaves


def _same_constant(x: Any, y: Any) -> bool:
    if x is y:
        return True
    if type(x) is not type(y) or isinstance(x, torch.Tensor):
        return False
    try:
        return bool(x == y)
    except Exception:  # not comparable: not provably the same
        return False


def _in_layer(node: Node, path: str) -> bool:
    if node.op in ("get_attr", "call_module"):
        return str(node.target).startswith(path + ".")
    stack = node.meta.get("nn_module_stack") or {}
    return any(_module_path(fqn) == path or _module_path(fqn).startswith(path + ".") for fqn, _ in stack.values())


def _module_path(fqn: str) -> str:
    """Dynamo's record of a module (`L['self'].encoder.layer.0`, `L['args'][0].model.layers[0]`
    where the model's forward is wrapped) as its path in the model (`encoder.layer.0`)."""
    return _ROOT.sub("", fqn).replace("[", ".").replace("]", "")


_ROOT = re.compile(r"^L(\[[^\]]*\])+\.?")
"""The model itself in Dynamo's source expressions: a local of the traced frame."""


def _relabel_module_stack(node: Node, traced: str, layer: str, module: nn.Module) -> None:
    """The copied node's module stack names its own layer (`module`, at path `layer`), keyed as
    the tracer keyed it: by the module's path (fx), else by its id (Dynamo)."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return
    relabeled = {}
    for key, (fqn, cls) in stack.items():
        path = _module_path(fqn)
        if path == traced or path.startswith(traced + "."):
            below = path[len(traced) :]
            by_path = key == fqn
            fqn = fqn[: len(fqn) - len(path)] + layer + below if fqn.endswith(path) else layer + below
            key = fqn if by_path else str(id(module.get_submodule(below.lstrip("."))))
        relabeled[key] = (fqn, cls)
    node.meta["nn_module_stack"] = relabeled
