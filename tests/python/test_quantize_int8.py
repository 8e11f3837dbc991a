"""QuantizeLinearsInt8: per-token int8 Linears on a user's MLP and on the real MiniLM."""

from __future__ import annotations

import copy
import inspect
import io

import pytest
import torch
import torch.fx
import torch.nn as nn
import transformers

from torch.fx.passes.shape_prop import ShapeProp

import fxopt
import fxopt.engine.tensor_ops
import fxopt.runtime.dynamic_int8
import fxopt.runtime.per_token_int8
from fxopt.optimization import QuantizeLinearsInt8, hardware
from capped_cpu import run_capped_at_avx2
from conftest import counted_calls, fake_timings
from linear_models import assert_same_parameters, minilm, minilm_inputs, param_states

PER_TOKEN = fxopt.runtime.per_token_int8.per_token_int8_linear

__all__ = ["minilm"]  # the session fixture, used by name


def count(gm: torch.fx.GraphModule, target: object) -> int:
    return sum(1 for n in gm.graph.nodes if n.target == target)


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0).item()


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8, bias=False)
    ).eval()


def test_user_mlp_runs_int8_saves_and_reverses_exactly() -> None:
    model = mlp()
    x = torch.randn(3, 5, 16)
    gm = fxopt.trace(model, example_inputs=(x,), mode="symbolic")  # no sizes recorded
    code_before = gm.code
    before = param_states(gm)
    expected = gm(x)
    t = QuantizeLinearsInt8()

    t(gm)
    assert sorted(t.report.changed) != [] and t.report.skipped == []
    assert count(gm, PER_TOKEN) == 2
    assert [n for n in gm.graph.nodes if n.op == "call_module"] == []
    first = next(n for n in gm.graph.nodes if n.target is PER_TOKEN)
    assert first.args[4:] == ("relu",)  # the ReLU reading only the first Linear is its epilogue
    packed = gm.get_submodule("0").weight_int8
    assert packed.dtype == torch.int8 and packed.shape == (16, 64)
    actual = gm(x)
    assert actual.shape == expected.shape
    assert not torch.equal(actual, expected)  # it computes in int8 ...
    assert cosine(actual, expected) > 0.999  # ... within int8 rounding
    # Plain tensors and a module-level function: deep copies and saved files run the same.
    torch.testing.assert_close(copy.deepcopy(gm)(x), actual, rtol=0, atol=0)
    buffer = io.BytesIO()
    torch.save(gm, buffer)
    buffer.seek(0)
    torch.testing.assert_close(torch.load(buffer, weights_only=False)(x), actual, rtol=0, atol=0)

    t(gm, reverse=True)
    assert count(gm, PER_TOKEN) == 0
    assert gm.code == code_before
    assert torch.equal(gm(x), expected)
    assert_same_parameters(gm, before, same_storage=True)
    assert not hasattr(gm.get_submodule("0"), "weight_int8")


def test_calibrated_minilm_keeps_its_cosine_bound_and_reverses(
    minilm: transformers.BertModel,
) -> None:
    inputs = minilm_inputs()
    gm = fxopt.trace(minilm, mode="export")
    expected = gm(**inputs)["last_hidden_state"]
    before = param_states(gm)
    linears = count(gm, torch.ops.aten.linear.default)
    assert linears == 6 * 6 + 1

    every = QuantizeLinearsInt8()
    all_int8 = every(copy.deepcopy(gm))
    assert count(all_int8, PER_TOKEN) == linears
    # Per-token scales keep the real weights usable even with every Linear in int8.
    assert cosine(all_int8(**inputs)["last_hidden_state"], expected) > 0.98

    # With outlier channels set aside every Linear meets 0.999 here: a tighter bound needs a mix.
    t = QuantizeLinearsInt8.calibrated(gm, inputs, min_cosine=0.9995)
    assert 0 < len(t.keep) < linears
    assert t.outliers and not set(t.outliers) & set(t.keep)  # only int8 Linears have outliers
    quantized = t(copy.deepcopy(gm))
    assert count(quantized, PER_TOKEN) == linears - len(t.keep)
    assert count(quantized, torch.ops.aten.linear.default) == len(t.keep)
    with_outliers = [n for n in quantized.graph.nodes if n.target == PER_TOKEN and len(n.args) == 7]
    assert len(with_outliers) == len(t.outliers)
    report = fxopt.verify(gm, quantized, inputs)
    assert report.min_cosine is not None and report.min_cosine >= 0.9995

    restored = t(quantized, reverse=True)
    assert count(restored, PER_TOKEN) == 0
    assert torch.equal(restored(**inputs)["last_hidden_state"], expected)
    assert_same_parameters(restored, before, same_storage=False)


