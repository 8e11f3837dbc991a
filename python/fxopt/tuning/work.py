"""How much work a Linear does against its whole graph, so that queries about Linears too small
to matter are not timed.

An op's work is its multiply-adds plus `BYTES_TO_MACS` per byte of weight it reads (a roofline
in one number: a core streams a byte of weight in about the time it does that many float32
multiply-adds). BERT-base's pooler, one token through a 768x768 Linear, does 0.06% of the
model's work at 128 tokens; timing its candidates (on weights streamed from memory, as a
one-token Linear is) took 0.16 of the 0.6 s BERT-base's tuning took, for no measurable
difference to the model. MobileNetV2's classifier, one image through 1280x1000, reads 5 MB of
weights: 5% of that model's work, so it is timed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import cast

import torch

from .kernels import LINEAR_OPS

BYTES_TO_MACS = 3
"""Float32 multiply-adds per byte of weight read, for a core: 30-60 GMAC/s against 10-20 GB/s."""

NEGLIGIBLE_SHARE = 0.005
"""A query whose op does less than this share of its graph's work is answered by its unchanged
op, untimed."""


def query_work(op: str, shape: Sequence[int]) -> int | None:
    """The work of one call of a Linear query's op at `shape` (no symbolic sizes left); None for
    other ops. Only Linears are ever left untimed: a convolution's or attention's time is its
    activations' traffic and a call's fixed cost as much as its arithmetic (MobileNetV2's
    depthwise convolutions do 3% of its multiply-adds and take a fifth of its time), which this
    measure does not see."""
    if op not in LINEAR_OPS:
        return None
    tokens, in_features, out_features = shape
    return tokens * in_features * out_features + BYTES_TO_MACS * 4 * in_features * out_features


class GraphWork:
    """The work of a graph's Linears, matrix products, convolutions and attention at the sizes
    it was traced at (fx's recorded values); ops whose sizes were not recorded count nothing, so
    the total errs low and a query's share high (timed rather than not)."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.per_op = Counter(_node_work(node) for node in gm.graph.nodes if node.op == "call_function")
        self.total = sum(work * count for work, count in self.per_op.items())

    def share(self, work: int) -> float | None:
        """The share of the total that ops doing `work` each do together: one timing decides
        every op of a query (twelve layers' attention, each 0.2% of BERT-base, are one query),
        so an op counts as often as the graph holds ops of its work. None for an empty total."""
        return work * max(1, self.per_op[work]) / self.total if self.total > 0 else None


def _node_work(node: torch.fx.Node) -> int:
    name = getattr(node.target, "__name__", str(node.target))
    out = _sizes(node)
    if out is None:
        return 0
    if name == "scaled_dot_product_attention":
        query, key = (_sizes(a) if isinstance(a, torch.fx.Node) else None for a in node.args[:2])
        return 0 if query is None or key is None else 2 * math.prod(query) * key[-2]
    inputs = [_sizes(a) if isinstance(a, torch.fx.Node) else None for a in node.args[:3]]
    if "conv" in name and len(inputs) > 1 and inputs[1] is not None and len(inputs[1]) >= 3:
        weights = math.prod(inputs[1])
        return math.prod(out) * math.prod(inputs[1][1:]) + BYTES_TO_MACS * 4 * weights
    if "linear" in name or name in ("mm", "bmm", "matmul", "addmm", "baddbmm"):
        x = inputs[1] if name in ("addmm", "baddbmm") else inputs[0]
        if x is None or not x:
            return 0
        work = math.prod(out) * x[-1]
        weight = inputs[1] if "linear" in name else None
        return work + (BYTES_TO_MACS * 4 * math.prod(weight) if weight else 0)
    return 0


def _sizes(node: torch.fx.Node) -> list[int] | None:
    """The sizes `node`'s value was traced at, None where any is unknown."""
    value = node.meta.get("val", node.meta.get("tensor_meta"))
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    sizes = [hint(size) for size in shape]
    return None if None in sizes else cast(list[int], sizes)


def hint(size: object) -> int | None:
    """A size as an int: itself, or the value a symbolic size was traced at; None if neither."""
    if isinstance(size, int):
        return size
    hint = getattr(getattr(size, "node", None), "hint", None)
    return int(hint) if isinstance(hint, int) else None
