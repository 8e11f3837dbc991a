"""fxopt.verify: per-output comparison, failures named, dtype-aware tolerances, structure checks."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import rich.table
import torch
import transformers
from torch import nn

import fxopt
from fxopt.verification.verify import VerifyRow, default_tolerance

from conftest import cache_key, token_inputs


class Returns(nn.Module):
    """Returns whatever a function of its input computes: builds odd outputs in one line."""

    def __init__(self, function: Callable[[torch.Tensor], Any]) -> None:
        super().__init__()
        self.function = function

    def forward(self, x: torch.Tensor) -> Any:
        return self.function(x)


def row(report: fxopt.VerifyReport, name: str) -> VerifyRow:
    (found,) = [r for r in report.rows if r.name == name]
    return found


def test_identical_models_pass_with_a_row_per_output(tiny_bert: transformers.BertModel) -> None:
    report = fxopt.verify(tiny_bert, copy.deepcopy(tiny_bert), token_inputs(2, 8))
    assert report.ok
    assert [r.name for r in report.rows] == ["last_hidden_state", "pooler_output"]
    assert row(report, "last_hidden_state").shape == (2, 8, tiny_bert.config.hidden_size)
    assert all(r.max_abs_err == 0.0 and r.max_rel_err == 0.0 for r in report.rows)


def test_perturbed_weight_fails_and_names_the_affected_output(
    tiny_bert: transformers.BertModel,
) -> None:
    candidate = copy.deepcopy(tiny_bert)
    with torch.no_grad():
        candidate.pooler.dense.weight[0, 0] += 0.5  # the pooler feeds pooler_output only
    report = fxopt.verify(tiny_bert, candidate, token_inputs(2, 8))
    assert not report.ok
    assert [r.name for r in report.failures] == ["pooler_output"]
    assert row(report, "last_hidden_state").ok
    failing = row(report, "pooler_output")
    assert failing.max_abs_err is not None and failing.max_abs_err > failing.atol
    text = str(report)
    assert "FAIL" in text and "pooler_output" in text and "verify: FAILED (1 of 2 rows)" in text


def test_graph_module_against_eager(tiny_gpt2: transformers.GPT2LMHeadModel) -> None:
    traced = fxopt.trace(tiny_gpt2, mode="export")
    inputs = token_inputs(3, 6)
    report = fxopt.verify(traced, tiny_gpt2, inputs)
    assert report.ok, str(report)
    assert f"{cache_key(tiny_gpt2(**inputs))}.0" in [r.name for r in report.rows]


@pytest.mark.parametrize(
    "inputs",
    [torch.ones(2, 4), (torch.ones(2, 4),), {"x": torch.ones(2, 4)}],
    ids=["tensor", "tuple", "dict"],
)
def test_accepts_every_input_form(inputs: Any) -> None:
    reference = Returns(nn.Linear(4, 3))  # Returns.forward's parameter is named x
    report = fxopt.verify(reference, copy.deepcopy(reference), inputs)
    assert report.ok
    assert [r.name for r in report.rows] == ["output"]


def test_each_side_gets_its_own_copy_of_the_inputs() -> None:
    in_place = Returns(lambda x: x.mul_(2))
    x = torch.ones(3)
    report = fxopt.verify(in_place, in_place, x)
    assert report.ok  # the candidate saw ones, not the reference's doubled values
    torch.testing.assert_close(x, torch.ones(3))


def test_runs_without_grad() -> None:
    grad_mode = Returns(lambda x: torch.tensor(torch.is_grad_enabled()))
    assert fxopt.verify(grad_mode, Returns(lambda x: torch.tensor(False)), torch.ones(1)).ok


def half_precision_pair() -> tuple[nn.Module, nn.Module]:
    """A fp16 linear followed by a scale, and the same with the scale folded into the weights.

    Folding is what a BatchNorm fusion does; in fp16 it changes results by rounding only.
    """
    layer = nn.Linear(64, 16).half()
    folded = copy.deepcopy(layer)
    with torch.no_grad():
        folded.weight.mul_(0.3)
        folded.bias.mul_(0.3)
    return Returns(lambda x: layer(x) * 0.3), folded


def test_fp16_outputs_use_fp16_tolerances() -> None:
    reference, candidate = half_precision_pair()
    x = torch.randn(8, 64).half()
    report = fxopt.verify(reference, candidate, x)
    output = row(report, "output")
    assert output.dtype == "float16"
    assert (output.rtol, output.atol) == default_tolerance(torch.float16) == (1e-2, 1e-3)
    assert output.max_abs_err is not None and output.max_abs_err > 0  # the two really differ
    assert report.ok, str(report)
    strict = fxopt.verify(reference, candidate, x, rtol=1e-4, atol=1e-5)  # float32's defaults
    assert not strict.ok
    assert (row(strict, "output").rtol, row(strict, "output").atol) == (1e-4, 1e-5)


def test_tolerances_by_dtype() -> None:
    assert default_tolerance(torch.float32) == (1e-4, 1e-5)
    assert default_tolerance(torch.bfloat16) == (1.6e-2, 1e-2)
    assert default_tolerance(torch.complex64) == default_tolerance(torch.float32)
    assert default_tolerance(torch.int64) == (0.0, 0.0)
    assert default_tolerance(torch.bool) == (0.0, 0.0)


def test_mixed_dtypes_use_the_looser_tolerance() -> None:
    report = fxopt.verify(
        Returns(lambda x: x), Returns(lambda x: x.half()), torch.tensor([1.0001, 2.0])
    )
    output = row(report, "output")
    assert output.dtype == "float32 vs float16"
    rtol, atol = default_tolerance(torch.float16)
    assert (output.rtol, output.atol) == (rtol, atol * 2.0)  # atol scales with the largest value
    assert report.ok


def test_float32_error_beyond_tolerance_fails() -> None:
    x = torch.tensor([1.0, 2.0, 0.0])
    report = fxopt.verify(
        Returns(lambda x: x), Returns(lambda x: x + torch.tensor([0.0, 1e-3, 0.0])), x
    )
    output = row(report, "output")
    assert not output.ok
    assert output.max_abs_err == pytest.approx(1e-3, rel=1e-3)
    assert output.max_rel_err == pytest.approx(5e-4, rel=1e-3)


def test_integer_outputs_must_match_exactly() -> None:
    ids = torch.tensor([3, 7, 9])
    assert fxopt.verify(Returns(lambda x: x), Returns(lambda x: x.clone()), ids).ok
    report = fxopt.verify(Returns(lambda x: x), Returns(lambda x: x + 1), ids)
    assert not report.ok and row(report, "output").max_abs_err == 1.0


def test_nans_in_the_same_places_are_equal() -> None:
    x = torch.tensor([1.0, float("nan"), float("inf")])
    assert fxopt.verify(Returns(lambda x: x * 1), Returns(lambda x: x.clone()), x).ok
    assert not fxopt.verify(Returns(lambda x: x), Returns(lambda x: torch.nan_to_num(x)), x).ok


def test_missing_and_extra_outputs_are_failures() -> None:
    reference = Returns(lambda x: {"a": x, "b": x * 2})
    report = fxopt.verify(reference, Returns(lambda x: {"a": x, "c": x}), torch.ones(2))
    assert not report.ok
    assert row(report, "a").ok
    assert row(report, "b").note == "missing from candidate"
    assert row(report, "c").note == "not in reference"


def test_container_type_change_is_a_structure_failure(tiny_bert: transformers.BertModel) -> None:
    as_dict = Returns(lambda x: dict(tiny_bert(input_ids=x)))
    report = fxopt.verify(
        Returns(lambda x: tiny_bert(input_ids=x)), as_dict, torch.randint(0, 100, (2, 5))
    )
    assert not report.ok
    assert row(report, "last_hidden_state").ok  # same numbers ...
    structure = row(report, "(structure)")  # ... but attribute access would break
    assert (
        "BaseModelOutputWithPoolingAndCrossAttentions" in structure.note
        and "dict" in structure.note
    )


def test_tensor_replaced_by_tuple_is_a_failure() -> None:
    report = fxopt.verify(Returns(lambda x: x), Returns(lambda x: (x,)), torch.ones(2))
    assert {r.name for r in report.failures} == {"output", "0"}


def test_shape_mismatch_fails() -> None:
    report = fxopt.verify(Returns(lambda x: x), Returns(lambda x: x[:1]), torch.ones(2, 3))
    assert row(report, "output").note == "shape (2, 3) vs (1, 3)"
    assert not report.ok


def test_non_tensor_leaves_compare_by_equality() -> None:
    same = fxopt.verify(
        Returns(lambda x: (x, 3, "tag")), Returns(lambda x: (x, 3, "tag")), torch.ones(1)
    )
    assert same.ok and [r.name for r in same.rows] == ["0", "1", "2"]
    changed = fxopt.verify(Returns(lambda x: (x, 3)), Returns(lambda x: (x, 4)), torch.ones(1))
    assert [r.name for r in changed.failures] == ["1"]
    assert row(changed, "1").note == "3 vs 4"


def test_rich_table_has_a_row_per_output(tiny_bert: transformers.BertModel) -> None:
    report = fxopt.verify(tiny_bert, tiny_bert, token_inputs(2, 4))
    table = report.rich_table()
    assert isinstance(table, rich.table.Table)
    assert table.row_count == 2
    assert [c.header for c in table.columns][:2] == ["output", "shape"]


def test_default_atol_scales_with_the_output_magnitude() -> None:
    # Large logits with a reordering-sized error near zero: 5e-5 absolute, 5e-7 of the range.
    reference = torch.tensor([90.0, -40.0, 0.0])
    error = torch.tensor([0.0, 0.0, 5e-5])
    report = fxopt.verify(Returns(lambda x: x), Returns(lambda x: x + error), reference)
    output = row(report, "output")
    assert output.atol == pytest.approx(1e-5 * 90.0)
    assert report.ok, str(report)
    # the same error on outputs of magnitude 1 fails, and an explicit atol is used as given
    assert not fxopt.verify(Returns(lambda x: x), Returns(lambda x: x + error),
                            torch.tensor([1.0, -0.5, 0.0])).ok
    assert not fxopt.verify(Returns(lambda x: x), Returns(lambda x: x + error), reference,
                            atol=1e-5).ok


def test_cosine_of_each_floating_output() -> None:
    x = torch.tensor([3.0, 4.0, 0.0])
    # [3, 4, 0] against [4, 3, 0]: cosine (12 + 12) / (5 * 5) = 0.96, worked out by hand.
    swapped = fxopt.verify(Returns(lambda x: x), Returns(lambda x: x[[1, 0, 2]]), x)
    assert row(swapped, "output").cosine == pytest.approx(0.96, abs=1e-12)
    assert swapped.min_cosine == pytest.approx(0.96, abs=1e-12)
    scaled = fxopt.verify(Returns(lambda x: x), Returns(lambda x: x * 2), x)
    assert row(scaled, "output").cosine == pytest.approx(1.0)  # same direction, though not ok
    assert not scaled.ok
    opposite = fxopt.verify(Returns(lambda x: x), Returns(lambda x: -x), x)
    assert row(opposite, "output").cosine == pytest.approx(-1.0)
    assert "0.960000" in str(swapped) and "cosine" in str(swapped)


def test_cosine_edge_cases() -> None:
    zeros = torch.zeros(3)
    assert row(fxopt.verify(Returns(lambda x: x), Returns(lambda x: x.clone()), zeros), "output").cosine == 1.0
    assert row(fxopt.verify(Returns(lambda x: x), Returns(lambda x: x + 1), zeros), "output").cosine == 0.0
    # non-finite elements are left out; the finite ones are identical
    x = torch.tensor([1.0, float("nan"), 2.0])
    assert row(fxopt.verify(Returns(lambda x: x), Returns(lambda x: x.clone()), x), "output").cosine == 1.0
    # an element non-finite in one only is left out too: [1, 2] against [2, 4], the same direction
    y = torch.tensor([1.0, float("inf"), 2.0])
    infinite = fxopt.verify(Returns(lambda y: y), Returns(lambda y: torch.tensor([2.0, 5.0, 4.0])), y)
    assert row(infinite, "output").cosine == pytest.approx(1.0, abs=1e-15)
    # values near float32's largest are finite and all counted: [3e38, 3e38, 1] against half of it
    z = torch.tensor([3e38, 3e38, 1.0])
    assert row(fxopt.verify(Returns(lambda z: z), Returns(lambda z: z * 0.5), z), "output").cosine == pytest.approx(1.0)
    # integer outputs have no cosine; the report's minimum covers floating outputs only
    mixed = fxopt.verify(Returns(lambda x: (x, x.long())), Returns(lambda x: (x, x.long())), torch.ones(2))
    assert row(mixed, "1").cosine is None and mixed.min_cosine == 1.0
    assert fxopt.verify(Returns(lambda x: x), Returns(lambda x: x), torch.ones(2, dtype=torch.long)).min_cosine is None
    # bfloat16 against float32 is compared in float64: close to 1, below it
    y = torch.randn(256, generator=torch.Generator().manual_seed(0))
    lowered = row(fxopt.verify(Returns(lambda x: x), Returns(lambda x: x.bfloat16()), y), "output")
    assert lowered.cosine is not None and 0.9999 < lowered.cosine < 1.0


def test_scale_atol_states_the_tolerance_for_magnitude_one() -> None:
    reference = lambda x: x * 100.0  # noqa: E731  (outputs up to 100)
    candidate = lambda x: x * 100.0 + 0.5  # noqa: E731
    x = torch.ones(4)
    assert not fxopt.verify(reference, candidate, x, rtol=0.0, atol=0.01).ok
    scaled = fxopt.verify(reference, candidate, x, rtol=0.0, atol=0.01, scale_atol=True)
    assert scaled.ok and scaled.rows[0].atol == pytest.approx(1.0)


def test_a_scaled_atol_and_the_pass_criterion_are_explained() -> None:
    # Issue 21: "max rel err 251" next to "pass", and atol 0.58 where `fast` declares 0.1.
    x = torch.tensor([[5.8, 0.001, -2.0]])
    report = fxopt.verify(lambda t: t, lambda t: t + 0.05, (x,), rtol=0.1, atol=0.1, scale_atol=True)
    (out,) = report.rows
    assert out.ok and out.max_rel_err is not None and out.max_rel_err > 10
    assert out.atol == pytest.approx(0.58)
    assert out.note == "atol 0.1 x largest |output| 5.8"
    assert "within atol + rtol x |reference|" in str(report)
