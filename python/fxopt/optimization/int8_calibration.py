"""What int8 calibration measures in a few forward runs: which Linears `QuantizeLinearsInt8`
keeps in float, and `SmoothLinearInputs`' factors.

Calibration runs the float graph in a torch.fx Interpreter that can stand an int8 Linear in
for any Linear node: the very kernel the pass's kernel choice gave that Linear
(`tuning.kernels.int8_linear`: per-token activation scales through aten._int_mm, or one scale
per tensor through oneDNN's or fbgemm's packed GEMMs), with its weight quantized as the pass
quantizes it. Which Linears run in int8 is a parameter of a run, so
1. one run measures every Linear's own sensitivity (relative error of its int8 output against
   its float output, on the float model's activations) and the reference outputs;
2. each step of a bisection over how many of the most sensitive Linears to keep is one more
   run, with every other Linear in int8, compared with the reference (minimum cosine over the
   float outputs).
No transformed copy of the model is made until the answer is known: BERT-base took 117 s with a
transformed deep copy per Linear, this takes a forward pass per step (about log2(#Linears) + 2).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch.fx import GraphModule, Interpreter, Node

from ..tracing.dummy_inputs import Inputs, split_inputs
from ..tuning import kernels
from ..verification.verify import cosine_similarity

_FUNCTIONAL_LINEARS = (F.linear, torch._C._nn.linear, torch.ops.aten.linear.default)

Int8Linear = Callable[[torch.Tensor], torch.Tensor]


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


class _Int8Simulation(Interpreter):
    """Runs the float graph, standing int8 Linears in for the nodes in `simulated` and
    recording, for every node in `measured`, its own relative int8 error. `int8` holds each
    node's int8 Linear, made on first use (its weight quantized once per calibration)."""

    def __init__(
        self,
        gm: GraphModule,
        kernel_of: Mapping[str, str],
        int8: dict[str, Int8Linear],
        simulated: Iterable[str] = (),
        measured: Iterable[str] = (),
    ) -> None:
        super().__init__(gm)
        self.kernel_of = kernel_of
        self.int8 = int8
        self.simulated = set(simulated)
        self.measured = set(measured)
        self.errors: dict[str, float] = {}

    def run_node(self, n: Node) -> Any:
        if n.name not in self.simulated and n.name not in self.measured:
            return super().run_node(n)
        operands = _linear_operands(self, n)
        result = super().run_node(n)
        if operands is None:  # a Linear spelled in a form not simulated here: left in float
            self.errors[n.name] = float("inf")
            return result
        x, weight, bias = operands
        if n.name not in self.int8:
            self.int8[n.name] = kernels.int8_linear(self.kernel_of[n.name], weight, bias)
        int8 = self.int8[n.name](x)
        if n.name in self.measured:
            self.errors[n.name] = float((int8 - result).norm() / result.norm().clamp_min(1e-30))
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
    """The int8 sensitivity of a graph's Linears on given inputs, and cosines of any mix.

    `kernels` maps each Linear node that may go int8 to the kernel it gets
    (``int8_per_token``, ``int8_onednn``, ``int8_fbgemm``)."""

    def __init__(self, gm: GraphModule, kernels: Mapping[str, str], inputs: Inputs) -> None:
        self.gm = gm
        self.kernels = dict(kernels)
        self.linears = list(kernels)
        self.inputs = _positional(gm, inputs)
        self._int8: dict[str, Int8Linear] = {}
        with torch.no_grad():
            run = self._run(measured=self.linears)
            self.reference = _float_leaves(run.run(*self.inputs))
        self.sensitivity = run.errors
        self.runs = 1
        self._references: dict[int, list[torch.Tensor]] = {}

    def by_sensitivity(self) -> list[str]:
        """The Linears, most sensitive first."""
        return sorted(self.linears, key=self.sensitivity.__getitem__, reverse=True)

    def min_cosine(self, keep: Iterable[str], inputs: Inputs | None = None) -> float:
        """Minimum cosine over the float outputs with every Linear but `keep` in int8, on the
        calibration inputs or on other `inputs` (a held-out check)."""
        kept = set(keep)
        simulated = [name for name in self.linears if name not in kept]
        args = self.inputs if inputs is None else _positional(self.gm, inputs)
        with torch.no_grad():
            if inputs is None:
                reference = self.reference
            else:
                if id(inputs) not in self._references:
                    self._references[id(inputs)] = _float_leaves(self.gm(*args))
                reference = self._references[id(inputs)]
            actual = _float_leaves(self._run(simulated=simulated).run(*args))
        self.runs += 1
        return _min_cosine(reference, actual)

    def _run(self, simulated: Iterable[str] = (), measured: Iterable[str] = ()) -> _Int8Simulation:
        return _Int8Simulation(self.gm, self.kernels, self._int8, simulated, measured)


def fewest_kept(
    calibration: Calibration, min_cosine: float, held_out: Sequence[Inputs] = ()
) -> list[str]:
    """The shortest prefix of the Linears by sensitivity that, kept in float32, keeps the
    outputs at cosine >= `min_cosine` on the calibration inputs (bisection). If a held-out input
    then falls below the bound, the calibration's bound is tightened (its distance to 1 halved)
    and the bisection repeated, up to four times; then every Linear is kept."""
    ordered = calibration.by_sensitivity()
    target, kept = min_cosine, list[str]()
    for _ in range(5):
        # A tighter bound never needs fewer Linears kept: search above the last answer.
        kept = _bisect(calibration, ordered, target, len(kept))
        if all(calibration.min_cosine(kept, inputs) >= min_cosine for inputs in held_out):
            return kept
        target = 1 - (1 - target) / 2
    return ordered


def _bisect(calibration: Calibration, ordered: list[str], min_cosine: float, low: int) -> list[str]:
    high = len(ordered)  # keeping all of them certainly meets the bound
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
