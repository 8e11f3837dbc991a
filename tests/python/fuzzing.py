"""A random-graph fuzzer for the built-in passes (tests/python/test_fuzz.py, scripts/fuzz.py).

A case is a seed. From it, :func:`generate` writes the source of a small ``nn.Module`` (one
statement per op: Linear, Conv2d (some after an explicit F.pad), ConvTranspose2d, BatchNorm1d/2d
with and without affine, five spellings of division by a constant, relu/gelu as module,
function, method and in-place (gelu also written out, as transformers' gelu_new), add, cat,
parallel Linears reading one value (some with tied weights), a Linear module called at several
places, tuple or dict outputs, some models in float64),
then :func:`check` traces it ("symbolic" or "export"), applies each pass alone or a composition
in random order, ``compose(..., inplace=False)`` or in place (so reverse runs in the core session
the forward left attached, as a user's in-place composition does), some of them chains of Linear
passes with a precision change between them, and checks:

- the input GraphModule is untouched (code and parameters);
- a preserving result matches eager within tolerance;
- reverse restores outputs and every parameter and buffer bit for bit, the same code, and the
  same tied parameters (one Parameter object at several paths).

A failure is shrunk (statements, then passes, dropped while it still fails) and printed as a
runnable reproducer: the module source, the trace mode and the composition.
"""

from __future__ import annotations

import contextlib
import copy
import random
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.fx.passes.shape_prop import ShapeProp

import fxopt
from fxopt.optimization.calibrated import CalibratedPass
from fxopt.runtime.static_int8_conv import int8_conv2d
from fxopt.optimization import (
    FoldConstants,
    FoldPadInConv,
    QuantizeConvsInt8,
    QuantizeLinearsInt8,
    SmoothLinearInputs,
    QuantizeLinearsWeightOnly,
    ChangeActivation,
    ChangePrecision,
    ChooseAttentionKernel,
    ChangeTrueDivToMulByInverse,
    ConvWeightsChannelsLast,
    EliminateCommonSubexpressions,
    EliminateDeadCode,
    FuseAttentionToSdpa,
    FuseBatchNorm1dInLinear,
    FuseBatchNorm2dInConv2d,
    FuseBatchNormInConv,
    FuseBiasInLinear,
    FuseConvActivationOneDnn,
    FuseDepthwiseConv,
    FuseLinearActivationOneDnn,
    FusePointwiseConv,
    FuseTanhGelu,
    MoveActivationBeforeReshape,
    GeluToTanhApproximation,
    MergeLinears,
    RecognizeLinears,
    RemoveNoOps,
    RemoveRuntimeAsserts,
    Transformation,
    compose,
)

# Every built-in pass, as the source that builds it (also what a reproducer prints).
PASSES: dict[str, Callable[[], Transformation]] = {
    "ChangeTrueDivToMulByInverse()": ChangeTrueDivToMulByInverse,
    "MergeLinears()": MergeLinears,
    "FuseBiasInLinear()": FuseBiasInLinear,
    "FuseBatchNorm2dInConv2d()": FuseBatchNorm2dInConv2d,
    "FuseBatchNormInConv()": FuseBatchNormInConv,
    "FoldPadInConv()": FoldPadInConv,
    "FuseTanhGelu()": FuseTanhGelu,
    "MoveActivationBeforeReshape()": MoveActivationBeforeReshape,
    "FuseBatchNorm1dInLinear()": FuseBatchNorm1dInLinear,
    "RemoveNoOps()": RemoveNoOps,
    "EliminateCommonSubexpressions()": EliminateCommonSubexpressions,
    "FoldConstants()": FoldConstants,
    "EliminateDeadCode()": EliminateDeadCode,
    "RemoveRuntimeAsserts()": RemoveRuntimeAsserts,
    "FuseAttentionToSdpa()": FuseAttentionToSdpa,
    "RecognizeLinears()": RecognizeLinears,
    "FuseLinearActivationOneDnn()": FuseLinearActivationOneDnn,
    "FuseConvActivationOneDnn()": FuseConvActivationOneDnn,
    "FuseDepthwiseConv()": FuseDepthwiseConv,
    "FusePointwiseConv()": FusePointwiseConv,
    "ConvWeightsChannelsLast()": ConvWeightsChannelsLast,
    "ChangePrecision(torch.bfloat16)": lambda: ChangePrecision(torch.bfloat16),
    "ChooseAttentionKernel()": ChooseAttentionKernel,
    "ChangePrecision(torch.float16)": lambda: ChangePrecision(torch.float16),
    "GeluToTanhApproximation()": GeluToTanhApproximation,
    "ChangeActivation('relu', 'gelu')": lambda: ChangeActivation("relu", "gelu"),
    "QuantizeLinearsInt8()": QuantizeLinearsInt8,
    # The fewest Linears kept for cosine 0.999 on the case's own input, and the outlier channels
    # it shows (a case's input channels scaled apart: some Linears get them).
    "QuantizeLinearsInt8(calibrate=True)": lambda: QuantizeLinearsInt8(calibrate=True),
    # Input scales from the case's own input, the fewest convolutions kept for cosine 0.999.
    "QuantizeConvsInt8(calibrate=True)": lambda: QuantizeConvsInt8(calibrate=True),
    # Factors for every Linear whose input ranges differ at all, from the case's own input.
    "SmoothLinearInputs(calibrate=True)": lambda: SmoothLinearInputs(calibrate=True, spread=1.0),
    "QuantizeLinearsWeightOnly(torch.bfloat16)": lambda: QuantizeLinearsWeightOnly(torch.bfloat16),
    "QuantizeLinearsWeightOnly(torch.float32)": lambda: QuantizeLinearsWeightOnly(torch.float32),
    "QuantizeLinearsWeightOnly(bits=4)": lambda: QuantizeLinearsWeightOnly(bits=4),
}

