"""The "sized" tracer: torch.fx symbolic tracing that knows the example's sizes.

`torch.fx.symbolic_trace` fails wherever a model's Python reads a size as a number:
transformers' ResNet checks its input's channel count (`if num_channels != self.num_channels`),
MobileNetV2 computes TensorFlow padding from `int(features.shape[-2])`, ViT unpacks
`pixel_values.shape`. Dynamo traces them by interpreting every bytecode: 2.2 s of ResNet-50's
preparation and 3.8 s of MobileNetV2's on one Zen 4 core, more than everything else fxopt does.
This tracer records symbolic_trace's graph (modules as `call_module`, the rest as the torch
functions and methods the code calls), and every node also computes its value on fake tensors
of the example's sizes, with the dimensions `dynamic` keeps symbolic (batch, sequence). So where
Python needs a number it gets one:

* a size that is the same for every input the graph takes (a channel count; an image's height
  when heights are fixed) is used as it is, as Dynamo does;
* a number that is a symbolic size (`len(x)`, `int(x.shape[0])`) fixes that size, as Dynamo
  does: the graph's input check then takes the example's size only;
* a truth value that depends on a symbolic size (`seq_len > 1`) is used as the example has it,
  and the graph checks it: a `torch._assert` there raises, naming the model line, on an input
  where it differs (where Dynamo would retrace);
* a number or truth value computed from tensor data (`if mask.all()`) is refused
  (`ValueDependentError`): `fxopt.trace`'s auto mode then uses Dynamo.

No arithmetic runs while tracing (the values are fake); each node keeps its value in
`meta["val"]`, where Dynamo and export graphs keep theirs: the sizes the engine and the kernel
chooser read. Python that runs outside the recorded calls (state a forward writes on its module,
random numbers drawn in Python) is not in any graph fx records; `fxopt.trace` therefore runs the
graph and the model on the example and uses the graph only where the outputs agree bit for bit.
"""

from __future__ import annotations

import operator
import traceback
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.utils import parametrize
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx import Graph, GraphModule, Node, Proxy
from torch.fx.experimental.symbolic_shapes import (
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
    free_symbols,
)
from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo
from torch.fx.node import map_arg
from torch.utils import _pytree as pytree
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy
from torch.fx.proxy import Attribute, TraceError

from .model_frames import describe_frame, innermost_model_frame

_FIXED_ATTRIBUTES = frozenset(
    {"dtype", "device", "ndim", "layout", "is_cuda", "is_sparse", "is_quantized", "is_meta"}
)
"""Tensor attributes no input of the graph can change (Dynamo fixes them too): read from the
value, so `torch.finfo(x.dtype)` works, instead of recorded as graph nodes."""


_KEEPS_SIZES = (
    nn.modules.batchnorm._BatchNorm,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.ReLU,
    nn.Hardtanh,  # ReLU6
    nn.GELU,
    nn.SiLU,
    nn.Sigmoid,
    nn.Tanh,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.Dropout,
    nn.Identity,
)
"""Modules whose output is a tensor like their input (sizes, dtype, layout): its fake value is
made as such, not computed. Fake tensors run ReLU6 and BatchNorm through Python decompositions
that reason about symbolic sizes: 0.34 s for MobileNetV2's 35 ReLU6 and 0.27 s for its 52
BatchNorms, two thirds of its 0.91 s trace (Zen 4 core)."""


_FACTORIES = (torch.ones, torch.zeros, torch.empty, torch.full, torch.rand, torch.randn)
"""Functions whose sizes torch's argument parser takes as plain ints only: given a proxy
(BART's `torch.ones(batch_size, length)` on symbolic sizes) they raise instead of dispatching
to it, so while tracing, a call with a proxy among its arguments is recorded as it is."""


class ValueDependentError(TraceError):
    """The model's Python needs a number or truth value computed from tensor data."""


