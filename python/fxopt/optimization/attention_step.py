"""One-token decoding steps of Llama-style attention modules as one lean call: q, k and v projected by
a single optimized block, rotary embedding applied to q and k at once, fxopt's decoding kernel.

A Llama decoding step's attention spent about 250 us a layer outside its four projections at one
thread on a Zen 4 core (a 95M Llama under `decode-int4`: 3.35 ms of a 7.8 ms step in its attention
modules, 0.8 ms of that in the projections' kernels): three projection blocks, views and
transposes, rotary embedding as ten small ops, transformers' attention lookup. Here a step makes
one projection call (the three weights stacked, one Linear optimized with the model's preset, so
its kernel is chosen and timed as any block's) and five ops of rotary embedding, then appends to
the cache and runs the same decoding kernel the model's attention function would
(runtime/decode_attention.py). A `decode` step measured 10.4 -> 9.1 ms (alternating in one process).

Only where that computes what the module's own forward computes: modules whose forward is
transformers' Llama, Qwen2 or Mistral attention forward (and classes inheriting one), under
a decoding preset (the model's attention implementation is fxopt's), on a step that kernel takes
(one float32 token, batch 1, no mask, a cache). Every other call (prompts, masks, other dtypes,
attention weights asked for) runs the module's own forward. The stacked Linear's float32 weight
exists only while its graph is prepared: the step keeps that graph's own (quantized) tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..runtime import decode_attention
from ..tracing.trace import trace

_FORWARDS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "LlamaAttention.forward": lambda module: {},
    "Qwen2Attention.forward": lambda module: {"sliding_window": module.sliding_window},
    "MistralAttention.forward": lambda module: {"sliding_window": getattr(module.config, "sliding_window", None)},
}
"""The transformers forwards whose step this reproduces (by qualified name: a class inheriting
one unchanged has it too), each with the arguments it adds to the attention function's call:
Llama's; Qwen2's and Mistral's differ from it in a sliding window only."""

_PROJECTIONS = {"q_proj", "k_proj", "v_proj", "o_proj"}

_NAMED = frozenset({"hidden_states", "position_embeddings", "attention_mask", "cache", "past_key_values"})
"""The forward's own keyword arguments; the others go on to the cache's update."""

_FORWARD_KWARGS = _NAMED | {"position_ids", "use_cache", "cache_position"}
"""Keyword arguments a decoder layer passes whose values leave a step's result as is."""


class _StackedProjections(nn.Module):
    """q_proj, k_proj and v_proj as one Linear: their outputs side by side."""

    def __init__(self, attention: Any) -> None:
        super().__init__()
        parts = [attention.q_proj, attention.k_proj, attention.v_proj]
        weight = torch.cat([p.weight.detach() for p in parts])
        self.proj = nn.Linear(weight.shape[1], weight.shape[0], bias=parts[0].bias is not None)
        self.proj.to(weight.device, weight.dtype)
        with torch.no_grad():
            self.proj.weight.copy_(weight)
            if self.proj.bias is not None:
                self.proj.bias.copy_(torch.cat([p.bias.detach() for p in parts]))
        self.eval()  # the model is (decoding steps run only for modules not in training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def _forward_name(module: nn.Module) -> str | None:
    forward = getattr(type(module), "forward", None)
    return getattr(getattr(forward, "__wrapped__", forward), "__qualname__", None)


def applies_to(module: nn.Module) -> bool:
    """Whether `module` is an attention module whose decoding steps this runs: one of the
    forwards above over exactly the four projections (a version that added a norm of q and k,
    as Qwen3 has, would hold more modules)."""
    if _forward_name(module) not in _FORWARDS or {name for name, _ in module.named_children()} != _PROJECTIONS:
        return False
    parts: list[Any] = [getattr(module, name) for name in ("q_proj", "k_proj", "v_proj", "o_proj")]
    if not all(type(p) is nn.Linear for p in parts):
        return False
    q, k, v, _ = parts
    return (
        q.in_features == k.in_features == v.in_features
        and k.out_features == v.out_features
        and (q.bias is None) == (k.bias is None) == (v.bias is None)
        and q.weight.dtype == k.weight.dtype == v.weight.dtype
    )


