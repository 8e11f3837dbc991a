"""What int8 calibration measures in a few forward runs: which Linears `QuantizeLinearsInt8` and
which convolutions `QuantizeConvsInt8` keep in float, the convolutions' input scales, and
`SmoothLinearInputs`' factors.

Calibration runs the float graph in a torch.fx Interpreter that can stand an int8 op in for any
Linear or convolution node: the very kernel the pass gives that node (for a Linear the one its
kernel choice picked, `tuning.kernels.int8_linear`: per-token activation scales through
aten._int_mm, or one scale per tensor through oneDNN's or fbgemm's packed GEMMs; for a
convolution oneDNN's int8 convolution with the calibrated input scale), with its weight
quantized as the pass quantizes it. Which nodes run in int8 is a parameter of a run, so
1. one run gives the reference outputs, one more with every node in int8 whether that mix
   meets the bound (minimum cosine over the float outputs);
2. if not, one run measures every node's own sensitivity (relative error of its int8 output
   against its float output, on the float model's activations), and each step of a bisection
   over how many of the most sensitive nodes to keep is one more run, with every other node in
   int8, compared with the reference.
No transformed copy of the model is made until the answer is known: BERT-base took 117 s with a
transformed deep copy per Linear, this takes a forward pass per step (two where every node
goes int8, else about log2(#nodes) + 3).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch.fx import GraphModule, Interpreter, Node

from ..runtime import static_int8_conv
from ..tracing.dummy_inputs import Inputs, split_inputs
from ..tuning import kernels
from ..verification.verify import cosine_similarity

_FUNCTIONAL_LINEARS = (F.linear, torch._C._nn.linear, torch.ops.aten.linear.default)
_FUNCTIONAL_CONVS = (F.conv2d, torch.conv2d, torch.ops.aten.conv2d.default)

Int8Op = Callable[[torch.Tensor], torch.Tensor]
StandInOperands = tuple[torch.Tensor, Callable[[], Int8Op]] | None
StandIn = Callable[[Interpreter, Node], StandInOperands]
"""For a node about to run: its input and how to make its int8 op (called once per calibration),
or None if the node is in no form read here."""


def _linear_operands(
    interpreter: Interpreter, n: Node
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None:
    """x, weight and bias of a Linear node about to run, or None if `n` is no Linear spelled in
    a form read here (an nn.Linear module call or a functional linear)."""
    args, kwargs = interpreter.fetch_args_kwargs_from_env(n)
    if n.op == "call_module":
        module = interpreter.fetch_attr(str(n.target))
        if isinstance(module, torch.nn.Linear):
            return args[0], module.weight, module.bias
    if n.op == "call_function" and n.target in _FUNCTIONAL_LINEARS:
        bias = args[2] if len(args) > 2 else kwargs.get("bias")
        return args[0], args[1], bias
    return None


def linear_stand_in(kernel_of: Mapping[str, str], outliers: Mapping[str, Sequence[int]] | None = None) -> StandIn:
    """Each Linear node's int8 Linear with the kernel `kernel_of` names for it (and its
    `outliers` channels left to their float product)."""

    def stand_in(interpreter: Interpreter, n: Node) -> StandInOperands:
        operands = _linear_operands(interpreter, n)
        if operands is None:
            return None
        x, weight, bias = operands
        return x, lambda: kernels.int8_linear(kernel_of[n.name], weight, bias, (outliers or {}).get(n.name, ()))

    return stand_in


def _pair(value: Any) -> list[int]:
    return [int(value)] * 2 if isinstance(value, int) else [int(v) for v in value]


Geometry = tuple[list[int], list[int], list[int], int]
"""A convolution's stride, padding, dilation and groups."""


