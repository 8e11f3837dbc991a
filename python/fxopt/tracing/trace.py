"""`fxopt.trace`: turn a model into a `torch.fx.GraphModule` the optimizer can edit.

Four tracers produce the three graph dialects fxopt's passes understand:

* ``"symbolic"``: `torch.fx.symbolic_trace`. Module-level graphs (`call_module` nodes for
  nn.Linear / nn.Conv2d / nn.BatchNorm*), the graphs the Optimum documentation shows. Fails on
  Python control flow that depends on tensor values, which most transformers models contain.
* ``"sized"``: symbolic tracing that also computes every value on fake tensors of the example's
  sizes (`sized`), so Python that reads a size as a number (`int(x.shape[-2])`, a channel
  check, `b, c, h, w = x.shape`) traces; a branch on a dynamic size is checked in the graph, one
  on tensor data is refused. symbolic's module-level graph, in a
  fraction of Dynamo's time on CNNs and ViT, checked against the model on the example inputs;
  it returns the model's output type like a Dynamo graph (the graph's output node holds the
  tensors, its code rebuilds the type).
* ``"dynamo"``: TorchDynamo's torch-level graph (`torch._dynamo.export`), the graph a
  `torch.compile` backend receives: Python operators and torch functions as `call_function`
  nodes (`operator.mul`, `torch._C._nn.linear`, `torch.matmul`), tensor methods as
  `call_method`, weights as `get_attr`. Dynamo runs the model's Python on example inputs like
  export does, so it traces transformers 5 models, yet keeps the operations users wrote, which
  is what Optimum users' own passes match. Dynamo records each value's fake tensor as
  `meta["example_value"]`; fxopt also stores it as `meta["val"]`, where export puts it.
* ``"export"``: `torch.export.export(strict=False)` then `.module()`. ATen-level `call_function`
  nodes with weights as `get_attr`; traces through data-dependent Python by running it on
  example inputs, which fxopt invents for transformers models (`dummy_inputs`).
* ``"auto"``: symbolic, then sized (for models in eval mode whose inputs are tensors and plain
  values: a key/value cache object or train mode goes on to Dynamo, as the sized graph's check
  runs the model), then dynamo, then export, with one `TraceWarning` naming the mode used and
  why the earlier ones failed. Sized and Dynamo both trace a stack of alike layers two deep and
  copy the rest (`repeated_layers`).

Example inputs are traced as contiguous copies, so no tracer records a guard on the caller's
memory layout (a sliced `ids[:, :7]` would otherwise make the graph refuse contiguous ids).

What the export result is: `ExportedProgram.module()` returns a `torch.fx.GraphModule` subclass
(torch's private `_StatefulGraphModule`) whose code flattens its inputs and unflattens its outputs
with pytree specs. fxopt returns it unchanged, because that is what makes it a drop-in for the
eager model: it takes the traced inputs by name (or position, in forward's order) and returns
the eager model's own output type. A transformers model returns the same `ModelOutput` class
(attribute and key access both work), with its key/value cache rebuilt as the same `Cache`
class. Passes may edit its graph and call `recompile()`; the input/output specs live in the
graph's codegen and survive. Two torch behaviours users notice: its graph starts with a
`call_module` node `_guards_fn` that checks inputs against the shapes export assumed (an
impure node, never dead code), and `.train()` / `.eval()` raise NotImplementedError, since the
mode was frozen into the graph when it was traced.

Every result carries `gm.meta["fxopt_trace"]` (a `TraceInfo`) saying how it was traced.
"""

from __future__ import annotations

import dataclasses
import inspect
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypedDict, Union

import torch
from torch import nn
from torch.fx import GraphModule
from torch.fx.experimental.symbolic_shapes import is_concrete_int

from .diagnose import likely_cause, refuse_untraceable
from .model_frames import describe_frame, innermost_model_frame
from .input_guard import guard_inputs
from .quiet import torch_diagnostics_hidden
from .model_names import restore_model_names
from . import repeated_layers, signature
from .sized import trace_sized
from .sizes_of_one import keeping_sizes_of_one
from .unbuilt_guards import shape_guards_unbuilt
from .uncopied_tensors import tensors_uncopied
from .train_mode import TrainModeWarning, in_train_mode, train_mode_message
from .dummy_inputs import (
    Inputs,
    bound_inputs,
    build_dummy_inputs,
    default_input_names,
    forward_parameter_names,
    image_size_dims,
    is_pretrained_model,
    default_dynamic_dims,
    varying_dims,
)

