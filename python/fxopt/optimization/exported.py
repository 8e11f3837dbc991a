"""ExportedProgram in, ExportedProgram out: `fxopt.optimize(exported_program, preset=...)`, and
the `.pt2` file `fxopt optimize --save model.pt2` writes.

An ExportedProgram's own graph takes parameters and buffers as inputs (it is "lifted"), which
hides the weights passes fold and merge. So the program is unlifted (`.module()`, weights as
`get_attr`), optimized there, and exported again, non-strict, on the program's own example
inputs, with the dimensions the original kept dynamic marked `Dim.AUTO`. The result has the
same call signature and outputs; its state dict holds the optimized parameters and buffers,
so `torch.export.save` writes a `.pt2` that `torch.export.load` runs with torch alone.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.fx import GraphModule
from torch.fx.graph import _PyTreeCodeGen
from torch.fx.experimental.symbolic_shapes import is_concrete_int

from ..tracing import signature
from ..tracing.dummy_inputs import default_dynamic_dims
from .compose import compose
from .hardware import model_device
from .presets import build_all, preset_passes

UNSAVABLE = (
    "FuseLinearActivationOneDnn",
    "FuseConvActivationOneDnn",
    "QuantizeLinearsInt8",
    "QuantizeConvsInt8",
    "ChooseAttentionKernel",
    "FuseDepthwiseConv",
    "FusePointwiseConv",
)
"""Passes whose output torch.export.save cannot write: oneDNN's fused linear takes an empty
list of scalars, which torch's serializer refuses ("Empty list with type number nyi"); the
packed convolutions and int8 Linears are Python functions (fxopt.runtime) holding weights
packed by torch, which a `.pt2` has no place for; fxopt's attention and convolution kernels are calls into the
engine no `.pt2` loader has (and the pass leaves ATen graphs alone anyway)."""

DynamicDims = Callable[[str, Any], Sequence[int]]
"""Per input leaf (its input's name, its value), the dimensions to keep dynamic (`Dim.AUTO`:
static where the graph needs them fixed)."""


def savable(specs: list[str]) -> tuple[list[str], list[str]]:
    """`specs` split into those a `.pt2` can hold and the `UNSAVABLE` ones."""
    dropped = [spec for spec in specs if spec.startswith(UNSAVABLE)]
    return [spec for spec in specs if spec not in dropped], dropped


def optimize_exported_program(program: ExportedProgram, preset: str) -> ExportedProgram:
    """`program` optimized with `preset` (less `UNSAVABLE` passes), as a new ExportedProgram."""
    if program.example_inputs is None:
        raise ValueError(
            "fxopt.optimize needs the ExportedProgram's example inputs to export the optimized "
            "graph again; this one has none (a program loaded from a file made by an older "
            "torch). Export the model again with torch.export.export"
        )
    args, kwargs = program.example_inputs
    specs, _ = savable(preset_passes(preset, model_device(program)))
    optimized = compose(*build_all(specs), inplace=True)(program.module())
    traced = _dynamic_dims_of(program)
    return export_module(optimized, args, kwargs, lambda name, value: next(traced, []))


def export_module(
    module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], dims: DynamicDims
) -> ExportedProgram:
    """torch.export (non-strict) of an optimized module on example inputs.

    `dims` is asked for each input leaf in the order of the module's parameters and, inside one
    input, of its pytree leaves.
    """
    bound = inspect.signature(module.forward).bind(*args, **kwargs).arguments
    any_dynamic = False

    def spec(name: str, leaf: Any) -> Any:
        nonlocal any_dynamic
        chosen = dims(name, leaf)
        if not isinstance(leaf, torch.Tensor) or not chosen:
            return None
        any_dynamic = True
        return {d: torch.export.Dim.AUTO for d in chosen}

    shapes = {
        name: pytree.tree_map(lambda leaf, name=name: spec(name, leaf), value)
        for name, value in bound.items()
    }
    return torch.export.export(
        module, args, kwargs, strict=False, dynamic_shapes=shapes if any_dynamic else None
    )


def save_pt2(graph_module: GraphModule, args: tuple[Any, ...], kwargs: dict[str, Any], path: Path) -> None:
    """Export `graph_module` on the given inputs and write it with `torch.export.save`.

    Batch and sequence dimensions stay dynamic where the graph allows it, as `fxopt.trace` keeps
    them by default (an image's height and width are the example's). A `.pt2` names the Python
    type of every output container, and loading one that names a transformers class needs
    transformers (and, for a key/value cache, its pytree registration), so outputs are written
    with torch's own containers: a dict subclass (`ModelOutput`) as a dict with the same keys,
    any other class (a `DynamicCache`) as the tuple of its flattened values. The graph's call
    signature goes along as an extra file, for `fxopt.load` (tracing/signature.py).
    """

    def dims(name: str, leaf: Any) -> Sequence[int]:
        return default_dynamic_dims(name, leaf) if isinstance(leaf, torch.Tensor) else ()

    program = export_module(_plain_outputs(graph_module), args, kwargs, dims)
    # The call check (tracing/signature.py) binds inputs by name: only a program called by keyword
    # takes what it returns.
    extra_files = signature.pt2_files(graph_module) if not args else {}
    torch.export.save(program, path, extra_files=extra_files)


def _plain_outputs(graph_module: GraphModule) -> GraphModule:
    """A copy of `graph_module` returning its outputs in tuples, lists and dicts only (same
    values, same keys); `graph_module` itself is not touched."""
    codegen = graph_module.graph._codegen
    if not isinstance(codegen, _PyTreeCodeGen) or codegen.pytree_info.out_spec is None:
        return graph_module
    plain = _plain_spec(codegen.pytree_info.out_spec)
    if plain == codegen.pytree_info.out_spec:
        return graph_module
    graph = copy.deepcopy(graph_module.graph)
    graph._codegen = _PyTreeCodeGen(codegen.pytree_info._replace(out_spec=plain))
    return GraphModule(graph_module, graph)


def _plain_spec(spec: pytree.TreeSpec) -> pytree.TreeSpec:
    if spec.is_leaf():
        return spec
    children = [_plain_spec(child) for child in spec.children_specs]
    if spec.type in (tuple, list, dict):
        return pytree.TreeSpec(spec.type, spec.context, children)
    if spec.type is not None and issubclass(spec.type, dict):
        return pytree.TreeSpec(dict, spec.context, children)
    return pytree.TreeSpec(tuple, None, children)


def _dynamic_dims_of(program: ExportedProgram) -> Iterator[list[int]]:
    """Per user input of `program`, in order, the dimensions it kept dynamic."""
    user_inputs = set(program.graph_signature.user_inputs)
    traced = [
        node.meta.get("val")
        for node in program.graph.find_nodes(op="placeholder")
        if node.name in user_inputs
    ]
    return iter(
        [d for d, size in enumerate(value.shape) if not is_concrete_int(size)]
        if isinstance(value, torch.Tensor)
        else []
        for value in traced
    )
