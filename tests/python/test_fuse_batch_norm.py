"""FuseBatchNormInConv, FuseBatchNorm2dInConv2d and FuseBatchNorm1dInLinear on real models, in
both graph dialects: outputs, node counts, marks, copy-on-write and exact reverse."""

from __future__ import annotations

import pytest
import torch
import torch.fx
from torch import nn

from fxopt.optimization import (
    FuseBatchNorm1dInLinear,
    FuseBatchNorm2dInConv2d,
    FuseBatchNormInConv,
    compose,
)
from norm_models import (
    DIALECTS,
    assert_outputs_close,
    assert_same_tensors,
    check_reverse,
    count,
    outputs,
    tensor_states,
    tiny_mobilenet_v2,
    tiny_resnet,
    trace,
    trace_vision,
)

ATEN_BATCH_NORMS = (
    torch.ops.aten.batch_norm.default,
    torch.ops.aten._native_batch_norm_legit_no_training.default,
)
BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, *ATEN_BATCH_NORMS)


def randomize_statistics(model: nn.Module) -> nn.Module:
    """Fresh batch norms normalize nothing (mean 0, var 1, weight 1, bias 0): make them matter."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
                if m.affine:
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-1, 1)
    return model


class ConvBN(nn.Module):
    def __init__(self, conv: nn.Module, bn: nn.Module) -> None:
        super().__init__()
        self.conv, self.bn = conv, bn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


CONV_CASES = {
    "conv1d": (lambda: nn.Conv1d(4, 6, 3), lambda: nn.BatchNorm1d(6), (2, 4, 9)),
    "conv2d_no_bias": (lambda: nn.Conv2d(4, 6, 3, bias=False), lambda: nn.BatchNorm2d(6), (2, 4, 7, 7)),
    "conv2d_groups_affine_false": (
        lambda: nn.Conv2d(4, 6, 3, groups=2), lambda: nn.BatchNorm2d(6, affine=False), (2, 4, 7, 7)),
    "conv3d": (lambda: nn.Conv3d(2, 4, 2), lambda: nn.BatchNorm3d(4), (1, 2, 4, 4, 4)),
    "conv_transpose2d": (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2), lambda: nn.BatchNorm2d(6), (2, 4, 5, 5)),
    "conv_transpose2d_groups": (
        lambda: nn.ConvTranspose2d(4, 6, 3, groups=2, bias=False), lambda: nn.BatchNorm2d(6), (2, 4, 5, 5)),
}  # fmt: skip


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_batch_norm_folds_and_reverses(case: str, dialect: str) -> None:
    make_conv, make_bn, shape = CONV_CASES[case]
    model = randomize_statistics(ConvBN(make_conv(), make_bn())).eval()
    caller = tensor_states(model)
    x = torch.randn(shape)
    gm = trace(model, (x,), dialect)
    expected, code, states, nodes = outputs(gm, x), gm.code, tensor_states(gm), len(gm.graph.nodes)
    t = FuseBatchNormInConv()

    t(gm)
    assert count(gm, *BATCH_NORMS) == 0
    assert t.report.skipped == []
    assert len(t.get_transformed_nodes(gm)) == 1
    if dialect == "symbolic":
        assert len(gm.graph.nodes) == nodes - 1
    else:  # the batch norm and its statistics reads go; a conv without a bias gains a bias read
        reads = 4 if model.bn.affine else 2
        assert len(gm.graph.nodes) == nodes - 1 - reads + (model.conv.bias is None)
    assert_outputs_close(outputs(gm, x), expected, atol=1e-5, rtol=1e-5)
    assert_same_tensors(model, caller, same_storage=True)  # copy-on-write: the caller's model is untouched

    check_reverse(t, gm, (x,), expected, code, states)
    assert_same_tensors(model, caller, same_storage=True)


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("make_model", [tiny_resnet, tiny_mobilenet_v2], ids=["resnet", "mobilenet_v2"])
def test_vision_models(make_model, dialect: str) -> None:  # type: ignore[no-untyped-def]
    model = randomize_statistics(make_model())
    caller = tensor_states(model)
    pixels = torch.randn(2, 3, 32, 32)
    gm, args = trace_vision(model, pixels, dialect)
    expected, code, states = outputs(gm, *args), gm.code, tensor_states(gm)
    batch_norms = count(gm, *BATCH_NORMS)
    assert batch_norms > 5
    t = FuseBatchNormInConv()

    t(gm)
    assert count(gm, *BATCH_NORMS) == 0
    assert len(t.report.changed) == batch_norms == len(t.get_transformed_nodes(gm))
    assert_outputs_close(outputs(gm, *args), expected, atol=1e-4, rtol=1e-4)
    assert_same_tensors(model, caller, same_storage=True)

    check_reverse(t, gm, args, expected, code, states)


class Conv1dAnd2d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv1d(3, 4, 1), nn.BatchNorm1d(4)
        self.c2, self.b2 = nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b2(self.c2(self.b1(self.c1(x)).unsqueeze(-1)))


@pytest.mark.parametrize("dialect", DIALECTS)
def test_optimum_2d_pass_leaves_other_convolutions(dialect: str) -> None:
    model = randomize_statistics(Conv1dAnd2d()).eval()
    x = torch.randn(2, 3, 5)
    gm = trace(model, (x,), dialect)
    expected = outputs(gm, x)
    t = FuseBatchNorm2dInConv2d()
    t(gm)
    assert len(t.report.changed) == 1 and count(gm, *BATCH_NORMS) == 1
    # BatchNorm1d modules are no candidates; an ATen batch norm is, and says why it stays.
    if dialect == "export":
        assert t.report.skipped == [("batch_norm", "folds only a Conv2d into a BatchNorm2d")]
    else:
        assert t.report.skipped == []
    assert_outputs_close(outputs(gm, x), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_low_precision_models_fold_in_float32(dtype: torch.dtype, dialect: str) -> None:
    model = randomize_statistics(ConvBN(nn.Conv2d(4, 6, 3), nn.BatchNorm2d(6))).eval().to(dtype)
    # The fold computed in float32 from the low-precision parameters, then rounded once.
    conv, bn = model.conv, model.bn
    scale = torch.rsqrt(bn.running_var.float() + bn.eps) * bn.weight.float()
    want_weight = (conv.weight.float() * scale[:, None, None, None]).to(dtype)
    x = torch.randn(2, 4, 7, 7, dtype=dtype)
    gm = trace(model, (x,), dialect)
    expected, code, states = outputs(gm, x), gm.code, tensor_states(gm)
    t = FuseBatchNormInConv()

    t(gm)
    fused = [p for name, p in gm.named_parameters() if name.endswith("weight_fused") or name == "conv_fused.weight"]
    assert len(fused) == 1 and fused[0].dtype == dtype
    assert torch.equal(fused[0].detach(), want_weight)
    assert_outputs_close(outputs(gm, x), expected, atol=0.1, rtol=0.05)
    check_reverse(t, gm, (x,), expected, code, states)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_batch_norm_in_training_mode_is_left_alone(dialect: str) -> None:
    model = ConvBN(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4)).train()
    x = torch.randn(2, 3, 4, 4)
    gm = trace(model, (x,), dialect)
    code = gm.code
    t = FuseBatchNormInConv()
    t(gm)
    assert t.report.changed == []
    assert [reason for _, reason in t.report.skipped] == [
        "is in training mode: it normalizes with the statistics of each batch"
    ]
    assert gm.code == code


def test_batch_norm_without_running_statistics_is_left_alone() -> None:
    gm = torch.fx.symbolic_trace(ConvBN(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4, track_running_stats=False)).eval())
    t = FuseBatchNormInConv()
    t(gm)
    assert t.report.skipped == [("bn", "keeps no running statistics (track_running_stats=False)")]


class SharedModules(nn.Module):
    """`conv` is called twice, each time followed by a batch norm; `bn` is shared by two convs;
    `tail`'s output is read twice, so it cannot fold."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn_a, self.bn_b = nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4), nn.BatchNorm2d(4)
        self.other, self.bn = nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4)
        self.tail, self.bn_tail = nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.bn_a(self.conv(x))
        b = self.bn_b(self.conv(a))
        c = self.bn(self.other(b)) + self.bn(self.conv(b))
        t = self.tail(c)
        return self.bn_tail(t) + t


