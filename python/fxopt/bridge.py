"""The bridge between a ``torch.fx.GraphModule`` and the C++ engine.

A :class:`Bridge` imports a GraphModule into a core session once: nodes with their arguments,
the submodules and tensors that passes read (as metadata with opaque handles), and the paths
already taken. Passes then run entirely in C++; :meth:`Bridge.sync` replays their edit log onto
the GraphModule in one go, transactionally: if any edit fails, the edits already applied are
undone and the GraphModule is left exactly as it was.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import gc
import importlib
import keyword
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.fx
from torch.fx.node import _get_qualified_name

from . import _core
from .tensor_ops import TorchTensorOps, dtype_name

# Module attributes passes may read; plain values only (ints, floats, bools, strings, tuples).
MODULE_ATTRIBUTES = (
    "in_features", "out_features", "in_channels", "out_channels", "kernel_size", "stride",
    "padding", "dilation", "groups", "padding_mode", "output_padding", "transposed", "eps",
    "momentum", "affine", "track_running_stats", "num_features", "training", "approximate",
    "inplace", "normalized_shape", "elementwise_affine", "negative_slope", "dim",
)  # fmt: skip

_PLAIN = (bool, int, float, str, type(None))

# Node metadata key of the marks (signatures) of the transformations applied to a node.
MARKS_KEY = "fxopt_transformations"
# A plain GraphModule attribute listing the signatures whose marks the graph carried at the last
# sync. torch.save / torch.load re-trace the code and drop node.meta, and with it every mark and
# reversal record, but keep plain attributes: so reverse can say why it cannot, instead of
# silently doing nothing.
APPLIED_ATTR = "_fxopt_applied"


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pauses Python's cyclic garbage collector.

    Import and sync allocate many small objects while a large graph is alive, and every
    collection then walks the whole heap: on a 40k-node graph that tripled the sync time. The
    objects made here are freed by reference counting; the collector resumes afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def qualname(target: Any) -> str:
    """The symbol the core uses for a call_function target."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    return _get_qualified_name(target)


def resolve_target(name: str) -> Callable[..., Any]:
    """The callable a symbol names: the inverse of :func:`qualname`."""
    if name.startswith(("aten.", "prims.", "mkldnn.")):  # torch.ops namespaces
        namespace, *rest = name.split(".")
        obj: Any = getattr(torch.ops, namespace)
        for part in rest:
            obj = getattr(obj, part)
        return obj
    if "." not in name:
        return getattr(builtins, name)
    module_name, _, attr = name.rpartition(".")
    if module_name == "_operator":
        return getattr(operator, attr)
    module = importlib.import_module(module_name)
    return getattr(module, attr)


