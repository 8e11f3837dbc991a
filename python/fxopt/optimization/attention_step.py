"""One-token decoding steps of transformers attention modules as one lean call: q, k and v from
one optimized block, rotary embedding (where the model has it) applied to q and k at once, the
cache's append and fxopt's decoding kernel, the output projection.

A Llama decoding step's attention spent about 250 us a layer outside its four projections at one
thread on a Zen 4 core (a 95M Llama under `decode-int4`: 3.35 ms of a 7.8 ms step in its attention
modules, 0.8 ms of that in the projections' kernels): three projection blocks, views and
transposes, rotary embedding as ten small ops, transformers' attention lookup; GPT-2's about 340
us a layer around its two projections. Here a step makes one projection call (Llama's three
weights stacked into one Linear optimized with the model's preset, its kernel chosen and timed
as any block's; GPT-2's c_attn holds them stacked already), five ops of rotary embedding, then
the cache's append and the same decoding kernel the model's attention function would run
(runtime/decode_attention.py). A Llama `decode` step measured 10.4 -> 9.1 ms (alternating in
one process); GPT-2: docs/benchmarks.md.

Only where that computes what the module's own forward computes: modules whose forward is
transformers' Llama, Qwen2, Mistral or GPT-2 attention forward (and classes inheriting one)
holding exactly their usual submodules, under a decoding preset (the model's attention
implementation is fxopt's), on a step that kernel takes (one float32 token, batch 1, no mask, a
cache, self-attention). Every other call (prompts, masks, other dtypes, attention weights asked
for) runs the module's own forward. The stacked Linear's float32 weight exists only while its
graph is prepared: the step keeps that graph's own (quantized) tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..runtime import decode_attention
from ..tracing.trace import trace
from .installed_forward import InstalledForward

_NAMED = frozenset({"hidden_states", "position_embeddings", "attention_mask", "cache", "past_key_values"})
"""The forwards' own keyword arguments; the others go on to the cache's update."""

_FORWARD_KWARGS = _NAMED | {"position_ids", "use_cache", "cache_position"}
"""Keyword arguments a decoder layer passes whose values leave a step's result as is."""

Prepare = Callable[[nn.Module, torch.fx.GraphModule, torch.Tensor], Any]
"""`prepare(block, traced, x)`: the optimized graph's forward for `block` (traced) on inputs like
`x`, or None where none was kept (optimize_model's)."""


class _StackedProjections(nn.Module):
    """q_proj, k_proj and v_proj as one Linear: their outputs side by side."""

    def __init__(self, attention: Any) -> None:
        super().__init__()
        parts = [attention.q_proj, attention.k_proj, attention.v_proj]
        weight = torch.cat([p.weight.detach() for p in parts])
        # On the meta device: a Linear's random initialisation, overwritten at once, took a
        # tenth of a 95M Llama's preparation.
        self.proj = nn.Linear(weight.shape[1], weight.shape[0], bias=parts[0].bias is not None, device="meta")
        self.proj.weight = nn.Parameter(weight)
        if parts[0].bias is not None:
            self.proj.bias = nn.Parameter(torch.cat([p.bias.detach() for p in parts]))
        self.eval()  # the model is (decoding steps run only for modules not in training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class _Llama:
    """Llama's attention (and Qwen2's, Mistral's: a sliding window passed to the attention call):
    q, k, v and o projections, rotary embedding from the decoder layer's (cos, sin)."""

    children = frozenset({"q_proj", "k_proj", "v_proj", "o_proj"})
    stacked = ("q_proj", "k_proj", "v_proj")  # whose steps the stacked projection runs
    rotary = True

    def __init__(self, arguments: Callable[[Any], dict[str, Any]]) -> None:
        self.arguments = arguments

    def fits(self, module: Any) -> bool:
        q, k, v, o = (getattr(module, name) for name in ("q_proj", "k_proj", "v_proj", "o_proj"))
        return (
            all(type(p) is nn.Linear for p in (q, k, v, o))
            and q.in_features == k.in_features == v.in_features
            and k.out_features == v.out_features
            and (q.bias is None) == (k.bias is None) == (v.bias is None)
            and q.weight.dtype == k.weight.dtype == v.weight.dtype
        )

    def heads(self, module: Any) -> tuple[int, int]:
        return module.q_proj.out_features // module.head_dim, module.k_proj.out_features // module.head_dim

    def projection(self, module: Any, prepare: Prepare, like: torch.Tensor) -> Any:
        block = _StackedProjections(module)
        return prepare(block, trace(block, mode="symbolic"), like.new_zeros(1, 1, like.shape[-1]))

    def output(self, module: Any, out: torch.Tensor) -> torch.Tensor:
        return module.o_proj(out)


