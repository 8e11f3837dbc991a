"""fxopt's C++ engine"""

from collections.abc import Iterable, Sequence
from typing import Any, overload

import torch
import torch.fx
import torch.fx.node
import torch.nn


class PassError(RuntimeError):
    pass

class TensorInfo:
    @overload
    def __init__(self) -> None: ...

    @overload
    def __init__(self, shape: Sequence[int], dtype: str, device: str, requires_grad: bool, is_parameter: bool, handle: int) -> None: ...

    @property
    def shape(self) -> list[int]: ...

    @shape.setter
    def shape(self, arg: Sequence[int], /) -> None: ...

    @property
    def dtype(self) -> str: ...

    @dtype.setter
    def dtype(self, arg: str, /) -> None: ...

    @property
    def device(self) -> str: ...

    @device.setter
    def device(self, arg: str, /) -> None: ...

    @property
    def requires_grad(self) -> bool: ...

    @requires_grad.setter
    def requires_grad(self, arg: bool, /) -> None: ...

    @property
    def is_parameter(self) -> bool: ...

    @is_parameter.setter
    def is_parameter(self, arg: bool, /) -> None: ...

    @property
    def handle(self) -> int: ...

    @handle.setter
    def handle(self, arg: int, /) -> None: ...

class Skip:
    @property
    def node(self) -> str: ...

    @property
    def reason(self) -> str: ...

    def __repr__(self) -> str: ...

class ChoiceMade:
    @property
    def node(self) -> str: ...

    @property
    def op(self) -> str: ...

    @property
    def picked(self) -> str: ...

    @property
    def ratio(self) -> float: ...

    @property
    def how(self) -> str: ...

class PassResult:
    @property
    def changed(self) -> list[str]: ...

    @property
    def skipped(self) -> list[Skip]: ...

    @property
    def choices(self) -> list[ChoiceMade]: ...

class TensorTable:
    """The tensors a session refers to by handle (bindings/tensor_table.h)."""

    def __init__(self, tensor_type: object, parameter_type: object) -> None: ...

    def add(self, tensor: torch.Tensor) -> TensorInfo: ...

    def tensor(self, handle: int) -> torch.Tensor: ...

    def rebind(self, handle: int, tensor: torch.Tensor) -> None: ...

    def retain(self, live: Iterable[object]) -> None: ...

    def __len__(self) -> int: ...

class Session:
    def __init__(self, node_type: object, tensor_type: object, size_type: object, strided: object, qualname: object, resolve: object) -> None: ...

    def import_graph(self, root: object) -> tuple[list[str], list[str]]: ...

    def matches(self, root: object) -> bool: ...

    def snapshot(self, root: object) -> None: ...

    def snapshot_modules(self, root: object, attributes: Sequence[str], paths: Sequence[str], module_type: object) -> None: ...

    def modules_match(self, root: object) -> bool: ...

    def module_tensors(self) -> list: ...

    def import_modules(self, root: torch.nn.Module, paths: Iterable[str] | None, attributes: Sequence[str], tensors: TensorTable) -> None: ...

    def add_attribute(self, path: str, tensor: TensorInfo) -> None: ...

    def reserve_names(self, names: object) -> None: ...

    def run(self, name: str, options: dict, signature: str, reverse: bool, tensor_ops: object, tensor_table: TensorTable, chooser: object | None) -> PassResult: ...

    def edit_count(self) -> int: ...

    def effective_edits(self) -> tuple[list[int], list[int]]: ...

    def write_meta(self, indices: Sequence[int]) -> None: ...

    def applied_marks(self) -> list[str]: ...

    def clear_edits(self) -> None: ...

    def bind(self, id: int, fx_node: object) -> None: ...

    def py_node(self, id: int) -> torch.fx.node.Node: ...

    def node_ids(self) -> list[int]: ...

    def node(self, id: int) -> tuple: ...

    def lint(self) -> list: ...

    def python_source(self, root: object, illegal_names: Sequence[str], custom_builtins: Sequence[str], output_prefix: str, output_suffix: str, opaque_source: object, call_target: object, type_source: object, prologue: object) -> tuple[str, list, list[str], dict, int] | None: ...

    def __len__(self) -> int: ...

class Replay:
    """
    A session's structural edits applied to its GraphModule (bindings/replay.h).
    """

    def __init__(self, session: Session, graph_module: torch.fx.GraphModule, tensors: TensorTable, module_type: type[torch.nn.Module], registration_hooks: dict[Any, Any], direct_inputs: bool) -> None: ...

    def apply(self, indices: Sequence[int]) -> None: ...

    def check_erasable(self) -> None: ...

    def erase(self) -> None: ...

    def undo(self) -> None: ...

    @property
    def renamed(self) -> bool: ...

class PassInfo:
    """A built-in pass as registered in passes/registry.cc."""

    @property
    def name(self) -> str: ...

    @property
    def summary(self) -> str: ...

    @property
    def preserves_computation(self) -> bool: ...

