"""The model coverage matrix: transformers 5 architectures through trace, core, passes, verify.

One test per architecture of `model_coverage.ARCHITECTURES`, so a failure names the model, the
stage and (for a pass failure) the pass that breaks it alone. An architecture that does not
pass stays in the matrix with a documented `ExpectedFailure`, which the test asserts: it must
fail exactly that way, so fixing the cause makes the test fail until the entry is removed.
`scripts/models_matrix.py` writes the same results to docs/models.md.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest
import torch
from torch import nn
from torch.fx import GraphModule

import model_coverage as coverage
from fxopt import _core, optimization
from model_coverage import (
    ARCHITECTURES,
    Architecture,
    Family,
    check_architecture,
    check_minilm,
    check_model,
    preserving_passes,
)
from fxopt.optimization import BuiltinTransformation, ChangeTrueDivToMulByInverse, Transformation

REQUIRED = (
    "BERT", "DistilBERT", "RoBERTa", "GPT-2", "LLaMA", "Mistral", "Qwen2", "T5", "BART", "ViT",
    "ResNet", "MobileNetV2", "ConvNeXt", "Whisper",
)  # fmt: skip
"""The architectures issue 3 names; the matrix may hold more, never fewer."""

DOCS = Path(__file__).resolve().parents[2] / "docs" / "models.md"


@pytest.mark.parametrize("architecture", ARCHITECTURES, ids=lambda a: a.name)
def test_architecture(architecture: Architecture) -> None:
    result = check_architecture(architecture)
    expected = architecture.expected_failure
    if expected is None:
        assert result.ok, result.summary()
    else:
        assert expected.matches(result), (
            f"documented to fail at {expected.stage} matching {expected.pattern!r}, "
            f"but {result.summary()}"
        )


def test_pretrained_minilm_matches_eager() -> None:
    result = check_minilm()
    assert result.ok, result.summary()
    assert result.fired, "no pass changed the real model: the pipeline proves nothing on it"


def test_matrix_spans_the_required_architectures_and_every_family() -> None:
    names = [architecture.name for architecture in ARCHITECTURES]
    assert len(names) == len(set(names)), "architecture names must be unique"
    assert len(names) >= 20
    assert set(REQUIRED) <= set(names)
    assert {architecture.family for architecture in ARCHITECTURES} == set(get_args(Family))


def test_pipeline_is_every_preserving_builtin_in_registry_order() -> None:
    """Discovery reads the Python classes; the engine's registry must agree with it."""
    exported = {
        value.core_pass
        for value in vars(optimization).values()
        if isinstance(value, type)
        and issubclass(value, BuiltinTransformation)
        and hasattr(value, "core_pass")
    }
    registered = [
        info.name
        for info in _core.passes()
        if info.preserves_computation and info.name in exported
    ]
    pipeline = [type(transformation).core_pass for transformation in preserving_passes()]
    assert pipeline == registered
    assert ChangeTrueDivToMulByInverse.core_pass in pipeline


def test_docs_list_every_architecture() -> None:
    """docs/models.md is regenerated whenever the matrix changes (scripts/models_matrix.py)."""
    rows = {
        match.group(1)
        for match in re.finditer(r"^\| ([^|]+?) \|", DOCS.read_text(), flags=re.MULTILINE)
    }
    missing = [architecture.name for architecture in ARCHITECTURES if architecture.name not in rows]
    assert not missing, f"run scripts/models_matrix.py: docs/models.md lacks {missing}"


class Quarter(nn.Module):
    """A graph with one division by a constant, so the real pass has something to change."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / 4 + 1


class Exploding(Transformation):
    """A pass that fails, standing in for a built-in pass with a bug."""

    preserves_computation = True

    def transform(self, graph_module: GraphModule) -> GraphModule:
        raise RuntimeError("cannot rewrite node add")


def test_pipeline_failure_names_the_pass_that_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipeline failure must reach the owner of the guilty pass, not just name the model."""
    monkeypatch.setattr(
        coverage, "preserving_passes", lambda: [ChangeTrueDivToMulByInverse(), Exploding()]
    )
    result = check_model("quarter", "test", Quarter(), example_inputs=(torch.randn(2, 3),))
    assert result.failed_stage == "pipeline"
    assert result.failure is not None
    assert "[Exploding raises RuntimeError: cannot rewrite node add" in result.failure
    assert "ChangeTrueDivToMulByInverse" not in result.failure