class _Gpt2:
    """GPT-2's self-attention: c_attn (q, k, v stacked, a Conv1D the model optimizes as a block of
    its own), c_proj, dropouts that are identities in eval mode."""

    children = frozenset({"c_attn", "c_proj", "attn_dropout", "resid_dropout"})
    stacked: tuple[str, ...] = ()
    rotary = False

    def fits(self, module: Any) -> bool:
        return not module.is_cross_attention and type(module.c_attn).__name__ == "Conv1D"

    def heads(self, module: Any) -> tuple[int, int]:
        return module.num_heads, module.num_heads

    def projection(self, module: Any, prepare: Prepare, like: torch.Tensor) -> Any:
        return module.c_attn  # its own forward: the optimized block optimize_model installed

    def arguments(self, module: Any) -> dict[str, Any]:
        return {}

    def output(self, module: Any, out: torch.Tensor) -> torch.Tensor:
        return module.resid_dropout(module.c_proj(out))


_LAYOUTS: dict[str, _Llama | _Gpt2] = {
    "LlamaAttention.forward": _Llama(lambda module: {}),
    "Qwen2Attention.forward": _Llama(lambda module: {"sliding_window": module.sliding_window}),
    "MistralAttention.forward": _Llama(
        lambda module: {"sliding_window": getattr(module.config, "sliding_window", None)}
    ),
    "GPT2Attention.forward": _Gpt2(),
}
"""The transformers forwards whose step this reproduces, by qualified name (a class inheriting
one unchanged has it too), each with what its step projects, rotates and passes on."""


def _layout(module: nn.Module) -> _Llama | _Gpt2 | None:
    forward = getattr(type(module), "forward", None)
    layout = _LAYOUTS.get(str(getattr(getattr(forward, "__wrapped__", forward), "__qualname__", "")))
    # Exactly the usual submodules: a version that added a norm of q and k (as Qwen3 has) does
    # more than this step would.
    if layout is None or {name for name, _ in module.named_children()} != layout.children:
        return None
    return layout if layout.fits(module) else None


def applies_to(module: nn.Module) -> bool:
    """Whether `module` is an attention module whose decoding steps this runs."""
    return _layout(module) is not None


class AttentionStep(InstalledForward):
    """The forward of an attention module: its decoding steps as one lean call (see the module),
    anything else through its own forward."""

    def __init__(self, module: Any, prepare: Prepare) -> None:
        layout = _layout(module)
        if layout is None:
            raise ValueError(f"{type(module).__name__} is no attention module whose steps this runs")
        super().__init__(module)
        self.layout = layout
        self.prepare = prepare
        self.project: Any = None  # q, k and v for one token; False: none measured faster
        self.heads, self.kv_heads = layout.heads(module)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        hidden_states = args[0] if args else kwargs.get("hidden_states")
        if self.project is None and isinstance(hidden_states, torch.Tensor):
            self.project = self.layout.projection(self.module, self.prepare, hidden_states)
            if self.project is None:
                self.project = False
                self.uninstall()  # nothing faster to run: no wrapper left on the module's calls
        if self.project is False or not self._is_step(args, kwargs, hidden_states):
            return self.original(*args, **kwargs)
        return self._run(hidden_states, kwargs)

    def _is_step(self, args: tuple[Any, ...], kwargs: dict[str, Any], hidden_states: Any) -> bool:
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        module = self.module
        embeddings = kwargs.get("position_embeddings")
        return (
            len(args) <= 1
            and kwargs.keys() <= _FORWARD_KWARGS
            and isinstance(hidden_states, torch.Tensor)
            and hidden_states.shape[:-1] == (1, 1)
            and hidden_states.dtype == torch.float32
            and hidden_states.is_cpu
            and kwargs.get("attention_mask") is None
            and cache is not None
            and type(cache).__name__ != "EncoderDecoderCache"
            and (
                not self.layout.rotary
                or isinstance(embeddings, tuple)
                and len(embeddings) == 2
                and all(e.numel() == module.head_dim and e.dtype == torch.float32 for e in embeddings)
            )
            and not module.training
            and getattr(module.config, "_attn_implementation", None) == decode_attention.NAME
        )

    def _run(self, hidden_states: Any, kwargs: dict[str, Any]) -> Any:
        module, d = self.module, self.module.head_dim
        qkv = self.project(hidden_states).view(-1, d)  # q's heads, then k's, then v's
        qk, v = qkv[: self.heads + self.kv_heads], qkv[self.heads + self.kv_heads :]
        if self.layout.rotary:
            cos, sin = (e.reshape(d) for e in kwargs["position_embeddings"])
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
        arguments = self.layout.arguments(module)
        out, _ = decode_attention.attention(module, query, keys, values, None, scaling=module.scaling, **arguments)
        return self.layout.output(module, out.reshape(1, 1, -1)), None
