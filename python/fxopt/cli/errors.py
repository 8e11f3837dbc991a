"""Errors the `fxopt` command shows as one line (the traceback only with `--debug`)."""

from __future__ import annotations

from ..optimization import presets
from . import models


class CliError(Exception):
    """Bad input the user can fix; printed as one line, never with a traceback."""


_USER_ERRORS = (CliError, models.ModelError, presets.PassSpecError)
"""Errors whose message says it all; others are prefixed with their type, which hints at the cause."""


def one_line(exc: BaseException) -> str:
    """The exception's message with its lines joined, so multi-line errors stay one line."""
    text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if isinstance(exc, _USER_ERRORS):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
