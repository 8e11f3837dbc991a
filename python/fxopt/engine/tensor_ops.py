"""The torch implementation of the engine's TensorOps interface.

The engine hands these methods tensors (it looks its handles up in the session's
``_core.TensorTable``) and registers what they return, so this is tensor arithmetic only. Every
operation runs on its inputs' own device and dtype and returns a new contiguous tensor, so
results never alias the caller's parameters; but `transposed_view`, whose result is meant to
(a weight read the other way round while the original stays in the model). The engine calls
them only while a pass runs, and :meth:`fxopt.engine.bridge.Bridge.run` turns autograd off
around the whole pass: once per pass, not once per call, which cost more than the small tensor
operations themselves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from .. import _core


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


_QUANTIZE_BLOCK = 1 << 16
"""Elements quantize_rows_int8 divides and rounds at a time (256 KB of float32: an L2's share)."""


_views: dict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor]] | None = None
"""While views_reused is open: per (id of a tensor, dims), the tensor and its transposed view."""


@contextlib.contextmanager
def views_reused() -> Iterator[None]:
    """Within: a transposed view of a tensor viewed so before is the same view object.

    optimize_model prepares a block's graphs for several input sizes in a row, and each
    preparation's passes view the same weights transposed (GPT-2's Conv1D as Linears). The
    runtime keeps a weight packed for oneDNN by the identity of the tensor the graph reads
    (runtime/packing.py): one view, one packed copy for every graph of the block.
    """
    global _views
    if _views is not None:
        yield
        return
    _views = {}
    try:
        yield
    finally:
        _views = None


def _own(tensor: torch.Tensor) -> torch.Tensor:
    """A result of its own, contiguous, outside autograd."""
    return tensor.detach().contiguous()


