"""`fxopt optimize MODEL`: the user's path (load, trace, transform, verify, time, save), each
step reported, and the same report as JSON."""

from __future__ import annotations

import argparse
import json
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from torch.fx import GraphModule
from torch.fx.passes.shape_prop import ShapeProp

from ..optimization import BuiltinTransformation, Transformation, compose, hardware, presets
from ..optimization.calibrated import CalibratedPass
from ..optimization.exported import savable
from ..tracing.dummy_inputs import Inputs, split_inputs
from ..tracing.trace import TRACE_META_KEY, TraceWarning, describe_failure, register_cache_pytrees, trace
from ..verification.stats import graph_stats, stats_table
from ..verification.verify import VerifyReport, verify
from . import models, sentences
from .errors import CliError
from .save import check_writable, save
from .timing import bench

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
SKIPPED_EXAMPLES = 3
"""Node names shown per skip reason; the JSON report has all of them."""


DEFAULT_BATCH = 2
DEFAULT_SEQ = 64


@dataclass
class PassOutcome:
    """What one transformation of the pipeline did, as shown and as written to JSON."""

    name: str
    signature: str
    changed: list[str]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    choices: list[dict[str, Any]] = field(default_factory=list)
    """Kernel choices per node (fxopt.tuning): op, picked, measured ratio, how decided."""
    tuning_s: float = 0.0


def cmd_optimize(args: argparse.Namespace, console: Console) -> int:
    for path in (args.save, args.json):  # before minutes of tracing and timing, not after
        if path:
            check_writable(path)
    report: dict[str, Any] = {"model": args.model, "seconds": {}}
    timings = report["seconds"]
    transformations = _transformations(args, console)
    report["passes_requested"] = [t.signature for t in transformations]

    with _phase(console, f"loading {args.model}", timings, "load"):
        loaded, inputs = _load(args, console)
    _calibrate(transformations, loaded, inputs)
    report["model_description"] = loaded.description
    report["inputs"] = _describe_inputs(inputs)
    console.print(escape(f"{args.model}: {loaded.description}; inputs {_inputs_text(report['inputs'])}"))
    report["hardware"] = f"{hardware.describe()}; {hardware.threads_text()}"
    console.print(escape(f"CPU: {report['hardware']}"))
    machine_note = presets.machine_note(args.preset) if args.passes is None else ""
    if machine_note:
        report["preset_note"] = machine_note
        console.print(f"[yellow]note:[/] {escape(machine_note)}")

    with _phase(console, "running the eager model", timings, "eager_run"):
        expected = _run_eager(loaded, inputs)
    with _phase(console, f"tracing ({args.mode})", timings, "trace"):
        graph_module, notes = _trace(loaded, inputs, args.mode)
    notes += _record_shapes(graph_module, inputs)
    fallback = graph_module.meta[TRACE_META_KEY]["fallback_reason"]
    report["trace"] = {
        "mode": graph_module.meta[TRACE_META_KEY]["mode"], "notes": notes, "fallback_reason": fallback
    }
    if fallback and getattr(args, "debug", False):
        notes.append(f"why the tracers before it failed: {fallback}")
    for note in notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    before = graph_stats(graph_module)

    with _phase(console, f"applying {len(transformations)} transformation(s)", timings, "transform"):
        graph_module = compose(*transformations)(graph_module)
    after = graph_stats(graph_module)
    report["passes"] = _show_outcomes(console, transformations, graph_module)
    report["stats"] = {"before": before.to_json(), "after": after.to_json()}
    console.print(stats_table(before, after))

    failure = ""
    if args.verify:
        accuracy = presets.get_preset(args.preset).accuracy if args.passes is None else None
        rtol = args.rtol if args.rtol is not None or accuracy is None else accuracy.rtol
        atol = args.atol if args.atol is not None or accuracy is None else accuracy.atol
        scale_atol = accuracy is not None and args.atol is None  # the preset's atol is relative
        with _phase(console, "verifying against the eager model", timings, "verify"):
            verdict = _verify(graph_module, expected, inputs, rtol, atol, scale_atol)
        report["verify"] = {"ok": verdict.ok, "rows": [asdict(row) for row in verdict.rows]}
        console.print(verdict.rich_table())
        if accuracy is not None:
            report["verify"]["declared"] = asdict(accuracy)
            failure = _accuracy_failure(args.preset, accuracy, verdict)
        elif not verdict.ok:
            failure = "the optimized model's outputs differ from the eager model's (see the verify table)"
        if failure:
            console.print(f"[bold red]verify FAILED:[/] {escape(failure)}")
    if args.bench:
        changed = sum(len(outcome["changed"]) for outcome in report["passes"])
        if changed:
            report["bench"] = bench(console, loaded.model, graph_module, inputs, args.warmup, args.repeats)
        else:
            report["bench"] = {"skipped": NOTHING_CHANGED}
            console.print(f"[yellow]{escape(NOTHING_CHANGED)}[/]")
    if args.save:
        with _phase(console, f"saving {args.save}", timings, "save"):
            how = save(graph_module, args.save, inputs)
        report["saved"] = {"path": str(args.save), "load": how}
        console.print(escape(f"saved to {args.save}: load it with {how}"))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
        console.print(escape(f"report written to {args.json}"))
    if failure:
        raise CliError(failure)
    return 0


