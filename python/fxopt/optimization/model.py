"""`fxopt.optimize_model`: the user's model object, its forward running optimized graphs.

`generate()`, `transformers.pipeline` and sentence-transformers' `encode` call the model
object and read its config, so the object itself must stay: only the forwards of its
Linear-heavy blocks change. A block is a submodule whose forward takes one tensor and holds at
least one Linear or 2-D convolution (an MLP, a lone projection, a transformers Conv1D, a CNN's
stage); a decoder's attention, whose forward takes the KV cache, masks and positions, stays
eager, and its projections become blocks of their own. An encoder's layer runs as one graph over
its blocks where that measured faster (layer_forward.py). Each block is traced once (symbolic,
so sizes stay dynamic) and optimized once per input rank, dtype and size class (a decoding step
of a few tokens, or more), on its first call: one graph then serves every sequence and cache
length, so decoding never retraces. A decoding preset
names the preset its prompts' graphs run (`Preset.prompts`: `decode` quantizes weights for the
one-token steps and runs prompts with `fast`). Each graph is
timed against the block's own forward on that first input (on a cold cache, as inside the
model: `fxopt.tuning.measure`; the verdict cached like a kernel choice) and kept only if faster:
which form of a Linear wins depends on the CPU and the number of tokens.

The graphs are not registered as submodules, so `state_dict`, `save_pretrained` and
`parameters()` see the original modules and weights, which no pass changes (passes are
copy-on-write). `restore_model` drops the graphs and gives the original forwards back.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
from collections.abc import Mapping
from typing import Any, TypeVar

import torch
from torch import nn
from torch.fx import GraphModule
from torch.fx.passes.shape_prop import ShapeProp

from .. import tuning
from ..engine import bridge, tensor_ops
from ..runtime import decode_attention, kv_cache
from ..tracing.dummy_inputs import Inputs
from ..tracing.quiet import torch_diagnostics_hidden
from ..tracing.trace import trace
from . import hardware, layer_forward, norm_step
from .presets import get_preset
from .presets import preset as build_preset
from .attention_step import AttentionStep, applies_to
from .installed_forward import InstalledForward
from .sharing_copy import sharing_copy
from .transformation import Transformation

ModelT = TypeVar("ModelT", bound=nn.Module)

_MARK = "_fxopt_optimized_blocks"
"""Attribute of an optimized model: the names of the blocks whose forward fxopt replaced."""

_ATTENTION = "_fxopt_attention"
"""Attribute of an optimized model whose one-token attention runs fxopt's kernel: the attention
implementation it had before (runtime/decode_attention.py)."""

_STEPS = "_fxopt_attention_steps"
"""Attribute of an optimized model: the names of the attention modules whose decoding steps
run as one lean call (attention_step.py)."""

_NORMS = "_fxopt_norm_steps"
"""Attribute of an optimized model: the names of the RMSNorm modules running fxopt's kernel
under a decoding preset (norm_step.py)."""

_LAYERS = "_fxopt_encoder_layers"
"""Attribute of an optimized model: the names of the encoder layers that run as one graph where
that measured faster (layer_forward.py)."""

_KV_HOOK = "_fxopt_kv_cache_hook"
"""Attribute of an optimized model: the handle of its forward pre-hook that makes the
transformers KV cache passed in append in place (runtime/kv_cache.py)."""


FEW_ROWS = 8
"""Inputs of at most this many rows (tokens, over the batch) are decoding steps: the fastest
form of a Linear differs between them and a prefill (weight-only int8 at one token beats
float32 2-3x on an AVX512-BF16 CPU and loses at 128), so each gets its own graph and choice."""


MANY_ROWS = 64
"""Inputs of more rows than this are a size class of their own, apart from smaller prompts: on a
Zen 4 the `fast` graphs of all-MiniLM-L6-v2's blocks measured slower than the blocks' own
forwards at 14 rows (two short sentences: bfloat16 casts around small products) and faster at
1024 (a batch of 64), so a first small call must not decide for large ones."""


class OptimizedForward(InstalledForward):
    """A block's forward: the block's graph optimized for inputs of one rank, dtype and size
    class (decoding step, prompt, or many rows), or the original forward where that measured
    faster.

    Graphs are built on first use of each class; preparing a prefill-sized input prepares the
    one-token class too (its first rows), so decoding starts with nothing left to prepare, and a
    prompt of at most MANY_ROWS rows the many-rows class (the batch repeated), so a first small
    call cannot leave larger ones to a forward it measured at its own size. Where every class
    measured no faster than the block's own forward, the block gets that forward
    back: a decoding step calls dozens of blocks, and on a GPU, where a step is launch- and
    Python-bound, this wrapper's few microseconds a call are what it would cost.
    """

    def __init__(
        self,
        module: nn.Module,
        traced: GraphModule,
        preset: str,
        model_bytes: int,
        original: Any = None,
        exact: Any = None,
    ) -> None:
        super().__init__(module)
        # Graphs for a forward other than the module's own (layer_forward.py): `original` runs
        # where they measured slower, `exact` computes what the trace must (default: original).
        if original is not None:
            self.original = original
        self.exact = exact or self.original
        self.model_bytes = model_bytes  # the whole model's weights, which a forward reads
        self.traced = traced
        self.traced_code = traced.code
        self.preset = preset
        self.prompt_preset = get_preset(preset).prompts or preset
        self.tensors: list[torch.Tensor] = []  # what this block's graphs made, for _share_tensors
        self.own = {id(t) for t in itertools.chain(traced.parameters(), traced.buffers())}
        self.graphs: dict[tuple[int, torch.dtype, bool, bool], Any] = {}
        # False for a projection whose one-token steps another forward runs (attention_step.py's
        # stacked q, k, v): its steps' graph is then prepared only if a step ever reaches it.
        self.steps_ahead = True

    def __call__(self, x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return self.original(x)
        return self.graph_for(x)(x)

    def graph_for(self, *inputs: torch.Tensor) -> Any:
        """What runs `inputs` (the main tensor first): the graph of their size class, prepared
        now if it is the first of its class. One input's first call prepares its one-token
        class too; every first call below MANY_ROWS, the many-rows class (the batch repeated)."""
        key = _size_class(inputs[0])
        run = self.graphs.get(key)
        if run is None:
            with tensor_ops.views_reused():
                run = self._prepare_classes(key, inputs)
        return run

    def _prepare_classes(self, key: tuple[int, torch.dtype, bool, bool], inputs: tuple[torch.Tensor, ...]) -> Any:
        run = self.graphs[key] = self.prepare(*inputs)
        if not key[2] and inputs[0].dim() >= 2:
            step = _probe(inputs)  # an image's rows are no decoding step, nor a mask's
            if self.steps_ahead and step is not inputs:
                self._prepare_also(*step)
            if not key[3]:
                copies = MANY_ROWS // _rows(inputs[0]) + 1
                self._prepare_also(*(torch.cat([t] * copies) for t in inputs))
        if len(self.graphs) > 1 and all(graph is self.original for graph in self.graphs.values()):
            self.uninstall()  # nothing left to run here (see the class); no-op where not installed
        return run

    def _prepare_also(self, *inputs: torch.Tensor) -> None:
        if _size_class(inputs[0]) not in self.graphs:
            self.graphs[_size_class(inputs[0])] = self.prepare(*inputs)

    def prepare(self, *inputs: torch.Tensor) -> Any:
        """The graph for inputs like these, or the original forward: if the preset changes
        nothing, if the trace does not compute what the block does on them (a trace fixes what
        the block read outside its input when traced), or if the graph is not faster on them."""
        # Passes store new tensors (an int8 weight) under their module's path: into the copy's
        # tables, not the user's model, whose state_dict and save_pretrained stay as they were.
        graph = sharing_copy(self.traced)
        with torch.no_grad():
            # One run of the graph records sizes and dtypes, which the passes need. A trace
            # computes what the block does on these inputs if it does on their first row (probe):
            # a symbolic trace cannot take a branch by an input's size or values, only fix one
            # by state outside them. Two float32 runs of every block at a prompt's size were a
            # fifth of a 95M Llama's preparation.
            traced = ShapeProp(graph).propagate(*inputs)
            probe = _probe(inputs)
            if not _same(traced if probe is inputs else graph(*probe), self.exact(*probe)):
                return self.original
        name = self.preset if _size_class(inputs[0])[2] else self.prompt_preset
        transformation: Transformation = build_preset(name, inplace=True, device=inputs[0].device)
        # The kernels are timed as the model runs them: from memory where its weights, not
        # this block's, are more than the cache holds (a decoding step of a Llama).
        with tuning.current().reading(self.model_bytes):
            optimized = transformation(graph)
        if optimized.code == self.traced_code:
            return self.original
        bridge.detach(optimized)  # its session's tensor table would keep what follows alive
        _drop_unread_tensors(optimized)
        # The forward itself: nn.Module.__call__'s hook handling costs more than a decoding
        # step's small graphs save, and nobody can register hooks on these private graphs.
        run = optimized.forward
        # Timed once per machine, block code and input shape (the chooser's cache).
        codes = [_digest(self.traced_code), _digest(optimized.code)]
        sizes = [item for t in inputs for item in (list(t.shape), str(t.dtype))]
        key = json.dumps(["optimize_model", *codes, *sizes])
        if not tuning.current().prefers_rewrite(key, lambda: run(*inputs), lambda: self.original(*inputs)):
            return self.original
        _share_tensors(optimized, self.tensors, self.own)  # a graph kept: nothing held in vain
        return run


def _probe(inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """A sequence's first row where the inputs are tokens only ([batch,] sequence, features):
    what a trace is checked on and what a decoding step's class is prepared from. Else the
    inputs themselves."""
    x = inputs[0]
    if len(inputs) == 1 and 2 <= x.dim() <= 3 and x.shape[-2] > 1:
        return (x.narrow(-2, 0, 1),)
    return inputs


def _size_class(x: torch.Tensor) -> tuple[int, torch.dtype, bool, bool]:
    """Rank, dtype, whether a decoding step (FEW_ROWS), whether many rows (MANY_ROWS)."""
    rows = _rows(x)
    return x.dim(), x.dtype, rows <= FEW_ROWS, rows > MANY_ROWS


def _rows(x: torch.Tensor) -> int:
    return x.numel() // max(x.shape[-1], 1) if x.dim() else 1


def _digest(code: str) -> str:
    return hashlib.sha1(code.encode()).hexdigest()[:16]


def _same(a: Any, b: Any) -> bool:
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)


def _drop_unread_tensors(graph: GraphModule) -> None:
    """Drops from `graph`'s own module copies the tensors its code no longer reads: the float32
    weights the passes replaced with int8 or bfloat16 copies (or a transposed Linear weight),
    which a transformation keeps for its reversal. These graphs are never reversed
    (restore_model drops them), and the copies were most of their memory: GPT-2 under
    `decode` held 1.0 GB of new tensors, 0.65 GB of them float32 nothing read."""
    read = {str(node.target) for node in graph.graph.nodes if node.op == "get_attr"}
    called = [str(node.target) for node in graph.graph.nodes if node.op == "call_module"]
    for path, module in graph.named_modules():
        if any(path == c or path.startswith(c + ".") for c in called):
            continue  # a module the graph calls reads its own tensors
        prefix = f"{path}." if path else ""
        for table in _tensor_tables(module):
            for name in [n for n, v in table.items() if isinstance(v, torch.Tensor) and prefix + n not in read]:
                del table[name]


def _share_tensors(graph: GraphModule, held: list[torch.Tensor], own: set[int]) -> None:
    """Points `graph` at an equal tensor another graph of the same block already made (the
    prompt's and the steps' graphs both transpose GPT-2's Conv1D weights, say), so the block
    keeps one copy, and packs it once; adds the rest to `held`. The passes' tensors only: the
    block's own (ids in `own`) stay what they are, whatever their values. Nothing writes these."""
    for module in graph.modules():
        for table in _tensor_tables(module):
            for name, value in list(table.items()):
                if not isinstance(value, torch.Tensor) or id(value) in own:
                    continue
                same = next((t for t in held if _equal_tensor(t, value)), None)
                if same is None:
                    held.append(value)
                elif same is not value:
                    table[name] = same


def _tensor_tables(module: nn.Module) -> tuple[dict[str, Any], ...]:
    """Where a module keeps tensors: parameters, buffers and plain attributes."""
    return module._parameters, module._buffers, module.__dict__


def _equal_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and a.stride() == b.stride()
        and a.device == b.device
        and type(a) is type(b)
        and bool(torch.equal(a, b))
    )


