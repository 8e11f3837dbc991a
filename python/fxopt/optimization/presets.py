"""Named pass lists (presets), the catalog of transformations, and pass specifications.

A pass specification is what a user types after `--passes`: a transformation's class name,
optionally with constructor arguments, e.g. `MergeLinears` or `ChangePrecision(dtype=float16)`.
It is parsed with `ast` (never evaluated): arguments are literals, or dtype names.

Presets exist so users do not have to know which passes pay off. `default` is deliberately
small: only passes that preserve the computation and that `bench/latency.py` measured not to
slow down any bundled model (see docs/benchmarks.md for the numbers behind each choice).
"""

from __future__ import annotations

import ast
import functools
import inspect
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .. import _core
from .. import optimization as optimization_module
from . import hardware, passes
from ..engine.tensor_ops import dtype_name
from ..runtime import static_int8_conv
from ..tracing.dummy_inputs import Inputs
from .builtin import BuiltinTransformation
from .calibrated import CalibratedPass
from .compose import ComposeTransformation, compose
from .transformation import Transformation

BUILTIN_DIALECTS = "module, aten"
"""Built-in passes match operations through the engine's op views, which recognise both the
module-level graphs of symbolic tracing and the ATen/functional graphs of torch.export."""

PYTHON_DIALECTS = "any"
"""The Python transformations act on the GraphModule as a whole, whatever its operations."""


class PassSpecError(ValueError):
    """A pass or preset name that does not exist, or arguments its class does not take."""


@dataclass(frozen=True)
class PassInfo:
    """One row of `fxopt passes`."""

    name: str
    summary: str
    engine: str
    """"C++" for passes the engine runs, "Python" for the framework's own transformations."""
    reversible: bool
    preserving: bool
    dialects: str
    parameters: tuple[str, ...]
    """Constructor parameters, which a specification may set: `Name(param=value)`."""


def catalog() -> list[PassInfo]:
    """Every transformation `--passes` accepts: built-in passes in registry order, then Python ones.

    Several classes may share one core pass (`GeluToTanhApproximation` is `ChangeActivation`
    with fixed arguments): the class the registry entry is named after gets the registry's
    summary, the others their own docstring's first line.
    """
    classes = _transformation_classes().values()
    builtin = [cls for cls in classes if issubclass(cls, BuiltinTransformation)]
    order = {info.name: index for index, info in enumerate(_core.passes())}
    # Registry order; a pass's namesake class before the classes derived from it.
    builtin.sort(key=lambda cls: (order[cls.core_pass], len(cls.__mro__)))
    return [
        PassInfo(
            name=cls.__name__,
            summary=_summary(cls),
            engine="C++" if cls in builtin else "Python",
            reversible=issubclass(cls, optimization_module.ReversibleTransformation),
            preserving=cls.preserves_computation,
            dialects=BUILTIN_DIALECTS if cls in builtin else PYTHON_DIALECTS,
            parameters=_parameters(cls),
        )
        for cls in (*builtin, *(cls for cls in classes if cls not in builtin))
    ]


def _summary(cls: type[Transformation]) -> str:
    if issubclass(cls, BuiltinTransformation) and cls.__name__ == cls.core_pass:
        return cls.summary
    return _first_line(cls.__doc__)


@functools.cache
def _transformation_classes() -> dict[str, type[Transformation]]:
    """The concrete transformations `fxopt.optimization` exports, by name.

    Left out: abstract bases, `BuiltinTransformation` itself (it names no core pass) and
    `ComposeTransformation`, which `compose` builds from the others. Read once: optimize_model
    builds a preset for every block and size class (1544 lookups for a 10-layer Llama, 0.19 s
    when each read the module's exports again).
    """
    classes: dict[str, type[Transformation]] = {}
    for name in optimization_module.__all__:
        cls = getattr(optimization_module, name)
        if not (inspect.isclass(cls) and issubclass(cls, Transformation)) or inspect.isabstract(cls):
            continue
        if cls is ComposeTransformation or (
            issubclass(cls, BuiltinTransformation) and not hasattr(cls, "core_pass")
        ):
            continue
        classes[name] = cls
    return classes


