"""One Linear at one token (a decoding step), each weight form fxopt can emit, side by side.

Inside a model a Linear's weight is not in L2 when it runs (the other layers ran since), and
at one token reading it is nearly the whole cost. So each kernel here cycles through copies of
its weight totalling about 120 MB of float32, and a call's time is that of a weight streamed in:
float32 (`F.linear`), bfloat16 (`F.linear` on bfloat16 copies), ATen's weight-only int8 with
bfloat16 activations (`_weight_int8pack_mm`, what QuantizeLinearsWeightOnly's `int8_weight_only`
emits), fxopt's own int8 kernel with float32 activations (`fxopt_int8`,
fxopt.runtime.int8_weight_linear), ATen's int4 (`_weight_int4pack_mm_for_cpu`, group 32,
bfloat16 activations) and fxopt's own int4 kernel (`fxopt_int4`, fxopt.runtime.int4_weight_linear,
group 32, float32 activations rounded to int8 per row inside the kernel, VNNI or AVX2 byte
products): `decode-int4` picks between the two int4 kernels per Linear.
Kernels run in turns, round after round (median and range of `--rounds`). Shapes: the Llama of
bench/generate.py (768 hidden, 2048 MLP, 32000 vocabulary).

Run: `python bench/decode_kernels.py [--threads N]`; writes bench/results/decode_kernels_t<N>.md.
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

from fxopt.engine.tensor_ops import TorchTensorOps  # noqa: E402
from fxopt.runtime.int4_weight_linear import int4_weight_linear  # noqa: E402
from fxopt.runtime.int8_weight_linear import int8_weight_linear  # noqa: E402

SHAPES = ((768, 768), (768, 2048), (2048, 768), (768, 32000))  # (in, out)
STREAMED_BYTES = 120e6
WEIGHTS = TorchTensorOps()  # quantized exactly as the passes quantize


def kernels(k: int, n: int) -> dict[str, list[Callable[[], object]]]:
    """Per kernel, one call per weight copy."""
    copies = max(2, int(STREAMED_BYTES // (n * k * 4)))
    x = torch.randn(1, k)
    xb = x.bfloat16()
    floats = [torch.randn(n, k) / k**0.5 for _ in range(copies)]
    int8 = [WEIGHTS.quantize_rows_int8(w) for w in floats]
    int4 = [WEIGHTS.quantize_groups_int4(w, 32) for w in floats]
    own_int4 = [WEIGHTS.quantize_groups_int4(w, 32, "fxopt") for w in floats]
    return {
        "float32": [lambda w=w: F.linear(x, w) for w in floats],
        "bfloat16": [lambda w=w.bfloat16(): F.linear(xb, w) for w in floats],
        "ATen int8, bf16 activations": [
            lambda v=v, s=s.bfloat16(): torch.ops.aten._weight_int8pack_mm(xb, v, s) for v, s in int8
        ],
        "fxopt int8, fp32 activations": [lambda v=v, s=s: int8_weight_linear(x, v, s) for v, s in int8],
        "ATen int4, bf16 activations": [
            lambda p=p, sz=sz.bfloat16(): torch.ops.aten._weight_int4pack_mm_for_cpu(xb, p, 32, sz)
            for p, sz in int4
        ],
        "fxopt int4, int8 activations": [lambda p=p, s=s: int4_weight_linear(x, p, s) for p, s in own_int4],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    lines = [f"# One Linear at one token, weights streamed, {args.threads} thread(s)", "", *machine_description()]
    lines += [f"- rounds: {args.rounds}, interleaved; ms per call, median (min-max); x = float32 / kernel", ""]
    rows: list[str] = []
    names: list[str] = []
    for k, n in SHAPES:
        candidates = kernels(k, n)
        names = list(candidates)
        times = interleaved_times(candidates, args.rounds)
        cells = ratio_cells(times, "float32", 1e3, 3)
        rows.append(f"| {k} x {n} | " + " | ".join(cells) + " |")
    lines += ["| in x out | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|", *rows, ""]
    lines.append(load_line())
    text = "\n".join(lines) + "\n"
    print(text)
    (RESULTS / f"decode_kernels_t{args.threads}.md").write_text(text)


if __name__ == "__main__":
    main()
