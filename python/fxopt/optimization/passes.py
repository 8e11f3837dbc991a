"""The built-in transformations, under ``optimum.fx.optimization``'s names."""

from __future__ import annotations

from typing import Any

import torch

from ..tensor_ops import dtype_name
from .builtin import BuiltinTransformation


class ChangeTrueDivToMulByInverse(BuiltinTransformation):
    """Division by a constant number becomes multiplication by its inverse.

    Fires on ``a / c``, ``torch.div(a, c)``, ``torch.true_divide``, ``a.div(c)`` / ``div_`` and
    ``aten.div`` in exported graphs. Skips a zero divisor, an inverse that is not a normal float
    and any ``rounding_mode``. Reverse puts back the original divisor object, so ``x / 8``
    comes back as ``x / 8``, not ``x / (1 / 0.125)``.
    """

    core_pass = "ChangeTrueDivToMulByInverse"
    preserves_computation = True


class MergeLinears(BuiltinTransformation):
    """Linears that read the same input become one Linear whose output is sliced back.

    Works on ``call_module`` nn.Linear (symbolic traces) and on ``F.linear`` /
    ``aten.linear.default`` with ``get_attr`` weights (exported graphs). Members of one merged
    Linear share input, dtype, device and requires_grad; the merged bias exists iff a member had
    one (zeros for the others). The original nodes keep their names and users and become
    slices (``torch.narrow`` / ``aten.slice.Tensor``, strided views) of the merged output. A
    module called at more than one place is skipped, as listed in :attr:`report`.

    Reverse slices each member's weight and bias back out of the merged tensors as they are then
    (so training of the merged model carries over), restores ``None`` biases as ``None``, and
    needs nothing but the graph: it works after ``copy.deepcopy`` and in a later session.
    """

    core_pass = "MergeLinears"
    preserves_computation = True


class FuseBiasInLinear(BuiltinTransformation):
    """A Linear's bias becomes one more weight column, read against a column of ones.

    ``linear(x, W, b)`` becomes ``linear(pad(x, (0, 1), value=1.0), [W | b])``: the ones column
    has the input's dtype and device, and one padded input is shared by every Linear reading the
    same input. Linears without a bias are skipped. Reverse splits ``[W | b]`` back into the
    weight and bias exactly and removes the padding.

    Measured on CPU, it does not speed anything up: the padded input is a copy and the GEMM is
    one column wider, so BERT-base runs at 0.964x and MiniLM at 0.978x of eager
    (``bench/latency.py --per-pass``, one thread; ``bench/linear_passes.py`` 4-6% slower at
    8x128 tokens). It stays out of the ``default`` preset; it exists for Optimum parity and for
    backends where a bias add is a separate kernel launch.
    """

    core_pass = "FuseBiasInLinear"
    preserves_computation = True


class FuseBatchNormInConv(BuiltinTransformation):
    """An eval-mode batch norm right after a convolution folds into the convolution's weights.

    Conv1d / 2d / 3d and ConvTranspose1d / 2d / 3d with any ``groups``, as ``call_module``
    (symbolic traces), ``F.conv*`` or ATen convolutions with ``get_attr`` weights (exported
    graphs), followed by ``nn.BatchNorm*d``, ``F.batch_norm`` or the ATen batch norms. Skips,
    with the reason in :attr:`report`: a batch norm in training mode or without running
    statistics, a convolution whose output has other readers, channel counts that differ.
    Weight math runs in float32 (or float64) and is cast back, so float16 / bfloat16 models fold
    without extra rounding. ``affine=False`` folds as weight 1, bias 0.

    Copy-on-write: the convolution calls a copy of its module at ``<path>_fused`` (or reads new
    attributes ``<weight path>_fused``); the original convolution and batch norm stay registered,
    unused, and the caller's modules are never changed. Reverse points the node back at them and
    rebuilds the batch norm node, so it is exact and needs only the graph: it works after
    ``copy.deepcopy`` and in a later session.
    """

    core_pass = "FuseBatchNormInConv"
    preserves_computation = True


class FuseBatchNorm2dInConv2d(FuseBatchNormInConv):
    """Optimum's pass: :class:`FuseBatchNormInConv` restricted to Conv2d followed by BatchNorm2d."""

    core_pass = "FuseBatchNorm2dInConv2d"


class FuseBatchNorm1dInLinear(BuiltinTransformation):
    """An eval-mode BatchNorm1d right before or after a Linear folds into the Linear's weights.

    Like Optimum's pass it handles both orders (Linear -> BN and BN -> Linear), in every dialect.
    Unlike it, it refuses a fold whose axes may not line up: batch norm normalizes dim 1 and a
    Linear works on the last dim, which are the same only for 2-D input. The rank must be known:
    exported graphs record it; for a symbolic trace run
    ``torch.fx.passes.shape_prop.ShapeProp(gm).propagate(*inputs)`` first, or the fold is skipped
    with that reason in :attr:`report`. Copy-on-write and reversal as in
    :class:`FuseBatchNormInConv`.
    """

    core_pass = "FuseBatchNorm1dInLinear"
    preserves_computation = True


class ChangeActivation(BuiltinTransformation):
    """Every activation of kind `source` becomes one of kind `target` (changes the outputs).

    Kinds: ``relu``, ``relu6``, ``gelu`` (exact), ``gelu_tanh`` (tanh approximation), ``silu``,
    ``sigmoid``, ``tanh``, ``mish``, ``hardswish``, spelled as modules (``nn.GELU``), functions
    (``F.gelu``, ``torch.relu``), methods (``x.relu()``) or ATen calls (``aten.gelu.default``).
    The node keeps its name and users; modules and functions become a torch function call, ATen
    calls an ATen call. An in-place activation whose input other nodes read is skipped. Reverse
    restores each node exactly, from the record it carries (after ``copy.deepcopy`` too). An
    unknown kind raises ``ValueError`` when the transformation runs.
    """

    core_pass = "ChangeActivation"
    preserves_computation = False

    def __init__(self, source: str, target: str) -> None:
        self.source = source
        self.target = target


class GeluToTanhApproximation(ChangeActivation):
    """Exact GELU becomes its tanh approximation (``approximate="tanh"``); reverse undoes it."""

    def __init__(self) -> None:
        super().__init__("gelu", "gelu_tanh")


class ChangePrecision(BuiltinTransformation):
    """Linear, convolution and matrix-product work runs in `dtype` (float16 or bfloat16).

    Each such op reads its inputs cast to `dtype` and its result is cast back to its input's
    dtype, so the graph's inputs and outputs and every other op keep their dtypes. Weights are
    cast once and stored copy-on-write (a module copy ``<path>_float16`` or attributes
    ``<weight path>_float16``); ops whose weight is not float32 / float64 are skipped. Reverse
    points the ops back at the untouched originals, so weights come back bit for bit, and removes
    the casts. Changes the outputs by the rounding of `dtype`.
    """

    core_pass = "ChangePrecision"
    preserves_computation = False

    def __init__(self, dtype: torch.dtype = torch.float16) -> None:
        if dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"ChangePrecision takes torch.float16 or torch.bfloat16, not {dtype}")
        self.dtype = dtype

    def core_options(self) -> dict[str, Any]:
        # The core reads the name; the casts it builds pass the dtype object on to torch.
        return {
            "dtype": dtype_name(self.dtype),
            "dtype_object": self.dtype,
            "full_dtype_objects": {"float32": torch.float32, "float64": torch.float64},
        }
