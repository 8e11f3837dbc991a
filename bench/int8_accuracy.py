"""Low-precision variants of the real all-MiniLM-L6-v2, their speed and their accuracy on text
they were not calibrated on.

Calibration (where a variant needs one) uses `fxopt.cli.sentences.CALIBRATION`; accuracy is the
minimum cosine of `last_hidden_state` against eager float32 over the sentences of `HELD_OUT`,
one sentence per call (batch 1, padded to --seq tokens), so no variant is judged on the inputs it
was tuned on. Latency: batch 1, interleaved rounds on a calibration sentence, median with the
range of per-round speedups (`fxopt.cli.timing`), one thread by default.

Variants: eager float32; fxopt `default` and `fast` (kernel choices measured now, into an empty
cache: preparation includes the tuning); fxopt int8 (`QuantizeLinearsInt8` on every Linear it
chooses, + `default`); fxopt int8-cal (calibrated for cosine >= --min-cosine on the calibration
text, checked on the held-out text); torch.ao `quantize_dynamic` (per-tensor and per-channel
weights); the whole model in bfloat16.

Run: `python bench/int8_accuracy.py` (writes bench/results/int8_accuracy_<cpu>.md).
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

os.environ.setdefault("FXOPT_CACHE_DIR", tempfile.mkdtemp(prefix="fxopt-bench-cache-"))

import fxopt  # noqa: E402
from fxopt.cli.models import _minilm  # noqa: E402
from fxopt.cli.sentences import CALIBRATION, HELD_OUT, minilm_batch  # noqa: E402
from fxopt.cli.timing import Speedup, measure_latency  # noqa: E402
from fxopt.optimization import QuantizeLinearsInt8, compose, hardware, presets  # noqa: E402
from fxopt.verification.verify import cosine_similarity  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_line, machine_description, markdown_table, write_result  # noqa: E402


def last_hidden(output: Any) -> torch.Tensor:
    return output["last_hidden_state"] if isinstance(output, dict) else output[0]


def held_out_cosine(
    model: Callable[..., Any], reference: list[torch.Tensor], held_out: list[dict[str, torch.Tensor]]
) -> float:
    with torch.no_grad():
        cosines = [cosine_similarity(ref, last_hidden(model(**x)).float()) for ref, x in zip(reference, held_out)]
    return min(c for c in cosines if c is not None)


def fxopt_variant(traced: torch.fx.GraphModule, passes: list[Any]) -> tuple[torch.fx.GraphModule, float, float]:
    """The graph after `passes`; seconds of passes (tuning included) and of tuning alone."""
    graph_module = copy.deepcopy(traced)
    start = time.perf_counter()
    graph_module = compose(*passes, inplace=True)(graph_module)
    seconds = time.perf_counter() - start
    tuning = sum(getattr(getattr(t, "report", None), "tuning_s", 0.0) for t in passes)
    return graph_module, seconds, tuning


def with_int8(int8: QuantizeLinearsInt8) -> list[Any]:
    """`default` with the int8 pass before the oneDNN fusion, which would hide the Linears."""
    return presets.with_steps_before_fusions("default", [int8])


def ao_int8(model: nn.Module, per_channel: bool) -> nn.Module:
    quantization = torch.ao.quantization
    qconfig = quantization.per_channel_dynamic_qconfig if per_channel else quantization.default_dynamic_qconfig
    return torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {nn.Linear: qconfig}, dtype=torch.qint8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--min-cosine", type=float, default=0.999)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    machine = machine_description()

    model = _minilm().eval()
    timing_input = minilm_batch(CALIBRATION[:1], args.seq)
    calibration = minilm_batch(CALIBRATION, args.seq)
    held_out = [minilm_batch((s,), args.seq) for s in HELD_OUT]
    with torch.no_grad():
        reference = [last_hidden(model(**x)) for x in held_out]

    start = time.perf_counter()
    traced = fxopt.trace(model, example_inputs=calibration)  # batch 8: the batch size stays dynamic
    trace_s = time.perf_counter() - start

    variants: dict[str, Callable[..., Any]] = {"eager": model}
    prep: dict[str, str] = {"eager": ""}
    notes: dict[str, str] = {}
    for name, passes in (
        ("fxopt-default", lambda: presets.build_all(presets.preset_passes("default"))),
        ("fxopt-fast", lambda: presets.build_all(presets.preset_passes("fast"))),
        ("fxopt-int8", lambda: with_int8(QuantizeLinearsInt8())),
    ):
        gm, seconds, tuning = fxopt_variant(traced, passes())
        variants[name] = gm
        prep[name] = f"{trace_s:.2f} + {seconds:.2f} (tuning {tuning:.2f})"
    start = time.perf_counter()
    int8 = QuantizeLinearsInt8.calibrated(traced, calibration, min_cosine=args.min_cosine, held_out=held_out[:4])
    calibrate_s = time.perf_counter() - start
    gm, seconds, tuning = fxopt_variant(traced, with_int8(int8))
    variants["fxopt-int8-cal"] = gm
    prep["fxopt-int8-cal"] = f"{trace_s:.2f} + {calibrate_s:.2f} calibration + {seconds:.2f} (tuning {tuning:.2f})"
    notes["fxopt-int8-cal"] = f"{len(int8.keep)} of 37 Linears kept in float32; checked on held-out 1-4"
    for name, per_channel in (("ao-int8", False), ("ao-int8-per-channel", True)):
        start = time.perf_counter()
        variants[name] = ao_int8(model, per_channel)
        prep[name] = f"{time.perf_counter() - start:.2f}"
    start = time.perf_counter()
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    variants["bf16"] = bf16
    prep["bf16"] = f"{time.perf_counter() - start:.2f}"

    latencies = measure_latency(variants, timing_input, warmup=3, repeats=args.rounds)
    rows = []
    for name, model_variant in variants.items():
        latency = latencies[name]
        speedup = Speedup.of(latencies["eager"], latency)
        rows.append([
            name, f"{latency.median_ms:.2f} ({latency.q1_ms:.2f}-{latency.q3_ms:.2f})",
            "1.00x" if name == "eager" else speedup.text(),
            f"{held_out_cosine(model_variant, reference, held_out):.5f}", prep[name], notes.get(name, ""),
        ])  # fmt: skip
    sections = [
        f"## Real all-MiniLM-L6-v2, batch 1, seq {args.seq}, {args.threads} thread(s), {args.rounds} rounds",
        "",
        *markdown_table(
            ["variant", "median ms (IQR)", "speedup over eager fp32", "held-out min cosine",
             "preparation s (trace + passes)", "note"],
            rows,
        ),  # fmt: skip
        "",
        load_line(),
    ]
    cpu = re.sub(r"[^a-z0-9]+", "-", hardware.cpu_model().lower()).strip("-")
    path = write_result(
        f"int8_accuracy_{cpu}", "Low precision on the real MiniLM: speed and held-out accuracy",
        "python bench/int8_accuracy.py " + " ".join(sys.argv[1:]), machine, sections,
    )  # fmt: skip
    print("\n".join(sections))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
