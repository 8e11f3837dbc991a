"""The Python side of the engine's Chooser (cpp/tuning/chooser.h): which candidate kernel a
pass emits, decided by timing the candidates on this machine at the graph's own shapes.

A query is answered by the first rule that applies:
1. a pin (`fxopt.tuning.pinned(linear="aten")`): tests and reproducible builds;
2. mode "static" (`FXOPT_TUNING=static`): the pass's documented fallback;
3. sizes that stay unknown (no shape recorded, no hint for a symbolic size; a convolution's
   symbolic batch is read from its input's hint): the fallback;
4. the on-disk cache (`cache.py`): a second optimize of the same model tunes nothing;
5. mode "cached": the fallback;
6. an op doing under `work.NEGLIGIBLE_SHARE` of its graph's work (a pooler's one token): the
   unchanged op, untimed; the budget of this graph spent: the fallback;
7. a measurement: short interleaved rounds (`measure.py`; a Linear of a few tokens, in a model
   whose weights exceed the last-level cache, on copies of its weights streamed from memory as
   in a decoding step; a very wide one of many tokens on part of its output features:
   `kernels.timed_problem`); a candidate other than the first
   (the op as the graph had it) is picked only if it is at least `MARGIN` faster, so a
   difference inside the noise never changes the graph. The cache keeps the times, and a
   cached entry is decided again by the current rule.
A candidate this torch or CPU cannot run natively is never timed or picked, whatever the rule
(the fallback then falls back to the first candidate).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Literal, cast

import torch

from . import kernels, work
from ..optimization import hardware
from .cache import ChoiceCache
from .measure import best_times, streaming

Mode = Literal["measure", "cached", "static"]
MODES: tuple[Mode, ...] = ("measure", "cached", "static")

MARGIN = 0.01
"""How much faster than the unchanged op a rewrite must measure to be picked. Each candidate's
time is its fastest round (measure.py), steady to a few percent; 3% used to keep MiniLM's
384x384 attention output on ATen's Linear (oneDNN measured 0.89-0.97 of it in four tunings),
which ran 2.8% of the whole model slower in place (Zen 4 core, 31 interleaved rounds)."""


def _decide(names: Sequence[str], seconds: Mapping[str, float]) -> tuple[str, float]:
    """The candidate `MARGIN` rules for, of `names` timed at `seconds` (the first the unchanged
    op), and its time relative to that op."""
    base = seconds[names[0]]
    best = min(names, key=seconds.__getitem__)
    if seconds[best] > base * (1 - MARGIN):
        best = names[0]
    return best, seconds[best] / base


def _decided(entry: Mapping[str, object], names: Sequence[str]) -> tuple[str, float]:
    """A cached entry decided by the current rule where it kept its times (all do since they
    were cached with them); as cached otherwise."""
    seconds = entry.get("seconds")
    if isinstance(seconds, Mapping) and all(isinstance(seconds.get(n), float) for n in names):
        return _decide(names, cast(Mapping[str, float], seconds))
    return str(entry["picked"]), float(cast(float, entry["ratio"]))

DEFAULT_BUDGET_S = 2.0
"""Measuring time allowed per transformed graph (one compose); past it, the fallbacks apply."""


def _env_mode() -> Mode:
    mode = os.environ.get("FXOPT_TUNING", "measure")
    if mode not in MODES:
        raise ValueError(f"FXOPT_TUNING={mode!r}: expected one of {', '.join(MODES)}")
    return cast(Mode, mode)


class KernelChooser:
    """The process's settings and cache; `for_graph` answers the queries of one transformation."""

    def __init__(
        self, mode: Mode | None = None, budget_s: float = DEFAULT_BUDGET_S, cache: ChoiceCache | None = None
    ) -> None:
        self.mode: Mode = mode if mode is not None else _env_mode()
        self.budget_s = budget_s
        self.pins: dict[str, str] = {}
        self.cache = cache if cache is not None else ChoiceCache()
        self.model_bytes: int | None = None

    def for_graph(self, gm: torch.fx.GraphModule | None) -> GraphChoices:
        return GraphChoices(self, gm)

    @contextlib.contextmanager
    def reading(self, model_bytes: int) -> Iterator[None]:
        """Queries inside are for a graph that is part of a model whose forward reads
        `model_bytes` of weights (optimize_model's blocks), not only the graph's own."""
        previous, self.model_bytes = self.model_bytes, model_bytes
        try:
            yield
        finally:
            self.model_bytes = previous

    def prefers_rewrite(self, key: str, rewritten: Callable[[], object], unchanged: Callable[[], object]) -> bool:
        """Whether a rewritten computation (optimize_model's graph for a block) should replace
        the unchanged one, by the rules of a kernel query without pins: mode static, or cached
        with no entry: yes (the rewrite, as the passes' fallbacks); an entry of the cache under
        `key`; else timed now (the rewrite must be MARGIN faster) and cached, so a second
        optimize of the same model times nothing."""
        entry = None if self.mode == "static" else self.cache.get(key)
        if entry is None:
            if self.mode != "measure":
                return True
            with torch.no_grad():
                times = best_times({"rewritten": rewritten, "unchanged": unchanged})
            picked, _ = _decide(("unchanged", "rewritten"), times)
            entry = {"picked": picked, "ratio": times["rewritten"] / times["unchanged"], "seconds": times}
            self.cache.put(key, entry)
        return _decided(entry, ("unchanged", "rewritten"))[0] == "rewritten"


