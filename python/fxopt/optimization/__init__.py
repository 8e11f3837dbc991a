"""Drop-in for ``optimum.fx.optimization``: the same names, the same call signatures."""

from __future__ import annotations

from .builtin import BuiltinTransformation, TransformationError
from .compose import ComposeTransformation, DeepCopy, LintAndRecompile, compose
from .passes import (
    ChangeActivation,
    ChangePrecision,
    ChangeTrueDivToMulByInverse,
    FuseBatchNorm1dInLinear,
    FuseBatchNorm2dInConv2d,
    FuseBatchNormInConv,
    FuseBiasInLinear,
    GeluToTanhApproximation,
    MergeLinears,
)
from .transformation import ReversibleTransformation, Transformation

__all__ = [
    "BuiltinTransformation",
    "ChangeActivation",
    "ChangePrecision",
    "ChangeTrueDivToMulByInverse",
    "ComposeTransformation",
    "DeepCopy",
    "FuseBatchNorm1dInLinear",
    "FuseBatchNorm2dInConv2d",
    "FuseBatchNormInConv",
    "FuseBiasInLinear",
    "GeluToTanhApproximation",
    "LintAndRecompile",
    "MergeLinears",
    "ReversibleTransformation",
    "Transformation",
    "TransformationError",
    "compose",
]
