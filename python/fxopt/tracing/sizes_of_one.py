"""Dimensions an example gives size one that stay dynamic in Dynamo and export graphs.

Dynamo and torch.export specialise a dimension whose example size is 0 or 1: traced on one
sentence or one image (the example most users have at hand) a graph took batch 1 only, and
``fxopt.optimize(model, "fast", example_inputs=one, calibration=batch)`` failed in calibration
on the graph's own input check. torch's ``backed_size_oblivious`` shape reasoning treats such a
size as any size of 2 or more wherever the model's code does not need it exactly, so the
dimension stays a symbol: the graph takes every size, 1 included, with the same kernels.

Applied only where an input traced with dynamic sizes has a dimension of size 1, and only on a
torch that has the option; a trace that fails under it is made again without it (the graph
then fixes that size, as before, and says so in its input check).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


def _config() -> Any:
    try:
        from torch.fx.experimental import _config
    except ImportError:  # a torch without the experimental config module
        return None
    return _config if hasattr(_config, "backed_size_oblivious") else None


def keeping_sizes_of_one(trace: Callable[[], T], dynamic_sizes: Iterable[int]) -> T:
    """`trace()` with its dimensions of size 1 kept dynamic where torch can, else plainly.
    `dynamic_sizes`: the example's sizes of the dimensions the trace asks to keep dynamic."""
    config = _config()
    if config is None or 1 not in dynamic_sizes:
        return trace()
    try:
        with config.patch(backed_size_oblivious=True):
            return trace()
    except Exception:  # e.g. code that needs the size exactly: the plain trace fixes it
        return trace()
