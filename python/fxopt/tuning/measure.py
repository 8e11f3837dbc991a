"""Short interleaved micro-benchmarks of candidate kernels, each call on a cold cache.

Candidates run in turns, round after round, so a slow phase of a shared machine hits them all
alike; each round times enough calls to last `round_s`. The verdict is each candidate's fastest
round: other processes only ever add time, so the minimum is the steadiest estimate of what the
kernel itself costs on a shared machine. Rounds stop early, after `MIN_ROUNDS`, once the rounds
of the fastest candidate and of the others no longer overlap, or those that overlap are within
`NEAR` of it.

Before every timed call `EVICT_BYTES` of unrelated memory are read and written, so the call
finds its weights where a model's forward finds them: not in the core's own cache. Between two
calls of one Linear a model runs all its other layers, and at batch 1 (a decoding step) reading
the weight is most of a Linear's cost. Timed back to back instead, a 768x768 float32 weight stays
in the L2 cache: measured on an AMX Xeon (2 MiB L2 per core, one token), float32 took 0.056 ms
back to back, 0.10 ms after an eviction and 0.18 ms streaming weights as a model does, while
weight-only int8 took 0.08-0.10 ms in all three, so back-to-back timing kept float32 for Linears
where int8 wins in `generate()`. A convolution's input and residual, though, come hot from the
op before it: the eviction would send them away too, so a candidate naming them
(`Runner.activations`) has them read back after it. MobileNetV2's 144-channel 56x56 depthwise
convolution in bfloat16 timed 194 us on fxopt's kernel against 195 on oneDNN's with its input
evicted (a tie, left to oneDNN), 179 against 202 with it read back (Zen 4 core); in the model,
the same graph with that one convolution on fxopt's kernel ran 0.955 of the time (41 rounds).

A Linear of a few tokens (`kernels.streams_weights`) is timed as a decoding step runs it: its
weight from memory, not from the shared L3 cache an eviction of 8 MiB leaves it in. Such a
candidate cycles through copies of its weights (`streaming`), 1.5 times the last-level cache in
all, and needs no eviction. Measured on a Zen 4 (32 MiB L3) at two threads and one token, 768x2048:
ATen's int8 kernel with bfloat16 activations took 0.094 ms after an eviction and 0.132 ms
streamed, fxopt's 0.084 and 0.089 ms; timed after an eviction the two were inside the noise of
each other and ATen's could be picked, which made the Llama's step 1.23x slower.
"""

from __future__ import annotations

import ctypes
import itertools
import time
from collections.abc import Callable, Mapping, Sequence

import torch
import torch.utils._pytree as pytree

from ..optimization import hardware
from .kernels import Runner

EVICT_BYTES = 8 << 20
"""Four times the largest per-core L2 of the CPUs measured (2 MiB), small against any L3."""

MAX_CALLS = 5
"""Timed calls per candidate and round: each also pays an eviction (about 0.7 ms)."""

UNEVICTED_S = 0.001
"""Calls at least this long, all candidates', run without the eviction: a cold cache costs them
a few microseconds of their milliseconds, while each eviction costs about 0.7 ms (ResNet-50's
23 convolution queries spent about 0.4 s of their 1.3 s evicting)."""

MIN_ROUNDS = 3
TIMED_S = 0.3
"""Rounds stop at `MIN_ROUNDS` where `rounds` of them would take longer than this: a call of
tens of milliseconds (GPT-2's 768x50257 head at 128 tokens: 80 ms) varies little from round to
round, and seven rounds of each candidate made it most of a model's tuning time."""

MAX_COPIES = 256
"""Copies of a streamed candidate's weights at most (a 768x768 int4 weight needs 150 for a
32 MiB cache)."""

