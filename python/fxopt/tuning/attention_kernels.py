"""Candidates for a scaled_dot_product_attention call (ChooseAttentionKernel's query), registered
like those of kernels.py: `sdpa` (what the graph calls), `fxopt_bf16` and `fxopt_f32`
(kernels/prefill_attention.h through runtime/prefill_attention.py, on CPUs with AVX512-BF16,
respectively AVX2 with FMA).

Query shape: batch, heads, kv_heads, rows, keys, head size; variant: "mask" (an additive float32
mask over every row and key, as a padding mask becomes), "causal" or "none". Sizes the graph
left symbolic arrive as -1: rows and keys are then read from the query's size hints, keys taken
equal to rows (self-attention over a prompt, what these graphs hold).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import _core
from ..runtime.prefill_attention import attention_bf16, attention_f32
from .kernels import Builder, Problem, Runner, random_operand, register


def _operands(problem: Problem) -> tuple[torch.Tensor, ...]:
    batch, heads, kv_heads, rows, keys, d = problem.shape
    dtype = getattr(torch, problem.dtype)
    generator = torch.Generator().manual_seed(0)
    # [batch, rows, heads, d] transposed, as a model's projections view them
    q = random_operand(batch, rows, heads, d, generator=generator).to(dtype).transpose(1, 2)
    k, v = (random_operand(batch, keys, kv_heads, d, generator=generator).to(dtype).transpose(1, 2) for _ in range(2))
    if problem.variant == "mask":
        mask = torch.zeros(batch, 1, rows, keys)
        mask[..., keys - keys // 8 :] = float("-inf")  # padding at the end
        return q, k, v, mask.to(dtype)
    return q, k, v


def _call(target: object) -> Builder:
    def build(problem: Problem) -> Runner:
        operands = _operands(problem)
        causal = problem.variant == "causal"
        gqa = problem.shape[1] != problem.shape[2]
        q, k, v, *mask = operands

        def run(_: object) -> torch.Tensor:
            return target(q, k, v, attn_mask=mask[0] if mask else None, is_causal=causal, enable_gqa=gqa)  # type: ignore[operator]

        return Runner(run, ())

    return build


register("attention", "sdpa", lambda: True, _call(F.scaled_dot_product_attention))
register("attention", "fxopt_bf16", _core.prefill_attention_bf16_available, _call(attention_bf16))
register("attention", "fxopt_f32", _core.prefill_attention_f32_available, _call(attention_f32))
