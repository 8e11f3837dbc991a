"""What packing the weights of oneDNN's fused Linears once is worth: per shape, then per model.

FuseLinearActivationOneDnn's graphs call `fxopt.runtime.onednn_linear.linear_pointwise`, which
packs each weight into oneDNN's layout on its first call and keeps it; before, they called
`torch.ops.mkldnn._linear_pointwise` on the plain weight, which oneDNN reorders on every call.
Both give the same bits. This ablation times the two side by side in interleaved rounds:

* per shape (the Linears of MiniLM, BERT-base / GPT-2), at 1 and 128 rows, float32 and
  bfloat16 where oneDNN runs it natively: the median of `--rounds` rounds of 5 calls each, each
  kernel on a weight of its own (warm in the cache after its first call: inside a model a
  weight is read once per forward, which favours the packed form more);
* per model (batch 1, sequence 128): fxopt's `default` and `fast` graphs as made, and the same
  graphs with every packed call pointed back at the plain op (`... unpacked`), eager float32 as
  the reference; the ratio of medians with the range of per-round ratios, `≈` where the
  interquartile ranges overlap.

Run: `python bench/linear_packing.py [--threads 1] [--rounds 15] [--models minilm bert-base gpt2]`;
writes bench/results/linear_packing_t<threads>.md.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_description, markdown_table, write_result  # noqa: E402

import fxopt  # noqa: E402
from fxopt.cli import models  # noqa: E402
from fxopt.cli.timing import Speedup, measure_latency  # noqa: E402
from fxopt.optimization import hardware  # noqa: E402
from fxopt.runtime.onednn_linear import linear_pointwise  # noqa: E402

SHAPES = ((384, 384), (384, 1536), (1536, 384), (768, 768), (768, 3072), (3072, 768))  # (in, out)


def shape_rows(rounds: int) -> list[list[str]]:
    dtypes = [torch.float32, *([torch.bfloat16] if hardware.onednn_bfloat16_available() else [])]
    rows = []
    for dtype in dtypes:
        for k, n in SHAPES:
            for m in (1, 128):
                x = torch.randn(m, k, dtype=dtype)
                # A weight of its own per kernel: none finds another's weight warm in the cache.
                w = [torch.randn(n, k, dtype=dtype) / k**0.5 for _ in range(3)]
                b = torch.randn(n, dtype=dtype)
                calls: dict[str, Callable[[], object]] = {
                    "aten": lambda: F.linear(x, w[0], b),
                    "plain": lambda: torch.ops.mkldnn._linear_pointwise(x, w[1], b, "none", [], ""),
                    "packed": lambda: linear_pointwise(x, w[2], b, "none", [], ""),
                }
                times: dict[str, list[float]] = {name: [] for name in calls}
                for _ in range(rounds):
                    for name, call in calls.items():
                        start = time.perf_counter()
                        for _ in range(5):
                            call()
                        times[name].append((time.perf_counter() - start) / 5 * 1e3)
                med = {name: statistics.median(values) for name, values in times.items()}
                rows.append([
                    str(dtype).removeprefix("torch."), f"{m}x{k}x{n}", f"{med['aten']:.3f}",
                    f"{med['plain']:.3f}", f"{med['packed']:.3f}", f"{med['plain'] / med['packed']:.2f}x",
                ])  # fmt: skip
    return rows


def unpacked(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` with its packed oneDNN Linears calling the plain op instead (same arguments)."""
    copied = copy.deepcopy(gm)
    for node in copied.graph.nodes:
        if node.target is linear_pointwise:
            node.target = torch.ops.mkldnn._linear_pointwise.default
    copied.recompile()
    return copied


def model_rows(names: list[str], rounds: int) -> list[list[str]]:
    rows = []
    for name in names:
        loaded = models.load_model(name)
        inputs = models.make_inputs(loaded, 1, 128)
        assert isinstance(inputs, dict)
        candidates: dict[str, Callable[..., object]] = {"eager": loaded.model}
        for preset in ("default", "fast"):
            graph = fxopt.optimize(loaded.model, preset, example_inputs=inputs)
            candidates[preset] = graph
            candidates[f"{preset} unpacked"] = unpacked(graph)
        latencies = measure_latency(candidates, inputs, warmup=3, repeats=rounds, min_repeats=rounds)
        rows.append([name, "eager", f"{latencies['eager'].median_ms:.1f}", "1.00x", ""])
        for label, latency in list(latencies.items())[1:]:
            speedup = Speedup.of(latencies["eager"], latency)
            mark = "" if speedup.measurable else "≈"
            rows.append([
                name, label, f"{latency.median_ms:.1f}", f"{mark}{speedup.ratio:.2f}x",
                f"{speedup.low:.2f}-{speedup.high:.2f}",
            ])  # fmt: skip
        for preset in ("default", "fast"):
            packed = Speedup.of(latencies[f"{preset} unpacked"], latencies[preset])
            mark = "" if packed.measurable else "≈"
            rows.append([
                name, f"{preset}: packed over unpacked", "", f"{mark}{packed.ratio:.2f}x",
                f"{packed.low:.2f}-{packed.high:.2f}",
            ])  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--models", nargs="+", default=["minilm", "bert-base", "gpt2"])
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    machine = machine_description([args.threads])
    sections = [
        "## One Linear: ATen, oneDNN on the plain weight, oneDNN on the packed weight (median ms)",
        "",
        *markdown_table(
            ["dtype", "rows x in x out", "aten", "oneDNN plain", "oneDNN packed", "plain / packed"],
            shape_rows(args.rounds),
        ),
        "",
        "## Whole models, batch 1, sequence 128: speedup over eager float32",
        "",
        *markdown_table(
            ["model", "variant", "median ms", "speedup", "per-round"], model_rows(args.models, args.rounds)
        ),
        "",
    ]
    command = "python bench/linear_packing.py " + " ".join(sys.argv[1:])
    path = write_result(
        f"linear_packing_t{args.threads}", "oneDNN Linears on packed weights: an ablation",
        command.strip(), machine, sections,
    )  # fmt: skip
    print(path.read_text())


if __name__ == "__main__":
    main()
