"""Time `fxopt.trace(model)` (auto mode, default arguments) on every model of the coverage matrix.

    HF_HUB_OFFLINE=1 python scripts/trace_times.py [NAME ...]

One line per architecture of `model_coverage.ARCHITECTURES` (the models `scripts/models_matrix.py`
runs; names restrict it) and the bundled models: the mode auto picked, the layers Dynamo copied
instead of tracing them (`repeated_layers`), and the seconds the trace took, then, where layers
were copied, the seconds of a whole trace of the same model (every layer traced), as a Markdown
table. Dynamo's caches are reset before each trace, so every trace starts cold, as a user's
first call does. Issue 21's target: every model under 15 s.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never the hub

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))

import fxopt  # noqa: E402
from fxopt.cli.models import BUNDLED, load_model  # noqa: E402
from fxopt.tracing import repeated_layers  # noqa: E402
from model_coverage import ARCHITECTURES  # noqa: E402


def _time(model: torch.nn.Module, copying: bool = True) -> tuple[str, int, float]:
    """The mode used, the layers copied and the seconds of one cold trace of `model`."""
    torch._dynamo.reset()
    find_stacks = repeated_layers.find_stacks
    if not copying:
        repeated_layers.find_stacks = lambda model: []
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph_module = fxopt.trace(model)
    finally:
        repeated_layers.find_stacks = find_stacks
    info = graph_module.meta["fxopt_trace"]
    return info["mode"], sum(info["copied_layers"].values()), time.perf_counter() - start


def _row(name: str, model: torch.nn.Module) -> str:
    mode, copied, seconds = _time(model)
    whole = f"{_time(model, copying=False)[2]:.1f}" if copied else ""
    return f"| {name} | {mode} | {copied} | {seconds:.1f} | {whole} |"


def main(names: list[str]) -> int:
    transformers.logging.set_verbosity_error()
    print("| model | mode | layers copied | trace s | whole trace s |\n|---|---|---:|---:|---:|")
    for architecture in ARCHITECTURES:
        if names and architecture.name not in names:
            continue
        try:
            print(_row(architecture.name, architecture.build()), flush=True)
        except Exception as exc:  # a model that fails is a row, not the end of the table
            print(f"| {architecture.name} | failed: {type(exc).__name__} | | | |", flush=True)
    for bundled in BUNDLED:
        if not names or bundled in names:
            print(_row(bundled, load_model(bundled).model), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
