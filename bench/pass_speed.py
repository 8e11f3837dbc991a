"""How fast fxopt transforms graphs, against Optimum's Python passes, from 1k to 100k+ nodes.

Each size is a synthetic transformer stack (`Stack` below: q/k/v/o Linear layers reading one
input, attention scores divided by a constant, softmax, LayerNorm, a GELU MLP), traced with
`torch.fx.symbolic_trace` into the module-level graph Optimum's passes were written for. Both
tools apply the same composition of the transformations they share, each on its own deep copy
of the graph. Reported per size:

* fxopt's time, split as the composition spends it: import (GraphModule -> core graph), passes
  (in C++), export (the edit log replayed onto the GraphModule) and recompile (lint + Python
  code generation, which torch does, not fxopt);
* Optimum's time for the same composition, and the ratio;
* time per node, to show scaling; fxopt's own work against one `GraphModule.recompile()`;
* peak resident memory while transforming, against the graph's parameter bytes.

Run: `python bench/pass_speed.py` (about 10 minutes on 2 cores), or `--quick` (1k and 10k nodes).
Writes bench/results/pass_speed.md.
"""

from __future__ import annotations

import argparse
import copy
import gc
import math
import sys
import time
from importlib import metadata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from torch import nn
from torch.fx import GraphModule

import fxopt.optimization as fxopt_optimization
from fxopt.bridge import Bridge, paused_gc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_description, markdown_table, peak_memory, write_result  # noqa: E402

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

SIZES = (1_000, 3_000, 10_000, 30_000, 100_000)
QUICK_SIZES = (1_000, 10_000)
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


def build_graph(layers: int, hidden: int, heads: int) -> GraphModule:
    torch.manual_seed(0)
    return torch.fx.symbolic_trace(Stack(layers, hidden, heads).eval())


def layers_for(nodes: int, hidden: int, heads: int) -> int:
    """Layers giving about `nodes` graph nodes, from the node counts of 1- and 2-layer stacks."""
    one, two = (len(build_graph(n, hidden, heads).graph.nodes) for n in (1, 2))
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
    export_s: float
    recompile_s: float
    changed: int

    @property
    def own_s(self) -> float:
        """fxopt's own work; recompiling is torch's code generation."""
        return self.import_s + self.passes_s + self.export_s

    @property
    def total_s(self) -> float:
        return self.own_s + self.recompile_s


def fxopt_once(template: GraphModule, names: list[str]) -> FxoptTiming:
    """One composition, timed phase by phase exactly as `compose` runs built-in passes
    (`fxopt.optimization.builtin.run_builtin`): one core session with the garbage collector
    paused, the passes back to back, one sync, then one lint and recompile."""
    graph_module = copy.deepcopy(template)
    transformations = [getattr(fxopt_optimization, name)() for name in names]
    with paused_gc():
        start = clock()
        bridge = Bridge(graph_module)
        imported = clock()
        reports = [bridge.run(t.core_pass, t.core_options(), t.signature, False) for t in transformations]
        ran = clock()
        bridge.sync()
        synced = clock()
    graph_module.graph.lint()
    graph_module.recompile()
    done = clock()
    changed = sum(len(report.changed) for report in reports)
    return FxoptTiming(imported - start, ran - imported, synced - ran, done - synced, changed)


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


def recompile_once(template: GraphModule) -> float:
    graph_module = copy.deepcopy(template)
    start = clock()
    graph_module.recompile()
    return clock() - start


def peak_ratio(template: GraphModule, apply: Callable[[GraphModule], object]) -> float:
    """Peak RSS growth while `apply` transforms a private copy, over the copy's parameter bytes."""
    graph_module = copy.deepcopy(template)
    parameter_bytes = sum(p.numel() * p.element_size() for p in graph_module.parameters())
    gc.collect()
    with peak_memory() as peak:
        apply(graph_module)
    return peak.peak_above_start / parameter_bytes


def check_same_results(template: GraphModule, names: list[str], hidden: int) -> float:
    """Max difference between the two tools' transformed graphs and the original (sanity)."""
    x = torch.randn(2, 8, hidden)
    with torch.no_grad():
        expected = template(x)
        ours = fxopt_composition(names)(copy.deepcopy(template))(x)
        theirs = optimum_composition(names)(copy.deepcopy(template))(x)
    return max(float((ours - expected).abs().max()), float((theirs - expected).abs().max()))


@dataclass
class Row:
    nodes: int
    layers: int
    parameter_bytes: int
    fxopt: FxoptTiming
    fxopt_compose_s: float
    optimum: OptimumTiming
    recompile_s: float
    fxopt_peak: float
    optimum_peak: float


def measure(nodes: int, hidden: int, heads: int, names: list[str], repeats: int) -> Row:
    layers = layers_for(nodes, hidden, heads)
    template = build_graph(layers, hidden, heads)
    runs = 1 if nodes > SINGLE_RUN_ABOVE else repeats
    fxopt_runs = [fxopt_once(template, names) for _ in range(runs)]
    fxopt_best = min(fxopt_runs, key=lambda timing: timing.total_s)
    compose_s = min(_timed_compose(template, names) for _ in range(runs))
    optimum_runs = [optimum_once(template, names) for _ in range(runs)]
    recompile_s = min(recompile_once(template) for _ in range(runs))
    return Row(
        nodes=len(template.graph.nodes),
        layers=layers,
        parameter_bytes=sum(p.numel() * p.element_size() for p in template.parameters()),
        fxopt=fxopt_best,
        fxopt_compose_s=compose_s,
        optimum=min(optimum_runs, key=lambda timing: timing.total_s),
        recompile_s=recompile_s,
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
    "nodes", "layers", "params MB", "fxopt total ms", "import", "passes", "export", "recompile",
    "fxopt µs/node", "Optimum ms", "Optimum passes", "Optimum µs/node", "Optimum / fxopt",
    "Optimum passes / fxopt own", "fxopt own / 1 recompile",
    "changed fxopt / Optimum", "peak mem / params fxopt", "Optimum",
]  # fmt: skip