GELU_WRITTEN_OUT = "{v} = 0.5 * {a} * (1.0 + torch.tanh(0.7978845608028654 * ({a} + 0.044715 * torch.pow({a}, 3.0))))"
"""transformers' gelu_new, the formula FuseTanhGelu turns into one call."""

PADS = ((None, 1), (None, 1), ("(1, 1, 1, 1)", 0), ("(0, 0, 0, 0)", 1), ("(1, 1, 1, 1), value=0.5", 0))
"""F.pad widths before a Conv2d of kernel 3 and that padding (None: no pad): each keeps the size."""

DEPTHWISE_PADS = ((None, 1), ("(0, 2, 1, 1)", 0), ("(1, 1, 2, 0)", 0), ("(0, 0, 1, 1)", "(0, 1)"))
"""F.pad widths before a depthwise Conv2d of kernel 3 and that padding: each keeps the size."""

DIVISORS = ("8", "3.0", "0.1", "1e-39", "1e30", "-2.5")
DIVISIONS = (
    "{v} = {a} / {c}",
    "{v} = torch.div({a}, {c})",
    "{v} = {a}.div({c})",
    "{v} = torch.true_divide({a}, {c})",
    "{v} = {a} + 0.5\n        {v} /= {c}",
)
ACTIVATIONS = (
    "{v} = self.{m}({a})",  # module
    "{v} = F.{f}({a})",
    "{v} = torch.{f}({a})",
    "{v} = {a}.{f}()",
    "{v} = {a} * 1.5\n        {v}.{f}_()",  # in place, on a fresh value
)


@dataclass
class Case:
    """One generated model: its statements (each one op) and how to build it."""

    seed: int
    dense: bool  # (batch, features) values, else (batch, channels, h, w)
    dtype: str
    init: list[str] = field(default_factory=list)  # module constructors, "name = ..."
    body: list[str] = field(default_factory=list)  # forward statements
    outputs: list[str] = field(default_factory=list)
    dict_output: bool = False

    def source(self, body: list[str] | None = None) -> str:
        body = self.body if body is None else body
        defined = {line.split(" = ")[0].strip() for line in "\n".join(body).splitlines()}
        outs = [o for o in self.outputs if o in defined or o == "x"] or ["x"]
        if self.dict_output:
            ret = "{" + ", ".join(f"'{o}': {o}" for o in outs) + "}"
        else:
            ret = "(" + ", ".join(outs) + ",)"
        lines = [
            "import torch",
            "import torch.nn.functional as F",
            "",
            "class Model(torch.nn.Module):",
            "    def __init__(self):",
            "        super().__init__()",
            *(f"        self.{line}" for line in self.init if _uses(body, line)),
            "",
            "    def forward(self, x):",
            *(f"        {line}" for line in body),
            f"        return {ret}",
        ]
        return "\n".join(lines) + "\n"

    def example_input(self) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed)
        shape = (3, 6) if self.dense else (2, 3, 5, 5)
        return torch.randn(shape, generator=gen).to(getattr(torch, self.dtype))


