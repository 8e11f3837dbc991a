"""Latency of models called in interleaved rounds, and the speedup between two of them.

`fxopt optimize --bench` times eager against optimized (`bench`); `bench/latency.py` times
many candidates with `measure_latency` and compares them with `Speedup`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from torch.fx import GraphModule

from ..tracing.dummy_inputs import Inputs, split_inputs


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


def bench(
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
    quoting a speedup that is noise. The caption says how the table was measured; the verdict
    of this run is its own line under it.
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
    threads = torch.get_num_threads()
    table = Table(
        title=f"latency, {threads} torch thread{'s' if threads != 1 else ''}",
        caption=f"{repeats} interleaved rounds after {warmup} warm-up; speedup: ratio of medians "
        "(range: per-round ratios), quoted only where the interquartile ranges (IQR) do not overlap",
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
    console.print(f"verdict: {_verdict(speedup)}")
    return {
        **{label: asdict(latency) for label, latency in results.items()},
        "speedup": speedup.ratio,
        "speedup_rounds": [speedup.low, speedup.high],
        "measurable": speedup.measurable,
        "verdict": speedup.text(),
        "threads": torch.get_num_threads(),
    }


def _verdict(speedup: Speedup) -> str:
    if not speedup.measurable:
        return "no measurable difference between eager and optimized (their IQRs overlap)"
    if speedup.ratio >= 1:
        return f"optimized is {speedup.ratio:.2f}x faster than eager (their IQRs do not overlap)"
    return f"optimized is slower than eager, {speedup.ratio:.2f}x its speed (their IQRs do not overlap)"


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