def _is_block(module: nn.Module) -> bool:
    """A forward of exactly one required tensor argument, over at least one Linear or 2-D
    convolution (an image classifier's stages: an image-classification pipeline)."""
    try:
        parameters = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return False
    if len(parameters) != 1 or parameters[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        return False
    # transformers' Conv1D (GPT-2) is a Linear with a transposed weight.
    return any(isinstance(m, (nn.Linear, nn.Conv2d)) or type(m).__name__ == "Conv1D" for m in module.modules())


def _install(module: nn.Module, name: str, preset: str, installed: list[str], model_bytes: int) -> None:
    """Makes `module` (or, where it cannot be a block, its children) run optimized graphs."""
    if name and _is_block(module):
        try:
            traced = trace(module, mode="symbolic")
        except Exception:  # noqa: BLE001 - any trace failure: its children may still trace
            traced = None
        if traced is not None:
            module.forward = OptimizedForward(module, traced, preset, model_bytes)  # type: ignore[method-assign]
            installed.append(name)
            return
    for child_name, child in module.named_children():
        _install(child, f"{name}.{child_name}" if name else child_name, preset, installed, model_bytes)


def _install_layers(model: nn.Module, preset: str, model_bytes: int) -> tuple[str, ...]:
    """Gives each encoder layer (layer_forward.py) a forward running it as one graph, over the
    blocks installed in it, which its other calls and its measured-slower size classes run."""
    traces: dict[Any, Any] = {}  # one trace per layer class, mask form and parameter shapes

    def graphs(layer: nn.Module, traced: GraphModule, original: Any, exact: Any) -> OptimizedForward:
        return OptimizedForward(layer, traced, preset, model_bytes, original, exact)

    names: list[str] = []
    for name, module in model.named_modules():
        inside = any(name.startswith(f"{layer}.") for layer in names)  # BERT's attention within its layer
        if name and not inside and layer_forward.applies_to(module):
            module.forward = layer_forward.LayerForward(module, traces, graphs)  # type: ignore[method-assign]
            names.append(name)
    return tuple(names)


def _install_attention_steps(model: nn.Module, preset: str, model_bytes: int) -> tuple[str, ...]:
    """Gives each attention module whose decoding steps attention_step.py runs that forward; its
    stacked projections are one more block, prepared for one-token steps with `preset`."""

    def prepare(block: nn.Module, traced: GraphModule, x: torch.Tensor) -> Any:
        forward = OptimizedForward(block, traced, preset, model_bytes)
        run = forward.prepare(x)
        return None if run is forward.original else run

    names = []
    for name, module in model.named_modules():
        if applies_to(module):
            step = module.forward = AttentionStep(module, prepare)  # type: ignore[method-assign]
            for projection in step.layout.stacked:
                forward = module.get_submodule(projection).__dict__.get("forward")
                if isinstance(forward, OptimizedForward):
                    forward.steps_ahead = False
            names.append(name)
    return tuple(names)


def optimize_model(model: ModelT, preset: str = "default", *, calibration: Inputs | None = None) -> ModelT:
    """`model` itself, its Linear-heavy blocks running graphs optimized with `preset`, its
    encoder layers (BERT's) whole graphs where faster (layer_forward.py), and, on
    the CPU, a transformers KV cache passed to it appending in place (runtime/kv_cache.py: the
    same values, without copying the cache every step); under a decoding preset, one-token
    steps of its attention through fxopt's kernel (runtime/decode_attention.py), those of
    Llama-style and GPT-2 attention modules as one call (attention_step.py).

    The class, config, `generate`, hooks and `save_pretrained` (of the original weights) stay;
    ``fxopt.restore_model(model)`` undoes it. Graphs are prepared on each block's first call;
    `calibration` (one tensor, a tuple of positional or a dict of keyword arguments) is run
    through the model once now so the first real call pays nothing. The model must be in eval
    mode and stay on its device and dtype (convert it first, then optimize).
    """
    if getattr(model, _MARK, None) is not None:
        raise ValueError("this model is optimized already; fxopt.restore_model(model) first")
    build_preset(preset)  # an unknown preset fails here, not on the first call
    installed: list[str] = []
    model_bytes = tuning.weight_bytes(itertools.chain(model.parameters(), model.buffers()))
    with torch_diagnostics_hidden():  # once for all the blocks' traces
        _install(model, "", preset, installed, model_bytes)
    object.__setattr__(model, _MARK, tuple(installed))
    object.__setattr__(model, _LAYERS, _install_layers(model, preset, model_bytes))
    # A GPU copies a step's cache in microseconds, and the hook's Python cost more: GPT-2 on an
    # H200 decoded 1.13x eager with it, 1.20x without (bench/results/generate_gpu_h200.md).
    if hardware.model_device(model).type == "cpu":
        hook = model.register_forward_pre_hook(kv_cache.grow_in_place, with_kwargs=True)
        object.__setattr__(model, _KV_HOOK, hook)
        if get_preset(preset).decode_attention:
            object.__setattr__(model, _NORMS, norm_step.install(model))
            if previous := decode_attention.install(model):
                object.__setattr__(model, _ATTENTION, previous)
                object.__setattr__(model, _STEPS, _install_attention_steps(model, preset, model_bytes))
    if calibration is not None:
        with torch.no_grad():
            if isinstance(calibration, Mapping):
                model(**calibration)
            elif isinstance(calibration, (tuple, list)):
                model(*calibration)
            else:
                model(calibration)
    return model


def optimized_blocks(model: nn.Module) -> tuple[str, ...]:
    """The names of the blocks `optimize_model` gave optimized forwards; () if none."""
    return tuple(getattr(model, _MARK, ()))


def restore_model(model: ModelT) -> ModelT:
    """`model` with its original forwards back (weights were never changed); returns it."""
    others = (model.__dict__.pop(key, ()) for key in (_LAYERS, _STEPS, _NORMS))
    for name in (*optimized_blocks(model), *itertools.chain(*others)):
        forward = model.get_submodule(name).__dict__.get("forward")
        if isinstance(forward, InstalledForward):
            forward.uninstall()
    if _MARK in model.__dict__:
        del model.__dict__[_MARK]
    hook = model.__dict__.pop(_KV_HOOK, None)
    if hook is not None:
        hook.remove()
    previous = model.__dict__.pop(_ATTENTION, None)
    if previous is not None:
        decode_attention.uninstall(model, previous)
    return model
