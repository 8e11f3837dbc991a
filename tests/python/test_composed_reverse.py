"""Issue 10: compositions of built-in passes reverse exactly, whatever the order.

Each test composes passes that each reverse alone, applies the composition (inplace=False)
and checks outputs against the traced graph and, after reverse, outputs and every parameter
and buffer bit for bit, and the code (node order included).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch.fx import GraphModule

import fxopt
from linear_models import Parallel
from fxopt.optimization import (
    ChangePrecision,
    EliminateDeadCode,
    FuseBatchNorm1dInLinear,
    FuseBatchNormInConv,
    FuseBiasInLinear,
    FuseLinearActivationOneDnn,
    FusePointwiseConv,
    MergeLinears,
    QuantizeLinearsInt8,
    QuantizeLinearsWeightOnly,
    RemoveNoOps,
    RemoveRuntimeAsserts,
    Transformation,
    compose,
)


def _linear_bn() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).eval()


def _round_trip(model: torch.nn.Module, mode: str, *members: Transformation,
                inplace: bool = False) -> GraphModule:  # fmt: skip
    x = torch.randn(3, 4)
    gm = fxopt.trace(model, example_inputs=(x,), mode=mode)  # type: ignore[arg-type]
    expected = gm(x)
    state = {k: v.clone() for k, v in gm.state_dict().items()}
    composition = compose(*members, inplace=inplace)
    # In place, reverse runs in the core session the forward left attached to the graph.
    transformed = composition(copy.deepcopy(gm) if inplace else gm)
    if composition.preserves_computation:
        torch.testing.assert_close(transformed(x), expected)
    restored = composition(transformed, reverse=True)
    assert torch.equal(restored(x), expected)
    assert restored.code == gm.code
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
        # Fuzz seeds 100075, 100315: a read ChangePrecision lowered, and marked, then erased by
        # the Linear pass, came back without ChangePrecision's record.
        (_linear_bn, (ChangePrecision, FuseBiasInLinear)),
        (Parallel, (ChangePrecision, MergeLinears)),
        # Fuzz seeds 651, 1059, 1619: the core named a node 'round', fx named it 'round_1', and
        # the removal records naming it went stale.
        (Parallel, (QuantizeLinearsInt8, EliminateDeadCode)),
        (Parallel, (QuantizeLinearsInt8, RemoveRuntimeAsserts)),
        (Parallel, (MergeLinears, QuantizeLinearsWeightOnly, EliminateDeadCode)),
        (_linear_bn, (FuseBatchNorm1dInLinear, QuantizeLinearsWeightOnly)),
    ],
    ids=["bias-bn", "bn-bias", "bias-precision", "merge-precision", "merge-bias-onednn",
         "bias-onednn", "precision-bias", "precision-merge", "int8-dce", "int8-asserts",
         "merge-int8wo-dce", "bn-int8wo"],
)  # fmt: skip
def test_composition_reverses_exactly(model, members, mode: str) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    _round_trip(model().eval(), mode, *(m() for m in members))


@pytest.mark.parametrize("mode", ["symbolic", "export"])
def test_in_place_composition_reverses_a_precision_change_between_linear_passes(mode: str) -> None:
    # Issue 21 item 9: FuseBiasInLinear erased the merged Linear's bias read and its reverse
    # recreated it; in the session the forward left attached the core had named the read
    # before, so it gave '<name>_1', ChangePrecision's record on it went stale, the bias stayed
    # bfloat16, and MergeLinears' reverse found no Linear ("no longer a slice of a merged Linear").
    torch.manual_seed(0)
    members = (FuseBatchNormInConv(), FuseBatchNorm1dInLinear(), MergeLinears(),
               ChangePrecision(torch.bfloat16), FuseBiasInLinear())  # fmt: skip
    _round_trip(Parallel().eval(), mode, *members, inplace=True)


def test_reverse_finds_a_node_another_pass_captured() -> None:
    # FuseLinearActivationOneDnn erases the bias-fused Linear and rebuilds it on reverse; the
    # rebuilt node must carry FuseBiasInLinear's record again, or its reverse is a silent no-op.
    restored = _round_trip(Parallel().eval(), "symbolic", FuseBiasInLinear(),
                           FuseLinearActivationOneDnn())  # fmt: skip
    assert restored.q.weight.shape == (4, 4)


class _LinearThenActivation(torch.nn.Module):
    """A Linear whose activation comes after another Linear (fuzz seed 100281)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4, bias=False)
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.a(x)
        b = self.b(x)
        return torch.relu(a) + b


@pytest.mark.parametrize("mode", ["symbolic", "export"])
def test_reverse_puts_erased_nodes_back_in_place(mode: str) -> None:
    # The fused node stands where the activation stood; reverse rebuilds the Linear before it,
    # the driver moves it back before `b` (rewrite/placement.h). On exported graphs the weight
    # reads are hoisted to the top and come back there.
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    gm = fxopt.trace(_LinearThenActivation().eval(), example_inputs=(x,), mode=mode)  # type: ignore[arg-type]
    t = FuseLinearActivationOneDnn()
    fused = t(copy.deepcopy(gm))
    assert len(t.get_transformed_nodes(fused)) == 2 and fused.graph.find_nodes(op="output")
    assert all(n.op != "output" for n in t.get_transformed_nodes(fused))  # bookkeeping only
    _round_trip(_LinearThenActivation().eval(), mode, FuseLinearActivationOneDnn())


