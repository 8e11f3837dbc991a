"""Int8 Linears whose activations are quantized on the fly, by torch's packed int8 GEMMs.

``QuantizeLinearsInt8`` (cpp/passes/quantize_linears_int8.h) stores each weight as int8 values
with one scale per output channel and has the graph call :func:`dynamic_int8_linear` with the
engine the kernel chooser measured fastest here: ``onednn`` (AMX / VNNI kernels) or ``fbgemm``.
Each call quantizes its input to unsigned 8 bits with one scale and zero point for the whole
tensor (``quantized::linear_dynamic``), multiplies in int8 and returns float32, bias included.

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


def reduce_range(engine: str) -> bool:
    """Whether `engine` must quantize activations to 7 bits here: fbgemm multiplies unsigned by
    signed 8-bit values in 16-bit sums (vpmaddubsw), which saturate without VNNI / AMX."""
    return engine == "fbgemm" and not hardware.fast_int8_cpu()


_PACKED: PackCache[Any] = PackCache()


def _pack(values: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None, engine: str) -> Any:
    def make() -> Any:
        previous = torch.backends.quantized.engine
        try:
            torch.backends.quantized.engine = engine
            with warnings.catch_warnings():  # quantized tensors only live inside the packing
                warnings.simplefilter("ignore")
                weight = torch._make_per_channel_quantized_tensor(
                    values, scales.double(), torch.zeros_like(scales, dtype=torch.long), 0
                )
                return torch.ops.quantized.linear_prepack(weight, None if bias is None else bias.float())
        finally:
            torch.backends.quantized.engine = previous

    return _PACKED.get(values, (scales, bias), engine, make)


@graph_leaf
def dynamic_int8_linear(
    x: torch.Tensor, values: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None, engine: str
) -> torch.Tensor:
    """linear(x, values * scales[:, None], bias) with x quantized per tensor to 8 bits.

    `values` is the int8 weight [N, K], `scales` its float32 per-row scales [N]; x is float32 of
    any rank [..., K]. The result is float32 [..., N].
    """
    with torch.no_grad():  # the packed kernels have no autograd formula; inference only
        return torch.ops.quantized.linear_dynamic(x, _pack(values, scales, bias, engine), reduce_range(engine))
