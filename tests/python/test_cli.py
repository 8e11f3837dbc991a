"""The `fxopt` command line, run as users run it: in a subprocess, judged by exit code and output.

Models are tiny (a config JSON with 32-wide layers, a factory module of a few ops) so each run
is dominated by importing torch; one run uses the real MiniLM weights.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from rich.console import Console

import fxopt as fxopt_package
from fxopt.cli import main, optimize, timing
from fxopt.storage import graph_file
from fxopt.optimization import hardware, presets

TINY_BERT = {
    "model_type": "bert",
    "vocab_size": 100,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
}

FACTORIES = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(8, 8)
            self.k = nn.Linear(8, 8)

        def forward(self, x):
            scores = self.q(x) @ self.k(x).transpose(-1, -2) / 8
            return scores.softmax(-1)


    class Untraceable(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x - 1


    def attention():
        torch.manual_seed(0)
        return Attention(), (torch.randn(2, 5, 8),)


    def wrong_shapes():
        return Attention(), (torch.randn(2, 5, 3),)


    def untraceable():
        return Untraceable(), (torch.randn(2, 4),)


    def no_inputs():
        return Attention()
    """
)

# Runs a saved artifact where the named packages cannot be imported, and compares it with the
# expected output: a .pt with fxopt.load, a .pt2 with torch.export.load.
LOAD_WITHOUT = textwrap.dedent(
    """
    import sys

    artifact, inputs_path, expected_path, *blocked = sys.argv[1:]

    class Blocked:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in blocked:
                raise ImportError(f"{name} is not installed here")

    sys.meta_path.insert(0, Blocked())
    import torch

    inputs = torch.load(inputs_path)
    expected = torch.load(expected_path)
    if artifact.endswith(".pt2"):
        module = torch.export.load(artifact).module()
    else:
        import fxopt

        module = fxopt.load(artifact)
    output = module(**inputs) if isinstance(inputs, dict) else module(*inputs)
    torch.testing.assert_close(output, expected)
    assert not [name for name in sys.modules if name.split(".")[0] in blocked]
    print("loaded", type(module).__name__)
    """
)