def _conv_operands(
    interpreter: Interpreter, n: Node
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, Geometry] | None:
    """x, weight, bias and geometry of a 2-D convolution node about to run, with zero padding
    given as numbers, or None."""
    args, kwargs = interpreter.fetch_args_kwargs_from_env(n)
    if n.op == "call_module":
        m = interpreter.fetch_attr(str(n.target))
        if not isinstance(m, torch.nn.Conv2d) or m.padding_mode != "zeros" or isinstance(m.padding, str):
            return None
        return args[0], m.weight, m.bias, (_pair(m.stride), _pair(m.padding), _pair(m.dilation), m.groups)
    if n.op == "call_function" and n.target in _FUNCTIONAL_CONVS:
        names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
        defaults: tuple[Any, ...] = (None, None, None, 1, 0, 1, 1)
        x, weight, bias, stride, padding, dilation, groups = (
            args[i] if i < len(args) else kwargs.get(name, default)
            for i, (name, default) in enumerate(zip(names, defaults))
        )
        if isinstance(padding, str):
            return None
        return x, weight, bias, (_pair(stride), _pair(padding), _pair(dilation), int(groups))
    return None


def conv_stand_in(input_scales: Mapping[str, tuple[float, int]]) -> StandIn:
    """Each convolution node's int8 convolution (static_int8_conv) with its calibrated input
    scale and zero point, its weight quantized per output channel as QuantizeConvsInt8 does."""

    def stand_in(interpreter: Interpreter, n: Node) -> StandInOperands:
        operands = _conv_operands(interpreter, n)
        if operands is None or operands[0].dim() != 4:
            return None
        x, weight, bias, geometry = operands

        def make() -> Int8Op:
            values, scales = static_int8_conv.quantize_weight(weight)
            scale, zero_point = input_scales[n.name]
            stride, padding, dilation, groups = geometry
            return lambda x: static_int8_conv.int8_conv2d(
                x, values, scales, bias, stride, padding, dilation, groups, scale, zero_point, None, "none", [], None
            )

        return x, make

    return stand_in


def conv_input_nodes(gm: GraphModule, names: Iterable[str]) -> dict[str, Node]:
    """The input node of each convolution node named (its first operand)."""
    wanted = set(names)
    return {n.name: n.args[0] for n in gm.graph.nodes if n.name in wanted and n.args and isinstance(n.args[0], Node)}


class _InputExtremes(Interpreter):
    """Runs the float graph, keeping the smallest and largest value of each named node's input."""

    def __init__(self, gm: GraphModule, names: Iterable[str]) -> None:
        super().__init__(gm)
        self.inputs = conv_input_nodes(gm, names)
        self.extremes: dict[str, tuple[float, float]] = {}

    def run_node(self, n: Node) -> Any:
        if n.name in self.inputs:
            x = self.env[self.inputs[n.name]]
            if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel():
                low, high = float(x.min()), float(x.max())
                if n.name in self.extremes:
                    low, high = min(low, self.extremes[n.name][0]), max(high, self.extremes[n.name][1])
                self.extremes[n.name] = (low, high)
        return super().run_node(n)


def input_scales(gm: GraphModule, names: Iterable[str], inputs: Sequence[Inputs]) -> dict[str, tuple[float, int]]:
    """For each named convolution, the uint8 quantization of its input over `inputs` (one
    forward run each; static_int8_conv.input_quantization of its range)."""
    run = _InputExtremes(gm, names)
    with torch.no_grad():
        for batch in inputs:
            run.run(*_positional(gm, batch))
    scales: dict[str, tuple[float, int]] = {}
    for name, (low, high) in run.extremes.items():
        if (quantization := static_int8_conv.input_quantization(low, high)) is not None:
            scales[name] = quantization
    return scales


class _Int8Simulation(Interpreter):
    """Runs the float graph, standing int8 ops in for the nodes in `simulated` and recording,
    for every node in `measured`, its own relative int8 error. `int8` holds each node's int8
    op, made on first use (its weight quantized once per calibration)."""

    def __init__(
        self,
        gm: GraphModule,
        stand_in: StandIn,
        int8: dict[str, Int8Op],
        simulated: Iterable[str] = (),
        measured: Iterable[str] = (),
    ) -> None:
        super().__init__(gm)
        self.stand_in = stand_in
        self.int8 = int8
        self.simulated = set(simulated)
        self.measured = set(measured)
        self.errors: dict[str, float] = {}

    def run_node(self, n: Node) -> Any:
        if n.name not in self.simulated and n.name not in self.measured:
            return super().run_node(n)
        operands = self.stand_in(self, n)
        result = super().run_node(n)
        if operands is None:  # a node spelled in a form not simulated here: left in float
            self.errors[n.name] = float("inf")
            return result
        x, make = operands
        if n.name not in self.int8:
            self.int8[n.name] = make()
        int8 = self.int8[n.name](x)
        if n.name in self.measured:
            self.errors[n.name] = float((int8.float() - result.float()).norm() / result.float().norm().clamp_min(1e-30))
        return int8 if n.name in self.simulated else result


