"""Dynamo export without building the shape guard function it throws away.

`torch._dynamo.export` compiles the model's frame as `torch.compile` would, guards included,
then drops the compiled frame with its guards; fxopt checks a call's inputs itself
(`input_guard`). Export also keeps every static dimension as a guard (`ignore_static=False`),
so the shape guard of a traced model holds one comparison per dimension of every weight,
which Dynamo parses and unparses into one Python function: on one Zen 4 core 0.6 s of
MiniLM's 3.1 s trace, 1.2 of BERT-base's 4.3 s and 2.4 of ResNet-50's 4.6 s, for a function
nobody calls. Within `shape_guards_unbuilt()` that guard is skipped for exports on this thread
that carry no dynamic-shape constraints (with constraints, producing it is what reports a
dimension the model specialised). Other threads, `torch.compile` and `torch.export` calls are
untouched. Where torch lacks the hook (another torch version) nothing is skipped.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any

_active = threading.local()
_installed = False


@contextlib.contextmanager
def shape_guards_unbuilt() -> Iterator[None]:
    """Within: Dynamo exports on this thread without constraints skip the shape guard."""
    _install()
    outer = getattr(_active, "on", False)
    _active.on = True
    try:
        yield
    finally:
        _active.on = outer


def _install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    try:
        from torch._dynamo.guards import GuardBuilder
    except ImportError:
        return
    build = getattr(GuardBuilder, "SHAPE_ENV", None)
    if build is None:
        return

    def shape_env(self: Any, guard: Any) -> None:
        if getattr(_active, "on", False) and _unconstrained_export(self):
            return
        build(self, guard)

    functools.update_wrapper(shape_env, build)  # keeps torch's marks on the method
    GuardBuilder.SHAPE_ENV = shape_env  # type: ignore[method-assign]


def _unconstrained_export(builder: Any) -> bool:
    output_graph = getattr(getattr(builder, "check_fn_manager", None), "output_graph", None)
    return bool(getattr(output_graph, "export", False)) and not getattr(output_graph, "export_constraints", None)