def _uses(body: list[str], init: str) -> bool:
    """Whether the forward statements call the module an __init__ line is about."""
    module = init.split(" = ")[0].split(".")[0]
    return any(f"self.{module}(" in line for line in body)


def generate(seed: int, dense: bool | None = None) -> Case:
    """Case `seed`; `dense` forces (batch, features) values (Linears) or images (convolutions)."""
    rng = random.Random(seed)
    case = Case(seed, dense=rng.random() < 0.5, dtype="float64" if rng.random() < 0.2 else "float32")
    if dense is not None:
        case.dense = dense
    width = {"x": 6 if case.dense else 3}  # features or channels of each value
    count = 0
    linears: list[tuple[str, int, int]] = []  # (module, in, out) of the Linears made so far

    def new(prefix: str) -> str:
        nonlocal count
        count += 1
        return f"{prefix}{count}"

    def pick() -> str:
        # Recent values more often, so chains form; any value sometimes, so branches do.
        names = list(width)
        return rng.choice(names[-3:] if rng.random() < 0.6 else names)

    for _ in range(rng.randint(2, 9)):
        a = pick()
        v = new("v")
        op = rng.choice(
            ["weighted", "weighted", "norm", "div", "act", "act", "add", "cat", "par", "attn", "conv1d", "res", "dw", "pw"]
        )
        if op == "weighted":
            m, out = new("m"), rng.choice([4, 6, 8])
            bias = rng.random() < 0.7
            shared = [s for s in linears if s[1] == width[a]]
            if case.dense and shared and rng.random() < 0.3:
                # One module called at several places (ALBERT's shared layers).
                m, _, out = rng.choice(shared)
            elif case.dense:
                case.init.append(f"{m} = torch.nn.Linear({width[a]}, {out}, bias={bias})")
                linears.append((m, width[a], out))
            elif rng.random() < 0.7:
                # Some read an explicit pad, as TensorFlow ports do: by nothing, symmetric (folds)
                # or with a non-zero value (stays).
                pad, padding = rng.choice(PADS)
                case.init.append(
                    f"{m} = torch.nn.Conv2d({width[a]}, {out}, 3, padding={padding}, bias={bias})"
                )
                a = f"F.pad({a}, {pad})" if pad else a
            else:
                case.init.append(
                    f"{m} = torch.nn.ConvTranspose2d({width[a]}, {out}, 3, padding=1, bias={bias})"
                )
            case.body.append(f"{v} = self.{m}({a})")
            width[v] = out
        elif op == "par" and case.dense:
            # Parallel Linears reading one value: what MergeLinears merges.
            parts, ties = [], []
            for _ in range(rng.randint(2, 3)):
                m = new("m")
                case.init.append(f"{m} = torch.nn.Linear({width[a]}, 4, bias={rng.random() < 0.7})")
                if parts and rng.random() < 0.3:  # tied to the first one's weight
                    ties.append(f"{m}.weight = self.{parts[0].split('.')[1].split('(')[0]}.weight")
                parts.append(f"self.{m}({a})")
            case.init.extend(ties)
            case.body.append(f"{v} = " + " + ".join(parts))
            width[v] = 4
        elif op == "conv1d" and case.dense:
            # A Linear whose result is viewed before its activation, as GPT-2's Conv1D and MLP.
            m, out = new("m"), rng.choice([4, 8])
            case.init.append(f"{m} = torch.nn.Linear({width[a]}, {out}, bias={rng.random() < 0.7})")
            f = rng.choice(["relu", "gelu", "silu"])
            view = rng.choice(["view(-1, {o})", "reshape(3, {o})", "view(3, -1)"]).format(o=out)
            case.body.append(f"{v} = F.{f}(self.{m}({a}).{view})")
            width[v] = out
        elif op == "attn" and case.dense:
            # Self-attention over the rows, one head of 16 (ChooseAttentionKernel's kernels take it).
            m = new("m")
            case.init.append(f"{m} = torch.nn.Linear({width[a]}, 16, bias={rng.random() < 0.7})")
            causal = rng.random() < 0.3
            case.body.append(
                f"{v} = F.scaled_dot_product_attention(*[self.{m}({a}).view(1, 1, -1, 16)] * 3, "
                f"is_causal={causal}).view(-1, 16)"
            )
            width[v] = 16
        elif op == "res" and not case.dense:
            # A convolution plus a residual of its width, ReLU after half of the time (ResNet's
            # block end): the add the oneDNN and int8 convolutions take in. The residual is
            # the convolution's own input or another value, read later by other ops or not.
            m = new("m")
            r = rng.choice([n for n in width if width[n] == width[a]])
            case.init.append(f"{m} = torch.nn.Conv2d({width[a]}, {width[a]}, 1, bias={rng.random() < 0.7})")
            total = f"self.{m}({a}) + {r}"
            case.body.append(f"{v} = F.relu({total})" if rng.random() < 0.5 else f"{v} = {total}")
            width[v] = width[a]
        elif op == "dw" and not case.dense:
            # A depthwise convolution (MobileNet's), its zeros from its own padding or a pad on
            # chosen sides (TensorFlow's "same"), ReLU6 after it half of the time.
            m = new("m")
            pad, padding = rng.choice(DEPTHWISE_PADS)
            case.init.append(
                f"{m} = torch.nn.Conv2d({width[a]}, {width[a]}, 3, padding={padding}, groups={width[a]}, "
                f"bias={rng.random() < 0.7})"
            )
            conv = f"self.{m}(F.pad({a}, {pad}))" if pad else f"self.{m}({a})"
            case.body.append(f"{v} = F.relu6({conv})" if rng.random() < 0.5 else f"{v} = {conv}")
            width[v] = width[a]
        elif op == "pw" and not case.dense:
            # A 1x1 convolution to another width (MobileNet's expansion and projection), ReLU6
            # after it half of the time.
            m, out = new("m"), rng.choice([4, 6, 8])
            case.init.append(f"{m} = torch.nn.Conv2d({width[a]}, {out}, 1, bias={rng.random() < 0.7})")
            case.body.append(f"{v} = F.relu6(self.{m}({a}))" if rng.random() < 0.5 else f"{v} = self.{m}({a})")
            width[v] = out
        elif op == "norm":
            m = new("m")
            kind = "BatchNorm1d" if case.dense else "BatchNorm2d"
            affine = rng.random() < 0.7
            case.init.append(f"{m} = torch.nn.{kind}({width[a]}, affine={affine})")
            # Non-trivial running statistics, so a fold has something to fold.
            case.init.append(f"{m}.running_mean.uniform_(-1, 1)")
            case.init.append(f"{m}.running_var.uniform_(0.5, 2)")
            case.body.append(f"{v} = self.{m}({a})")
            width[v] = width[a]
        elif op == "div":
            spelling = rng.choice(DIVISIONS)
            case.body.append(spelling.format(v=v, a=a, c=rng.choice(DIVISORS)))
            width[v] = width[a]
        elif op == "act":
            f = rng.choice(["relu", "gelu"])
            spelling = rng.choice(ACTIVATIONS[:4] if f == "gelu" else ACTIVATIONS)
            m = new("m")
            if spelling.startswith("{v} = self"):
                case.init.append(f"{m} = torch.nn.{'ReLU' if f == 'relu' else 'GELU'}()")
            if f == "gelu" and "torch.{f}" in spelling:
                spelling = "{v} = torch.nn.functional.gelu({a})"
            if f == "gelu" and rng.random() < 0.3:
                spelling = GELU_WRITTEN_OUT
            case.body.append(spelling.format(v=v, a=a, m=m, f=f))
            width[v] = width[a]
        else:  # add / cat of two values (same width for add, any for cat)
            b = pick()
            if op == "add" and width[b] == width[a]:
                case.body.append(f"{v} = {a} + {b}")
                width[v] = width[a]
            else:
                dim = -1 if case.dense else 1
                case.body.append(f"{v} = torch.cat([{a}, {b}], {dim})")
                width[v] = width[a] + width[b]
    names = [n for n in width if n != "x"]
    case.outputs = rng.sample(names, k=min(len(names), rng.randint(1, 2)))
    case.dict_output = rng.random() < 0.3
    return case