def _positional(gm: GraphModule, inputs: Inputs) -> list[Any]:
    """`inputs` in the order of the graph's placeholders, defaults filled in."""
    args, kwargs = split_inputs(inputs)
    bound = inspect.signature(gm.forward).bind(*args, **kwargs)
    bound.apply_defaults()
    return list(bound.arguments.values())


def _float_leaves(output: Any) -> list[torch.Tensor]:
    return [leaf for leaf in pytree.tree_leaves(output) if isinstance(leaf, torch.Tensor) and leaf.is_floating_point()]


def _min_cosine(expected: list[torch.Tensor], actual: list[torch.Tensor]) -> float:
    cosines = [cosine_similarity(e, a) for e, a in zip(expected, actual, strict=True)]
    return min((c for c in cosines if c is not None), default=1.0)


class Calibration:
    """The int8 sensitivity of a graph's Linears or convolutions on given inputs, and cosines
    of any mix.

    `nodes` are the nodes that may go int8, `stand_in` makes their int8 ops
    (:func:`linear_stand_in`, :func:`conv_stand_in`)."""

    def __init__(self, gm: GraphModule, nodes: Iterable[str], stand_in: StandIn, inputs: Inputs) -> None:
        self.gm = gm
        self.stand_in = stand_in
        self.nodes = list(nodes)
        self.inputs = _positional(gm, inputs)
        self._int8: dict[str, Int8Op] = {}
        with torch.no_grad():
            self.reference = _float_leaves(self._run().run(*self.inputs))
        self.runs = 1
        self._sensitivity: dict[str, float] | None = None
        self._references: dict[int, list[torch.Tensor]] = {}

    @property
    def sensitivity(self) -> dict[str, float]:
        """Each node's relative int8 error on the float model's activations: one more run, made
        when first asked for (a mix that keeps none in float needs no order)."""
        if self._sensitivity is None:
            run = self._run(measured=self.nodes)
            with torch.no_grad():
                run.run(*self.inputs)
            self._sensitivity = run.errors
            self.runs += 1
        return self._sensitivity

    def by_sensitivity(self) -> list[str]:
        """The nodes, most sensitive first."""
        return sorted(self.nodes, key=self.sensitivity.__getitem__, reverse=True)

    def min_cosine(self, keep: Iterable[str], inputs: Inputs | None = None) -> float:
        """Minimum cosine over the float outputs with every node but `keep` in int8, on the
        calibration inputs or on other `inputs` (a held-out check)."""
        kept = set(keep)
        simulated = [name for name in self.nodes if name not in kept]
        args = self.inputs if inputs is None else _positional(self.gm, inputs)
        with torch.no_grad():
            if inputs is None:
                reference = self.reference
            else:
                if id(inputs) not in self._references:
                    self._references[id(inputs)] = _float_leaves(self._run().run(*args))
                reference = self._references[id(inputs)]
            actual = _float_leaves(self._run(simulated=simulated).run(*args))
        self.runs += 1
        return _min_cosine(reference, actual)

    def _run(self, simulated: Iterable[str] = (), measured: Iterable[str] = ()) -> _Int8Simulation:
        return _Int8Simulation(self.gm, self.stand_in, self._int8, simulated, measured)


def fewest_kept(
    calibration: Calibration, min_cosine: float, held_out: Sequence[Inputs] = ()
) -> list[str]:
    """The shortest prefix of the nodes by sensitivity that, kept in float, keeps the
    outputs at cosine >= `min_cosine` on the calibration inputs (none at all first, then a
    bisection). If a held-out input then falls below the bound, the calibration's bound is
    tightened (its distance to 1 halved) and the search repeated, up to four times; then every
    Linear is kept."""
    target, kept = min_cosine, list[str]()
    for _ in range(5):
        # A tighter bound never needs fewer nodes kept: search above the last answer.
        kept = _bisect(calibration, target, len(kept))
        if all(calibration.min_cosine(kept, inputs) >= min_cosine for inputs in held_out):
            return kept
        target = 1 - (1 - target) / 2
    return calibration.by_sensitivity()