def fxopt(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    command = [sys.executable, "-m", "fxopt", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fxopt: error: "), lines[0]
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("cli")
    (directory / "tiny_bert.json").write_text(json.dumps(TINY_BERT))
    (directory / "factories.py").write_text(FACTORIES)
    return directory


def test_passes_lists_every_transformation_and_preset() -> None:
    result = fxopt("passes")
    assert result.returncode == 0, result.stderr
    for name in (
        "ChangeTrueDivToMulByInverse",
        "DeepCopy",
        "LintAndRecompile",
        "module, aten",
        "default",
        "all-preserving",
    ):
        assert name in result.stdout


def test_models_lists_the_bundled_models() -> None:
    result = fxopt("models")
    assert result.returncode == 0, result.stderr
    for name in ("minilm", "bert-base", "gpt2", "llama", "resnet50", "mobilenet-v2", "vit-base"):
        assert name in result.stdout


def run_without(
    workdir: Path,
    artifact: Path,
    inputs: tuple[torch.Tensor, ...] | dict[str, torch.Tensor],
    expected: object,
    blocked: tuple[str, ...] = ("fxopt",),
) -> None:
    """Load `artifact` in a fresh interpreter that cannot import `blocked`, run it, compare."""
    torch.save(inputs, workdir / "inputs.pt")
    torch.save(expected, workdir / "expected.pt")
    (workdir / "load.py").write_text(LOAD_WITHOUT)
    loaded = subprocess.run(
        [sys.executable, workdir / "load.py", artifact, workdir / "inputs.pt", workdir / "expected.pt", *blocked],
        capture_output=True,
        text=True,
        cwd=workdir,
        timeout=300,
    )
    assert loaded.returncode == 0, loaded.stderr
    assert "loaded " in loaded.stdout


def test_optimize_factory_writes_json_and_a_standalone_artifact(workdir: Path) -> None:
    artifact, report_path = workdir / "attention.pt", workdir / "attention.json"
    options = ["--verify", "--bench", "--repeats", "2", "--warmup", "1"]
    result = fxopt(
        "optimize", f"{workdir}/factories.py:attention", *options, "--json", report_path, "--save", artifact
    )
    assert result.returncode == 0, result.stderr
    assert "fxopt.verify: ok" in result.stdout and "speedup" in result.stdout

    report = json.loads(report_path.read_text())
    assert report["trace"]["mode"] == "symbolic"
    passes = {outcome["name"]: outcome for outcome in report["passes"]}
    assert len(passes["ChangeTrueDivToMulByInverse"]["changed"]) == 1
    before, after = report["stats"]["before"]["by_target"], report["stats"]["after"]["by_target"]
    assert before["operator.truediv"] == 1 and "operator.truediv" not in after
    assert after["operator.mul"] == 1
    assert report["verify"]["ok"] and report["verify"]["rows"][0]["max_abs_err"] is not None
    assert report["verify"]["rows"][0]["cosine"] > 0.99999
    bench = report["bench"]
    assert bench["eager"]["runs"] == 2 and len(bench["optimized"]["samples_ms"]) == 2
    low, high = bench["speedup_rounds"]
    assert bench["speedup"] > 0 and low <= high
    assert bench["verdict"].startswith("no measurable difference") != bench["measurable"]
    assert "fast paths:" in report["hardware"] and "CPU:" in result.stdout
    assert report["saved"] == {"path": str(artifact), "load": f"fxopt.load({str(artifact)!r})"}

    sys.path.insert(0, str(workdir))
    try:
        import factories  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(workdir))
    model, inputs = factories.attention()
    with torch.no_grad():
        run_without(workdir, artifact, inputs, model(*inputs), blocked=("factories",))


def test_optimize_config_json_in_export_mode(workdir: Path) -> None:
    from fxopt.cli.models import load_model

    artifact, report_path = workdir / "bert.pt", workdir / "bert.json"
    options = ["--mode", "export", "--batch", "3", "--seq", "10", "--verify"]
    passes = "MergeLinears,FuseBiasInLinear,DeepCopy"
    result = fxopt(
        "optimize", workdir / "tiny_bert.json", *options, "--passes", passes, "--json", report_path,
        "--save", artifact,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(report_path.read_text())
    assert report["trace"]["mode"] == "export"
    assert report["inputs"]["input_ids"] == "3x10 int64"
    assert [p["name"] for p in report["passes"]] == passes.split(",")
    assert report["passes"][0]["changed"], "q, k and v read one input: MergeLinears must fire"
    assert {row["name"] for row in report["verify"]["rows"]} == {"last_hidden_state", "pooler_output"}
    assert report["verify"]["ok"]

    # The artifact takes other sizes than the traced ones (dynamic batch and sequence).
    model = load_model(str(workdir / "tiny_bert.json")).model
    inputs = (torch.randint(0, 100, (2, 7)), torch.ones(2, 7, dtype=torch.long))
    with torch.no_grad():
        run_without(workdir, artifact, inputs, dict(model(*inputs)), blocked=())


def test_optimize_saves_a_pt2_that_runs_with_torch_alone(workdir: Path) -> None:
    from fxopt.cli.models import load_model

    artifact, report_path = workdir / "bert.pt2", workdir / "bert_pt2.json"
    result = fxopt(
        "optimize", workdir / "tiny_bert.json", "--mode", "dynamo", "--verify", "--json", report_path,
        "--save", artifact,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(report_path.read_text())
    assert report["trace"]["mode"] == "dynamo" and report["verify"]["ok"]
    assert any(outcome["changed"] for outcome in report["passes"])
    assert report["saved"]["load"] == f"torch.export.load({str(artifact)!r}).module()"
    if hardware.onednn_linear_available():
        note = " ".join(result.stdout.split())
        assert "left out of the preset" in note and "FuseLinearActivationOneDnn" in note.split("left out")[0]

    # Other sizes than the traced ones, by keyword as traced; ModelOutput comes back as a plain
    # dict, so neither fxopt nor transformers is needed to load and run it.
    model = load_model(str(workdir / "tiny_bert.json")).model
    inputs = {"input_ids": torch.randint(0, 100, (3, 7)), "attention_mask": torch.ones(3, 7, dtype=torch.long)}
    with torch.no_grad():
        expected = dict(model(**inputs))
    run_without(workdir, artifact, inputs, expected, blocked=("fxopt", "transformers"))


def test_a_pt2_refuses_passes_torch_export_cannot_save(workdir: Path) -> None:
    result = fxopt(
        "optimize", workdir / "tiny_bert.json", "--passes", "FuseLinearActivationOneDnn",
        "--save", workdir / "x.pt2",
    )  # fmt: skip
    assert_one_line_error(result, "torch.export.save cannot write the result of FuseLinearActivationOneDnn")


def test_optimize_minilm_with_real_weights() -> None:
    """The main job of scripts/run.sh, on short inputs: fast preset within its declared accuracy."""
    result = fxopt("optimize", "minilm", "--preset", "fast", "--verify", "--batch", "2", "--seq", "8")
    assert result.returncode == 0, result.stderr
    assert "all-MiniLM-L6-v2" in result.stdout and "fxopt.verify" in result.stdout
    assert "verify FAILED" not in result.stdout


def test_run_sh_main_job_is_the_fast_preset_verified_and_timed() -> None:
    script = (Path(__file__).resolve().parents[2] / "scripts" / "run.sh").read_text()
    assert "set -- optimize minilm --preset fast --verify --bench" in script


def test_nothing_changed_is_said_and_not_timed(workdir: Path) -> None:
    report_path = workdir / "unchanged.json"
    result = fxopt(
        "optimize", workdir / "tiny_bert.json", "--passes", "FuseBatchNormInConv", "--bench",
        "--repeats", "2", "--warmup", "0", "--json", report_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "nothing changed" in result.stdout
    assert "median ms" not in result.stdout and "timing eager" not in result.stdout  # no latency table
    report = json.loads(report_path.read_text())
    assert report["passes"][0]["changed"] == []
    assert report["bench"] == {"skipped": optimize.NOTHING_CHANGED}


class FakeClock:
    """A clock that only the fake models below move: each call lasts what its script says."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def model(self, durations_ms: list[float]) -> Callable[..., None]:
        remaining: Iterator[float] = iter(durations_ms)

        def call(*args: Any, **kwargs: Any) -> None:
            self.now += next(remaining) / 1e3

        return call


def fake_bench(eager_ms: list[float], optimized_ms: list[float], warmup: int) -> tuple[dict[str, Any], str]:
    clock = FakeClock()
    console = Console(file=io.StringIO(), width=200)
    result = timing.bench(
        console,
        clock.model(eager_ms),  # type: ignore[arg-type]
        clock.model(optimized_ms),  # type: ignore[arg-type]
        (torch.zeros(1),),
        warmup,
        len(eager_ms) - warmup,
        clock=clock,
    )
    output = console.file.getvalue()  # type: ignore[attr-defined]
    return result, output


def test_overlapping_spreads_print_no_measurable_difference() -> None:
    # The first round is warm-up (100 ms, excluded). Timed: eager 10..14, optimized 10.5..12.5.
    eager = [100.0, 10.0, 12.0, 11.0, 13.0, 14.0]
    optimized = [100.0, 11.0, 10.5, 12.5, 11.5, 12.0]
    result, output = fake_bench(eager, optimized, warmup=1)
    assert result["eager"]["runs"] == 5 and result["eager"]["samples_ms"] == pytest.approx(eager[1:])
    # eager IQR 11-13 ms and optimized IQR 11-12 ms overlap
    assert (result["eager"]["q1_ms"], result["eager"]["q3_ms"]) == pytest.approx((11.0, 13.0))
    assert (result["optimized"]["q1_ms"], result["optimized"]["q3_ms"]) == pytest.approx((11.0, 12.0))
    assert not result["measurable"]
    assert result["speedup"] == pytest.approx(12.0 / 11.5)
    assert "no measurable difference (1.04x, rounds" in output
    assert "verdict: no measurable difference between eager and optimized" in output
    assert result["verdict"].startswith("no measurable difference")


def test_separated_spreads_print_the_speedup_with_its_per_round_range() -> None:
    eager = [10.0, 10.0, 11.0, 12.0, 10.0]
    optimized = [5.0, 5.0, 5.5, 6.0, 4.0]
    result, output = fake_bench(eager, optimized, warmup=0)
    assert result["measurable"]
    assert result["speedup"] == pytest.approx(10.0 / 5.0)
    # per-round ratios: 2, 2, 2, 2, 2.5
    assert result["speedup_rounds"] == pytest.approx([2.0, 2.5])
    assert "2.00x (rounds 2.00-2.50x)" in output and "no measurable difference (" not in output
    # Issue 21: the caption states the method, not "no measurable difference" under every table;
    # the verdict of this run is its own line.
    assert "no measurable difference" not in output
    assert "verdict: optimized is 2.00x faster than eager" in output
    slower, _ = fake_bench(optimized, eager, warmup=0)
    assert slower["measurable"] and slower["verdict"].endswith("slower")


def test_the_thread_count_is_shown_with_the_cpus_a_pinned_run_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 21: a run pinned to one CPU said "torch threads: 2" (torch's default per core).
    from fxopt.optimization import hardware

    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert hardware.threads_text() == "2 torch threads on 1 usable CPU"


def test_timing_budget_stops_after_the_minimum_rounds() -> None:
    clock = FakeClock()
    eager = clock.model([1.0] * 20)
    latencies = timing.measure_latency(
        {"eager": eager}, (torch.zeros(1),), 0, 20, clock=clock, budget_s=0.0, min_repeats=3
    )
    assert latencies["eager"].runs == 3


def run_in_process(*arguments: str | Path) -> tuple[int, str, str]:
    """`fxopt ...` in this process (so a test can monkeypatch presets): exit code, stdout, stderr."""
    stdout, stderr = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = stdout, stderr
    try:
        code = main.main([str(argument) for argument in arguments])
    finally:
        sys.stdout, sys.stderr = old
    return code, stdout.getvalue(), stderr.getvalue()


@pytest.mark.parametrize(
    ("accuracy", "fragments"),
    [
        # bfloat16 moves every output a little: an impossible cosine fails on the cosine alone ...
        (presets.Accuracy(min_cosine=0.99999999, rtol=1e9, atol=1e9), ["cosine >= 0.99999999", "last_hidden_state cosine"]),
        # ... and zero tolerances fail on the errors alone
        (presets.Accuracy(min_cosine=-1.0, rtol=0.0, atol=0.0), ["rtol 0.0, atol 0.0", "max abs err"]),
    ],
)
def test_fast_preset_outside_its_declared_accuracy_fails_loudly(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, accuracy: presets.Accuracy, fragments: list[str]
) -> None:
    tight = replace(
        presets.get_preset("fast"), passes=lambda device: ["ChangePrecision(dtype=bfloat16)"], accuracy=accuracy
    )
    monkeypatch.setitem(presets.PRESETS, "fast", tight)
    report_path = workdir / "tight.json"
    code, stdout, stderr = run_in_process(
        "optimize", workdir / "tiny_bert.json", "--preset", "fast", "--verify", "--json", report_path
    )
    assert code == 1
    (line,) = stderr.strip().splitlines()
    assert line.startswith("fxopt: error: preset 'fast' declares") and "against float32" in line
    for fragment in fragments:
        assert fragment in line
    assert "verify FAILED" in stdout
    report = json.loads(report_path.read_text())
    assert report["verify"]["declared"]["min_cosine"] == accuracy.min_cosine


def test_fast_preset_within_its_declared_accuracy_passes(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loose = presets.Accuracy(min_cosine=0.99, rtol=0.5, atol=0.5)
    monkeypatch.setitem(
        presets.PRESETS,
        "fast",
        replace(presets.get_preset("fast"), passes=lambda device: ["ChangePrecision(dtype=bfloat16)"], accuracy=loose),
    )
    code, stdout, stderr = run_in_process("optimize", workdir / "tiny_bert.json", "--preset", "fast", "--verify")
    assert code == 0, stderr
    assert "verify FAILED" not in stdout


@pytest.mark.parametrize("native_bfloat16", [False, True])
def test_fast_preset_says_when_this_cpu_keeps_it_in_float32(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, native_bfloat16: bool
) -> None:
    monkeypatch.setattr(hardware, "fast_bfloat16_cpu", lambda: native_bfloat16)
    report_path = workdir / "report.json"
    code, stdout, stderr = run_in_process(
        "optimize", workdir / "tiny_bert.json", "--preset", "fast", "--json", str(report_path)
    )
    assert code == 0, stderr
    report = json.loads(report_path.read_text())
    lowered = any("ChangePrecision" in p for p in report["passes_requested"])
    assert lowered == native_bfloat16
    if native_bfloat16:
        assert "preset_note" not in report and "no native bfloat16" not in stdout
    else:
        assert "no native bfloat16" in report["preset_note"]
        assert "runs float32 here" in " ".join(stdout.split())


@pytest.mark.parametrize(
    ("arguments", "fragments"),
    [
        (["optimize", "no-such-model"], ["unknown model 'no-such-model'", "minilm"]),
        (["optimize", "{dir}/tiny_bert.json", "--passes", "NoSuchPass"], ["unknown pass 'NoSuchPass'"]),
        (["optimize", "{dir}/tiny_bert.json", "--preset", "fastest"], ["unknown preset 'fastest'"]),
        (["optimize", "{dir}/tiny_bert.json", "--passes", "DeepCopy(bad=1)"], ["DeepCopy(bad=1)"]),
        (
            ["optimize", "{dir}/factories.py:untraceable"],
            ["could not trace Untraceable", "symbolic", "export"],
        ),
        (["optimize", "{dir}/tiny_bert.json", "--seq", "100"], ["--seq 100", "64 positions"]),
        (["optimize", "{dir}/factories.py:wrong_shapes"], ["cannot run on inputs", "2x5x3"]),
        (["optimize", "{dir}/factories.py:no_inputs"], ["must return (module, example_inputs)"]),
        (["optimize", "{dir}/factories.py"], ["factories.py:FUNCTION"]),
        (["frobnicate"], ["invalid choice"]),
        # --save is checked first: the untraceable model never gets to fail.
        (
            ["optimize", "{dir}/factories.py:untraceable", "--save", "{dir}/missing/m.pt"],
            ["cannot write", "missing/m.pt", "does not exist"],
        ),
        (["optimize", "{dir}/tiny_bert.json", "--save", "{dir}"], ["cannot write", "is a directory"]),
        # So is --json (issue 21: a raw IsADirectoryError after the whole run).
        (
            ["optimize", "{dir}/factories.py:untraceable", "--json", "{dir}"],
            ["cannot write", "is a directory"],
        ),
        (["optimize", "{dir}/factories.py:untraceable", "--save", "{dir}/m"], ["cannot write", ".pt2", ".pt"]),
    ],
)
def test_bad_input_is_one_line_without_traceback(
    workdir: Path, arguments: list[str], fragments: list[str]
) -> None:
    assert_one_line_error(fxopt(*(a.format(dir=workdir) for a in arguments)), *fragments)


def test_a_torch_save_failure_is_reported_in_fxopts_words(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(obj: object, path: object) -> None:
        raise RuntimeError("cannot pickle 'PyCapsule' object\nmore detail")

    monkeypatch.setattr(graph_file.torch, "save", refuse)
    code, stdout, stderr = run_in_process("optimize", workdir / "tiny_bert.json", "--save", workdir / "m.pt")
    assert code != 0
    line = stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "cannot save the optimized module to" in line
    assert "fxopt.save failed with RuntimeError: cannot pickle 'PyCapsule' object" in line


def test_a_saved_file_that_does_not_load_back_is_removed_and_reported(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def truncated(graph_module: object, path: Path) -> None:
        Path(path).write_bytes(b"not a graph")

    monkeypatch.setattr(graph_file, "save", truncated)
    artifact = workdir / "m.pt"
    code, stdout, stderr = run_in_process("optimize", workdir / "tiny_bert.json", "--save", artifact)
    assert code != 0 and not artifact.exists()
    line = stderr.strip()
    assert "\n" not in line and "was written but does not load back (removed)" in line


def test_optimized_minilm_saved_as_pt_loads_and_reverses(workdir: Path) -> None:
    artifact = workdir / "minilm.pt"
    code, stdout, stderr = run_in_process("optimize", "minilm", "--save", artifact)
    assert code == 0, stderr
    loaded = fxopt_package.load(artifact)
    restored = fxopt_package.preset("default")(loaded, reverse=True)
    ids = torch.randint(0, 100, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(
            restored(input_ids=ids)["last_hidden_state"], loaded(input_ids=ids)["last_hidden_state"]
        )


def test_batch_and_seq_for_a_factory_with_its_own_inputs_are_said_to_be_ignored(workdir: Path) -> None:
    code, stdout, stderr = run_in_process(
        "optimize", f"{workdir}/factories.py:attention", "--batch", "4", "--seq", "16"
    )
    assert code == 0, stderr
    text = " ".join(stdout.split())
    assert "returns its own example inputs; --batch 4 and --seq 16 ignored" in text


def test_debug_shows_the_traceback() -> None:
    result = fxopt("optimize", "no-such-model", "--debug")
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "ModelError" in result.stderr
