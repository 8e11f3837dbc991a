"""SmoothLinearInputs on the real MiniLM: computation-preserving, and reverse is bit-exact."""

from __future__ import annotations

import copy

import torch
import transformers

import fxopt
from fxopt.cli.sentences import CALIBRATION, HELD_OUT, minilm_batch
from fxopt.optimization import SmoothLinearInputs
from linear_models import assert_same_parameters, minilm, param_states

__all__ = ["minilm"]  # the session fixture, used by name

MUL = torch.ops.aten.mul.Tensor


def test_smoothing_preserves_outputs_and_reverses_exactly(minilm: transformers.BertModel) -> None:
    calibration = minilm_batch(CALIBRATION[:4], length=32)
    held_out = minilm_batch(HELD_OUT[:4], length=32)
    gm = fxopt.trace(minilm, example_inputs=calibration)
    before, code_before = param_states(gm), gm.code
    expected = gm(**held_out)["last_hidden_state"]
    muls_before = len(gm.graph.find_nodes(op="call_function", target=MUL))

    t = SmoothLinearInputs(calibrate=True)
    t.calibrate_on(calibration)
    smoothed = t(copy.deepcopy(gm))
    # The Linears with outlier channels (largest range > 4x the median one), not all 37.
    assert 0 < len(t.factors) < 6 * 6 + 1
    assert sorted(t.report.changed) == sorted(t.factors)
    assert len(smoothed.graph.find_nodes(op="call_function", target=MUL)) == muls_before + len(t.factors)
    assert any(max(f) / min(f) > 2 for f in t.factors.values())  # real rescaling, not ~1
    actual = smoothed(**held_out)["last_hidden_state"]
    assert not torch.equal(actual, expected)
    assert (actual - expected).abs().max() <= 1e-5 * expected.abs().max()

    # A fresh instance reverses it: the factors are not part of the signature.
    restored = SmoothLinearInputs(calibrate=True)(smoothed, reverse=True)
    assert restored.code == code_before
    assert torch.equal(restored(**held_out)["last_hidden_state"], expected)
    assert_same_parameters(restored, before, same_storage=False)


def test_without_calibration_inputs_it_changes_nothing_and_says_why(minilm: transformers.BertModel) -> None:
    inputs = minilm_batch(CALIBRATION[:2], length=16)
    gm = fxopt.trace(minilm, example_inputs=inputs)
    code = gm.code
    t = SmoothLinearInputs(calibrate=True)
    assert t(gm).code == code
    assert t.report is not None and "no calibration inputs" in t.report.skipped[0][1]
