"""The `fxopt` command line: optimize a model and show what happened, list passes and models.

`fxopt optimize MODEL` walks the user's path of the design (trace, transform, verify, run) and
reports every step, because a user deciding whether to trust a graph optimizer needs to see
what it changed, what it refused to change and why, whether outputs still match, and whether
it is faster. Bad input ends in one line on stderr and exit code 1 (2 for bad usage); `--debug`
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import logging
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import torch
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from torch.fx import GraphModule
from torch.fx.passes.shape_prop import ShapeProp

from . import hardware, models, presets
from .dummy_inputs import Inputs, split_inputs
from .exported import save_pt2, savable
from .optimization import BuiltinTransformation, Transformation, compose
from .stats import graph_stats, stats_table
from .tracing import TRACE_META_KEY, TraceWarning, describe_failure, register_cache_pytrees, trace
from .verify import VerifyReport, verify

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
SKIPPED_EXAMPLES = 3
"""Node names shown per skip reason; the JSON report has all of them."""


DEFAULT_BATCH = 2
DEFAULT_SEQ = 64


class CliError(Exception):
    """Bad input the user can fix; printed as one line, never with a traceback."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr like every other fxopt error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"fxopt: error: {message} (see {self.prog} --help)\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `fxopt` console script and of `python -m fxopt`."""
    args = build_parser().parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 160)
    errors = sys.stderr
    try:
        with contextlib.ExitStack() as quiet:
            if not args.debug:
                quiet.enter_context(_library_output_hidden())
            return int(args.command(args, console))
    except KeyboardInterrupt:
        print("fxopt: interrupted", file=errors)
        return 130
    except Exception as exc:  # every failure becomes one line unless --debug asks for the traceback
        if args.debug:
            raise
        print(f"fxopt: error: {one_line(exc)}", file=errors)
        return 1


@contextmanager
def _library_output_hidden() -> Iterator[None]:
    """Silence what torch and transformers write to stderr (warnings, logs, graph dumps).

    The CLI reports what matters itself (trace fallbacks as notes, failures as one line); the
    libraries' own output stays available with --debug.
    """
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch._logging.set_logs(all=logging.ERROR)
        yield


_USER_ERRORS = (CliError, models.ModelError, presets.PassSpecError)
"""Errors whose message says it all; others are prefixed with their type, which hints at the cause."""


def one_line(exc: BaseException) -> str:
    """The exception's message with its lines joined, so multi-line errors stay one line."""
    text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if isinstance(exc, _USER_ERRORS):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def build_parser() -> argparse.ArgumentParser:
    debug_help = "show tracebacks and library warnings"
    parser = _Parser(prog="fxopt", description="A torch.fx graph optimizer with a C++ engine.")
    parser.add_argument("--debug", action="store_true", help=debug_help)
    # Accepted after the command too; SUPPRESS keeps a subcommand from resetting `fxopt --debug`.
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
    commands = parser.add_subparsers(title="commands", required=True, parser_class=_Parser)

    optimize = commands.add_parser(
        "optimize", parents=[common], help="trace, transform, verify and time a model"
    )
    optimize.add_argument(
        "model",
        help=f"bundled name ({', '.join(models.BUNDLED)}), config JSON, model directory or file.py:factory",
    )
    chosen = optimize.add_mutually_exclusive_group()
    chosen.add_argument(
        "--passes",
        help="comma-separated passes with optional arguments, e.g. MergeLinears,FuseBatchNormInConv",
    )
    chosen.add_argument(
        "--preset",
        default="default",
        help=f"named pass list: {', '.join(presets.PRESETS)} (default: default)",
    )
    optimize.add_argument(
        "--mode",
        choices=("auto", "symbolic", "dynamo", "export"),
        default="auto",
        help="tracer (default: auto)",
    )
    # None when not given, so a factory that brings its own inputs can say they were ignored.
    optimize.add_argument("--batch", type=_positive, help=f"batch size of the inputs (default: {DEFAULT_BATCH})")
    optimize.add_argument(
        "--seq", type=_positive, help=f"sequence length of token inputs (default: {DEFAULT_SEQ})"
    )
    optimize.add_argument("--dtype", choices=tuple(DTYPES), default="float32", help="model and input dtype")
    optimize.add_argument("--verify", action="store_true", help="compare outputs with the eager model")
    optimize.add_argument("--rtol", type=float, help="relative tolerance for --verify (default: per dtype)")
    optimize.add_argument("--atol", type=float, help="absolute tolerance for --verify (default: per dtype)")
    optimize.add_argument("--bench", action="store_true", help="time eager against optimized")
    optimize.add_argument(
        "--repeats", type=_positive, default=20, help="timed runs per model for --bench (default: 20)"
    )
    optimize.add_argument("--warmup", type=_count, default=3, help="untimed runs before timing (default: 3)")
    optimize.add_argument(
        "--save",
        type=Path,
        help="write the optimized model: FILE.pt2 is an ExportedProgram (torch.export.load, torch "
        "alone); any other name a pickled GraphModule (torch.load; a transformers model's needs "
        "transformers installed)",
    )
    optimize.add_argument("--json", type=Path, help="write everything shown as JSON")
    optimize.set_defaults(command=cmd_optimize)

    passes = commands.add_parser("passes", parents=[common], help="list the transformations and presets")
    passes.set_defaults(command=cmd_passes)
    listed = commands.add_parser("models", parents=[common], help="list the bundled models")
    listed.set_defaults(command=cmd_models)
    return parser