def _parameters(cls: type) -> tuple[str, ...]:
    return tuple(name for name in inspect.signature(cls).parameters if name not in ("args", "kwargs"))


def _first_line(doc: str | None) -> str:
    """The first sentence of a docstring, on one line and without reST markup."""
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    sentence = paragraph.split(". ")[0].rstrip(".")
    return sentence.replace("``", "")


@dataclass(frozen=True)
class Accuracy:
    """The drift a preset declares against the float32 model, which `--verify` enforces.

    Every floating-point output must have a cosine similarity of at least `min_cosine` with the
    reference and stay within `rtol` / `atol` (None: fxopt.verify's dtype-aware defaults). `atol`
    is stated for outputs of magnitude up to 1 and scales with each output's largest magnitude
    (``fxopt.verify(..., scale_atol=True)``), as bfloat16 rounding does.
    """

    min_cosine: float
    rtol: float | None = None
    atol: float | None = None


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    passes: Callable[[torch.device], list[str]]
    """The pass specifications for a model on the given device, computed on use: presets follow
    the registry as it grows and pick kernels by what that device supports (`hardware`)."""
    accuracy: Accuracy | None = None
    """None for presets that preserve the computation (fxopt.verify's float32 tolerances)."""
    machine_note: Callable[[torch.device], str] = lambda device: ""
    """What this preset does differently on the device, for reports; '' if nothing."""
    prompts: str | None = None
    """The preset `optimize_model` runs instead on a block's graphs for many tokens at once (a
    prompt), where this one is made for decoding steps; None: this one throughout."""
    decode_attention: bool = False
    """Whether `optimize_model` runs a CPU model's one-token attention steps through fxopt's
    kernel (runtime/decode_attention.py) instead of SDPA: not bit-identical to it, so only for
    presets that declare an accuracy."""


def _preserving_builtins(device: torch.device) -> list[str]:
    """Every computation-preserving built-in pass, in the registry's order (which it justifies),
    less the oneDNN fusions for a model that is not on the CPU (their kernels are CPU kernels).

    A pass that is a restriction of another one listed (Optimum's FuseBatchNorm2dInConv2d is
    FuseBatchNormInConv for Conv2d only) is left out: running both would only repeat the search.
    """
    classes = _transformation_classes()
    names = [
        info.name
        for info in catalog()
        if info.engine == "C++"
        and info.preserving
        and info.name not in OPT_IN
        and (device.type == "cpu" or info.name not in ONEDNN_FUSIONS)
    ]
    return [
        name
        for name in names
        if not any(other != name and issubclass(classes[name], classes[other]) for other in names)
    ]


OPT_IN = ("RemoveRuntimeAsserts", "SmoothLinearInputs")
"""Preserving passes no preset runs: removing torch.export's input checks is the user's call;
smoothing needs factors (a calibration), and measured it did not help int8 on the real MiniLM."""

CLEANUP = ["RemoveNoOps", "EliminateCommonSubexpressions", "FoldConstants", "EliminateDeadCode"]
"""Graph cleanup: first, so the pattern passes see through no-ops and repeated expressions."""


ONEDNN_FUSIONS = ("FuseLinearActivationOneDnn", "FuseConvActivationOneDnn")
"""Last in a preset: the Linears and convolutions they consume are none to the other passes
(int8, weight-only), and after a lowering they fuse its bfloat16 ops."""


def _onednn_fusions(device: torch.device) -> list[str]:
    if device.type != "cpu":  # oneDNN's fused ops are CPU kernels
        return []
    return [
        *(["FuseLinearActivationOneDnn"] if hardware.onednn_linear_available() else []),
        *(["FuseConvActivationOneDnn"] if hardware.onednn_conv_available() else []),
    ]