def fx_graph_lints_clean(graph: torch.fx.Graph, module_type: type) -> bool:
    """
    True if graph.lint() would pass, proved in one native walk (bindings/fx_lint.h).
    """

def passes() -> list[PassInfo]:
    """The registry, in its order."""

def use_openmp_team(library: str) -> bool:
    """
    Split kernels' work on the team of the OpenMP runtime loaded from `library` (torch's); False, and the own thread pool kept, where it is not loaded. "" goes back to the pool.
    """

def int8_weight_mm(x: int, rows: int, k: int, w: int, scale: int, n: int, y: int, threads: int) -> None:
    """
    y[rows, n] = x[rows, k] (float32) times int8 rows w[n, k] scaled by scale[n] (kernels/int8_weight_mm.h); arguments are data addresses of contiguous arrays.
    """

def int4_weight_mm(x: int, rows: int, k: int, packed: int, params: int, group: int, n: int, y: int, threads: int) -> None:
    """
    y[rows, n] = x[rows, k] (float32, rounded to int8 per row) times 4-bit rows packed[n, k / 2] with a scale and minimum per group of columns, params[n, 2, k / group] float16 (kernels/int4_weight_mm.h); arguments are data addresses of contiguous arrays.
    """

def int4_pack_rows(q: int, n: int, k: int, packed: int) -> None:
    """
    packed[n, k / 2] = q[n, k] (uint8 values in [0, 15]) in int4_weight_mm's layout.
    """

def decode_attention(q: int, heads: int, d: int, k: int, v: int, kv_heads: int, length: int, head_stride: int, scale: float, out: int, threads: int) -> None:
    """
    out[heads, d] = softmax(scale * q . k) v for one float32 query row per head against kv_heads blocks of length rows of keys and values, head_stride floats apart (kernels/decode_attention.h); arguments are data addresses.
    """

def quantize_rows_int8(x: int, bfloat16: bool, rows: int, k: int, q: int, scales: int, threads: int, max_level: int = 127, skipped: Sequence[int] = []) -> None:
    """
    q[rows, k] (int8) and scales[rows] (float32) of x[rows, k] (float32, or bfloat16 if `bfloat16`), one symmetric scale per row mapping its largest magnitude to max_level, the channels `skipped` read as zeros (kernels/per_token_int8.h); arguments are data addresses of contiguous arrays.
    """

def int8_matmul_available() -> bool:
    """
    Whether this CPU runs int8_matmul's AVX2 product (under a oneDNN ISA cap).
    """

def int8_matmul_packed_size(k: int, n: int) -> int:
    """int16 elements of a [k, n] int8 weight packed for int8_matmul."""

def pack_int8_matmul_weight(weight: int, k: int, n: int, packed: int) -> None:
    """
    packed (int16, int8_matmul_packed_size(k, n) elements) of weight[k, n] (int8) (kernels/int8_matmul.h); arguments are data addresses of contiguous arrays.
    """

def int8_matmul(a: int, packed: int, m: int, k: int, n: int, y: int, threads: int) -> None:
    """
    y[m, n] (int32) = a[m, k] (int8) x the packed weight, exactly, with AVX2 16-bit pair products (kernels/int8_matmul.h); arguments are data addresses of contiguous arrays.
    """

def rms_norm(x: int, rows: int, n: int, weight: int, eps: float, y: int) -> None:
    """
    y[rows, n] = weight * (x / sqrt(mean(x^2) + eps)) per row, float32 (kernels/rms_norm.h); arguments are data addresses of contiguous arrays.
    """

def depthwise_conv_vectorized() -> bool:
    """
    Whether depthwise_conv runs its vector paths here (AVX2 with FMA, under a oneDNN ISA cap).
    """

def depthwise_packed_size(channels: int, taps: int) -> int:
    """Floats depthwise_pack writes (kernels/depthwise_conv.h)."""

def depthwise_pack(weight: int, bias: int, channels: int, taps: int, packed: int) -> None:
    """
    The packed filters and bias depthwise_conv reads, from float32 weight [channels, taps] and bias [channels] (0: none); arguments are data addresses of contiguous arrays.
    """

def depthwise_conv(sizes: Sequence[int], lower: float, upper: float, bfloat16: bool, x: int, packed: int, y: int, threads: int) -> None:
    """
    y [batch, out_h, out_w, channels] = clamp(depthwise conv(x [batch, height, width, channels]) + bias, lower, upper), float32 or bfloat16 (kernels/depthwise_conv.h); sizes: batch, channels, height, width, kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_left, out_h, out_w; arguments are data addresses of contiguous arrays.
    """

def pointwise_conv_vectorized(bfloat16: bool) -> bool:
    """
    Whether pointwise_conv runs a vector path here for the dtype (bfloat16: AVX512-BF16; float32: AVX2 with FMA), under a oneDNN ISA cap.
    """

