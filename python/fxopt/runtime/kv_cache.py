"""A transformers KV cache that appends a decoding step in place instead of copying the cache.

transformers' default cache (`DynamicCache`, whose layers are `DynamicLayer`s) appends each step's
keys and values with `torch.cat`, so every step copies the whole cache of every layer into a new
tensor: at a 100M Llama's decoding step (10 layers, 128 + 64 tokens) those copies were the largest
single item after the Linears (41 cats, about 1 ms of a 15 ms step, measured with torch.profiler
at one thread). Here a layer keeps its keys and values in buffers with spare room and appends by
writing the new rows, handing out views of the rows written so far; a buffer grows by doubling,
so a whole generate() copies each row a few times at most.

Rows once handed out are never written again: after `crop`, a reorder or anything else that
replaced the keys, or when the buffers are full, the next step starts new buffers. So a view
kept from an earlier step (a beam, a user's copy) sees the same values a `torch.cat` result
would, and the attention reads the same numbers: generate()'s tokens and logits are identical.

`optimize_model` installs it, for a model on the CPU (on a GPU the copies are cheap and the
hook's Python is not), with a forward pre-hook on the model that changes the class of each
`DynamicLayer` of the cache passed in (subclasses, such as sliding-window layers, are left
alone); transformers is never imported here: a model that is not a transformers one has no such
cache.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

_MIN_ROOM = 256
"""Rows a new buffer has at least: a prompt and its first decoding steps without regrowing."""


def _append(
    current: torch.Tensor, new: torch.Tensor, buffers: dict[str, torch.Tensor], which: str, written: int
) -> torch.Tensor:
    """`current` with `new` appended along the sequence (-2), in buffers[which]; `written`: the
    rows the layer handed out of that buffer."""
    used = current.shape[-2] if current.dim() == new.dim() else 0
    total = used + new.shape[-2]
    buffer = buffers.get(which)
    in_place = (
        buffer is not None
        and used == written  # nothing cropped: rows past `used` were never handed out
        and total <= buffer.shape[-2]
        and (used == 0 or current.data_ptr() == buffer.data_ptr())
        and buffer.shape[:-2] == new.shape[:-2]
        and buffer.shape[-1] == new.shape[-1]
        and buffer.dtype == new.dtype
        and buffer.device == new.device
    )
    if not in_place:
        room = max(2 * total, _MIN_ROOM)
        buffer = buffers[which] = new.new_empty(new.shape[:-2] + (room, new.shape[-1]))
        if used:
            buffer[..., :used, :].copy_(current)
    assert buffer is not None
    buffer[..., used:total, :].copy_(new)
    return buffer[..., :total, :]


_GROWING: dict[type, type] = {}
"""transformers' DynamicLayer -> its subclass whose `update` appends in place."""


def _growing_layer(dynamic_layer: type) -> type:
    if dynamic_layer in _GROWING:
        return _GROWING[dynamic_layer]

    class GrowingKVLayer(dynamic_layer):  # type: ignore[valid-type, misc]
        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            buffers = self.__dict__.setdefault("_fxopt_buffers", {})
            written = self.__dict__.get("_fxopt_written", -1)
            keys = _append(getattr(self, "keys"), key_states, buffers, "keys", written)
            values = _append(getattr(self, "values"), value_states, buffers, "values", written)
            self.keys, self.values = keys, values
            self._fxopt_written = keys.shape[-2]
            return keys, values

    GrowingKVLayer.__qualname__ = GrowingKVLayer.__name__ = "GrowingKVLayer"
    _GROWING[dynamic_layer] = GrowingKVLayer
    return GrowingKVLayer


def grow_in_place(_module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Forward pre-hook: the cache passed to the model appends in place from now on."""
    cache_utils = sys.modules.get("transformers.cache_utils")
    if cache_utils is None:
        return
    dynamic_layer = cache_utils.DynamicLayer
    for name in ("past_key_values", "cache"):
        for layer in getattr(kwargs.get(name), "layers", ()):
            if type(layer) is dynamic_layer:
                layer.__class__ = _growing_layer(dynamic_layer)
