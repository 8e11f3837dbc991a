"""A transformers attention function whose one-token steps run fxopt's decoding attention kernel.

transformers looks a model's attention function up by `config._attn_implementation` (its
AttentionInterface). Under the decoding presets `optimize_model` registers this one as
``fxopt_decode`` and points the model at it, in place of ``sdpa``: a step of one query row
(batch 1, no mask, float32 on the CPU) runs `kernels/decode_attention.h`, everything else
(prompts, batches, masks) transformers' own SDPA function, as before. ATen's flash attention
spent 120-190 us a layer on such a step of a 95M Llama, where reading the layer's cache took
40-50 us (docs/benchmarks.md). The kernel sums in another order than ATen: results differ in the
last bits, inside what the decoding presets declare.

transformers is imported only when a transformers model is optimized (`install`).
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _core

NAME = "fxopt_decode"
"""The attention implementation name registered with transformers."""

_REPLACES = "sdpa"
"""The implementation this one stands in for: the others (eager, flash...) are left alone."""


def decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor | None:
    """softmax(scale * query . keyᵀ) value for a [1, heads, 1, d] float32 query against
    [1, kv_heads, length, d] keys and values whose rows are contiguous (a cache buffer's view);
    [1, 1, heads, d], as transformers' attention functions return it. None where the kernel does
    not apply."""
    batch, heads, rows, d = query.shape
    if not (
        batch == rows == 1
        and query.dtype == key.dtype == value.dtype == torch.float32
        and query.is_cpu
        and key.is_cpu
        and value.is_cpu
        and key.dim() == 4
        and key.shape == value.shape
        and key.shape[0] == 1
        and key.shape[-1] == d
        and heads % key.shape[1] == 0
        and key.stride(-1) == value.stride(-1) == 1
        and key.stride(-2) == value.stride(-2) == d
        and key.stride(1) == value.stride(1)
    ):
        return None
    q = query.contiguous()
    out = torch.empty(1, 1, heads, d)
    _core.decode_attention(
        q.data_ptr(), heads, d, key.data_ptr(), value.data_ptr(), key.shape[1], key.shape[2],
        key.stride(1), scale, out.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
    return out


def attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """transformers' attention function signature; the kernel for one-token steps without a
    mask or extras, transformers' SDPA function otherwise."""
    extras = any(kwargs.get(name) is not None for name in ("softcap", "sliding_window", "s_aux", "position_bias"))
    if attention_mask is None and dropout == 0.0 and not extras and not kwargs.get("output_attentions"):
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        out = decode_attention(query, key, value, scale)
        if out is not None:
            return out, None
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)


def install(model: torch.nn.Module) -> str | None:
    """Points a transformers `model` that uses SDPA at this function; returns the implementation
    it replaced, or None where it changed nothing (no transformers model, another
    implementation, a model that cannot switch)."""
    config = getattr(model, "config", None)
    switch = getattr(model, "set_attn_implementation", None)
    if getattr(config, "_attn_implementation", None) != _REPLACES or switch is None:
        return None
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)  # masks as SDPA takes them
    switch(NAME)
    return _REPLACES if getattr(config, "_attn_implementation", None) == NAME else None


def uninstall(model: torch.nn.Module, previous: str) -> None:
    """Points `model` back at the implementation `install` replaced."""
    if getattr(getattr(model, "config", None), "_attn_implementation", None) == NAME:
        getattr(model, "set_attn_implementation")(previous)