NOTHING_CHANGED = (
    "nothing changed: no transformation rewrote a node of this graph, so the optimized model "
    "computes exactly what the traced one does; no speedup timed"
)


def _accuracy_failure(preset: str, accuracy: presets.Accuracy, verdict: VerifyReport) -> str:
    """Why the outputs fall outside what `preset` declares; '' when they are within it."""
    declared = f"cosine >= {accuracy.min_cosine}"
    if accuracy.rtol is not None or accuracy.atol is not None:
        declared += f", rtol {accuracy.rtol}, atol {accuracy.atol} x an output's largest magnitude"
    problems = [
        f"{row.name} cosine {row.cosine:.6f}"
        for row in verdict.rows
        if row.cosine is not None and row.cosine < accuracy.min_cosine
    ]
    problems += [
        f"{row.name} {row.note if row.max_abs_err is None else f'max abs err {row.max_abs_err:.3g}'}"
        for row in verdict.failures
    ]
    if not problems:
        return ""
    return f"preset {preset!r} declares {declared} against float32, but: {'; '.join(problems)} (see the verify table)"


def _transformations(args: argparse.Namespace, console: Console) -> list[Transformation]:
    """The instances to compose: `--passes` if given, else the preset's; for a `.pt2`, only
    passes whose result torch.export can save."""
    specs = (
        presets.split_specs(args.passes) if args.passes is not None else presets.preset_passes(args.preset)
    )
    if not specs:
        raise CliError("--passes names no pass")
    if _saves_pt2(args):
        specs, dropped = savable(specs)
        if dropped and args.passes is not None:
            raise CliError(f"--save {args.save}: torch.export.save cannot write the result of {', '.join(dropped)}")
        if dropped:
            console.print(
                f"[yellow]note:[/] {escape(', '.join(dropped))} left out of the preset: "
                "torch.export.save cannot write its result"
            )
    return presets.build_all(specs)


def _calibrate(transformations: list[Transformation], loaded: models.LoadedModel, inputs: Inputs) -> None:
    """Real sentences for the passes that calibrate on real inputs (fast's int8 Linears), where
    the model has them (the bundled MiniLM; `sentences.calibration_for`). Other models run those
    passes without, which they report."""
    if not loaded.real_text or not isinstance(inputs, dict):
        return
    chooser, checks = sentences.calibration_for(inputs)
    for transformation in transformations:
        if isinstance(transformation, CalibratedPass):
            transformation.calibrate_on(chooser, checks)


