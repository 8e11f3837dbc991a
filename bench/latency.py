"""CPU latency of bundled models: eager, fxopt, Optimum, optimize_for_inference, torch.compile.

For each model, every tool prepares its own version of the model, and all versions are then
timed round-robin on the same inputs (`fxopt.cli.measure_latency`: one call of each per round,
so background load on a shared machine hits them alike). Reported per tool: median latency,
speedup over eager, the time it spent preparing (tracing, transforming, compiling), how many
nodes its transformations changed, and whether its outputs match eager (`fxopt.verify`).

The tools:

* eager: the transformers model as loaded.
* fxopt traced: `fxopt.trace` only, no pass: separates the effect of tracing from that of passes.
* fxopt default / all-preserving: the presets of `fxopt optimize` on the traced graph.
* Optimum: `optimum.fx.optimization` (its five preserving passes) on the same traced graph.
  Optimum traced with `transformers.utils.fx`, which transformers 5 removed; its passes only
  know module-level graphs (`call_module` Linear, `operator.truediv`), so on torch.export
  graphs they change nothing, which the table shows.
* optimize_for_inference: `torch.fx.experimental.optimization.optimize_for_inference` (conv/BN
  fusion, MKLDNN layouts), which symbolic-traces the eager model itself; where that fails the
  reason is listed.
* torch.compile: inductor; preparation time is the first call, which compiles.

With `--per-pass`, also the effect of each preserving built-in pass alone on the traced graph:
the measurement that decides which passes `default` holds.

Timing: by default one torch thread and CPU time per call (`--threads 1 --clock cpu`): the
machines this project runs on are shared, and wall time there measured other jobs as much as
the models. `--clock wall --threads N` gives user-visible latency on a quiet machine.

Run: `python bench/latency.py` (about 20 minutes on 2 cores) or `--quick`.
Writes bench/results/latency.md.
"""

from __future__ import annotations

import argparse
import copy
import gc
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from torch import nn
from torch.fx import GraphModule

import fxopt
import optimum.fx.optimization as optimum_optimization
from fxopt import models, presets
from fxopt.cli import measure_latency
from fxopt.dummy_inputs import Inputs, split_inputs
from fxopt.optimization import BuiltinTransformation, compose

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_description, markdown_table, write_result  # noqa: E402

MODELS = ("bert-base", "minilm", "gpt2", "resnet50", "mobilenet-v2")
QUICK_MODELS = ("minilm", "mobilenet-v2")
CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
"""CPU time measures the work a model does even while other jobs share the machine (with one
torch thread, where no thread spins waiting for another); wall time is what a user waits."""

OPTIMUM_PASSES = (
    "ChangeTrueDivToMulByInverse",
    "FuseBatchNorm2dInConv2d",
    "FuseBatchNorm1dInLinear",
    "MergeLinears",
    "FuseBiasInLinear",
)


@dataclass
class Variant:
    """One tool's version of a model, with what preparing it cost and changed."""

    tool: str
    model: Callable[..., Any] | None
    prepare_s: float = 0.0
    changed: int | None = None
    note: str = ""
    median_ms: float | None = None
    min_ms: float | None = None
    matches: bool | None = None
    max_error: float | None = None
    """Largest absolute difference from eager over all outputs."""


@dataclass
class PassEffect:
    speedup: float
    """Fastest run of the traced graph over that of traced + the pass; above 1 means faster."""
    changed: int


@dataclass
class ModelResult:
    name: str
    inputs: str
    trace_mode: str
    variants: list[Variant] = field(default_factory=list)
    per_pass: dict[str, PassEffect] = field(default_factory=dict)


def timed(function: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:160]}"


def fxopt_variant(tool: str, traced: GraphModule, trace_s: float, specs: list[str]) -> Variant:
    """A copy of the traced graph with `specs` applied; preparation = tracing + transforming."""
    graph_module = copy.deepcopy(traced)
    if not specs:
        return Variant(tool, graph_module, trace_s, 0)
    transformations = presets.build_all(specs)
    graph_module, seconds = timed(lambda: compose(*transformations)(graph_module))
    changed = sum(
        len(t.report.changed)
        for t in transformations
        if isinstance(t, BuiltinTransformation) and t.report is not None
    )
    return Variant(tool, graph_module, trace_s + seconds, changed, ", ".join(specs))


def optimum_variant(traced: GraphModule, trace_s: float) -> Variant:
    graph_module = copy.deepcopy(traced)
    composition = optimum_optimization.compose(
        *(getattr(optimum_optimization, name)() for name in OPTIMUM_PASSES)
    )
    try:
        graph_module, seconds = timed(lambda: composition(graph_module))
    except Exception as exc:  # Optimum's passes on graphs they were not written for
        return Variant("Optimum", None, note=one_line(exc))
    changed = sum(1 for node in graph_module.graph.nodes if getattr(node, "transformations", None))
    note = "" if changed else "no module-level Linear / truediv nodes in this graph: nothing to change"
    return Variant("Optimum", graph_module, trace_s + seconds, changed, note)


