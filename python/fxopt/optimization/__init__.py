"""Drop-in for ``optimum.fx.optimization``: the same names, the same call signatures."""

from __future__ import annotations

from .builtin import BuiltinTransformation, TransformationError
from .compose import ComposeTransformation, DeepCopy, LintAndRecompile, compose
from .passes import (
    ChangeActivation,
    ChangePrecision,
    ChangeTrueDivToMulByInverse,
    ConvWeightsChannelsLast,
    EliminateCommonSubexpressions,
    EliminateDeadCode,
    FoldConstants,
    FuseAttentionToSdpa,
    FuseBatchNorm1dInLinear,
    FuseBatchNorm2dInConv2d,
    FuseBatchNormInConv,
    FuseBiasInLinear,
    FuseLinearActivationOneDnn,
    GeluToTanhApproximation,
    MergeLinears,
    QuantizeLinearsInt8,
    RecognizeLinears,
    RemoveNoOps,
    RemoveRuntimeAsserts,
)
from .transformation import ReversibleTransformation, Transformation

__all__ = [
    "BuiltinTransformation",
    "ChangeActivation",
    "ChangePrecision",
    "ChangeTrueDivToMulByInverse",
    "ComposeTransformation",
    "ConvWeightsChannelsLast",
    "DeepCopy",
    "EliminateCommonSubexpressions",
    "EliminateDeadCode",
    "FoldConstants",
    "FuseAttentionToSdpa",
    "FuseBatchNorm1dInLinear",
    "FuseBatchNorm2dInConv2d",
    "FuseBatchNormInConv",
    "FuseBiasInLinear",
    "FuseLinearActivationOneDnn",
    "GeluToTanhApproximation",
    "LintAndRecompile",
    "MergeLinears",
    "QuantizeLinearsInt8",
    "RecognizeLinears",
    "RemoveNoOps",
    "RemoveRuntimeAsserts",
    "ReversibleTransformation",
    "Transformation",
    "TransformationError",
    "compose",
]
