"""Shared fixtures: deterministic seeding and tiny transformers models built from configs.

Models are randomly initialised from small configs (hidden sizes 32, two layers) so tests run
offline and fast; the numbers they produce do not matter, only that traced and eager agree.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import pytest
import torch
import transformers

# Kernel choices by measurement would make which graph a test sees depend on the machine and its
# load: tests get each pass's static fallback (test_tuning.py measures, with timings it injects),
# and never read or write the user's cache. Set before fxopt is imported, and inherited by the
# CLI processes tests start.
os.environ["FXOPT_TUNING"] = "static"
os.environ["FXOPT_CACHE_DIR"] = tempfile.mkdtemp(prefix="fxopt-test-cache-")


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same random state, so failures reproduce."""
    torch.manual_seed(0)


def build_model(
    model_class: type[transformers.PreTrainedModel], config: transformers.PretrainedConfig
) -> Any:
    """A randomly initialised model in eval mode, seeded here so fixture scope cannot change it."""
    torch.manual_seed(0)
    return model_class(config).eval()


def tiny_bert_config(**overrides: Any) -> transformers.BertConfig:
    defaults: dict[str, Any] = dict(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return transformers.BertConfig(**(defaults | overrides))


def tiny_seq2seq_config(config_class: type[transformers.PretrainedConfig]) -> Any:
    """A two-layer encoder-decoder config (BART, Pegasus, Marian... share these names)."""
    return config_class(
        vocab_size=100,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
    )


def tiny_gpt2_config(**overrides: Any) -> transformers.GPT2Config:
    # Special token ids must lie inside the tiny vocabulary.
    defaults: dict[str, Any] = dict(
        vocab_size=100,
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2Config(**(defaults | overrides))


@pytest.fixture(scope="session")
def tiny_bert() -> transformers.BertModel:
    return build_model(transformers.BertModel, tiny_bert_config())


@pytest.fixture(scope="session")
def tiny_gpt2() -> transformers.GPT2LMHeadModel:
    return build_model(transformers.GPT2LMHeadModel, tiny_gpt2_config())


def cache_key(output: Any) -> str:
    """The key a transformers model output holds its KV cache under: `cache` since transformers
    5.2x (`past_key_values` stays as a deprecated property), `past_key_values` before."""
    return "cache" if "cache" in output else "past_key_values"


def linear_calls(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The Linear calls of a torch-level graph (Dynamo's) or a module-level one (symbolic's, the
    sized tracer's)."""
    return [
        n for n in gm.graph.nodes
        if n.target is torch._C._nn.linear
        or (n.op == "call_module" and isinstance(gm.get_submodule(str(n.target)), torch.nn.Linear))
    ]


def token_inputs(batch: int, length: int, vocab_size: int = 100) -> dict[str, torch.Tensor]:
    """input_ids and an attention mask whose second row ends in padding, so masking matters."""
    input_ids = torch.randint(0, vocab_size, (batch, length))
    attention_mask = torch.ones(batch, length, dtype=torch.long)
    if batch > 1 and length > 2:
        attention_mask[1, -2:] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


@pytest.fixture
def measuring(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The process's chooser measuring, with a cache of its own."""
    from fxopt import tuning
    from fxopt.tuning.cache import ChoiceCache

    chooser = tuning.current()
    monkeypatch.setattr(chooser, "mode", "measure")
    monkeypatch.setattr(chooser, "cache", ChoiceCache(tmp_path))
    monkeypatch.setattr(chooser, "budget_s", 2.0)
    return chooser


def fake_timings(monkeypatch: pytest.MonkeyPatch, seconds: dict[str, float]) -> list[list[str]]:
    """Every measurement reports `seconds` per candidate; returns the candidate lists timed."""
    from fxopt.tuning import chooser as chooser_module

    timed: list[list[str]] = []

    def best_times(runners: dict[str, Any], **_: Any) -> dict[str, float]:
        timed.append(list(runners))
        for run in runners.values():
            run()  # the kernels must run on the problem's operands
        return {name: seconds[name] for name in runners}

    monkeypatch.setattr(chooser_module, "best_times", best_times)
    return timed


def counted_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """Counts the calls of `owner.name` (a function, or a method of a class) from now on; each
    still runs."""
    calls: list[int] = []
    real = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def trace_without(shortcut: str, model: Any, inputs: dict[str, Any]) -> Any:
    """fxopt.trace(mode="dynamo") with one of its shortcuts into torch's export (a context named
    in fxopt.tracing.trace) made a no-op: the trace as torch alone makes it."""
    import contextlib

    import fxopt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(f"fxopt.tracing.trace.{shortcut}", contextlib.nullcontext)
        return fxopt.trace(model, example_inputs=inputs, mode="dynamo")
