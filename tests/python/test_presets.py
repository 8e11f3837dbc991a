"""The presets on every bundled model: `default` preserves float32 results and changes something
on each; `fast` stays within the accuracy it declares (accuracy is a test; speed is the
benchmark, bench/latency.py); `fxopt.optimize` and `fxopt.preset` are the one-call path."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import fxopt
from fxopt.cli import models
from fxopt.optimization import hardware, presets
from fxopt.tracing.dummy_inputs import split_inputs
from fxopt.optimization import ChangePrecision
from capped_cpu import run_capped_at_avx2
from conftest import linear_calls

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module", params=list(models.BUNDLED))
def traced(request: pytest.FixtureRequest) -> tuple[str, torch.nn.Module, torch.fx.GraphModule, dict]:  # type: ignore[type-arg]
    loaded = models.load_model(request.param)
    inputs = models.make_inputs(loaded, 2, 32)
    assert isinstance(inputs, dict)
    return request.param, loaded.model, fxopt.trace(loaded.model, example_inputs=inputs), inputs


def test_default_preserves_float32_and_changes_every_bundled_model(traced) -> None:  # type: ignore[no-untyped-def]
    name, model, gm, inputs = traced
    transformation = presets.preset("default")
    optimized = transformation(gm)
    changed = sum(len(t.report.changed) for t in transformation.transformations if t.report)
    assert changed > 0, f"default changed nothing on {name}"
    report = fxopt.verify(model, optimized, inputs)
    assert report.ok, f"{name}:\n{report}"
    assert report.min_cosine is not None and report.min_cosine > 0.99999


def test_fast_meets_its_declared_accuracy_on_every_bundled_model(traced) -> None:  # type: ignore[no-untyped-def]
    name, model, gm, inputs = traced
    declared = presets.get_preset("fast").accuracy
    assert declared is not None
    optimized = fxopt.optimize(gm, "fast")
    lowered = any(isinstance(p, torch.Tensor) and p.dtype == torch.bfloat16 for p in optimized.parameters())
    assert lowered == hardware.fast_bfloat16_cpu()  # bf16 only where the CPU runs it natively
    report = fxopt.verify(model, optimized, inputs, rtol=declared.rtol, atol=declared.atol, scale_atol=True)
    assert report.ok, f"{name}:\n{report}"
    assert report.min_cosine is not None and report.min_cosine >= declared.min_cosine, f"{name}:\n{report}"


def test_fast_reverses_exactly_and_leaves_its_input_alone() -> None:
    loaded = models.load_model("minilm")
    inputs = models.make_inputs(loaded, 2, 16)
    gm = fxopt.trace(loaded.model, example_inputs=inputs)
    args, kwargs = split_inputs(inputs)
    expected, code = gm(*args, **kwargs), gm.code
    states = {name: p.clone() for name, p in gm.state_dict().items()}
    transformation = fxopt.preset("fast")

    optimized = transformation(gm)
    assert gm.code == code  # inplace=False: the input is untouched
    assert all(torch.equal(states[name], p) for name, p in gm.state_dict().items())
    restored = transformation(optimized, reverse=True)
    got = restored(*args, **kwargs)
    assert all(torch.equal(a, b) for a, b in zip(got.values(), expected.values()))
    assert {n: p for n, p in restored.named_parameters()}.keys() >= {n for n, _ in gm.named_parameters()}


def test_fast_uses_bfloat16_only_where_the_cpu_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware, "fast_bfloat16_cpu", lambda: False)
    assert not any(spec.startswith("ChangePrecision") for spec in presets.preset_passes("fast"))
    monkeypatch.setattr(hardware, "fast_bfloat16_cpu", lambda: True)
    assert "ChangePrecision(dtype=bfloat16)" in presets.preset_passes("fast")
    assert isinstance(presets.build("ChangePrecision(dtype=bfloat16)"), ChangePrecision)


@pytest.mark.parametrize("native_bfloat16", [False, True], ids=["float32", "bfloat16"])
def test_fast_calibrates_int8_with_a_margin_on_every_cpu(monkeypatch: pytest.MonkeyPatch, native_bfloat16: bool) -> None:
    """Int8 is calibrated to FAST_INT8_COSINE whether a bfloat16 lowering follows or not: the rest
    of the declared bound is left to the lowering and to inputs calibration never saw."""
    from fxopt.optimization import passes

    if not passes.int8_kernel_available():
        pytest.skip("no int8 kernel runs here: fast has no int8 pass to calibrate")
    monkeypatch.setattr(hardware, "fast_bfloat16_cpu", lambda: native_bfloat16)
    int8 = [spec for spec in presets.preset_passes("fast") if spec.startswith(("QuantizeLinearsInt8", "QuantizeConvsInt8"))]
    assert int8 and presets.FAST_COSINE < presets.FAST_INT8_COSINE < 1
    compared = "bfloat16" if native_bfloat16 else "float32"
    for spec in int8:
        assert f"min_cosine={presets.FAST_INT8_COSINE}, compare_with={compared})" in spec
        assert presets.build(spec).min_cosine == presets.FAST_INT8_COSINE


ZEN4_FLAGS = {"avx2": True, "avx512_f": True, "avx512_vnni": True, "avx512_bf16": True, "amx_int8": False}


@pytest.mark.parametrize(
    ("variable", "cap", "flags", "bf16", "int8", "decode"),
    [
        (None, None, ["avx2", "avx512_f", "avx512_vnni", "avx512_bf16"], True, True, ("bfloat16", "bfloat16")),
        ("ONEDNN_MAX_CPU_ISA", "AVX2", ["avx2"], False, False, ("float32", "float32")),
        ("ONEDNN_MAX_CPU_ISA", "SSE41", [], False, False, (None, None)),
        ("ONEDNN_MAX_CPU_ISA", "avx512_core_vnni", ["avx2", "avx512_f", "avx512_vnni"], False, True, ("float32", "float32")),
        ("DNNL_MAX_CPU_ISA", "AVX512_CORE", ["avx2", "avx512_f"], False, False, ("float32", "float32")),
        ("ONEDNN_MAX_CPU_ISA", "ALL", ["avx2", "avx512_f", "avx512_vnni", "avx512_bf16"], True, True, ("bfloat16", "bfloat16")),
        ("ONEDNN_MAX_CPU_ISA", "NOT_AN_ISA", ["avx2", "avx512_f", "avx512_vnni", "avx512_bf16"], True, True, ("bfloat16", "bfloat16")),
    ],
)
def test_a_capped_onednn_isa_is_a_cpu_without_the_capped_flags(  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch, variable, cap, flags, bf16, int8, decode
) -> None:
    monkeypatch.setattr(hardware, "capabilities", lambda: ZEN4_FLAGS)
    for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        monkeypatch.delenv(name, raising=False)
    if variable:
        monkeypatch.setenv(variable, cap)
    assert hardware.cpu_flags() == flags
    assert hardware.fast_bfloat16_cpu() is bf16 and hardware.fast_int8_cpu() is int8
    assert ("ChangePrecision(dtype=bfloat16)" in presets.preset_passes("fast")) is bf16
    # The attention kernel comes after the lowering, whichever dtype that leaves (a float32 one
    # serves every CPU with AVX2).
    fast = presets.preset_passes("fast")
    assert fast.index("ChooseAttentionKernel") > max(
        [i for i, spec in enumerate(fast) if spec.startswith(("ChangePrecision", "QuantizeLinearsInt8"))]
    )
    # The decoding presets' activations: bfloat16 where native, else float32 where fxopt's own
    # kernels run (AVX2), else none (they run `default`).
    for name, bits, activation in zip(("decode", "decode-int4"), (8, 4), decode, strict=True):
        specs = [spec for spec in presets.preset_passes(name) if spec.startswith("QuantizeLinearsWeightOnly")]
        quantize = f"QuantizeLinearsWeightOnly(activation={activation}, bits={bits})"
        assert specs == ([] if activation is None else [quantize])
        assert (presets.machine_note(name) == "") is (activation is not None)
    assert ("oneDNN capped at" in hardware.describe()) is (flags != ["avx2", "avx512_f", "avx512_vnni", "avx512_bf16"])


def test_fast_runs_on_a_cpu_capped_at_avx2() -> None:
    """oneDNN reads its cap once, at start-up: a fresh process. Before, `fast` lowered to
    bfloat16 by the CPU's own flags and oneDNN's packed Linear refused the weights ("bf16 path
    needs the cpu support ...")."""
    script = (
        "import torch, fxopt\n"
        "from fxopt.optimization import hardware\n"
        "model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()\n"
        "x = torch.randn(8, 16)\n"
        "gm = fxopt.optimize(model, 'fast', example_inputs=(x,))\n"
        "assert 'bfloat16' not in gm.code and 'avx512' not in ','.join(hardware.cpu_flags())\n"
        "torch.testing.assert_close(gm(x), model(x), rtol=1e-5, atol=1e-5)\n"
        "print('ok')\n"
    )
    run_capped_at_avx2(script)


def test_decode_runs_fxopts_avx2_kernels_on_a_cpu_capped_at_avx2() -> None:
    """Without native bfloat16, `decode` and `decode-int4` keep float32 activations and fxopt's
    own kernels, whose AVX2 paths run under the cap (kernels/cpu_dispatch.h reads it as oneDNN
    does)."""
    script = (
        "import torch, fxopt\n"
        "from torch.fx.passes.shape_prop import ShapeProp\n"
        "model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 40)).eval()\n"
        "x = torch.randn(1, 3, 64)\n"
        "gm = fxopt.trace(model, example_inputs=(x,))\n"
        "ShapeProp(gm).propagate(x)  # the pass needs the input's rank\n"
        "gm = fxopt.preset('decode')(gm)\n"
        "assert gm.code.count('int8_weight_linear(') == 2 and 'bfloat16' not in gm.code, gm.code\n"
        "y, expected = gm(x), model(x)\n"
        "assert torch.nn.functional.cosine_similarity(y.flatten(), expected.flatten(), 0) > 0.999\n"
        "assert not torch.equal(y, expected)\n"
        "traced = fxopt.trace(model, example_inputs=(x,))\n"
        "ShapeProp(traced).propagate(x)\n"
        "gm4 = fxopt.preset('decode-int4')(traced)\n"
        "assert gm4.code.count('int4_weight_linear(') == 2, gm4.code\n"
        "assert torch.nn.functional.cosine_similarity(gm4(x).flatten(), expected.flatten(), 0) > 0.99\n"
        "print('ok')\n"
    )
    run_capped_at_avx2(script)


def test_fast_without_native_bfloat16_says_so_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 21: the CLI printed a note, the Python API ran float32 silently.
    monkeypatch.setattr(hardware, "fast_bfloat16_cpu", lambda: False)
    monkeypatch.setattr(presets, "_warned_presets", set())
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    x = torch.randn(2, 4)
    with pytest.warns(presets.PresetWarning, match="'fast' runs float32 here"):
        fxopt.optimize(model, "fast", example_inputs=(x,))
    with warnings.catch_warnings():
        warnings.simplefilter("error", presets.PresetWarning)
        fxopt.optimize(model, "fast", example_inputs=(x,))  # once per process
        fxopt.optimize(model, "default", example_inputs=(x,))  # nothing to say
    monkeypatch.setattr(hardware, "fast_bfloat16_cpu", lambda: True)
    monkeypatch.setattr(presets, "_warned_presets", set())
    with warnings.catch_warnings():
        warnings.simplefilter("error", presets.PresetWarning)
        fxopt.preset("fast")


CPU_KERNELS = ("FuseLinearActivationOneDnn", "FuseConvActivationOneDnn", "QuantizeLinears", "ChooseAttentionKernel")


@pytest.mark.parametrize("capability, lowered", [((9, 0), True), ((7, 5), False)], ids=["hopper", "turing"])
def test_presets_for_a_cuda_model_hold_no_cpu_kernel(
    monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], lowered: bool
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    for name in presets.PRESETS:
        assert not [s for s in presets.preset_passes(name, "cuda") if s.startswith(CPU_KERNELS)], name
    # bfloat16 where the GPU has it natively (compute capability 8.0 on), whatever the CPU has.
    assert ("ChangePrecision(dtype=bfloat16)" in presets.preset_passes("fast", "cuda")) == lowered
    assert ("runs float32 there" in presets.machine_note("fast", "cuda")) == (not lowered)
    assert presets.preset_passes("decode", "cuda") == presets.preset_passes("default", "cuda")
    assert "'decode' runs 'default' there" in presets.machine_note("decode", "cuda")
    assert not presets.calibrates("fast", "cuda")
    # Measured on an H200 (bench/results/latency_gpu_h200_traced.md): RecognizeLinears only
    # prepares Linears for CPU kernels and cost GPT-2 6% there; merged q/k/v Linears paid.
    assert "RecognizeLinears" not in presets.preset_passes("default", "cuda")
    assert "MergeLinears" in presets.preset_passes("default", "cuda")
    assert "RecognizeLinears" in presets.preset_passes("default", "cpu")


def test_default_merges_parallel_linears_before_their_kernels_are_picked() -> None:
    # Measured on a Zen 4 core: the real MiniLM 35.1 -> 33.5 ms (docs/benchmarks.md).
    specs = presets.preset_passes("default", "cpu")
    fusions = [specs.index(s) for s in presets.ONEDNN_FUSIONS if s in specs]
    assert "MergeLinears" in specs and all(specs.index("MergeLinears") < f for f in fusions)
    loaded = models.load_model("minilm")
    inputs = models.make_inputs(loaded, 2, 16)
    assert isinstance(inputs, dict)
    gm = fxopt.trace(loaded.model, example_inputs=inputs)
    linears_before = len(linear_calls(gm))
    transformation = presets.preset("default")
    optimized = transformation(gm)
    merge = next(t for t in transformation.transformations if type(t).__name__ == "MergeLinears")
    # q, k and v of each of MiniLM's six layers: the merged Linear and its three members
    assert len(merge.report.changed) == 4 * 6
    assert sum(name.endswith("_merged") for name in merge.report.changed) == 6
    kernels = [n for n in optimized.graph.nodes if n.op == "call_function" and "linear" in str(n.target)]
    assert len(kernels) == linears_before - 2 * 6
    report = fxopt.verify(loaded.model, optimized, inputs)
    assert report.ok and report.min_cosine is not None and report.min_cosine > 0.99999


def test_model_device_is_where_the_weights_are() -> None:
    assert hardware.model_device(torch.nn.ReLU()) == torch.device("cpu")  # no tensor: the CPU
    assert hardware.model_device(torch.nn.Linear(2, 2, device="meta")).type == "meta"
    program = torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    assert hardware.model_device(program) == torch.device("cpu")


def test_optimize_picks_the_passes_for_the_models_device(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[torch.device] = []
    real = presets.preset_passes

    def spy(name: str, device: torch.device | str = "cpu") -> list[str]:
        asked.append(torch.device(device))
        return real(name, device)

    monkeypatch.setattr(presets, "preset_passes", spy)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    fxopt.optimize(model, "default", example_inputs=(torch.randn(2, 4),))
    assert asked and set(asked) == {torch.device("cpu")}
    asked.clear()
    model.to("meta")
    with pytest.raises(ValueError, match="meta device"):  # the preset was picked before tracing
        fxopt.optimize(model, "default", example_inputs=(torch.randn(2, 4, device="meta"),))
    assert asked and set(asked) == {torch.device("meta")}


def test_optimize_traces_a_module_and_rejects_other_values() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).eval()
    x = torch.randn(2, 3, 8, 8)
    optimized = fxopt.optimize(copy.deepcopy(model), "default", example_inputs=(x,))
    assert isinstance(optimized, torch.fx.GraphModule)
    torch.testing.assert_close(optimized(x), model(x), atol=1e-5, rtol=1e-5)
    with pytest.raises(TypeError, match="nn.Module or a GraphModule"):
        fxopt.optimize("bert", "default")  # type: ignore[arg-type]
    with pytest.raises(presets.PassSpecError, match="unknown preset"):
        fxopt.optimize(model, "fastest")


def test_fast_calibrates_on_a_batch_when_the_example_is_one_sentence() -> None:
    # The graph traced on one sentence took batch 1 only (Dynamo fixes sizes of one), so the
    # calibration batch failed on the graph's input check (tracing/sizes_of_one.py).
    from conftest import build_model, tiny_bert_config, token_inputs
    import transformers

    torch.manual_seed(0)
    model = build_model(transformers.BertModel, tiny_bert_config())
    optimized = fxopt.optimize(model, "fast", example_inputs=token_inputs(1, 12), calibration=token_inputs(4, 12))
    for batch in (1, 3):
        inputs = token_inputs(batch, 12)
        expected = model(**inputs).last_hidden_state
        got = optimized(**inputs)["last_hidden_state"]
        cosine = torch.nn.functional.cosine_similarity(got.flatten().double(), expected.flatten().double(), dim=0)
        assert got.shape == expected.shape and cosine >= presets.FAST_INT8_COSINE - 1e-3, batch


def test_every_registry_entry_has_its_python_class_with_the_registrys_facts() -> None:
    import fxopt.optimization as optimization
    from fxopt import _core
    from fxopt.optimization.builtin import BuiltinTransformation

    for info in _core.passes():
        cls = getattr(optimization, info.name)
        assert issubclass(cls, BuiltinTransformation)
        assert (cls.core_pass, cls.summary, cls.preserves_computation) == (
            info.name, info.summary, info.preserves_computation)
    for name in optimization.__all__:
        cls = getattr(optimization, name)
        if isinstance(cls, type) and issubclass(cls, BuiltinTransformation) and cls is not BuiltinTransformation:
            assert cls.core_pass in {info.name for info in _core.passes()}
