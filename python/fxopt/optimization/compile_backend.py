"""`torch.compile(model, backend="fxopt")`: fxopt's passes on every graph Dynamo captures.

Dynamo hands a backend each graph it captures, in the dynamo dialect fxopt's passes already
understand (`fxopt.trace(mode="dynamo")`), plus example inputs. This backend applies a preset
(default: `default`) to the graph and returns it to run eagerly, or, with ``inductor``, hands
the optimized graph on to Inductor. Options go through torch.compile's `options`:

    torch.compile(model, backend="fxopt")                                  # default preset
    torch.compile(model, backend="fxopt", options={"preset": "fast", "inductor": True})

The name is registered twice over: through the `torch_dynamo_backends` entry point in
pyproject.toml (so an installed fxopt works without `import fxopt`), and when fxopt is
imported from a tree that is not installed.

Dynamo passes a module's parameters and buffers to the graph as inputs (placeholders), so that
one graph serves every instance of a module class. Passes that fold or merge weights need them
stored in the graph, so the backend turns each placeholder Dynamo sourced from a parameter or
buffer into a `get_attr` of that very tensor, and the returned callable drops those arguments.
The compiled function therefore computes with the weights it was compiled with (and their
folded copies): it is for inference, like the presets, and a model whose weights change must
be compiled again (`torch._dynamo.reset()`).
"""

from __future__ import annotations

import copy
import importlib.metadata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.fx import GraphModule

from ..engine.bridge import detach
from .compose import compose
from .hardware import model_device
from .presets import PRESETS, build_all, preset_passes
from ..tracing.trace import record_example_values

BACKEND_NAME = "fxopt"
_OPTIONS = ("preset", "inductor")

# Passes whose work Inductor does itself and whose output it cannot lower: oneDNN's fused
# linear (Inductor has no lowering for it on plain weights; it fuses Linear + activation itself),
# the packed convolution, fxopt's depthwise and 1x1 convolutions and its attention kernels, Python
# functions (Inductor packs and fuses convolutions and lowers SDPA itself; it would trace into
# fxopt's calls and find no data behind its tensors: a measured choice of the float32 attention
# kernel made Inductor fail on the mask's conversion and Dynamo fall back).
_LEFT_TO_INDUCTOR = (
    "FuseLinearActivationOneDnn",
    "FuseConvActivationOneDnn",
    "FuseDepthwiseConv",
    "FusePointwiseConv",
    "ChooseAttentionKernel",
)


def fxopt_backend(
    graph_module: GraphModule,
    example_inputs: Sequence[Any],
    options: Mapping[str, Any] | None = None,
) -> Callable[..., Any]:
    """The torch.compile backend: optimize Dynamo's graph with a preset, run it or Inductor's.

    Options: ``preset`` (a name in ``fxopt.optimization.presets.PRESETS``, default
    ``"default"``) and ``inductor`` (bool, default False: run the optimized graph eagerly; True:
    compile it with Inductor, leaving out the preset's passes Inductor does itself,
    `_LEFT_TO_INDUCTOR`).
    """
    preset_name, inductor = _read_options(options)
    # Dynamo reads its graph's placeholders after the backend returns: edit a copy (cheap, as
    # the weights are inputs, not attributes, of Dynamo's graph).
    graph_module = copy.deepcopy(graph_module)
    kept = _store_weights(graph_module)
    record_example_values(graph_module)
    specs = preset_passes(preset_name, model_device(graph_module))
    if inductor:
        specs = [spec for spec in specs if not spec.startswith(_LEFT_TO_INDUCTOR)]
    optimized = compose(*build_all(specs), inplace=True)(graph_module)
    detach(optimized)  # never transformed again: its engine graph need not stay in memory
    run: Callable[..., Any] = optimized
    if inductor:
        from torch._inductor.compile_fx import compile_fx

        inductor_run = compile_fx(optimized, [example_inputs[i] for i in kept])
        assert callable(inductor_run)  # compile_fx returns a callable for a GraphModule
        run = inductor_run
    return CompiledGraph(optimized, run, kept)


class CompiledGraph:
    """What the backend returns to Dynamo for one graph: call it with Dynamo's arguments.

    `graph_module` is the optimized graph (weights stored in it), for inspection.
    """

    def __init__(self, graph_module: GraphModule, run: Callable[..., Any], kept: list[int]):
        self.graph_module = graph_module
        self._run = run
        self._kept = kept

    def __call__(self, *args: Any) -> Any:
        return self._run(*[args[i] for i in self._kept])


def register() -> None:
    """Make `backend="fxopt"` known to torch.compile when no installed entry point provides it.

    With the entry point, torch imports fxopt and registers the backend itself on first use;
    registering here too would make torch's own registration fail as a duplicate.
    """
    from torch._dynamo.backends import registry

    if importlib.metadata.entry_points(group="torch_dynamo_backends", name=BACKEND_NAME):
        return
    if BACKEND_NAME not in registry.list_backends(exclude_tags=()):
        registry.register_backend(fxopt_backend, name=BACKEND_NAME)


def _read_options(options: Mapping[str, Any] | None) -> tuple[str, bool]:
    options = dict(options or {})
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise ValueError(
            f"torch.compile(backend='fxopt') options: unknown {unknown}; valid: {list(_OPTIONS)}"
        )
    preset_name = options.get("preset", "default")
    if preset_name not in PRESETS:
        raise ValueError(
            f"torch.compile(backend='fxopt') options: preset {preset_name!r} is not one of "
            f"{', '.join(PRESETS)}"
        )
    inductor = options.get("inductor", False)
    if not isinstance(inductor, bool):
        raise ValueError(
            f"torch.compile(backend='fxopt') options: inductor must be a bool, not {inductor!r}"
        )
    return str(preset_name), inductor


def _store_weights(graph_module: GraphModule) -> list[int]:
    """Replace the parameter and buffer inputs of a Dynamo graph by get_attr reads of them.

    Returns the positions of the inputs that stay inputs. Each tensor is registered on the
    GraphModule under the placeholder's own name, as a parameter or buffer like in the model.
    """
    from torch._dynamo.source import is_from_unspecialized_param_buffer_source

    kept: list[int] = []
    graph = graph_module.graph
    placeholders = list(graph.find_nodes(op="placeholder"))
    first_operation = placeholders[-1].next if placeholders else None
    for position, node in enumerate(placeholders):
        argument = node.meta.get("grapharg")
        source = getattr(argument, "source", None)
        tensor = getattr(argument, "example", None)
        if (
            source is None
            or not isinstance(tensor, torch.Tensor)
            or not is_from_unspecialized_param_buffer_source(source)
        ):
            kept.append(position)
            continue
        name = str(node.target)
        if isinstance(tensor, torch.nn.Parameter):
            graph_module.register_parameter(name, tensor)
        else:
            graph_module.register_buffer(name, tensor)
        assert first_operation is not None  # a graph always ends with its output node
        with graph.inserting_before(first_operation):
            read = graph.get_attr(name)
        read.meta = dict(node.meta)
        node.replace_all_uses_with(read)
        graph.erase_node(node)
    graph_module.recompile()
    return kept
