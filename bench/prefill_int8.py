"""One Linear over a prompt's 128 tokens, each int8 form QuantizeLinearsInt8 can emit, against the
float32 Linear it replaces, side by side.

Forms: float32 (`F.linear`, ATen) and oneDNN's float32 Linear on a weight packed once
(fxopt.runtime.onednn_linear, what `default` runs); the per-token int8 Linear
(fxopt.runtime.per_token_int8: rows quantized with one scale each, the product, the int32 sums
scaled back and the bias added) and its product alone: `aten._int_mm` where the CPU has int8
dot products (VNNI or AMX), fxopt's exact AVX2 product (kernels/int8_matmul.h) where it has AVX2;
torch's packed dynamic int8 Linears (fbgemm, oneDNN; activations quantized per tensor) where this
torch has them. The `exact` column says whether each integer product equals the int64 one on
full-range operands (oneDNN capped at AVX2 sums u8 x s8 pairs in saturating 16-bit lanes).
Kernels run in turns, round after round (median and range of `--rounds`); x = float32 / form.
Shapes: MiniLM's and BERT-base's Linears (the q/k/v triple merged).

Run: `python bench/prefill_int8.py [--threads N]`; capped as an AVX2-only CPU:
`ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2 python
bench/prefill_int8.py`. Writes bench/results/prefill_int8_t<N>[_capped].md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, interleaved_times, load_line, machine_description, ratio_cells  # noqa: E402

from fxopt import _core  # noqa: E402
from fxopt.engine.tensor_ops import TorchTensorOps  # noqa: E402
from fxopt.optimization import hardware  # noqa: E402
from fxopt.runtime import dynamic_int8, onednn_linear, per_token_int8  # noqa: E402

TOKENS = 128
SHAPES = ((384, 1152), (384, 384), (384, 1536), (1536, 384), (768, 3072), (3072, 768))  # (in, out)
WEIGHTS = TorchTensorOps()  # quantized exactly as the pass quantizes


def forms(k: int, n: int) -> tuple[dict[str, Callable[[], object]], dict[str, bool]]:
    """Per form, one call; per integer product, whether it is exact."""
    x = torch.randn(TOKENS, k)
    weight = torch.randn(n, k) / k**0.5
    bias = torch.randn(n)
    values, scales = WEIGHTS.quantize_rows_int8(weight)
    by_column = values.t().contiguous()
    calls: dict[str, Callable[[], object]] = {
        "float32 (ATen)": lambda: F.linear(x, weight, bias),
        "float32 (oneDNN)": lambda: onednn_linear.linear_pointwise(x, weight, bias, "none", [], None),
    }
    exact: dict[str, bool] = {}
    if per_token_int8.available():
        calls["per-token int8"] = lambda: per_token_int8.per_token_int8_linear(x, by_column, scales, bias)
    q = torch.randint(-128, 128, (TOKENS, k), dtype=torch.int8)
    expected = (q.long() @ by_column.long()).int()
    products = {"_int_mm": lambda: torch._int_mm(q, by_column)}
    if _core.int8_matmul_available():
        products["fxopt int8_matmul"] = lambda: per_token_int8.fxopt_product(q, by_column, torch.get_num_threads())
    for name, product in products.items():
        exact[name] = torch.equal(product(), expected)  # type: ignore[arg-type]
        if name != "_int_mm" or hardware.fast_int8_cpu():
            calls[f"product: {name}"] = product
    for engine in dynamic_int8.ENGINES:
        if dynamic_int8.available(engine):
            packed_values, packed_scales = WEIGHTS.quantize_rows_int8(weight, dynamic_int8.weight_max(engine))
            calls[f"dynamic int8 ({engine})"] = lambda v=packed_values, s=packed_scales, e=engine: (
                dynamic_int8.dynamic_int8_linear(x, v, s, bias, e)
            )
    return calls, exact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    lines = [f"# One Linear over {TOKENS} tokens: int8 forms against float32, {args.threads} thread(s)", ""]
    lines += [*machine_description(), f"- fxopt: {hardware.describe()}"]
    lines += [f"- rounds: {args.rounds}, interleaved; us per call, median (min-max); x = float32 (ATen) / form", ""]
    rows: list[str] = []
    names: list[str] = []
    for k, n in SHAPES:
        calls, exact = forms(k, n)
        names = list(calls)
        with torch.no_grad():
            for call in calls.values():  # packs and warms
                call()
        times = interleaved_times({name: [call] * 5 for name, call in calls.items()}, args.rounds)
        cells = ratio_cells(times, "float32 (ATen)", 1e6, 0)
        checks = ", ".join(f"{name}: {'yes' if ok else 'NO'}" for name, ok in exact.items())
        rows.append(f"| {k} x {n} | " + " | ".join(cells) + f" | {checks} |")
    lines += ["| in x out | " + " | ".join(names) + " | exact product |", "|---" * (len(names) + 2) + "|", *rows, ""]
    lines.append(load_line())
    text = "\n".join(lines) + "\n"
    print(text)
    capped = "_capped" if hardware.onednn_isa_cap() else ""
    (RESULTS / f"prefill_int8_t{args.threads}{capped}.md").write_text(text)


if __name__ == "__main__":
    main()