def _before_fusions(device: torch.device) -> list[str]:
    specs = [
        *CLEANUP,
        "ChangeTrueDivToMulByInverse",
        "FuseAttentionToSdpa",
        "FuseTanhGelu",
        "FuseBatchNormInConv",
        "FuseBatchNorm1dInLinear",
        "FoldPadInConv",
        "ConvWeightsChannelsLast",
    ]
    if device.type == "cpu":
        # RecognizeLinears turns GPT-2's addmm into Linears for the CPU kernels that follow
        # (oneDNN's, int8, weight-only); on an H200 it alone cost GPT-2 6% (batch 8).
        # MoveActivationBeforeReshape then puts an activation behind a view (GPT-2's Conv1D)
        # right after its Linear, where the fusions that follow take it in.
        specs += ["RecognizeLinears", "MoveActivationBeforeReshape"]
    # q, k and v as one Linear, before the passes that pick its kernel. On an H200 one launch
    # measured 1.05x on BERT-base (batch 8). On a Zen 4 core (float32, 31 interleaved rounds)
    # the real MiniLM ran 35.1 -> 33.5 ms (IQRs apart), BERT-base level; AVX2-capped MiniLM
    # level. Under `fast`: one quantization of their input and one larger int8 or bfloat16
    # product (MiniLM 15.1 -> 14.1 ms calibrated int8, 18.3 -> 17.5 ms in bfloat16).
    return [*specs, "MergeLinears"]


def _own_kernels(device: torch.device) -> list[str]:
    # fxopt's kernels for the graph's dtype where they measured faster, after any lowering,
    # which sets that dtype, and before the oneDNN fusions, which would take their ops.
    # Attention: float32, the real MiniLM's layer 374-379 us against 432-457, the boolean mask
    # converted once a forward rather than at every layer. Depthwise convolutions: MobileNetV2's
    # stride-2 ones with their one-sided pads, 0.3-0.4x of the pad and oneDNN's call. 1x1
    # convolutions: MobileNetV2's 0.46-0.93x of the faster of oneDNN's and ATen's call in
    # bfloat16, 0.77-1.05x in float32 (its `fast` 2.56x -> 3.30x eager, `default` 1.78x -> 2.17x).
    return ["ChooseAttentionKernel", "FuseDepthwiseConv", "FusePointwiseConv"] if device.type == "cpu" else []


def _default(device: torch.device) -> list[str]:
    return [*_before_fusions(device), *_own_kernels(device), *_onednn_fusions(device)]


def with_steps_before_fusions(name: str, steps: Sequence[Transformation]) -> list[Transformation]:
    """Preset `name`'s passes (for a CPU model) with `steps` (an int8 pass, say) before its
    oneDNN fusions, which would hide the Linears and convolutions from them."""
    specs = preset_passes(name)
    rest = [s for s in specs if s not in ONEDNN_FUSIONS]
    fusions = [s for s in specs if s in ONEDNN_FUSIONS]
    return [*build_all(rest), *steps, *build_all(fusions)]


FAST_COSINE = 0.999
"""The accuracy `fast` declares: cosine against float32 on held-out inputs."""

FAST_INT8_COSINE = 0.99915
"""The bound `fast`'s int8 Linears and convolutions are calibrated (and held-out checked) to: 85%
of the preset's distance to 1. The other 15% (1.5e-4) is left to what calibration cannot see:
the bfloat16 lowering where one follows, which costs 1e-5 to 6e-5 on the bundled transformers
(`fast` without int8: cosine 0.99994-0.99999; on the real MiniLM, int8 calibrated to 0.9992 gave
0.99916 once lowered), and inputs unlike the calibration's everywhere: calibrated to the whole
of FAST_COSINE on a Zen 3 (no lowering), GPT-2 met it on its calibration and held-out batches
and gave 0.998981 on a third."""


