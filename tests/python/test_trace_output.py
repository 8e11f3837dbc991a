"""Issue 21 item 10: what a trace that succeeds shows the user: fxopt's own notes, not torch's
internal logs and warnings."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

import fxopt
from fxopt.tracing.trace import TraceWarning

from norm_models import tiny_resnet


@pytest.mark.parametrize("mode", ["dynamo", "export"])
def test_torch_internal_diagnostics_stay_hidden(
    mode: str, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Batch 1: export logs "dimension ... 0/1 specialized" (and symbolic_shapes its stacks)
    # through torch's own handlers, which write to the process's stderr.
    caplog.set_level(logging.INFO)
    model = tiny_resnet()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fxopt.trace(model, example_inputs={"pixel_values": torch.randn(1, 3, 32, 32)}, mode=mode)
    err = capfd.readouterr().err
    assert "non_strict_utils" not in err and "symbolic_shapes" not in err, err
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("torch")]
    assert all(issubclass(w.category, TraceWarning) for w in caught), [str(w.message) for w in caught]
