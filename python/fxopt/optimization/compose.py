"""``compose``, ``DeepCopy`` and ``LintAndRecompile``."""

from __future__ import annotations

import copy

from torch.fx import GraphModule

from ..engine.bridge import adopt_bridge
from .builtin import BuiltinTransformation, run_builtin
from .transformation import (
    ReversibleTransformation,
    Transformation,
    _check_graph_module,
    _lint_and_recompile,
)


class DeepCopy(ReversibleTransformation):
    """Returns a deep copy of the GraphModule; both directions copy, so reversing a
    composition that starts with it never touches its input either."""

    preserves_computation = True

    def transform(self, graph_module: GraphModule) -> GraphModule:
        return copy.deepcopy(graph_module)

    def reverse(self, graph_module: GraphModule) -> GraphModule:
        return copy.deepcopy(graph_module)

    def _apply(self, graph_module: GraphModule, reverse: bool) -> tuple[GraphModule, bool]:
        # A GraphModule's deep copy generates its code afresh.
        return copy.deepcopy(graph_module), False


class LintAndRecompile(ReversibleTransformation):
    """Lints the graph and regenerates the module's code."""

    preserves_computation = True

    def transform(self, graph_module: GraphModule) -> GraphModule:
        _lint_and_recompile(graph_module)
        return graph_module

    def reverse(self, graph_module: GraphModule) -> GraphModule:
        return self.transform(graph_module)

    def _apply(self, graph_module: GraphModule, reverse: bool) -> tuple[GraphModule, bool]:
        return self.transform(graph_module), False  # the code was just generated


class ComposeTransformation(ReversibleTransformation):
    """Applies its members left to right; reverse undoes them right to left.

    Consecutive built-in members run inside one core session, with a single sync back to the
    GraphModule; a Python member sees a synced graph. Lint and recompile happen once, in
    ``__call__``, not per member, and not at all when no member changed the graph. ``reverse``
    requires every member to be reversible.
    """

    def __init__(self, transformations: list[Transformation], inplace: bool) -> None:
        self.transformations = transformations
        self.inplace = inplace
        self.preserves_computation = all(t.preserves_computation for t in transformations)

    @property
    def reversible(self) -> bool:
        return all(isinstance(t, ReversibleTransformation) for t in self.transformations)

    def transform(self, graph_module: GraphModule) -> GraphModule:
        return self._apply(graph_module, reverse=False)[0]

    def reverse(self, graph_module: GraphModule) -> GraphModule:
        return self._apply(graph_module, reverse=True)[0]

    def _apply(self, graph_module: GraphModule, reverse: bool) -> tuple[GraphModule, bool]:
        if reverse and not self.reversible:
            raise TypeError("cannot reverse a composition with a non-reversible member")
        members = reversed(self.transformations) if reverse else iter(self.transformations)
        steps = [(t, reverse) for t in members]
        if not self.inplace:
            return _run(copy.deepcopy(graph_module), steps)
        if _all_or_nothing(steps):
            return _run(graph_module, steps)
        # A Python member edits fx directly, and the engine cannot undo that; so the members run
        # on a working copy (sharing the tensors, which no transformation writes), adopted only
        # once every member succeeded. A failure anywhere leaves `gm` exactly as it was.
        work = _working_copy(graph_module)
        result, changed = _run(work, steps)
        if result is not work:
            # a member returned another GraphModule (DeepCopy): graph_module stays as it was
            return result, changed
        _adopt(graph_module, work)
        return graph_module, changed


def _all_or_nothing(steps: list[tuple[Transformation, bool]]) -> bool:
    """True if running `steps` on the caller's module can fail only before touching it: one
    core session (all or nothing), then at most LintAndRecompile / DeepCopy members."""
    builtin = [isinstance(t, BuiltinTransformation) and not _prepares(t, reverse) for t, reverse in steps]
    tail = builtin.index(False) if False in builtin else len(steps)
    return not any(builtin[tail:]) and all(
        isinstance(t, (LintAndRecompile, DeepCopy)) for t, _ in steps[tail:]
    )


def _prepares(transformation: Transformation, reverse: bool) -> bool:
    return isinstance(transformation, BuiltinTransformation) and transformation.prepares and not reverse


def _working_copy(gm: GraphModule) -> GraphModule:
    """A deep copy of `gm` that shares its parameters and buffers (not copied)."""
    memo: dict[int, object] = {}
    for tensor in (*gm.parameters(), *gm.buffers()):
        memo[id(tensor)] = tensor
    work: GraphModule = copy.deepcopy(gm, memo)
    return work


def _adopt(gm: GraphModule, work: GraphModule) -> None:
    """Makes `gm` what `work` became: submodules, tensors, attributes, graph and code.

    A GraphModule's compiled forward lives on its own class (fx makes one per instance), so
    `gm` takes `work`'s class too: no recompile beyond those the members asked for."""
    gm.__dict__.update(work.__dict__)
    work.graph.owning_module = gm
    gm.__class__ = type(work)
    adopt_bridge(gm)


def _run(gm: GraphModule, steps: list[tuple[Transformation, bool]]) -> tuple[GraphModule, bool]:
    """Runs the steps; returns the result and whether its graph may differ from its code."""
    batch: list[tuple[BuiltinTransformation, bool]] = []
    changed = False
    for transformation, reverse in steps:
        if isinstance(transformation, BuiltinTransformation):
            if _prepares(transformation, reverse):
                if batch:  # it looks at the graph as the steps before it left it
                    changed |= run_builtin(batch, gm)
                    batch = []
                if not transformation.prepare(gm):
                    continue
            batch.append((transformation, reverse))
            continue
        if batch:
            changed |= run_builtin(batch, gm)
            batch = []
        _check_graph_module(transformation, gm)
        gm, member_changed = transformation._apply(gm, reverse)
        # LintAndRecompile and DeepCopy leave code that matches the graph so far.
        changed = member_changed or (changed and not isinstance(transformation, (LintAndRecompile, DeepCopy)))
    if batch:
        changed |= run_builtin(batch, gm)
    return gm, changed


def compose(*transformations: Transformation, inplace: bool = True) -> ComposeTransformation:
    """One transformation applying `transformations` in order (``optimum``'s ``compose``).

    With ``inplace=False`` the input GraphModule is never modified, by transform or reverse.
    """
    if not transformations:
        raise ValueError("compose() needs at least one transformation")
    for t in transformations:
        if not isinstance(t, Transformation):
            raise TypeError(f"compose() takes Transformation instances, got {type(t).__name__}")
    return ComposeTransformation(list(transformations), inplace)
