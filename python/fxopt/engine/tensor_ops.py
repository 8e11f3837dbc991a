"""The torch implementation of the engine's TensorOps interface.

The core refers to tensors by integer handles; this table maps them to real tensors. Every
operation runs on its inputs' own device and dtype and returns a new contiguous tensor, so
results never alias the caller's parameters. The engine calls them only while a pass runs, and
:meth:`fxopt.engine.bridge.Bridge.run` turns autograd off around the whole pass: once per pass,
not once per call, which cost more than the small tensor operations themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.utils._pytree as pytree

from .. import _core


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class TorchTensorOps:
    def __init__(self) -> None:
        # Handles, tensors and their TensorInfo live in the engine (`_core.TensorTable`).
        self.table = _core.TensorTable(tensor_type=torch.Tensor, parameter_type=torch.nn.Parameter)

    def register(self, tensor: torch.Tensor) -> _core.TensorInfo:
        return self.table.add(tensor)

    def tensor(self, info: _core.TensorInfo) -> torch.Tensor:
        return self.table.tensor(info.handle)

    def retain(self, live: Iterable[object]) -> None:
        """Forgets every tensor but those in `live` (what the GraphModule still holds), so a
        session kept between transformations does not keep the weights a pass replaced alive."""
        self.table.retain(live)

    def _result(self, tensor: torch.Tensor) -> _core.TensorInfo:
        return self.register(tensor.detach().contiguous())

    # The TensorOps interface, called from C++.
    def cat(self, parts: list[_core.TensorInfo], dim: int) -> _core.TensorInfo:
        return self._result(torch.cat([self.tensor(p) for p in parts], dim))

    def slice(self, t: _core.TensorInfo, dim: int, start: int, end: int) -> _core.TensorInfo:
        return self._result(self.tensor(t).narrow(dim, start, end - start).clone())

    def add(self, a: _core.TensorInfo, b: _core.TensorInfo) -> _core.TensorInfo:
        return self._result(self.tensor(a) + self.tensor(b))

    def sub(self, a: _core.TensorInfo, b: _core.TensorInfo) -> _core.TensorInfo:
        return self._result(self.tensor(a) - self.tensor(b))

    def mul(self, a: _core.TensorInfo, b: _core.TensorInfo) -> _core.TensorInfo:
        return self._result(self.tensor(a) * self.tensor(b))

    def add_scalar(self, a: _core.TensorInfo, value: float) -> _core.TensorInfo:
        return self._result(self.tensor(a) + value)

    def rsqrt(self, a: _core.TensorInfo) -> _core.TensorInfo:
        return self._result(torch.rsqrt(self.tensor(a)))

    def sum(self, a: _core.TensorInfo, dim: int) -> _core.TensorInfo:
        return self._result(self.tensor(a).sum(dim))

    def reshape(self, a: _core.TensorInfo, shape: list[int]) -> _core.TensorInfo:
        return self._result(self.tensor(a).reshape(shape).clone())

    def transpose(self, a: _core.TensorInfo, dim0: int, dim1: int) -> _core.TensorInfo:
        return self._result(self.tensor(a).transpose(dim0, dim1))

    def cast(self, a: _core.TensorInfo, dtype: str) -> _core.TensorInfo:
        # A copy in the source's layout: a channels-last weight stays channels-last.
        return self.register(self.tensor(a).detach().to(getattr(torch, dtype), copy=True))

    def full(self, shape: list[int], value: float, like: _core.TensorInfo) -> _core.TensorInfo:
        t = self.tensor(like)
        return self._result(torch.full(shape, value, dtype=t.dtype, device=t.device))

    def clone(self, a: _core.TensorInfo) -> _core.TensorInfo:
        return self._result(self.tensor(a).clone())

    def channels_last(self, a: _core.TensorInfo) -> _core.TensorInfo:
        # Registered as is: _result's contiguous() would undo the layout.
        return self.register(self.tensor(a).detach().clone(memory_format=torch.channels_last))

    def quantize_rows_int8(self, a: _core.TensorInfo) -> tuple[_core.TensorInfo, _core.TensorInfo]:
        t = self.tensor(a).detach()
        scales = (t.abs().amax(1) / 127).clamp_min(torch.finfo(torch.float32).tiny).float()
        values = torch.round(t / scales[:, None]).to(torch.int8)
        return self._result(values), self._result(scales)

    def evaluate(
        self, target: Any, is_method: bool, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> _core.TensorInfo | None:
        def value(x: Any) -> Any:
            return self.tensor(x) if isinstance(x, _core.TensorInfo) else x

        args, kwargs = pytree.tree_map(value, (args, kwargs))
        result = getattr(args[0], target)(*args[1:], **kwargs) if is_method else target(*args, **kwargs)
        if not isinstance(result, torch.Tensor):
            return None
        # A copy: a view would share storage with the tensor it was computed from.
        return self.register(result.detach().clone())