def type_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _plain(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return isinstance(value, _PLAIN)


@dataclass
class PassReport:
    """What one transformation did: nodes changed and candidates skipped, with reasons."""

    name: str
    changed: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def from_core(cls, name: str, result: _core.PassResult) -> PassReport:
        return cls(name, list(result.changed), [(s.node, s.reason) for s in result.skipped])


class Bridge:
    """One core session over one GraphModule."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm
        self.tensors = TorchTensorOps()
        self.session = _core.Session(torch.fx.Node, qualname, resolve_target)
        self.fx_nodes = list(gm.graph.nodes)
        self.session.import_graph(self.fx_nodes)
        self.session.reserve_names(_reserved_names())
        self.session.set_values([_value_info(node) for node in self.fx_nodes])
        self._imported_modules: set[str] = set()
        self._imported_attributes: set[str] = set()
        self._complete = False
        self._import_modules_and_attributes()

    def _import_modules_and_attributes(self) -> None:
        modules = dict(self.gm.named_modules())
        for node in self.fx_nodes:
            if node.op == "call_module" and isinstance(node.target, str):
                module = modules.get(node.target)
                if module is not None and node.target not in self._imported_modules:
                    self._import_module(node.target, module)
            elif node.op == "get_attr" and isinstance(node.target, str):
                value = _lookup(self.gm, node.target)
                if isinstance(value, torch.Tensor):
                    self._import_attribute(node.target, value)
        taken: list[str] = list(modules)
        for path, module in modules.items():
            prefix = f"{path}." if path else ""
            taken += [prefix + name for name in (*module._parameters, *module._buffers)]
        self.session.add_taken_paths(taken)

    def _import_everything(self) -> None:
        """Registers every submodule and stored tensor, called or read or not.

        Reverse re-points nodes at originals the graph no longer reads (a module a fold
        replaced, a weight a cast replaced); the next reverse in the same session reads them
        through the core, so a reverse session must know them all (not only those the graph
        read at import). Forward never needs this: passes only read what the graph reads."""
        if self._complete:
            return
        self._complete = True
        for path, module in self.gm.named_modules():
            if path and path not in self._imported_modules:
                self._import_module(path, module)
            prefix = f"{path}." if path else ""
            for name, tensor in (*module._parameters.items(), *module._buffers.items()):
                if tensor is not None and prefix + name not in self._imported_attributes:
                    self._import_attribute(prefix + name, tensor)

    def _import_attribute(self, path: str, tensor: torch.Tensor) -> None:
        self._imported_attributes.add(path)
        self.session.add_attribute(path, self.tensors.register(tensor))

    def _import_module(self, path: str, module: torch.nn.Module) -> None:
        self._imported_modules.add(path)
        # Plain attributes live in the instance dict; reading it directly skips nn.Module's slow
        # __getattr__ fallback for every attribute a module does not have.
        state = module.__dict__
        attributes = {
            name: state[name]
            for name in MODULE_ATTRIBUTES
            if name in state and state[name] is not None and _plain(state[name])
        }
        tensors = {
            name: None if t is None else self.tensors.register(t)
            for name, t in (*module._parameters.items(), *module._buffers.items())
        }
        self.session.add_module(path, type_name(module), attributes, tensors)

    def run(self, name: str, options: dict[str, Any], signature: str, reverse: bool) -> PassReport:
        """Runs one built-in pass in the core; the GraphModule is untouched until :meth:`sync`."""
        if reverse:
            self._check_records_survived(signature)
            self._import_everything()
        result = self.session.run(name, options, signature, reverse, self.tensors)
        return PassReport.from_core(name, result)

    def _check_records_survived(self, signature: str) -> None:
        if signature not in self.gm.__dict__.get(APPLIED_ATTR, ()):
            return
        if any(signature in node.meta.get(MARKS_KEY, ()) for node in self.fx_nodes):
            return
        raise _core.PassError(
            f"cannot reverse {signature}: the GraphModule was transformed by it, but the node "
            "metadata that records how to undo it is gone (torch.save / torch.load and "
            "re-tracing keep the code, not node.meta); reverse before saving, or keep the "
            "transformed GraphModule (or a copy.deepcopy of it) in memory"
        )

    def sync(self) -> None:
        """Replays the edit log onto the GraphModule, all or nothing."""
        replay = _Replay(self.gm, self.session, self.tensors)
        try:
            for index in range(self.session.edit_count()):
                replay.apply(self.session.edit(index))
            replay.finish()
        except BaseException:
            replay.undo()
            raise
        self.session.clear_edits()
        applied: set[str] = set()
        for node in self.gm.graph.nodes:
            applied.update(node.meta.get(MARKS_KEY, ()))
        self.gm.__dict__[APPLIED_ATTR] = tuple(sorted(applied))

    def rebuild(self) -> torch.fx.Graph:
        """A new fx.Graph built from the core graph alone (checks that import loses nothing)."""
        graph = torch.fx.Graph()
        graph._codegen = self.gm.graph._codegen  # pytree in/out handling of exported graphs
        for node_id in self.session.node_ids():
            # One node at a time: its arguments name the new nodes bound just before it.
            op, target, name, args, kwargs, origin = self.session.node(node_id)
            new = graph.create_node(op, target, args, kwargs, name=name)
            if origin >= 0:
                old = self.fx_nodes[origin]
                new.meta = dict(old.meta)
                new.type = old.type
            self.session.bind(node_id, new)
        return graph


@functools.cache
def _reserved_names() -> tuple[str, ...]:
    """Names fx never gives a node it creates (it appends ``_1``): Python keywords and
    builtins, and the names its generated code uses (``torch``, ``inf``...). The core avoids
    them too, so a node keeps the name the core gave it, which records may name."""
    custom = getattr(torch.fx.graph, "_custom_builtins", {})
    return tuple(sorted({*keyword.kwlist, *vars(builtins), *custom}))


def _value_info(node: torch.fx.Node) -> tuple[str, list[int], str] | None:
    """The dtype name, sizes (-1 for a symbolic size) and device ("" when not recorded) of the
    node's tensor value where fx recorded them (export's fake tensor in ``meta["val"]``,
    ShapeProp's ``meta["tensor_meta"]``, which has no device), else None. The device is given
    for strided tensors only, so equal devices also mean equal (strided) layouts."""
    value = node.meta.get("val")
    device = ""
    if isinstance(value, torch.Tensor) and value.layout == torch.strided:
        device = str(value.device)
    if not isinstance(value, torch.Tensor):
        value = node.meta.get("tensor_meta")
        if not isinstance(getattr(value, "shape", None), torch.Size):
            return None
    assert value is not None
    sizes = [size if isinstance(size, int) else -1 for size in value.shape]
    return dtype_name(value.dtype), sizes, device


def _lookup(root: torch.nn.Module, path: str) -> Any:
    obj: Any = root
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


class _Replay:
    """Applies core edits to a GraphModule, remembering how to undo each one."""

    def __init__(self, gm: torch.fx.GraphModule, session: Any, tensors: TorchTensorOps) -> None:
        self.gm = gm
        self.graph = gm.graph
        self.session = session
        self.tensors = tensors
        self.undo_steps: list[Callable[[], None]] = []
        self.to_erase: list[torch.fx.Node] = []
        self.parameters: dict[int, torch.nn.Parameter] = {}  # by tensor handle

    def apply(self, edit: tuple[Any, ...]) -> None:
        getattr(self, "_" + edit[0])(*edit[1:])

    def _create(self, node_id: int, anchor: int, op: str, target: Any, name: str, args: tuple,
                kwargs: dict) -> None:  # fmt: skip
        with self.graph.inserting_before(self.session.py_node(anchor)):
            node = self.graph.create_node(op, target, args, kwargs, name=name)
        self.session.bind(node_id, node)
        self.undo_steps.append(lambda: self.graph.erase_node(node))

    def _set_inputs(self, node_id: int, args: tuple, kwargs: dict) -> None:
        node = self.session.py_node(node_id)
        old_args, old_kwargs = node.args, node.kwargs
        node.args, node.kwargs = args, kwargs
        self.undo_steps.append(lambda: _set_inputs(node, old_args, old_kwargs))

    def _set_target(self, node_id: int, op: str, target: Any) -> None:
        node = self.session.py_node(node_id)
        old = node.op, node.target
        _set_op(node, op, target)
        self.undo_steps.append(lambda: _set_op(node, *old))

    def _set_meta(self, node_id: int, key: str, value: Any) -> None:
        node = self.session.py_node(node_id)
        self._remember_meta(node, key)
        node.meta[key] = value

    def _erase_meta(self, node_id: int, key: str) -> None:
        node = self.session.py_node(node_id)
        self._remember_meta(node, key)
        node.meta.pop(key, None)

    def _remember_meta(self, node: torch.fx.Node, key: str) -> None:
        missing = object()
        old = node.meta.get(key, missing)

        def restore() -> None:
            if old is missing:
                node.meta.pop(key, None)
            else:
                node.meta[key] = old

        self.undo_steps.append(restore)

    def _erase(self, node_id: int) -> None:
        # Deferred: an erased fx node cannot be revived, so erasing happens once nothing can fail.
        self.to_erase.append(self.session.py_node(node_id))

    def _move(self, node_id: int, anchor: int) -> None:
        node = self.session.py_node(node_id)
        old_next = node.next  # fx's root sentinel when it is last: prepend works on it too
        self.session.py_node(anchor).prepend(node)
        self.undo_steps.append(lambda: old_next.prepend(node))

    def _set_module(self, path: str, like: str, type_: str, attributes: dict, tensors: dict) -> None:
        module = _copy_module(self.gm.get_submodule(like), type_)
        # Plain values only (the core has no others): straight into the instance dict, as
        # nn.Module.__setattr__ would put them, without its checks of every table.
        for name, value in attributes.items():
            module.__dict__[name] = tuple(value) if isinstance(value, list) else value
        for name, info in tensors.items():
            _set_tensor(module, name, info, self._stored(info))
        self._edit_slot(path, lambda parent, name: setattr(parent, name, module))

    def _remove_module(self, path: str) -> None:
        self._edit_slot(path, delattr)

    def _set_attribute(self, path: str, info: Any) -> None:
        tensor = self._stored(info)
        self._edit_slot(path, lambda parent, name: _set_tensor(parent, name, info, tensor))

    def _stored(self, info: Any) -> torch.Tensor | None:
        """What to register for `info`: for a parameter, one Parameter object per tensor handle,
        so a tensor the core stores at several paths (tied weights) stays one object; a tensor
        that is such a Parameter already is registered itself."""
        if info is None:
            return None
        tensor = self.tensors.tensor(info)
        if not info.is_parameter:
            return tensor
        if info.handle not in self.parameters:
            if isinstance(tensor, torch.nn.Parameter) and tensor.requires_grad == info.requires_grad:
                self.parameters[info.handle] = tensor
            else:
                self.parameters[info.handle] = torch.nn.Parameter(tensor, info.requires_grad)
        return self.parameters[info.handle]

    def _remove_attribute(self, path: str) -> None:
        self._edit_slot(path, delattr)

    def _edit_slot(self, path: str, edit: Callable[[torch.nn.Module, str], None]) -> None:
        parent_path, _, name = path.rpartition(".")
        parent = self.gm.get_submodule(parent_path)
        self.undo_steps.append(_slot_restorer(parent, name))
        edit(parent, name)

    def finish(self) -> None:
        doomed = set(self.to_erase)
        for node in self.to_erase:
            outside = [u for u in node.users if u not in doomed]
            if outside:
                raise RuntimeError(f"cannot erase node '{node.name}': still used by {outside[0].name}")
        # Log order: the core erased each node once nothing read it, so fx can too.
        for node in self.to_erase:
            self.graph.erase_node(node)
        # fx never frees a name; freeing those of erased nodes lets a later reverse give a
        # recreated node its original name back.
        used_names = getattr(getattr(self.graph, "_graph_namespace", None), "_used_names", None)
        if used_names is not None:
            used_names.difference_update(node.name for node in self.to_erase)
        self.undo_steps.clear()

    def undo(self) -> None:
        for step in reversed(self.undo_steps):
            step()
        self.undo_steps.clear()


def _set_inputs(node: torch.fx.Node, args: tuple, kwargs: dict) -> None:
    node.args, node.kwargs = args, kwargs


def _set_op(node: torch.fx.Node, op: str, target: Any) -> None:
    # Each assignment re-files the node in fx's (op, target) lookup table: skip unchanged ones.
    if node.op != op:
        node.op = op
    if node.target is not target:
        node.target = target


def _slot_restorer(module: torch.nn.Module, name: str) -> Callable[[], None]:
    """Undo for any edit of `module.name`: puts back whichever table held it."""
    tables: tuple[dict[str, Any], ...] = (
        module._parameters, module._buffers, module._modules, module.__dict__
    )
    saved = [(table, name in table, table.get(name)) for table in tables]

    def restore() -> None:
        for table, present, value in saved:
            if present:
                table[name] = value
            else:
                table.pop(name, None)

    return restore


def _copy_module(template: torch.nn.Module, type_: str) -> torch.nn.Module:
    """A shallow copy with its own tables (copy-on-write).

    Tensors stay shared until replaced; every dict in the instance (parameters, buffers,
    submodules, hooks) is copied, so registering on the copy never reaches the template.
    """
    if type_name(template) != type_:
        raise TypeError(f"cannot derive a {type_} from a {type_name(template)}")
    module = template.__class__.__new__(template.__class__)
    module.__dict__ = {
        key: _fresh_dict(value) if isinstance(value, dict) else value
        for key, value in template.__dict__.items()
    }
    return module


def _fresh_dict(table: dict) -> dict:
    # Most hook tables are empty; a new empty one is much cheaper than OrderedDict.copy().
    return table.copy() if table else type(table)()


def _set_tensor(module: torch.nn.Module, name: str, info: Any, tensor: torch.Tensor | None) -> None:
    """Registers `tensor` (a Parameter where `info` says parameter) as a parameter or buffer of
    `module`."""
    for table in (module._parameters, module._buffers, module.__dict__):
        table.pop(name, None)
    if info is None or info.is_parameter:
        module._parameters[name] = tensor  # type: ignore[assignment]
    else:
        module._buffers[name] = tensor
