"""Kernel choices by measurement: the engine's passes ask which candidate kernel to emit for an
op (cpp/tuning/chooser.h); this package times the candidates on this machine at the graph's
shapes and caches the answers per CPU and torch version."""

from __future__ import annotations

from . import attention_kernels  # noqa: F401 - registers scaled_dot_product_attention's candidates
from . import fxopt_kernels  # noqa: F401 - registers the candidates of fxopt's own kernels
from .chooser import MODES, GraphChoices, KernelChooser, Mode, configure, current, pinned, weight_bytes
from .kernels import Problem, register

__all__ = [
    "MODES",
    "GraphChoices",
    "KernelChooser",
    "Mode",
    "Problem",
    "configure",
    "current",
    "pinned",
    "register",
    "weight_bytes",
]
