"""CPU latency of the bundled models: fxopt against what users would pick instead, in one run.

For each model, batch size and thread count, every variant below is prepared from the same
eager float32 model and then all are timed side by side on the same inputs, in interleaved
rounds (`fxopt.cli.timing.measure_latency`: one call of each per round, warm-up rounds excluded), so
background load on a shared machine hits them alike and the times of one round pair up.

Variants (`--variants`):

* eager: the transformers model as loaded, float32; the reference of every speedup and error.
* fxopt-traced: `fxopt.trace` alone, no pass: what the trace itself changes (transformers
  materialise an attention mask in a traced graph that eager skips when it is all ones).
* fxopt-default, fxopt-fast: `fxopt.trace`, then the preset's passes (`fxopt.optimization.presets`).
  Preparation = trace + passes; "fxopt s" is fxopt's own part of it: one `compose(...)(gm)`
  call (import into the engine, passes with their kernel choices timed into an empty cache,
  sync back, lint and recompile).
* fxopt-fast-sdpa: `fast` without `ChooseAttentionKernel` (an ablation: attention through ATen's
  SDPA, not fxopt's bfloat16 kernel).
* fxopt-default-no-dw, fxopt-fast-no-dw: `default` / `fast` without `FuseDepthwiseConv` (an
  ablation: depthwise convolutions as oneDNN or ATen run them, after their pads).
* fxopt-default-no-pw, fxopt-fast-no-pw: `default` / `fast` without `FusePointwiseConv` (an
  ablation: 1x1 convolutions as oneDNN or ATen run them).
* fxopt-fast-viewed: `fast` without `MoveActivationBeforeReshape` (an ablation: an activation
  behind a view of its Linear, GPT-2's GELU, stays out of the Linear's call).
* fxopt-fast-export: `fast` on the graph `fxopt.trace(mode="export")` makes (torch.export,
  ATen ops) instead of `auto`'s (Dynamo for transformers models): the same passes, a trace a
  third as long.
* fxopt-default-dynamo, fxopt-fast-cal-dynamo: the same on the graph `fxopt.trace(mode="dynamo")`
  makes, where `auto` uses another tracer (the sized one for image models): the dialects A/B.
* fxopt-fast-cal: `fast` with calibration inputs (`fxopt.optimize(..., calibration=)`): int8
  Linears where their kernel beats the Linear fast would run (bfloat16 where native) and the
  bound holds. Calibration inputs: the calibration sentences for the real MiniLM (the bound
  also checked on every held-out sentence; the timed inputs are held-out sentences), for
  random-weight models two other generated batches (calibrated on one, checked on the other;
  the timed inputs are a third). `fast` calibrates convolutions too (`QuantizeConvsInt8`:
  scales from the calibration batch). Calibration counts as preparation.
* fxopt-int8, fxopt-int8-cal: `default` with the opt-in `QuantizeLinearsInt8` on every Linear
  where an int8 kernel beats float32 (per-token kernel, oneDNN or fbgemm packed GEMMs, measured),
  or calibrated as above to cosine >= 0.999; fxopt-int8-smooth-cal: `SmoothLinearInputs`
  calibrated on the same inputs first (SmoothQuant factors for Linears with outlier channels).
* compile, compile-freezing, compile-cudagraphs: `torch.compile` (inductor), plain, with
  `torch._inductor.config.freezing`, and with CUDA graphs (`triton.cudagraphs`, what
  `mode="reduce-overhead"` sets, for a GPU); preparation = the first call, which compiles (in a fresh
  inductor cache directory, as a user's first run). Inductor's CPU kernels specialise on the
  thread count, so they are compiled again for each `--threads` value.
* compile-fxopt, compile-fxopt-inductor: `torch.compile(backend="fxopt")`: the `default`
  preset on each graph Dynamo captures, run eagerly, or (`options={"inductor": True}`) handed
  on to Inductor; preparation = the first call (Dynamo's capture + fxopt, + Inductor).
* ao-int8: `torch.ao.quantization.quantize_dynamic` of every `nn.Linear`, per-channel int8
  weights, activations quantized per call ("changed" = Linear modules quantized).
* bf16: the whole model `.to(torch.bfloat16)`, inputs cast on each call.
* autocast-bf16: the float32 model under `torch.autocast("cpu", dtype=torch.bfloat16)`.
* ort, ort-optimized, ort-int8: ONNX Runtime (CPU provider, intra-op threads = `--threads`) on
  the model exported by `torch.onnx.export` (TorchScript exporter by default: ONNX Runtime's
  transformer optimizer recognises its graphs, and it needs no onnxscript; `--onnx-exporter
  dynamo` for the newer one), the same after
  `onnxruntime.transformers.optimizer.optimize_model` (model types bert, gpt2, vit; not for
  CNNs), and after `onnxruntime.quantization.quantize_dynamic` (int8 per-channel weights). One
  export per model, with a dynamic batch axis; preparation = export (+ optimize or quantize) +
  session creation.
* ov, ov-bf16: OpenVINO's CPU plugin (`openvino.convert_model` from PyTorch on the timed inputs,
  compiled for latency with precision hint f32 or bf16; bf16 only where the CPU has it natively);
  preparation = conversion + compilation.

Reported per variant: median latency; speedup over eager as the ratio of medians with the
smallest and largest per-round ratio (marked "≈" when the interquartile ranges of the two
overlap: no measurable difference); cosine similarity and largest absolute error of the main
(first) output against eager float32; preparation time; nodes changed (fxopt) or modules
quantized (ao-int8). A variant that fails to prepare or run is listed with its reason; the
run goes on.

Run: `python bench/latency.py` (every model, batch 1 and 8, 1 and 2 threads: 24
configurations; estimated 35-45 minutes on a quiet 2-core machine, a third of it torch.compile's
48 compilations; --budget caps the timed rounds of each configuration), `--quick` (MiniLM and
ResNet-50, batch 1, 1 thread, 5 rounds: 3-4 minutes on a busy machine), or pick with --models /
--batches / --threads / --variants / --rounds.
`--device cuda` runs the models on a CUDA GPU: the variants that run there (eager, fxopt's
presets as picked for that device, torch.compile, bfloat16, autocast), each call timed until the
GPU has finished it; the CPU runtimes are listed as not applicable.
Writes bench/results/latency.md (latency_quick.md with --quick; --output NAME for others).
"""

