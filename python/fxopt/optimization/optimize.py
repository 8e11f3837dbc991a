"""`fxopt.optimize`: trace if needed, then apply a preset, in one call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

from torch import nn
from torch.export import ExportedProgram
from torch.fx import GraphModule

from ..tracing.dummy_inputs import Inputs
from .exported import optimize_exported_program
from .presets import preset as build_preset
from .presets import warn_machine_note
from ..tracing.trace import Mode
from .trace_cache import cached_trace


@overload
def optimize(
    model: ExportedProgram,
    preset: str = ...,
    *,
    example_inputs: Inputs | None = ...,
    input_names: Sequence[str] | None = ...,
    mode: Mode = ...,
) -> ExportedProgram: ...


@overload
def optimize(
    model: nn.Module,
    preset: str = ...,
    *,
    example_inputs: Inputs | None = ...,
    input_names: Sequence[str] | None = ...,
    mode: Mode = ...,
) -> GraphModule: ...


def optimize(
    model: nn.Module | ExportedProgram,
    preset: str = "default",
    *,
    example_inputs: Inputs | None = None,
    input_names: Sequence[str] | None = None,
    mode: Mode = "auto",
) -> GraphModule | ExportedProgram:
    """The model traced (unless it is a GraphModule already) and optimized with `preset`.

    `preset` is one of ``fxopt.optimization.presets.PRESETS`` (`default`, `fast`,
    `all-preserving`, `aggressive`); its passes are picked for this machine. A GraphModule passed
    in is left as it was: the result is a new one, which
    ``fxopt.preset(name)(result, reverse=True)`` restores. `example_inputs`, `input_names` and
    `mode` go to :func:`fxopt.trace`. A preset that runs differently on this machine (``fast``
    without native bfloat16 runs float32) says so once per process, as a ``PresetWarning``. A
    module is traced once per state, input signature and mode within a process
    (`fxopt.optimization.trace_cache`); later calls apply their preset to that trace.

    An ExportedProgram gives an ExportedProgram with the same call signature, whose state dict
    holds the optimized weights (`fxopt.optimization.exported`; passes whose output torch cannot
    save are left out): `torch.export.save` writes it as a `.pt2` that loads with torch alone.
    """
    if isinstance(model, ExportedProgram):
        warn_machine_note(preset)
        return optimize_exported_program(model, preset)
    transformation = build_preset(preset, inplace=False)
    if not isinstance(model, nn.Module):
        raise TypeError(
            "fxopt.optimize takes an nn.Module or a GraphModule (or an ExportedProgram), "
            f"not {type(model).__name__}"
        )
    if isinstance(model, GraphModule):
        graph_module = model
    else:
        # Traced once per model state and input signature (trace_cache): trying presets on
        # one model does not retrace it.
        graph_module = cached_trace(model, input_names, example_inputs, mode)
    return transformation(graph_module)
