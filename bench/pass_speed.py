"""How fast fxopt transforms graphs, against Optimum's Python passes, from 1k to 100k+ nodes.

Three graph families, each traced with `torch.fx.symbolic_trace` into the module-level graph
Optimum's passes were written for:
* `synthetic`: a transformer stack (`Stack` below: q/k/v/o Linear layers reading one input,
  attention scores divided by a constant, softmax, LayerNorm, a GELU MLP);
* `bert` and `gpt2`: BERT and GPT-2 as transformers 4 wrote them (`real_graphs.py`), stacked
  to the size asked for (transformers 5 models no longer trace with symbolic_trace).
Both tools apply the same composition of the transformations they share, each on its own deep
copy of the graph. Reported per graph:

* fxopt's time, split as the composition spends it: import (GraphModule -> core graph, one
  native walk), passes (in C++), sync (the edit log replayed onto the GraphModule), recompile
  (lint and code generation, by fxopt's engine where it can, then torch's recompile with CPython's
  compile()) and teardown (dropping the
  engine session, which stays attached to the graph until then);
* a second transformation on the same, unchanged graph (the attached session is reused);
* one CPython `compile()` of the resulting forward: the floor of any tool whose result is a
  GraphModule;
* Optimum's time for the same composition, and the ratios;
* peak resident memory while transforming, against the graph's parameter bytes.
A second table measures torch's recompile options on the largest synthetic graph: eager
`recompile()` split into `Graph.python_code` and `compile()`, and lazy recompilation
(`torch.fx._lazy_graph_module`), counting the first call that pays for it.

Run: `python bench/pass_speed.py` (about 15 minutes on 2 shared cores), or `--quick` (1k and
10k nodes). Writes bench/results/pass_speed.md.
"""

from __future__ import annotations

import argparse
import copy
import gc
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from torch import nn
from torch.fx import GraphModule
from torch.fx._lazy_graph_module import _LazyGraphModule

import fxopt.optimization as fxopt_optimization
from fxopt.engine import codegen
from fxopt.engine.bridge import attached, detach, paused_gc
from fxopt.optimization.transformation import _lint_and_recompile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_description, markdown_table, peak_memory, write_result  # noqa: E402
import real_graphs  # noqa: E402

import optimum.fx.optimization as optimum_optimization  # noqa: E402

# Optimum's transformations, in the order a user composes them: folds first, then the merge, then
# the bias fusion that rewrites the merged Linear. Only those fxopt also has are run.
OPTIMUM_PASSES = (
    "ChangeTrueDivToMulByInverse",
    "FuseBatchNorm2dInConv2d",
    "FuseBatchNorm1dInLinear",
    "MergeLinears",
    "FuseBiasInLinear",
)
clock = time.process_time
"""CPU time of this process, not wall time: the benchmark machines are shared, and wall time
would count the waits for a core that other jobs cause. Both tools run single-threaded Python
(fxopt's C++ passes run on the calling thread), so CPU time is the work each does."""

SIZES = {"synthetic": (1_000, 10_000, 30_000, 100_000), "bert": (10_000, 30_000, 100_000),
         "gpt2": (10_000, 30_000, 100_000)}  # fmt: skip
QUICK_SIZES = {"synthetic": (1_000, 10_000), "bert": (10_000,), "gpt2": (10_000,)}
SINGLE_RUN_ABOVE = 20_000
"""Sizes above this many nodes run once; smaller ones take the best of --repeats runs."""


