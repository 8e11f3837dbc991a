"""Dynamo graphs carry the model's qualified names and module tree, and passes keep them.

`torch._dynamo.export` flattens every weight to a mangled attribute
(`L__self___encoder_layer_0_attention_self_query_weight`); fxopt puts each back at the model's
path (`fxopt.tracing.model_names`), so `state_dict()` keys are the model's, `load_state_dict`
takes the model's state dict and `get_submodule` finds its modules.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import transformers
from torch import nn

import fxopt
from fxopt.optimization import FuseBatchNorm2dInConv2d, MergeLinears
from fxopt.tracing.dummy_inputs import build_dummy_inputs, default_input_names
from model_coverage import ARCHITECTURES

_NAMED = {arch.name: arch for arch in ARCHITECTURES}


def _tiny(name: str) -> nn.Module:
    torch.manual_seed(0)
    return transformers.AutoModel.from_config(_NAMED[name].make_config()).eval()


def _outputs(value: object) -> list[torch.Tensor]:
    flat, _ = torch.utils._pytree.tree_flatten(value)
    return [leaf for leaf in flat if isinstance(leaf, torch.Tensor)]


@pytest.mark.parametrize("name", ["BERT", "GPT-2", "LLaMA", "T5", "ViT"])
def test_dynamo_graph_has_the_models_names(name: str) -> None:
    model = _tiny(name)
    graph_module = fxopt.trace(model, mode="dynamo")
    assert list(graph_module.state_dict()) == list(model.state_dict())
    assert graph_module.load_state_dict(model.state_dict()) is not None  # strict: no key left over
    for path, module in model.named_modules():
        if type(module).__module__.startswith("torch.nn.") and path:
            copy = graph_module.get_submodule(path)
            assert type(copy) is type(module), path
    targets = {n.target for n in graph_module.graph.find_nodes(op="get_attr")}
    assert not any("L__self__" in str(t) for t in targets)
    inputs = build_dummy_inputs(model, default_input_names(model))
    with torch.no_grad():
        for got, want in zip(_outputs(graph_module(**inputs)), _outputs(model(**inputs))):
            torch.testing.assert_close(got, want)


def test_bert_linear_found_by_its_path_and_weights_loaded_back() -> None:
    model = _tiny("BERT")
    graph_module = fxopt.trace(model, mode="dynamo")
    query = graph_module.get_submodule("encoder.layer.0.attention.self.query")
    assert isinstance(query, nn.Linear) and query.weight is model.encoder.layer[0].attention.self.query.weight
    other = _tiny("BERT")
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(1.0)
    graph_module.load_state_dict(other.state_dict())
    inputs = build_dummy_inputs(model, default_input_names(model))
    with torch.no_grad():
        torch.testing.assert_close(
            graph_module(**inputs)["last_hidden_state"], other(**inputs)["last_hidden_state"]
        )


def test_merged_linears_are_named_in_the_models_tree() -> None:
    model = _tiny("BERT")
    graph_module = MergeLinears()(fxopt.trace(model, mode="dynamo"))
    targets = [str(n.target) for n in graph_module.graph.find_nodes(op="get_attr")]
    held = {name for name, _ in [*model.named_parameters(), *model.named_buffers()]}
    merged = [t for t in targets if t not in held]
    assert merged, "MergeLinears merged nothing"
    assert all(t.startswith("encoder.layer.") for t in merged), merged
    inputs = build_dummy_inputs(model, default_input_names(model))
    with torch.no_grad():
        torch.testing.assert_close(
            graph_module(**inputs)["last_hidden_state"], model(**inputs)["last_hidden_state"]
        )


def test_folded_batch_norm_is_named_in_the_models_tree() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)
    x = torch.randn(2, 3, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph_module = FuseBatchNorm2dInConv2d()(fxopt.trace(model, mode="dynamo", example_inputs=x))
    targets = [str(n.target) for n in graph_module.graph.find_nodes(op="get_attr")]
    assert targets and all(t.startswith("0.") for t in targets), targets
    torch.testing.assert_close(graph_module(x), model(x))