def _fast(device: torch.device, approximations: tuple[str, ...] = ()) -> list[str]:
    specs = _before_fusions(device)
    specs += approximations  # before the oneDNN fusions, which hide activations inside them
    lowered = hardware.bfloat16_native(device)
    if device.type == "cpu" and passes.int8_kernel_available():
        # Only with calibration inputs (fxopt.optimize(..., calibration=)); before the lowering,
        # which takes the Linears int8 leaves, and timed against what the lowering makes.
        # SmoothLinearInputs is not run before it: on the real MiniLM it lowered the held-out
        # cosine of int8 Linears (docs/benchmarks.md).
        specs.append(
            f"QuantizeLinearsInt8(calibrate=True, min_cosine={FAST_INT8_COSINE}, "
            f"compare_with={'bfloat16' if lowered else 'float32'})"
        )
    if device.type == "cpu" and static_int8_conv.available() and hardware.onednn_conv_available():
        # Likewise for convolutions, with scales calibrated on the same inputs.
        specs.append(
            f"QuantizeConvsInt8(calibrate=True, min_cosine={FAST_INT8_COSINE}, "
            f"compare_with={'bfloat16' if lowered else 'float32'})"
        )
    if lowered:
        specs.append("ChangePrecision(dtype=bfloat16)")
    return [*specs, *_own_kernels(device), *_onednn_fusions(device)]


def _weight_only_activation(device: torch.device, bits: int = 8) -> torch.dtype | None:
    """The activation dtype of `decode`'s weight-only Linears on `device`; None where they do
    not pay (their kernels are CPU kernels)."""
    return passes.weight_only_activation(bits) if device.type == "cpu" else None


def _decode(device: torch.device, bits: int = 8) -> list[str]:
    # Weight-only quantization consumes Linears, so it takes the oneDNN linear fusion's place.
    activation = _weight_only_activation(device, bits)
    if activation is None:
        return _default(device)
    return [
        *_before_fusions(device),
        f"QuantizeLinearsWeightOnly(activation={dtype_name(activation)}, bits={bits})",
        *(name for name in _onednn_fusions(device) if name != "FuseLinearActivationOneDnn"),
    ]


def _decode_note(device: torch.device, bits: int = 8) -> str:
    name = "decode" if bits == 8 else "decode-int4"
    if _weight_only_activation(device, bits) is not None:
        return ""
    if device.type != "cpu":
        return (
            f"the model is on {device.type}, and fxopt's weight-only int8 kernels are CPU "
            f"kernels: '{name}' runs 'default' there"
        )
    return (
        f"this CPU has neither native bfloat16, with which ATen's weight-only kernels pay off "
        f"(with float32 activations they measured 4-5x slower than float32), nor AVX2, which "
        f"fxopt's own {bits}-bit kernel needs: '{name}' runs 'default' here"
    )


def _without_bfloat16_note(name: str, device: torch.device) -> str:
    if hardware.bfloat16_native(device):
        return ""
    if device.type != "cpu":
        return (
            f"the model's device ({device}) has no native bfloat16 (an NVIDIA GPU of compute "
            f"capability 8.0 or newer has): '{name}' runs float32 there, without its bfloat16 "
            f"lowering"
        )
    return (
        f"this CPU has no native bfloat16 (AVX512-BF16 or AMX, as torch reports it), where "
        f"bfloat16 is emulated and slower than float32: '{name}' runs float32 here, without "
        f"its bfloat16 lowering"
    )


