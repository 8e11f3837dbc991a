"""Candidates that run fxopt's own kernels (cpp/kernels/), registered like those of kernels.py.

`fxopt_int8` for a weight-only int8 Linear: float32 activations times int8 weight rows
(kernels/int8_weight_mm.h through runtime/int8_weight_linear.py), which QuantizeLinearsWeightOnly
emits where it measures fastest.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..runtime.int8_weight_linear import int8_weight_linear
from ..engine.tensor_ops import TorchTensorOps
from ..optimization import hardware
from .kernels import Problem, register


def _has_avx512() -> bool:
    # Elsewhere the kernel's plain C++ loop runs: correct, never faster than float32.
    return "avx512_f" in hardware.cpu_flags()


def _fxopt_int8(problem: Problem) -> Callable[[], object]:
    """The chain QuantizeLinearsWeightOnly emits with fxopt's kernel: float32 throughout."""
    tokens, in_features, out_features = problem.shape
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, in_features, generator=generator)
    weight = torch.randn(out_features, in_features, generator=generator) / in_features**0.5
    bias = None if problem.variant.endswith("no_bias") else torch.randn(out_features, generator=generator)
    values, scales = TorchTensorOps().quantize_rows_int8(weight)

    def run() -> object:
        y = int8_weight_linear(x, values, scales)
        return y if bias is None else y + bias

    return run


register("int8_weight_only", "fxopt_int8", _has_avx512, _fxopt_int8)
