"""fxopt: a C++ graph optimizer for torch.fx GraphModules."""

from __future__ import annotations

from .compile_backend import register as _register_compile_backend
from .optimize_model import optimize
from .presets import preset
from .tracing import trace
from .verify import VerifyReport, verify

_register_compile_backend()  # torch.compile(model, backend="fxopt")

__all__ = ["optimize", "preset", "trace", "verify", "VerifyReport"]
