"""Time `fxopt.trace(model)` (auto mode, default arguments) on every model of the coverage matrix.

    HF_HUB_OFFLINE=1 python scripts/trace_times.py [NAME ...]

One line per architecture of `model_coverage.ARCHITECTURES` (the models `scripts/models_matrix.py`
runs; names restrict it) and the bundled MiniLM: the mode auto picked and the seconds the trace
took, as a Markdown table. Dynamo's caches are reset before each model, so every trace starts
cold, as a user's first call does. Issue 21's target: every model under 15 s.
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
from fxopt.cli.models import load_model  # noqa: E402
from model_coverage import ARCHITECTURES  # noqa: E402


def _time(model: torch.nn.Module) -> tuple[str, float]:
    torch._dynamo.reset()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph_module = fxopt.trace(model)
    return graph_module.meta["fxopt_trace"]["mode"], time.perf_counter() - start


def main(names: list[str]) -> int:
    transformers.logging.set_verbosity_error()
    print("| model | mode | trace s |\n|---|---|---:|")
    for architecture in ARCHITECTURES:
        if names and architecture.name not in names:
            continue
        try:
            mode, seconds = _time(architecture.build())
        except Exception as exc:  # a model that fails is a row, not the end of the table
            print(f"| {architecture.name} | failed: {type(exc).__name__} | |", flush=True)
            continue
        print(f"| {architecture.name} | {mode} | {seconds:.1f} |", flush=True)
    if not names or "MiniLM" in names:
        mode, seconds = _time(load_model("minilm").model)
        print(f"| MiniLM | {mode} | {seconds:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
