"""fxopt: a C++ graph optimizer for torch.fx GraphModules."""

from __future__ import annotations

from .optimize_model import optimize
from .presets import preset
from .tracing import trace
from .verify import VerifyReport, verify

__all__ = ["optimize", "preset", "trace", "verify", "VerifyReport"]
