"""Issue 10: compositions of built-in passes reverse exactly, whatever the order.

Each test composes passes that each reverse alone, applies the composition (inplace=False)
and checks outputs against the traced graph and, after reverse, outputs and every parameter
and buffer bit for bit.
"""

from __future__ import annotations

import pytest
import torch
from torch.fx import GraphModule

import fxopt
from linear_models import Parallel
from fxopt.optimization import (
    ChangePrecision,
    FuseBatchNorm1dInLinear,
    FuseBiasInLinear,
    FuseLinearActivationOneDnn,
    MergeLinears,
    Transformation,
    compose,
)


def _linear_bn() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).eval()


def _round_trip(model: torch.nn.Module, mode: str, *members: Transformation) -> GraphModule:
    x = torch.randn(3, 4)
    gm = fxopt.trace(model, example_inputs=(x,), mode=mode)  # type: ignore[arg-type]
    expected = gm(x)
    state = {k: v.clone() for k, v in gm.state_dict().items()}
    composition = compose(*members, inplace=False)
    transformed = composition(gm)
    if composition.preserves_computation:
        torch.testing.assert_close(transformed(x), expected)
    restored = composition(transformed, reverse=True)
    assert torch.equal(restored(x), expected)
    assert restored.state_dict().keys() == state.keys()
    for name, value in restored.state_dict().items():
        assert value.dtype == state[name].dtype and torch.equal(value, state[name]), name
    return restored


@pytest.mark.parametrize("mode", ["symbolic", "export"])
@pytest.mark.parametrize(
    "model, members",
    [
        (_linear_bn, (FuseBiasInLinear, FuseBatchNorm1dInLinear)),
        (_linear_bn, (FuseBatchNorm1dInLinear, FuseBiasInLinear)),
        (_linear_bn, (FuseBiasInLinear, ChangePrecision)),
        (Parallel, (MergeLinears, ChangePrecision)),
        (Parallel, (MergeLinears, FuseBiasInLinear, FuseLinearActivationOneDnn)),
        (Parallel, (FuseBiasInLinear, FuseLinearActivationOneDnn)),
    ],
    ids=["bias-bn", "bn-bias", "bias-precision", "merge-precision", "merge-bias-onednn",
         "bias-onednn"],
)  # fmt: skip
def test_composition_reverses_exactly(model, members, mode: str) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    _round_trip(model().eval(), mode, *(m() for m in members))


def test_reverse_finds_a_node_another_pass_captured() -> None:
    # FuseLinearActivationOneDnn erases the bias-fused Linear and rebuilds it on reverse; the
    # rebuilt node must carry FuseBiasInLinear's record again, or its reverse is a silent no-op.
    restored = _round_trip(Parallel().eval(), "symbolic", FuseBiasInLinear(),
                           FuseLinearActivationOneDnn())  # fmt: skip
    assert restored.q.weight.shape == (4, 4)