def _saves_pt2(args: argparse.Namespace) -> bool:
    return args.save is not None and args.save.suffix == ".pt2"


def _load(args: argparse.Namespace, console: Console) -> tuple[models.LoadedModel, Inputs]:
    """The model and inputs of the requested size and dtype."""
    loaded = models.load_model(args.model)
    given = [f"--{name} {value}" for name in ("batch", "seq") if (value := getattr(args, name)) is not None]
    if loaded.example_inputs is not None and given:
        console.print(
            f"[yellow]note:[/] {escape(args.model)} returns its own example inputs; "
            f"{escape(' and '.join(given))} ignored"
        )
    inputs = models.make_inputs(loaded, args.batch or DEFAULT_BATCH, args.seq or DEFAULT_SEQ)
    if args.dtype != "float32":
        inputs = models.cast(loaded, inputs, DTYPES[args.dtype])
    return loaded, inputs


@contextmanager
def _phase(console: Console, label: str, timings: dict[str, float], key: str) -> Iterator[None]:
    """A spinner while a phase runs (several take seconds), then its time, kept for the JSON."""
    start = time.perf_counter()
    with console.status(f"{label} ..."):
        yield
    timings[key] = time.perf_counter() - start
    console.print(f"[dim]{escape(label)}: {timings[key]:.2f}s[/]")


def _describe_inputs(inputs: Inputs) -> dict[str, str]:
    args, kwargs = split_inputs(inputs)
    named = {**{f"arg{i}": value for i, value in enumerate(args)}, **kwargs}
    return {
        name: f"{'x'.join(map(str, value.shape))} {str(value.dtype).removeprefix('torch.')}"
        if isinstance(value, torch.Tensor)
        else repr(value)
        for name, value in named.items()
    }


def _inputs_text(described: dict[str, str]) -> str:
    return ", ".join(f"{name} {text}" for name, text in described.items())


def _run_eager(loaded: models.LoadedModel, inputs: Inputs) -> Any:
    """The reference outputs, computed before any transformation touches anything.

    Running first also turns inputs the model cannot take (wrong shapes, a too long sequence)
    into one clear error before tracing, whose failure would be harder to read.
    """
    register_cache_pytrees(loaded.model)
    args, kwargs = split_inputs(inputs)
    try:
        with torch.no_grad():
            return loaded.model(*args, **kwargs)
    except Exception as exc:  # any failure of the user's model on these inputs
        raise CliError(
            f"{loaded.spec} cannot run on inputs {_inputs_text(_describe_inputs(inputs))}: {describe_failure(exc)}"
        ) from exc