def _bisect(calibration: Calibration, min_cosine: float, low: int) -> list[str]:
    # Every node in int8 first: where that holds (per-token Linears with their outlier channels
    # set aside often do), no order is needed and one run answers.
    if low == 0 and calibration.min_cosine(()) >= min_cosine:
        return []
    ordered = calibration.by_sensitivity()
    low, high = max(low, 1), len(ordered)  # keeping all of them certainly meets the bound
    while low < high:
        middle = (low + high) // 2
        if calibration.min_cosine(ordered[:middle]) >= min_cosine:
            high = middle
        else:
            low = middle + 1
    return ordered[:low]


class _InputRanges(Interpreter):
    """Runs the float graph, keeping for every Linear its input's largest |x| per channel (over
    all tokens) and its weight."""

    def __init__(self, gm: GraphModule) -> None:
        super().__init__(gm)
        self.ranges: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def run_node(self, n: Node) -> Any:
        operands = _linear_operands(self, n) if n.op in ("call_module", "call_function") else None
        if operands is not None and operands[0].is_floating_point():
            x, weight, _ = operands
            peak = x.detach().abs().reshape(-1, x.shape[-1]).amax(0).float()
            if n.name in self.ranges:
                peak = torch.maximum(peak, self.ranges[n.name][0])
            self.ranges[n.name] = (peak, weight)
        return super().run_node(n)


OUTLIER_SPREAD = 4.0
"""An input channel is an outlier when its calibrated range exceeds this many times the median
channel's."""

MOST_OUTLIERS = 8
"""At most this many outlier channels a Linear gets: each costs a float multiply-add per output
and token (the kernel choice times the int8 kernels with the Linear's count, rounded up to a
power of two), and a Linear whose outliers are not a few is not helped by setting some aside
(all-MiniLM-L6-v2's FFN outputs: 1.3-3.0% error with none, with eight, or smoothed)."""


def outlier_channels(gm: GraphModule, inputs: Inputs, names: Iterable[str] | None = None) -> dict[str, list[int]]:
    """For each named Linear (None: every one) whose input has outlier channels on `inputs`
    (range above OUTLIER_SPREAD times the median channel's), the largest
    MOST_OUTLIERS of them, ascending. One forward run. On all-MiniLM-L6-v2 this
    cuts the per-token int8 error of the query, key, value and FFN-input Linears (a LayerNorm's
    output) from 1.6-3.6% to 0.4-1.1%."""
    wanted = None if names is None else set(names)
    run = _InputRanges(gm)
    with torch.no_grad():
        run.run(*_positional(gm, inputs))
    channels: dict[str, list[int]] = {}
    for name, (peak, _) in run.ranges.items():
        outlying = peak > OUTLIER_SPREAD * peak.median()
        if (wanted is None or name in wanted) and bool(outlying.any()):
            count = min(int(outlying.sum()), MOST_OUTLIERS)
            channels[name] = sorted(int(c) for c in peak.topk(count).indices)
    return channels


def smoothing_factors(gm: GraphModule, inputs: Inputs, alpha: float, spread: float) -> dict[str, list[float]]:
    """SmoothQuant's factors for the Linears of `gm` whose input has outlier channels on
    `inputs`: where the largest per-channel range is more than `spread` times the median one,
    s_j = max|x_j|^alpha / max|W[:, j]|^(1 - alpha) (1 where either is 0). One forward run."""
    run = _InputRanges(gm)
    with torch.no_grad():
        run.run(*_positional(gm, inputs))
    factors: dict[str, list[float]] = {}
    for name, (peak, weight) in run.ranges.items():
        if peak.max() <= spread * peak.median():
            continue
        weight_peak = weight.detach().abs().amax(0).float()
        s = peak.pow(alpha) / weight_peak.pow(1 - alpha)
        s = torch.where((peak > 0) & (weight_peak > 0) & torch.isfinite(s), s, torch.ones_like(s))
        factors[name] = s.tolist()
    return factors
