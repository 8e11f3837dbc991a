"""`fxopt optimize --save PATH`: the optimized model as a `.pt2` ExportedProgram or an fxopt
graph file, written only once it is known to load.

`.pt2`: an ExportedProgram (torch.export on the example inputs, batch/sequence dimensions
dynamic) that `torch.export.load` runs with torch alone. Any other extension (`.pt`,
`.fxopt`...): `fxopt.save`'s format, which `fxopt.load` reads (transformers is imported only
where the graph returns one of its output classes), with the reversal records. A name without
an extension is refused: the two formats load differently, so the name must say which.

After writing, a fresh interpreter loads the file and runs it on the example inputs; the file
is kept only if its outputs match the optimized graph's (else it is removed and the command
fails naming why), so `--save` never reports a file that does not load.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import torch
from torch.fx import GraphModule

from ..optimization.exported import save_pt2
from ..storage import graph_file
from ..tracing.dummy_inputs import Inputs, split_inputs
from .errors import CliError

# Run in a fresh interpreter: load the artifact, run it on the inputs, compare tensor leaves.
_RELOAD = textwrap.dedent(
    """
    import sys
    import torch

    artifact, inputs_path, expected_path = sys.argv[1:]
    if artifact.endswith(".pt2"):
        module = torch.export.load(artifact).module()
    else:
        import fxopt
        module = fxopt.load(artifact)
    args, kwargs = torch.load(inputs_path)
    expected = torch.load(expected_path)
    with torch.no_grad():
        output = module(*args, **kwargs)
    leaves = [x for x in torch.utils._pytree.tree_leaves(output) if isinstance(x, torch.Tensor)]
    if len(leaves) != len(expected):
        sys.exit(f"{len(leaves)} output tensors, the optimized graph gives {len(expected)}")
    for got, want in zip(leaves, expected):
        torch.testing.assert_close(got, want)
    """
)


def save(graph_module: GraphModule, path: Path, inputs: Inputs | None = None) -> str:
    """Write the optimized model to `path`, check it loads in a fresh process; returns how to load it."""
    if inputs is None:
        raise CliError(f"cannot save {path}: the saved file is checked on example inputs; none given")
    try:
        if path.suffix == ".pt2":
            save_pt2(graph_module, *split_inputs(inputs), path)
            how = f"torch.export.load({str(path)!r}).module()"
        else:
            graph_file.save(graph_module, path)
            how = f"fxopt.load({str(path)!r})"
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}") from exc
    except Exception as exc:  # a value in the graph or a module fxopt or torch cannot write
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        writer = "torch.export" if path.suffix == ".pt2" else "fxopt.save"
        raise CliError(
            f"cannot save the optimized module to {path}: {writer} failed with "
            f"{type(exc).__name__}: {first_line}"
        ) from exc
    failure = _reload_failure(graph_module, path, inputs)
    if failure:
        path.unlink(missing_ok=True)
        raise CliError(f"{path} was written but does not load back (removed): {failure}")
    return how


def _reload_failure(graph_module: GraphModule, path: Path, inputs: Inputs) -> str:
    """'' if a fresh interpreter loads `path` and computes the optimized graph's outputs; else why."""
    args, kwargs = split_inputs(inputs)
    with torch.no_grad():
        output = graph_module(*args, **kwargs)
    expected = [x for x in torch.utils._pytree.tree_leaves(output) if isinstance(x, torch.Tensor)]
    with tempfile.TemporaryDirectory() as scratch:
        torch.save((args, kwargs), os.path.join(scratch, "inputs.pt"))
        torch.save(expected, os.path.join(scratch, "expected.pt"))
        script = os.path.join(scratch, "reload.py")
        Path(script).write_text(_RELOAD)
        done = subprocess.run(
            [sys.executable, script, str(path), *(os.path.join(scratch, f) for f in ("inputs.pt", "expected.pt"))],
            capture_output=True,
            text=True,
        )
    if done.returncode == 0:
        return ""
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"the check exited with {done.returncode}"


def check_writable(path: Path) -> None:
    """Fails with a CliError unless `path` can be created or overwritten, as a file of a known kind."""
    directory = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise CliError(f"cannot write {path}: it is a directory")
    if not path.suffix:
        raise CliError(
            f"cannot write {path}: name the format by the extension, .pt2 (an ExportedProgram, "
            "torch.export.load) or .pt (fxopt.load)"
        )
    if not directory.is_dir():
        raise CliError(f"cannot write {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise CliError(f"cannot write {path}: permission denied")