def trace_sized(
    model: nn.Module, inputs: dict[str, Any], dynamic_dims: dict[str, tuple[int, ...]]
) -> GraphModule:
    """`model`'s graph taking `inputs` by name, traced with their sizes; the dimensions in
    `dynamic_dims` (per input) stay symbolic, the others are the example's."""
    mode = FakeTensorMode(
        # A batch of one stays a symbol, and a batch equal to the sequence length stays a
        # different one: sizes the example happens to have are not what the graph takes.
        shape_env=ShapeEnv(specialize_zero_one=False, duck_shape=False),
        allow_non_fake_inputs=True,
    )
    # Without fake tensors' dispatch cache: a trace runs each op on each layer's shapes once or
    # twice, and an entry for a result of symbolic sizes costs more to make and to read back
    # than the op's own fake run (first trace of GPT-2 1.0 -> 0.65 s, ResNet-50 0.8 -> 0.4 s on
    # a Zen 4 core; Dynamo's traces, which run under AOT's reuse of it, gain nothing).
    mode.cache_enabled = False
    fake_inputs = {
        name: _fake(mode, value, dynamic_dims.get(name, ())) if isinstance(value, torch.Tensor) else value
        for name, value in inputs.items()
    }
    tracer = _SizedTracer(mode, fake_inputs)
    root, output_spec = _keyword_root(model, list(inputs), tracer)
    graph = tracer.trace(root)
    for node in graph.nodes:
        if node.target in _FACTORIES:
            # fx marks an autowrapped call so its code registers the name again when run
            # (`wrap("torch.ones")`), and every later symbolic trace then looks for a global
            # named `torch.ones`: the call needs no such registration, it is torch's function.
            node.meta.pop("is_wrapped", None)
    _record_values(graph, tracer)
    # Like a Dynamo graph: the output node holds the tensors, the code rebuilds the model's
    # output type (a ModelOutput) from them.
    input_spec = pytree.tree_flatten(((), dict.fromkeys(inputs)))[1]
    graph._codegen = _PyTreeCodeGen(_PyTreeInfo(list(inputs), input_spec, output_spec()))
    # The root holds the constants fx lifted (`_tensor_constant0`) besides the model's own tables.
    graph_module = GraphModule(root, graph, type(model).__name__)
    # Sizes Python read as numbers leave their reads unused (checks, being impure, stay).
    graph.eliminate_dead_code()
    graph_module.recompile()
    return graph_module


def _fake(mode: FakeTensorMode, value: torch.Tensor, dynamic: tuple[int, ...]) -> torch.Tensor:
    sizes = [DimDynamic.DYNAMIC if dim in dynamic else DimDynamic.STATIC for dim in range(value.dim())]
    return mode.from_tensor(value, symbolic_context=StatelessSymbolicContext(dynamic_sizes=sizes))


def _keyword_root(
    model: nn.Module, names: list[str], tracer: _SizedTracer
) -> tuple[nn.Module, Callable[[], pytree.TreeSpec]]:
    """A module sharing `model`'s parameters, buffers and submodules whose forward takes exactly
    `names`, passes them to `model.forward` by keyword and returns the leaves of its output;
    and a function giving that output's structure once traced.

    fx makes a placeholder per parameter of the root's forward: the model's own forward may
    take more (optional inputs, `**kwargs`) and be wrapped in decorators that hide its
    signature (transformers' output-capturing ones).
    """
    specs: list[pytree.TreeSpec] = []

    def leaves(output: Any) -> tuple[Any, ...]:
        tracer.flattening_output = True
        try:
            flat, spec = pytree.tree_flatten(output)
        finally:
            tracer.flattening_output = False
        specs.append(spec)
        return tuple(flat)

    parameters = ", ".join(names)
    source = (
        f"def forward(self, {parameters}):\n"
        f"    return leaves(model_forward({', '.join(f'{name}={name}' for name in names)}))\n"
    )
    namespace: dict[str, Any] = {"model_forward": model.forward, "leaves": leaves}
    exec(compile(source, f"<fxopt sized trace of {type(model).__name__}>", "exec"), namespace)
    root_class = type(type(model).__name__, (nn.Module,), {"forward": namespace["forward"]})
    root: nn.Module = nn.Module.__new__(root_class)
    root.__dict__.update({key: value for key, value in model.__dict__.items() if key != "forward"})
    return root, lambda: specs[-1]


def _record_values(graph: Graph, tracer: _SizedTracer) -> None:
    """Each node's fake value as `meta["val"]`: tensors and sizes, as Dynamo records them."""
    for node in graph.nodes:
        value = tracer.values.get(node)
        if isinstance(value, (torch.Tensor, torch.SymInt, torch.SymBool, int)):
            node.meta["val"] = value


