"""Which torch versions the engine's reliance on fx internals was checked against.

The engine reproduces torch's generated forward byte for byte (``codegen``), proves ``lint`` from
fx's private tables (``lint``) and sets a node's arguments through the method fx's setters call
(``bridge``). Each is right for the torch versions listed here; on any other one fxopt takes
torch's own, slower route until it is checked again.
"""

from __future__ import annotations

import torch

# torch versions (major.minor) whose fx internals the engine was checked against.
TESTED_TORCH = ("2.13",)


def internals_checked() -> bool:
    """True on a torch version in :data:`TESTED_TORCH`."""
    return ".".join(torch.__version__.split(".")[:2]) in TESTED_TORCH
