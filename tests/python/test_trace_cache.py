"""Issue 21 item 6: `fxopt.optimize` traces a model once per state, input signature and mode,
and never hands out a stale or shared trace."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxopt
from fxopt.tracing.train_mode import TrainModeWarning
from fxopt.optimization import trace_cache


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(torch.relu(self.bn(self.fc(x))))


@pytest.fixture
def traces(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The modes `trace` was called with, through the cache."""
    trace_cache.clear()
    calls: list[str] = []
    real = trace_cache.trace

    def counting(model, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(kwargs["mode"])
        return real(model, **kwargs)

    monkeypatch.setattr(trace_cache, "trace", counting)
    return calls


def test_presets_reuse_one_trace(traces: list[str]) -> None:
    model, x = _Net().eval(), torch.randn(3, 4)
    results = [fxopt.optimize(model, p, example_inputs=(x,)) for p in ("default", "all-preserving", "default")]
    assert traces == ["auto"]
    assert len({id(r) for r in results}) == 3  # each call its own GraphModule
    for r in results:
        torch.testing.assert_close(r(x), model(x), atol=1e-5, rtol=1e-5)
    fxopt.optimize(model, "default", example_inputs=(torch.randn(5, 4),))  # another signature
    fxopt.optimize(model, "default", example_inputs=(x,), mode="export")  # another mode
    assert traces == ["auto", "auto", "export"]


def test_a_changed_model_is_traced_again(traces: list[str]) -> None:
    model, x = _Net().eval(), torch.randn(3, 4)
    fxopt.optimize(model, "default", example_inputs=(x,))
    with torch.no_grad():
        model.fc.weight.mul_(2)  # in place: a new version of the same tensor
    torch.testing.assert_close(fxopt.optimize(model, "default", example_inputs=(x,))(x), model(x))
    model.load_state_dict(_Net().state_dict())
    torch.testing.assert_close(fxopt.optimize(model, "default", example_inputs=(x,))(x), model(x))
    model.fc = nn.Linear(4, 4)  # another module
    torch.testing.assert_close(fxopt.optimize(model, "default", example_inputs=(x,))(x), model(x))
    assert traces == ["auto"] * 4
    # A submodule put in train mode: optimize works on the eval() view (tracing/train_mode.py),
    # which is the state already traced, so the trace is reused and computes the eval model.
    model.bn.train()
    with pytest.warns(TrainModeWarning):
        optimized = fxopt.optimize(model, "default", example_inputs=(x,))
    assert traces == ["auto"] * 4
    assert model.bn.training
    torch.testing.assert_close(optimized(x), model.eval()(x))


def test_the_cached_trace_is_never_changed(traces: list[str]) -> None:
    model, x = _Net().eval(), torch.randn(3, 4)
    first = fxopt.optimize(model, "default", example_inputs=(x,))
    code = first.code
    first.fc.weight.data.zero_()  # the user edits their result
    second = fxopt.optimize(model, "default", example_inputs=(x,))
    assert traces == ["auto"]
    assert second.code == code
    torch.testing.assert_close(second(x), model(x), atol=1e-5, rtol=1e-5)


def test_the_cache_does_not_keep_the_model_alive(traces: list[str]) -> None:
    import gc
    import weakref

    model = _Net().eval()
    fxopt.optimize(model, "default", example_inputs=(torch.randn(3, 4),))
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None
