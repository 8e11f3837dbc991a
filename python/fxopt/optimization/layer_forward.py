"""Encoder layers as one graph each: attention, normalisations and Linears optimized together.

optimize_model's blocks leave attention and the normalisations between them eager, in the
model's dtype: under `fast` each block casts its input to bfloat16 and its result back, and the
attention runs in float32. On an encoder's batch that is a large share: all-MiniLM-L6-v2 on 64
short sentences (a Zen 4 core) ran 1.91x eager with blocks, 2.28x with each layer one graph, 2.43x
as one whole-model graph. An encoder layer (BERT's and the models that copy it: a forward of
`hidden_states` and `attention_mask`, every other argument optional, none of a decoder's
positions or cache positions) is traced whole, by dynamo (its forward takes **kwargs, which a
symbolic trace cannot), once per mask form (none, or a mask of one dtype and rank) for all the
layers of one class and parameter shapes, each layer running that graph on its own weights.

A call with anything else than those two inputs (a cache, cross-attention states, attention
weights asked for) runs the layer's own forward, whose blocks stay optimized. Graphs are
prepared, checked against that forward and timed against it per size class as a block's are
(model.OptimizedForward): a layer runs its graph only where the graph measured faster.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.fx import GraphModule
from torch.fx.experimental.symbolic_shapes import is_concrete_int

from ..tracing.trace import trace
from .installed_forward import InstalledForward

_INPUTS = ("hidden_states", "attention_mask")

_DECODER_ARGUMENTS = frozenset({"position_embeddings", "cache_position", "use_cache"})
"""Arguments of decoder layers (Llama's and its kind), whose calls always pass positions: those
layers keep their blocks, untouched by a wrapper that could never run its graph."""

MaskForm = tuple[bool, torch.dtype | None, int]
"""Whether a mask is given, its dtype and rank: a trace holds one."""

TraceKey = tuple[type, MaskForm, tuple[tuple[str, tuple[int, ...], torch.dtype], ...]]

MakeGraphs = Callable[[nn.Module, GraphModule, Callable[..., Any], Callable[..., Any]], Any]
"""`make(layer, traced, original, exact)`: the per-size-class graphs of `traced` for `layer`
(optimize_model's OptimizedForward, not installed), timed against `original` (the layer's
forward over its blocks), each checked to compute what `exact` does (the layer's own code)."""


def applies_to(module: nn.Module) -> bool:
    """A forward of `hidden_states` and `attention_mask` first, every other argument optional and
    none a decoder's, over at least one Linear."""
    try:
        parameters = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return False
    if [p.name for p in parameters[:2]] != list(_INPUTS):
        return False
    if any(p.name in _DECODER_ARGUMENTS for p in parameters):
        return False
    optional = all(
        p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters[1:]
    )
    return optional and any(isinstance(m, nn.Linear) for m in module.modules())


class LayerForward(InstalledForward):
    """An encoder layer's forward: its graph for calls of hidden states and a mask only, its own
    forward for the others."""

    def __init__(self, module: nn.Module, traces: dict[TraceKey, GraphModule | None], make: MakeGraphs) -> None:
        super().__init__(module)
        self.traces = traces  # shared by the layers of one optimize_model call
        self.make = make
        # Per mask form: its graphs and the sizes they take, or None (it did not trace).
        self.forms: dict[MaskForm, tuple[Any, list[list[int | None]]] | None] = {}

    def __call__(self, hidden_states: Any, attention_mask: Any = None, *rest: Any, **options: Any) -> Any:
        if not _plain_call(hidden_states, attention_mask, rest, options):
            return self.original(hidden_states, attention_mask, *rest, **options)
        inputs = (hidden_states,) if attention_mask is None else (hidden_states, attention_mask)
        form = _mask_form(attention_mask)
        if form not in self.forms:
            self.forms[form] = self._graphs(form, inputs)
        graphs = self.forms[form]
        if graphs is None or not _fits(graphs[1], inputs):
            return self.original(hidden_states, attention_mask)
        return graphs[0].graph_for(*inputs)(*inputs)

    def _graphs(self, form: MaskForm, inputs: tuple[torch.Tensor, ...]) -> tuple[Any, list[list[int | None]]] | None:
        key = (type(self.module), form, _parameter_shapes(self.module))
        if key not in self.traces:
            self.traces[key] = _trace(self.module, inputs)
        traced = self.traces[key]
        if traced is None:
            return None
        # The same graph on this layer's own weights: its get_attr targets are paths in a layer.
        own = GraphModule(self.module, copy.deepcopy(traced.graph))
        return self.make(self.module, own, self._over_blocks, self._own_code), _sizes(traced)

    def _over_blocks(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None) -> Any:
        return self.original(hidden_states, attention_mask)

    def _own_code(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None) -> Any:
        with _own_forwards(self.module):
            return self.module(hidden_states, attention_mask)


def _plain_call(hidden_states: Any, attention_mask: Any, rest: tuple[Any, ...], options: dict[str, Any]) -> bool:
    """Only hidden states and a mask (or none): every other argument None or False."""
    return (
        isinstance(hidden_states, torch.Tensor)
        and hidden_states.is_floating_point()
        and (attention_mask is None or isinstance(attention_mask, torch.Tensor))
        and all(value is None or value is False for value in (*rest, *options.values()))
    )


def _mask_form(mask: torch.Tensor | None) -> MaskForm:
    return (False, None, 0) if mask is None else (True, mask.dtype, mask.dim())


def _parameter_shapes(module: nn.Module) -> tuple[tuple[str, tuple[int, ...], torch.dtype], ...]:
    return tuple((name, tuple(t.shape), t.dtype) for name, t in module.named_parameters())


def _trace(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> GraphModule | None:
    """The layer's own computation (its blocks' forwards set aside) traced by dynamo on `inputs`,
    or None where it does not trace or its graph takes one batch size only.

    A batch of one is traced doubled: dynamo fixes dimensions of size 1, and a pipeline's first
    call is one text while later ones (and the many-rows class prepared with it) are batches."""
    with _own_forwards(module), torch.inference_mode(False):
        # Inference tensors (encode() runs under inference_mode) cannot enter dynamo's trace.
        example = {name: t.clone() if t.is_inference() else t for name, t in zip(_INPUTS, inputs)}
        if example["hidden_states"].shape[0] == 1:
            example = {name: torch.cat([t, t]) for name, t in example.items()}
        try:
            traced = trace(module, example_inputs=example, mode="dynamo")
        except Exception:  # noqa: BLE001 - a layer that does not trace keeps its blocks
            return None
    return traced if _sizes(traced)[0][0] is None else None


def _sizes(traced: GraphModule) -> list[list[int | None]]:
    """Per input of `traced`, its dimensions: the size a fixed one must have, None where any."""
    return [
        [int(d) if is_concrete_int(d) else None for d in node.meta["val"].shape]
        for node in traced.graph.find_nodes(op="placeholder")
    ]


def _fits(sizes: list[list[int | None]], inputs: tuple[torch.Tensor, ...]) -> bool:
    """Whether a graph taking `sizes` (`_sizes`) takes `inputs` (its input checks would pass)."""
    return all(
        len(fixed) == t.dim() and all(f is None or f == size for f, size in zip(fixed, t.shape))
        for fixed, t in zip(sizes, inputs, strict=True)
    )


@contextmanager
def _own_forwards(module: nn.Module) -> Iterator[None]:
    """`module` and its submodules with their class's forwards while inside: what a trace must see."""
    installed = [m for m in module.modules() if isinstance(m.__dict__.get("forward"), InstalledForward)]
    taken = [(m, m.__dict__.pop("forward")) for m in installed]
    try:
        yield
    finally:
        for m, forward in taken:
            m.__dict__["forward"] = forward
