"""Dynamo export without copying every weight the model holds.

When `torch._dynamo.export` meets a tensor that exists before tracing (a parameter, a buffer,
an example input) it stores a full copy of it, twice over, in case the trace must later run
part of the graph on real values (a function marked `torch._dynamo.assume_constant_result`,
a branch on a constant tensor); a copy keeps such a run from writing into the model's own
tensors. Almost no trace makes that run, and the copies cost a model's size in memory and
time: on one Zen 4 core 0.3-0.8 s of BERT-base's first trace and 0.5-0.9 s of GPT-2's.

Within `tensors_uncopied()` an export on this thread records the tensor itself and copies it
only when Dynamo asks for a real value (`TensorVariable.get_real_value`), before that run
reads it: the run sees the same copies as before, taken later; nothing else reads them, and
the model's tensors do not change while Dynamo traces. Other threads and `torch.compile` keep
torch's behaviour; where torch lacks either hook nothing changes.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any

import torch

_active = threading.local()
_installed = False


@contextlib.contextmanager
def tensors_uncopied() -> Iterator[None]:
    """Within: Dynamo exports on this thread copy a pre-existing tensor only when read."""
    if not _install():
        yield
        return
    outer = getattr(_active, "borrowed", None)
    _active.borrowed = {}
    try:
        yield
    finally:
        _active.borrowed = outer


def _install() -> bool:
    global _installed
    if _installed:
        return True
    try:
        from torch._dynamo.variables import builder
        from torch._dynamo.variables.tensor import TensorVariable
    except ImportError:
        return False
    copy = getattr(builder, "_clone_input", None)
    read = getattr(TensorVariable, "get_real_value", None)
    if copy is None or read is None:
        return False

    def clone_input(value: Any, fake_mode: Any) -> Any:
        borrowed = getattr(_active, "borrowed", None)
        if borrowed is None:
            return copy(value, fake_mode)
        if isinstance(value, torch.Tensor):
            borrowed[id(value)] = (value, fake_mode)
        return value

    def get_real_value(self: Any) -> Any:
        borrowed = getattr(_active, "borrowed", None)
        if borrowed:
            cache = self.proxy.tracer.real_value_cache
            for node, value in list(cache.items()):
                entry = borrowed.get(id(value))
                if entry is not None and entry[0] is value:
                    cache[node] = copy(value, entry[1])
        return read(self)

    functools.update_wrapper(clone_input, copy)
    functools.update_wrapper(get_real_value, read)
    builder._clone_input = clone_input
    TensorVariable.get_real_value = get_real_value  # type: ignore[method-assign]
    _installed = True
    return True

