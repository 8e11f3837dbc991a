"""ExportedProgram in, ExportedProgram out: `fxopt.optimize(exported_program, preset=...)`.

An ExportedProgram's own graph takes parameters and buffers as inputs (it is "lifted"), which
hides the weights passes fold and merge. So the program is unlifted (`.module()`, weights as
`get_attr`), optimized there, and exported again, non-strict, on the program's own example
inputs, with the dimensions the original kept dynamic marked `Dim.AUTO`. The result has the
same call signature and outputs; its state dict holds the optimized parameters and buffers,
so `torch.export.save` writes a `.pt2` that `torch.export.load` runs with torch alone.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.fx.experimental.symbolic_shapes import is_concrete_int

from .optimization import compose
from .presets import build_all, preset_passes

# Passes whose output torch.export.save cannot write: oneDNN's fused linear takes an empty
# list of scalars, which torch's serializer refuses ("Empty list with type number nyi").
_UNSAVABLE = ("FuseLinearActivationOneDnn",)


def optimize_exported_program(program: ExportedProgram, preset: str) -> ExportedProgram:
    """`program` optimized with `preset` (less `_UNSAVABLE` passes), as a new ExportedProgram."""
    if program.example_inputs is None:
        raise ValueError(
            "fxopt.optimize needs the ExportedProgram's example inputs to export the optimized "
            "graph again; this one has none (a program loaded from a file made by an older "
            "torch). Export the model again with torch.export.export"
        )
    args, kwargs = program.example_inputs
    specs = [spec for spec in preset_passes(preset) if not spec.startswith(_UNSAVABLE)]
    optimized = compose(*build_all(specs), inplace=True)(program.module())
    bound = inspect.signature(optimized.forward).bind(*args, **kwargs).arguments
    shapes = _dynamic_shapes(program, bound)
    return torch.export.export(optimized, args, kwargs, strict=False, dynamic_shapes=shapes)


def _dynamic_shapes(program: ExportedProgram, bound: dict[str, Any]) -> dict[str, Any] | None:
    """Per input, `Dim.AUTO` for each dimension the original program kept dynamic."""
    user_inputs = set(program.graph_signature.user_inputs)
    traced = [
        node.meta.get("val")
        for node in program.graph.find_nodes(op="placeholder")
        if node.name in user_inputs
    ]
    dynamic = iter(
        [d for d, size in enumerate(value.shape) if not is_concrete_int(size)]
        if isinstance(value, torch.Tensor)
        else []
        for value in traced
    )
    any_dynamic = False

    def spec(leaf: Any) -> Any:
        nonlocal any_dynamic
        dims = next(dynamic, [])
        if not isinstance(leaf, torch.Tensor) or not dims:
            return None
        any_dynamic = True
        return {d: torch.export.Dim.AUTO for d in dims}

    shapes = {name: pytree.tree_map(spec, value) for name, value in bound.items()}
    return shapes if any_dynamic else None