_EVICT_FROM = bytes(EVICT_BYTES // 2)
_EVICT_TO = bytearray(EVICT_BYTES // 2)


def _evict() -> None:
    # A single-threaded copy (CPython's memmove): a torch op here would run on torch's thread
    # pool, and at two threads on a loaded machine one late thread made it cost 30 times more.
    _EVICT_TO[:] = _EVICT_FROM


STREAM_FACTOR = 1.5
"""A streamed candidate's copies hold this many times the last-level cache: a copy is evicted
before its next turn (a weight this large alone needs no copy), and GPT-2's one-token queries
took 1.2 s of its tuning with twice the cache."""


def streaming(runner: Runner) -> Callable[[], object]:
    """`runner` on the next of its copies at each call: copies of its weights totalling
    STREAM_FACTOR times the last-level cache, each run once here (oneDNN packs a weight at its
    first call)."""
    stream_bytes = int(STREAM_FACTOR * hardware.last_level_cache_bytes())
    copies = max(1, min(MAX_COPIES, -(-stream_bytes // max(1, runner.weight_bytes))))
    runs = [runner, *(runner.copy() for _ in range(copies - 1))]
    for run in runs:
        run()
    turns = itertools.cycle(runs)
    return lambda: next(turns)()


def best_times(
    runners: Mapping[str, Callable[[], object]], rounds: int = 7, round_s: float = 0.002, evict: bool = True
) -> dict[str, float]:
    """Seconds per call of each runner in its fastest round, each call after an eviction unless
    `evict` is False (runners that stream their weights) or every runner's first call took
    UNEVICTED_S or more."""
    calls: dict[str, int] = {}
    samples: dict[str, list[float]] = {}
    round_time, shortest = 0.0, float("inf")
    for name, run in runners.items():
        run()  # warm-up: first-call allocations and oneDNN's primitive creation
        once = max(_cold_call(run, evict), 1e-7)
        calls[name] = max(1, min(MAX_CALLS, int(round_s / once)))
        round_time += once * calls[name]
        shortest = min(shortest, once)
        # A call long enough to be a round alone is one already (GPT-2's head: 80 ms a call).
        samples[name] = [once] if calls[name] == 1 else []
    evict = evict and shortest < UNEVICTED_S
    rounds = max(min(rounds, MIN_ROUNDS), min(rounds, int(TIMED_S / round_time)))
    for done in range(1, rounds + 1):
        for name, run in runners.items():
            n = calls[name]
            if len(samples[name]) < done:
                samples[name].append(sum(_cold_call(run, evict) for _ in range(n)) / n)
        if done >= MIN_ROUNDS and _decided(samples):
            break
    return {name: min(times) for name, times in samples.items()}


NEAR = 0.03
"""A candidate whose fastest round is within this share of the leader's needs no more rounds to
be told apart from it: whichever of the two is picked, the op runs at most that much slower
than it could. oneDNN's Linear and the same with GELU fused measured 5.83 and 5.70 ms at
BERT-base's 128x768x3072 and took all seven rounds, a fifth of the model's tuning."""


def _decided(samples: Mapping[str, list[float]]) -> bool:
    """Whether the verdict is clear: the fastest candidate's slowest round beat every other
    candidate's fastest one, so no later round of theirs is likely to overturn it (on a quiet
    machine, most choices are clear after three), or the other is `NEAR` it."""
    leader = min(samples, key=lambda name: min(samples[name]))
    best, slowest = min(samples[leader]), max(samples[leader])
    return all(
        min(times) > slowest or min(times) <= best * (1 + NEAR) for name, times in samples.items() if name != leader
    )


def _cold_call(run: Callable[[], object], evict: bool = True) -> float:
    if evict:
        _evict()
        _read(getattr(run, "activations", ()))
    start = time.perf_counter()
    _wait_for(run())
    return time.perf_counter() - start


def _read(tensors: Sequence[torch.Tensor | None]) -> None:
    """Brings `tensors` back into the caches after an eviction, as the op before a call leaves
    its result there (one read of every byte)."""
    for tensor in tensors:
        if tensor is not None and tensor.is_cpu:  # a single-threaded copy, as in _evict
            ctypes.string_at(tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes())


def _wait_for(result: object) -> None:
    """Returns once the GPU work that made `result` is done: a CUDA call returns as soon as its
    kernels are queued, so without this only the launch would be timed."""
    leaves = (result,) if isinstance(result, torch.Tensor) else pytree.tree_leaves(result)
    for device in {leaf.device for leaf in leaves if isinstance(leaf, torch.Tensor) and leaf.is_cuda}:
        torch.cuda.synchronize(device)