class Block(nn.Module):
    """One transformer layer at module level, the pattern each pass looks for."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden) for _ in range(4))
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.up, self.act, self.down = nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        return x.view(batch, seq, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, hidden)
        x = self.norm1(x + self.o(context))
        return self.norm2(x + self.down(self.act(self.up(x))))


class Stack(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


@dataclass(frozen=True)
class Family:
    name: str
    build: Callable[[int, int, int], nn.Module]  # (layers, hidden, heads) -> model
    inputs: Callable[[int], tuple[torch.Tensor, ...]]  # hidden -> example inputs


FAMILIES = {
    "synthetic": Family("synthetic", Stack, lambda hidden: (torch.randn(2, 8, hidden),)),
    "bert": Family("bert", real_graphs.Bert, lambda hidden: real_graphs.token_inputs()),
    "gpt2": Family("gpt2", real_graphs.GPT2, lambda hidden: real_graphs.token_inputs()),
}


def build_graph(family: Family, layers: int, hidden: int, heads: int) -> GraphModule:
    torch.manual_seed(0)
    return torch.fx.symbolic_trace(family.build(layers, hidden, heads).eval())


def layers_for(family: Family, nodes: int, hidden: int, heads: int) -> int:
    """Layers giving about `nodes` graph nodes, from the node counts of 1- and 2-layer stacks."""
    one, two = (len(build_graph(family, n, hidden, heads).graph.nodes) for n in (1, 2))
    return max(1, round((nodes - (one - (two - one))) / (two - one)))


def fxopt_composition(names: list[str]) -> fxopt_optimization.Transformation:
    return fxopt_optimization.compose(*(getattr(fxopt_optimization, name)() for name in names))


def optimum_composition(names: list[str]) -> optimum_optimization.Transformation:
    return optimum_optimization.compose(*(getattr(optimum_optimization, name)() for name in names))


def shared_passes() -> list[str]:
    """Optimum's transformations that fxopt implements too (fxopt's passes land over time)."""
    return [
        name
        for name in OPTIMUM_PASSES
        if hasattr(fxopt_optimization, name) and hasattr(optimum_optimization, name)
    ]


@dataclass
class FxoptTiming:
    import_s: float
    passes_s: float
    sync_s: float
    recompile_s: float
    teardown_s: float
    second_s: float
    """A second transformation (one that finds nothing to do) on the same, unchanged graph."""
    compile_floor_s: float
    """One CPython compile() of the resulting forward."""
    changed: int

    @property
    def own_s(self) -> float:
        """fxopt's own work; recompiling is torch's code generation."""
        return self.import_s + self.passes_s + self.sync_s + self.teardown_s


def fxopt_once(template: GraphModule, names: list[str]) -> FxoptTiming:
    """One composition, timed phase by phase exactly as `compose` runs built-in passes
    (`fxopt.optimization.builtin.run_builtin`): the attached core session with the garbage
    collector paused, the passes back to back, one sync, then one lint and recompile (the
    collector paused there too); then a
    second transformation on the unchanged graph, and the session's teardown."""
    graph_module = copy.deepcopy(template)
    transformations = [getattr(fxopt_optimization, name)() for name in names]
    with paused_gc():
        start = clock()
        bridge = attached(graph_module)
        imported = clock()
        reports = [bridge.run(t.core_pass, t.core_options(), t.signature, False) for t in transformations]
        ran = clock()
        changed_graph = bridge.sync()
        synced = clock()
    if changed_graph:  # as `compose` does: nothing synced, nothing to recompile
        _lint_and_recompile(graph_module)
    recompiled = clock()
    fxopt_optimization.FuseBatchNorm2dInConv2d()(graph_module)  # no convolution: changes nothing
    second = clock()
    del bridge
    detach(graph_module)
    torn_down = clock()
    with paused_gc():  # the floor at its lowest: no collection during it either
        compile(graph_module.code, "<forward>", "exec")
    floor = clock() - torn_down
    changed = sum(len(report.changed) for report in reports)
    return FxoptTiming(
        imported - start, ran - imported, synced - ran, recompiled - synced, torn_down - second,
        second - recompiled, floor, changed,
    )  # fmt: skip


@dataclass
class OptimumTiming:
    passes_s: float
    recompile_s: float
    changed: int

    @property
    def total_s(self) -> float:
        return self.passes_s + self.recompile_s


def optimum_once(template: GraphModule, names: list[str]) -> OptimumTiming:
    """Optimum's `compose` of the same passes, its passes timed apart from the one lint and
    recompile its `__call__` adds (the same split as fxopt's)."""
    graph_module = copy.deepcopy(template)
    composition = optimum_composition(names)
    start = clock()
    composition(graph_module, lint_and_recompile=False)
    ran = clock()
    graph_module.graph.lint()
    graph_module.recompile()
    done = clock()
    changed = sum(1 for node in graph_module.graph.nodes if getattr(node, "transformations", None))
    return OptimumTiming(ran - start, done - ran, changed)


