"""fxopt's float GEMM as a Linear (runtime/packed_linear.py): what it computes, where it falls
back to ATen, and FuseLinearActivationOneDnn emitting it where it is picked."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import fxopt
from fxopt import _core, tuning
from fxopt.optimization import FuseLinearActivationOneDnn
from fxopt.runtime.packed_linear import packed_linear
from linear_models import assert_same_parameters, param_states

needs_avx2 = pytest.mark.skipif(
    not _core.pointwise_conv_vectorized(False), reason="fxopt's float32 GEMM runs only as ATen's linear without AVX2"
)


def _reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, lower, upper) -> torch.Tensor:  # type: ignore[no-untyped-def]
    y = F.linear(x.double(), weight.double(), None if bias is None else bias.double())
    return y if lower is None and upper is None else y.clamp(lower, upper)


@needs_avx2
@pytest.mark.parametrize(
    "shape, bias, bounds",
    [((2, 7, 64), True, (None, None)), ((64,), True, (0.0, None)), ((5, 3, 64), False, (0.0, 6.0)), ((0, 64), True, (None, None))],
    ids=["3-D", "1-D relu", "no-bias relu6", "no rows"],
)
def test_the_kernel_computes_the_clamped_linear(shape: tuple[int, ...], bias: bool, bounds: tuple) -> None:  # type: ignore[type-arg]
    torch.manual_seed(0)
    x, weight = torch.randn(shape), torch.randn(100, 64) / 8  # 100: a partial last block of 32
    b = torch.randn(100) if bias else None
    y = packed_linear(x, weight, b, *bounds)
    assert y.shape == (*shape[:-1], 100) and y.dtype == torch.float32 and y.is_contiguous()
    torch.testing.assert_close(y.double(), _reference(x, weight, b, *bounds), rtol=1e-5, atol=1e-5)


@needs_avx2
def test_threads_and_layouts_give_the_same_bits() -> None:
    """One thread and two (by tokens at 384 x 384, by output features at 64 -> 1536), a
    transposed input read as the contiguous one."""
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    try:
        for tokens, in_features, out_features in ((384, 384, 384), (64, 256, 1536)):
            x, weight, bias = torch.randn(in_features, tokens).t(), torch.randn(out_features, in_features), torch.randn(out_features)
            torch.set_num_threads(1)
            one = packed_linear(x, weight, bias, None, None)
            torch.set_num_threads(2)
            assert torch.equal(packed_linear(x, weight, bias, None, None), one)
            assert torch.equal(packed_linear(x.contiguous(), weight, bias, None, None), one)
    finally:
        torch.set_num_threads(threads)


@needs_avx2
def test_the_packed_weight_follows_in_place_updates() -> None:
    torch.manual_seed(0)
    x, weight, bias = torch.randn(4, 32), torch.randn(48, 32), torch.randn(48)
    before = packed_linear(x, weight, bias, None, None)
    with torch.no_grad():
        weight.mul_(2)
        bias.add_(1)
    torch.testing.assert_close(packed_linear(x, weight, bias, None, None), F.linear(x, weight, bias))
    assert not torch.allclose(packed_linear(x, weight, bias, None, None), before)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=["float64", "bfloat16"])
def test_calls_the_kernel_does_not_take_run_atens_linear(dtype: torch.dtype) -> None:
    """float64 always, bfloat16 on a CPU without AVX512-BF16: ATen's linear summed in float32 at
    least and rounded once, in the input's dtype."""
    if dtype == torch.bfloat16 and _core.pointwise_conv_vectorized(True):
        pytest.skip("this CPU runs bfloat16 on the kernel (AVX512-BF16)")
    torch.manual_seed(0)
    x, weight, bias = (torch.randn(*s).to(dtype) for s in ((3, 5, 16), (24, 16), (24,)))
    y = packed_linear(x, weight, bias, 0.0, 6.0)
    assert y.dtype == dtype
    wide = torch.promote_types(dtype, torch.float32)
    expected = F.linear(x.to(wide), weight.to(wide), bias.to(wide)).clamp(0.0, 6.0).to(dtype)
    assert torch.equal(y, expected)


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 96)
        self.relu = torch.nn.ReLU()
        self.down = torch.nn.Linear(96, 16, bias=False)
        self.act = torch.nn.GELU()

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.act(self.down(self.relu(self.up(x))))


@needs_avx2
def test_the_pass_puts_linears_on_the_kernel_and_reverses_exactly(tmp_path: Path) -> None:
    """Pinned to fxopt's kernel: the ReLU becomes its clamp, the GELU stays after it; the graph
    copies, saves and reloads; reverse restores the code and the very same parameters."""
    model = MLP().eval()
    gm = fxopt.trace(model, mode="symbolic")
    before, code = param_states(gm), gm.code
    x = torch.randn(2, 5, 16)
    expected = gm(x)
    pass_ = FuseLinearActivationOneDnn()
    with tuning.pinned(linear="fxopt"):
        pass_(gm)
    calls = [n for n in gm.graph.nodes if n.target is packed_linear]
    assert [(n.args[3], n.args[4]) for n in calls] == [(0.0, None), (None, None)]
    assert [n.op for n in gm.graph.nodes].count("call_module") == 1  # the GELU
    assert {c.picked for c in pass_.report.choices} == {"fxopt"}
    with torch.no_grad():
        torch.testing.assert_close(gm(x), model(x), rtol=1e-5, atol=1e-6)
    copied = copy.deepcopy(gm)
    torch.save(gm, tmp_path / "mlp.pt")
    loaded = torch.load(tmp_path / "mlp.pt", weights_only=False)
    assert sum(n.target is packed_linear for n in loaded.graph.nodes) == 2
    assert torch.equal(loaded(x), gm(x)) and torch.equal(copied(x), gm(x))

    pass_(gm, reverse=True)
    assert gm.code == code
    assert_same_parameters(gm, before, same_storage=True)
    assert torch.equal(gm(x), expected)