def test_without_int8_dot_products_calibration_and_result_are_those_of_int_mm(
    minilm: transformers.BertModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the CPU has AVX2 but neither VNNI nor AMX, the per-token Linears multiply with
    fxopt's own exact product instead of aten._int_mm: the same integers, so calibration keeps
    the same Linears and the graph computes the same bits."""
    if not fxopt._core.int8_matmul_available():
        pytest.skip("this CPU has no AVX2: fxopt's int8 product has only its plain loops here")
    inputs = minilm_inputs()
    gm = fxopt.trace(minilm, mode="export")
    with_int_mm = QuantizeLinearsInt8.calibrated(gm, inputs, min_cosine=0.9995)
    expected = with_int_mm(copy.deepcopy(gm))(**inputs)["last_hidden_state"]

    monkeypatch.setattr(hardware, "fast_int8_cpu", lambda: False)
    int_mm = counted_calls(monkeypatch, torch, "_int_mm")
    own = QuantizeLinearsInt8.calibrated(gm, inputs, min_cosine=0.9995)
    assert own.keep == with_int_mm.keep and own.outliers == with_int_mm.outliers
    quantized = own(copy.deepcopy(gm))
    assert count(quantized, PER_TOKEN) == count(gm, torch.ops.aten.linear.default) - len(own.keep) > 0
    assert torch.equal(quantized(**inputs)["last_hidden_state"], expected)
    assert not int_mm


def test_calibrated_on_real_text_meets_its_bound_on_held_out_text(minilm: transformers.BertModel) -> None:
    """Chosen on tokenized sentences, checked on sentences the calibration never saw."""
    from fxopt.cli.sentences import CALIBRATION, HELD_OUT, minilm_batch

    calibration = minilm_batch(CALIBRATION[:4], length=32)
    held_out = [minilm_batch(HELD_OUT[i : i + 4], length=32) for i in (0, 4)]
    gm = fxopt.trace(minilm, example_inputs=calibration)
    # Every Linear in int8 (outlier channels in float) meets 0.998 on this text: a bound
    # between that and 1 needs a mix.
    t = QuantizeLinearsInt8.calibrated(gm, calibration, min_cosine=0.9997, held_out=held_out)
    quantized = t(copy.deepcopy(gm))
    assert 0 < count(quantized, PER_TOKEN) < 6 * 6 + 1
    for inputs in (calibration, *held_out):
        report = fxopt.verify(gm, quantized, inputs)
        assert report.min_cosine is not None and report.min_cosine >= 0.9997
    restored = t(quantized, reverse=True)
    assert count(restored, PER_TOKEN) == 0
    assert torch.equal(restored(**held_out[0])["last_hidden_state"], gm(**held_out[0])["last_hidden_state"])


PACKED = fxopt.runtime.dynamic_int8.dynamic_int8_linear


@pytest.mark.parametrize("kernel", ["int8_onednn", "int8_fbgemm"])
@pytest.mark.parametrize("mode", ["symbolic", "export"])
def test_packed_kernels_run_int8_save_load_and_reverse_exactly(kernel: str, mode: str, tmp_path) -> None:
    engine = kernel.removeprefix("int8_")
    if not fxopt.runtime.dynamic_int8.available(engine):
        pytest.skip(f"this torch has no {engine} quantized engine")
    model = mlp()
    x = torch.randn(3, 5, 16)
    gm = fxopt.trace(model, example_inputs=(x,), mode=mode)
    ShapeProp(gm).propagate(x)
    code_before, before, expected = gm.code, param_states(gm), gm(x)
    t = QuantizeLinearsInt8()
    with fxopt.tuning.pinned(int8_linear=kernel):
        t(gm)
    assert len(t.report.changed) == 2 and {c.picked for c in t.report.choices} == {kernel}
    calls = gm.graph.find_nodes(op="call_function", target=PACKED)
    assert [n.args[-1] for n in calls] == [engine, engine]
    assert count(gm, PER_TOKEN) == 0 and count(gm, torch.ops.aten.linear.default) == 0
    actual = gm(x)
    assert actual.shape == expected.shape and not torch.equal(actual, expected)
    assert cosine(actual, expected) > 0.999
    assert torch.equal(copy.deepcopy(gm)(x), actual)
    fxopt.save(gm, tmp_path / "int8.fxopt")
    loaded = fxopt.load(tmp_path / "int8.fxopt")
    assert torch.equal(loaded(x), actual)  # packed anew from the saved int8 values

    for reversed_gm in (loaded, gm):
        t(reversed_gm, reverse=True)
        assert not reversed_gm.graph.find_nodes(op="call_function", target=PACKED)
        assert torch.equal(reversed_gm(x), expected)
    assert gm.code == code_before
    assert_same_parameters(gm, before, same_storage=True)


def test_packed_weights_follow_an_in_place_change_of_the_stored_values() -> None:
    """The packed copy is a cache of the graph's int8 tensors, never a second truth."""
    dynamic = fxopt.runtime.dynamic_int8
    engine = next((e for e in dynamic.ENGINES if dynamic.available(e)), None)
    if engine is None:
        pytest.skip("this torch has no quantized engine")
    weight, x = torch.randn(8, 16), torch.randn(4, 16)
    values, scales = fxopt.engine.tensor_ops.TorchTensorOps().quantize_rows_int8(weight)
    first = dynamic.dynamic_int8_linear(x, values, scales, None, engine)
    values.neg_()
    torch.testing.assert_close(dynamic.dynamic_int8_linear(x, values, scales, None, engine), -first)


def exact_dynamic_int8(x: torch.Tensor, values: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """quantized::linear_dynamic's arithmetic without overflow: x rounded to unsigned 8 bits with
    one scale and zero point over [min(x, 0), max(x, 0)], integer products summed in float64."""
    low, high = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    scale = (high - low) / 255
    zero = round(-low / scale)
    q = torch.clamp(torch.round(x.double() / scale) + zero, 0, 255) - zero
    return ((q @ values.double().t()) * scale * scales.double()).float()


@pytest.mark.parametrize("engine", ["onednn", "fbgemm"])
def test_packed_kernels_leave_outlier_channels_to_their_float_product(engine: str) -> None:
    """The channels named are quantized as zeros (the tensor's scale fits the others) and their
    float32 product with the outlier weight is added: the packed arithmetic on x with those
    channels zeroed, plus x[:, channels] @ outlier_weight; far closer to the float Linear."""
    if not fxopt.runtime.dynamic_int8.available(engine):
        pytest.skip(f"this torch has no {engine} quantized engine")
    torch.manual_seed(0)
    k, n, channels = 32, 12, [4, 19]
    weight = torch.randn(n, k)
    kept = torch.ones(k)
    kept[channels] = 0
    level = fxopt.runtime.dynamic_int8.weight_max(engine)
    scales = (weight * kept).abs().amax(1) / level
    values = (weight * kept / scales[:, None]).round().to(torch.int8)
    outlier_weight = weight[:, channels].t().contiguous()
    x = torch.randn(5, k)
    x[:, channels] *= 50
    y = PACKED(x, values, scales, None, engine, channels, outlier_weight)
    zeroed = x.clone()
    zeroed[:, channels] = 0
    expected = exact_dynamic_int8(zeroed, values, scales) + x[:, channels] @ outlier_weight
    torch.testing.assert_close(y, expected, rtol=1e-4, atol=1e-4)
    plain_scales = weight.abs().amax(1) / level
    plain = PACKED(x, (weight / plain_scales[:, None]).round().to(torch.int8), plain_scales, None, engine)
    exact = x @ weight.t()
    assert (y - exact).norm() < 0.25 * (plain - exact).norm()
    with pytest.raises(TypeError, match="2 outlier channels need a floating-point outlier_weight"):
        PACKED(x, values, scales, None, engine, channels)


@pytest.mark.parametrize("engine", ["fbgemm", "onednn"])
def test_packed_engines_without_vnni_get_weights_their_sums_hold(engine: str) -> None:
    """Both packed engines' AVX2 kernels add pairs of u8 x s8 products in 16 bits: 127-level
    weights saturate them on large activations, 63-level ones (the pass's choice there) stay
    exact with all 8 bits of activations; a graph quantized with 127 levels elsewhere falls back
    to 7-bit activations (torch's reduce_range) rather than saturate."""
    if not fxopt.runtime.dynamic_int8.available(engine):
        pytest.skip(f"this torch has no {engine} quantized engine")
    script = "import torch\n" + inspect.getsource(exact_dynamic_int8) + (
        "import torch, fxopt\n"
        "from fxopt.runtime import dynamic_int8\n"
        "from fxopt.optimization import QuantizeLinearsInt8\n"
        "from fxopt.engine.tensor_ops import TorchTensorOps\n"
        "from fxopt.optimization import hardware\n"
        "assert 'fbgemm capped at AVX2' in hardware.describe()  # what benchmark headers print\n"
        "assert dynamic_int8.weight_max('fbgemm') == 63 and dynamic_int8.weight_max('onednn') == 63\n"
        "options = QuantizeLinearsInt8().core_options()\n"
        "assert options['fbgemm_weight_max'] == 63 and options['onednn_weight_max'] == 63\n"
        "g = torch.Generator().manual_seed(0)\n"
        "x = torch.rand(16, 256, generator=g) * 4  # all positive: the pairs' sums peak\n"
        "weight = torch.randn(32, 256, generator=g)\n"
        f"run = lambda values, scales: dynamic_int8.dynamic_int8_linear(x, values, scales, None, {engine!r})\n"
        "values, scales = TorchTensorOps().quantize_rows_int8(weight, 63)\n"
        "assert int(values.abs().max()) == 63\n"
        "torch.testing.assert_close(run(values, scales), exact_dynamic_int8(x, values, scales), rtol=1e-5, atol=1e-4)\n"
        "values, scales = TorchTensorOps().quantize_rows_int8(weight)\n"
        f"assert dynamic_int8._pack(values, scales, None, {engine!r})[1]  # reduce_range for these\n"
        "error = (run(values, scales) - x @ weight.t()).norm() / (x @ weight.t()).norm()\n"
        "assert error < 0.02, error\n"
        "print('ok')\n"
    )
    run_capped_at_avx2(script)


def test_fast_with_calibration_keeps_its_bound_on_an_avx2_only_cpu() -> None:
    """The calibrated `fast` preset on the real MiniLM where fbgemm has no VNNI: its int8
    Linears get 63-level weights and 8-bit activations, calibrated to the preset's int8 bound
    (FAST_INT8_COSINE, though no bfloat16 lowering follows), and the declared 0.999 holds on
    held-out sentences."""
    script = (
        "import functools, torch, fxopt\n"
        "from fxopt.cli.models import _minilm\n"
        "from fxopt.cli.sentences import CALIBRATION, HELD_OUT, minilm_batch\n"
        "from fxopt.runtime import dynamic_int8\n"
        "from fxopt.optimization import presets\n"
        "spec = f'QuantizeLinearsInt8(calibrate=True, min_cosine={presets.FAST_INT8_COSINE}, compare_with=float32)'\n"
        "assert spec in presets.preset_passes('fast'), presets.preset_passes('fast')\n"
        "model = _minilm().eval()\n"
        "calibration = minilm_batch(CALIBRATION[:8], 32)\n"
        "held_out = [minilm_batch(HELD_OUT[i : i + 4], 32) for i in (0, 4)]\n"
        "with fxopt.tuning.pinned(int8_linear='int8_fbgemm'):\n"
        "    gm = fxopt.optimize(model, 'fast', example_inputs=calibration, calibration=calibration,\n"
        "                        held_out=held_out)\n"
        "calls = gm.graph.find_nodes(op='call_function', target=dynamic_int8.dynamic_int8_linear)\n"
        "assert 0 < len(calls) < 37 and {c.args[4] for c in calls} == {'fbgemm'}, len(calls)\n"
        "assert any(len(c.args) == 7 for c in calls)  # some with outlier channels\n"
        "stored = [functools.reduce(getattr, c.args[1].target.split('.'), gm) for c in calls]\n"
        "assert max(int(v.abs().max()) for v in stored) == 63\n"
        "for inputs in (calibration, *held_out):\n"
        "    report = fxopt.verify(model, gm, inputs)\n"
        "    assert report.min_cosine is not None and report.min_cosine >= 0.999, report.min_cosine\n"
        "print('ok')\n"
    )
    run_capped_at_avx2(script)


def test_fast_with_calibration_on_an_avx2_only_cpu_runs_fxopts_exact_product() -> None:
    """Capped at AVX2 (no VNNI) the calibrated `fast` preset's per-token int8 Linears quantize,
    multiply (fxopt's product: aten._int_mm has no exact fast kernel there) and dequantize in
    AVX2, and meet the preset's bound on held-out sentences."""
    script = (
        "import torch, fxopt\n"
        "from fxopt.cli.models import _minilm\n"
        "from fxopt.cli.sentences import CALIBRATION, HELD_OUT, minilm_batch\n"
        "from fxopt.runtime import per_token_int8\n"
        "from fxopt.optimization import hardware\n"
        "assert not hardware.fast_int8_cpu() and per_token_int8.available()\n"
        "model = _minilm().eval()\n"
        "calibration = minilm_batch(CALIBRATION[:8], 32)\n"
        "held_out = [minilm_batch(HELD_OUT[i : i + 4], 32) for i in (0, 4)]\n"
        "gm = fxopt.optimize(model, 'fast', example_inputs=calibration, calibration=calibration, held_out=held_out)\n"
        "calls = gm.graph.find_nodes(op='call_function', target=per_token_int8.per_token_int8_linear)\n"
        "assert len(calls) > 0\n"
        "torch._int_mm = None  # any call would fail\n"
        "for inputs in (calibration, *held_out):\n"
        "    report = fxopt.verify(model, gm, inputs)\n"
        "    assert report.min_cosine is not None and report.min_cosine >= 0.999, report.min_cosine\n"
        "print('ok')\n"
    )
    run_capped_at_avx2(script)


def test_fbgemm_weight_levels_follow_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    dynamic = fxopt.runtime.dynamic_int8
    monkeypatch.delenv("FBGEMM_ENABLE_INSTRUCTIONS", raising=False)
    monkeypatch.setattr(hardware, "cpu_flags", lambda: ["avx2", "avx512_f", "avx512_vnni"])
    assert dynamic.weight_max("fbgemm") == 127
    monkeypatch.setenv("FBGEMM_ENABLE_INSTRUCTIONS", "avx512")  # fbgemm's own cap, no VNNI
    assert dynamic.weight_max("fbgemm") == 63
    monkeypatch.delenv("FBGEMM_ENABLE_INSTRUCTIONS")
    # fbgemm has VNNI kernels for AVX-512 only: AVX-VNNI and AMX leave it on vpmaddubsw.
    monkeypatch.setattr(hardware, "cpu_flags", lambda: ["avx2", "avx_vnni", "amx_int8"])
    assert dynamic.weight_max("fbgemm") == 63 and dynamic.weight_max("onednn") == 127
    weight, x = torch.randn(8, 16), torch.randn(4, 16)
    values, scales = fxopt.engine.tensor_ops.TorchTensorOps().quantize_rows_int8(weight, 63)
    assert int(values.abs().max()) == 63
    torch.testing.assert_close(values.float() * scales[:, None], weight, rtol=0, atol=float(scales.max()) / 2 + 1e-7)
    if dynamic.available("fbgemm"):  # these run exactly on any CPU: no fallback needed
        assert dynamic._pack(values, scales, None, "fbgemm")[1] is False
        torch.testing.assert_close(
            dynamic.dynamic_int8_linear(x, values, scales, None, "fbgemm"), exact_dynamic_int8(x, values, scales),
            rtol=1e-5, atol=1e-5,
        )


def test_calibration_runs_the_kernel_each_linear_gets(minilm: transformers.BertModel) -> None:
    """Each kernel's own error decides what stays float (per token and per tensor keep different
    sets), and the bound holds on held-out text for both."""
    from fxopt.cli.sentences import CALIBRATION, HELD_OUT, minilm_batch

    if not fxopt.runtime.dynamic_int8.available("onednn"):
        pytest.skip("this torch has no oneDNN quantized engine")
    calibration = minilm_batch(CALIBRATION[:4], length=32)
    held_out = [minilm_batch(HELD_OUT[i : i + 4], length=32) for i in (0, 4)]
    gm = fxopt.trace(minilm, example_inputs=calibration)
    kept: dict[str, tuple[str, ...]] = {}
    for kernel in ("int8_per_token", "int8_onednn"):
        with fxopt.tuning.pinned(int8_linear=kernel):
            t = QuantizeLinearsInt8.calibrated(gm, calibration, min_cosine=0.9997, held_out=held_out)
            quantized = t(copy.deepcopy(gm))
        assert {c.picked for c in t.report.choices} == {kernel}
        kept[kernel] = t.keep
        assert 0 < len(t.keep) < 6 * 6 + 1
        # Both kernels set the outlier channels aside (the packed one when pinned to it).
        assert t.outliers
        named = [n for n in quantized.graph.nodes if n.target in (PER_TOKEN, PACKED) and len(n.args) == 7]
        assert len(named) == len(t.outliers)
        for inputs in (calibration, *held_out):
            report = fxopt.verify(gm, quantized, inputs)
            assert report.min_cosine is not None and report.min_cosine >= 0.9997
    assert set(kept["int8_onednn"]) != set(kept["int8_per_token"])


class _TwoLinears(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(32, 16)
        self.second = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))


def test_outlier_channels_are_the_few_far_above_the_median() -> None:
    """Channels whose calibrated range is over 4x the median channel's, the 8 largest at most,
    ascending; a Linear without such channels (or not asked about) gets none."""
    from fxopt.optimization.int8_calibration import MOST_OUTLIERS, outlier_channels

    torch.manual_seed(0)
    gm = torch.fx.symbolic_trace(_TwoLinears())
    x = torch.rand(64, 32) * 2 - 1
    x[:, [20, 5]] *= 30
    assert outlier_channels(gm, {"x": x}, ["first", "second"]).get("first") == [5, 20]
    assert outlier_channels(gm, {"x": x}, ["second"]).get("first") is None
    assert outlier_channels(gm, {"x": torch.rand(64, 32) * 2 - 1}, ["first"]) == {}
    many = torch.rand(64, 32) * 2 - 1
    many[:, :12] *= torch.arange(10.0, 22.0)  # 12 outliers, the largest last
    assert outlier_channels(gm, {"x": many}, ["first"])["first"] == list(range(12 - MOST_OUTLIERS, 12))


def test_calibration_tries_every_linear_in_int8_first() -> None:
    """Where every Linear in int8 meets the bound, two runs answer (the reference and that mix)
    and no sensitivity is measured; a bound it misses orders the Linears and bisects."""
    from fxopt.optimization.int8_calibration import Calibration, fewest_kept, linear_stand_in

    torch.manual_seed(0)
    gm = torch.fx.symbolic_trace(_TwoLinears())
    inputs = {"x": torch.randn(16, 32)}
    kernels = {"first": "int8_per_token", "second": "int8_per_token"}
    loose = Calibration(gm, kernels, linear_stand_in(kernels), inputs)
    assert fewest_kept(loose, 0.99) == [] and loose.runs == 2
    assert loose._sensitivity is None
    tight = Calibration(gm, kernels, linear_stand_in(kernels), inputs)
    kept = fewest_kept(tight, 1.0)
    assert kept == tight.by_sensitivity() and tight.runs > 3  # nothing in int8 is exact


def test_a_linear_calibration_leaves_float_stays_float(measuring, monkeypatch) -> None:
    """Calibration asks each Linear's kernel with its outlier channels; one whose answer there is
    float stays float, though the pass, asked without those channels (only int8 Linears keep
    theirs), would pick a packed int8 kernel no calibration checked."""
    from fxopt.optimization.passes import _outliers_per_token_only

    if not _outliers_per_token_only():
        pytest.skip("only where a Linear with outlier channels is offered the per-token kernel alone (VNNI/AMX)")
    fake_timings(monkeypatch, {"float32": 1.0, "bfloat16": 1.0, "int8_per_token": 2.0, "int8_onednn": 0.6, "int8_fbgemm": 0.5})
    torch.manual_seed(0)
    gm = torch.fx.symbolic_trace(_TwoLinears())
    x = torch.rand(64, 32) * 2 - 1
    x[:, 7] *= 30  # an outlier channel of the first Linear's input
    ShapeProp(gm).propagate(x)  # the sizes the chooser times
    t = QuantizeLinearsInt8(calibrate=True, min_cosine=0.99)
    t.calibrate_on({"x": x})
    out = t(copy.deepcopy(gm))
    assert "first" in t.keep and "first" not in t.outliers
    first = [n for n in out.graph.nodes if n.op == "call_module" and n.target == "first"]
    assert first, "the first Linear stays the float module"
    assert fxopt.verify(gm, out, {"x": x}).min_cosine >= 0.99
