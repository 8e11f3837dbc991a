"""Python values in a saved graph, spelled with plain data only.

A node's target, args, kwargs and fxopt's metadata hold values pickle would need code for
(dtypes, devices, slices, callables, fx Nodes). Each is written as a tagged list of plain data
(`["dtype", "float32"]`, `["fn", "torch._C._nn.linear"]`), tensors as an index into the file's
tensor list, so the whole file loads with `torch.load(weights_only=True)`: loading runs no code
from the file, only imports the modules callables are named from.
"""

from __future__ import annotations

import builtins
import importlib
from collections.abc import Callable
from typing import Any

import torch
from torch.fx import Node
from torch.fx.node import _get_qualified_name

Plain = Any
"""None, bool, int, float, str, or a list / dict of Plain (the JSON-like data the file holds)."""


class StorageError(ValueError):
    """A graph holds a value fxopt cannot write, or a file names one it cannot find."""


_DTYPES = {str(dtype).removeprefix("torch."): dtype for dtype in vars(torch).values() if isinstance(dtype, torch.dtype)}
_FORMATS = {str(f).removeprefix("torch."): f for f in vars(torch).values() if isinstance(f, torch.memory_format)}
_LAYOUTS = {str(f).removeprefix("torch."): f for f in vars(torch).values() if isinstance(f, torch.layout)}


class Encoder:
    """Writes values as Plain; collects the tensors they hold (each distinct tensor once)."""

    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []
        self._tensor_index: dict[int, int] = {}

    def tensor(self, value: torch.Tensor) -> int:
        index = self._tensor_index.get(id(value))
        if index is None:
            index = self._tensor_index[id(value)] = len(self.tensors)
            self.tensors.append(value)
        return index

    def encode(self, value: Any) -> Plain:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, Node):
            return ["node", value.name]
        if isinstance(value, torch.Tensor):
            return ["tensor", self.tensor(value)]
        if isinstance(value, torch.Size):
            return ["size", [self.encode(v) for v in value]]
        if isinstance(value, tuple):
            return ["tuple", [self.encode(v) for v in value]]
        if isinstance(value, list):
            return ["list", [self.encode(v) for v in value]]
        if type(value) is dict:
            return ["dict", [[self.encode(k), self.encode(v)] for k, v in value.items()]]
        if isinstance(value, slice):
            return ["slice", [self.encode(value.start), self.encode(value.stop), self.encode(value.step)]]
        if value is Ellipsis:
            return ["ellipsis", None]
        if isinstance(value, torch.dtype):
            return ["dtype", str(value).removeprefix("torch.")]
        if isinstance(value, torch.device):
            return ["device", str(value)]
        if isinstance(value, torch.memory_format):
            return ["memory_format", str(value).removeprefix("torch.")]
        if isinstance(value, torch.layout):
            return ["layout", str(value).removeprefix("torch.")]
        if callable(value):
            return ["fn", callable_name(value)]
        raise StorageError(f"cannot save a value of type {type(value).__qualname__}: {value!r:.80}")


def decode(value: Plain, nodes: dict[str, Node], tensors: list[torch.Tensor]) -> Any:
    """The value `Encoder.encode` wrote, with node names looked up in `nodes`."""
    if not isinstance(value, list):
        return value
    tag, body = value
    if tag == "node":
        return nodes[body]
    if tag == "tensor":
        return tensors[body]
    if tag in _CONTAINERS:
        return _CONTAINERS[tag]([decode(v, nodes, tensors) for v in body])
    if tag == "dict":
        return {decode(k, nodes, tensors): decode(v, nodes, tensors) for k, v in body}
    if tag == "slice":
        return slice(*(decode(v, nodes, tensors) for v in body))
    if tag == "ellipsis":
        return Ellipsis
    if tag in _NAMED:
        return _NAMED[tag](body)
    if tag == "fn":
        return resolve(body)
    raise StorageError(f"unknown value tag {tag!r} in the file")


_CONTAINERS: dict[str, Callable[[list[Any]], Any]] = {"tuple": tuple, "list": list, "size": torch.Size}
_NAMED: dict[str, Callable[[str], Any]] = {
    "dtype": _DTYPES.__getitem__,
    "device": torch.device,
    "memory_format": _FORMATS.__getitem__,
    "layout": _LAYOUTS.__getitem__,
}


def callable_name(value: Any) -> str:
    """A name `resolve` turns back into `value`: `aten::add.Tensor` for an ATen overload, the
    qualified name (`_operator.getitem`, `torch._C._nn.linear`) otherwise."""
    if isinstance(value, torch._ops.OpOverload):
        return f"{value.namespace}::{value._opname}.{value._overloadname}"
    if isinstance(value, torch._ops.OpOverloadPacket):
        return f"{value._qualified_op_name}"
    try:
        name = _get_qualified_name(value)
    except Exception as exc:  # fx raises bare RuntimeErrors for lambdas and locals
        raise StorageError(f"cannot save a reference to {value!r:.80}: {exc}") from exc
    if resolve(name) is not value:
        raise StorageError(f"cannot save a reference to {value!r:.80}: {name} names another object")
    return name


def resolve(name: str) -> Any:
    """The object a `callable_name` names: an ATen op, or the longest importable module prefix
    followed by attributes."""
    if "::" in name:
        namespace, _, op = name.partition("::")
        packet_name, _, overload = op.partition(".")
        packet = getattr(getattr(torch.ops, namespace), packet_name)
        return getattr(packet, overload) if overload else packet
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        break
    else:
        value, split = builtins, 0
    try:
        for part in parts[split:]:
            value = getattr(value, part)
    except AttributeError as exc:
        raise StorageError(f"cannot find {name} (the file refers to it)") from exc
    return value