Mode = Literal["auto", "symbolic", "sized", "dynamo", "export"]

Dynamic = Union[bool, Literal["all"]]
"""Which dimensions a dynamo / export graph lets vary: True (all but an image's height and
width), "all" or False (none)."""

IMAGE_SIZE_NOTE = (
    "fxopt.trace fixes an image's height and width to the example's by default: to call the "
    "graph at another size, trace on images of that size, or with dynamic='all' (slower to trace)"
)
"""Why a graph refuses an image of another size, and the two ways to one that takes it."""

SIZE_ONE_NOTE = (
    "Dynamo fixes a dimension the example gives size 1 (a batch of one): to call the graph at "
    "other sizes, trace on an example of 2 or more there (fxopt.optimize: example_inputs=a batch)"
)
"""Why a graph refuses a batch when its example was one sentence or image, and what to do."""

TRACE_META_KEY = "fxopt_trace"
"""Key of the `TraceInfo` record in a traced GraphModule's `.meta`."""

_MODES: tuple[Mode, ...] = ("auto", "symbolic", "sized", "dynamo", "export")


class TraceError(RuntimeError):
    """A model could not be traced by any of the modes tried.

    The first line names the likely cause where the example inputs show it (`cause`: an empty
    dimension, float ids); then each mode tried with the exception type, first line and the
    model source line where it failed; `failures` maps each mode to its exception for closer
    inspection.
    """

    def __init__(
        self, model: nn.Module, failures: dict[str, BaseException], cause: str | None = None
    ) -> None:
        self.failures = failures
        self.cause = cause
        because = f": {cause}" if cause else ""
        lines = [
            f"fxopt.trace could not trace {type(model).__name__}{because} "
            f"(tried: {', '.join(failures)})"
        ]
        lines += [f"  {mode}: {describe_failure(exc)}" for mode, exc in failures.items()]
        super().__init__("\n".join(lines))


class TraceWarning(UserWarning):
    """Tracing succeeded, but not as asked: auto fell back to a later mode, or sizes are fixed."""


class TraceInfo(TypedDict):
    """How a graph was traced; stored in `gm.meta["fxopt_trace"]`."""

    mode: Literal["symbolic", "sized", "dynamo", "export"]
    """The tracer that produced the graph."""
    input_names: list[str] | None
    """Forward parameters that are graph inputs; None when symbolic tracing kept all of them."""
    dynamic_dims: dict[str, list[int]] | None
    """Sized / dynamo / export: per input, the dimensions that accept sizes other than the example's.
    None for symbolic graphs, which record operations, not sizes."""
    fixed_sizes: dict[str, dict[int, int]]
    """Export: dimensions fxopt asked to keep dynamic that the graph fixes to the example's size."""
    dynamic_failure: str | None
    """Why export with dynamic dimensions failed, forcing a fully static retry; else None."""
    fallback_reason: str | None
    """In auto mode, why the modes tried before this one failed ("symbolic: ...; dynamo: ...");
    else None."""
    copied_layers: dict[str, int]
    """Sized and Dynamo: per stack of alike layers (its container's path), how many layers were
    copied from a traced one instead of traced (`repeated_layers`); empty otherwise."""


