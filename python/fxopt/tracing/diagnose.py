"""Why a model cannot be traced, in the user's terms, before or after the tracers tried.

A tracer's own error names the operation it failed on, deep inside the model (an embedding
lookup refusing float indices, a reshape of an empty batch), after hundreds of frames. The
usual cause is the model or its example inputs, which fxopt can see at once: those checks are
here, so the first line of the error names the cause.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def refuse_untraceable(model: nn.Module) -> None:
    """Raises a TypeError / ValueError for a model no tracer can turn into a useful graph."""
    if isinstance(model, torch.jit.ScriptModule):
        raise TypeError(
            f"fxopt cannot trace TorchScript modules ({type(model).__name__}, from torch.jit.script "
            "or torch.jit.trace): pass the original nn.Module"
        )
    on_meta = next((name for name, t in _tensors(model) if t.is_meta), None)
    if on_meta is not None:
        raise ValueError(
            f"{type(model).__name__} is on the meta device ('{on_meta}' has no data), so its "
            "graph would compute nothing: load its weights first (model.to_empty(device='cpu') "
            "and load_state_dict, or from_pretrained without device_map='meta')"
        )


def likely_cause(model: nn.Module, example: dict[str, Any] | None) -> str | None:
    """What about the example inputs most likely made every tracer fail, or None."""
    for name, value in (example or {}).items():
        if not isinstance(value, torch.Tensor):
            continue
        if 0 in value.shape:
            return (
                f"input '{name}' has shape {tuple(value.shape)}, with no elements: trace with at "
                "least one element in every dimension (batch size 1 or more)"
            )
        if name.endswith("_ids") and value.is_floating_point():
            return (
                f"input '{name}' is {value.dtype}, but {type(model).__name__} looks its ids up in "
                "an embedding table: pass integer ids (torch.long)"
            )
    return None


def _tensors(model: nn.Module) -> Any:
    yield from model.named_parameters()
    yield from model.named_buffers()
