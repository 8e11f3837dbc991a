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
from torch import nn

from .kernels import LINEAR_OPS

BYTES_TO_MACS = 3
"""Float32 multiply-adds per byte of weight read, for a core: 30-60 GMAC/s against 10-20 GB/s."""

NEGLIGIBLE_SHARE = 0.01
"""A query whose op does less than this share of its graph's work is answered by its unchanged
op, untimed: candidates measure within a fifth of each other, so the most a choice could win
is a fifth of this share, inside any timing's spread. ResNet-50's classifier, one image through
2048x1000 (0.6%), took 0.125 s of its 0.95 s of tuning, streaming copies of its weight, to
keep ATen's Linear."""


def query_work(op: str, shape: Sequence[int]) -> tuple[int, int] | None:
    """The multiply-adds and weight bytes of one call of a Linear query's op at `shape` (no
    symbolic sizes left); None for other ops. Only Linears are ever left untimed: a
    convolution's or attention's time is its activations' traffic and a call's fixed cost as
    much as its arithmetic (MobileNetV2's depthwise convolutions do 3% of its multiply-adds and
    take a fifth of its time), which this measure does not see."""
    if op not in LINEAR_OPS:
        return None
    tokens, in_features, out_features = shape
    return tokens * in_features * out_features, 4 * in_features * out_features


class GraphWork:
    """The work of a graph's Linears, matrix products, convolutions and attention at the sizes
    it was traced at (fx's recorded values), whether called as functions or as modules (the
    sized and symbolic tracers keep `nn.Linear` and `nn.Conv2d` as `call_module` nodes); ops
    whose sizes were not recorded count nothing, so the total errs low and a query's share high
    (timed rather than not)."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        ops = [_node_work(node) for node in gm.graph.nodes if node.op == "call_function"]
        ops += [_module_work(gm, node) for node in gm.graph.nodes if node.op == "call_module"]
        self.total = sum(macs + BYTES_TO_MACS * weight_bytes for macs, weight_bytes in ops)
        self.by_macs = Counter(macs for macs, _ in ops if macs)

    def share(self, macs: int, weight_bytes: int) -> float | None:
        """The share of the total that the ops of one query do together: one timing decides
        every op of a query (twelve layers' attention, each 0.2% of BERT-base, are one query),
        so an op counts as often as the graph holds ops of its multiply-adds (a weight whose
        size was not recorded leaves that count alone). None for an empty total."""
        if self.total <= 0:
            return None
        return (macs + BYTES_TO_MACS * weight_bytes) * max(1, self.by_macs[macs]) / self.total


def _node_work(node: torch.fx.Node) -> tuple[int, int]:
    """The node's multiply-adds and the bytes of the weight it reads (float32), where known."""
    name = getattr(node.target, "__name__", str(node.target))
    out = _sizes(node)
    if out is None:
        return 0, 0
    if name == "scaled_dot_product_attention":
        query, key = (_sizes(a) if isinstance(a, torch.fx.Node) else None for a in node.args[:2])
        return (0, 0) if query is None or key is None else (2 * math.prod(query) * key[-2], 0)
    inputs = [_sizes(a) if isinstance(a, torch.fx.Node) else None for a in node.args[:3]]
    if "conv" in name and len(inputs) > 1 and inputs[1] is not None and len(inputs[1]) >= 3:
        return math.prod(out) * math.prod(inputs[1][1:]), 4 * math.prod(inputs[1])
    if "linear" in name or name in ("mm", "bmm", "matmul", "addmm", "baddbmm"):
        x = inputs[1] if name in ("addmm", "baddbmm") else inputs[0]
        if not x:
            return 0, 0
        weight = inputs[1] if "linear" in name else None
        return math.prod(out) * x[-1], 4 * math.prod(weight) if weight else 0
    return 0, 0


def _module_work(gm: torch.fx.GraphModule, node: torch.fx.Node) -> tuple[int, int]:
    """A Linear or convolution module's multiply-adds and weight bytes at its recorded sizes."""
    module = gm.get_submodule(str(node.target))
    out = _sizes(node)
    if out is None or not isinstance(module, (nn.Linear, nn.modules.conv._ConvNd)):
        return 0, 0
    weight = module.weight.shape
    per_output = weight[1] if isinstance(module, nn.Linear) else math.prod(weight[1:])
    return math.prod(out) * per_output, 4 * math.prod(weight)


def _sizes(node: torch.fx.Node) -> list[int] | None:
    """The sizes `node`'s value was traced at, None where any is unknown."""
    sizes = hints(node)
    return None if sizes is None or None in sizes else cast(list[int], sizes)


def hints(node: torch.fx.Node | None) -> list[int | None] | None:
    """The sizes `node`'s value was traced at (recorded `val` or `tensor_meta`; a symbolic size
    as the value it was traced at, None where that is unknown), or None without a record."""
    value = None if node is None else node.meta.get("val", node.meta.get("tensor_meta"))
    shape = getattr(value, "shape", None)
    return None if shape is None else [_hint(size) for size in shape]


def _hint(size: object) -> int | None:
    if isinstance(size, int):
        return size
    hint = getattr(getattr(size, "node", None), "hint", None)
    return int(hint) if isinstance(hint, int) else None
