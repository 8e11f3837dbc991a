"""The bridge between a ``torch.fx.GraphModule`` and the C++ engine.

A :class:`Bridge` imports a GraphModule into a core session once: nodes with their arguments
(one native walk of the fx node list), the submodules and tensors that passes read (as
metadata with opaque handles), and the paths already taken. Passes then run entirely in C++;
:meth:`Bridge.sync` replays their edit log onto the GraphModule in one go, transactionally: if
any edit fails, the edits already applied are undone and the GraphModule is left exactly as it
was.

:func:`attached` keeps the bridge on the GraphModule's graph between transformations, so
``t1(gm)``, ``t2(gm)`` and their reverses import the graph once. Before reuse it checks that
nothing changed the GraphModule behind the engine's back (the fx graph in one native walk, the
modules and tensors the engine knows); any such change means a fresh import.
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

from .. import _core
from . import checked_torch
from .tensor_ops import TorchTensorOps

# Tensor arithmetic only, no state: one for every session (each has its own TensorTable).
_TORCH_OPS = TorchTensorOps()

# Module attributes passes may read; plain values only (ints, floats, bools, strings, tuples).
MODULE_ATTRIBUTES = (
    "in_features", "out_features", "in_channels", "out_channels", "kernel_size", "stride",
    "padding", "dilation", "groups", "padding_mode", "output_padding", "transposed", "eps",
    "momentum", "affine", "track_running_stats", "num_features", "training", "approximate",
    "inplace", "normalized_shape", "elementwise_affine", "negative_slope", "dim",
)  # fmt: skip


# Node metadata key of the marks (signatures) of the transformations applied to a node.
MARKS_KEY = "fxopt_transformations"
# A plain GraphModule attribute listing the signatures whose marks the graph carried at the last
# sync. torch.save / torch.load re-trace the code and drop node.meta, and with it every mark and
# reversal record, but keep plain attributes: so reverse can say why it cannot, instead of
# silently doing nothing.
APPLIED_ATTR = "_fxopt_applied"


def is_application_of(mark: str, signature: str) -> bool:
    """Whether `mark` is the signature of an application of `signature`'s transformation: the
    first one signs plainly, a later one on a graph it changed before "<signature>@2", "@3"...
    (rewrite/marks.h)."""
    return mark == signature or (mark.startswith(signature + "@") and mark[len(signature) + 1 :].isdigit())


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pauses Python's cyclic garbage collector.

    Import, sync and torch's recompile allocate many small objects while a large graph is
    alive, and every collection then walks the whole heap: on a 40k-node graph that tripled the
    sync time, and full collections were a third of a 30k-node compose. The objects made here
    are freed by reference counting; the collector resumes afterwards.
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


@dataclass
class PassReport:
    """What one transformation did: nodes changed and candidates skipped, with reasons."""

    name: str
    changed: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    choices: list[KernelChoice] = field(default_factory=list)
    """Kernel choices the pass asked about, per node (fxopt.tuning)."""
    tuning_s: float = 0.0
    """Seconds spent timing candidate kernels during the pass (0 when all came from the cache)."""

    @classmethod
    def from_core(cls, name: str, result: _core.PassResult, tuning_s: float = 0.0) -> PassReport:
        return cls(
            name,
            list(result.changed),
            [(s.node, s.reason) for s in result.skipped],
            [KernelChoice(c.node, c.op, c.picked, c.ratio, c.how) for c in result.choices],
            tuning_s,
        )


@dataclass
class KernelChoice:
    """One answer of the kernel chooser: which candidate `node` got, and why."""

    node: str
    op: str
    picked: str
    ratio: float
    """The pick's measured time over the unchanged op's (1.0 when nothing was measured)."""
    how: str
    """measured, cached, pinned, static (the pass's fallback), with the reason for a fallback."""


class Bridge:
    """One core session over one GraphModule."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm
        self.tensors = _core.TensorTable(tensor_type=torch.Tensor, parameter_type=torch.nn.Parameter)
        self.session = _core.Session(
            node_type=torch.fx.Node, tensor_type=torch.Tensor, size_type=torch.Size,
            strided=torch.strided, qualname=qualname, resolve=resolve_target,
        )  # fmt: skip
        called, read = self.session.import_graph(root=gm.graph._root)
        self.session.reserve_names(names=_reserved_names())
        self._imported_attributes: set[str] = set()
        self._complete = False
        # False once the fx graph and the core graph may differ in ways `matches` cannot see.
        self._in_step = True
        self.session.import_modules(root=gm, paths=called, attributes=MODULE_ATTRIBUTES, tensors=self.tensors)
        for path in read:
            value = _lookup(gm, path)
            if isinstance(value, torch.Tensor):
                self._import_attribute(path, value)
        self._remember_modules()

    def _remember_modules(self) -> None:
        """Records what the engine knows of the modules, to tell later whether it still holds,
        in one native walk: every module with its parameters, buffers and the plain attributes
        read of those imported (``training`` flips on ``gm.eval()``), and the values at the
        paths get_attr nodes read (found as :func:`_lookup` finds them; None where a pass
        removed one), all by identity."""
        self.session.snapshot_modules(
            root=self.gm, attributes=list(MODULE_ATTRIBUTES), paths=sorted(self._imported_attributes),
            module_type=torch.nn.Module,
        )  # fmt: skip

    @property
    def in_step(self) -> bool:
        """False once the fx graph and the core graph may differ in ways the native checks of
        the fx graph cannot see (a sync that renamed nodes, a failed sync, a rebuild)."""
        return self._in_step

    def current(self) -> bool:
        """True if the GraphModule is still what the session last imported or synced."""
        if not self._in_step or not self.session.matches(root=self.gm.graph._root):
            return False
        return self.session.modules_match(root=self.gm)

    def _import_everything(self) -> None:
        """Registers every submodule and stored tensor, called or read or not.

        Reverse re-points nodes at originals the graph no longer reads (a module a fold
        replaced, a weight a cast replaced); the next reverse in the same session reads them
        through the core, so a reverse session must know them all (not only those the graph
        read at import). Forward never needs this: passes only read what the graph reads."""
        if self._complete:
            return
        self._complete = True
        self.session.import_modules(root=self.gm, paths=None, attributes=MODULE_ATTRIBUTES, tensors=self.tensors)
        for path, module in self.gm.named_modules():
            prefix = f"{path}." if path else ""
            for name, tensor in (*module._parameters.items(), *module._buffers.items()):
                if tensor is not None and prefix + name not in self._imported_attributes:
                    self._import_attribute(prefix + name, tensor)
        self._remember_modules()

    def _import_attribute(self, path: str, tensor: torch.Tensor) -> None:
        self._imported_attributes.add(path)
        self.session.add_attribute(path=path, tensor=self.tensors.add(tensor))

    def run(
        self, name: str, options: dict[str, Any], signature: str, reverse: bool, chooser: Any = None
    ) -> PassReport:
        """Runs one built-in pass in the core; the GraphModule is untouched until :meth:`sync`.

        `chooser` answers the pass's kernel choices (an object with the `choose` method of
        fxopt.tuning.GraphChoices and its `spent_s`); None: each pass's static fallback.
        """
        spent = getattr(chooser, "spent_s", 0.0)
        if reverse:
            self._check_records_survived(signature)
            self._import_everything()
        with torch.no_grad():  # for every TensorOps call the pass makes
            result = self.session.run(
                name=name, options=options, signature=signature, reverse=reverse,
                tensor_ops=_TORCH_OPS, tensor_table=self.tensors, chooser=chooser,
            )
        return PassReport.from_core(name, result, getattr(chooser, "spent_s", 0.0) - spent)

    def _check_records_survived(self, signature: str) -> None:
        if not any(is_application_of(m, signature) for m in self.gm.__dict__.get(APPLIED_ATTR, ())):
            return
        if any(is_application_of(m, signature) for node in self.gm.graph.nodes for m in node.meta.get(MARKS_KEY, ())):
            return
        raise _core.PassError(
            f"cannot reverse {signature}: the GraphModule was transformed by it, but the node "
            "metadata that records how to undo it is gone (torch.save / torch.load and "
            "re-tracing keep the code, not node.meta); save with fxopt.save / fxopt.load, "
            "which keep it, reverse before saving, or keep the transformed GraphModule (or a "
            "copy.deepcopy of it) in memory"
        )

    def sync(self) -> bool:
        """Replays the edit log onto the GraphModule, all or nothing; False (and nothing
        touched) when the log is empty."""
        if self.session.edit_count() == 0:
            return False
        # Edits a later one overwrites are skipped: each node is written once per change.
        structural, meta = self.session.effective_edits()
        replay = _replay(self.gm, self.session, self.tensors)
        try:
            replay.apply(indices=structural)
            replay.check_erasable()
            # Natively, all or nothing (every value is converted before the first write); last,
            # so no later failure needs it undone.
            self.session.write_meta(indices=meta)
        except BaseException:
            replay.undo()
            self._in_step = False
            raise
        replay.erase()
        self.session.clear_edits()
        self._in_step = not replay.renamed
        self.session.snapshot(root=self.gm.graph._root)
        self._remember_modules()
        self.tensors.retain(self.session.module_tensors())
        self.gm.__dict__[APPLIED_ATTR] = tuple(self.session.applied_marks())
        return True

    def rebuild(self) -> torch.fx.Graph:
        """A new fx.Graph built from the core graph alone (checks that import loses nothing).
        Binds the core nodes to the new fx nodes: the bridge is not used again afterwards."""
        graph = torch.fx.Graph()
        graph._codegen = self.gm.graph._codegen  # pytree in/out handling of exported graphs
        for node_id in self.session.node_ids():
            # One node at a time: its arguments name the new nodes bound just before it.
            op, target, name, args, kwargs, origin = self.session.node(id=node_id)
            new = graph.create_node(op, target, args, kwargs, name=name)
            if origin >= 0:
                old = self.session.py_node(id=node_id)
                new.meta = dict(old.meta)
                new.type = old.type
            self.session.bind(id=node_id, fx_node=new)
        self._in_step = False
        return graph


@functools.cache
def _reserved_names() -> tuple[str, ...]:
    """Names fx never gives a node it creates (it appends ``_1``): Python keywords and
    builtins, and the names its generated code uses (``torch``, ``inf``...). The core avoids
    them too, so a node keeps the name the core gave it, which records may name."""
    custom = getattr(torch.fx.graph, "_custom_builtins", {})
    return tuple(sorted({*keyword.kwlist, *vars(builtins), *custom}))


# The attribute of an fx.Graph holding its attached Bridge. On the graph, not the GraphModule:
# a deep copy (fx.Graph.__deepcopy__ copies nodes only) or a new graph starts without one.
_ATTACHED = "_fxopt_bridge"


def attached(gm: torch.fx.GraphModule) -> Bridge:
    """The bridge attached to `gm`, or a fresh import attached from now on if there is none or
    anything changed the GraphModule since the bridge last saw it."""
    bridge = gm.graph.__dict__.get(_ATTACHED)
    if isinstance(bridge, Bridge) and bridge.gm is gm and bridge.current():
        return bridge
    detach(gm)  # the old session goes before the new one is built: one engine graph at a time
    bridge = Bridge(gm)
    gm.graph.__dict__[_ATTACHED] = bridge
    return bridge


def detach(gm: torch.fx.GraphModule) -> None:
    """Drops the bridge attached to `gm` (after a failure its engine graph is not the fx graph)."""
    gm.graph.__dict__.pop(_ATTACHED, None)


def adopt_bridge(gm: torch.fx.GraphModule) -> None:
    """Points the bridge attached to `gm`'s graph at `gm` (the graph moved to another module)."""
    bridge = gm.graph.__dict__.get(_ATTACHED)
    if isinstance(bridge, Bridge):
        bridge.gm = gm


