"""``compose``, ``DeepCopy`` and ``LintAndRecompile``."""

from __future__ import annotations

import copy

from torch.fx import GraphModule

from .builtin import BuiltinTransformation, run_builtin
from .transformation import ReversibleTransformation, Transformation, _lint_and_recompile


class DeepCopy(ReversibleTransformation):
    """Returns a deep copy of the GraphModule; both directions copy, so reversing a
    composition that starts with it never touches its input either."""

    preserves_computation = True

    def transform(self, graph_module: GraphModule) -> GraphModule:
        return copy.deepcopy(graph_module)

    def reverse(self, graph_module: GraphModule) -> GraphModule:
        return copy.deepcopy(graph_module)


class LintAndRecompile(ReversibleTransformation):
    """Lints the graph and regenerates the module's code."""

    preserves_computation = True

    def transform(self, graph_module: GraphModule) -> GraphModule:
        _lint_and_recompile(graph_module)
        return graph_module

    def reverse(self, graph_module: GraphModule) -> GraphModule:
        return self.transform(graph_module)


class ComposeTransformation(ReversibleTransformation):
    """Applies its members left to right; reverse undoes them right to left.

    Consecutive built-in members run inside one core session, with a single sync back to the
    GraphModule; a Python member sees a synced graph. Lint and recompile happen once, in
    ``__call__``, not per member. ``reverse`` requires every member to be reversible.
    """

    def __init__(self, transformations: list[Transformation], inplace: bool) -> None:
        self.transformations = transformations
        self.inplace = inplace
        self.preserves_computation = all(t.preserves_computation for t in transformations)

    @property
    def reversible(self) -> bool:
        return all(isinstance(t, ReversibleTransformation) for t in self.transformations)

    def transform(self, graph_module: GraphModule) -> GraphModule:
        return self._apply(graph_module, [(t, False) for t in self.transformations])

    def reverse(self, graph_module: GraphModule) -> GraphModule:
        if not self.reversible:
            raise TypeError("cannot reverse a composition with a non-reversible member")
        return self._apply(graph_module, [(t, True) for t in reversed(self.transformations)])

    def _apply(self, gm: GraphModule, steps: list[tuple[Transformation, bool]]) -> GraphModule:
        if not self.inplace:
            return _run(copy.deepcopy(gm), steps)
        if _all_or_nothing(steps):
            return _run(gm, steps)
        # A Python member edits fx directly, and the engine cannot undo that; so the members run
        # on a working copy (sharing the tensors, which no transformation writes), adopted only
        # once every member succeeded. A failure anywhere leaves `gm` exactly as it was.
        work = _working_copy(gm)
        result = _run(work, steps)
        if result is not work:
            return result  # a member returned another GraphModule (DeepCopy): gm stays as it was
        _adopt(gm, work)
        return gm


def _all_or_nothing(steps: list[tuple[Transformation, bool]]) -> bool:
    """True if running `steps` on the caller's module can fail only before touching it: one
    core session (all or nothing), then at most LintAndRecompile / DeepCopy members."""
    builtin = [isinstance(t, BuiltinTransformation) for t, _ in steps]
    tail = builtin.index(False) if False in builtin else len(steps)
    return not any(builtin[tail:]) and all(
        isinstance(t, (LintAndRecompile, DeepCopy)) for t, _ in steps[tail:]
    )


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


def _run(gm: GraphModule, steps: list[tuple[Transformation, bool]]) -> GraphModule:
    batch: list[tuple[BuiltinTransformation, bool]] = []
    for transformation, reverse in steps:
        if isinstance(transformation, BuiltinTransformation):
            batch.append((transformation, reverse))
            continue
        if batch:
            run_builtin(batch, gm)
            batch = []
        if reverse:
            assert isinstance(transformation, ReversibleTransformation)
            gm = transformation(gm, lint_and_recompile=False, reverse=True)
        else:
            gm = transformation(gm, lint_and_recompile=False)
    if batch:
        run_builtin(batch, gm)
    return gm


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
