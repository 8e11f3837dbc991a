"""Drop-in for ``optimum.fx.optimization``: the same names, the same call signatures."""

from __future__ import annotations

from .builtin import BuiltinTransformation, TransformationError
from .compose import ComposeTransformation, DeepCopy, LintAndRecompile, compose
from .passes import ChangeTrueDivToMulByInverse
from .transformation import ReversibleTransformation, Transformation

__all__ = [
    "BuiltinTransformation",
    "ChangeTrueDivToMulByInverse",
    "ComposeTransformation",
    "DeepCopy",
    "LintAndRecompile",
    "ReversibleTransformation",
    "Transformation",
    "TransformationError",
    "compose",
]