def optimize_for_inference_variant(model: nn.Module) -> Variant:
    from torch.fx.experimental.optimization import optimize_for_inference

    try:
        optimized, seconds = timed(lambda: optimize_for_inference(copy.deepcopy(model)))
    except Exception as exc:  # it symbolic-traces, which most transformers models defeat
        return Variant("optimize_for_inference", None, note=one_line(exc))
    return Variant("optimize_for_inference", optimized, seconds)


def compile_variant(model: nn.Module, inputs: Inputs) -> Variant:
    """torch.compile; the first call compiles, so it counts as preparation."""
    compiled = torch.compile(copy.deepcopy(model))
    args, kwargs = split_inputs(inputs)
    try:
        with torch.no_grad():
            _, seconds = timed(lambda: compiled(*args, **kwargs))
    except Exception as exc:  # a compiler failure is a result, not a crash of the benchmark
        return Variant("torch.compile", None, note=one_line(exc))
    return Variant("torch.compile", compiled, seconds)


def bench_model(name: str, args: argparse.Namespace, console: Console) -> ModelResult:
    loaded = models.load_model(name)
    inputs = models.make_inputs(loaded, args.batch, args.seq)
    model = loaded.model
    traced, trace_s = timed(lambda: fxopt.trace(model, example_inputs=inputs))
    described = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in split_inputs(inputs)[1].items())
    result = ModelResult(name, described, traced.meta["fxopt_trace"]["mode"])
    variants = [
        Variant("eager", model),
        fxopt_variant("fxopt traced", traced, trace_s, []),
        fxopt_variant("fxopt default", traced, trace_s, presets.preset_passes("default")),
        fxopt_variant("fxopt all-preserving", traced, trace_s, presets.preset_passes("all-preserving")),
        optimum_variant(traced, trace_s),
        optimize_for_inference_variant(model),
    ]
    if not args.no_compile:
        variants.append(compile_variant(model, inputs))
    runnable = {v.tool: v.model for v in variants if v.model is not None}
    latencies = measure_latency(runnable, inputs, args.warmup, args.repeats, clock=CLOCKS[args.clock])
    for variant in variants:
        if variant.model is not None:
            variant.median_ms = latencies[variant.tool].median_ms
            variant.min_ms = latencies[variant.tool].min_ms
            report = fxopt.verify(model, variant.model, inputs)
            variant.matches = report.ok
            variant.max_error = max((row.max_abs_err or 0.0) for row in report.rows)
    result.variants = variants
    if args.per_pass:
        result.per_pass = per_pass_effects(traced, inputs, args)
    console.print(variant_table(result))
    return result


def per_pass_effects(traced: GraphModule, inputs: Inputs, args: argparse.Namespace) -> dict[str, PassEffect]:
    """The effect of every preserving pass alone on the traced graph.

    The fastest run, not the median: a pass changes the work a model does, which shows in its
    best case, while the median also carries whatever else the (shared) machine was doing.
    """
    candidates: dict[str, Callable[..., Any]] = {"traced": copy.deepcopy(traced)}
    changed: dict[str, int] = {}
    for pass_name in presets.preset_passes("all-preserving"):
        variant = fxopt_variant(pass_name, traced, 0.0, [pass_name])
        candidates[pass_name], changed[pass_name] = variant.model, variant.changed or 0
    latencies = measure_latency(candidates, inputs, args.warmup, args.repeats, clock=CLOCKS[args.clock])
    base = latencies["traced"].min_ms
    return {name: PassEffect(base / latencies[name].min_ms, count) for name, count in changed.items()}


def variant_rows(result: ModelResult) -> list[list[str]]:
    eager = result.variants[0]
    rows = []
    for v in result.variants:
        timed_ok = v.median_ms is not None and v.min_ms is not None
        rows.append([
            result.name,
            v.tool,
            f"{v.median_ms:.1f}" if timed_ok else "n/a",
            f"{v.min_ms:.1f}" if timed_ok else "n/a",
            f"{eager.median_ms / v.median_ms:.2f}x" if timed_ok else "n/a",
            f"{eager.min_ms / v.min_ms:.2f}x" if timed_ok else "n/a",
            f"{v.prepare_s:.2f}" if v.model is not None else "n/a",
            "" if v.changed is None else str(v.changed),
            "" if v.matches is None else f"{'yes' if v.matches else 'NO'} ({v.max_error:.1e})",
            v.note,
        ])  # fmt: skip
    return rows