class AttentionStep:
    """The forward of a Llama attention module: its decoding steps as one lean call (see the
    module), anything else through its own forward."""

    def __init__(self, module: Any, prepare: Any) -> None:
        """`prepare(block, traced, x)` gives the optimized graph's forward for `block` (traced)
        on inputs like `x`, or None where none was kept."""
        self.module: Any = module
        self.original = module.forward
        self.instance_forward = "forward" in module.__dict__
        self.prepare = prepare
        self.step: Any = None  # the stacked projections' graph; False: none measured faster
        self.heads = module.q_proj.out_features // module.head_dim
        self.kv_heads = module.k_proj.out_features // module.head_dim
        self.attention_arguments = _FORWARDS[str(_forward_name(module))]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        hidden_states = args[0] if args else kwargs.get("hidden_states")
        if self.step is None and isinstance(hidden_states, torch.Tensor):
            self.step = self._prepare(hidden_states)
            if self.step is False:
                self.uninstall()  # nothing faster to run: no wrapper left on the module's calls
        if self.step is False or not self._is_step(args, kwargs, hidden_states):
            return self.original(*args, **kwargs)
        return self._run(hidden_states, kwargs)

    def uninstall(self) -> None:
        """Gives the module the forward it had before, if it still runs this one."""
        if self.module.__dict__.get("forward") is not self:
            return
        if self.instance_forward:
            self.module.__dict__["forward"] = self.original
        else:
            del self.module.__dict__["forward"]

    def _prepare(self, like: torch.Tensor) -> Any:
        block = _StackedProjections(self.module)
        step = self.prepare(block, trace(block, mode="symbolic"), like.new_zeros(1, 1, like.shape[-1]))
        return False if step is None else step  # the stacked weight goes with `block`

    def _is_step(self, args: tuple[Any, ...], kwargs: dict[str, Any], hidden_states: Any) -> bool:
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        embeddings = kwargs.get("position_embeddings")
        module = self.module
        return (
            len(args) <= 1
            and kwargs.keys() <= _FORWARD_KWARGS
            and isinstance(hidden_states, torch.Tensor)
            and hidden_states.shape[:-1] == (1, 1)
            and hidden_states.dtype == torch.float32
            and hidden_states.is_cpu
            and kwargs.get("attention_mask") is None
            and cache is not None
            and isinstance(embeddings, tuple)
            and len(embeddings) == 2
            and all(e.numel() == module.head_dim and e.dtype == torch.float32 for e in embeddings)
            and not module.training
            and getattr(module.config, "_attn_implementation", None) == decode_attention.NAME
        )

    def _run(self, hidden_states: Any, kwargs: dict[str, Any]) -> Any:
        module, d = self.module, self.module.head_dim
        qkv = self.step(hidden_states).view(-1, d)  # q's heads, then k's, then v's
        cos, sin = (e.reshape(d) for e in kwargs["position_embeddings"])
        qk, v = qkv[: self.heads + self.kv_heads], qkv[self.heads + self.kv_heads :]
        # transformers' rotate_half and apply_rotary_pos_emb, for q and k at once: the same ops.
        rotated = torch.cat((-qk[:, d // 2 :], qk[:, : d // 2]), dim=-1)
        qk = qk * cos + rotated * sin
        cache: Any = kwargs.get("cache", kwargs.get("past_key_values"))
        rest = {name: value for name, value in kwargs.items() if name not in _NAMED}
        keys, values = cache.update(
            qk[self.heads :].view(1, self.kv_heads, 1, d), v.view(1, self.kv_heads, 1, d), module.layer_idx, kwargs=rest
        )
        query = qk[: self.heads].view(1, self.heads, 1, d)
        # The model's attention function: the kernel, or SDPA for a cache whose rows it cannot read.
        arguments = self.attention_arguments(module)
        out, _ = decode_attention.attention(module, query, keys, values, None, scaling=module.scaling, **arguments)
        return module.o_proj(out.reshape(1, 1, -1)), None
