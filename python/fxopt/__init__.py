"""fxopt: a C++ graph optimizer for torch.fx GraphModules."""

from __future__ import annotations

from .optimization.compile_backend import register as _register_compile_backend
from .optimization.model import optimize_model, restore_model
from .optimization.optimize import optimize
from .optimization.presets import preset
from .storage.graph_file import load, save
from .tracing.trace import trace
from .verification.verify import VerifyReport, verify
from . import tuning

_register_compile_backend()  # torch.compile(model, backend="fxopt")

__all__ = [
    "load", "optimize", "optimize_model", "preset", "restore_model", "save", "trace", "tuning", "verify",
    "VerifyReport",
]