class GraphChoices:
    """Answers the engine's queries while passes run on one GraphModule (bindings/py_chooser.h)."""

    def __init__(self, chooser: KernelChooser, gm: torch.fx.GraphModule | None) -> None:
        self.chooser = chooser
        self.gm = gm
        if chooser.model_bytes is not None:
            self.model_bytes: int | None = chooser.model_bytes
        else:
            self.model_bytes = None if gm is None else weight_bytes(gm.state_dict().values())
        self.spent_s = 0.0
        self._nodes: dict[str, torch.fx.Node] | None = None
        self._last_hint: int | None = None
        self._last_batch: int | None = None
        self._graph_work: work.GraphWork | None = None

    def choose(
        self, op: str, shape: Sequence[int], dtype: str, variant: str, value: str,
        candidates: Sequence[str], fallback: int,
    ) -> tuple[int, float, str]:  # fmt: skip
        available = [i == 0 or _runs_here(op, name) for i, name in enumerate(candidates)]
        static = fallback if available[fallback] else 0
        for key in (f"{op}[{variant}]", op):
            pinned = self.chooser.pins.get(key)
            if pinned is not None and pinned in candidates and available[candidates.index(pinned)]:
                return candidates.index(pinned), 1.0, "pinned"
        if sum(available) == 1:
            return 0, 1.0, "the only candidate this CPU runs natively"
        if self.chooser.mode == "static":
            return static, 1.0, "static"
        sizes = self._resolved(op, shape, value)
        if sizes is None:
            return static, 1.0, "static: sizes unknown"
        problem = kernels.Problem(op, sizes, dtype, variant)
        names = [name for name, ok in zip(candidates, available) if ok]
        streamed = kernels.streams_weights(problem) and self._weights_stream()
        key = json.dumps([op, sizes, dtype, variant, names, *(["streamed"] if streamed else [])])
        entry = self.chooser.cache.get(key)
        if entry is None:
            if self.chooser.mode == "cached":
                return static, 1.0, "static: not in the cache"
            share = self._share(problem)
            if share is not None and share < work.NEGLIGIBLE_SHARE:
                return 0, 1.0, f"untimed: {share:.2%} of the graph's work"
            if self.spent_s >= self.chooser.budget_s:
                return static, 1.0, "static: tuning budget spent"
            entry = self._measure(problem, names, streamed)
            self.chooser.cache.put(key, entry)
            how = "measured"
        else:
            how = "cached"
        picked, ratio = _decided(entry, names)
        return candidates.index(picked), ratio, how

    def _share(self, problem: kernels.Problem) -> float | None:
        """The share of its graph's work the query's ops do (work.py); None if unknown."""
        done = work.query_work(problem.op, problem.shape)
        if done is None or self.gm is None:
            return None
        if self._graph_work is None:
            self._graph_work = work.GraphWork(self.gm)
        return self._graph_work.share(*done)

    def _weights_stream(self) -> bool:
        """Whether the model's weights come from memory at each forward: more bytes than the
        last-level cache holds (or unknown). MobileNetV2's 14 MB fit a 32 MB L3, where its
        classifier's int8 query took 0.74 s streamed."""
        return self.model_bytes is None or self.model_bytes > hardware.last_level_cache_bytes()

    def _measure(self, problem: kernels.Problem, names: list[str], streamed: bool) -> dict[str, object]:
        start = time.perf_counter()
        timed = kernels.timed_problem(problem)
        try:
            with torch.no_grad():
                runners = {name: _kernel(problem.op, name).build(timed) for name in names}
                if streamed:
                    times = best_times({name: streaming(run) for name, run in runners.items()}, evict=False)
                else:
                    times = best_times(runners)
        finally:
            kernels.operands_released()
        self.spent_s += time.perf_counter() - start
        best, ratio = _decide(names, times)
        entry: dict[str, object] = {"picked": best, "ratio": ratio, "seconds": times}
        if timed != problem:
            entry["timed_shape"] = list(timed.shape)
        return entry

    def _resolved(self, op: str, shape: Sequence[int], value: str) -> tuple[int, ...] | None:
        """The query's sizes with symbolic ones (-1) read from the value's size hints."""
        if all(size >= 0 for size in shape):
            return tuple(shape)
        if op in kernels.WHOLE_SHAPE_OPS:
            return self._convolution_sizes(shape, value)
        if op == "attention":  # batch, heads, kv_heads, rows, keys, d; the value is the query
            hinted = work.hints(self._node(value))
            if hinted is None or len(hinted) != 4 or None in (hinted[0], hinted[2]):
                return None
            # The query's batch and rows; keys as many as rows (self-attention over a prompt).
            hint = {0: cast(int, hinted[0]), 3: cast(int, hinted[2]), 4: cast(int, hinted[2])}
            filled = [hint.get(i, -1) if size < 0 else size for i, size in enumerate(shape)]
            return tuple(filled) if all(size >= 0 for size in filled) else None
        hints = self._leading_hint(value)
        if hints is None:
            return None
        # Linear queries: -1 can only be the token count, the product of the leading sizes.
        return tuple(hints if size < 0 else size for size in shape)

    def _convolution_sizes(self, shape: Sequence[int], value: str) -> tuple[int, ...] | None:
        """A convolution query (its input's N, C, H, W, then the weight's sizes) with symbolic
        input sizes read from the input value's hints. An input an earlier pass of the run
        created is not in the fx graph yet; where only its batch is symbolic it gets the batch
        last read in this graph (a graph's convolutions see one batch)."""
        hinted = work.hints(self._node(value))
        if hinted is not None and len(hinted) == 4 and None not in hinted:
            self._last_batch = cast(int, hinted[0])
            filled = [cast(int, hinted[i]) if i < 4 and size < 0 else size for i, size in enumerate(shape)]
        elif self._node(value) is None and self._last_batch is not None and min(shape[1:]) >= 0:
            filled = [self._last_batch, *shape[1:]]
        else:
            return None
        return tuple(filled) if min(filled) >= 0 else None

    def _leading_hint(self, value: str) -> int | None:
        """The product of the value's leading size hints (the sizes it was traced at).

        A value an earlier pass of the run created is not in the fx graph yet; it stands for one
        that was (the core copies its sizes), but which one is not known here, so it gets the
        hint last read in this graph: a graph's Linears see one token count almost always.
        """
        if self.gm is None:
            return None
        node = self._node(value)
        if node is None:
            return self._last_hint
        sizes = work.hints(node)
        if not sizes or any(h is None for h in sizes[:-1]):
            return None
        self._last_hint = math.prod(cast(list[int], sizes[:-1]))
        return self._last_hint

    def _node(self, value: str) -> torch.fx.Node | None:
        """The fx graph's node named `value`; None if the graph has none (or there is no graph)."""
        if self.gm is None:
            return None
        if self._nodes is None:
            self._nodes = {node.name: node for node in self.gm.graph.nodes}
        return self._nodes.get(value)


