"""Drop-in for ``optimum.fx.optimization``: the same names, the same call signatures.

This package namespace exports the drop-in's names and nothing else. Its modules:

* `transformation`, `builtin`, `compose`, `passes`: the transformations and how they run
  (built-in ones in the C++ engine through `fxopt.engine`).
* `presets` (`fxopt.preset`), `hardware`: named pass lists, picked for this machine.
* `optimize` (`fxopt.optimize`), `exported` (ExportedProgram in and out, `.pt2`),
  `compile_backend` (`torch.compile(backend="fxopt")`): the one-call paths that apply a preset.
"""

from __future__ import annotations

from .builtin import BuiltinTransformation, TransformationError
from .compose import ComposeTransformation, DeepCopy, LintAndRecompile, compose
from .passes import (
    ChangeActivation,
    ChangePrecision,
    ChangeTrueDivToMulByInverse,
    ChooseAttentionKernel,
    ConvWeightsChannelsLast,
    EliminateCommonSubexpressions,
    EliminateDeadCode,
    FoldConstants,
    FoldPadInConv,
    FuseAttentionToSdpa,
    FuseBatchNorm1dInLinear,
    FuseBatchNorm2dInConv2d,
    FuseBatchNormInConv,
    FuseBiasInLinear,
    FuseConvActivationOneDnn,
    FuseDepthwiseConv,
    FusePointwiseConv,
    FuseLinearActivationOneDnn,
    FuseTanhGelu,
    MoveActivationBeforeReshape,
    GeluToTanhApproximation,
    MergeLinears,
    QuantizeConvsInt8,
    QuantizeLinearsInt8,
    SmoothLinearInputs,
    QuantizeLinearsWeightOnly,
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
    "ChooseAttentionKernel",
    "ComposeTransformation",
    "ConvWeightsChannelsLast",
    "DeepCopy",
    "EliminateCommonSubexpressions",
    "EliminateDeadCode",
    "FoldConstants",
    "FoldPadInConv",
    "FuseAttentionToSdpa",
    "FuseBatchNorm1dInLinear",
    "FuseBatchNorm2dInConv2d",
    "FuseBatchNormInConv",
    "FuseBiasInLinear",
    "FuseConvActivationOneDnn",
    "FuseDepthwiseConv",
    "FusePointwiseConv",
    "FuseLinearActivationOneDnn",
    "FuseTanhGelu",
    "MoveActivationBeforeReshape",
    "GeluToTanhApproximation",
    "LintAndRecompile",
    "MergeLinears",
    "QuantizeConvsInt8",
    "QuantizeLinearsInt8",
    "SmoothLinearInputs",
    "QuantizeLinearsWeightOnly",
    "RecognizeLinears",
    "RemoveNoOps",
    "RemoveRuntimeAsserts",
    "ReversibleTransformation",
    "Transformation",
    "TransformationError",
    "compose",
]