def _positive(text: str) -> int:
    return _at_least(text, 1)


def _count(text: str) -> int:
    return _at_least(text, 0)


def _at_least(text: str, minimum: int) -> int:
    value = int(text)
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
    return value


# --- fxopt passes / fxopt models -----------------------------------------------------------


def cmd_passes(args: argparse.Namespace, console: Console) -> int:
    table = Table(title="transformations")
    for column in ("name", "engine", "what it does", "reversible", "preserving", "dialects"):
        table.add_column(column)
    for info in presets.catalog():
        name = f"{info.name}({', '.join(info.parameters)})" if info.parameters else info.name
        table.add_row(
            name, info.engine, info.summary, _yes(info.reversible), _yes(info.preserving), info.dialects
        )
    console.print(table)
    preset_table = Table(title="presets (--preset NAME)")
    for column in ("preset", "passes", "why"):
        preset_table.add_column(column)
    for preset in presets.PRESETS.values():
        preset_table.add_row(preset.name, ", ".join(preset.passes()), preset.description)
    console.print(preset_table)
    return 0


def cmd_models(args: argparse.Namespace, console: Console) -> int:
    table = Table(title="bundled models (or pass a config JSON, a model directory, or file.py:factory)")
    table.add_column("name")
    table.add_column("model")
    for name, bundled in models.BUNDLED.items():
        table.add_row(name, bundled.description)
    console.print(table)
    return 0


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


# --- fxopt optimize ------------------------------------------------------------------------


@dataclass
class PassOutcome:
    """What one transformation of the pipeline did, as shown and as written to JSON."""

    name: str
    signature: str
    changed: list[str]
    skipped: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Latency:
    """Time per call of one candidate over the timed rounds (warm-up excluded), in ms."""

    median_ms: float
    min_ms: float
    max_ms: float
    q1_ms: float
    """First quartile: with `q3_ms`, the interquartile range, the spread that decides whether
    two candidates differ measurably (it ignores the odd run slowed by another job)."""
    q3_ms: float
    runs: int
    samples_ms: list[float]
    """One time per round, in round order: candidates timed in the same round pair up."""

    @classmethod
    def of(cls, samples_ms: list[float]) -> Latency:
        q1, q3 = _quartiles(samples_ms)
        return cls(
            median_ms=statistics.median(samples_ms),
            min_ms=min(samples_ms),
            max_ms=max(samples_ms),
            q1_ms=q1,
            q3_ms=q3,
            runs=len(samples_ms),
            samples_ms=list(samples_ms),
        )


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


@dataclass
class Speedup:
    """A candidate's speed relative to a reference timed in the same rounds."""

    ratio: float
    """Reference median over candidate median: above 1, the candidate is faster."""
    low: float
    high: float
    """Smallest and largest per-round ratio (reference time / candidate time in one round)."""
    measurable: bool
    """False when the two interquartile ranges overlap: the difference is within the noise."""

    @classmethod
    def of(cls, reference: Latency, candidate: Latency) -> Speedup:
        per_round = [r / c for r, c in zip(reference.samples_ms, candidate.samples_ms, strict=True)]
        overlap = reference.q1_ms <= candidate.q3_ms and candidate.q1_ms <= reference.q3_ms
        return cls(reference.median_ms / candidate.median_ms, min(per_round), max(per_round), not overlap)

    def text(self) -> str:
        """`1.52x (rounds 1.41-1.63x)`, or `no measurable difference (...)` within the noise."""
        spread = f"{self.ratio:.2f}x, rounds {self.low:.2f}-{self.high:.2f}x"
        if not self.measurable:
            return f"no measurable difference ({spread})"
        return f"{self.ratio:.2f}x (rounds {self.low:.2f}-{self.high:.2f}x)" + (
            "" if self.ratio >= 1 else ", slower"
        )