def trace(
    model: nn.Module,
    input_names: Sequence[str] | None = None,
    example_inputs: Inputs | None = None,
    mode: Mode = "auto",
    dynamic: Dynamic = True,
) -> GraphModule:
    """Trace `model` into a GraphModule that computes what `model` computes.

    Args:
        model: the module to trace, in the mode (eval / train) its graph should capture; a
            model in train mode is traced as it is, with a `TrainModeWarning`.
        input_names: forward parameters that stay graph inputs; the others are fixed to their
            default values. Default: the names `example_inputs` binds to, else, for a transformers
            model, its main input plus attention_mask / decoder_input_ids where they apply, else
            (symbolic only) every parameter.
        example_inputs: inputs dynamo / export run the model on: one tensor, a tuple of
            positional arguments or a dict of keyword arguments. Invented from the config for
            transformers models when omitted; required to trace any other model that way.
        mode: "symbolic", "sized", "dynamo", "export" or "auto" (symbolic, then sized for a
            model in eval mode on tensors and plain values, then dynamo, then export).
        dynamic: sized, dynamo and export: which dimensions accept other sizes than the example's.
            True: batch and sequence (export), every dimension the model does not fix (dynamo),
            but for an image's height and width, which stay the example's: tracing them
            symbolic costs 20x on window-attention models (a 2-layer Swin: 30 s against
            1.5 s), and a call at another resolution is refused with an error naming the input
            (`IMAGE_SIZE_NOTE`). "all": image height and width too. False: no dimension.

    Raises:
        ValueError: bad `mode`, an `input_names` entry that is not a forward parameter,
            example inputs that do not match the input names, or a model on the meta device.
        TypeError: a TorchScript module (torch.jit.script / torch.jit.trace).
        TraceError: no mode tried could trace the model.
    """
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(map(repr, _MODES))}, not {mode!r}")
    refuse_untraceable(model)
    example = _bind_example_inputs(model, example_inputs)
    names = _resolve_input_names(model, input_names, example)
    failures: dict[str, BaseException] = {}
    tracers = {
        "symbolic": lambda: _trace_symbolic(model, names),
        "sized": lambda: _trace_sized(model, names, example, dynamic),
        "dynamo": lambda: _trace_dynamo(model, names, example, dynamic),
        "export": lambda: _trace_export(model, names, example, dynamic),
    }
    for tried, tracer in tracers.items():
        if mode not in (tried, "auto"):
            continue
        if mode == "auto" and tried == "sized" and not _sized_first(model, names, example):
            continue
        try:
            with torch_diagnostics_hidden():
                graph_module = tracer()
        except Exception as exc:  # any tracer failure is reported through TraceError
            failures[tried] = exc
            continue
        break
    else:
        last = failures[list(failures)[-1]]
        cause = likely_cause(model, example)
        if cause is None:
            raise TraceError(model, failures) from last
        # The cause is named; the tracers' hundreds of frames would only bury it (they stay in
        # `failures`).
        raise TraceError(model, failures, cause) from None
    info: TraceInfo = graph_module.meta[TRACE_META_KEY]
    if in_train_mode(model) and not isinstance(model, GraphModule):
        action = "fxopt.trace traced it as it is, so the graph keeps them"
        warnings.warn(train_mode_message(model, action), TrainModeWarning, stacklevel=2)
    if failures:
        info["fallback_reason"] = "; ".join(
            f"{failed}: {describe_failure(exc)}" for failed, exc in failures.items()
        )
        warnings.warn(_fallback_message(model, info["mode"], list(failures)), TraceWarning, stacklevel=2)
    if info["fixed_sizes"] or info["dynamic_failure"]:
        warnings.warn(_fixed_sizes_message(model, info), TraceWarning, stacklevel=2)
    return graph_module


# Why a tracer fails on a model, in words; its exception says how (TraceInfo.fallback_reason).
_WHY_NOT = {
    "symbolic": "torch.fx's symbolic tracing cannot follow its Python code (it uses values a "
    "symbolic trace only knows as placeholders)",
    "sized": "the sized tracer could not follow its Python (a number computed from tensor "
    "data) or its graph did not give its outputs",
    "dynamo": "Dynamo could not capture it as one graph",
}


def _fallback_message(model: nn.Module, used: str, failed: list[str]) -> str:
    """Which tracer `auto` used and why, in words: no exception text, which the trace's
    `fallback_reason` keeps (`fxopt optimize --debug` shows it)."""
    why = "; ".join(_WHY_NOT[mode] for mode in failed)
    return f"fxopt.trace: traced {type(model).__name__} with {used}, because {why}"


def describe_failure(exc: BaseException) -> str:
    """One line for a tracer failure: exception type, first message line, and where it happened.

    The place is the innermost traceback frame outside torch, fxopt and the standard library:
    the model source line whose operation the tracer could not handle. Dynamo never runs the
    model's frames, so its errors carry that line in `real_stack` instead.
    """
    kind = type(exc).__qualname__
    if type(exc).__module__ != "builtins":  # torch.fx.proxy.TraceError is not fxopt's TraceError
        kind = f"{type(exc).__module__}.{kind}"
    message = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    description = f"{kind}: {message}" if message else kind
    frame = innermost_model_frame(
        [*traceback.extract_tb(exc.__traceback__), *getattr(exc, "real_stack", [])]
    )
    if frame is not None:
        description += f" (at {describe_frame(frame)})"
    return description