def peak_ratio(template: GraphModule, apply: Callable[[GraphModule], object]) -> float:
    """Peak RSS growth while `apply` transforms a private copy, over the copy's parameter bytes."""
    graph_module = copy.deepcopy(template)
    parameter_bytes = sum(p.numel() * p.element_size() for p in graph_module.parameters())
    gc.collect()
    with peak_memory() as peak:
        apply(graph_module)
    return peak.peak_above_start / parameter_bytes


def check_same_results(family: Family, names: list[str], hidden: int, heads: int) -> float:
    """Max difference between the two tools' transformed graphs and the original (sanity)."""
    template = build_graph(family, 2, hidden, heads)
    inputs = family.inputs(hidden)
    with torch.no_grad():
        expected = template(*inputs)
        ours = fxopt_composition(names)(copy.deepcopy(template))(*inputs)
        theirs = optimum_composition(names)(copy.deepcopy(template))(*inputs)
    return max(float((ours - expected).abs().max()), float((theirs - expected).abs().max()))


@dataclass
class Row:
    family: str
    nodes: int
    layers: int
    fxopt: FxoptTiming
    fxopt_compose_s: float
    optimum: OptimumTiming
    fxopt_peak: float
    optimum_peak: float


def measure(family: Family, nodes: int, hidden: int, heads: int, names: list[str], repeats: int) -> Row:
    layers = layers_for(family, nodes, hidden, heads)
    template = build_graph(family, layers, hidden, heads)
    runs = 1 if nodes > SINGLE_RUN_ABOVE else repeats
    fxopt_runs = [fxopt_once(template, names) for _ in range(runs)]
    compose_s = min(_timed_compose(template, names) for _ in range(runs))
    optimum_runs = [optimum_once(template, names) for _ in range(runs)]
    return Row(
        family=family.name,
        nodes=len(template.graph.nodes),
        layers=layers,
        fxopt=min(fxopt_runs, key=lambda timing: timing.own_s + timing.recompile_s),
        fxopt_compose_s=compose_s,
        optimum=min(optimum_runs, key=lambda timing: timing.total_s),
        fxopt_peak=peak_ratio(template, fxopt_composition(names)),
        optimum_peak=peak_ratio(template, optimum_composition(names)),
    )


def _timed_compose(template: GraphModule, names: list[str]) -> float:
    """The end-to-end `compose(...)(gm)` call a user makes, without instrumentation."""
    graph_module = copy.deepcopy(template)
    composition = fxopt_composition(names)
    start = clock()
    composition(graph_module)
    return clock() - start


HEADER = [
    "graph", "nodes", "fxopt compose ms", "import", "passes", "sync", "recompile", "teardown",
    "2nd call (% of 1st)", "compile() floor", "compose / compile()", "Optimum ms", "Optimum passes",
    "Optimum / fxopt", "Optimum passes / fxopt own", "changed fxopt / Optimum", "peak mem / params fxopt",
    "Optimum",
]  # fmt: skip


def cells(row: Row) -> list[str]:
    ms = 1e3
    t = row.fxopt
    return [
        row.family,
        f"{row.nodes:,}",
        f"{row.fxopt_compose_s * ms:.1f}",
        f"{t.import_s * ms:.1f}",
        f"{t.passes_s * ms:.1f}",
        f"{t.sync_s * ms:.1f}",
        f"{t.recompile_s * ms:.1f}",
        f"{t.teardown_s * ms:.1f}",
        f"{t.second_s * ms:.1f} ({t.second_s / row.fxopt_compose_s:.1%})",
        f"{t.compile_floor_s * ms:.1f}",
        f"{row.fxopt_compose_s / t.compile_floor_s:.2f}x",
        f"{row.optimum.total_s * ms:.1f}",
        f"{row.optimum.passes_s * ms:.1f}",
        f"{row.optimum.total_s / row.fxopt_compose_s:.2f}x",
        f"{row.optimum.passes_s / t.own_s:.2f}x",
        f"{t.changed:,} / {row.optimum.changed:,}",
        f"{row.fxopt_peak:.2f}",
        f"{row.optimum_peak:.2f}",
    ]


