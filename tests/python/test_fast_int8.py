"""The `fast` preset with calibration inputs: int8 Linears where they keep the preset's bound.

The test suite runs with static kernel choices (FXOPT_TUNING=static): every Linear the pass can
quantize is offered its static int8 kernel, so calibration alone decides which stay float.
Whether int8 pays on a CPU is the benchmark's question (bench/latency.py), not these tests'.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import transformers

import fxopt
from fxopt.cli.sentences import CALIBRATION, HELD_OUT, minilm_batch
from fxopt.optimization import QuantizeLinearsInt8
from fxopt.optimization.passes import int8_kernel_available
from fxopt.optimization.presets import PresetWarning
from fxopt.runtime.dynamic_int8 import dynamic_int8_linear
from fxopt.runtime.per_token_int8 import per_token_int8_linear
from linear_models import minilm

__all__ = ["minilm"]  # the session fixture, used by name

pytestmark = pytest.mark.skipif(
    not int8_kernel_available(), reason="no int8 kernel runs fast on this CPU and torch: fast has no int8 step"
)


def int8_calls(gm: torch.fx.GraphModule) -> int:
    return sum(
        n.target in (dynamic_int8_linear, per_token_int8_linear) for n in gm.graph.nodes
    )


def test_fast_with_calibration_meets_its_bound_on_held_out_text_and_reverses(
    minilm: transformers.BertModel,
) -> None:
    calibration = minilm_batch(CALIBRATION[:4], length=32)
    held_out = [minilm_batch(HELD_OUT[i : i + 4], length=32) for i in (0, 4)]
    traced = fxopt.trace(minilm, example_inputs=calibration)
    fast = fxopt.optimize(traced, "fast", calibration=calibration, held_out=held_out)
    assert int8_calls(fast) > 0
    # The per-token Linears whose inputs have outlier channels (a LayerNorm's output) leave them
    # to a float product: the call names them.
    named = [n.args[5] for n in fast.graph.nodes if n.target == per_token_int8_linear and len(n.args) == 7]
    assert named and all(0 < len(channels) <= 8 for channels in named)
    for inputs in (calibration, *held_out):
        report = fxopt.verify(traced, fast, inputs)
        assert report.min_cosine is not None and report.min_cosine >= 0.999
    # A fresh instance of the preset reverses it (the kept set is not part of its signature).
    restored = fxopt.preset("fast")(fast, reverse=True)
    assert int8_calls(restored) == 0
    for key in ("last_hidden_state", "pooler_output"):
        assert torch.equal(restored(**held_out[0])[key], traced(**held_out[0])[key])


def test_fast_without_calibration_has_no_int8_and_says_why(minilm: transformers.BertModel) -> None:
    inputs = minilm_batch(CALIBRATION[:2], length=16)
    traced = fxopt.trace(minilm, example_inputs=inputs)
    step = next(t for t in fxopt.preset("fast").transformations if isinstance(t, QuantizeLinearsInt8))
    out = step(traced, lint_and_recompile=False)
    assert out is traced and int8_calls(out) == 0
    assert step.report is not None and "no calibration inputs" in step.report.skipped[0][1]

    from fxopt.optimization import presets

    presets._warned_uncalibrated.discard("fast")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fast = fxopt.optimize(traced, "fast")
    assert int8_calls(fast) == 0
    assert any(
        issubclass(w.category, PresetWarning) and "no calibration inputs" in str(w.message) for w in caught
    )
