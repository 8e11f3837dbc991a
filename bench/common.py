"""Pieces the benchmarks share: the machine description, peak-memory sampling, markdown output,
waiting for a GPU.

Benchmark numbers mean little without the machine they came from, and this project's machines
are shared: the description therefore includes the load average when the run started and ended.
"""

from __future__ import annotations

import os
import platform
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from fxopt.optimization import hardware

RESULTS = Path(__file__).resolve().parent / "results"
PACKAGES = ("torch", "transformers", "optimum", "onnxruntime", "onnx", "fxopt")


def machine_description(threads: Sequence[int] | None = None) -> list[str]:
    """Markdown bullet lines: CPU, cores, memory, threads, fast paths, package versions, current load.

    `threads`: the thread counts the runs set (torch.set_num_threads), which the header states
    instead of torch's default at start."""
    threads_line = (
        f"torch threads per run: {', '.join(map(str, threads))}"
        if threads
        else hardware.threads_text()
    )
    lines = [
        f"- CPU: {hardware.cpu_model()} (flags: {', '.join(hardware.cpu_flags()) or 'no AVX2'}), "
        f"{os.cpu_count()} logical cores; {threads_line}",
        f"- fxopt.optimization.hardware: {hardware.describe()}",
        f"- memory: {_memory_gib():.0f} GiB; OS: {platform.platform()}; Python {platform.python_version()}",
        "- packages: " + ", ".join(f"{name} {_version(name)}" for name in PACKAGES),
        f"- load average at start: {_load()}",
    ]
    return lines


def load_line() -> str:
    return f"- load average at end: {_load()}"


def _memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg()) + " (1, 5, 15 min)"


def _rss_bytes() -> int:
    """Resident set size of this process, from /proc (includes C++ and torch allocations)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass
class PeakMemory:
    """Peak resident memory above the level when sampling began, in bytes."""

    peak_above_start: int = 0


@contextmanager
def peak_memory(interval_s: float = 0.001) -> Iterator[PeakMemory]:
    """Sample RSS from a thread while the body runs.

    tracemalloc would miss the engine's C++ allocations and torch's tensor storage; RSS sees
    both. The sampler costs a little CPU, so timed runs do not use it.
    """
    result = PeakMemory()
    start = _rss_bytes()
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            result.peak_above_start = max(result.peak_above_start, _rss_bytes() - start)
            time.sleep(interval_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield result
    finally:
        done.set()
        sampler.join()
        result.peak_above_start = max(result.peak_above_start, _rss_bytes() - start)


def interleaved_times(candidates: dict[str, Sequence[Callable[[], object]]], rounds: int) -> dict[str, list[float]]:
    """Per candidate, the seconds of one of its calls in each of `rounds` rounds (the mean over its
    calls): every candidate runs all its calls once per round, in turn, so a burst of background
    load hits them alike."""
    times: dict[str, list[float]] = {name: [] for name in candidates}
    with torch.no_grad():
        for _ in range(rounds):
            for name, calls in candidates.items():
                start = time.perf_counter()
                for call in calls:
                    call()
                times[name].append((time.perf_counter() - start) / len(calls))
    return times


def ratio_cells(times: dict[str, list[float]], base: str, scale: float, digits: int) -> list[str]:
    """Per candidate, "median (min-max) Nx" in seconds x `scale`, N = the `base` candidate's
    median over its own."""
    reference = statistics.median(times[base])
    return [
        f"{statistics.median(t) * scale:.{digits}f} ({min(t) * scale:.{digits}f}-{max(t) * scale:.{digits}f}) "
        f"{reference / statistics.median(t):.2f}x"
        for t in times.values()
    ]


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def write_result(name: str, title: str, command: str, machine: list[str], sections: list[str]) -> Path:
    """Write bench/results/NAME.md: title, how to reproduce, the machine, then the sections.

    `machine` is `machine_description()` taken when the run started; the load at the end is
    added here, so a reader sees whether the machine was busy throughout.
    """
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.md"
    header = [f"# {title}", "", f"Generated by `{command}` on {time.strftime('%Y-%m-%d %H:%M %Z')}.", ""]
    path.write_text("\n".join([*header, "## Machine", "", *machine, load_line(), "", *sections, ""]))
    return path


def synchronized(run: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
    """`run`, returning only once the device has finished its work (CUDA calls return once
    their kernels are queued)."""
    if device.type != "cuda":
        return run

    def call(*args: Any, **kwargs: Any) -> Any:
        result = run(*args, **kwargs)
        torch.cuda.synchronize(device)
        return result

    return call


def gpu_name(device: str) -> str:
    """The GPU's name for reports; '' for the CPU."""
    if torch.device(device).type != "cuda":
        return ""
    return torch.cuda.get_device_name(torch.device(device))