@dataclass
class RecompileOptions:
    nodes: int
    python_code_s: float
    compile_s: float
    eager_recompile_s: float
    eager_first_call_s: float
    lazy_recompile_s: float
    lazy_first_call_s: float
    engine_code_s: float
    """The engine's twin of `python_code` (`fxopt.engine.codegen`), from an attached session."""
    engine_recompile_s: float


def recompile_options(template: GraphModule, inputs: tuple[torch.Tensor, ...]) -> RecompileOptions:
    """torch's eager recompile against lazy recompilation, which generates the code on the first
    call (or the first read of `.code`): honest only when that call is counted; and against the
    engine generating the code (after a compose its session is attached already: not counted)."""
    graph_module = copy.deepcopy(template)
    start = clock()
    code = graph_module.graph.python_code("self").src
    generated = clock()
    compile(code, "<forward>", "exec")
    compiled = clock()
    graph_module.recompile()
    recompiled = clock()
    with torch.no_grad():
        graph_module(*inputs)
    called = clock()
    lazy = _LazyGraphModule(graph_module, graph_module.graph)
    lazy_start = clock()
    lazy.recompile()
    lazy_recompiled = clock()
    with torch.no_grad():
        lazy(*inputs)
    lazy_called = clock()
    engine = copy.deepcopy(template)
    attached(engine)
    engine_start = clock()
    engine_code = codegen.python_code(engine)
    engine_generated = clock()
    assert engine_code is not None and engine_code.src == code, "the engine's code is not torch's"
    engine_recompile_start = clock()
    assert codegen.recompile(engine), "the engine declined"
    engine_recompiled = clock()
    return RecompileOptions(
        len(template.graph.nodes), generated - start, compiled - generated, recompiled - compiled,
        called - recompiled, lazy_recompiled - lazy_start, lazy_called - lazy_recompiled,
        engine_generated - engine_start, engine_recompiled - engine_recompile_start,
    )  # fmt: skip


RECOMPILE_HEADER = [
    "nodes", "python_code", "compile()", "eager recompile", "eager 1st call", "eager total",
    "lazy recompile", "lazy 1st call", "lazy total", "engine code", "engine recompile",
]  # fmt: skip


