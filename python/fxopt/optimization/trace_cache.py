"""The traces `fxopt.optimize` reuses: one per model, input signature and mode, per process.

Tracing is most of what `optimize` costs (seconds for a transformers model), and trying
several presets on one model traced it again each time. A trace is reused only while the
model is what was traced: the same module tree, the same parameter and buffer tensors, none
written since (a tensor's version counter: `load_state_dict`, in-place updates under
`no_grad`) and every module in the same train / eval mode. Writes through `tensor.data` do not
count versions and are not seen. The cache holds the model weakly; the cached GraphModule is
only ever read: presets apply with ``inplace=False`` (a deep copy), so no caller shares it or
can change it.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.fx import GraphModule

from ..tracing.dummy_inputs import Inputs, split_inputs
from ..tracing.trace import Mode, trace

_Key = tuple[Any, ...]
_cache: weakref.WeakKeyDictionary[nn.Module, dict[_Key, tuple[_Key, GraphModule]]] = (
    weakref.WeakKeyDictionary()
)


def cached_trace(
    model: nn.Module, input_names: Sequence[str] | None, example_inputs: Inputs | None, mode: Mode
) -> GraphModule:
    """`fxopt.trace(model, ...)`, or the trace an earlier call made of the same model state on
    inputs of the same signature. The result must not be modified."""
    key = _signature(input_names, example_inputs, mode)
    if key is None:  # inputs the key cannot describe: always trace
        return trace(model, input_names=input_names, example_inputs=example_inputs, mode=mode)
    state = _model_state(model)
    traces = _cache.setdefault(model, {})
    hit = traces.get(key)
    if hit is not None and hit[0] == state:
        return hit[1]
    graph_module = trace(model, input_names=input_names, example_inputs=example_inputs, mode=mode)
    traces[key] = (state, graph_module)
    return graph_module


def clear() -> None:
    """Forgets every cached trace."""
    _cache.clear()


def _signature(
    input_names: Sequence[str] | None, example_inputs: Inputs | None, mode: Mode
) -> _Key | None:
    """What a trace depends on besides the model: mode, input names, and per example input
    its shape, dtype and device; integer and bool tensors (ids, masks) by value too, since a
    model may branch on them (a mask of all ones). None for values it cannot describe."""
    names = None if input_names is None else tuple(input_names)
    if example_inputs is None:
        return (mode, names, None)
    args, kwargs = split_inputs(example_inputs)
    described = []
    for name, value in [*enumerate(args), *sorted(kwargs.items())]:
        item = _describe(value)
        if item is None:
            return None
        described.append((name, item))
    return (mode, names, tuple(described))


def _describe(value: Any) -> _Key | None:
    if isinstance(value, torch.Tensor):
        content = None if value.is_floating_point() else value.cpu().numpy().tobytes()
        return (tuple(value.shape), value.dtype, value.device, content)
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value), value)
    return None


def _model_state(model: nn.Module) -> _Key:
    """The module tree, its tensors (identity and version) and every module's mode."""
    modules = tuple((name, id(m), m.training) for name, m in model.named_modules())
    tensors = tuple(
        (name, id(t), t._version)
        for name, t in [*model.named_parameters(), *model.named_buffers()]
    )
    return (modules, tensors)
