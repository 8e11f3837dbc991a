"""fxopt: a C++ graph optimizer for torch.fx GraphModules."""

from __future__ import annotations

from .tracing import trace
from .verify import VerifyReport, verify

__all__ = ["trace", "verify", "VerifyReport"]