def weight_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """The bytes of `tensors`, each storage counted once (tied weights, views)."""
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def _kernel(op: str, name: str) -> kernels.Kernel:
    found = kernels.kernel(op, name)
    if found is None:
        raise KeyError(f"no kernel {name!r} registered for op {op!r}")
    return found


def _runs_here(op: str, name: str) -> bool:
    found = kernels.kernel(op, name)
    return found is not None and found.available()


_CHOOSER = KernelChooser()


def current() -> KernelChooser:
    """The chooser every built-in transformation asks."""
    return _CHOOSER


def configure(mode: Mode | None = None, budget_s: float | None = None) -> None:
    """Sets how kernels are chosen from now on in this process (see the module's rules)."""
    if mode is not None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
        _CHOOSER.mode = mode
    if budget_s is not None:
        _CHOOSER.budget_s = budget_s


@contextlib.contextmanager
def pinned(pins: Mapping[str, str] | None = None, /, **by_op: str) -> Iterator[None]:
    """Within the block, queries about `op` (or `op[variant]`) take the kernel named, where it
    is a candidate and runs here: ``with fxopt.tuning.pinned(linear="aten"): ...``."""
    saved = dict(_CHOOSER.pins)
    _CHOOSER.pins.update({**(pins or {}), **by_op})
    try:
        yield
    finally:
        _CHOOSER.pins = saved