def register_cache_pytrees(model: Any) -> None:
    """Teach torch's pytree the key/value cache classes a transformers model may return.

    transformers 5 models return caches as `Cache` objects (DynamicCache, EncoderDecoderCache)
    that pytree does not know: torch.export refuses to output them and `fxopt.verify` could not
    look inside them. transformers ships the registration its own exporter uses; this applies it
    (idempotently) when `model` is a transformers model and does nothing otherwise. A
    transformers release without that exporter leaves caches opaque: export then names the
    cache class it cannot output.
    """
    if not is_pretrained_model(model):
        return
    try:
        from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model
    except ImportError:
        return
    register_cache_pytrees_for_model(model)


def _bind_example_inputs(model: nn.Module, example_inputs: Inputs | None) -> dict[str, Any] | None:
    """Name each example input after the forward parameter it binds to.

    Export then receives keyword inputs only, so the traced module's forward has exactly the
    input names as parameters, in the eager forward's order.
    """
    if example_inputs is None:
        return None
    bound = bound_inputs(model, example_inputs, "example_inputs").arguments
    named = forward_parameter_names(model)
    variadic = [name for name in bound if name not in named]
    if variadic:
        raise ValueError(
            f"example_inputs bind to the variadic parameter(s) {variadic} of "
            f"{type(model).__name__}.forward; pass them by the names of named parameters"
        )
    return {name: bound[name] for name in named if name in bound}


def _resolve_input_names(
    model: nn.Module, input_names: Sequence[str] | None, example: dict[str, Any] | None
) -> list[str] | None:
    """Check and default the graph input names, in forward-signature order.

    Returns None when every parameter stays an input (symbolic tracing of a plain module with
    neither input names nor examples).
    """
    valid = forward_parameter_names(model)
    if input_names is not None:
        unknown = [name for name in input_names if name not in valid]
        if unknown:
            raise ValueError(
                f"input_names: {', '.join(map(repr, unknown))} is not a parameter of "
                f"{type(model).__name__}.forward; valid names: {', '.join(valid)}"
            )
        if example is not None and set(example) != set(input_names):
            raise ValueError(
                f"example_inputs provide {sorted(example)} but input_names are "
                f"{sorted(input_names)}; "
                "give a value for exactly the graph inputs"
            )
    chosen: Sequence[str] | None = input_names
    if chosen is None and example is not None:
        chosen = list(example)
    elif chosen is None and is_pretrained_model(model):
        chosen = default_input_names(model)
    if chosen is None:
        return None
    _check_required_inputs(model, chosen)
    return [name for name in valid if name in chosen]


def _check_required_inputs(model: nn.Module, names: Sequence[str]) -> None:
    """A parameter without a default cannot be fixed, so it must be one of the graph inputs."""
    parameters = inspect.signature(model.forward).parameters
    missing = [
        name
        for name in forward_parameter_names(model)
        if parameters[name].default is inspect.Parameter.empty and name not in names
    ]
    if missing:
        raise ValueError(
            f"{type(model).__name__}.forward requires {', '.join(map(repr, missing))}, "
            f"which input_names {list(names)} leave out"
        )


def _trace_symbolic(model: nn.Module, names: list[str] | None) -> GraphModule:
    """torch.fx.symbolic_trace, fixing every non-input parameter to its default (concrete_args)."""
    concrete_args = None
    if names is not None:
        parameters = inspect.signature(model.forward).parameters
        concrete_args = {
            name: parameters[name].default
            for name in forward_parameter_names(model)
            if name not in names
        }
    tracer = _OutputTypeTracer()
    graph = tracer.trace(model, concrete_args=concrete_args)
    graph_module = GraphModule(tracer.root, graph, type(model).__name__)
    graph_module.meta[TRACE_META_KEY] = TraceInfo(
        mode="symbolic",
        input_names=names,
        dynamic_dims=None,
        fixed_sizes={},
        dynamic_failure=None,
        fallback_reason=None,
        copied_layers={},
    )
    return graph_module