class _SharedLinearThenNorm(torch.nn.Module):
    """One Linear called twice; only the first call feeds a BatchNorm (fuzz seed 610)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4, bias=False)
        self.bn = torch.nn.BatchNorm1d(4)
        self.bn.running_mean.uniform_(-1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(x)) + self.fc(torch.relu(x))


@pytest.mark.parametrize("mode", ["symbolic", "export"])
def test_fold_into_a_shared_weight_reads_it_again_on_reverse(mode: str) -> None:
    # Exported, both calls read one get_attr of fc.weight; the fold gives the first call a read
    # of its own, and reverse must read the shared one again, not add a second read.
    torch.manual_seed(0)
    _round_trip(_SharedLinearThenNorm().eval(), mode, FuseBatchNorm1dInLinear())


def test_a_merged_linear_quantized_then_reversed_step_by_step() -> None:
    """Reversing one call at a time: the int8 reverse removes the tensors it stored in the merged
    Linear's module, and MergeLinears' reverse, in the next session, must not copy them back
    (it raised KeyError: 'no tensor with handle ...')."""
    from torch.fx.passes.shape_prop import ShapeProp

    class TwoHeads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(16, 8)
            self.b = torch.nn.Linear(16, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(x) + self.b(x)

    x = torch.randn(3, 16)
    gm = fxopt.trace(TwoHeads().eval(), example_inputs=(x,), mode="symbolic")
    ShapeProp(gm).propagate(x)
    code, expected = gm.code, gm(x)
    merge, int8 = MergeLinears(), QuantizeLinearsInt8()
    out = int8(merge(copy.deepcopy(gm)))
    assert merge.report.changed and int8.report.changed
    back = merge(int8(out, reverse=True), reverse=True)
    assert back.code == code
    assert torch.equal(back(x), expected)
    assert not [name for name, _ in back.named_buffers() if "int8" in name]


class _PointwiseConvRelu6(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.relu6(self.conv(x))


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("mode", ["symbolic", "export"])
def test_a_transformation_twice_in_a_composition_reverses_in_order(mode: str, inplace: bool) -> None:
    # Fuzz seeds 1713, 2321, 4109, 4421: the two ChangePrecision members sign alike, and the
    # second one's reverse (first in line, its forward changed nothing) undid the first one's
    # lowering under the fused convolution; FusePointwiseConv's reverse then rebuilt reads of
    # weights that were gone. Each application now signs its own marks (rewrite/marks.h).
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 5)
    gm = fxopt.trace(_PointwiseConvRelu6().eval(), example_inputs=(x,), mode=mode)  # type: ignore[arg-type]
    expected, code = gm(x), gm.code
    state = {k: v.clone() for k, v in gm.state_dict().items()}
    first, fuse, second = ChangePrecision(torch.bfloat16), FusePointwiseConv(), ChangePrecision(torch.bfloat16)
    composition = compose(first, fuse, second, inplace=inplace)
    out = composition(copy.deepcopy(gm) if inplace else gm)
    assert fuse.report.changed and not second.report.changed
    assert any("pointwise_conv" in str(n.target) for n in out.graph.nodes)
    torch.testing.assert_close(out(x), expected, atol=0.05, rtol=0.05)  # bfloat16

    back = composition(out, reverse=True)
    assert back.code == code
    assert torch.equal(back(x), expected)
    assert back.state_dict().keys() == state.keys()
    for name, value in back.state_dict().items():
        assert value.dtype == state[name].dtype and torch.equal(value, state[name]), name
    assert not any(n.meta.get("fxopt_transformations") for n in back.graph.nodes)


class _TwoPairs(torch.nn.Module):
    """Two pairs of parallel Linears; the second pair reads x only once RemoveNoOps took out
    the (inference) dropouts in between."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c, self.d = (torch.nn.Linear(4, 4) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.c(torch.nn.functional.dropout(x, 0.1, training=False))
        d = self.d(torch.nn.functional.dropout(x, 0.2, training=False))
        return self.a(x) + self.b(x) + c * d


@pytest.mark.parametrize("mode", ["symbolic", "export"])
def test_each_application_of_one_transformation_reverses_on_its_own(mode: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    gm = fxopt.trace(_TwoPairs().eval(), example_inputs=(x,), mode=mode)  # type: ignore[arg-type]
    first, second = MergeLinears(), MergeLinears()
    out = compose(first, RemoveNoOps(), second, inplace=False)(gm)
    assert "a_b_merged" in first.report.changed and "c_d_merged" in second.report.changed
    assert len(first.get_transformed_nodes(out)) == 6  # both applications' nodes
    torch.testing.assert_close(out(x), gm(x))
    _round_trip(_TwoPairs().eval(), mode, MergeLinears(), RemoveNoOps(), MergeLinears())
