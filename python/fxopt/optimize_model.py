"""`fxopt.optimize`: trace if needed, then apply a preset, in one call."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn
from torch.fx import GraphModule

from .dummy_inputs import Inputs
from .presets import preset as build_preset
from .tracing import Mode, trace


def optimize(
    model: nn.Module,
    preset: str = "default",
    *,
    example_inputs: Inputs | None = None,
    input_names: Sequence[str] | None = None,
    mode: Mode = "auto",
) -> GraphModule:
    """The model traced (unless it is a GraphModule already) and optimized with `preset`.

    `preset` is one of ``fxopt.presets.PRESETS`` (`default`, `fast`, `all-preserving`,
    `aggressive`); its passes are picked for this machine. A GraphModule passed in is left as it
    was: the result is a new one, which ``fxopt.preset(name)(result, reverse=True)`` restores.
    `example_inputs`, `input_names` and `mode` go to :func:`fxopt.trace`.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"fxopt.optimize takes an nn.Module or a GraphModule, not {type(model).__name__}")
    transformation = build_preset(preset, inplace=False)
    if isinstance(model, GraphModule):
        graph_module = model
    else:
        graph_module = trace(model, input_names=input_names, example_inputs=example_inputs, mode=mode)
    return transformation(graph_module)
