"""Which stack frames are the model's own code, as opposed to torch's, fxopt's or Python's."""

from __future__ import annotations

import os
import sysconfig
import traceback
from collections.abc import Iterable

import torch

_FXOPT_DIR = os.path.dirname(os.path.dirname(__file__))
_MACHINERY_DIRS = (os.path.dirname(torch.__file__) + os.sep, _FXOPT_DIR + os.sep)
_STDLIB_DIR = sysconfig.get_paths()["stdlib"] + os.sep
_PACKAGE_DIRS = (
    sysconfig.get_paths()["purelib"] + os.sep,
    sysconfig.get_paths()["platlib"] + os.sep,
)


def is_machinery(filename: str) -> bool:
    """Whether a frame belongs to torch, fxopt, the standard library or generated code."""
    if filename.startswith(("<", *_MACHINERY_DIRS)):
        return True
    return filename.startswith(_STDLIB_DIR) and not filename.startswith(_PACKAGE_DIRS)


def innermost_model_frame(frames: Iterable[traceback.FrameSummary]) -> traceback.FrameSummary | None:
    """The last of `frames` that is the model's code, if any."""
    return next((frame for frame in reversed(list(frames)) if not is_machinery(frame.filename)), None)


def describe_frame(frame: traceback.FrameSummary) -> str:
    """`file.py:12 in forward: the source line`."""
    source = f": {frame.line.strip()}" if frame.line else ""
    return f"{os.path.basename(frame.filename)}:{frame.lineno} in {frame.name}{source}"