class TorchTensorOps:
    """The TensorOps interface, called from C++ (bindings/py_tensor_ops.h)."""

    def cat(self, parts: list[torch.Tensor], dim: int) -> torch.Tensor:
        return _own(torch.cat(parts, dim))

    def slice(self, t: torch.Tensor, dim: int, start: int, end: int) -> torch.Tensor:
        return _own(t.narrow(dim, start, end - start).clone())

    def add(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return _own(a + b)

    def sub(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return _own(a - b)

    def mul(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return _own(a * b)

    def add_scalar(self, a: torch.Tensor, value: float) -> torch.Tensor:
        return _own(a + value)

    def rsqrt(self, a: torch.Tensor) -> torch.Tensor:
        return _own(torch.rsqrt(a))

    def sum(self, a: torch.Tensor, dim: int) -> torch.Tensor:
        return _own(a.sum(dim))

    def reshape(self, a: torch.Tensor, shape: list[int]) -> torch.Tensor:
        return _own(a.reshape(shape).clone())

    def transpose(self, a: torch.Tensor, dim0: int, dim1: int) -> torch.Tensor:
        return _own(a.transpose(dim0, dim1))

    def transposed_view(self, a: torch.Tensor, dim0: int, dim1: int) -> torch.Tensor:
        if _views is None:
            return a.detach().transpose(dim0, dim1)
        key = (id(a), dim0, dim1)
        made = _views.get(key)
        if made is None or made[0] is not a:
            made = _views[key] = (a, a.detach().transpose(dim0, dim1))
        return made[1]

    def cast(self, a: torch.Tensor, dtype: str) -> torch.Tensor:
        # A copy in the source's layout: a channels-last weight stays channels-last.
        return a.detach().to(getattr(torch, dtype), copy=True)

    def full(self, shape: list[int], value: float, like: torch.Tensor) -> torch.Tensor:
        return _own(torch.full(shape, value, dtype=like.dtype, device=like.device))

    def clone(self, a: torch.Tensor) -> torch.Tensor:
        return _own(a.clone())

    def from_values(self, values: list[float], like: torch.Tensor) -> torch.Tensor:
        return torch.tensor(values, dtype=like.dtype, device=like.device)

    def channels_last(self, a: torch.Tensor) -> torch.Tensor:
        # Not _own: its contiguous() would undo the layout.
        return a.detach().clone(memory_format=torch.channels_last)

    def quantize_rows_int8(self, a: torch.Tensor, max_level: int = 127) -> tuple[torch.Tensor, torch.Tensor]:
        t = a.detach()
        if t.is_cpu and t.dtype == torch.float32 and t.dim() == 2:
            # fxopt's kernel (kernels/per_token_int8.h): one read of each row for its scale, one
            # to divide and round, the same bits as the ATen chain below; 5x faster on a Llama.
            t, (rows, k) = t.contiguous(), t.shape
            values, scales = torch.empty(rows, k, dtype=torch.int8), torch.empty(rows, dtype=torch.float32)
            _core.quantize_rows_int8(
                t.data_ptr(), False, rows, k, values.data_ptr(), scales.data_ptr(), torch.get_num_threads(), max_level
            )
            return values, scales
        low, high = torch.aminmax(t, dim=1)  # one pass, no |t| copy
        scales = (torch.maximum(high, -low) / max_level).clamp_min(torch.finfo(torch.float32).tiny).float()
        values = torch.empty(t.shape, dtype=torch.int8, device=t.device)
        # A few rows at a time: the float quotients stay in cache instead of a weight-sized
        # temporary (GPT-2's 768 x 50257 head: 0.26 -> 0.12 s, the same values).
        rows = max(1, _QUANTIZE_BLOCK // max(t.shape[1], 1))
        for start in range(0, t.shape[0], rows):
            values[start : start + rows] = (t[start : start + rows] / scales[start : start + rows, None]).round_()
        return _own(values), _own(scales)

    def quantize_groups_int4(
        self, a: torch.Tensor, group_size: int, kernel: str = "aten"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """4-bit values packed for `kernel`, "aten" (aten._weight_int4pack_mm_for_cpu: its
        [K / group, N, 2] float32 scales and zeros) or "fxopt" (kernels/int4_weight_mm.h:
        [N, K / 2] bytes and [N, 2, K / group] float16 scales and minimums, rounded before the
        values are: each value is the nearest the stored parameters give); tensor_ops.h:
        QuantizedGroups."""
        rows, cols = a.shape
        t, count = a.detach(), cols // group_size
        q = torch.empty(rows, cols, dtype=torch.uint8, device=a.device)
        scales = torch.empty(rows, count, dtype=torch.float32, device=a.device)
        low = torch.empty_like(scales)
        # A few rows at a time, as quantize_rows_int8's fallback: on the whole weight each step
        # wrote a float32 temporary of its size (a 95M Llama's int4 preparation: 1.4 s of 3.9).
        step = max(1, _QUANTIZE_BLOCK // max(cols, 1))
        for start in range(0, rows, step):
            groups = t[start : start + step].float().reshape(-1, count, group_size)
            part_low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
            part_scales = ((high - part_low) / 15).clamp_min(1e-6)
            if kernel == "fxopt":
                part_scales, part_low = part_scales.half().float(), part_low.half().float()
            q[start : start + step] = ((groups - part_low) / part_scales).round_().clamp_(0, 15).reshape(-1, cols)
            scales[start : start + step], low[start : start + step] = part_scales[..., 0], part_low[..., 0]
        if kernel == "fxopt":
            packed = torch.empty(rows, cols // 2, dtype=torch.uint8)
            _core.int4_pack_rows(q.data_ptr(), rows, cols, packed.data_ptr())
            return packed, _own(torch.stack([scales, low], 1).half())
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1)
        scales_and_zeros = torch.stack([scales.t(), (low + 8 * scales).t()], -1)
        return _own(packed), _own(scales_and_zeros)

    def evaluate(
        self, target: Any, is_method: bool, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> torch.Tensor | None:
        """One graph call, its operands' tensors in the arguments; None unless it returns a
        tensor."""
        result = getattr(args[0], target)(*args[1:], **kwargs) if is_method else target(*args, **kwargs)
        if not isinstance(result, torch.Tensor):
            return None
        # A copy: a view would share storage with the tensor it was computed from.
        return result.detach().clone()
