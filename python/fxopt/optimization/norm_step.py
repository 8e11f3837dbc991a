"""Decoding steps' RMSNorms through fxopt's kernel (runtime/rms_norm.py).

A Llama decoding step runs two RMSNorm modules a layer, each eight ATen ops in transformers'
forward (about 18 us a call at 768 features on a Zen 4 core: 0.4 ms of an 8 ms `decode-int4`
step); fxopt's kernel does it in one pass. Only where that computes what the module computes:
modules whose forward is transformers' Llama, Qwen2 or Mistral RMSNorm forward, on float32 CPU
inputs and weights, in eval mode; every other call runs the module's own forward. Not
bit-exact (the sum of squares adds in another order), so only under the decoding presets, which
declare their accuracy; `fxopt.restore_model` gives the forward back.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch import nn

from ..runtime.rms_norm import rms_norm
from .installed_forward import InstalledForward

_MODULES = (
    ("transformers.models.llama.modeling_llama", "LlamaRMSNorm"),
    ("transformers.models.qwen2.modeling_qwen2", "Qwen2RMSNorm"),
    ("transformers.models.mistral.modeling_mistral", "MistralRMSNorm"),
)


def _forwards() -> frozenset[Any]:
    found = set()
    for module_name, class_name in _MODULES:
        try:
            found.add(getattr(importlib.import_module(module_name), class_name).forward)
        except (ImportError, AttributeError):
            continue
    return frozenset(found)


def applies_to(module: nn.Module, forwards: frozenset[Any]) -> bool:
    """Whether `module` runs one of the RMSNorm `forwards` (`_forwards()`), with its usual state."""
    return (
        "forward" not in module.__dict__
        and type(module).forward in forwards
        and isinstance(getattr(module, "weight", None), torch.Tensor)
        and isinstance(getattr(module, "variance_epsilon", None), float)
    )


class RmsNormStep(InstalledForward):
    """An RMSNorm module's forward: fxopt's kernel on float32 CPU inputs, else its own."""

    def __call__(self, hidden_states: Any) -> Any:
        module = self.module
        weight = module.weight
        if (
            isinstance(hidden_states, torch.Tensor)
            and hidden_states.dtype == torch.float32
            and hidden_states.is_cpu
            and weight.dtype == torch.float32
            and not module.training
            and not torch.is_grad_enabled()
        ):
            return rms_norm(hidden_states, weight, module.variance_epsilon)
        return self.original(hidden_states)


def install(model: nn.Module) -> tuple[str, ...]:
    """Gives each RMSNorm module of `model` that `applies_to` the kernel's forward; their names."""
    names = []
    forwards = _forwards()
    for name, module in model.named_modules():
        if applies_to(module, forwards):
            module.forward = RmsNormStep(module)  # type: ignore[method-assign]
            names.append(name)
    return tuple(names)
