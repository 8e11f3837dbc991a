"""`fxopt.optimize`: trace if needed, then apply a preset, in one call."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import overload

from torch import nn
from torch.export import ExportedProgram
from torch.fx import GraphModule

from ..tracing.dummy_inputs import Inputs, bound_inputs
from .exported import optimize_exported_program
from .hardware import model_device
from .presets import preset as build_preset
from .presets import warn_machine_note, warn_uncalibrated
from ..tracing.trace import Mode
from ..tracing.train_mode import TrainModeWarning, eval_mode, in_train_mode, train_mode_message
from .trace_cache import cached_trace


@overload
def optimize(
    model: ExportedProgram,
    preset: str = ...,
    *,
    example_inputs: Inputs | None = ...,
    input_names: Sequence[str] | None = ...,
    mode: Mode = ...,
    calibration: Inputs | None = ...,
    held_out: Sequence[Inputs] = ...,
) -> ExportedProgram: ...


@overload
def optimize(
    model: nn.Module,
    preset: str = ...,
    *,
    example_inputs: Inputs | None = ...,
    input_names: Sequence[str] | None = ...,
    mode: Mode = ...,
    calibration: Inputs | None = ...,
    held_out: Sequence[Inputs] = ...,
) -> GraphModule: ...


def optimize(
    model: nn.Module | ExportedProgram,
    preset: str = "default",
    *,
    example_inputs: Inputs | None = None,
    input_names: Sequence[str] | None = None,
    mode: Mode = "auto",
    calibration: Inputs | None = None,
    held_out: Sequence[Inputs] = (),
) -> GraphModule | ExportedProgram:
    """The model traced (unless it is a GraphModule already) and optimized with `preset`.

    `preset` is one of ``fxopt.optimization.presets.PRESETS`` (`default`, `fast`,
    `all-preserving`, `aggressive`); its passes are picked for this machine and the device the
    model's weights are on (a CUDA model gets no CPU kernel, and `fast` lowers it to bfloat16
    where the GPU computes that natively). A GraphModule passed
    in is left as it was: the result is a new one, which
    ``fxopt.preset(name)(result, reverse=True)`` restores. `example_inputs`, `input_names` and
    `mode` go to :func:`fxopt.trace`. A preset that runs differently on this machine (``fast``
    without native bfloat16 runs float32) says so once per process, as a ``PresetWarning``. A
    module is traced once per state, input signature and mode within a process
    (`fxopt.optimization.trace_cache`); later calls apply their preset to that trace.

    A model in train() mode is optimized as in eval() (dropout off, batch norms on running
    statistics, so they fold), with one `TrainModeWarning` saying so; the model keeps its mode.

    An ExportedProgram gives an ExportedProgram with the same call signature, whose state dict
    holds the optimized weights (`fxopt.optimization.exported`; passes whose output torch cannot
    save are left out): `torch.export.save` writes it as a `.pt2` that loads with torch alone.
    """
    device = model_device(model)
    if isinstance(model, ExportedProgram):
        warn_machine_note(preset, device)
        return optimize_exported_program(model, preset)
    if not isinstance(model, nn.Module):
        raise TypeError(
            "fxopt.optimize takes an nn.Module or a GraphModule (or an ExportedProgram), "
            f"not {type(model).__name__}"
        )
    # Checked before the trace: a list of batches given as one fails only inside calibration.
    if calibration is not None:
        bound_inputs(model, calibration, "calibration")
    for i, batch in enumerate(held_out):
        bound_inputs(model, batch, f"held_out[{i}]")
    transformation = build_preset(
        preset, inplace=False, calibration=calibration, held_out=held_out, device=device
    )
    if calibration is None:
        warn_uncalibrated(preset, device)
    if isinstance(model, GraphModule):
        return transformation(model)
    if in_train_mode(model):
        action = (
            "fxopt.optimize optimizes for inference, so it traced and optimized it as in eval() "
            "(the model itself stays in train mode)"
        )
        warnings.warn(train_mode_message(model, action), TrainModeWarning, stacklevel=2)
    # The preset copies the traced graph (inplace=False) while the model is in eval mode, so
    # the result keeps eval-mode modules when the model's own modes are put back.
    # Traced once per model state and input signature (trace_cache): trying presets on one
    # model does not retrace it.
    with eval_mode(model):
        graph_module = cached_trace(model, input_names, example_inputs, mode)
        return transformation(graph_module)
