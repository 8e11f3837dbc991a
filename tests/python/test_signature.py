"""Calls a traced graph cannot take fail with one line naming the input and how to trace it;
an omitted attention_mask, which the model defaults to all ones, is accepted."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

import fxopt
from fxopt.optimization.exported import save_pt2
from model_coverage import ARCHITECTURES

_BERT = next(arch for arch in ARCHITECTURES if arch.name == "BERT")


@pytest.fixture(scope="module", params=["dynamo", "export"])
def traced(request: pytest.FixtureRequest) -> tuple[torch.nn.Module, torch.fx.GraphModule]:
    model = _BERT.build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optimized = fxopt.optimize(model, mode=request.param)
    return model, optimized


def _ids() -> torch.Tensor:
    return torch.randint(1, 99, (2, 8))


def test_an_untraced_optional_input_names_input_names(traced: tuple[torch.nn.Module, torch.fx.GraphModule]) -> None:
    _, graph_module = traced
    ids = _ids()
    with pytest.raises(TypeError, match=r"traced without input 'token_type_ids'; trace with input_names=\['input_ids', 'attention_mask', 'token_type_ids'\]") as info:
        graph_module(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids))
    assert "\n" not in str(info.value)


def test_an_omitted_attention_mask_defaults_to_ones_as_in_the_model(traced: tuple[torch.nn.Module, torch.fx.GraphModule]) -> None:
    model, graph_module = traced
    ids = _ids()
    with torch.no_grad():
        want = model(input_ids=ids)["last_hidden_state"]
        torch.testing.assert_close(graph_module(input_ids=ids)["last_hidden_state"], want)
        torch.testing.assert_close(graph_module(ids)["last_hidden_state"], want)
        torch.testing.assert_close(graph_module(ids, None, token_type_ids=None)["last_hidden_state"], want)


def test_a_missing_input_without_a_default_is_named(traced: tuple[torch.nn.Module, torch.fx.GraphModule]) -> None:
    _, graph_module = traced
    with pytest.raises(TypeError, match="needs input 'input_ids'"):
        graph_module(attention_mask=torch.ones(2, 8, dtype=torch.long))


def test_the_check_survives_save_and_load(traced: tuple[torch.nn.Module, torch.fx.GraphModule], tmp_path: Path) -> None:
    model, graph_module = traced
    fxopt.save(graph_module, tmp_path / "bert.fxopt")
    loaded = fxopt.load(tmp_path / "bert.fxopt")
    ids = _ids()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids)["last_hidden_state"], model(input_ids=ids)["last_hidden_state"])
    with pytest.raises(TypeError, match="traced without input 'token_type_ids'"):
        loaded(input_ids=ids, token_type_ids=torch.zeros_like(ids))


def test_a_pt2_loaded_with_fxopt_checks_calls_as_the_graph_does(
    traced: tuple[torch.nn.Module, torch.fx.GraphModule], tmp_path: Path
) -> None:
    # What `fxopt optimize --save model.pt2` writes; torch.export.load alone cannot run the check
    # (tracing/signature.py says why), fxopt.load installs it from the file.
    model, optimized = traced
    # A trace of the same mode: the default preset may hold oneDNN's linear, which a .pt2 cannot.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph_module = fxopt.trace(model, mode=optimized.meta["fxopt_trace"]["mode"])
    ids = _ids()
    save_pt2(graph_module, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, tmp_path / "bert.pt2")
    loaded = fxopt.load(tmp_path / "bert.pt2")
    with pytest.raises(TypeError, match=r"traced without input 'token_type_ids'; trace with input_names=\['input_ids', 'attention_mask', 'token_type_ids'\]"):
        loaded(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids))
    with pytest.raises(TypeError, match="needs input 'input_ids'"):
        loaded(attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        want = model(input_ids=ids)["last_hidden_state"]
        torch.testing.assert_close(loaded(input_ids=ids)["last_hidden_state"], want)
        torch.testing.assert_close(loaded(ids, None)["last_hidden_state"], want)
