"""Int8 Linears whose activations are quantized on the fly, by torch's packed int8 GEMMs.

``QuantizeLinearsInt8`` (cpp/passes/quantize_linears_int8.h) stores each weight as int8 values
with one scale per output channel and has the graph call :func:`dynamic_int8_linear` with the
engine the kernel chooser measured fastest here: ``onednn`` (AMX / VNNI kernels) or ``fbgemm``.
Each call quantizes its input to unsigned 8 bits with one scale and zero point for the whole
tensor (``quantized::linear_dynamic``), multiplies in int8 and returns the input's dtype, bias
included: the kernels take and give float32 only, so other activations (a graph lowered to
bfloat16) are cast to float32 and the result back, here, which leaves the lowered graph in its
dtype around the call (cpp/ops/dtype_flow.h).
Where fbgemm has no VNNI its 16-bit sums would saturate: the pass then stores weights of at most
63 levels (:func:`weight_max`), which keep them exact.

The engines take their weights pre-packed in their own layout, an object the graph cannot hold
as a tensor: it is packed on the first call and kept while the stored values live
(`packing.py`), so a saved graph holds plain tensors only and packs again after loading, for
the CPU it then runs on.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ..optimization import hardware
from .packing import PackCache
from . import graph_leaf

ENGINES = ("onednn", "fbgemm")


def available(engine: str) -> bool:
    """Whether this torch has `engine`'s dynamic int8 Linear."""
    quantized = getattr(torch.ops, "quantized", None)
    return (
        engine in torch.backends.quantized.supported_engines
        and quantized is not None
        and hasattr(quantized, "linear_dynamic")
        and hasattr(quantized, "linear_prepack")
    )


_FBGEMM_WITHOUT_VNNI = ("AVX2", "AVX512", "AVX512_256")
"""Values of fbgemm's own ISA cap (hardware.fbgemm_isa_cap) that leave out its VNNI kernels."""


def sums_saturate(engine: str) -> bool:
    """Whether `engine` adds pairs of unsigned-by-signed 8-bit products in 16 bits here, which
    saturate unless 255 * 2 * max|w| <= 32767: fbgemm's kernels other than AVX512-VNNI ones
    (vpmaddubsw; it has none for AVX-VNNI or AMX), and oneDNN's on a CPU without int8 dot
    products (VNNI or AMX-INT8: an AVX2-only Zen 3 gave a 2-layer MLP cosine 0.9968)."""
    if engine == "onednn":
        return not hardware.fast_int8_cpu()
    if engine != "fbgemm":
        return False
    return hardware.fbgemm_isa_cap() in _FBGEMM_WITHOUT_VNNI or "avx512_vnni" not in hardware.cpu_flags()


def weight_max(engine: str) -> int:
    """The largest |value| `QuantizeLinearsInt8` gives an int8 weight that `engine` multiplies
    here: 63 where its 16-bit sums would saturate, so that activations keep all 8 bits (torch's
    own answer, 7-bit activations, costs more accuracy: docs/benchmarks.md); else 127."""
    return 63 if sums_saturate(engine) else 127


_PACKED: PackCache[tuple[Any, bool]] = PackCache()


def _pack(values: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None, engine: str) -> tuple[Any, bool]:
    """The packed weight and whether its activations must be quantized to 7 bits
    (``reduce_range``): only where the sums saturate and the weight exceeds 64 levels, a graph
    quantized on a CPU with VNNI and run on one without."""

    def make() -> tuple[Any, bool]:
        previous = torch.backends.quantized.engine
        try:
            torch.backends.quantized.engine = engine
            with warnings.catch_warnings():  # quantized tensors only live inside the packing
                warnings.simplefilter("ignore")
                weight = torch._make_per_channel_quantized_tensor(
                    values, scales.double(), torch.zeros_like(scales, dtype=torch.long), 0
                )
                packed = torch.ops.quantized.linear_prepack(weight, None if bias is None else bias.float())
            return packed, sums_saturate(engine) and int(values.abs().max()) > 64
        finally:
            torch.backends.quantized.engine = previous

    return _PACKED.get(values, (scales, bias), engine, make)


@graph_leaf
def dynamic_int8_linear(
    x: torch.Tensor,
    values: torch.Tensor,
    scales: torch.Tensor,
    bias: torch.Tensor | None,
    engine: str,
    outliers: list[int] | None = None,
    outlier_weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """linear(x, values * scales[:, None], bias) with x quantized per tensor to 8 bits.

    `values` is the int8 weight [N, K], `scales` its float32 per-row scales [N]; x is a float
    tensor of any rank [..., K]. The result is [..., N] in x's dtype. The channels `outliers`
    are quantized as zeros and multiply `outlier_weight` [len(outliers), N] in float32 instead
    (runtime/per_token_int8.py says why): the tensor's scale fits the other channels.
    """
    n = values.shape[0]
    if outliers and (
        outlier_weight is None or not outlier_weight.is_floating_point() or outlier_weight.shape != (len(outliers), n)
    ):
        raise TypeError(
            f"dynamic_int8_linear: {len(outliers)} outlier channels need a floating-point "
            f"outlier_weight [{len(outliers)}, {n}]"
        )
    with torch.no_grad():  # the packed kernels have no autograd formula; inference only
        packed, reduce_range = _pack(values, scales, bias, engine)
        xf = x.float()
        if not outliers:
            y = torch.ops.quantized.linear_dynamic(xf, packed, reduce_range)
        else:
            assert outlier_weight is not None
            channels = torch.tensor(outliers, device=x.device)
            added = torch.matmul(xf.index_select(-1, channels), outlier_weight.float())
            y = torch.ops.quantized.linear_dynamic(xf.index_fill(-1, channels, 0), packed, reduce_range)
            y = y.add_(added)
        return y if y.dtype == x.dtype else y.to(x.dtype)
