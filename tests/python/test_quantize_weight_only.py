"""QuantizeLinearsWeightOnly: int8 / int4 weights through ATen's CPU kernels, in both dialects;
one symbolic graph serves other sequence lengths; reverse gives the float graph back exactly."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.fx.passes.shape_prop import ShapeProp

import fxopt
from fxopt.optimization import QuantizeLinearsWeightOnly


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(64, 32)
        self.down = torch.nn.Linear(32, 48, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


@pytest.mark.parametrize("mode", ["symbolic", "export"])
@pytest.mark.parametrize("bits, min_cosine", [(8, 0.9999), (4, 0.99)])
@pytest.mark.parametrize("activation", [torch.float32, torch.bfloat16])
def test_quantizes_every_linear_and_reverses_exactly(
    mode: str, bits: int, min_cosine: float, activation: torch.dtype
) -> None:
    torch.manual_seed(0)
    model, x = Mlp().eval(), torch.randn(2, 5, 64)
    gm = fxopt.trace(model, example_inputs=(x,), mode=mode)  # type: ignore[arg-type]
    if mode == "symbolic":
        ShapeProp(gm).propagate(x)  # the pass needs the inputs' rank
    transformation = QuantizeLinearsWeightOnly(activation, bits=bits)
    # ATen's kernels pinned: the static choice with float32 activations is fxopt's own.
    with fxopt.tuning.pinned(int8_weight_only="int8_weight_only", int4_weight_only="int4_weight_only"):
        quantized = transformation(copy.deepcopy(gm))
    assert transformation.report is not None and len(transformation.report.changed) == 2
    product = "_weight_int8pack_mm" if bits == 8 else "_weight_int4pack_mm_for_cpu"
    assert product in quantized.code
    assert fxopt.verify(model, quantized, (x,)).min_cosine >= min_cosine
    if mode == "symbolic":  # sizes are read on each call: another length runs the same graph
        other = torch.randn(3, 7, 64)
        assert fxopt.verify(model, quantized, (other,)).min_cosine >= min_cosine
    restored = transformation(quantized, reverse=True)
    assert restored.code == gm.code
    assert torch.equal(restored(x), model(x))


@pytest.mark.parametrize("mode", ["symbolic", "export"])
def test_fxopts_int8_kernel_matches_atens_and_reverses_exactly(mode: str, tmp_path) -> None:
    """The candidate the chooser picks at a decoding step on AVX-512 CPUs, pinned here: float32
    activations into fxopt's kernel (kernels/int8_weight_mm.h); the same int8 weights as ATen's
    kernel, so the results agree to float32 rounding; saved and loaded like any graph."""
    torch.manual_seed(0)
    model, x = Mlp().eval(), torch.randn(1, 3, 64)
    gm = fxopt.trace(model, example_inputs=(x,), mode=mode)  # type: ignore[arg-type]
    if mode == "symbolic":
        ShapeProp(gm).propagate(x)
    with fxopt.tuning.pinned(int8_weight_only="int8_weight_only"):
        atens = QuantizeLinearsWeightOnly(torch.float32)(copy.deepcopy(gm))
    assert "_weight_int8pack_mm" in atens.code
    with fxopt.tuning.pinned(int8_weight_only="fxopt_int8"):
        transformation = QuantizeLinearsWeightOnly(torch.bfloat16)
        own = transformation(copy.deepcopy(gm))
    assert "int8_weight_linear" in own.code and "_weight_int8pack_mm" not in own.code and "_to_copy" not in own.code
    torch.testing.assert_close(own(x), atens(x), rtol=1e-5, atol=1e-5)
    if mode == "symbolic":
        other = torch.randn(2, 5, 64)
        torch.testing.assert_close(own(other), atens(other), rtol=1e-5, atol=1e-5)
    fxopt.save(own, tmp_path / "own.fxopt")
    torch.testing.assert_close(fxopt.load(tmp_path / "own.fxopt")(x), own(x), rtol=0, atol=0)
    restored = transformation(own, reverse=True)
    assert restored.code == gm.code
    assert torch.equal(restored(x), model(x))


@pytest.mark.parametrize("mode", ["symbolic", "export"])
def test_fxopts_int4_kernel_matches_the_dequantized_weight_and_reverses_exactly(mode: str, tmp_path) -> None:
    """fxopt's int4 candidate, pinned: its output is the Linear of the dequantized weight
    (q * scale + min per group, float16 parameters) and of each row of x rounded to int8 (the
    kernel's definition, kernels/int4_weight_mm.h) to float32 rounding, at every rank and thread
    count; saved and loaded like any graph; reverse gives the float graph and its outputs back
    bit-exact."""
    torch.manual_seed(0)
    model, x = Mlp().eval(), torch.randn(1, 3, 64)
    gm = fxopt.trace(model, example_inputs=(x,), mode=mode)  # type: ignore[arg-type]
    if mode == "symbolic":
        ShapeProp(gm).propagate(x)
    with fxopt.tuning.pinned(int4_weight_only="fxopt_int4"):
        transformation = QuantizeLinearsWeightOnly(bits=4)
        own = transformation(copy.deepcopy(gm))
    assert own.code.count("int4_weight_linear(") == 2 and "_weight_int4pack" not in own.code
    assert fxopt.verify(model, own, (x,)).min_cosine >= 0.99
    from fxopt.engine.tensor_ops import TorchTensorOps

    def by_definition(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        n, k = weight.shape
        groups = weight.reshape(n, k // 32, 32)
        low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
        scale = ((high - low) / 15).clamp_min(1e-6).half().float()
        low = low.half().float()
        q = torch.round((groups - low) / scale).clamp(0, 15)
        rows = x.reshape(-1, k)
        largest = rows.abs().amax(-1, keepdim=True)
        rounded = torch.round(rows * (127 / largest)).double() * (largest.double() / 127)
        scaled = (q * scale).reshape(n, k).double()
        minimums = low.expand(n, k // 32, 32).reshape(n, k).double()
        y = rounded @ scaled.t() + rows.double() @ minimums.t()
        return y.float().reshape(*x.shape[:-1], n)

    packed, params = TorchTensorOps().quantize_groups_int4(model.up.weight, 32, "fxopt")
    assert params.dtype == torch.float16
    from fxopt.runtime.int4_weight_linear import int4_weight_linear

    expected = by_definition(x, model.up.weight)
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            torch.testing.assert_close(int4_weight_linear(x, packed, params), expected, rtol=1e-5, atol=1e-5)
    finally:
        torch.set_num_threads(threads)
    fxopt.save(own, tmp_path / "own.fxopt")
    torch.testing.assert_close(fxopt.load(tmp_path / "own.fxopt")(x), own(x), rtol=0, atol=0)
    restored = transformation(own, reverse=True)
    assert restored.code == gm.code
    assert torch.equal(restored(x), model(x))


def test_fxopts_kernels_split_rows_over_threads_with_the_same_results() -> None:
    """torch's thread count reaches the kernels (kernels/row_split.h): each output channel is
    computed by one thread in the same order, so 1 and 2 threads give identical bits."""
    from fxopt.engine.tensor_ops import TorchTensorOps
    from fxopt.runtime.int4_weight_linear import int4_weight_linear
    from fxopt.runtime.int8_weight_linear import int8_weight_linear

    torch.manual_seed(0)
    # 8198 rows: blocks of 4 and a tail; 4.2 MB of int8, 2.6 MB of int4: parts for both threads
    weight, x = torch.randn(8198, 512), torch.randn(2, 512)
    int8 = TorchTensorOps().quantize_rows_int8(weight)
    int4 = TorchTensorOps().quantize_groups_int4(weight, 64, "fxopt")
    threads = torch.get_num_threads()
    try:
        results = []
        for count in (1, 2):
            torch.set_num_threads(count)
            results.append((int8_weight_linear(x, *int8), int4_weight_linear(x, *int4)))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


@pytest.mark.parametrize("max_level", [127, 63])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rows_quantize_to_their_definition_in_blocks(max_level: int, dtype: torch.dtype) -> None:
    """quantize_rows_int8 gives what the whole-weight formula gives, a zero row included: through
    fxopt's kernel (float32 on the CPU, a transposed weight too) and through ATen's ops a few
    rows at a time (any other dtype or device: blocks and a partial last one)."""
    from fxopt.engine import tensor_ops

    weight = (torch.randn(96, tensor_ops._QUANTIZE_BLOCK // 96 * 3 + 5) * 3).t().to(dtype)
    weight[7] = 0
    values, scales = tensor_ops.TorchTensorOps().quantize_rows_int8(weight, max_level)
    expected_scales = (weight.abs().amax(1) / max_level).clamp_min(torch.finfo(torch.float32).tiny).float()
    assert torch.equal(scales, expected_scales)
    assert torch.equal(values, torch.round(weight / expected_scales[:, None]).to(torch.int8))
    assert int(values.abs().amax()) == max_level and not values[7].any()
    assert values.is_contiguous()


def test_fxopts_int4_kernel_refuses_what_it_cannot_read() -> None:
    from fxopt.runtime.int4_weight_linear import int4_weight_linear

    packed, params = torch.zeros(4, 32, dtype=torch.uint8), torch.zeros(4, 2, 2, dtype=torch.float16)
    with pytest.raises(ValueError):
        int4_weight_linear(torch.ones(2, 63), packed, params)  # k differs
    with pytest.raises(TypeError):
        int4_weight_linear(torch.ones(2, 64), packed, params.float())  # float16 parameters only
    with pytest.raises(ValueError):
        int4_weight_linear(torch.ones(2, 64), packed, torch.zeros(4, 2, 3, dtype=torch.float16))  # groups of 64 / 3
    with pytest.raises(TypeError):
        int4_weight_linear(torch.ones(2, 64, dtype=torch.int32), packed, params)  # float activations only


def test_fxopts_int8_kernel_refuses_what_it_cannot_read() -> None:
    from fxopt.runtime.int8_weight_linear import int8_weight_linear

    weight, scales = torch.ones(4, 8, dtype=torch.int8), torch.ones(4)
    torch.testing.assert_close(int8_weight_linear(torch.ones(3, 2, 8), weight, scales), torch.full((3, 2, 4), 8.0))
    with pytest.raises(ValueError):
        int8_weight_linear(torch.ones(2, 7), weight, scales)  # k differs
    with pytest.raises(TypeError):
        int8_weight_linear(torch.ones(2, 8), weight.float(), scales)
    with pytest.raises(ValueError):
        int8_weight_linear(torch.ones(2, 8), weight.t().contiguous().t(), scales)
    with pytest.raises(TypeError):
        int8_weight_linear(torch.ones(2, 8, dtype=torch.int32), weight, scales)  # float activations only


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fxopts_weight_only_kernels_return_narrow_activations_dtype(dtype: torch.dtype) -> None:
    """In a graph lowered after QuantizeLinearsWeightOnly (ChangePrecision), the kernels get
    bfloat16 or float16 activations: computed in float32 as the widened values, returned in
    the activations' dtype (the scales stay float32, the int4 parameters float16)."""
    from fxopt.engine.tensor_ops import TorchTensorOps
    from fxopt.runtime.int4_weight_linear import int4_weight_linear
    from fxopt.runtime.int8_weight_linear import int8_weight_linear

    torch.manual_seed(0)
    x, w = torch.randn(3, 64).to(dtype), torch.randn(16, 64)
    values, scales = TorchTensorOps().quantize_rows_int8(w)
    packed, params = TorchTensorOps().quantize_groups_int4(w, 32, "fxopt")
    for y, wide in (
        (int8_weight_linear(x, values, scales), int8_weight_linear(x.float(), values, scales)),
        (int4_weight_linear(x, packed, params), int4_weight_linear(x.float(), packed, params)),
    ):
        assert y.dtype == dtype
        assert torch.equal(y, wide.to(dtype))


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="bits=8 or bits=4"):
        QuantizeLinearsWeightOnly(bits=2)
    with pytest.raises(ValueError, match="activations"):
        QuantizeLinearsWeightOnly(torch.float16)