class _SizedTracer(torch.fx.Tracer):
    """fx's tracer whose proxies carry their fake values (`values`), so Python can read them."""

    def __init__(self, mode: FakeTensorMode, inputs: dict[str, Any]) -> None:
        super().__init__(autowrap_functions=_FACTORIES)
        # fx wraps those where it finds them: in the traced code's globals and in the modules
        # searched; models call them as attributes of torch.
        self._autowrap_search.append(torch)
        # Buffers (BERT's position_ids) become graph reads: a real buffer meeting a proxy size
        # in `buffer.expand(batch, seq)` would otherwise see the proxy as a number.
        self.proxy_buffer_attributes = True
        self.mode = mode
        self.inputs = inputs
        self.values: dict[Node, Any] = {}
        self._evaluating = 0
        self._recording_check = False
        self.flattening_output = False

    def proxy(self, node: Node) -> Proxy:
        return _SizedProxy(node, self)

    def create_proxy(self, kind: str, target: Any, args: Any, kwargs: Any, *rest: Any, **named: Any) -> Any:
        proxy = super().create_proxy(kind, target, args, kwargs, *rest, **named)
        value = self.values.get(proxy.node)
        if kind in ("call_method", "call_function") and target is not getattr and type(value) in (int, float, bool):
            # A size no input of the graph can change (`x.size(-1)` of the hidden features) is
            # the number itself, as Dynamo makes it: Python computes with it (DeBERTa's
            # `torch.tensor(q.size(-1))`), and the read it came from is dead code.
            return value
        return proxy

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        # A parametrized module (weight_norm's) computes its weight in Python on every call:
        # traced through, as Dynamo does, so the graph holds torch.nn modules only.
        return not parametrize.is_parametrized(m) and super().is_leaf_module(m, module_qualified_name)

    def create_node(self, *args: Any, **kwargs: Any) -> Node:
        node = super().create_node(*args, **kwargs)
        if not self._recording_check:  # a check's nodes hold values the trace already knows
            self._evaluating += 1
            try:
                # torch's Python dispatcher runs the decompositions Dynamo runs, which keep
                # symbolic sizes where some C++ meta kernels give a symbolic batch of one back
                # as a plain 1 (F.pad's).
                with self.mode, enable_python_dispatcher():
                    self.values[node] = self._evaluate(node)
            finally:
                self._evaluating -= 1
        return node

    # While a node's value is computed, modules and attributes are the real ones: fx patches
    # nn.Module's __call__ and __getattr__ for the whole trace.
    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: dict[str, Any]) -> Any:
        if self._evaluating:
            return attr_val
        return super().getattr(attr, attr_val, parameter_proxy_cache)

    def call_module(
        self, m: nn.Module, forward: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if self._evaluating or not self._installed(m):
            # A module the forward makes as it runs (DistilBERT's `nn.ReLU()(x)`) is no
            # submodule a graph could call: traced through, as Dynamo does.
            return forward(*args, **kwargs)
        return super().call_module(m, forward, args, kwargs)

    def _installed(self, m: nn.Module) -> bool:
        try:
            self.path_of_module(m)
        except NameError:
            return False
        return True

    def _evaluate(self, node: Node) -> Any:
        if node.op == "placeholder":
            # fx gives a parameter with a default a placeholder whose argument is that default.
            return self.inputs[node.target] if node.target in self.inputs else (node.args or (None,))[0]
        if node.op == "output":
            return None
        if node.op == "get_attr":
            value: Any = self.root
            for part in str(node.target).split("."):
                value = getattr(value, part)
            if isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor):
                return self.mode.from_tensor(value, static_shapes=True)
            return value
        args = map_arg(node.args, self.values.__getitem__)
        kwargs = map_arg(node.kwargs, self.values.__getitem__)
        if node.op == "call_function":
            return node.target(*args, **kwargs)  # type: ignore[operator]
        if node.op == "call_method":
            receiver, *rest = args
            return getattr(receiver, str(node.target))(*rest, **kwargs)
        assert node.op == "call_module", node.op
        module = self.root.get_submodule(str(node.target))
        x = args[0] if len(args) == 1 and not kwargs else None
        if isinstance(x, torch.Tensor) and isinstance(module, _KEEPS_SIZES):
            return torch.empty_like(x)
        if isinstance(x, torch.Tensor) and type(module) is nn.Linear:
            # Made, not computed: a fake Linear runs matmul's decomposition over symbolic sizes
            # (BERT-base: 13 Linears 113 ms of a 0.52 s trace).
            return x.new_empty((*x.shape[:-1], module.out_features))
        return module(*args, **kwargs)

    def concrete(self, proxy: Proxy, convert: Callable[[Any], Any]) -> Any:
        """`convert(value)` for Python that needs it (`bool`, `int`, `len`, ...); refused where
        it depends on tensor data. Converting a symbolic size fixes it (torch's shape
        environment replaces the symbol, and the input check fixes that input's size); what
        still depends on a symbol afterwards (a comparison) is checked in the graph."""
        value = self.values[proxy.node]
        if isinstance(value, torch.Tensor):
            if convert is not len:
                raise ValueDependentError(
                    f"{convert.__name__}() of the tensor {proxy.node.name}: the trace would keep "
                    "the example's data-dependent branch"
                )
            return len(value)  # a symbolic batch becomes the example's (see above)
        result = convert(value)
        if _symbolic(value) and not _same_above_one(value):
            self._check(proxy, result)
        return result

    def _check(self, measured: Proxy, expected: Any) -> None:
        frame = innermost_model_frame(traceback.extract_stack())
        where = f" ({describe_frame(frame)})" if frame is not None else ""
        message = (
            f"fxopt: the graph was traced where a test of the input sizes is {expected!r}{where}; "
            "it cannot compute for inputs where it differs: trace the model on such inputs"
        )
        self._recording_check = True
        try:
            same = self.create_proxy("call_function", operator.eq, (measured, expected), {})
            self.create_proxy("call_function", torch._assert, (same, message), {})
        finally:
            self._recording_check = False

    def to_bool(self, obj: Proxy) -> bool:
        return bool(self.concrete(obj, bool))

    def iter(self, obj: Proxy) -> Any:
        return iter([obj[i] for i in range(len(obj))])  # type: ignore[index]  # fx adds [] at runtime

    def keys(self, obj: Proxy) -> Any:
        return list(self.values[obj.node].keys())


