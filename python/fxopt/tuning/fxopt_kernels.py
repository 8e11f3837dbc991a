"""Candidates that run fxopt's own kernels (cpp/kernels/), registered like those of kernels.py.

`fxopt_int8` for a weight-only int8 Linear and `fxopt_int4` for a 4-bit one: float32 activations
times int8 weight rows (kernels/int8_weight_mm.h through runtime/int8_weight_linear.py), or
activations rounded to int8 per row times 4-bit groups with VNNI (or AVX2) dot products
(kernels/int4_weight_mm.h through runtime/int4_weight_linear.py), which
QuantizeLinearsWeightOnly emits where they measure fastest.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..engine.tensor_ops import TorchTensorOps
from ..optimization import hardware
from ..runtime.int4_weight_linear import int4_weight_linear
from ..runtime.int8_weight_linear import int8_weight_linear
from .kernels import INT4_GROUP_SIZE, Builder, Problem, Runner, Weights, random_operand, register

_WEIGHTS = TorchTensorOps()


def _has_avx2() -> bool:
    # The kernels' vector paths: AVX-512 (int4: with VNNI), else AVX2 with FMA and F16C.
    # Elsewhere their plain C++ loops run: correct, never faster than float32.
    return "avx2" in hardware.cpu_flags() or "avx512_f" in hardware.cpu_flags()


def _own_kernel(bits: int) -> Builder:
    """The chain QuantizeLinearsWeightOnly emits with fxopt's kernel: float32 throughout."""

    def build(problem: Problem) -> Runner:
        tokens, in_features, out_features = problem.shape
        generator = torch.Generator().manual_seed(0)
        x = random_operand(tokens, in_features, generator=generator)
        weight = random_operand(out_features, in_features, generator=generator, scale=in_features**-0.5)
        bias = None if problem.variant.endswith("no_bias") else random_operand(out_features, generator=generator)
        linear: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
        if bits == 8:
            values, scales = _WEIGHTS.quantize_rows_int8(weight)
            linear = int8_weight_linear
        else:
            values, scales = _WEIGHTS.quantize_groups_int4(weight, INT4_GROUP_SIZE, "fxopt")
            linear = int4_weight_linear

        def run(w: Weights) -> object:
            values, scales, bias = w
            y = linear(x, values, scales)
            return y if bias is None else y + bias

        return Runner(run, (values, scales, bias))

    return build


register("int8_weight_only", "fxopt_int8", _has_avx2, _own_kernel(8))
register("int4_weight_only", "fxopt_int4", _has_avx2, _own_kernel(4))