def build(source: str, dtype: str) -> torch.nn.Module:
    scope: dict[str, Any] = {}
    exec(compile(source, "<fuzz model>", "exec"), scope)
    torch.manual_seed(0)
    model: torch.nn.Module = scope["Model"]()
    return model.to(getattr(torch, dtype)).eval()


def _flat(out: Any) -> list[torch.Tensor]:
    if isinstance(out, dict):
        return [out[k] for k in sorted(out)]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return [out]


def _state(gm: torch.fx.GraphModule) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in gm.state_dict().items()}


def _same_state(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> str | None:
    if set(a) != set(b):
        return f"parameter names differ: {sorted(set(a) ^ set(b))}"
    for k in a:
        if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k]):
            return f"parameter '{k}' differs"
    return None


def _ties(gm: torch.fx.GraphModule) -> list[list[str]]:
    """The parameter names that share one Parameter object (tied weights), grouped."""
    groups: dict[int, list[str]] = {}
    for name, p in gm.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)


def _in_place_adds_differ(gm: torch.fx.GraphModule, x: torch.Tensor) -> bool:
    """Whether the int8 convolutions that add into their residual (`residual_dies`) compute other
    outputs than adding into a copy: a write into a value something still reads would."""
    if not any(n.target is int8_conv2d and n.args[14] is True for n in gm.graph.nodes):
        return False
    copying = copy.deepcopy(gm)
    for node in copying.graph.nodes:
        if node.target is int8_conv2d:
            node.args = (*node.args[:14], False, *node.args[15:])
    copying.recompile()
    return not _bit_equal(_flat(gm(x)), _flat(copying(x)))


