"""The README's examples for generate(), pipelines and sentence-transformers, run as written (on
the tiny models they build; the MiniLM they name is the bundled copy, as there is no model hub).
Each example compares with the unoptimized model itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from linear_models import minilm_path

SECTION = "## generate(), pipelines and sentence embeddings"


def examples() -> list[str]:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


def test_the_section_has_the_three_examples() -> None:
    assert len(examples()) == 3


@pytest.mark.parametrize("index", range(3), ids=["generate", "pipeline", "sentence-transformers"])
def test_readme_example_runs(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = examples()[index].replace("sentence-transformers/all-MiniLM-L6-v2", minilm_path())
    exec(compile(code, f"README example {index}", "exec"), {})  # noqa: S102 - our own README
