"""The transformation framework, with the names and call signatures of
``optimum.fx.optimization``: ``Transformation``, ``ReversibleTransformation``, ``compose``.

Differences from the reference, each a correctness fix:
- ``signature`` is a hash of the qualified class name and public parameters that is the same in
  every process (not Python's salted ``hash()``), and computing it changes nothing.
- Marks live in ``node.meta["fxopt_transformations"]`` as an immutable tuple, so copies of a
  graph (``copy.deepcopy``, ``DeepCopy``) never share mark state with the original.
"""

from __future__ import annotations

import enum
import hashlib
from abc import ABC, abstractmethod
from typing import Any

import torch
from torch.fx import GraphModule, Node

from ..engine import codegen, lint
from ..engine.bridge import is_application_of, paused_gc

MARKS_KEY = "fxopt_transformations"


def _stable_repr(value: Any) -> str:
    """A representation of a parameter that does not depend on the process."""
    if isinstance(value, Transformation):
        return value.signature
    if isinstance(value, (bool, int, float, str, type(None))):
        return repr(value)
    if isinstance(value, (torch.dtype, torch.device, enum.Enum)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_stable_repr(v) for v in value) + ")"
    if isinstance(value, dict):
        items = sorted((_stable_repr(k), _stable_repr(v)) for k, v in value.items())
        return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
    qualname = getattr(value, "__qualname__", None)
    if qualname is not None:  # classes and functions: by name, not by address
        return f"{getattr(value, '__module__', '')}.{qualname}"
    return f"{type(value).__module__}.{type(value).__qualname__}{value!r}"


class Transformation(ABC):
    """A graph-to-graph transformation of a ``torch.fx.GraphModule``.

    Subclasses implement :meth:`transform`, which may edit the GraphModule in place and returns
    it. ``preserves_computation`` says whether outputs stay the same (up to float rounding).
    """

    preserves_computation: bool = False

    @abstractmethod
    def transform(self, graph_module: GraphModule) -> GraphModule:
        """Applies the transformation; may edit `graph_module` in place."""

    def __call__(self, graph_module: GraphModule, lint_and_recompile: bool = True) -> GraphModule:
        _check_graph_module(self, graph_module)
        graph_module, changed = self._apply(graph_module, reverse=False)
        if lint_and_recompile and changed:
            _lint_and_recompile(graph_module)
        return graph_module

    def _apply(self, graph_module: GraphModule, reverse: bool) -> tuple[GraphModule, bool]:
        """Transforms (or reverses) and says whether the graph may differ from the module's
        code. A Python transformation edits fx nodes itself, so it may: always True; built-in
        ones know (nothing synced, nothing to recompile)."""
        assert not reverse
        return self.transform(graph_module), True

    def parameters(self) -> dict[str, Any]:
        """The public attributes that define this instance (what `signature` hashes)."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    @property
    def signature(self) -> str:
        """Identifies the class and parameters; equal across processes for equal instances."""
        cls = type(self)
        text = f"{cls.__module__}.{cls.__qualname__}{_stable_repr(self.parameters())}"
        return f"{cls.__name__}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"

    def mark_as_transformed(self, node: Node) -> None:
        marks = node.meta.get(MARKS_KEY, ())
        if self.signature not in marks:
            node.meta[MARKS_KEY] = (*marks, self.signature)

    def transformed(self, node: Node) -> bool:
        """Whether this transformation marked `node` (in any of its applications)."""
        return any(is_application_of(mark, self.signature) for mark in node.meta.get(MARKS_KEY, ()))

    def get_transformed_nodes(self, graph_module: GraphModule) -> list[Node]:
        return [node for node in graph_module.graph.nodes if self.transformed(node)]


class ReversibleTransformation(Transformation):
    """A transformation that can be undone by :meth:`reverse`."""

    @abstractmethod
    def reverse(self, graph_module: GraphModule) -> GraphModule:
        """Undoes :meth:`transform` on the nodes this transformation marked."""

    def __call__(  # type: ignore[override]
        self, graph_module: GraphModule, lint_and_recompile: bool = True, reverse: bool = False
    ) -> GraphModule:
        _check_graph_module(self, graph_module)
        graph_module, changed = self._apply(graph_module, reverse)
        if lint_and_recompile and changed:
            _lint_and_recompile(graph_module)
        return graph_module

    def _apply(self, graph_module: GraphModule, reverse: bool) -> tuple[GraphModule, bool]:
        return (self.reverse if reverse else self.transform)(graph_module), True

    def mark_as_restored(self, node: Node) -> None:
        marks = tuple(m for m in node.meta.get(MARKS_KEY, ()) if m != self.signature)
        if marks:
            node.meta[MARKS_KEY] = marks
        else:
            node.meta.pop(MARKS_KEY, None)


def _check_graph_module(transformation: Transformation, graph_module: object) -> None:
    """A clear TypeError for anything but a GraphModule (an nn.Module, None...), before
    anything is touched."""
    if not isinstance(graph_module, GraphModule):
        raise TypeError(
            f"{type(transformation).__name__} takes a torch.fx.GraphModule, got "
            f"{type(graph_module).__name__}; trace the model first (fxopt.trace(model))"
        )


def _lint_and_recompile(graph_module: GraphModule) -> None:
    with paused_gc():
        lint.lint(graph_module.graph)
        codegen.recompile(graph_module)
