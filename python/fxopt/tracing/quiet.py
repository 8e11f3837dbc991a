"""Torch's own diagnostics, hidden while a tracer runs.

Dynamo and torch.export log what they decide on the way (a dimension specialised to the
example's size 1, a guard that failed to simplify, with a 44-line stack from
`symbolic_shapes` on a ResNet-50 at batch 1) and warn about their own deprecations. For a trace
that succeeds, none of it is the user's business: what matters reaches them as a TraceWarning
(fixed sizes, a fallback), and a trace that fails raises with the tracer's error. The loggers
are torch's, so their handlers write to the stderr torch saw at import: only raising their
levels hides them. Setting a level clears every logger's cache (transformers registers hundreds),
so nested uses (optimize_model traces each block inside one) set them once.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

_LOGGERS = (
    "torch._dynamo",
    "torch._export",
    "torch.export",
    "torch.fx",
    "torch._subclasses",
    "torch._functorch",
    "torch._guards",
)


_hidden = False
"""True while a torch_diagnostics_hidden context is open."""


@contextlib.contextmanager
def torch_diagnostics_hidden() -> Iterator[None]:
    """Within: torch's tracing loggers show errors only, and warnings torch issues are ignored."""
    global _hidden
    if _hidden:
        yield
        return
    _hidden = True
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(max(logging.ERROR, logger.getEffectiveLevel()))
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"torch(\.|$)")
            yield
    finally:
        _hidden = False
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