def cells(row: Row) -> list[str]:
    ms = 1e3
    return [
        f"{row.nodes:,}",
        f"{row.layers:,}",
        f"{row.parameter_bytes / 2**20:.1f}",
        f"{row.fxopt_compose_s * ms:.1f}",
        f"{row.fxopt.import_s * ms:.1f}",
        f"{row.fxopt.passes_s * ms:.1f}",
        f"{row.fxopt.export_s * ms:.1f}",
        f"{row.fxopt.recompile_s * ms:.1f}",
        f"{row.fxopt_compose_s / row.nodes * 1e6:.2f}",
        f"{row.optimum.total_s * ms:.1f}",
        f"{row.optimum.passes_s * ms:.1f}",
        f"{row.optimum.total_s / row.nodes * 1e6:.2f}",
        f"{row.optimum.total_s / row.fxopt_compose_s:.2f}x",
        f"{row.optimum.passes_s / row.fxopt.own_s:.2f}x",
        f"{row.fxopt.own_s / row.recompile_s:.2f}",
        f"{row.fxopt.changed:,} / {row.optimum.changed:,}",
        f"{row.fxopt_peak:.2f}",
        f"{row.optimum_peak:.2f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(map(str, QUICK_SIZES))} nodes")
    parser.add_argument("--sizes", type=int, nargs="+", help="approximate node counts")
    parser.add_argument("--repeats", type=int, default=3, help=f"best of N below {SINGLE_RUN_ABOVE:,} nodes")
    parser.add_argument("--hidden", type=int, default=32, help="layer width (parameter bytes)")
    args = parser.parse_args()
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    machine = machine_description()
    console = Console(width=250)
    names = shared_passes()
    heads = 4
    console.print(f"composition: {', '.join(names)}")
    error = check_same_results(build_graph(2, args.hidden, heads), names, args.hidden)
    console.print(f"both tools' results match the original graph within {error:.2e}")

    rows = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("graph sizes", total=len(sizes))
        for size in sizes:
            progress.update(task, description=f"~{size:,} nodes")
            rows.append(measure(size, args.hidden, heads, names, args.repeats))
            progress.advance(task)

    table = Table(title="pass speed: fxopt vs Optimum (ms unless noted)")
    for column in HEADER:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*cells(row))
    console.print(table)

    per_node = [row.fxopt_compose_s / row.nodes for row in rows]
    flatness = max(per_node) / min(per_node)
    sections = [
        "## Setup",
        "",
        f"- graphs: `torch.fx.symbolic_trace` of synthetic transformer stacks (`bench/pass_speed.py`: `Block`), "
        f"hidden size {args.hidden}, {heads} heads",
        f"- composition (both tools, same order): {', '.join(f'`{n}`' for n in names)}",
        f"- Optimum: `optimum.fx.optimization` from optimum {_optimum_version()} (from PyPI, pinned in requirements.txt; it imports "
        "and runs on this torch / transformers)",
        f"- best of {args.repeats} runs up to {SINGLE_RUN_ABOVE:,} nodes, one run above; each run on its own deep copy",
        f"- both tools' transformed graphs matched the original within {error:.2e} (2-layer check)",
        "- times are CPU time of the process (`time.process_time`): the machine is shared, and wall time would count",
        "  waiting for a core; both tools run on one thread",
        "- fxopt total = one `compose(...)(gm)` call; import / passes / export / recompile come from a separately",
        "  instrumented run of the same steps; recompile is `graph.lint()` + `recompile()` (torch's code generation)",
        "- `fxopt own / 1 recompile`: import + passes + export, over one `GraphModule.recompile()` of the untransformed graph",
        "- `Optimum passes`: its composition with `lint_and_recompile=False`; `Optimum passes / fxopt own` compares the",
        "  work each tool does itself, without torch's code generation, which both pay once",
        "- changed: nodes each tool reports (fxopt: its pass reports, new nodes included; Optimum: nodes it marked)",
        "- peak memory: growth of resident memory (sampled every 1 ms) while transforming, over the graph's parameter bytes",
        "",
        "## Results",
        "",
        *markdown_table(HEADER, [cells(row) for row in rows]),
        "",
        f"fxopt time per node varies by {flatness:.2f}x from the smallest to the largest graph.",
    ]
    path = write_result(
        "pass_speed_quick" if args.quick else "pass_speed",  # a quick check never replaces the full results
        "Pass speed: fxopt vs Optimum",
        "python bench/pass_speed.py " + " ".join(sys.argv[1:]),
        machine,
        sections,
    )
    console.print(f"time per node varies {flatness:.2f}x across sizes; wrote {path}")


def _optimum_version() -> str:
    return metadata.version("optimum")


if __name__ == "__main__":
    main()