class _OutputTypeTracer(torch.fx.Tracer):
    """symbolic_trace's tracer, keeping dataclass dict outputs (transformers' ModelOutput).

    fx records any dict subclass as a plain dict, so the traced module would return a dict
    where the model returns a ModelOutput and attribute access (`out.last_hidden_state`) breaks.
    Such a value becomes a call of its class instead, which rebuilds the very same type.
    """

    def create_arg(self, a: Any) -> Any:
        if isinstance(a, dict) and type(a) is not dict and dataclasses.is_dataclass(a):
            fields = {k: self.create_arg(v) for k, v in a.items()}
            return self.create_node("call_function", type(a), (), fields)
        return super().create_arg(a)


def _trace_dynamo(
    model: nn.Module, names: list[str] | None, example: dict[str, Any] | None, dynamic: Dynamic
) -> GraphModule:
    """TorchDynamo's torch-level graph of `model` on keyword inputs.

    `torch._dynamo.export` returns a GraphModule whose forward takes the inputs by name (or
    position) and rebuilds the model's own output type through pytree specs; its guards are
    not kept, so dimensions Dynamo specialised show up as constants in the graph, as they do
    in export graphs; `guard_inputs` checks them again at the top of the graph, so the shape
    guard function Dynamo would build is skipped (`unbuilt_guards`). Weights get
    the model's names and module tree back (`restore_model_names`).
    `dynamic=False` makes every dimension static; `dynamic=True` all but an image's height and
    width (marked static on a copy of the input, so the caller's tensor is left alone): Dynamo's
    symbolic reasoning (sympy) about a 2-layer Swin's window partitions and padding on dynamic
    height and width is ~95% of its 30 s trace.
    """
    inputs = _export_inputs(model, names, example)
    images = _image_inputs(inputs) if dynamic is True else {}
    for name, image_dims in images.items():
        inputs[name] = inputs[name].clone()
        for dim in image_dims:
            torch._dynamo.mark_static(inputs[name], dim)
    register_cache_pytrees(model)

    def dynamo_graph(stacks: list[repeated_layers.Stack]) -> GraphModule:
        return _dynamo_graph(model, inputs, dynamic, images, stacks)

    graph_module, copied = _graph_of_stacks(model, inputs, dynamo_graph) or (dynamo_graph([]), {})
    record_example_values(graph_module)
    dynamic_dims = _symbolic_dims(graph_module, inputs)
    notes = {name: IMAGE_SIZE_NOTE for name in images}
    if dynamic:
        for name in _fixed_sizes_of_one(inputs, dynamic_dims, images):
            notes[name] = SIZE_ONE_NOTE + (f"; {notes[name]}" if name in notes else "")
    guard_inputs(graph_module, list(inputs), notes=notes)
    signature.record(graph_module, model, list(inputs))
    graph_module.meta[TRACE_META_KEY] = TraceInfo(
        mode="dynamo",
        input_names=list(inputs),
        dynamic_dims=dynamic_dims,
        fixed_sizes={},
        dynamic_failure=None,
        fallback_reason=None,
        copied_layers=copied,
    )
    return graph_module


def _symbolic_dims(graph_module: GraphModule, inputs: dict[str, Any]) -> dict[str, list[int]]:
    """Per tensor input, the dimensions its traced value keeps symbolic."""
    placeholders = graph_module.graph.find_nodes(op="placeholder")
    return {
        name: dims
        for name, node in zip(inputs, placeholders)
        if isinstance(traced := node.meta.get("val"), torch.Tensor)
        and (dims := [d for d, size in enumerate(traced.shape) if not is_concrete_int(size)])
    }


def _sized_first(model: nn.Module, names: list[str] | None, example: dict[str, Any] | None) -> bool:
    """Whether auto tries the sized tracer: the model is in eval mode and has inputs to run on
    (given, or invented for a transformers model), tensors and plain values only, one tensor
    at least."""
    if in_train_mode(model) or (example is None and not (names is not None and is_pretrained_model(model))):
        return False
    inputs = _export_inputs(model, names, example)
    plain = all(_plain(value) for value in inputs.values())
    return plain and any(isinstance(value, torch.Tensor) for value in inputs.values())


