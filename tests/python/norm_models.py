"""Models, tracing and checks shared by the batch-norm folding, activation and precision tests.

Both graph dialects: `symbolic` graphs hold `call_module` nodes (nn.Conv2d, nn.BatchNorm2d, ...),
`export` graphs hold ATen calls with `get_attr` weights.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch
import torch.fx
import transformers
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp
from torch.utils._pytree import tree_leaves

import fxopt
from conftest import build_model
from fxopt.optimization import ReversibleTransformation
from linear_models import assert_independent_storage

DIALECTS = ("symbolic", "export")


def trace(model: nn.Module, args: tuple[Any, ...], dialect: str, shapes: bool = False) -> torch.fx.GraphModule:
    """`model` traced in `dialect`; with `shapes`, a symbolic graph also records tensor shapes."""
    if dialect == "export":
        return torch.export.export(model, args, strict=False).module()
    gm = torch.fx.symbolic_trace(model)
    if shapes:
        ShapeProp(gm).propagate(*args)
    return gm


def tiny_resnet() -> transformers.ResNetModel:
    config = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])
    return build_model(transformers.ResNetModel, config)


def tiny_mobilenet_v2() -> transformers.MobileNetV2Model:
    # tf_padding=False: TF-style padding reads shapes as ints, which symbolic tracing cannot.
    config = transformers.MobileNetV2Config(image_size=32, depth_multiplier=0.25, min_depth=4, tf_padding=False)
    return build_model(transformers.MobileNetV2Model, config)


def trace_vision(model: nn.Module, pixels: torch.Tensor, dialect: str) -> tuple[torch.fx.GraphModule, tuple[Any, ...]]:
    """A transformers vision model's graph and its arguments. ResNet's embedder branches on the
    channel count, so its symbolic graph is the encoder's (every Conv / BatchNorm pair but the
    stem's), run on the embedder's output."""
    if dialect == "export":
        return torch.export.export(model, (pixels,), strict=False).module(), (pixels,)
    if isinstance(model, transformers.ResNetModel):
        concrete = {"output_hidden_states": False, "return_dict": False}
        return torch.fx.symbolic_trace(model.encoder, concrete_args=concrete), (model.embedder(pixels), False, False)
    return fxopt.trace(model, input_names=["pixel_values"], mode="symbolic"), (pixels,)


def outputs(gm: Callable[..., Any], *args: Any) -> list[torch.Tensor]:
    """Every tensor a graph returns, flattened (tuples, dicts and ModelOutputs alike)."""
    return [t for t in tree_leaves(gm(*args)) if isinstance(t, torch.Tensor)]


def assert_outputs_close(actual: list[torch.Tensor], expected: list[torch.Tensor], atol: float, rtol: float = 0.0) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype
        torch.testing.assert_close(a, e, atol=atol, rtol=rtol)


def assert_outputs_equal(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and torch.equal(a, e)


def tensor_states(module: nn.Module) -> dict[str, tuple[torch.Size, torch.dtype, bool, int, torch.Tensor]]:
    """Every parameter and buffer by name: shape, dtype, whether a Parameter, data_ptr, value."""
    tensors = [*module.named_parameters(), *module.named_buffers()]
    return {
        name: (t.shape, t.dtype, isinstance(t, nn.Parameter), t.data_ptr(), t.detach().clone())
        for name, t in tensors
    }


def assert_same_tensors(module: nn.Module, before: dict[str, Any], same_storage: bool) -> None:
    """Names, shapes, dtypes, kinds and values (bit for bit) as `before`; with `same_storage` the
    very same tensors, else tensors that share no storage with those."""
    after = tensor_states(module)
    assert sorted(after) == sorted(before)
    for name, (shape, dtype, is_param, ptr, value) in before.items():
        a_shape, a_dtype, a_param, a_ptr, a_value = after[name]
        assert (a_shape, a_dtype, a_param) == (shape, dtype, is_param), name
        assert torch.equal(a_value, value), name
        assert (a_ptr == ptr) == same_storage or value.numel() == 0, name


def check_reverse(t: ReversibleTransformation, gm: torch.fx.GraphModule, args: tuple[Any, ...], expected: list[torch.Tensor],
                  code: str, states: dict[str, Any]) -> None:  # fmt: skip
    """`t` already ran on `gm`. Reverse restores the original exactly: on a deep copy (tensors of
    their own) and then in place (the very tensors `gm` had), each in a new bridge session."""
    copied = t(copy.deepcopy(gm), reverse=True)
    assert_outputs_equal(outputs(copied, *args), expected)
    assert_same_tensors(copied, states, same_storage=False)
    assert_independent_storage(copied)
    assert not t.get_transformed_nodes(copied)

    t(gm, reverse=True)
    assert gm.code == code or _only_reads_moved(gm.code, code)
    assert_outputs_equal(outputs(gm, *args), expected)
    assert_same_tensors(gm, states, same_storage=True)


def _only_reads_moved(actual: str, expected: str) -> bool:
    """Exported code may differ after reverse only in where `get_attr` reads sit."""
    return sorted(actual.splitlines()) == sorted(expected.splitlines())


def count(gm: torch.fx.GraphModule, *kinds: type[nn.Module] | Any) -> int:
    """Nodes calling modules of `kinds` or calling one of `kinds` (functions, ATen ops)."""
    modules = dict(gm.named_modules())
    return sum(
        (n.op == "call_module" and isinstance(modules.get(n.target), tuple(k for k in kinds if isinstance(k, type))))
        or (n.op == "call_function" and n.target in kinds)
        for n in gm.graph.nodes
    )