def recompile_cells(r: RecompileOptions) -> list[str]:
    ms = 1e3
    return [
        f"{r.nodes:,}", f"{r.python_code_s * ms:.1f}", f"{r.compile_s * ms:.1f}", f"{r.eager_recompile_s * ms:.1f}",
        f"{r.eager_first_call_s * ms:.1f}", f"{(r.eager_recompile_s + r.eager_first_call_s) * ms:.1f}",
        f"{r.lazy_recompile_s * ms:.1f}", f"{r.lazy_first_call_s * ms:.1f}",
        f"{(r.lazy_recompile_s + r.lazy_first_call_s) * ms:.1f}", f"{r.engine_code_s * ms:.1f}",
        f"{r.engine_recompile_s * ms:.1f}",
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1k and 10k synthetic, 10k real nodes")
    parser.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    parser.add_argument("--sizes", type=int, nargs="+", help="approximate node counts (every family)")
    parser.add_argument("--repeats", type=int, default=3, help=f"best of N below {SINGLE_RUN_ABOVE:,} nodes")
    parser.add_argument("--hidden", type=int, default=32, help="layer width (parameter bytes)")
    args = parser.parse_args()
    machine = machine_description()
    console = Console(width=250)
    names = shared_passes()
    heads = 4
    console.print(f"composition: {', '.join(names)}")
    errors = {name: check_same_results(FAMILIES[name], names, args.hidden, heads) for name in args.families}
    console.print(f"both tools' results match the original graphs within {max(errors.values()):.2e}")

    plan = [
        (FAMILIES[name], size)
        for name in args.families
        for size in (args.sizes or (QUICK_SIZES if args.quick else SIZES)[name])
    ]
    rows = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("graphs", total=len(plan))
        for family, size in plan:
            progress.update(task, description=f"{family.name} ~{size:,} nodes")
            rows.append(measure(family, size, args.hidden, heads, names, args.repeats))
            progress.advance(task)
    largest = max(size for family, size in plan if family.name == "synthetic") if "synthetic" in args.families else 0
    synthetic = FAMILIES["synthetic"]
    options = (
        recompile_options(
            build_graph(synthetic, layers_for(synthetic, largest, args.hidden, heads), args.hidden, heads),
            synthetic.inputs(args.hidden),
        )
        if largest
        else None
    )

    table = Table(title="pass speed: fxopt vs Optimum (ms unless noted)")
    for column in HEADER:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*cells(row))
    console.print(table)

    sections = [
        "## Setup",
        "",
        "- graphs: `torch.fx.symbolic_trace` of synthetic transformer stacks (`bench/pass_speed.py`: `Block`) and",
        f"  of transformers-4-style BERT / GPT-2 stacks (`bench/real_graphs.py`); hidden {args.hidden}, heads {heads}",
        f"- composition (both tools, same order): {', '.join(f'`{n}`' for n in names)}",
        f"- Optimum: `optimum.fx.optimization` from optimum {_optimum_version()} (from PyPI, pinned in",
        "  requirements.txt; it imports and runs on this torch / transformers)",
        f"- best of {args.repeats} runs up to {SINGLE_RUN_ABOVE:,} nodes, one run above; each run on its own deep copy",
        f"- both tools' transformed graphs matched the original within {max(errors.values()):.2e} (2-layer check)",
        "- times are CPU time of the process (`time.process_time`): the machine is shared, and wall time would",
        "  count waiting for a core; both tools run on one thread",
        "- fxopt compose = one `compose(...)(gm)` call; import / passes / sync / recompile / teardown come from a",
        "  separately instrumented run of the same steps; recompile is the lint (`fxopt.engine.lint`: torch's",
        "  `Graph.lint` checks, proved natively) + torch's `recompile()`, its source generated by fxopt's engine",
        "  (`fxopt.engine.codegen`) where it can, as in `compose`;",
        "  fxopt pauses Python's cyclic garbage collector while it imports, syncs and recompiles, Optimum does not",
        "- 2nd call: a further transformation (`FuseBatchNorm2dInConv2d`, nothing to fold) on the transformed,",
        "  unchanged graph: the attached session is checked and reused, nothing is synced or recompiled",
        "- compile() floor: one CPython `compile()` of the resulting forward's source, which any tool whose result",
        "  is a GraphModule pays (measured with the garbage collector paused: its lowest)",
        "- `Optimum passes`: its composition with `lint_and_recompile=False`; `Optimum passes / fxopt own` compares",
        "  the work each tool does itself (fxopt own = import + passes + sync + teardown), without torch's code",
        "  generation, which both pay once",
        "- changed: nodes each tool reports (fxopt: its pass reports, new nodes included; Optimum: nodes it marked)",
        "- peak memory: growth of resident memory (sampled every 1 ms) while transforming, over parameter bytes",
        "",
        "## Results",
        "",
        *markdown_table(HEADER, [cells(row) for row in rows]),
    ]
    if options is not None:
        sections += [
            "",
            "## torch's recompile options (largest synthetic graph, ms)",
            "",
            "Eager `recompile()` is `Graph.python_code` plus CPython's `compile()`; lazy recompilation",
            "(`torch.fx._lazy_graph_module`) defers both to the first call, which must then be counted.",
            "`engine code` is the same source generated by fxopt's engine from its attached session",
            "(`fxopt.engine.codegen`, byte-identical, checked), `engine recompile` torch's `recompile()`",
            "taking that source: what `compose` runs.",
            "",
            *markdown_table(RECOMPILE_HEADER, [recompile_cells(options)]),
        ]
    path = write_result(
        "pass_speed_quick" if args.quick else "pass_speed",  # a quick check never replaces the full results
        "Pass speed: fxopt vs Optimum",
        "python bench/pass_speed.py " + " ".join(sys.argv[1:]),
        machine,
        sections,
    )
    console.print(f"wrote {path}")


def _optimum_version() -> str:
    return metadata.version("optimum")


if __name__ == "__main__":
    main()
