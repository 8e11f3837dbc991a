"""``Graph.lint()`` proved by the engine in one native walk where it can.

torch's lint is a Python loop over every node and, for every get_attr and call_module node, a
``getattr`` walk through ``nn.Module.__getattr__``: on a 100k-node graph it cost more than
generating the forward's code. The engine's check (``bindings/fx_lint.h``) reads fx internals, so
it runs only on the torch versions it was checked against and on plain ``fx.Graph`` objects;
wherever it cannot prove the graph well formed, torch's own lint runs and raises fx's error.
"""

from __future__ import annotations

import torch
import torch.fx

from .. import _core
from . import checked_torch


def lint(graph: torch.fx.Graph) -> None:
    """``graph.lint()``: raises what it raises, costs a fraction where the graph is clean."""
    native = (
        checked_torch.internals_checked()
        and type(graph) is torch.fx.Graph
        and _core.fx_graph_lints_clean(graph=graph, module_type=torch.nn.Module)
    )
    if not native:
        graph.lint()
