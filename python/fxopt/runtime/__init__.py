"""Functions the graphs fxopt writes call at run time, where no torch op does the whole job.

They are plain Python functions on plain tensors, named in graphs by their qualified name, so a
transformed GraphModule deep-copies, saves (``fxopt.save``) and reloads like any other; each is
a `graph_leaf`, so code that calls it traces to one call of it (``torch.load`` of a pickled
GraphModule traces the graph's code again).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])


def graph_leaf(function: F) -> F:
    """`function`, recorded as one call_function node when torch.fx traces a call of it (its
    first argument then is a Proxy) instead of being traced through: its body packs weights and
    checks arguments, which a trace would either fix or fail on."""

    @functools.wraps(function)
    def call(x: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(x, torch.fx.Proxy):
            return x.tracer.create_proxy("call_function", call, (x, *args), kwargs)
        return function(x, *args, **kwargs)

    return call  # type: ignore[return-value]


from .openmp_team import join_torch_team  # noqa: E402  (after graph_leaf, which its kernels' modules import)

join_torch_team()