def cmd_optimize(args: argparse.Namespace, console: Console) -> int:
    if args.save:
        _check_writable(args.save)  # before minutes of tracing and timing, not after
    report: dict[str, Any] = {"model": args.model, "seconds": {}}
    timings = report["seconds"]
    transformations = _transformations(args, console)
    report["passes_requested"] = [t.signature for t in transformations]

    with _phase(console, f"loading {args.model}", timings, "load"):
        loaded, inputs = _load(args, console)
    report["model_description"] = loaded.description
    report["inputs"] = _describe_inputs(inputs)
    console.print(escape(f"{args.model}: {loaded.description}; inputs {_inputs_text(report['inputs'])}"))
    report["hardware"] = hardware.describe()
    console.print(escape(f"CPU: {report['hardware']}"))
    machine_note = presets.get_preset(args.preset).machine_note() if args.passes is None else ""
    if machine_note:
        report["preset_note"] = machine_note
        console.print(f"[yellow]note:[/] {escape(machine_note)}")

    with _phase(console, "running the eager model", timings, "eager_run"):
        expected = _run_eager(loaded, inputs)
    with _phase(console, f"tracing ({args.mode})", timings, "trace"):
        graph_module, notes = _trace(loaded, inputs, args.mode)
    notes += _record_shapes(graph_module, inputs)
    report["trace"] = {"mode": graph_module.meta[TRACE_META_KEY]["mode"], "notes": notes}
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
            report["bench"] = _bench(console, loaded.model, graph_module, inputs, args.warmup, args.repeats)
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
        declared += f", rtol {accuracy.rtol}, atol {accuracy.atol}"
    problems = [
        f"{row.name} cosine {row.cosine:.6f}"
        for row in verdict.rows
        if row.cosine is not None and row.cosine < accuracy.min_cosine
    ]
    problems += [
        f"{row.name} {row.note or f'max abs err {row.max_abs_err:.3g}'}" for row in verdict.failures
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
    return [asdict(outcome) for outcome in outcomes]


def _outcome(transformation: Transformation, graph_module: GraphModule) -> PassOutcome:
    """A built-in pass reports changes and skips; a Python one is known by the nodes it marked."""
    name = type(transformation).__name__
    if isinstance(transformation, BuiltinTransformation) and transformation.report is not None:
        report = transformation.report
        return PassOutcome(name, transformation.signature, list(report.changed), list(report.skipped))
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


def _bench(
    console: Console,
    eager: torch.nn.Module,
    optimized: GraphModule,
    inputs: Inputs,
    warmup: int,
    repeats: int,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Eager and optimized timed in interleaved rounds, warm-up excluded; median and spread.

    The speedup is the ratio of the medians, shown with the range of the per-round ratios; when
    the two interquartile ranges overlap, the table says "no measurable difference" instead of
    quoting a speedup that is noise.
    """
    with _progress(console) as progress:
        task = progress.add_task("timing eager and optimized", total=warmup + repeats)
        results = measure_latency(
            {"eager": eager, "optimized": optimized},
            inputs,
            warmup,
            repeats,
            lambda: progress.advance(task),
            clock=clock,
        )
    speedup = Speedup.of(results["eager"], results["optimized"])
    table = Table(
        title=f"latency, {torch.get_num_threads()} threads",
        caption=f"{repeats} interleaved rounds after {warmup} warm-up; speedup: ratio of medians "
        "(range: per-round ratios); overlapping IQRs: no measurable difference",
    )
    for column in ("model", "median ms", "IQR ms", "min-max ms", "speedup"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for label, latency in results.items():
        table.add_row(
            label,
            f"{latency.median_ms:.2f}",
            f"{latency.q1_ms:.2f}-{latency.q3_ms:.2f}",
            f"{latency.min_ms:.2f}-{latency.max_ms:.2f}",
            "reference" if label == "eager" else speedup.text(),
        )
    console.print(table)
    return {
        **{label: asdict(latency) for label, latency in results.items()},
        "speedup": speedup.ratio,
        "speedup_rounds": [speedup.low, speedup.high],
        "measurable": speedup.measurable,
        "verdict": speedup.text(),
        "threads": torch.get_num_threads(),
    }


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def measure_latency(
    candidates: dict[str, Callable[..., Any]],
    inputs: Inputs,
    warmup: int,
    repeats: int,
    tick: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
    budget_s: float | None = None,
    min_repeats: int = 5,
) -> dict[str, Latency]:
    """Time per call of each candidate over `repeats` rounds, after `warmup` untimed rounds.

    Candidates take turns, one call each per round, so load from elsewhere on the machine
    slows them alike instead of penalising whichever ran during a busy spell, and the times of
    one round pair up (`Speedup`). Calls run under no_grad, as inference does; `tick` is called
    once per round. `clock` is wall time by default; `time.process_time` with one torch thread
    counts the work done and not the waits for a busy machine. With `budget_s`, timing stops
    after the first round that ends past that many seconds of timed rounds, once `min_repeats`
    rounds are in: a large model at batch 8 then gets fewer rounds instead of taking minutes.
    """
    args, kwargs = split_inputs(inputs)
    times: dict[str, list[float]] = {label: [] for label in candidates}
    timed_start = None
    with torch.no_grad():
        for round_index in range(warmup + repeats):
            if round_index == warmup:
                timed_start = time.perf_counter()
            for label, model in candidates.items():
                start = clock()
                model(*args, **kwargs)
                if round_index >= warmup:
                    times[label].append((clock() - start) * 1e3)
            tick()
            done = round_index + 1 - warmup
            if (
                budget_s is not None
                and timed_start is not None
                and done >= min_repeats
                and time.perf_counter() - timed_start > budget_s
            ):
                break
    return {label: Latency.of(values) for label, values in times.items()}


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


def _check_writable(path: Path) -> None:
    """Fails with a CliError unless `path` can be created or overwritten."""
    directory = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise CliError(f"cannot write {path}: it is a directory")
    if not directory.is_dir():
        raise CliError(f"cannot write {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise CliError(f"cannot write {path}: permission denied")