def _trace_sized(
    model: nn.Module, names: list[str] | None, example: dict[str, Any] | None, dynamic: Dynamic
) -> GraphModule:
    """The sized tracer's graph (`sized.trace_sized`), used where it gives the model's outputs
    bit for bit on the example inputs, with the input checks and call signature a Dynamo graph
    gets. Dimensions of size one stay symbolic where they may (`sizes_of_one`)."""
    if in_train_mode(model):
        raise ValueError(
            "the sized tracer checks its graph by running the model, which in train mode would "
            "update batch-norm statistics and draw dropout: trace it in eval() mode"
        )
    inputs = _export_inputs(model, names, example)
    if not all(_plain(value) for value in inputs.values()):
        raise ValueError(
            "the sized tracer checks its graph by running the model, which would change an "
            "input other than tensors and plain values (a key/value cache)"
        )
    register_cache_pytrees(model)
    requested = _requested_dynamic_dims(inputs, dynamic)

    def sized_graph(stacks: list[repeated_layers.Stack]) -> GraphModule:
        traced = repeated_layers.shortened(model, stacks)
        graph_module = keeping_sizes_of_one(
            lambda: trace_sized(traced, inputs, requested), _sizes(inputs, requested)
        )
        # The model's whole module tree and state dict (fx's holds what its graph reads, with
        # every buffer persistent), and the untraced layers for the copies to read.
        restore_model_names(graph_module, model)
        return graph_module

    stacked = _graph_of_stacks(model, inputs, sized_graph)
    graph_module, copied = stacked or (sized_graph([]), {})
    if stacked is None and not repeated_layers.computes_model(graph_module, model, inputs):
        raise RuntimeError(
            "the sized graph does not give the model's outputs on the example inputs (Python "
            "state or randomness outside the recorded calls)"
        )
    images = _image_inputs(inputs) if dynamic is True else {}
    guard_inputs(graph_module, list(inputs), notes={name: IMAGE_SIZE_NOTE for name in images})
    signature.record(graph_module, model, list(inputs))
    graph_module.meta[TRACE_META_KEY] = TraceInfo(
        mode="sized",
        input_names=list(inputs),
        dynamic_dims=_symbolic_dims(graph_module, inputs),
        fixed_sizes={},
        dynamic_failure=None,
        fallback_reason=None,
        copied_layers=copied,
    )
    return graph_module


def _dynamo_graph(
    model: nn.Module,
    inputs: dict[str, Any],
    dynamic: Dynamic,
    static: dict[str, tuple[int, ...]],
    stacks: list[repeated_layers.Stack],
) -> GraphModule:
    """`torch._dynamo.export`'s graph of `model` with the model's names, `stacks` shortened to
    their first two alike layers (`repeated_layers.shortened`), dimensions of size one kept
    dynamic where they may be (`sizes_of_one`; `static`: dimensions marked static)."""
    traced = repeated_layers.shortened(model, stacks)
    export = torch._dynamo.export(traced, assume_static_by_default=not dynamic)
    with shape_guards_unbuilt(), tensors_uncopied():
        if dynamic:
            result = keeping_sizes_of_one(lambda: export(**inputs), _sizes(inputs, static=static))
        else:
            result = export(**inputs)
    graph_module = result.graph_module
    restore_model_names(graph_module, model)
    return graph_module


def _graph_of_stacks(
    model: nn.Module,
    inputs: dict[str, Any],
    traced_graph: Callable[[list[repeated_layers.Stack]], GraphModule],
) -> tuple[GraphModule, dict[str, int]] | None:
    """`traced_graph(stacks)` (a tracer's graph of the model with `stacks` shortened) with each
    stack's other layers copied (`repeated_layers`), and the number copied per stack; None where
    that does not apply or does not give the model's own outputs: a model in train mode
    (dropout), layers that do not trace alike, a model that cannot run shortened. Inputs other
    than tensors and plain values (a key/value cache object) are never run through the check,
    which could change them."""
    if in_train_mode(model) or not all(_plain(value) for value in inputs.values()):
        return None
    stacks = repeated_layers.find_stacks(model)
    if not stacks:
        return None
    try:
        graph_module = traced_graph(stacks)
    except Exception:  # the model needs all its layers to run (it indexes them): traced whole
        return None
    if not repeated_layers.stamp_layers(graph_module, stacks):
        return None
    if not repeated_layers.computes_model(graph_module, model, inputs):
        return None
    return graph_module, {stack.path: stack.count - 2 for stack in stacks}


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (torch.Tensor, bool, int, float, str))


