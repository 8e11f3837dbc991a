"""fxopt.runtime.per_token_int8: the per-token int8 Linear QuantizeLinearsInt8 emits, and how a
bfloat16 lowering leaves it in the activations' dtype."""

from __future__ import annotations

import copy
import operator

import pytest
import torch
import torch.nn as nn

import fxopt
from conftest import counted_calls
from fxopt import _core
from fxopt.optimization import ChangePrecision, QuantizeLinearsInt8, hardware
from fxopt.runtime.per_token_int8 import per_token_int8_linear


def int8_weight(n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Values [k, n] and per-output-channel scales, as the pass stores them for this kernel."""
    weight = torch.randn(n, k)
    scales = weight.abs().amax(1) / 127
    return (weight / scales[:, None]).round().to(torch.int8).t().contiguous(), scales


def aten_per_token(x: torch.Tensor, values: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The same arithmetic in ATen ops, in float32: what the kernel's float32 result must equal."""
    flat = x.float().reshape(-1, x.shape[-1])
    token_scales = (flat.abs().amax(-1, keepdim=True) / 127).clamp_min(torch.finfo(torch.float32).tiny)
    q = (flat / token_scales).round().to(torch.int8)
    # The exact integer product in int64 (aten._int_mm, where oneDNN is capped at AVX2, sums pairs in
    # saturating 16-bit lanes).
    y = (q.long() @ values.long()).int() * token_scales * scales
    y = y if bias is None else y + bias
    return y.reshape(*x.shape[:-1], values.shape[1])


@pytest.mark.parametrize("shape", [(2, 5, 48), (1, 37), (17, 384), (0, 3, 48)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_matches_the_aten_arithmetic_bit_for_bit(shape: tuple[int, ...], with_bias: bool) -> None:
    torch.manual_seed(0)
    values, scales = int8_weight(24, shape[-1])
    bias = torch.randn(24) if with_bias else None
    x = torch.randn(*shape) * 3
    x[..., 0] = 40.0 if x.numel() else 0  # an outlier channel: per-token scales differ by row
    expected = aten_per_token(x, values, scales, bias)
    assert torch.equal(per_token_int8_linear(x, values, scales, bias), expected)
    # bfloat16 activations: quantized from their values, the float32 result rounded once.
    low = x.bfloat16()
    y = per_token_int8_linear(low, values, scales, bias)
    assert y.dtype == torch.bfloat16
    assert torch.equal(y, aten_per_token(low, values, scales, bias).bfloat16())
    # Other float dtypes run through float32 and come back in their own.
    half = per_token_int8_linear(x.double(), values, scales, bias)
    assert half.dtype == torch.float64 and torch.equal(half, expected.double())


@pytest.mark.parametrize(
    ("name", "function"),
    [
        ("relu", torch.relu),
        ("gelu", torch.nn.functional.gelu),
        ("gelu_tanh", lambda y: torch.nn.functional.gelu(y, approximate="tanh")),
        ("silu", torch.nn.functional.silu),
    ],
)
def test_applies_the_activation_to_its_float32_result(name: str, function: object) -> None:
    torch.manual_seed(0)
    values, scales = int8_weight(40, 64)
    bias = torch.randn(40)
    x = torch.randn(3, 7, 64)
    linear = aten_per_token(x, values, scales, bias)
    expected = function(linear)  # type: ignore[operator]
    torch.testing.assert_close(per_token_int8_linear(x, values, scales, bias, name), expected, rtol=1e-6, atol=1e-6)
    low = per_token_int8_linear(x.bfloat16(), values, scales, bias, name)
    torch.testing.assert_close(low, function(aten_per_token(x.bfloat16(), values, scales, bias)).bfloat16())  # type: ignore[operator]
    with pytest.raises(ValueError, match="no activation 'mish'"):
        per_token_int8_linear(x, values, scales, bias, "mish")


def test_reads_strided_inputs_and_a_lowered_bias() -> None:
    values, scales = int8_weight(8, 16)
    x = torch.randn(16, 6).t()  # not contiguous
    bias = torch.randn(8)
    expected = aten_per_token(x.contiguous(), values, scales, bias.bfloat16().float())
    assert torch.equal(per_token_int8_linear(x, values, scales, bias.bfloat16()), expected)


def test_without_int8_dot_products_fxopt_multiplies_exactly_packing_each_weight_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a CPU with AVX2 but no VNNI or AMX (a Zen 3) the product is fxopt's exact AVX2 kernel on
    a weight packed at the first call, never aten._int_mm (no fast kernel there; capped at AVX2,
    oneDNN's saturates); an in-place update of the int8 weight is seen."""
    if not _core.int8_matmul_available():
        pytest.skip("this CPU has no AVX2: fxopt's int8 product has only its plain loops here")
    monkeypatch.setattr(hardware, "fast_int8_cpu", lambda: False)
    monkeypatch.setattr(torch, "_int_mm", None)  # any call would fail
    packs = counted_calls(monkeypatch, _core, "pack_int8_matmul_weight")
    torch.manual_seed(0)
    values, scales = int8_weight(40, 72)  # a partial 16-column block
    values[0, :] = -128  # a full-range column sum: saturating 16-bit pair sums would clip it
    x = torch.randn(2, 9, 72) * 3
    x[..., 0] = -50.0
    for _ in range(2):
        assert torch.equal(per_token_int8_linear(x, values, scales), aten_per_token(x, values, scales, None))
    assert len(packs) == 1
    values.neg_()
    values.clamp_(-127, 127)
    assert torch.equal(per_token_int8_linear(x, values, scales), aten_per_token(x, values, scales, None))
    assert len(packs) == 2


def test_bad_operands_say_what_is_wrong() -> None:
    values, scales = int8_weight(8, 16)
    with pytest.raises(ValueError, match="does not end in 16"):
        per_token_int8_linear(torch.randn(3, 12), values, scales)
    with pytest.raises(TypeError, match="int8 values"):
        per_token_int8_linear(torch.randn(3, 16), values.float(), scales)
    with pytest.raises(TypeError, match="float32 scales"):
        per_token_int8_linear(torch.randn(3, 16), values, scales.double())


@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_outlier_channels_are_left_to_their_float32_product(activation: str) -> None:
    """The channels named are quantized as zeros and their product with the float weight is
    added before the activation: the ATen arithmetic on x with those channels zeroed, plus
    x[:, channels] @ outlier_weight."""
    torch.manual_seed(0)
    k, n, channels = 48, 40, [3, 17, 30]
    weight = torch.randn(n, k)
    kept = torch.ones(k)
    kept[channels] = 0
    scales = (weight * kept).abs().amax(1) / 127
    values = (weight * kept / scales[:, None]).round().to(torch.int8).t().contiguous()
    outlier_weight = weight[:, channels].t().contiguous()
    bias = torch.randn(n)
    x = torch.randn(2, 9, k)
    x[..., channels] *= 60  # outliers: with them in the product every row's scale is theirs

    def expected(x: torch.Tensor) -> torch.Tensor:
        zeroed = x.float().clone()
        zeroed[..., channels] = 0
        y = aten_per_token(zeroed, values, scales, bias) + x.float()[..., channels] @ outlier_weight
        return torch.nn.functional.gelu(y) if activation == "gelu" else y

    y = per_token_int8_linear(x, values, scales, bias, activation, channels, outlier_weight)
    torch.testing.assert_close(y, expected(x), rtol=1e-5, atol=1e-5)
    low = per_token_int8_linear(x.bfloat16(), values, scales, bias, activation, channels, outlier_weight)
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low, expected(x.bfloat16()).bfloat16())
    # A lowering may leave the outlier weight in bfloat16 (and strided): it is read as float32.
    lowered_weight = outlier_weight.bfloat16().t().contiguous().t()
    assert not lowered_weight.is_contiguous()
    torch.testing.assert_close(
        per_token_int8_linear(x, values, scales, bias, activation, channels, lowered_weight),
        per_token_int8_linear(x, values, scales, bias, activation, channels, lowered_weight.float().contiguous()),
        rtol=0, atol=0,
    )
    # What it is for: the error against the float Linear is a fraction of the plain kernel's.
    exact = torch.nn.functional.linear(x, weight, bias)
    exact = torch.nn.functional.gelu(exact) if activation == "gelu" else exact
    plain_scales = weight.abs().amax(1) / 127
    plain_values = (weight / plain_scales[:, None]).round().to(torch.int8).t().contiguous()
    plain = per_token_int8_linear(x, plain_values, plain_scales, bias, activation)
    assert (y - exact).norm() < 0.2 * (plain - exact).norm()


def test_outlier_operands_are_checked() -> None:
    values, scales = int8_weight(8, 16)
    x = torch.randn(3, 16)
    with pytest.raises(TypeError, match=r"2 outlier channels need a floating-point outlier_weight \[2, 8\]"):
        per_token_int8_linear(x, values, scales, None, "none", [1, 2])
    with pytest.raises(TypeError, match="outlier_weight"):
        per_token_int8_linear(x, values, scales, None, "none", [1, 2], torch.randn(2, 7))
    with pytest.raises(ValueError, match=r"channel 16 is not in \[0, 16\)"):
        per_token_int8_linear(x, values, scales, None, "none", [16], torch.randn(1, 8))


class Block(nn.Module):
    """Two Linears around a GELU and a residual add, batch-first [b, t, 64]."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(64, 128)
        self.down = nn.Linear(128, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


@pytest.mark.skipif(not hardware.bfloat16_native(torch.device("cpu")), reason="the lowering needs native bfloat16 here")
def test_a_bfloat16_lowering_leaves_the_int8_linears_in_bfloat16_without_casts() -> None:
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(2, 9, 64)
    gm = fxopt.trace(model, example_inputs=(x,), mode="dynamo")  # dtypes: a whole-graph lowering
    expected = gm(x)
    with fxopt.tuning.pinned(int8_linear="int8_per_token"):
        int8 = QuantizeLinearsInt8()
        quantized = int8(copy.deepcopy(gm))
    lowering = ChangePrecision(dtype=torch.bfloat16)
    lowered = lowering(quantized)
    calls = [n for n in lowered.graph.nodes if n.target is per_token_int8_linear]
    assert len(calls) == 2
    assert calls[0].args[4:] == ("gelu",)  # the GELU reading only the first is applied by it
    assert not [n for n in lowered.graph.nodes if "gelu" in str(n.target)]
    casts = [n for n in lowered.graph.nodes if n.op == "call_method" and n.target == "to"]
    casts += [n for n in lowered.graph.nodes if n.target in (torch.ops.aten._to_copy.default,)]
    # The input's cast in and the output's cast back, nothing around the int8 Linears.
    assert len(casts) == 2, lowered.code
    # Their scales and biases stay float32; the result is bfloat16 arithmetic of int8 Linears.
    for call in calls:
        for operand in call.args[2:4]:
            assert operator.attrgetter(operand.target)(lowered).dtype == torch.float32
    y = lowered(x)
    assert y.dtype == torch.float32
    cosine = torch.nn.functional.cosine_similarity(y.flatten(), expected.flatten(), dim=0).item()
    assert 0.99 < cosine < 1.0
    restored = int8(lowering(lowered, reverse=True), reverse=True)
    assert torch.equal(restored(x), expected)


@pytest.mark.skipif(not hardware.bfloat16_native(torch.device("cpu")), reason="the lowering needs native bfloat16 here")
def test_an_int8_linear_that_is_an_output_computes_it_in_float32() -> None:
    """GPT-2's logits: no lowering of the widest tensor only to cast it back at the output."""
    torch.manual_seed(0)
    model = nn.Sequential(Block(), nn.Linear(64, 200)).eval()
    x = torch.randn(2, 9, 64)
    gm = fxopt.trace(model, example_inputs=(x,), mode="dynamo")
    expected = gm(x)
    with fxopt.tuning.pinned(int8_linear="int8_per_token"):
        int8 = QuantizeLinearsInt8()
        lowered = ChangePrecision(dtype=torch.bfloat16)(int8(copy.deepcopy(gm)))
    head = [n for n in lowered.graph.nodes if n.target is per_token_int8_linear][-1]
    assert head.args[0].op == "call_method" and head.args[0].args[1:] == (torch.float32,)
    assert [u.op for u in head.users] == ["output"]  # read as it is: no cast back
    y = lowered(x)
    assert y.dtype == torch.float32
    cosine = torch.nn.functional.cosine_similarity(y.flatten(), expected.flatten(), dim=0).item()
    assert 0.99 < cosine < 1.0
