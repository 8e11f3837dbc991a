"""Issue 21 item 7: a model or example input no tracer can take fails with a first line that
names the cause, not only "could not trace BertModel (tried: ...)" over hundreds of frames."""

from __future__ import annotations

import traceback

import pytest
import torch
import transformers
from torch import nn

import fxopt
from fxopt.tracing.trace import TraceError

from conftest import build_model, tiny_bert_config, token_inputs


@pytest.fixture(scope="module")
def bert() -> transformers.BertModel:
    return build_model(transformers.BertModel, tiny_bert_config())


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0]


def test_float_input_ids_are_named_as_the_cause(bert: transformers.BertModel) -> None:
    inputs = token_inputs(2, 8)
    inputs["input_ids"] = inputs["input_ids"].float()
    with pytest.raises(TraceError) as caught:
        fxopt.trace(bert, example_inputs=inputs)
    first = _first_line(caught.value)
    assert "could not trace BertModel: input 'input_ids' is torch.float32" in first
    assert "integer ids (torch.long)" in first
    # The cause is named: the tracers' frames are not chained under it.
    shown = "".join(traceback.format_exception(caught.value))
    assert shown.count("\n") < 40, shown


def test_an_empty_batch_is_named_as_the_cause(bert: transformers.BertModel) -> None:
    inputs = {k: v[:0] for k, v in token_inputs(2, 8).items()}
    with pytest.raises(TraceError, match=r"input 'input_ids' has shape \(0, 8\), with no elements"):
        fxopt.trace(bert, example_inputs=inputs)


def test_a_model_on_the_meta_device_is_refused() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with pytest.raises(ValueError, match=r"Sequential is on the meta device \('0.weight' has no data\)"):
        fxopt.trace(model, example_inputs=(torch.randn(2, 4),))
    with pytest.raises(ValueError, match="meta device"):
        fxopt.optimize(model, "default", example_inputs=(torch.randn(2, 4),))


@pytest.mark.parametrize("how", ["trace", "script"])
def test_torchscript_modules_are_refused(how: str) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
    x = torch.randn(2, 4)
    scripted = torch.jit.trace(model, (x,)) if how == "trace" else torch.jit.script(model)
    with pytest.raises(TypeError, match="fxopt cannot trace TorchScript modules"):
        fxopt.optimize(scripted, "default", example_inputs=(x,))