def record_example_values(graph_module: GraphModule) -> None:
    """Store Dynamo's `meta["example_value"]` as `meta["val"]`, where export records it.

    The fake tensors are the same objects: the engine reads each value's dtype and sizes from
    `meta["val"]`, whichever tracer made the graph.
    """
    for node in graph_module.graph.nodes:
        if "val" not in node.meta and "example_value" in node.meta:
            node.meta["val"] = node.meta["example_value"]


def _trace_export(
    model: nn.Module, names: list[str] | None, example: dict[str, Any] | None, dynamic: Dynamic
) -> GraphModule:
    """torch.export (non-strict) on keyword inputs, dynamic where it can be, static otherwise."""
    inputs = _export_inputs(model, names, example)
    register_cache_pytrees(model)
    requested = _requested_dynamic_dims(inputs, dynamic)
    dynamic_failure: str | None = None
    try:
        program = keeping_sizes_of_one(lambda: _export(model, inputs, requested), _sizes(inputs, requested))
    except Exception as exc:  # retried static below; a static failure propagates
        if not requested:
            raise
        dynamic_failure = describe_failure(exc)
        program = _export(model, inputs, {})
    graph_module = program.module()
    assert isinstance(graph_module, GraphModule)  # torch documents .module() as returning one
    _accept_positional_or_keyword(graph_module)
    signature.record(graph_module, model, list(inputs))
    if dynamic_failure is None:
        fixed = _fixed_sizes(graph_module, inputs, requested)
    else:
        fixed = {
            name: {d: int(inputs[name].shape[d]) for d in dims} for name, dims in requested.items()
        }
    graph_module.meta[TRACE_META_KEY] = TraceInfo(
        mode="export",
        input_names=list(inputs),
        dynamic_dims={
            name: kept
            for name, dims in requested.items()
            if (kept := [d for d in dims if d not in fixed.get(name, {})])
        },
        fixed_sizes=fixed,
        dynamic_failure=dynamic_failure,
        fallback_reason=None,
        copied_layers={},
    )
    return graph_module


def _accept_positional_or_keyword(graph_module: GraphModule) -> None:
    """Let the exported module be called like the eager one: `m(x)` as well as `m(x=x)`.

    torch's input pre-hook insists on the args/kwargs split used at export time (keywords only,
    here). The generated forward already binds positional or keyword arguments by name, and
    when the graph holds torch's `_guards_fn` node, sizes are still checked inside the graph, so
    the pre-hook's structural check is switched off (it stays on without `_guards_fn`, where the
    pre-hook is what checks sizes).
    """
    if hasattr(graph_module, "_guards_fn"):
        setattr(graph_module, "validate_inputs", False)  # torch's _StatefulGraphModule reads it


def _export_inputs(
    model: nn.Module, names: list[str] | None, example: dict[str, Any] | None
) -> dict[str, Any]:
    """The keyword inputs dynamo / export run on: contiguous copies of the user's, or dummies
    made for a transformers model.

    Tracers record guards on the strides of the tensors they run on; a caller's slice
    (`ids[:, :7]`) would make the graph refuse every contiguous tensor of that shape."""
    if example is not None:
        return {
            name: value.contiguous() if isinstance(value, torch.Tensor) else value
            for name, value in example.items()
        }
    if names is not None and is_pretrained_model(model):
        return build_dummy_inputs(model, names)
    raise ValueError(
        f"tracing {type(model).__name__} with dynamo or torch.export needs example_inputs to run "
        "it on (fxopt can only invent them for transformers models)"
    )


def _fixed_sizes_of_one(
    inputs: dict[str, Any], dynamic_dims: dict[str, list[int]], static: dict[str, tuple[int, ...]]
) -> list[str]:
    """The tensor inputs with a dimension of example size 1 that Dynamo fixed, though it was
    asked to keep it dynamic (not in `static`)."""
    return [
        name
        for name, value in inputs.items()
        if isinstance(value, torch.Tensor)
        and any(
            size == 1 and dim not in dynamic_dims.get(name, ()) and dim not in static.get(name, ())
            for dim, size in enumerate(value.shape)
        )
    ]


