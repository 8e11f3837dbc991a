"""The targets ChooseAttentionKernel gives a scaled_dot_product_attention call where fxopt's own
kernel measured faster (kernels/prefill_attention.h): `attention_bf16` for a bfloat16 call
(AVX512-BF16 dot products, the probabilities rounded to bfloat16 for the weighted sum, as
oneDNN's bfloat16 attention does), `attention_f32` for a float32 one (AVX2 with FMA, all in
float32).

Same signature as torch's scaled_dot_product_attention, so the pass only swaps the call's target
and reverse swaps it back. Calls the kernel does not take (another dtype, dropout, autograd, a
head size the kernel does not take, a CPU without its instructions, is_causal with more or fewer
queries than keys) run scaled_dot_product_attention itself; a query the mask lets see no key
gets what SDPA gives it (0 in torch 2.13, where softmax alone gives NaN). The result is
[batch, heads, rows, d] as a view of a [batch, rows, heads, d] tensor, as ATen's flash attention
for CPU returns it: the model's transpose back and reshape then copy nothing. A boolean mask is
converted once per forward (the layers all read the one mask), where ATen's attention converts
it at every call; keys it masks for every query (a batch padded to a fixed length) are left out
of the kernel's call, and a mask left with nothing to mask is not passed at all.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import _core
from . import graph_leaf


@dataclass(frozen=True)
class _Mask:
    """A mask as the kernels read it: float32 `additive` (None: it masks nothing), the number of
    leading `keys` some query sees (past them every row's mask is -inf; None: all), and the
    query rows that see no key (`empty`, [..., rows, 1] as the mask broadcasts; None: none)."""

    additive: torch.Tensor | None
    keys: int | None
    empty: torch.Tensor | None


def _converted(mask: torch.Tensor) -> _Mask:
    boolean = mask.dtype == torch.bool
    seen = mask if boolean else mask != float("-inf")
    keys = None
    if mask.shape[-1] > 1:
        # Keys masked with -inf for every query (a batch padded to a fixed length: 112 of
        # MiniLM's 128 keys for a 16-token sentence) weigh exactly 0: the kernels stop before them.
        last = seen.reshape(-1, mask.shape[-1]).any(0).nonzero()
        keys = int(last[-1]) + 1 if len(last) else None
    empty = ~seen.any(-1, keepdim=True)
    empty_rows = empty if bool(empty.any()) else None
    kept = mask[..., :keys]
    # A mask left with nothing to mask (a batch without padding) is dropped: the kernels'
    # unmasked path reads no mask and, in float32, finds each row's largest score in a
    # read-only pass.
    if kept.all() if boolean else not kept.any():
        return _Mask(None, keys, None)
    if boolean:
        additive = torch.zeros(mask.shape, dtype=torch.float32).masked_fill_(~mask, float("-inf"))
        return _Mask(additive, keys, empty_rows)
    return _Mask(mask.float(), keys, empty_rows)


@functools.cache
def _sdpa_zeroes_empty_rows() -> bool:
    """Whether this torch's scaled_dot_product_attention gives 0 for a query that sees no key
    (torch 2.13 does, in every backend), or NaN as softmax over nothing but -inf does (the
    kernels' answer)."""
    nothing = torch.zeros(1, 1, 1, 1, dtype=torch.bool)
    one = torch.ones(1, 1, 1, 8)
    return not bool(F.scaled_dot_product_attention(one, one, one, attn_mask=nothing).isnan().any())


class _LastMask(threading.local):
    """The last mask converted on this thread, while it lives unchanged: a model's layers all
    read the one mask (six conversions a MiniLM forward, 0.35 ms of 20, before).

    A tensor made under torch.inference_mode (sentence-transformers' encode() runs there) has no
    version counter to tell an in-place change: its conversion is kept with a copy of its values
    and reused while they are equal (one comparison a layer instead of a conversion: a MiniLM
    forward's five later ones cost 0.7-0.9 ms on a Zen 4 core)."""

    source: weakref.ref[torch.Tensor] | None = None
    version = -1
    values: torch.Tensor | None = None
    converted: _Mask | None = None

    def get(self, mask: torch.Tensor) -> _Mask | None:
        if self.source is None or self.source() is not mask:
            return None
        if mask.is_inference():
            unchanged = self.values is not None and torch.equal(mask, self.values)
        else:
            unchanged = self.version == mask._version
        return self.converted if unchanged else None

    def put(self, mask: torch.Tensor, converted: _Mask) -> None:
        # The conversion goes with the mask: nothing is held after the forward that made it.
        self.source = weakref.ref(mask, lambda _: self.put_none())
        inference = mask.is_inference()
        self.version = -1 if inference else mask._version
        self.values = mask.clone() if inference else None
        self.converted = converted

    def put_none(self) -> None:
        self.source, self.values, self.converted = None, None, None


_last_mask = _LastMask()


def _kernel_mask(mask: torch.Tensor | None) -> _Mask:
    if mask is None:
        return _Mask(None, None, None)
    converted = _last_mask.get(mask)
    if converted is None:
        converted = _converted(mask)
        _last_mask.put(mask, converted)
    return converted


@dataclass(frozen=True)
class _Kernel:
    """One of fxopt's attention kernels: its dtype, the head sizes it takes (a multiple of
    `d_multiple` up to `d_max`), whether this CPU runs it, and its binding."""

    dtype: torch.dtype
    d_multiple: int
    d_max: int
    available: Callable[[], bool]
    run: Callable[..., None]


_BF16 = _Kernel(torch.bfloat16, 16, 128, _core.prefill_attention_bf16_available, _core.prefill_attention_bf16)
_F32 = _Kernel(torch.float32, 8, 256, _core.prefill_attention_f32_available, _core.prefill_attention_f32)


def _takes(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dropout_p: float, enable_gqa: bool, kernel: _Kernel
) -> bool:
    tensors = (query, key, value)
    if not all(t.dtype == kernel.dtype and t.is_cpu and t.dim() == 4 and t.stride(-1) == 1 for t in tensors):
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False  # the kernel has no backward
    batch, heads, _, d = query.shape
    kv_heads = key.shape[1]
    return (
        dropout_p == 0.0
        and key.shape == value.shape
        and key.shape[0] == batch
        and key.shape[-1] == d
        and d % kernel.d_multiple == 0
        and d <= kernel.d_max
        and heads % kv_heads == 0
        and (heads == kv_heads or enable_gqa)
        and kernel.available()
    )


def _attention(
    kernel: _Kernel,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
) -> torch.Tensor:
    # A mask with is_causal is refused by scaled_dot_product_attention, with its own message;
    # with fewer or more queries than keys its causal mask aligns top left, the kernels' bottom
    # right (a prompt after cached keys).
    causal_apart = is_causal and (attn_mask is not None or query.shape[-2] != key.shape[-2])
    if causal_apart or not _takes(query, key, value, dropout_p, enable_gqa, kernel):
        return F.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
            enable_gqa=enable_gqa,
        )  # fmt: skip
    batch, heads, rows, d = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    converted = _kernel_mask(attn_mask)
    keys = keys if converted.keys is None else converted.keys
    mask = None if converted.additive is None else converted.additive.expand(batch, heads, rows, -1)
    if mask is not None and mask.stride(-1) != 1:
        mask = mask.contiguous()
    out = torch.empty(batch, rows, heads, d, dtype=kernel.dtype)
    strides = [*query.stride()[:3], *key.stride()[:3], *value.stride()[:3]]
    strides += list(mask.stride()[:3]) if mask is not None else [0, 0, 0]
    kernel.run(
        [batch, heads, kv_heads, rows, keys, d], strides, query.data_ptr(), key.data_ptr(), value.data_ptr(),
        mask.data_ptr() if mask is not None else 0, d**-0.5 if scale is None else scale, is_causal,
        out.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
    if converted.empty is not None and _sdpa_zeroes_empty_rows():
        out.transpose(1, 2).masked_fill_(converted.empty, 0.0)
    return out.transpose(1, 2)


@graph_leaf
def attention_bf16(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """scaled_dot_product_attention for bfloat16 q [b, h, rows, d], k and v [b, kv_heads, keys, d]."""
    return _attention(_BF16, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


@graph_leaf
def attention_f32(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """scaled_dot_product_attention for float32 q [b, h, rows, d], k and v [b, kv_heads, keys, d]."""
    return _attention(_F32, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
