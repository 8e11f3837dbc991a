"""Transformations whose work is done by the C++ engine.

A built-in transformation only names its core pass and parameters; :func:`run_builtin` imports
the GraphModule into a core session, runs the passes back to back there, and syncs the edits
back once. Until that sync succeeds the GraphModule is untouched.
"""

from __future__ import annotations

from typing import Any, Sequence

from torch.fx import GraphModule

from .. import _core
from ..bridge import Bridge, PassReport, paused_gc
from .transformation import ReversibleTransformation

TransformationError = _core.PassError


class BuiltinTransformation(ReversibleTransformation):
    """Base of the transformations implemented in C++ (``cpp/passes/``).

    `core_pass` names the pass in the engine's registry. After each call, :attr:`report` says
    which nodes changed and which candidates were skipped, and why.
    """

    core_pass: str
    _report: PassReport | None = None

    @property
    def report(self) -> PassReport | None:
        return self._report

    def core_options(self) -> dict[str, Any]:
        return self.parameters()

    def transform(self, graph_module: GraphModule) -> GraphModule:
        run_builtin([(self, False)], graph_module)
        return graph_module

    def reverse(self, graph_module: GraphModule) -> GraphModule:
        run_builtin([(self, True)], graph_module)
        return graph_module


def run_builtin(steps: Sequence[tuple[BuiltinTransformation, bool]], gm: GraphModule) -> None:
    """Runs (transformation, reverse) steps in one core session and syncs once."""
    with paused_gc():
        bridge = Bridge(gm)
        reports = []
        for transformation, reverse in steps:
            options = transformation.core_options()
            signature = transformation.signature
            reports.append(bridge.run(transformation.core_pass, options, signature, reverse))
        bridge.sync()
    for (transformation, _), report in zip(steps, reports):
        transformation._report = report