_REQUIRED = object()


def _lookup(root: torch.nn.Module, path: str, default: Any = _REQUIRED) -> Any:
    """`root`'s attribute at a dotted path ("" is `root`), as getattr would find it."""
    obj: Any = root
    for part in path.split(".") if path else ():
        obj = _child(obj, part)
        if obj is _REQUIRED:
            if default is _REQUIRED:
                raise AttributeError(f"the GraphModule has no attribute '{path}'")
            return default
    return obj


def _child(obj: Any, name: str) -> Any:
    """getattr(obj, name, _REQUIRED), reading a module's tables directly: nn.Module finds them
    only in its __getattr__ fallback, after a failed lookup, several times slower on the
    thousands of paths a large graph names. Names the class defines go through getattr, as
    its attributes come first there."""
    if isinstance(obj, torch.nn.Module) and not hasattr(type(obj), name):
        state = obj.__dict__
        if name in state:
            return state[name]
        for table in (state["_parameters"], state["_buffers"], state["_modules"]):
            if name in table:
                return table[name]
        return _REQUIRED
    return getattr(obj, name, _REQUIRED)


def _replay(gm: torch.fx.GraphModule, session: _core.Session, tensors: _core.TensorTable) -> _core.Replay:
    """The native replay of `session`'s structural edits onto `gm` (bindings/replay.h)."""
    hooks = getattr(torch.nn.modules.module, "_global_module_registration_hooks", None)
    return _core.Replay(
        session=session, graph_module=gm, tensors=tensors, module_type=torch.nn.Module,
        registration_hooks=hooks if isinstance(hooks, dict) else {},
        direct_inputs=checked_torch.internals_checked(),
    )  # fmt: skip