from __future__ import annotations

import argparse
import copy
import gc
import logging
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree

# Kernel choices are measured into an empty cache: fxopt's preparation includes its tuning, as a
# user's first optimize does (a second one on the same machine tunes nothing).
os.environ.setdefault("FXOPT_CACHE_DIR", tempfile.mkdtemp(prefix="fxopt-bench-cache-"))
from rich.console import Console
from rich.table import Table
from torch import nn
from torch.fx import GraphModule

import fxopt
from fxopt.cli import models, sentences
from fxopt.cli.optimize import _outcome
from fxopt.cli.timing import Latency, Speedup, measure_latency
from fxopt.optimization import QuantizeLinearsInt8, SmoothLinearInputs, Transformation, compose, hardware, presets
from fxopt.optimization.calibrated import CalibratedPass
from fxopt.verification.verify import cosine_similarity

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import gpu_name, machine_description, markdown_table, synchronized, write_result  # noqa: E402

MODELS = ("minilm", "bert-base", "gpt2", "resnet50", "mobilenet-v2", "vit-base")
QUICK_MODELS = ("minilm", "resnet50")
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
"""Wall time is what a user waits (the default). CPU time of the process counts the work done
even while other jobs share the machine, but only with one thread: with more, it adds the
threads' times up (and ONNX Runtime's spinning threads)."""

ORT_MODEL_TYPES = {"minilm": "bert", "bert-base": "bert", "gpt2": "gpt2", "vit-base": "vit"}
"""`model_type` of ONNX Runtime's transformer optimizer per bundled model; others are CNNs."""


@dataclass
class Prepared:
    """One variant ready to time (`run`), or why not (`error`)."""

    run: Callable[..., Any] | None
    """Dropped once the variant is timed, so a long run does not keep every model alive."""
    prepare_s: float | None = None
    fxopt_s: float | None = None
    """fxopt's own part of the preparation: passes, sync, lint and recompile."""
    changed: int | None = None
    note: str = ""
    error: str = ""


