"""`fxopt optimize --save PATH`: the optimized model as a `.pt2` ExportedProgram or a pickled
GraphModule."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import torch
from torch.fx import GraphModule

from ..optimization.exported import save_pt2
from ..tracing.dummy_inputs import Inputs, split_inputs
from .errors import CliError


def save(graph_module: GraphModule, path: Path, inputs: Inputs | None = None) -> str:
    """Write the optimized model to `path`; returns how to load it.

    `.pt2`: an ExportedProgram (torch.export on `inputs`, which it needs; batch/sequence dimensions dynamic)
    that `torch.export.load` runs with torch alone. Otherwise a plain `torch.fx.GraphModule`
    pickled with `torch.save`: its generated code, submodules and tensors, nothing of fxopt's;
    loading it imports the modules its code and submodules come from (transformers, for a
    transformers model). A torch.export graph carries two things that cannot be pickled, and
    are left out of the copy: the `_guards_fn` input check (a call_module node with no users)
    and the module's input/output hooks. torch re-traces the code when loading, which turns
    output containers such as transformers' ModelOutput into plain dicts with the same keys.
    """
    try:
        if path.suffix == ".pt2":
            if inputs is None:
                raise CliError(f"cannot save {path}: a .pt2 is exported on example inputs; none given")
            save_pt2(graph_module, *split_inputs(inputs), path)
            return f"torch.export.load({str(path)!r}).module()"
        torch.save(_picklable(graph_module), path)
        return f"torch.load({str(path)!r}, weights_only=False)"
    except CliError:
        raise
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}") from exc
    except Exception as exc:  # a value in the graph or a module torch cannot save or export
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        raise CliError(
            f"cannot save the optimized module to {path}: "
            f"{'torch.export' if path.suffix == '.pt2' else 'torch.save'} failed with "
            f"{type(exc).__name__}: {first_line}"
        ) from exc


def _picklable(graph_module: GraphModule) -> GraphModule:
    """A plain GraphModule copy of `graph_module` without export's `_guards_fn` node."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(graph_module.graph, {}))
    graph._codegen = copy.copy(graph_module.graph._codegen)
    for node in list(graph.nodes):
        if node.op == "call_module" and node.target == "_guards_fn" and not node.users:
            graph.erase_node(node)
    return torch.fx.GraphModule(graph_module, graph)


def check_writable(path: Path) -> None:
    """Fails with a CliError unless `path` can be created or overwritten."""
    directory = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise CliError(f"cannot write {path}: it is a directory")
    if not directory.is_dir():
        raise CliError(f"cannot write {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise CliError(f"cannot write {path}: permission denied")
