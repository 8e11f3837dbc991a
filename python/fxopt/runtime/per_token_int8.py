"""The target of an int8 Linear with one activation scale per token (``QuantizeLinearsInt8``'s
``int8_per_token`` kernel, cpp/passes/quantize_linears_int8.h).

Each row of x is quantized to int8 with its own symmetric scale, in x's own dtype, by fxopt's
kernel (kernels/per_token_int8.h); ``aten._int_mm`` multiplies it with the int8 weight (oneDNN's
VNNI or AMX code) where the CPU has int8 dot products, fxopt's exact AVX2 product
(kernels/int8_matmul.h, the weight packed once on the first call) where it has only AVX2 and
``_int_mm`` no fast kernel; the same kernel scales the int32 sums by the row's and the output
channel's scales, adds the bias and writes x's dtype. So in a graph lowered to bfloat16 the Linear reads
and writes bfloat16 with no casts around it (ChangePrecision leaves it in its input's dtype:
cpp/ops/dtype_flow.h), and its float32 result is bit for bit that of the same arithmetic in
ATen ops. `activation` (``relu``, ``gelu``, ``gelu_tanh``, ``silu``; ``none``) is applied to the
float32 result before it is written: the pass fuses the activation that reads only the Linear,
as oneDNN's post-ops do for the Linears it runs. float16 and float64 inputs run through
float32. Inference only: the result has no autograd history.

`outliers` are input channels that stay out of the int8 product (LLM.int8's decomposition,
with the channels fixed by calibration): a few channels of a LayerNorm's output (1-8 of 384 in
all-MiniLM-L6-v2) are 7-28x larger than the median one, and one scale per token sized to them
leaves the others a few levels. They are quantized as zeros (the weight's int8 rows for them
are zero too, so its scales fit the other channels), and their float32 product with
`outlier_weight` (the float weight's columns for them, transposed: [m, n]) joins the sum
before the activation: the per-token error of MiniLM's query, key, value and FFN-input Linears
falls from 1.6-3.6% to 0.4-1.1%.
"""

from __future__ import annotations

import torch

from .. import _core
from ..optimization import hardware
from . import graph_leaf
from .packing import PackCache

_KERNEL_DTYPES = (torch.float32, torch.bfloat16)
_PACKED: PackCache[torch.Tensor] = PackCache()


def available() -> bool:
    """Whether this CPU runs the int8 product fast: with int8 dot products (``_int_mm``) or with
    AVX2 (fxopt's own product)."""
    return hardware.fast_int8_cpu() or _core.int8_matmul_available()


def _own_product() -> bool:
    return not hardware.fast_int8_cpu() and _core.int8_matmul_available()


def _pack(values: torch.Tensor) -> torch.Tensor:
    k, n = values.shape
    values = values.contiguous()
    packed = torch.empty(_core.int8_matmul_packed_size(k, n), dtype=torch.int16)
    _core.pack_int8_matmul_weight(values.data_ptr(), k, n, packed.data_ptr())
    return packed


def fxopt_product(q: torch.Tensor, values: torch.Tensor, threads: int) -> torch.Tensor:
    """q [rows, k] int8 @ values [k, n] int8 in int32, exactly, by fxopt's product."""
    (rows, k), n = q.shape, values.shape[1]
    packed = _PACKED.get(values, (), None, _pack, values)
    product = torch.empty(rows, n, dtype=torch.int32)
    _core.int8_matmul(q.data_ptr(), packed.data_ptr(), rows, k, n, product.data_ptr(), threads)
    return product


def _product(q: torch.Tensor, values: torch.Tensor, threads: int) -> torch.Tensor:
    """q [rows, k] int8 @ values [k, n] int8, exactly, in int32."""
    if _own_product():
        return fxopt_product(q, values, threads)
    return torch._int_mm(q, values.contiguous())


@graph_leaf
def per_token_int8_linear(
    x: torch.Tensor,
    values: torch.Tensor,
    scales: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str = "none",
    outliers: list[int] | None = None,
    outlier_weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """activation(x [..., k] @ (values [k, n] int8 * scales [n] float32) + bias [n]) -> [..., n]
    in x's dtype, x quantized per row to 8 bits; the channels `outliers` instead multiply
    `outlier_weight` [len(outliers), n] in float32."""
    k, n = values.shape
    if outliers and (
        outlier_weight is None
        or not outlier_weight.is_floating_point()
        or outlier_weight.shape != (len(outliers), n)
    ):
        raise TypeError(
            f"per_token_int8_linear: {len(outliers)} outlier channels need a floating-point "
            f"outlier_weight [{len(outliers)}, {n}]"
        )
    if values.dtype != torch.int8 or scales.dtype != torch.float32 or scales.shape != (n,):
        raise TypeError(
            f"per_token_int8_linear: int8 values [k, n] and float32 scales [n]; not {values.dtype} "
            f"{tuple(values.shape)}, {scales.dtype} {tuple(scales.shape)}"
        )
    if x.dim() < 1 or x.shape[-1] != k:
        raise ValueError(f"per_token_int8_linear: x {tuple(x.shape)} does not end in {k}")
    if not x.is_cpu:
        raise TypeError(f"per_token_int8_linear: CPU activations, not {x.device}")
    work = x if x.dtype in _KERNEL_DTYPES else x.float()
    flat = work.reshape(-1, k).contiguous()
    rows = flat.shape[0]
    y = torch.empty(rows, n, dtype=work.dtype)
    if rows:
        threads = torch.get_num_threads()
        bfloat16 = work.dtype == torch.bfloat16
        outliers = outliers or []
        q = torch.empty(rows, k, dtype=torch.int8)
        token_scales = torch.empty(rows)
        _core.quantize_rows_int8(
            flat.data_ptr(), bfloat16, rows, k, q.data_ptr(), token_scales.data_ptr(), threads, skipped=outliers
        )
        product = _product(q, values, threads)
        # Held in names while the kernel reads their addresses (read as float32, as a lowering
        # may have left them in another dtype).
        scales = scales.contiguous()
        bias = None if bias is None else bias.float().contiguous()
        outlier_weight = None if outlier_weight is None else outlier_weight.float().contiguous()
        _core.dequantize_rows_int32(
            product.data_ptr(),
            rows,
            n,
            token_scales.data_ptr(),
            scales.data_ptr(),
            0 if bias is None else bias.data_ptr(),
            y.data_ptr(),
            bfloat16,
            threads,
            activation,
            outliers,
            flat.data_ptr(),
            k,
            0 if outlier_weight is None else outlier_weight.data_ptr(),
        )
    y = y.reshape(*x.shape[:-1], n)
    return y if y.dtype == x.dtype else y.to(x.dtype)
