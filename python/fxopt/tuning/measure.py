"""Short interleaved micro-benchmarks of candidate kernels.

Candidates run in turns, round after round, so a slow phase of a shared machine hits them all
alike; each round times enough calls to last `round_s`. The verdict is each candidate's fastest
round: other processes only ever add time, so the minimum is the steadiest estimate of what the
kernel itself costs on a shared machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping


def best_times(
    runners: Mapping[str, Callable[[], object]], rounds: int = 7, round_s: float = 0.002
) -> dict[str, float]:
    """Seconds per call of each runner in its fastest round."""
    calls: dict[str, int] = {}
    for name, run in runners.items():
        start = time.perf_counter()
        run()  # warm-up: first-call allocations and oneDNN's primitive creation
        once = max(time.perf_counter() - start, 1e-7)
        calls[name] = max(1, min(1000, int(round_s / once)))
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, run in runners.items():
            n = calls[name]
            start = time.perf_counter()
            for _ in range(n):
                run()
            samples[name].append((time.perf_counter() - start) / n)
    return {name: min(times) for name, times in samples.items()}