def _trace(loaded: models.LoadedModel, inputs: Inputs, mode: str) -> tuple[GraphModule, list[str]]:
    """fxopt.trace on the inputs; its warnings (export fallback, fixed sizes) become notes."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TraceWarning)
        graph_module = trace(loaded.model, example_inputs=inputs, mode=mode)  # type: ignore[arg-type]
    return graph_module, [str(w.message) for w in caught if issubclass(w.category, TraceWarning)]


def _record_shapes(graph_module: GraphModule, inputs: Inputs) -> list[str]:
    """Run ShapeProp on a symbolic trace, which records no shapes; returns notes on failure.

    Passes that must know a value's rank (FuseBatchNorm1dInLinear: batch norm and Linear share
    an axis only on 2-D input) skip when it is unknown; exported graphs record it already.
    """
    if graph_module.meta[TRACE_META_KEY]["mode"] != "symbolic":
        return []
    args, kwargs = split_inputs(inputs)
    placeholders = [str(node.target) for node in graph_module.graph.find_nodes(op="placeholder")]
    keyword_slots = placeholders[len(args) : len(args) + len(kwargs)]  # later ones keep their defaults
    if set(keyword_slots) != set(kwargs):
        return ["shapes not recorded: the inputs do not match the graph's placeholders"]
    values = [*args, *(kwargs[name] for name in keyword_slots)]
    try:
        with torch.no_grad():
            ShapeProp(graph_module).propagate(*values)
    except Exception as exc:  # a graph that ShapeProp cannot run just loses shape-based folds
        return [f"shapes not recorded ({describe_failure(exc)}): passes that need them skip"]
    return []


def _show_outcomes(
    console: Console, transformations: list[Transformation], graph_module: GraphModule
) -> list[dict[str, Any]]:
    """Print what each transformation changed and skipped; returns the same for the JSON report."""
    outcomes = [_outcome(t, graph_module) for t in transformations]
    console.print(_passes_table(outcomes))
    _print_skips(console, outcomes)
    _print_choices(console, outcomes)
    return [asdict(outcome) for outcome in outcomes]


def _outcome(transformation: Transformation, graph_module: GraphModule) -> PassOutcome:
    """A built-in pass reports changes and skips; a Python one is known by the nodes it marked."""
    name = type(transformation).__name__
    if isinstance(transformation, BuiltinTransformation) and transformation.report is not None:
        report = transformation.report
        return PassOutcome(
            name, transformation.signature, list(report.changed), list(report.skipped),
            [asdict(choice) for choice in report.choices], report.tuning_s,
        )  # fmt: skip
    marked = [node.name for node in transformation.get_transformed_nodes(graph_module)]
    return PassOutcome(name, transformation.signature, marked)


def _passes_table(outcomes: list[PassOutcome]) -> Table:
    table = Table(title="transformations applied")
    for column, justify in (
        ("pass", "left"),
        ("nodes changed", "right"),
        ("skipped", "right"),
        ("signature", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for outcome in outcomes:
        table.add_row(outcome.name, str(len(outcome.changed)), str(len(outcome.skipped)), outcome.signature)
    return table


def _print_skips(console: Console, outcomes: list[PassOutcome]) -> None:
    """Skipped candidates grouped by reason: the reasons matter more than every node name."""
    for outcome in outcomes:
        by_reason: dict[str, list[str]] = {}
        for node, reason in outcome.skipped:
            by_reason.setdefault(reason, []).append(node)
        for reason, nodes in by_reason.items():
            shown = ", ".join(nodes[:SKIPPED_EXAMPLES]) + (", ..." if len(nodes) > SKIPPED_EXAMPLES else "")
            console.print(escape(f"  {outcome.name} skipped {len(nodes)}: {reason} ({shown})"))


def _print_choices(console: Console, outcomes: list[PassOutcome]) -> None:
    """Kernel choices grouped by what was picked and how: measured ones with their time ratio
    against the unchanged op, so a user sees what this machine rewarded."""
    for outcome in outcomes:
        groups: dict[tuple[str, str, str], list[float]] = {}
        for choice in outcome.choices:
            how = "measured" if choice["how"] == "cached" else choice["how"]
            groups.setdefault((choice["op"], choice["picked"], how), []).append(choice["ratio"])
        for (op, picked, how), ratios in groups.items():
            timing = f", {min(ratios):.2f}-{max(ratios):.2f}x the unchanged op's time" if how == "measured" else ""
            console.print(escape(f"  {outcome.name} chose {picked} for {len(ratios)} {op} ({how}{timing})"))
        if outcome.tuning_s:
            console.print(escape(f"  {outcome.name} timed kernels for {outcome.tuning_s:.2f} s (cached for next time)"))


def _verify(
    graph_module: GraphModule,
    expected: Any,
    inputs: Inputs,
    rtol: float | None,
    atol: float | None,
    scale_atol: bool = False,
) -> VerifyReport:
    """Compare with the outputs recorded before transforming, so a pass that (wrongly) edited
    the eager model's weights in place could not hide its error by changing the reference too."""

    def recorded(*args: Any, **kwargs: Any) -> Any:
        return expected

    return verify(recorded, graph_module, inputs, rtol=rtol, atol=atol, scale_atol=scale_atol)
