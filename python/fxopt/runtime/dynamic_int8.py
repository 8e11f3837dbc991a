"""Int8 Linears whose activations are quantized on the fly, by torch's packed int8 GEMMs.

``QuantizeLinearsInt8`` (cpp/passes/quantize_linears_int8.h) stores each weight as int8 values
with one scale per output channel and has the graph call :func:`dynamic_int8_linear` with the
engine the kernel chooser measured fastest here: ``onednn`` (AMX / VNNI kernels) or ``fbgemm``.
Each call quantizes its input to unsigned 8 bits with one scale and zero point for the whole
tensor (``quantized::linear_dynamic``), multiplies in int8 and returns float32, bias included.

The engines take their weights pre-packed in their own layout, an object the graph cannot hold
as a tensor: it is packed on the first call and kept while the stored values live, so a saved
graph holds plain tensors only and packs again after loading, for the CPU it then runs on.
"""

from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from ..optimization import hardware

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


@dataclass
class _Packed:
    params: Any
    scales: weakref.ref[torch.Tensor]
    bias: weakref.ref[torch.Tensor] | None
    versions: tuple[int, ...]
    engine: str


# By id of the int8 values (tensors compare elementwise, so they cannot be dictionary keys); an
# entry goes when its values are freed, before the id can be reused.
_PACKED: dict[int, _Packed] = {}


def _versions(*tensors: torch.Tensor | None) -> tuple[int, ...]:
    return tuple(t._version for t in tensors if t is not None)


def _pack(values: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None, engine: str) -> Any:
    found = _PACKED.get(id(values))
    if (
        found is not None
        and found.engine == engine
        and found.scales() is scales
        and (found.bias() if found.bias is not None else None) is bias
        and found.versions == _versions(values, scales, bias)
    ):
        return found.params
    previous = torch.backends.quantized.engine
    try:
        torch.backends.quantized.engine = engine
        with warnings.catch_warnings():  # quantized tensors only live inside the packing
            warnings.simplefilter("ignore")
            weight = torch._make_per_channel_quantized_tensor(
                values, scales.double(), torch.zeros_like(scales, dtype=torch.long), 0
            )
            params = torch.ops.quantized.linear_prepack(weight, None if bias is None else bias.float())
    finally:
        torch.backends.quantized.engine = previous
    if id(values) not in _PACKED:
        weakref.finalize(values, _PACKED.pop, id(values), None)
    _PACKED[id(values)] = _Packed(
        params, weakref.ref(scales), None if bias is None else weakref.ref(bias),
        _versions(values, scales, bias), engine,
    )  # fmt: skip
    return params


def dynamic_int8_linear(
    x: torch.Tensor, values: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None, engine: str
) -> torch.Tensor:
    """linear(x, values * scales[:, None], bias) with x quantized per tensor to 8 bits.

    `values` is the int8 weight [N, K], `scales` its float32 per-row scales [N]; x is float32 of
    any rank [..., K]. The result is float32 [..., N].
    """
    with torch.no_grad():  # the packed kernels have no autograd formula; inference only
        return torch.ops.quantized.linear_dynamic(x, _pack(values, scales, bias, engine), reduce_range(engine))
