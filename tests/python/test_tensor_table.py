"""The engine's table of tensors (`_core.TensorTable`): one handle per tensor object, the
TensorInfo the passes see, and rebinding and forgetting as a kept session needs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fxopt import _core


class MyParameter(nn.Parameter):
    """A Parameter subclass: still a parameter to the engine."""


def _table() -> _core.TensorTable:
    return _core.TensorTable(tensor_type=torch.Tensor, parameter_type=nn.Parameter)


def test_info_says_what_the_tensor_is() -> None:
    table = _table()
    weight = nn.Parameter(torch.zeros(3, 2, dtype=torch.float16))
    frozen = nn.Parameter(torch.zeros(4), requires_grad=False)
    buffer = torch.ones(5, dtype=torch.int8)
    custom = MyParameter(torch.zeros(1))
    infos = [table.add(t) for t in (weight, frozen, buffer, custom)]
    assert [(i.shape, i.dtype, i.device, i.requires_grad, i.is_parameter) for i in infos] == [
        ([3, 2], "float16", "cpu", True, True),
        ([4], "float32", "cpu", False, True),
        ([5], "int8", "cpu", False, False),
        ([1], "float32", "cpu", True, True),
    ]
    assert len({i.handle for i in infos}) == 4 and all(i.handle > 0 for i in infos)
    assert all(table.tensor(i.handle) is t for i, t in zip(infos, (weight, frozen, buffer, custom)))


def test_a_tensor_stored_twice_has_one_handle() -> None:
    table = _table()
    tied = torch.zeros(2)
    assert table.add(tied).handle == table.add(tied).handle
    assert table.add(torch.zeros(2)).handle != table.add(tied).handle
    assert len(table) == 2


def test_rebind_and_retain() -> None:
    table = _table()
    old, kept, dropped = torch.zeros(2), torch.ones(2), torch.full((2,), 2.0)
    handle = table.add(old).handle
    kept_handle, dropped_handle = table.add(kept).handle, table.add(dropped).handle
    new = nn.Parameter(torch.zeros(2))
    table.rebind(handle, new)
    assert table.tensor(handle) is new
    assert table.add(new).handle == handle  # the new tensor answers to the old handle
    assert table.add(old).handle not in (handle, kept_handle, dropped_handle)  # old is forgotten
    table.retain([new, kept])
    assert table.tensor(handle) is new and table.tensor(kept_handle) is kept
    with pytest.raises(KeyError, match="no tensor with handle"):
        table.tensor(dropped_handle)