HEADER = [
    "model", "tool", "median ms", "min ms", "speedup (median)", "speedup (min)", "prepare s", "nodes changed",
    "matches eager (max abs err)", "note",
]  # fmt: skip
NUMERIC = {"median ms", "min ms", "speedup (median)", "speedup (min)", "prepare s", "nodes changed"}


def variant_table(result: ModelResult) -> Table:
    table = Table(title=f"{result.name} ({result.inputs}; traced with {result.trace_mode})")
    for column in HEADER:
        table.add_column(column, justify="right" if column in NUMERIC else "left")
    for row in variant_rows(result):
        table.add_row(*row)
    return table


def per_pass_section(results: list[ModelResult]) -> list[str]:
    passes = list(results[0].per_pass)

    def cell(effect: PassEffect) -> str:
        return f"{effect.speedup:.3f} ({effect.changed})" if effect.changed else "- (0)"

    rows = [[r.name, *(cell(r.per_pass[p]) for p in passes)] for r in results]
    return [
        "## Effect of each pass alone",
        "",
        "Fastest run of the traced graph divided by that of the traced graph plus the one pass "
        "(above 1: the pass speeds the model up), with the number of nodes the pass changed in "
        "parentheses; `- (0)`: the pass found nothing to change. This decides which passes `default` holds.",
        "",
        *markdown_table(["model", *passes], rows),
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", help=f"bundled model names (default: {' '.join(MODELS)})")
    parser.add_argument(
        "--quick", action="store_true", help=f"{' and '.join(QUICK_MODELS)}, 5 repeats, no per-pass table"
    )
    parser.add_argument(
        "--batch", type=int, default=2, help="batch size (default 2: export fixes size-1 dimensions)"
    )
    parser.add_argument("--seq", type=int, default=32, help="sequence length of text models")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1, see --clock)")
    parser.add_argument(
        "--clock",
        choices=tuple(CLOCKS),
        default="cpu",
        help="cpu: CPU time per call, steady on a shared machine with --threads 1 (default); wall: latency",
    )
    parser.add_argument("--per-pass", action="store_true", help="also time each preserving pass alone")
    parser.add_argument(
        "--no-compile", action="store_true", help="skip torch.compile (its compilation is slow)"
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # torch's deprecation chatter would bury the tables
    if args.quick:
        args.repeats, args.warmup = 5, 1
    torch.set_num_threads(args.threads)
    names = args.models or (QUICK_MODELS if args.quick else MODELS)
    machine = machine_description()
    console = Console(width=200)
    results = []
    # torch.compile's preparation time is a cold compile, like a user's first: inductor's caches,
    # which persist across runs under /tmp, go to a fresh directory (inductor reads it on use).
    inductor_cache = tempfile.TemporaryDirectory(prefix="fxopt-bench-inductor-")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", inductor_cache.name)
    with inductor_cache, Progress(console=console, transient=True) as progress:
        task = progress.add_task("models", total=len(names))
        for name in names:
            progress.update(task, description=f"{name}")
            results.append(bench_model(name, args, console))
            gc.collect()
            progress.advance(task)

    sections = [
        "## Setup",
        "",
        f"- inputs: batch {args.batch}, sequence {args.seq} for text models, 224x224 images; float32; CPU",
        f"- clock: {args.clock} ({'CPU time of the process per call' if args.clock == 'cpu' else 'wall time per call'}), "
        f"{args.threads} torch thread(s); with one thread, CPU time is the work a call does even on a shared machine",
        f"- {args.repeats} rounds after {args.warmup} warm-up rounds; tools take turns within each round; median and "
        "fastest run reported (the machine is shared, so the fastest run is the steadier measure of a tool's work)",
        f"- fxopt presets: default = {', '.join(presets.preset_passes('default'))}; "
        f"all-preserving = {', '.join(presets.preset_passes('all-preserving'))}",
        f"- Optimum: {', '.join(OPTIMUM_PASSES)} on fxopt's traced graph",
        "- matches eager: `fxopt.verify` at its float32 defaults (rtol 1e-4, atol 1e-5), largest absolute error in parentheses",
        "- prepare s: tracing + transforming (fxopt, Optimum), optimize_for_inference's own time, torch.compile's first call",
        "",
        "## Results",
        "",
        *markdown_table(HEADER, [row for result in results for row in variant_rows(result)]),
        "",
    ]
    if args.per_pass:
        sections += per_pass_section(results)
    command = "python bench/latency.py " + " ".join(sys.argv[1:])
    path = write_result(
        "latency_quick" if args.quick else "latency",  # a quick check never replaces the full results
        "Model latency on CPU: eager, fxopt, Optimum, optimize_for_inference, torch.compile",
        command.strip(),
        machine,
        sections,
    )
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