def _bit_equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and torch.equal(x.nan_to_num(), y.nan_to_num())
        for x, y in zip(a, b)
    )


# oneDNN's fused relu and relu6 give a NaN 0, where torch's pass the NaN on (fuzz seed 2309: a
# convolution over infinities). Known and documented on both passes; fxopt's own kernels pass
# NaN on.
NAN_TO_BOUND = ("FuseConvActivationOneDnn()", "FuseLinearActivationOneDnn()")


def _close(ref: list[torch.Tensor], got: list[torch.Tensor], nan_to_bound: bool = False) -> bool:
    if len(ref) != len(got):
        return False
    for r, g in zip(ref, got):
        if r.shape != g.shape or r.dtype != g.dtype:
            return False
        if nan_to_bound:
            g = torch.where(r.isnan(), r, g)
        # Folds reassociate float arithmetic: tolerance scales with the output's magnitude.
        finite = r.isfinite()
        # Infinities and NaNs where eager has them (NaN == NaN here).
        same_special = torch.allclose(r[~finite], g[~finite], rtol=0, atol=0, equal_nan=True)
        if not torch.equal(finite, g.isfinite()) or not same_special:
            return False
        scale = float(r[finite].abs().max()) if finite.any() else 1.0
        tol = (1e-4 if r.dtype == torch.float32 else 1e-10) * max(scale, 1.0)
        if not torch.allclose(r[finite], g[finite], rtol=1e-3, atol=tol):
            return False
    return True


