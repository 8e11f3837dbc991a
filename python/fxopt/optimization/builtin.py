"""Transformations whose work is done by the C++ engine.

A built-in transformation only names its core pass and parameters; :func:`run_builtin` takes the
core session attached to the GraphModule (importing it only if there is none or the GraphModule
changed since), runs the passes back to back there, and syncs the edits back once. Until that
sync succeeds the GraphModule is untouched; when the passes changed nothing, nothing is synced
and nothing needs recompiling.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

from torch.fx import GraphModule

from .. import _core, tuning
from ..engine.bridge import PassReport, attached, detach, paused_gc
from .transformation import ReversibleTransformation

TransformationError = _core.PassError


# The engine's pass table (cpp/passes/registry.cc), by name.
REGISTRY: dict[str, _core.PassInfo] = {info.name: info for info in _core.passes()}


class BuiltinTransformation(ReversibleTransformation):
    """Base of the transformations implemented in C++ (``cpp/passes/``).

    A subclass named like a registry entry runs that pass, and its facts (`core_pass`,
    `summary`, `preserves_computation`) are the registry's; a subclass of it with another name
    (`GeluToTanhApproximation`) runs its parent's pass with fixed arguments. After each call,
    :attr:`report` says which nodes changed and which candidates were skipped, and why.
    """

    core_pass: ClassVar[str]
    summary: ClassVar[str]
    _report: PassReport | None = None
    prepares: ClassVar[bool] = False
    """True for passes that must look at the graph as it is before running forward (a
    calibration runs it): :meth:`prepare` is then called on the synced GraphModule, so such a
    pass starts a new engine run in a composition."""

    def prepare(self, graph_module: GraphModule) -> bool:
        """Called before the forward pass of a class that `prepares`; False: nothing to run
        (the pass sets its own report)."""
        return True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        info = REGISTRY.get(cls.__name__)
        if info is not None:
            cls.core_pass = info.name
            cls.summary = info.summary
            cls.preserves_computation = info.preserves_computation

    @property
    def report(self) -> PassReport | None:
        return self._report

    def core_options(self) -> dict[str, Any]:
        return self.parameters()

    def transform(self, graph_module: GraphModule) -> GraphModule:
        return self._apply(graph_module, reverse=False)[0]

    def reverse(self, graph_module: GraphModule) -> GraphModule:
        return self._apply(graph_module, reverse=True)[0]

    def _apply(self, graph_module: GraphModule, reverse: bool) -> tuple[GraphModule, bool]:
        if self.prepares and not reverse and not self.prepare(graph_module):
            return graph_module, False
        return graph_module, run_builtin([(self, reverse)], graph_module)


def run_builtin(steps: Sequence[tuple[BuiltinTransformation, bool]], gm: GraphModule) -> bool:
    """Runs (transformation, reverse) steps in the GraphModule's core session and syncs once;
    returns whether the GraphModule changed."""
    chooser = tuning.current()
    with paused_gc(), chooser.cache.writes_deferred():
        bridge = attached(gm)
        choices = chooser.for_graph(gm)  # one tuning budget for the whole run
        try:
            reports = []
            for transformation, reverse in steps:
                options = transformation.core_options()
                signature = transformation.signature
                reports.append(bridge.run(transformation.core_pass, options, signature, reverse, choices))
            changed = bridge.sync()
        except BaseException:
            detach(gm)  # the engine's graph holds edits the GraphModule does not
            raise
    for (transformation, _), report in zip(steps, reports):
        transformation._report = report
    return changed