PRESETS: dict[str, Preset] = {
    # The contents follow bench/latency.py (docs/benchmarks.md has the tables): every pass in
    # `default` was measured to help a bundled model or to simplify its graph, and none to
    # slow one down. FuseBiasInLinear (0.96-0.98x) is in no preset but all-preserving.
    "default": Preset(
        "default",
        "graph cleanup, attention to SDPA, one-call GELU, batch-norm and pad folding, channels-last "
        "convolutions, parallel Linears merged, attention and Linears on the kernels measured "
        "fastest (fxopt's, oneDNN's): preserves float32 results, never measured slower than eager",
        _default,
    ),
    "fast": Preset(
        "fast",
        "default, then the whole graph in bfloat16 where this CPU computes it natively: "
        "the fastest combination measured within cosine 0.999 of float32 on every bundled model",
        _fast,
        Accuracy(min_cosine=FAST_COSINE, rtol=0.1, atol=0.1),
        lambda device: _without_bfloat16_note("fast", device),
    ),
    # Measured on a ~100M-parameter Llama (random weights, 64 greedy tokens): see
    # bench/results/generate_*.md and docs/benchmarks.md.
    "decode": Preset(
        "decode",
        "default, then weight-only int8 Linears (per Linear the fastest measured of float32, "
        "ATen's kernel with bfloat16 activations where this CPU has them natively, and fxopt's "
        "with float32 ones, AVX2 or AVX-512): for generate() at batch 1, where reading the "
        "weights is the cost; "
        "per-token logit cosine >= 0.999, >= 95% top-1 agreement teacher-forced; optimize_model "
        "runs prompts with fast",
        _decode,
        Accuracy(min_cosine=0.999, rtol=0.1, atol=0.1),
        _decode_note,
        # A prompt's Linears multiply many rows per weight read: compute, not reading the
        # weights, is their cost, where bfloat16 pays and weight-only kernels do not (the chooser
        # kept float32 for every prompt-sized Linear of the bench's Llama and GPT-2).
        prompts="fast",
        decode_attention=True,
    ),
    "decode-int4": Preset(
        "decode-int4",
        "decode with 4-bit weights (a scale and zero per 32 columns; per Linear the fastest measured "
        "of float32, ATen's int4 kernel and fxopt's): opt-in and coarser; "
        "per-token logit cosine >= 0.99 on trained weights (0.99994 measured on a 95M Llama; "
        "random-weight models of that size reach only 0.978-0.981); optimize_model runs prompts "
        "with fast",
        lambda device: _decode(device, bits=4),
        Accuracy(min_cosine=0.99),
        lambda device: _decode_note(device, 4),
        prompts="fast",
        decode_attention=True,
    ),
    "all-preserving": Preset(
        "all-preserving",
        "every computation-preserving built-in pass, in registry order",
        _preserving_builtins,
    ),
    "aggressive": Preset(
        "aggressive",
        "fast, plus tanh-approximate GELU: larger drift than fast (cosine 0.99)",
        lambda device: _fast(device, ("GeluToTanhApproximation",)),
        Accuracy(min_cosine=0.99),
        lambda device: _without_bfloat16_note("aggressive", device),
    ),
}


def get_preset(name: str) -> Preset:
    found = PRESETS.get(name)
    if found is None:
        raise PassSpecError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    return found


def preset_passes(name: str, device: torch.device | str = "cpu") -> list[str]:
    """The pass specifications of preset `name` for a model on `device` of this machine."""
    return get_preset(name).passes(torch.device(device))


def machine_note(name: str, device: torch.device | str = "cpu") -> str:
    """What preset `name` does differently for a model on `device` of this machine; '' if
    nothing."""
    return get_preset(name).machine_note(torch.device(device))


class PresetWarning(UserWarning):
    """A preset does something else on this machine than it says (``fast`` without native
    bfloat16 runs float32)."""


_warned_presets: set[tuple[str, str]] = set()


def warn_machine_note(name: str, device: torch.device | str = "cpu") -> None:
    """Warns, once per process, preset and device type, what preset `name` does differently
    for a model on `device` (the CLI prints the same note itself)."""
    note = machine_note(name, device)
    key = (name, torch.device(device).type)
    if note and key not in _warned_presets:
        _warned_presets.add(key)
        warnings.warn(note, PresetWarning, stacklevel=3)