def _symbolic(value: Any) -> bool:
    return isinstance(value, (torch.SymInt, torch.SymBool, torch.SymFloat)) and bool(free_symbols(value))


def _same_above_one(value: Any) -> bool:
    """Whether a truth value over sizes is the same for every size of 2 or more (`seq_len > 1`):
    it differs only where a size is 0 or 1, which the graph takes as any other size, as a Dynamo
    graph does (`sizes_of_one`), so it needs no check: sdpa_attention's `q_length > 1` would
    otherwise refuse every one-token input, though its result does not change BERT's."""
    if not isinstance(value, torch.SymBool):
        return False
    expr = value.node.expr
    return bound_sympy(expr, {symbol: ValueRanges(2, int_oo) for symbol in expr.free_symbols}).is_singleton()


class _SizedProxy(Proxy):
    """A proxy Python can read numbers from: `len`, `int`, `range(...)`, `float`, fixed
    attributes (`_FIXED_ATTRIBUTES`)."""

    tracer: _SizedTracer

    @property  # type: ignore[misc]  # isinstance() reads __class__ when type() does not match
    def __class__(self) -> type:
        # While the output is flattened, a proxy passes for its value (a tensor, a size):
        # pytree flatteners that look for tensors in an object's attributes (transformers'
        # key/value cache classes) then take the proxies as its leaves.
        if self.tracer.flattening_output:
            return type(self.tracer.values[self._fx_node])
        return type(self)

    @property  # type: ignore[override]
    def node(self) -> Any:
        # A size passing for its value gives its value's symbolic node as well: transformers'
        # flattener asks a size in a cache (a sliding window's length) whether it is a constant
        # through `size.node.maybe_as_int()` (Mistral, Gemma2).
        value = self.tracer.values.get(self._fx_node) if self.tracer.flattening_output else None
        return value.node if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)) else self._fx_node

    @node.setter
    def node(self, node: Node) -> None:
        self._fx_node = node

    def __getattr__(self, name: str) -> Any:
        if name in _FIXED_ATTRIBUTES:
            return getattr(self.tracer.values[self._fx_node], name)
        return _SizedAttribute(self, name)

    def __len__(self) -> int:
        return int(self.tracer.concrete(self, len))

    def __int__(self) -> int:
        return int(self.tracer.concrete(self, int))

    def __index__(self) -> int:
        return int(self.tracer.concrete(self, operator.index))

    def __float__(self) -> float:
        return float(self.tracer.concrete(self, float))


class _SizedAttribute(Attribute, _SizedProxy):
    """`proxy.name`, recorded when first used (fx's Attribute), readable like `_SizedProxy`."""