def check(source: str, dtype: str, x: torch.Tensor, mode: str, passes: list[str],
          inplace: bool = False) -> str | None:  # fmt: skip
    """None if the composition of `passes` behaves on the model `source`, else what failed.
    In place, the composition transforms a copy of the trace in place and its members reverse
    it one by one."""
    try:
        model = build(source, dtype)
        with torch.no_grad():
            eager = _flat(model(x))
        gm = fxopt.trace(model, example_inputs=(x,), mode=mode)  # type: ignore[arg-type]
    except Exception:
        return None  # not a model this case can test (the generator's problem, not a pass's)
    if mode == "symbolic" and "ChooseAttentionKernel()" in passes:
        # A symbolic trace records no sizes, without which the attention pass rewrites nothing:
        # recorded as a user's ShapeProp records them, where it runs.
        with contextlib.suppress(Exception):
            ShapeProp(gm).propagate(x)
    code, state, ties = gm.code, _state(gm), _ties(gm)
    members = [PASSES[p]() for p in passes]
    for member in members:
        if isinstance(member, CalibratedPass):
            member.calibrate_on((x,))
    composition = compose(*members, inplace=inplace)
    try:
        with torch.no_grad():
            traced = _flat(gm(x))
            out = composition(copy.deepcopy(gm) if inplace else gm)
            if gm.code != code or _same_state(state, _state(gm)):
                return "transform changed its input GraphModule"
            got = _flat(out(x))  # every result runs, whether it preserves the computation or not
            nan_to_bound = any(p in NAN_TO_BOUND for p in passes)
            if composition.preserves_computation and not _close(eager, got, nan_to_bound):
                return "outputs differ from eager beyond tolerance"
            if [(t.shape, t.dtype) for t in got] != [(t.shape, t.dtype) for t in eager]:
                return "outputs changed their shapes or dtypes"
            if _in_place_adds_differ(out, x):
                return "an int8 convolution adding into its residual changed the outputs"
            if inplace and len(members) > 1:
                # Member by member, each its own engine session: what a user undoing one step
                # at a time does (the engine's view of the modules must follow each reverse).
                back = out
                for member in reversed(members):
                    back = member(back, reverse=True)  # type: ignore[call-arg]
            else:
                back = composition(out, reverse=True)
            restored = _flat(back(x))
    except Exception:
        return "raised:\n" + traceback.format_exc(limit=-3)
    if not _bit_equal(traced, restored):
        return "reverse does not restore the outputs bit for bit"
    if (why := _same_state(state, _state(back))) is not None:
        return "reverse: " + why
    if _ties(back) != ties:
        return f"reverse does not restore tied parameters: {ties} became {_ties(back)}"
    if back.code != code:
        return "reverse does not restore the code:\n" + back.code
    return None


# The passes that rewrite Linears: chains of them, with a precision change in between
# (issue 21: MergeLinears, ChangePrecision, FuseBiasInLinear reversed in place), are drawn more
# often than a uniform sample would draw them.
LINEAR_PASSES = (
    "MergeLinears()",
    "FuseBiasInLinear()",
    "FuseBatchNorm1dInLinear()",
    "RecognizeLinears()",
    "FuseLinearActivationOneDnn()",
    "QuantizeLinearsInt8()",
)
PRECISIONS = ("ChangePrecision(torch.bfloat16)", "ChangePrecision(torch.float16)")


@dataclass
class Failure:
    seed: int
    mode: str
    passes: list[str]
    inplace: bool
    pins: dict[str, str]
    reason: str
    reproducer: str


# Kernel choices a case runs under (fxopt.tuning.pinned): besides each pass's static fallback
# (the test mode), the other candidates passes may pick on some machine, so every rewrite a
# measurement can select is fuzzed too, alone and composed.
KERNEL_PINS: tuple[dict[str, str], ...] = (
    {},
    {"linear": "aten", "int8_linear": "float32", "attention": "sdpa"},
    {"linear": "onednn"},  # oneDNN's Linear with the activation left after it
    {"int8_linear": "int8_onednn"},  # torch's packed int8 GEMMs, one call per Linear
    {"int8_linear": "int8_fbgemm"},
    {"int8_weight_only": "fxopt_int8", "int4_weight_only": "fxopt_int4"},  # fxopt's own kernels
    {"attention": "fxopt_f32"},  # fxopt's float32 attention (its static choice keeps SDPA)
    {"int8_conv2d": "int8_fxopt"},  # fxopt's int8 1x1 convolution
)