def calibrates(name: str, device: torch.device | str = "cpu") -> bool:
    """Whether preset `name` has passes that calibrate on real inputs for a model on `device`."""
    return any("(calibrate=True" in spec for spec in preset_passes(name, device))


_warned_uncalibrated: set[str] = set()


def warn_uncalibrated(name: str, device: torch.device | str = "cpu") -> None:
    """Warns, once per process and preset, that preset `name` ran without calibration inputs
    where it would use them."""
    if name in _warned_uncalibrated or not calibrates(name, device):
        return
    _warned_uncalibrated.add(name)
    warnings.warn(
        f"preset '{name}' got no calibration inputs, so it put no Linear or convolution in int8 "
        "(int8 error depends on real activations) and its accuracy was checked on generated inputs only; "
        "pass calibration=<a real input batch> for int8 where it keeps the bound",
        PresetWarning,
        stacklevel=3,
    )


def preset(
    name: str,
    *,
    inplace: bool = False,
    calibration: Inputs | None = None,
    held_out: Sequence[Inputs] = (),
    device: torch.device | str = "cpu",
) -> Transformation:
    """Preset `name` as one transformation (a `compose` of its passes for a model on `device`
    of this machine).

    With ``inplace=False`` (the default) applying it returns a new GraphModule and leaves the
    input as it was; the result can be reversed with ``reverse=True``. A preset that runs
    differently on this machine says so once, as a :class:`PresetWarning`. `calibration` (and
    the `held_out` batches its bound must hold on too) go to the passes that calibrate on real
    inputs (``fast``'s int8 Linears); without them those passes skip, saying why.
    """
    warn_machine_note(name, device)
    transformations = build_all(preset_passes(name, device))
    if calibration is not None:
        for transformation in transformations:
            if isinstance(transformation, CalibratedPass):
                transformation.calibrate_on(calibration, held_out)
    return compose(*transformations, inplace=inplace)


def split_specs(text: str) -> list[str]:
    """Split a comma-separated pass list, keeping commas inside parentheses with their pass."""
    specs: list[str] = []
    depth, start = 0, 0
    for index, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            specs.append(text[start:index].strip())
            start = index + 1
    specs.append(text[start:].strip())
    return [spec for spec in specs if spec]


def build(spec: str) -> Transformation:
    """The transformation instance a specification describes."""
    try:
        expression = ast.parse(spec.strip(), mode="eval").body
    except SyntaxError:
        raise PassSpecError(f"cannot parse pass {spec!r}; write Name or Name(param=value, ...)") from None
    call = expression if isinstance(expression, ast.Call) else None
    head = call.func if call is not None else expression
    if not isinstance(head, ast.Name):
        raise PassSpecError(f"cannot parse pass {spec!r}; write Name or Name(param=value, ...)")
    cls = _lookup(head.id)
    args = [_literal(arg, spec) for arg in call.args] if call is not None else []
    kwargs = {kw.arg: _literal(kw.value, spec) for kw in call.keywords if kw.arg} if call is not None else {}
    try:
        return cls(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise PassSpecError(f"{spec}: {exc}") from None


def _lookup(name: str) -> type[Transformation]:
    """A transformation class by name; case-insensitive, since names are typed on a command line."""
    classes = _transformation_classes()
    matches = [cls for known, cls in classes.items() if known.lower() == name.lower()]
    if not matches:
        raise PassSpecError(f"unknown pass {name!r}; run `fxopt passes` to list them")
    return matches[0]


def _literal(node: ast.expr, spec: str) -> Any:
    """A constructor argument: a Python literal, or a dtype by name (`float16`, `torch.bfloat16`)."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        node = ast.Name(node.attr)
    if isinstance(node, ast.Name):
        value = getattr(torch, node.id, None)
        return value if isinstance(value, torch.dtype) else node.id
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise PassSpecError(f"{spec}: arguments must be literals or dtype names") from None


def build_all(specs: list[str]) -> list[Transformation]:
    return [build(spec) for spec in specs]