def _sizes(
    inputs: dict[str, Any],
    dims: dict[str, tuple[int, ...]] | None = None,
    static: dict[str, tuple[int, ...]] | None = None,
) -> list[int]:
    """The example sizes of the tensor inputs' dimensions: those in `dims` (all if None) that
    are not in `static`."""
    return [
        size
        for name, value in inputs.items()
        if isinstance(value, torch.Tensor) and (dims is None or name in dims)
        for dim, size in enumerate(value.shape)
        if (dims is None or dim in dims[name]) and dim not in (static or {}).get(name, ())
    ]


def _image_inputs(inputs: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Per image input, its height and width dimensions."""
    images = {
        name: image_size_dims(name, value)
        for name, value in inputs.items()
        if isinstance(value, torch.Tensor)
    }
    return {name: dims for name, dims in images.items() if dims}


def _requested_dynamic_dims(inputs: dict[str, Any], dynamic: Dynamic) -> dict[str, tuple[int, ...]]:
    """Per tensor input, the batch / sequence (and with dynamic="all" image height / width)
    dimensions to keep dynamic."""
    if dynamic is False:
        return {}
    dims_of = varying_dims if dynamic == "all" else default_dynamic_dims
    requested = {
        name: dims_of(name, value) for name, value in inputs.items() if isinstance(value, torch.Tensor)
    }
    return {name: dims for name, dims in requested.items() if dims}


def _export(
    model: nn.Module, inputs: dict[str, Any], dynamic_dims: dict[str, tuple[int, ...]]
) -> torch.export.ExportedProgram:
    """One torch.export call.

    Dimensions are marked `Dim.AUTO`, not named `Dim`s: export keeps each one dynamic when the
    model allows it and silently fixes it otherwise (e.g. ViT's image size), instead of failing;
    `_fixed_sizes` then reports what was fixed.
    """
    shapes = {
        name: {d: torch.export.Dim.AUTO for d in dynamic_dims.get(name, ())}
        if isinstance(value, torch.Tensor)
        else None
        for name, value in inputs.items()
    }
    return torch.export.export(
        model, (), inputs, strict=False, dynamic_shapes=shapes if dynamic_dims else None
    )


def _fixed_sizes(
    graph_module: GraphModule, inputs: dict[str, Any], requested: dict[str, tuple[int, ...]]
) -> dict[str, dict[int, int]]:
    """Requested dynamic dimensions that export made static.

    A fixed dimension shows as a plain int in the traced shape, or as a symbol that a guard later
    resolved to a constant (`is_concrete_int` sees through it), as ViT's image size does.

    The unlifted module has one placeholder per keyword input, in the inputs' order, each with
    the fake tensor export traced in `meta["val"]`; non-tensor inputs are skipped.
    """
    placeholders = graph_module.graph.find_nodes(op="placeholder")
    fixed: dict[str, dict[int, int]] = {}
    for name, node in zip(inputs, placeholders):
        traced = node.meta.get("val")
        if name not in requested or not isinstance(traced, torch.Tensor):
            continue
        static = {
            d: int(traced.shape[d]) for d in requested[name] if is_concrete_int(traced.shape[d])
        }
        if static:
            fixed[name] = static
    return fixed


def _fixed_sizes_message(model: nn.Module, info: TraceInfo) -> str:
    """The warning text for a graph that fixes sizes callers may expect to vary."""
    sizes = "; ".join(
        f"{name} dim {dim} = {size}"
        for name, dims in info["fixed_sizes"].items()
        for dim, size in dims.items()
    )
    message = f"fxopt.trace: the graph of {type(model).__name__} only accepts these sizes: {sizes}"
    if info["dynamic_failure"]:
        message += f" (export with dynamic sizes failed: {info['dynamic_failure']})"
    if any(size <= 1 for dims in info["fixed_sizes"].values() for size in dims.values()):
        message += (
            "; an example size of 0 or 1 is fixed where the model's code needs it exactly (or this "
            "torch cannot keep it dynamic): use examples of size 2 or more"
        )
    return message