def kernel_pins(seed: int) -> dict[str, str]:
    return KERNEL_PINS[(seed // 4) % len(KERNEL_PINS)]


def plan(seed: int) -> tuple[Case, str, list[str], bool]:
    """The model, trace mode, composition and in-place flag of case `seed`: each pass alone in
    turn (so every pass is tried alone every len(PASSES) cases); else a random composition in
    random order, every other one a chain of Linear passes on a model with Linears and, 7 times in
    8, a precision change between two of them (ChooseAttentionKernel after it half of the time, a
    quarter before it; last where there is none);
    compositions run in place half of the time."""
    rng = random.Random(seed * 7919 + 1)
    mode = rng.choice(["symbolic", "export"])
    names = list(PASSES)
    if seed % 2 == 0:
        return generate(seed), mode, [names[(seed // 2) % len(names)]], False
    inplace = rng.random() < 0.5
    if seed % 4 == 1:
        passes = rng.sample(names, k=rng.randint(2, 6))
        if "FusePointwiseConv()" not in passes:
            return generate(seed), mode, passes, inplace
        # fxopt's 1x1 convolution on images: 3 times in 4 lowered to bfloat16 right before it
        # (the kernel's other dtype; a second lowering where the sample had one already).
        if rng.random() < 0.75:
            passes.insert(passes.index("FusePointwiseConv()"), "ChangePrecision(torch.bfloat16)")
        return generate(seed, dense=False), mode, passes, inplace
    passes = rng.sample(LINEAR_PASSES, k=rng.randint(2, 4))
    attention = rng.random()
    if attention < 0.875:
        passes.insert(rng.randint(1, len(passes) - 1), rng.choice(PRECISIONS))
    if attention < 0.5:  # after the precision change: attention in bfloat16
        passes.append("ChooseAttentionKernel()")
    elif attention < 0.75:  # before it: attention in float32, lowered afterwards
        passes.insert(0, "ChooseAttentionKernel()")
    elif attention >= 0.875:  # no precision change: attention in float32 as it runs
        passes.append("ChooseAttentionKernel()")
    return generate(seed, dense=True), mode, passes, inplace


def run_case(seed: int) -> Failure | None:
    """Runs case `seed`."""
    case, mode, passes, inplace = plan(seed)
    pins = kernel_pins(seed)
    x = case.example_input()
    with fxopt.tuning.pinned(pins):
        reason = check(case.source(), case.dtype, x, mode, passes, inplace)
        if reason is None:
            return None
        body, passes = _shrink(case, x, mode, passes, inplace, reason)
    return Failure(seed, mode, passes, inplace, pins, reason,
                   _reproducer(case, body, mode, passes, inplace, pins))  # fmt: skip


def _fails(case: Case, x: torch.Tensor, mode: str, body: list[str], passes: list[str],
           inplace: bool, reason: str) -> bool:  # fmt: skip
    got = check(case.source(body), case.dtype, x, mode, passes, inplace)
    return got is not None and got.splitlines()[0] == reason.splitlines()[0]


def _shrink(case: Case, x: torch.Tensor, mode: str, passes: list[str], inplace: bool,
            reason: str) -> tuple[list[str], list[str]]:  # fmt: skip
    """Drops statements, then passes, one at a time while the same failure remains."""
    body = list(case.body)
    for i in reversed(range(len(body))):
        trial = body[:i] + body[i + 1 :]
        if trial and _fails(case, x, mode, trial, passes, inplace, reason):
            body = trial
    for i in reversed(range(len(passes))):
        trial = passes[:i] + passes[i + 1 :]
        if trial and _fails(case, x, mode, body, trial, inplace, reason):
            passes = trial
    return body, passes


def _reproducer(case: Case, body: list[str], mode: str, passes: list[str], inplace: bool,
                pins: dict[str, str]) -> str:  # fmt: skip
    shape = tuple(case.example_input().shape)
    return (
        case.source(body)
        + "\nimport copy\nimport fxopt\nfrom fxopt.optimization import *\n"
        + f"model = Model().to(torch.{case.dtype}).eval()\n"
        + f"x = torch.randn{shape}.to(torch.{case.dtype})\n"
        + f"gm = fxopt.trace(model, example_inputs=(x,), mode={mode!r})\n"
        + f"fxopt.tuning.pinned({pins!r}).__enter__()\n"
        + f"c = compose({', '.join(passes)}, inplace={inplace})\n"
        + f"out = c({'copy.deepcopy(gm)' if inplace else 'gm'})\n"
        + "back = c(out, reverse=True)\n"
        + "print(gm(x), out(x), back(x), gm.code == back.code, sep='\\n')\n"
    )


def report(failure: Failure) -> str:
    return (
        f"seed {failure.seed}, mode {failure.mode}, passes {failure.passes}, "
        f"inplace={failure.inplace}, kernel pins {failure.pins}: {failure.reason}\n"
        f"--- reproducer ---\n{failure.reproducer}"
    )


__all__ = ["PASSES", "Case", "Failure", "generate", "check", "run_case", "report"]
