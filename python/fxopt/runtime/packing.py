"""Objects derived once from a graph's tensors (a weight packed into a kernel's own layout) and
kept while those tensors live unchanged.

The graph holds plain tensors only, so it deep-copies, saves and reverses like any other; the
packed form, which torch cannot copy or save, is made on the first call and found again on the
next ones: by the identity of the tensor it was made from (tensors compare elementwise, so they
cannot be dictionary keys), the identity of the other tensors it depends on, their versions (an
in-place update packs again) and what else shaped it (an engine, an input size).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

T = TypeVar("T")


@dataclass
class _Entry(Generic[T]):
    value: T
    others: tuple[weakref.ref[torch.Tensor] | None, ...]
    versions: tuple[int, ...]


def _version(t: torch.Tensor | None) -> int:
    # A tensor made under torch.inference_mode (a weight a preset lowered during an encode() or a
    # pipeline call) has no version counter: its in-place updates go unseen.
    return -1 if t is None else -2 if t.is_inference() else t._version


def _unchanged(entry: _Entry[T], source: torch.Tensor, others: tuple[torch.Tensor | None, ...]) -> bool:
    """Whether `entry` was made from these tensors as they are now. A loop, not generators: it runs
    on every call of a packed op (MobileNetV2: 53 a forward)."""
    versions = entry.versions
    if len(entry.others) != len(others) or versions[0] != _version(source):
        return False
    for index, t in enumerate(others):
        ref = entry.others[index]
        if (None if ref is None else ref()) is not t or versions[index + 1] != _version(t):
            return False
    return True


class PackCache(Generic[T]):
    """Per source tensor, the objects made from it, one per `variant`."""

    MAX_VARIANTS = 8
    """Packings kept per source tensor (one per input size seen, say); the oldest goes first."""

    def __init__(self) -> None:
        self._entries: dict[int, dict[Hashable, _Entry[T]]] = {}

    def get(
        self,
        source: torch.Tensor,
        others: tuple[torch.Tensor | None, ...],
        variant: Hashable,
        make: Callable[..., T],
        *make_args: object,
    ) -> T:
        """The object `make(*make_args)` returned for these tensors and `variant`, made now if
        none is kept. (Arguments rather than a closure: this runs on every call of a packed op.)"""
        variants = self._entries.get(id(source))
        found = None if variants is None else variants.get(variant)
        if found is not None and _unchanged(found, source, others):
            return found.value
        if variants is None:
            variants = self._entries[id(source)] = {}
            # The entry goes when its source is freed, before the id can be reused.
            weakref.finalize(source, self._entries.pop, id(source), None)
        versions = (_version(source), *map(_version, others))
        value = make(*make_args)
        variants.pop(variant, None)
        if len(variants) >= self.MAX_VARIANTS:
            variants.pop(next(iter(variants)))
        variants[variant] = _Entry(value, tuple(None if t is None else weakref.ref(t) for t in others), versions)
        return value