def pointwise_packed_bytes(out_channels: int, in_channels: int, bfloat16: bool) -> int:
    """Bytes pointwise_pack writes (kernels/pointwise_conv.h)."""

def pointwise_pack(weight: int, bias: int, out_channels: int, in_channels: int, bfloat16: bool, packed: int) -> None:
    """
    The packed weight and bias pointwise_conv reads, from weight [out_channels, in_channels] (bfloat16 if `bfloat16`, else float32) and float32 bias [out_channels] (0: none); arguments are data addresses of contiguous arrays.
    """

def pointwise_conv(sizes: Sequence[int], lower: float, upper: float, bfloat16: bool, x: int, packed: int, residual: int, y: int, threads: int) -> None:
    """
    y [pixels, out] = clamp(x [pixels, in] w^T + bias (+ residual [pixels, out]), lower, upper), float32 or bfloat16 (kernels/pointwise_conv.h); sizes: pixels, in_channels, out_channels; arguments are data addresses of contiguous arrays (residual 0: none).
    """

def int8_pointwise_conv_vectorized() -> bool:
    """
    Whether int8_pointwise_conv runs its VNNI path here, under a oneDNN ISA cap.
    """

def int8_pointwise_packed_bytes(out_channels: int, in_channels: int) -> int:
    """Bytes int8_pointwise_pack writes (kernels/int8_pointwise_conv.h)."""

def int8_pointwise_pack(weight: int, w_scales: int, bias: int, out_channels: int, in_channels: int, x_scale: float, zero_point: int, packed: int) -> None:
    """
    The packing int8_pointwise_conv reads, from the int8 weight [out_channels, in_channels], its float32 scales [out_channels], float32 bias [out_channels] (0: none) and the input's scale and zero point; arguments are data addresses of contiguous arrays.
    """

def int8_pointwise_conv(sizes: Sequence[int], lower: float, upper: float, bfloat16: bool, x: int, x_scale: float, zero_point: int, packed: int, residual: int, y: int, threads: int) -> None:
    """
    y [pixels, out] = clamp((quantize_u8(x) - zero_point) x_scale w^T scales + bias (+ residual), lower, upper) from x [pixels, in], float32 or bfloat16 (kernels/int8_pointwise_conv.h); sizes: pixels, in_channels, out_channels; arguments are data addresses of contiguous arrays (residual 0: none).
    """

def quantize_u8(x: int, bfloat16: bool, count: int, inverse_scale: float, zero_point: int, q: int, threads: int) -> None:
    """
    q[count] (uint8) = clamp(round(x * inverse_scale) + zero_point, 0, 255) of x[count] (float32, or bfloat16 if `bfloat16`; kernels/quantize_u8.h); arguments are data addresses of contiguous arrays.
    """

def dequantize_rows_int32(acc: int, rows: int, n: int, row_scales: int, col_scales: int, bias: int, y: int, bfloat16: bool, threads: int, activation: str = 'none', outliers: Sequence[int] = [], x: int = 0, k: int = 0, outlier_weight: int = 0) -> None:
    """
    y[rows, n] = activation(acc[rows, n] (int32) * row_scales[rows] * col_scales[n] + bias[n] + x[rows, k][:, outliers] @ outlier_weight[len(outliers), n]) (float32; bias address 0: none; activation none, relu, gelu, gelu_tanh or silu; x in y's dtype), written as float32, or bfloat16 if `bfloat16` (kernels/per_token_int8.h); arguments are data addresses of contiguous arrays.
    """

def prefill_attention_bf16_available() -> bool:
    """
    Whether this CPU runs prefill_attention_bf16 (AVX512-BF16, under a oneDNN ISA cap).
    """

def prefill_attention_bf16(sizes: Sequence[int], strides: Sequence[int], q: int, k: int, v: int, mask: int, scale: float, causal: bool, out: int, threads: int) -> None:
    """
    out[batch, rows, heads, d] (bfloat16) = softmax(scale * q k^T + mask) v for bfloat16 q [batch, heads, rows, d] and k, v [batch, kv_heads, keys, d] (kernels/prefill_attention.h); sizes: batch, heads, kv_heads, rows, keys, d; strides (elements): batch, head and row of q, k, v and the float32 mask (address 0: none); arguments are data addresses.
    """

def prefill_attention_f32_available() -> bool:
    """
    Whether this CPU runs prefill_attention_f32 (AVX2 with FMA, under a oneDNN ISA cap).
    """

def prefill_attention_f32(sizes: Sequence[int], strides: Sequence[int], q: int, k: int, v: int, mask: int, scale: float, causal: bool, out: int, threads: int) -> None:
    """
    prefill_attention_bf16's computation in float32: out[batch, rows, heads, d] for float32 q, k, v (kernels/prefill_attention.h); the same sizes, strides and addresses.
    """