def failed(reason: str) -> Prepared:
    return Prepared(None, error=reason)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def timed(function: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


@dataclass
class OnnxArtifacts:
    """The ONNX files of one model, exported once (dynamic batch) and shared by all its runs."""

    directory: Path
    input_names: list[str]
    files: dict[str, Path | str] = field(default_factory=dict)
    """Per kind (fp32, optimized, int8): the file, or why it could not be made."""
    seconds: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


@dataclass
class Subject:
    """One model at one batch size: what every variant is prepared from."""

    name: str
    model: nn.Module
    inputs: dict[str, torch.Tensor]
    exporter: str
    onnx: OnnxArtifacts
    real_text: bool = False
    """Inputs are real sentences (the pretrained MiniLM), and so are its calibration inputs."""
    traced: GraphModule | str | None = None
    """fxopt's trace (`auto` mode), made once per batch (or why tracing failed)."""
    trace_s: float = 0.0
    traces: dict[str, tuple[GraphModule | str, float]] = field(default_factory=dict)
    """Traces in an explicit mode (`fxopt-fast-export`), by mode: the graph (or why tracing
    failed) and the seconds it took."""

    @property
    def device(self) -> torch.device:
        return hardware.model_device(self.model)


class FirstOutput(nn.Module):
    """The model with positional tensor inputs and its first output only, for the ONNX exporters."""

    def __init__(self, model: nn.Module, input_names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.input_names = input_names

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return main_output(self.model(**dict(zip(self.input_names, args, strict=True))))


def main_output(output: Any) -> torch.Tensor:
    """The first tensor of a model's output (last_hidden_state, logits): what accuracy compares."""
    for leaf in pytree.tree_leaves(output):
        if isinstance(leaf, torch.Tensor):
            return leaf
    raise ValueError(f"no tensor in the output ({type(output).__name__})")


# --- variants ---------------------------------------------------------------------------


def prepare_eager(subject: Subject, threads: int) -> Prepared:
    return Prepared(subject.model, 0.0)


def fxopt_preparer(
    passes: Callable[[Subject, GraphModule], list[Transformation]], mode: str = "auto"
) -> Callable[[Subject, int], Prepared]:
    """fxopt.trace in `mode` (once per model), then the transformations `passes` picks for the
    graph."""

    def prepare(subject: Subject, threads: int) -> Prepared:
        if mode == "auto" and subject.traced is None:
            subject.traced, subject.trace_s = _trace(subject, mode)
        elif mode != "auto" and mode not in subject.traces:
            subject.traces[mode] = _trace(subject, mode)
        traced, trace_s = (subject.traced, subject.trace_s) if mode == "auto" else subject.traces[mode]
        if isinstance(traced, str):
            return failed(traced)
        assert traced is not None
        graph_module = copy.deepcopy(traced)
        transformations, choose_s = timed(lambda: passes(subject, graph_module))
        if transformations:
            graph_module, own_s = timed(lambda: compose(*transformations, inplace=True)(graph_module))
        else:
            own_s = 0.0
        changed = sum(len(_outcome(t, graph_module).changed) for t in transformations)
        note = "nothing changed" if changed == 0 else ""
        return Prepared(graph_module, trace_s + choose_s + own_s, choose_s + own_s, changed, note)

    return prepare


def _trace(subject: Subject, mode: str) -> tuple[GraphModule | str, float]:
    try:
        return timed(lambda: fxopt.trace(subject.model, example_inputs=subject.inputs, mode=mode))  # type: ignore[arg-type]
    except Exception as exc:  # a model fxopt cannot trace is a result
        return f"trace failed: {one_line(exc)}", 0.0


def preset_passes(preset: str, without: str = "") -> Callable[[Subject, GraphModule], list[Transformation]]:
    """`preset`'s passes for the subject's device, less the pass named `without` (an ablation)."""
    return lambda subject, graph_module: presets.build_all(
        [spec for spec in presets.preset_passes(preset, subject.device) if spec != without]
    )


def _generated_like(inputs: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """Other generated inputs of the same sizes: normal floats (pixels), token ids drawn from
    the same range; masks as they are."""
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in inputs.items():
        if t.is_floating_point():
            out[name] = torch.randn(t.shape, generator=generator, dtype=t.dtype)
        elif name.endswith("_ids"):
            out[name] = torch.randint(0, int(t.max()) + 1, t.shape, generator=generator, dtype=t.dtype)
        else:
            out[name] = t
    return out


def calibration(subject: Subject) -> tuple[dict[str, torch.Tensor], list[dict[str, torch.Tensor]]]:
    """What calibrating variants calibrate on: for a model with real text, the sentences
    (`sentences.calibration_for`: in batches of the timed batch size, which the graph is traced
    for); else other generated inputs than the timed ones, one batch to calibrate on and one
    held out (the timed inputs' cosine is then a check on inputs calibration never saw)."""
    if not subject.real_text:
        return _generated_like(subject.inputs, 1), [_generated_like(subject.inputs, 2)]
    return sentences.calibration_for(subject.inputs)


def calibrated_preset(preset: str) -> Callable[[Subject, GraphModule], list[Transformation]]:
    """`preset` with calibration inputs for its int8 Linears (fxopt.optimize(calibration=))."""

    def passes(subject: Subject, graph_module: GraphModule) -> list[Transformation]:
        transformations = presets.build_all(presets.preset_passes(preset, subject.device))
        for transformation in transformations:
            if isinstance(transformation, CalibratedPass):
                transformation.calibrate_on(*calibration(subject))
        return transformations

    return passes


def int8_passes(calibrated: bool, smoothed: bool = False) -> Callable[[Subject, GraphModule], list[Transformation]]:
    """`default` with QuantizeLinearsInt8 (against float32 Linears) before the oneDNN fusion
    (which would hide the Linears); calibrated: the most sensitive Linears kept in float32 for
    cosine >= 0.999 (see `calibration`); smoothed: SmoothLinearInputs calibrated first."""

    def passes(subject: Subject, graph_module: GraphModule) -> list[Transformation]:
        int8: list[CalibratedPass] = [QuantizeLinearsInt8(calibrate=calibrated, min_cosine=0.999)]
        if smoothed:
            int8.insert(0, SmoothLinearInputs(calibrate=True))
        for step in int8:
            step.calibrate_on(*calibration(subject))
        return presets.with_steps_before_fusions("default", int8)

    return passes


def compile_preparer(backend: str, options: dict[str, Any] | None = None) -> Callable[[Subject, int], Prepared]:
    """torch.compile with `backend` and its `options` (Inductor's `freezing`; fxopt's `preset`
    and `inductor`), set for this compilation only.

    Settings go in as options, not as a global patch: dynamo keeps one compiled frame per
    backend configuration, and two torch.compile calls with equal configurations share it (a
    second, frozen model would silently run the first one's code and "compile" in 0.05 s).
    """

    def prepare(subject: Subject, threads: int) -> Prepared:
        compiled = torch.compile(copy.deepcopy(subject.model), backend=backend, options=options)
        with torch.no_grad():
            _, seconds = timed(lambda: synchronized(compiled, subject.device)(**subject.inputs))
        return Prepared(compiled, seconds)

    return prepare


def prepare_ao_int8(subject: Subject, threads: int) -> Prepared:
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    model = copy.deepcopy(subject.model)
    linears = sum(isinstance(m, nn.Linear) for m in model.modules())
    quantized, seconds = timed(
        lambda: quantize_dynamic(model, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
    )
    note = "" if linears else "no nn.Linear in this model: nothing quantized"
    return Prepared(quantized, seconds, changed=linears, note=note)


def with_bfloat16_inputs(model: Callable[..., Any]) -> Callable[..., Any]:
    def run(**inputs: torch.Tensor) -> Any:
        return model(**{k: v.bfloat16() if v.is_floating_point() else v for k, v in inputs.items()})

    return run


def prepare_bf16(subject: Subject, threads: int) -> Prepared:
    model = copy.deepcopy(subject.model)
    converted, seconds = timed(lambda: model.to(torch.bfloat16))
    return Prepared(with_bfloat16_inputs(converted), seconds)


def prepare_autocast(subject: Subject, threads: int) -> Prepared:
    model = subject.model

    def run(**inputs: torch.Tensor) -> Any:
        with torch.autocast(subject.device.type, dtype=torch.bfloat16):
            return model(**inputs)

    return Prepared(run, 0.0)


def onnx_file(subject: Subject, kind: str) -> Path | str:
    """The ONNX file of `kind` for the subject's model, made on first use; or why it failed."""
    artifacts = subject.onnx
    if kind in artifacts.files:
        return artifacts.files[kind]
    try:
        if kind == "fp32":
            path, seconds = timed(lambda: export_onnx(subject, artifacts.directory / "model.onnx"))
        else:
            source = onnx_file(subject, "fp32")
            if isinstance(source, str):
                return source
            make = optimize_onnx if kind == "optimized" else quantize_onnx
            path, seconds = timed(lambda: make(subject, source))
        artifacts.files[kind], artifacts.seconds[kind] = path, seconds
    except Exception as exc:  # exporter and ONNX Runtime tools fail on some graphs
        artifacts.files[kind] = f"{kind}: {one_line(exc)}"
    return artifacts.files[kind]


def export_onnx(subject: Subject, path: Path) -> Path:
    names = subject.onnx.input_names
    wrapper = FirstOutput(subject.model, names).eval()
    args = tuple(subject.inputs[name] for name in names)
    with torch.no_grad():
        torch.onnx.export(
            wrapper,
            args,
            str(path),
            dynamo=subject.exporter == "dynamo",
            input_names=names,
            output_names=["output"],
            dynamic_axes={name: {0: "batch"} for name in [*names, "output"]},
        )
    return path


def optimize_onnx(subject: Subject, source: Path) -> Path:
    from onnxruntime.transformers.optimizer import optimize_model

    model_type = ORT_MODEL_TYPES[subject.name]
    optimized = optimize_model(str(source), model_type=model_type, num_heads=0, hidden_size=0)
    fused = {op: n for op, n in optimized.get_fused_operator_statistics().items() if n}
    subject.onnx.notes["optimized"] = "fused: " + (
        ", ".join(f"{op} {n}" for op, n in fused.items()) or "nothing"
    )
    path = source.with_name("model.optimized.onnx")
    optimized.save_model_to_file(str(path))
    return path


def quantize_onnx(subject: Subject, source: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    path = source.with_name("model.int8.onnx")
    quantize_dynamic(str(source), str(path), weight_type=QuantType.QInt8, per_channel=True)
    return path


def ort_preparer(kind: str) -> Callable[[Subject, int], Prepared]:
    def prepare(subject: Subject, threads: int) -> Prepared:
        import onnxruntime as ort

        if kind == "optimized" and subject.name not in ORT_MODEL_TYPES:
            return Prepared(None, note="not applicable: the transformer optimizer has no model type for CNNs")
        path = onnx_file(subject, kind)
        if isinstance(path, str):
            return failed(path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Idle ONNX Runtime threads otherwise spin, taking the CPU from the variant timed next.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session, seconds = timed(
            lambda: ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        )
        feeds = [node.name for node in session.get_inputs()]

        def run(**inputs: torch.Tensor) -> torch.Tensor:
            (output, *_) = session.run(None, {name: inputs[name].numpy() for name in feeds})
            return torch.from_numpy(output)

        made = subject.onnx.seconds["fp32"] + (subject.onnx.seconds[kind] if kind != "fp32" else 0.0)
        return Prepared(run, made + seconds, note=subject.onnx.notes.get(kind, ""))

    return prepare


def openvino_preparer(precision: str) -> Callable[[Subject, int], Prepared]:
    """OpenVINO's CPU plugin on the model converted from PyTorch (`openvino.convert_model` on the
    timed inputs), compiled for latency with `precision` ("f32", or "bf16", which it uses only
    where the CPU has native bfloat16); preparation = conversion + compilation."""

    def prepare(subject: Subject, threads: int) -> Prepared:
        import openvino as ov

        def build() -> Any:
            model = ov.convert_model(subject.model, example_input=dict(subject.inputs))
            config = {
                "INFERENCE_NUM_THREADS": threads,
                "INFERENCE_PRECISION_HINT": precision,
                "PERFORMANCE_HINT": "LATENCY",
            }
            return ov.Core().compile_model(model, "CPU", config)

        compiled, seconds = timed(build)
        request = compiled.create_infer_request()
        first = compiled.outputs[0]

        def run(**inputs: torch.Tensor) -> torch.Tensor:
            return torch.from_numpy(request.infer({k: v.numpy() for k, v in inputs.items()})[first].copy())

        return Prepared(run, seconds)

    return prepare


@dataclass(frozen=True)
class VariantSpec:
    prepare: Callable[[Subject, int], Prepared]
    per_threads: bool
    """Prepared again for each thread count (its kernels or sessions fix the thread count, or,
    fxopt's, its kernel choices were measured at one)."""
    gpu: bool = False
    """Runs a model on a CUDA GPU too (`--device cuda`); the others are CPU runtimes."""


VARIANTS: dict[str, VariantSpec] = {
    "eager": VariantSpec(prepare_eager, False, gpu=True),
    "fxopt-traced": VariantSpec(fxopt_preparer(lambda subject, graph_module: []), False, gpu=True),
    "fxopt-default": VariantSpec(fxopt_preparer(preset_passes("default")), True, gpu=True),
    "fxopt-fast": VariantSpec(fxopt_preparer(preset_passes("fast")), True, gpu=True),
    "fxopt-fast-sdpa": VariantSpec(fxopt_preparer(preset_passes("fast", without="ChooseAttentionKernel")), True),
    "fxopt-default-no-dw": VariantSpec(fxopt_preparer(preset_passes("default", without="FuseDepthwiseConv")), True),
    "fxopt-fast-no-dw": VariantSpec(fxopt_preparer(preset_passes("fast", without="FuseDepthwiseConv")), True),
    "fxopt-default-no-pw": VariantSpec(fxopt_preparer(preset_passes("default", without="FusePointwiseConv")), True),
    "fxopt-fast-no-pw": VariantSpec(fxopt_preparer(preset_passes("fast", without="FusePointwiseConv")), True),
    "fxopt-fast-viewed": VariantSpec(
        fxopt_preparer(preset_passes("fast", without="MoveActivationBeforeReshape")), True
    ),
    "fxopt-fast-export": VariantSpec(fxopt_preparer(preset_passes("fast"), mode="export"), True),
    "fxopt-fast-cal": VariantSpec(fxopt_preparer(calibrated_preset("fast")), True),
    "fxopt-default-dynamo": VariantSpec(fxopt_preparer(preset_passes("default"), mode="dynamo"), True),
    "fxopt-fast-cal-dynamo": VariantSpec(fxopt_preparer(calibrated_preset("fast"), mode="dynamo"), True),
    "fxopt-int8": VariantSpec(fxopt_preparer(int8_passes(calibrated=False)), True),
    "fxopt-int8-cal": VariantSpec(fxopt_preparer(int8_passes(calibrated=True)), True),
    "fxopt-int8-smooth-cal": VariantSpec(fxopt_preparer(int8_passes(calibrated=True, smoothed=True)), True),
    "compile": VariantSpec(compile_preparer("inductor"), True, gpu=True),
    "compile-freezing": VariantSpec(compile_preparer("inductor", {"freezing": True}), True, gpu=True),
    "compile-cudagraphs": VariantSpec(compile_preparer("inductor", {"triton.cudagraphs": True}), True, gpu=True),
    "compile-fxopt": VariantSpec(compile_preparer("fxopt"), False, gpu=True),
    "compile-fxopt-inductor": VariantSpec(compile_preparer("fxopt", {"inductor": True}), True, gpu=True),
    "ao-int8": VariantSpec(prepare_ao_int8, False),
    "bf16": VariantSpec(prepare_bf16, False, gpu=True),
    "autocast-bf16": VariantSpec(prepare_autocast, False, gpu=True),
    "ort": VariantSpec(ort_preparer("fp32"), True),
    "ort-optimized": VariantSpec(ort_preparer("optimized"), True),
    "ort-int8": VariantSpec(ort_preparer("int8"), True),
    "ov": VariantSpec(openvino_preparer("f32"), True),
    "ov-bf16": VariantSpec(openvino_preparer("bf16"), True),
}


def prepare(name: str, subject: Subject, threads: int) -> Prepared:
    if subject.device.type != "cpu" and not VARIANTS[name].gpu:
        return Prepared(None, note=f"not applicable: a CPU runtime, the model is on {subject.device.type}")
    try:
        return VARIANTS[name].prepare(subject, threads)
    except Exception as exc:  # one variant failing is a result, not the end of the run
        return failed(one_line(exc))


# --- measuring --------------------------------------------------------------------------


@dataclass
class Row:
    """One variant of one model, batch and thread count, as reported."""

    model: str
    batch: int
    threads: int
    variant: str
    prepared: Prepared
    latency: Latency | None = None
    speedup: Speedup | None = None
    cosine: float | None = None
    max_abs_err: float | None = None


def accuracy(reference: torch.Tensor, output: Any) -> tuple[float | None, float]:
    """Cosine and largest absolute error of the main output against eager float32."""
    actual = main_output(output)
    if actual.shape != reference.shape:
        raise ValueError(f"main output has shape {tuple(actual.shape)}, eager {tuple(reference.shape)}")
    difference = (actual.detach().double() - reference.double()).abs()
    return cosine_similarity(reference, actual), float(difference.max())


def run_configuration(
    subject: Subject,
    batch: int,
    threads: int,
    shared: dict[str, Prepared],
    args: argparse.Namespace,
) -> list[Row]:
    """Prepare the thread-dependent variants, check every variant's output, time them together."""
    torch.set_num_threads(threads)
    rows: list[Row] = []
    for name in args.variants:
        if VARIANTS[name].per_threads or name not in shared:
            prepared = prepare(name, subject, threads)
            if not VARIANTS[name].per_threads:
                shared[name] = prepared
        else:
            prepared = shared[name]
        rows.append(Row(subject.name, batch, threads, name, prepared))

    with torch.no_grad():
        reference = main_output(subject.model(**subject.inputs))
    for row in rows:
        run = row.prepared.run
        if run is None:
            continue
        try:
            with torch.no_grad():
                row.cosine, row.max_abs_err = accuracy(reference, run(**subject.inputs))
        except Exception as exc:  # prepared but cannot run on these inputs
            row.prepared = failed(f"run failed: {one_line(exc)}")
            if not VARIANTS[row.variant].per_threads:
                shared[row.variant] = row.prepared

    candidates = {
        row.variant: synchronized(row.prepared.run, subject.device)
        for row in rows
        if row.prepared.run is not None
    }
    if candidates:
        latencies = measure_latency(
            candidates,
            subject.inputs,
            args.warmup,
            args.rounds,
            clock=CLOCKS[args.clock],
            budget_s=args.budget,
            min_repeats=min(args.min_rounds, args.rounds),
        )
        eager = latencies.get("eager")
        for row in rows:
            row.latency = latencies.get(row.variant)
            if row.latency is not None and eager is not None:
                row.speedup = Speedup.of(eager, row.latency)
    for row in rows:
        if VARIANTS[row.variant].per_threads:
            row.prepared.run = None
    return rows


@contextmanager
def release_compiled() -> Iterator[None]:
    """Drop what torch.compile keeps (dynamo caches) once a configuration is done with it."""
    try:
        yield
    finally:
        torch._dynamo.reset()
        gc.collect()


PassEffects = dict[str, tuple[Speedup, int]]
"""Per pass specification: its speedup alone on the traced graph, and the nodes it changed."""


def bench_model(
    name: str, args: argparse.Namespace, console: Console, workdir: Path, per_pass: dict[str, PassEffects]
) -> list[Row]:
    """Every configuration of one model; per-pass effects (with --per-pass) go to `per_pass`."""
    loaded = models.load_model(name)
    loaded.model.to(args.device)
    rows: list[Row] = []
    onnx: OnnxArtifacts | None = None
    for batch in args.batches:
        inputs = models.make_inputs(loaded, batch, args.seq)
        if not isinstance(inputs, dict):
            raise TypeError(f"{name}: expected keyword inputs, got {type(inputs).__name__}")
        inputs = {key: value.to(args.device) for key, value in inputs.items()}
        if onnx is None:
            directory = workdir / name
            directory.mkdir()
            onnx = OnnxArtifacts(directory, list(inputs))
        subject = Subject(name, loaded.model, inputs, args.onnx_exporter, onnx, loaded.real_text)
        shared: dict[str, Prepared] = {}
        for threads in args.threads:
            console.print(f"[dim]{name}: batch {batch}, {threads} thread(s)[/]")
            with release_compiled():
                configuration = run_configuration(subject, batch, threads, shared, args)
            console.print(rows_table(f"{name}, batch {batch}, {threads} thread(s)", configuration))
            rows += configuration
        for prepared in shared.values():
            prepared.run = None
        if args.per_pass and name not in per_pass and isinstance(subject.traced, GraphModule):
            per_pass[name] = per_pass_effects(subject.traced, inputs, args)
    return rows


def per_pass_effects(
    traced: GraphModule, inputs: dict[str, torch.Tensor], args: argparse.Namespace
) -> PassEffects:
    """The effect of each computation-preserving pass alone on the traced graph (first batch)."""
    device = torch.device(args.device)
    candidates: dict[str, Callable[..., Any]] = {"traced": synchronized(traced, device)}
    changed: dict[str, int] = {}
    for spec in presets.preset_passes("all-preserving", device):
        transformations = presets.build_all([spec])
        graph_module = compose(*transformations, inplace=True)(copy.deepcopy(traced))
        candidates[spec] = synchronized(graph_module, device)
        changed[spec] = sum(len(_outcome(t, graph_module).changed) for t in transformations)
    latencies = measure_latency(candidates, inputs, args.warmup, args.rounds, clock=CLOCKS[args.clock])
    return {spec: (Speedup.of(latencies["traced"], latencies[spec]), n) for spec, n in changed.items()}


# --- reporting --------------------------------------------------------------------------

HEADER = [
    "model", "batch", "threads", "variant", "median ms", "speedup", "per-round", "cosine",
    "max abs err", "prepare s", "fxopt s", "changed", "rounds", "note",
]  # fmt: skip
NUMERIC = {"batch", "threads", "median ms", "speedup", "per-round", "cosine", "max abs err", "prepare s",
           "fxopt s", "changed", "rounds"}  # fmt: skip


def speedup_text(speedup: Speedup | None) -> str:
    if speedup is None:
        return "n/a"
    return f"{'' if speedup.measurable else '≈'}{speedup.ratio:.2f}x"


def row_cells(row: Row) -> list[str]:
    p, latency, speedup = row.prepared, row.latency, row.speedup
    return [
        row.model,
        str(row.batch),
        str(row.threads),
        row.variant,
        "n/a" if latency is None else f"{latency.median_ms:.1f}",
        speedup_text(speedup) if row.variant != "eager" else "1.00x",
        "" if speedup is None or row.variant == "eager" else f"{speedup.low:.2f}-{speedup.high:.2f}",
        "" if row.cosine is None else f"{row.cosine:.6f}",
        "" if row.max_abs_err is None else f"{row.max_abs_err:.1e}",
        "" if p.prepare_s is None else f"{p.prepare_s:.2f}",
        "" if p.fxopt_s is None else f"{p.fxopt_s:.3f}",
        "" if p.changed is None else str(p.changed),
        "" if latency is None else str(latency.runs),
        (f"FAILED: {p.error}" if p.error else p.note).replace("|", "/"),  # a pipe would split the cell
    ]


def rows_table(title: str, rows: list[Row]) -> Table:
    table = Table(title=title)
    for column in HEADER[3:]:
        table.add_column(column, justify="right" if column in NUMERIC else "left", overflow="fold")
    for row in rows:
        table.add_row(*row_cells(row)[3:])
    return table


def summary_section(rows: list[Row], variants: list[str]) -> list[str]:
    """Speedups side by side: one line per model, batch and thread count, one column per variant."""
    keys = list(dict.fromkeys((r.model, r.batch, r.threads) for r in rows))
    by_key = {(r.model, r.batch, r.threads, r.variant): r for r in rows}
    lines = []
    for model, batch, threads in keys:
        cells = []
        for variant in variants:
            row = by_key.get((model, batch, threads, variant))
            if row is None or row.speedup is None:
                cells.append("" if row is None else "failed" if row.prepared.error else "n/a")
            elif variant == "eager":
                cells.append(f"{row.latency.median_ms:.1f} ms" if row.latency else "")
            else:
                cosine = "" if row.cosine is None or row.cosine >= 0.99999 else f", cos {row.cosine:.6f}"
                cells.append(speedup_text(row.speedup) + cosine)
        lines.append([model, str(batch), str(threads), *cells])
    return [
        "## Speedup over eager float32, side by side",
        "",
        "Ratio of median latencies (eager: its median). `≈`: the interquartile ranges of eager and the "
        "variant overlap, no measurable difference. The cosine of the main output against eager float32 "
        "is shown where it is below 0.99999; `failed`: see the reason in the full table; `n/a`: not "
        "applicable to this model.",
        "",
        *markdown_table(["model", "batch", "threads", *variants], lines),
        "",
    ]


def preparation_section(rows: list[Row]) -> list[str]:
    """Preparation times per model at batch 1 / first thread count: the targets' ratios."""
    lines = []
    seen: set[str] = set()
    for row in rows:
        if row.model in seen:
            continue
        seen.add(row.model)
        first = [r for r in rows if (r.model, r.batch, r.threads) == (row.model, row.batch, row.threads)]
        cells = {r.variant: r.prepared for r in first}
        compile_s = next(
            (cells[v].prepare_s for v in ("compile", "compile-freezing") if v in cells and not cells[v].error),
            None,
        )
        for variant in ("fxopt-default", "fxopt-fast", "fxopt-fast-export", "compile-fxopt", "compile-fxopt-inductor"):
            p = cells.get(variant)
            if p is None or p.error or p.prepare_s is None:
                continue
            own = "" if p.fxopt_s is None else f"{p.fxopt_s:.3f}"
            ratio = "" if not compile_s else f"{p.prepare_s / compile_s:.3f}"
            if compile_s and p.fxopt_s is not None:
                ratio += f" / {p.fxopt_s / compile_s:.4f}"
            lines.append([
                row.model, variant, f"{p.prepare_s:.2f}", own,
                "" if compile_s is None else f"{compile_s:.1f}", ratio,
            ])  # fmt: skip
    if not lines:
        return []
    return [
        "## Preparation: fxopt against torch.compile's first call",
        "",
        f"Batch {rows[0].batch}, {rows[0].threads} thread(s). Targets: trace + passes <= 1/10 (0.1) of "
        "torch.compile's first call, fxopt's own part <= 1/100 (0.01). For the torch.compile backend "
        "(compile-fxopt*), preparation is its first call: Dynamo's capture, fxopt's passes (+ Inductor).",
        "",
        *markdown_table(
            ["model", "variant", "prepare s", "fxopt s", "torch.compile first call s",
             "ratios (trace + passes / fxopt)"],
            lines,
        ),  # fmt: skip
        "",
    ]


def per_pass_section(per_pass: dict[str, PassEffects]) -> list[str]:
    if not per_pass:
        return []
    passes = list(next(iter(per_pass.values())))
    lines = [
        [name, *(f"{speedup_text(s)} ({n})" if n else "- (0)" for s, n in (effects[p] for p in passes))]
        for name, effects in per_pass.items()
    ]
    return [
        "## Effect of each computation-preserving pass alone",
        "",
        "Speedup of the traced graph plus the one pass over the traced graph (ratio of medians, `≈`: "
        "no measurable difference), nodes changed in parentheses; `- (0)`: the pass found nothing.",
        "",
        *markdown_table(["model", *passes], lines),
        "",
    ]


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, help=f"default: {' '.join(MODELS)}")
    parser.add_argument("--batches", nargs="+", type=int, help="batch sizes (default: 1 8)")
    parser.add_argument("--threads", nargs="+", type=int, help="torch / ONNX Runtime threads (default: 1 2)")
    parser.add_argument(
        "--variants", nargs="+", choices=list(VARIANTS), help="default: all; eager is always included"
    )
    parser.add_argument("--seq", type=int, default=128, help="sequence length of text models (default 128)")
    parser.add_argument("--rounds", type=int, help="timed rounds at most (default 15; --quick 5)")
    parser.add_argument("--min-rounds", type=int, default=5, help="timed rounds at least (default 5)")
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed rounds first, after the call that checks accuracy (default 1)"
    )
    parser.add_argument(
        "--budget",
        type=float,
        help="seconds of timed rounds per configuration, after which timing stops once --min-rounds "
        "are in (default 30; --quick 20)",
    )
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="wall", help="wall (default) or cpu")
    parser.add_argument(
        "--onnx-exporter", choices=("torchscript", "dynamo"), default="torchscript", help="torch.onnx exporter"
    )
    parser.add_argument("--per-pass", action="store_true", help="also time each preserving pass alone")
    parser.add_argument("--quick", action="store_true", help="minilm and resnet50, batch 1, 1 thread, 5 rounds")
    parser.add_argument("--output", help="result name under bench/results (default latency / latency_quick)")
    parser.add_argument(
        "--device", default="cpu", help="where the models run: cpu (default) or cuda (CPU runtimes are skipped)"
    )
    args = parser.parse_args()
    quick = args.quick
    args.models = args.models or list(QUICK_MODELS if quick else MODELS)
    args.batches = args.batches or ([1] if quick else [1, 8])
    args.threads = args.threads or ([1] if quick else [1, 2])
    args.variants = ["eager", *(v for v in (args.variants or VARIANTS) if v != "eager")]
    args.rounds = args.rounds or (5 if quick else 15)
    args.budget = args.budget if args.budget is not None else (20.0 if quick else 30.0)
    args.output = args.output or ("latency_quick" if quick else "latency")
    return args


def main() -> None:
    args = parse_arguments()
    warnings.simplefilter("ignore")  # torch's deprecation chatter would bury the tables
    logging.getLogger().setLevel(logging.ERROR)  # ONNX Runtime's tools log advice to the root logger
    torch._logging.set_logs(all=logging.ERROR)  # torch.export's notes on specialised sizes
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    machine = machine_description(args.threads)
    if gpu_name(args.device):
        machine.insert(0, f"- GPU: {gpu_name(args.device)}, torch CUDA {torch.version.cuda}")
    console = Console(width=220)
    rows: list[Row] = []
    per_pass: dict[str, PassEffects] = {}
    started = time.perf_counter()
    # torch.compile's preparation time is a cold compile, like a user's first: inductor's caches,
    # which persist across runs under /tmp, go to a fresh directory (inductor reads it on use).
    with tempfile.TemporaryDirectory(prefix="fxopt-bench-") as scratch:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(scratch) / "inductor")
        for name in args.models:
            try:
                rows += bench_model(name, args, console, Path(scratch), per_pass)
            except Exception as exc:  # a model that cannot even load is listed, the run goes on
                console.print(f"[red]{name}: {one_line(exc)}[/]")
                rows.append(Row(name, 0, 0, "eager", failed(f"model failed: {one_line(exc)}")))
            gc.collect()
    minutes = (time.perf_counter() - started) / 60

    sections = [
        "## Setup",
        "",
        f"- inputs: batch {', '.join(map(str, args.batches))}; sequence {args.seq} for text models, "
        f"224x224 images; eager model float32 on {gpu_name(args.device) or 'CPU'}",
        f"- threads: {', '.join(map(str, args.threads))} (torch.set_num_threads and ONNX Runtime's intra-op threads)",
        f"- timing: {args.clock} clock; up to {args.rounds} interleaved rounds (at least {args.min_rounds}, "
        f"fewer once {args.budget:.0f} s of timed rounds are spent) after {args.warmup} warm-up rounds; "
        "all variants of a configuration take turns within each round",
        "- speedup: eager median / variant median; per-round: smallest and largest ratio of the two in one "
        "round; `≈`: interquartile ranges overlap, no measurable difference",
        "- cosine, max abs err: the main (first) output against eager float32, computed in float64",
        "- prepare s: fxopt trace + passes; torch.compile's first call; quantize or `.to()`; "
        "ONNX export (+ optimize / quantize) + session creation. fxopt s: fxopt's own part "
        "(passes, sync, recompile). changed: nodes changed (fxopt), Linear modules quantized (ao-int8)",
        "- torch.compile's preparation is cold (a fresh inductor cache directory) only for the first "
        "compilation of a model, `compile` at the first batch and thread count: the later ones (freezing, "
        "other threads and batches) reuse inductor's caches for the kernels they share with it, as a "
        "user's second compilation would",
        f"- fxopt presets for a model on {args.device}: default = "
        f"{', '.join(presets.preset_passes('default', args.device))}; "
        f"fast = {', '.join(presets.preset_passes('fast', args.device))}",
        f"- ONNX: {args.onnx_exporter} exporter, one export per model with a dynamic batch axis; "
        "int8 = quantize_dynamic(QInt8, per_channel) of the float32 export",
        f"- wall time of this run: {minutes:.1f} min",
        "",
        *summary_section(rows, args.variants),
        *preparation_section(rows),
        "## All results",
        "",
        *markdown_table(HEADER, [row_cells(row) for row in rows]),
        "",
        *per_pass_section(per_pass),
    ]
    command = "python bench/latency.py " + " ".join(sys.argv[1:])
    path = write_result(
        args.output,
        f"Model latency on {gpu_name(args.device) or 'CPU'}: fxopt against eager, torch.compile, "
        "torch.ao int8, bfloat16, ONNX Runtime and OpenVINO",
        command.strip(),
        machine,
        sections,
    )
    console.print(f"wrote {path} ({minutes:.1f} min)")


if __name__ == "__main__":
    main()
