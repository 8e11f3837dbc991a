"""A model in train() mode: `fxopt.optimize` optimizes its eval() view and says so once;
`fxopt.trace` captures the mode it is given and warns."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import fxopt
from fxopt.tracing.train_mode import TrainModeWarning
from model_coverage import ARCHITECTURES

_BERT = next(arch for arch in ARCHITECTURES if arch.name == "BERT")


def _cnn() -> nn.Module:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.5))
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)
    return model  # a fresh module is in train mode


def _train_mode_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, TrainModeWarning)]


def test_optimize_uses_the_eval_view_folds_and_warns_once() -> None:
    model = _cnn()
    x = torch.randn(2, 3, 8, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        optimized = fxopt.optimize(model, example_inputs=x, mode="symbolic")
    messages = _train_mode_warnings(caught)
    assert len(messages) == 1
    assert "train() mode" in messages[0] and "as in eval()" in messages[0] and "model.eval()" in messages[0]
    assert all(module.training for module in model.modules())  # the user's model keeps its mode
    called = [optimized.get_submodule(str(n.target)) for n in optimized.graph.find_nodes(op="call_module")]
    assert not any(isinstance(m, (nn.BatchNorm2d, nn.Dropout)) for m in called)  # folded, dropped
    torch.testing.assert_close(optimized(x), optimized(x))
    torch.testing.assert_close(optimized(x), model.eval()(x))


def test_transformers_model_built_from_a_config_gives_equal_outputs_twice() -> None:
    torch.manual_seed(0)
    model = _BERT.model_type()(_BERT.make_config())  # train mode, as from_config leaves it
    assert model.training
    with pytest.warns(TrainModeWarning, match="as in eval"):
        optimized = fxopt.optimize(model)
    ids = torch.randint(0, 99, (2, 8))
    with torch.no_grad():
        first, second = optimized(input_ids=ids), optimized(input_ids=ids)
        torch.testing.assert_close(first["last_hidden_state"], second["last_hidden_state"])
        torch.testing.assert_close(first["last_hidden_state"], model.eval()(input_ids=ids)["last_hidden_state"])


def test_trace_keeps_the_mode_it_is_given_and_warns() -> None:
    with pytest.warns(TrainModeWarning, match="traced it as it is"):
        graph_module = fxopt.trace(_cnn(), mode="symbolic")
    assert graph_module.get_submodule("3").training


def test_a_model_in_eval_mode_gets_no_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fxopt.optimize(_cnn().eval(), example_inputs=torch.randn(2, 3, 8, 8), mode="symbolic")
    assert not _train_mode_warnings(caught)