@pytest.mark.parametrize("dialect", DIALECTS)
def test_shared_modules_fold_per_call_site(dialect: str) -> None:
    model = randomize_statistics(SharedModules()).eval()
    caller = tensor_states(model)
    x = torch.randn(2, 4, 3, 3)
    gm = trace(model, (x,), dialect)
    expected, code, states = outputs(gm, x), gm.code, tensor_states(gm)
    t = FuseBatchNormInConv()

    t(gm)
    assert len(t.report.changed) == 4
    assert [reason for _, reason in t.report.skipped] == [
        "the convolution's output has other users (besides reads of its shape)"
    ]
    assert count(gm, *BATCH_NORMS) == 1
    assert_outputs_close(outputs(gm, x), expected, atol=1e-5, rtol=1e-5)
    assert_same_tensors(model, caller, same_storage=True)
    check_reverse(t, gm, (x,), expected, code, states)


class LinearBN(nn.Module):
    """Linear -> BatchNorm1d and BatchNorm1d -> Linear (without a bias)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.bn1 = nn.Linear(5, 6), nn.BatchNorm1d(6)
        self.bn2, self.fc2 = nn.BatchNorm1d(6, affine=False), nn.Linear(6, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.bn2(torch.relu(self.bn1(self.fc1(x)))))


@pytest.mark.parametrize("dialect", DIALECTS)
def test_linear_batch_norm_both_orders(dialect: str) -> None:
    model = randomize_statistics(LinearBN()).eval()
    caller = tensor_states(model)
    x = torch.randn(4, 5)
    gm = trace(model, (x,), dialect, shapes=True)
    expected, code, states = outputs(gm, x), gm.code, tensor_states(gm)
    t = FuseBatchNorm1dInLinear()

    t(gm)
    assert sorted(n.name for n in t.get_transformed_nodes(gm)) == (
        ["fc1", "fc2"] if dialect == "symbolic" else ["linear", "linear_1"]
    )
    assert count(gm, *BATCH_NORMS) == 0
    assert_outputs_close(outputs(gm, x), expected, atol=1e-5, rtol=1e-5)
    assert_same_tensors(model, caller, same_storage=True)
    check_reverse(t, gm, (x,), expected, code, states)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_batch_norm_1d_on_3d_input_is_refused(dialect: str) -> None:
    """BatchNorm1d normalizes dim 1 of (N, C, L); the Linear works on L. With L == C the model
    runs, and folding would be silently wrong."""
    model = randomize_statistics(nn.Sequential(nn.Linear(5, 5), nn.BatchNorm1d(5))).eval()
    x = torch.randn(2, 5, 5)
    for shapes in (False, True) if dialect == "symbolic" else (True,):
        gm = trace(model, (x,), dialect, shapes=shapes)
        code = gm.code
        t = FuseBatchNorm1dInLinear()
        t(gm)
        assert t.report.changed == []
        [(_, reason)] = t.report.skipped
        assert reason.startswith("its input is 3-D" if shapes else "the rank of its input is unknown")
        assert gm.code == code


def test_compose_with_conv_and_linear_folds_reverses() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)
            self.fc, self.bn1 = nn.Linear(4, 2), nn.BatchNorm1d(2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.bn1(self.fc(self.bn(self.conv(x)).mean((2, 3))))

    model = randomize_statistics(Net()).eval()
    x = torch.randn(2, 3, 6, 6)
    gm = trace(model, (x,), "export")
    expected, code, states = outputs(gm, x), gm.code, tensor_states(gm)
    both = compose(FuseBatchNormInConv(), FuseBatchNorm1dInLinear())
    both(gm)
    assert count(gm, *BATCH_NORMS) == 0
    assert_outputs_close(outputs(gm, x), expected, atol=1e-5, rtol=1e-5)
    check_reverse(both, gm, (x,), expected, code, states)


class BatchNormAct2d(nn.BatchNorm2d):
    """timm's BatchNormAct2d (EfficientNet's norm + activation): it asserts on the input's rank
    with `torch._assert`, then calls F.batch_norm with its own statistics and runs the
    activation. Not a torch.nn leaf module, so symbolic_trace records the assert."""

    def __init__(self, num_features: int) -> None:
        super().__init__(num_features)
        self.drop = nn.Identity()
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._assert(x.ndim == 4, f"expected 4D input (got {x.ndim}D input)")
        momentum = 0.0 if self.momentum is None else self.momentum
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        x = nn.functional.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, bn_training, momentum, self.eps
        )
        return self.act(self.drop(x))


class TimmConvBnAct(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv_stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = BatchNormAct2d(8)
        self.conv_head = nn.Conv2d(8, 4, 1, bias=False)
        self.bn2 = BatchNormAct2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn2(self.conv_head(self.bn1(self.conv_stem(x))))


@pytest.mark.parametrize("mode", ["symbolic", "dynamo", "export"])
def test_a_shape_assert_does_not_block_a_fold(mode: str) -> None:
    # Issue 21: on timm's EfficientNet every fold was skipped ("the convolution's output has
    # other users": BatchNormAct2d's assert on x.ndim). The folded convolution has the same
    # output shape, so the assert keeps reading it, and reads it again after reverse.
    import fxopt

    model = randomize_statistics(TimmConvBnAct()).eval()
    x = torch.randn(2, 3, 6, 6)
    gm = fxopt.trace(model, example_inputs=(x,), mode=mode)  # type: ignore[arg-type]
    expected, code, states = outputs(gm, x), gm.code, tensor_states(gm)
    t = FuseBatchNormInConv()

    t(gm)
    assert t.report.skipped == []
    assert len(t.get_transformed_nodes(gm)) == 2
    assert count(gm, *BATCH_NORMS, torch.nn.functional.batch_norm) == 0
    assert_outputs_close(outputs(gm, x), expected, atol=1e-5, rtol=1e-5)
    check_reverse(t, gm, (x,), expected, code, states)


class _LinearShapeCheckNorm(nn.Module):
    """A Linear whose output's shape is read (asserted, and its size taken) before BatchNorm1d."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 6)
        self.bn = nn.BatchNorm1d(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        torch._assert(y.dim() == 2, "expected 2-D features")
        return self.bn(y) * y.size(1)


@pytest.mark.parametrize("mode", ["symbolic", "export"])
def test_a_shape_read_does_not_block_a_linear_fold(mode: str) -> None:
    model = randomize_statistics(_LinearShapeCheckNorm()).eval()
    x = torch.randn(3, 4)
    gm = trace(model, (x,), mode, shapes=True)  # the fold needs the rank: ShapeProp records it
    expected, code, states = outputs(gm, x), gm.code, tensor_states(gm)
    t = FuseBatchNorm1dInLinear()

    t(gm)
    assert t.report.skipped == [] and len(t.get_transformed_nodes(gm)) == 1
    assert_outputs_close(outputs(gm, x), expected, atol=1e-5, rtol=1e-5)
    check_reverse(t, gm, (x,), expected, code, states)
