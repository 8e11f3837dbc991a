"""The cache of objects packed from a graph's tensors (`fxopt.runtime.packing.PackCache`): found
again while the tensors are the same and unchanged, made again when any is replaced or updated
in place."""

from __future__ import annotations

import gc

import torch

from fxopt.runtime.packing import PackCache


def make(made: list[int]) -> int:
    """A new object each call: the count of those made before."""
    made.append(len(made))
    return made[-1]


def test_a_packing_is_found_again_until_a_tensor_changes_or_is_replaced() -> None:
    cache: PackCache[int] = PackCache()
    made: list[int] = []
    weight, scales, bias = torch.randn(4, 4), torch.ones(4), torch.zeros(4)
    assert cache.get(weight, (scales, bias), "v", make, made) == 0
    assert cache.get(weight, (scales, bias), "v", make, made) == 0  # found
    assert cache.get(weight, (scales, bias), "w", make, made) == 1  # another variant
    weight.add_(1)  # in place: the source's version moves
    assert cache.get(weight, (scales, bias), "v", make, made) == 2
    bias.mul_(2)  # one of the others
    assert cache.get(weight, (scales, bias), "v", make, made) == 3
    assert cache.get(weight, (scales, torch.zeros(4)), "v", make, made) == 4  # another tensor
    assert cache.get(weight, (scales, None), "v", make, made) == 5  # none in its place
    assert cache.get(weight, (scales, None), "v", make, made) == 5
    assert cache.get(weight, (scales,), "v", make, made) == 6  # fewer others
    assert cache.get(weight, (scales,), "v", make, made) == 6
    assert made == [0, 1, 2, 3, 4, 5, 6]


def test_inference_tensors_are_found_again_and_entries_go_with_their_source() -> None:
    cache: PackCache[int] = PackCache()
    made: list[int] = []
    with torch.inference_mode():
        weight = torch.randn(4, 4)  # no version counter
    assert cache.get(weight, (), None, make, made) == 0
    assert cache.get(weight, (), None, make, made) == 0
    del weight
    gc.collect()
    assert not cache._entries
