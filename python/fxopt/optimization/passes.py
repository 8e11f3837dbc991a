"""The built-in transformations, under ``optimum.fx.optimization``'s names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch
from torch.fx import GraphModule

from .hardware import (
    fast_bfloat16_cpu,
    onednn_conv_available,
    onednn_dtypes,
    onednn_linear_available,
)
from ..tracing.dummy_inputs import Inputs
from ..engine.tensor_ops import dtype_name
from ..runtime import dynamic_int8, per_token_int8
from .. import tuning
from ..tuning import kernels
from .builtin import BuiltinTransformation
from .calibrated import CalibratedPass
from .int8_calibration import (
    Calibration,
    conv_stand_in,
    fewest_kept,
    input_scales,
    linear_stand_in,
    outlier_channels,
    smoothing_factors,
)
from .sharing_copy import sharing_copy


class ChangeTrueDivToMulByInverse(BuiltinTransformation):
    """Division by a constant number becomes multiplication by its inverse.

    Fires on ``a / c``, ``torch.div(a, c)``, ``torch.true_divide``, ``a.div(c)`` / ``div_`` and
    ``aten.div`` in exported graphs. Skips a zero divisor, an inverse that is not a normal float
    and any ``rounding_mode``. Reverse puts back the original divisor object, so ``x / 8``
    comes back as ``x / 8``, not ``x / (1 / 0.125)``.
    """


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


class FuseBatchNorm2dInConv2d(FuseBatchNormInConv):
    """Optimum's pass: :class:`FuseBatchNormInConv` restricted to Conv2d followed by BatchNorm2d."""


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


class FuseAttentionToSdpa(BuiltinTransformation):
    """A hand-written attention becomes one ``F.scaled_dot_product_attention`` call.

    ``softmax(q @ k.transpose(-2, -1) / c + mask, dim=-1) @ v`` (scale by division or
    multiplication, also on q; additive mask, ``masked_fill`` or ``torch.where`` fill; softmax in
    float32 followed by a cast back; dropout in eval mode) becomes
    ``scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1/c)``: in symbolic traces
    (``torch.matmul``, ``operator.truediv``, ``F.softmax``, ``x.softmax``, ``nn.Softmax``,
    ``nn.Dropout``) and in exported ATen graphs (transformers' eager attention). Skipped, with the
    reason in :attr:`report`: an intermediate value read elsewhere (e.g. attention weights
    returned), a softmax over another dim, an active dropout, a non-constant scale. The result
    matches within float rounding (fused kernels order the arithmetic differently). Reverse
    rebuilds the removed nodes under their names and restores the code and outputs exactly.
    """


class FoldConstants(BuiltinTransformation):
    """A call whose value depends only on stored tensors and literals is computed once and stored.

    Pure ``call_function`` / ``call_method`` nodes whose operands are all constants (get_attr
    tensors or other such calls) are run once with torch, under ``no_grad``, from the values
    they read; the last of each such chain becomes a ``get_attr`` of the stored result (a new
    attribute ``_folded_<name>``, a parameter if it was computed from one), keeping its name
    and users. The constants it was computed from are left for :class:`EliminateDeadCode`.
    Skipped, with the reason: values that are not tensors, ops that fail outside the graph, and
    results above 64 KiB that are larger than their operands (an expanded buffer). Reverse turns
    the node back into the recorded call and drops the stored tensor.

    Measured: transformers-5 graphs have little that is constant (masks and positions depend on
    the inputs; Dynamo traces give 1-2 folds per model, a buffer slice or an ``arange``), so it
    is no speed lever there; it removes per-call work from users' modules that transform
    weights in ``forward``.
    """


class RemoveNoOps(BuiltinTransformation):
    """Calls that return their input unchanged are removed; their users read the input.

    Dropout in eval mode or with ``p=0`` (``nn.Dropout``, ``F.dropout(training=False)``,
    ``aten.dropout(x, p, False)``), ``nn.Identity``, ``clone`` / ``detach`` / ``alias``,
    ``contiguous()`` right after a Linear, matmul or embedding, casts to the dtype and device the
    value already has (``x.to(...)``, ``x.float()``, ``aten.to.*``, ``aten._to_copy``) and
    ``view`` / ``reshape`` / ``expand`` to the shape it already has, in every dialect. Dtypes,
    devices and static shapes come from what fx recorded: exported graphs have them; for a
    symbolic trace run ``torch.fx.passes.shape_prop.ShapeProp(gm).propagate(*inputs)`` first
    (dtypes and shapes only, so a ``.to()`` that may name a device stays). A copy (``clone``,
    ``_to_copy``) stays when it or its input is modified in place, or when the graph returns it;
    every skipped candidate is listed in :attr:`report` with its reason. ``detach`` is removed
    too: use the result for inference. Reverse puts every node back exactly.
    """


class EliminateCommonSubexpressions(BuiltinTransformation):
    """A call repeating an earlier one (same op, same arguments) is replaced by its result.

    One pass in graph order with a hash of each call, so repeated chains (the attention-mask
    arithmetic exported transformers graphs repeat, repeated ``size`` / ``view`` calls) collapse
    in one run. Placeholders, random ops (dropout in training, ``rand*``, ``bernoulli``...),
    in-place ops, runtime checks, calls of modules fxopt does not know to be pure, and values that
    are (or may alias, or read) a value modified in place are never merged. Reverse puts every
    dropped node back and points its users at it again.
    """


class EliminateDeadCode(BuiltinTransformation):
    """Nodes whose value nothing reads, and whose call has no other effect, are removed.

    Visits the graph last to first, so dead chains go in one run. Keeps placeholders, in-place
    and random ops, runtime checks (see :class:`RemoveRuntimeAsserts`), prints and grad-mode
    switches, and calls of modules not known to be pure (torch.nn's Linear, convolution,
    normalization, activation, dropout, embedding, pooling and shape modules are; batch norm only
    in eval mode); the reason for each is in :attr:`report`. Python functions fxopt does not know
    count as pure, as in ``torch.fx.Graph.eliminate_dead_code``. Reverse puts every node back
    with its name, arguments and position.
    """


class RemoveRuntimeAsserts(BuiltinTransformation):
    """Opt-in: torch.export's runtime checks are removed, with the values only they read.

    ``aten._assert_async`` / ``_assert_scalar`` / ``_assert_tensor_metadata``,
    ``aten.sym_constrain_range(_for_size)``, ``torch._assert`` / ``torch._check*`` and the
    ``_guards_fn`` call that checks input shapes in exported graphs. Outputs are unchanged for
    inputs that satisfy what export assumed; for other inputs the graph no longer raises a clear
    error, so this pass is not part of any preset. Reverse puts every check back.
    """


class RecognizeLinears(BuiltinTransformation):
    """Matrix products with stored weights become Linears, so every Linear pass sees them.

    ``addmm(b, x, W)`` (GPT-2's ``Conv1D``), ``mm(x, W) + b`` and ``matmul(x, W) + b`` (``x @ W``,
    ``torch.matmul``, ``.matmul``, ATen) where ``W`` is a stored ``[in, out]`` tensor, or a stored
    ``[out, in]`` one transposed on the way (``W.t()``, ``W.T``, ``transpose``, ``permute``), and
    ``b`` a stored 1-D bias, become ``aten.linear`` in exported graphs and ``F.linear`` otherwise.
    An ``[in, out]`` weight is transposed once and stored as a new attribute ``<path>_t``; the
    original stays registered, untouched. Conv1D's flatten / unflatten views go too when the
    shapes fx recorded prove they only flatten the leading dimensions (all sizes known: a static
    export, or a symbolic trace after ``ShapeProp``); otherwise they stay around the Linear.
    Products of two computed tensors (attention) are skipped with the reason in :attr:`report`.

    Outputs match within float32 rounding (the GEMM may be called with another shape). Reverse
    rebuilds the original nodes reading the original weight, exactly, and drops the copy.
    """


class FuseLinearActivationOneDnn(BuiltinTransformation):
    """A Linear, with the activation right after it, becomes one oneDNN fused linear call.

    ``linear(x, W, b)`` followed by relu, gelu (exact or tanh), silu, sigmoid, tanh, hardswish or
    relu6 as its only reader becomes ``fxopt.runtime.onednn_linear.linear_pointwise(x, W, b,
    attr, scalars, algorithm)``, oneDNN's fused linear (``torch.ops.mkldnn._linear_pointwise``)
    on the weight packed into oneDNN's layout on the first call and kept while the weight lives
    unchanged; a Linear with other readers becomes the same call with ``attr="none"``. The graph
    holds the plain weights, so ``copy.deepcopy``, ``torch.save`` and ``inplace=False`` keep
    working. Only CPU Linears whose weight dtype oneDNN runs here are
    fused: float32 where this torch has the op, bfloat16 where the CPU runs it natively; the
    others are skipped with the reason in :attr:`report`. The op has no autograd formula: use
    the result for inference only. A NaN reaching a fused relu or relu6 comes out as 0,
    as oneDNN computes them; torch's pass NaN on (the other activations do too). Reverse
    restores the Linear and activation nodes exactly.

    Its worth comes from oneDNN's sgemm being faster than MKL's on some CPUs: measured on an AMD
    EPYC Zen 4 (avx512_bf16), one thread, batch 1, seq 128, 1.11x on MiniLM, 1.20x on BERT-base,
    1.48x on GPT-2 in float32; after ``ChangePrecision(torch.bfloat16)`` within noise (0-7%).
    Numbers and conditions in cpp/passes/fuse_linear_activation_onednn.h.
    """

    def core_options(self) -> dict[str, Any]:
        return {**self.parameters(), "dtypes": onednn_dtypes(onednn_linear_available())}


class FuseConvActivationOneDnn(BuiltinTransformation):
    """A 2-D convolution, with the residual add and activation after it, becomes one oneDNN call
    on a weight packed once.

    ``conv2d(x, W, b)``, then optionally ``+ r`` (or ``+=``) and relu, relu6 / hardtanh(0, 6),
    gelu, silu, sigmoid, tanh or hardswish as the only readers (after an add: relu only), becomes
    ``fxopt.runtime.onednn_conv.conv_pointwise(x, W, b, stride, padding, dilation, groups, r,
    attr, scalars, algorithm)``. At batch 1 ATen reorders a convolution's weight into oneDNN's
    layout on every call; the runtime function packs it on the first call, per input size, and
    keeps the packing while the weight lives unchanged, so the graph still holds plain tensors
    (``copy.deepcopy``, ``fxopt.save`` and ``inplace=False`` keep working; ``torch.export.save``
    cannot write a call of a Python function). Per convolution the kernel chooser picks ATen,
    the packed call, or the packed call with the add and activation fused, by timing them on
    this machine at the graph's shapes. Only CPU convolutions whose weight dtype oneDNN runs
    here: float32, bfloat16 where the CPU runs it natively. Outputs are channels-last. Use the
    result for inference only. A NaN reaching a fused relu or relu6 comes out as 0, as
    oneDNN computes them; torch's pass NaN on (the other activations do too). Reverse restores the
    convolution, add and activation exactly.

    Measured on an Intel Xeon (AMX), one thread, batch 1, 224x224, after bfloat16 lowering:
    ResNet-50 29 -> 18.7 ms, MobileNetV2 9.2 -> 6.7 ms; float32 ResNet-50 67 -> 54 ms.
    Conditions in cpp/passes/fuse_conv_activation_onednn.h.
    """

    def core_options(self) -> dict[str, Any]:
        return {**self.parameters(), "dtypes": onednn_dtypes(onednn_conv_available())}


class FuseDepthwiseConv(BuiltinTransformation):
    """A depthwise convolution, with the zero pad before it and a ReLU / ReLU6 after it, runs
    fxopt's channels-last kernel where that measured faster.

    ``relu6(conv2d(F.pad(x, (l, r, t, b)), W, b, stride, groups=C))`` with W [C, 1, kh, kw]
    becomes ``fxopt.runtime.depthwise_conv.depthwise_conv2d(x, W, b, stride, [top, bottom, left,
    right], 0.0, 6.0)``: one pass over the image, channels in the vector lanes
    (``kernels/depthwise_conv.h``, AVX-512F or AVX2), the zeros of all four sides its own (a
    model ported from TensorFlow pads a stride-2 convolution on one side only, which needed a
    separate pad: a copy of the image), the filters packed on the first call and kept while the
    weight lives. Per convolution the kernel chooser times it against what the later passes make
    of the convolution (oneDNN's fused call, after the pad); the static fallback is fxopt's
    kernel, never picked on a CPU without AVX2. Float32 or bfloat16, on the CPU; dilation 1; an
    activation other than ReLU / ReLU6 stays a node of its own. The same products summed in
    another order (float32 results within ~1e-7 relative). Use the result for inference only.
    Reverse restores the pad, convolution and activation exactly. Conditions in
    cpp/passes/fuse_depthwise_conv.h.
    """


class FusePointwiseConv(BuiltinTransformation):
    """A 1x1 convolution, with a residual add and a ReLU / ReLU6 after it, runs fxopt's
    channels-last kernel where that measured faster.

    ``relu6(conv2d(x, W, b) + r)`` with W [out, in, 1, 1] (stride 1, no padding, one group)
    becomes ``fxopt.runtime.pointwise_conv.pointwise_conv2d(x, W, b, r, 0.0, 6.0)``: the matrix
    product a channels-last 1x1 convolution is (``kernels/pointwise_conv.h``: AVX512-BF16 dot
    products in bfloat16, fused multiply-adds in float32 with AVX-512F or AVX2), the weight
    packed on the first call and kept while it lives. At batch 1 oneDNN's call through torch
    costs 25-40 us before any work and a 1x1 convolution of MobileNetV2 is 20-250 us of it;
    ATen's without oneDNN reorders the weight at every call. Per convolution the kernel chooser
    times it against what the later passes make of the convolution (oneDNN's fused call); the
    static fallback is fxopt's kernel, never picked on a CPU without AVX2 (a bfloat16 call on
    one without AVX512-BF16 runs ATen's). After a residual add the activation is taken only if
    it is a ReLU (as oneDNN's), and an activation other than ReLU / ReLU6 stays a node of its
    own. The same products summed in float32 in another order (float32 results within ~1e-7
    relative; bfloat16 ones rounded once). Use the result for inference only. Reverse restores
    the convolution, add and activation exactly. Conditions in cpp/passes/fuse_pointwise_conv.h.
    """


class FuseTanhGelu(BuiltinTransformation):
    """GELU's tanh approximation written out in elementwise ops becomes one gelu call.

    ``0.5 * x * (1.0 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))``, as transformers'
    ``gelu_new`` (GPT-2, GPT-J, CodeGen) computes it in eight passes over the MLP's widest
    activation, becomes ``F.gelu(x, approximate="tanh")`` (``aten.gelu`` in an ATen graph): one
    pass over it instead of eight (GPT-2's [1, 128, 3072] on a Zen 4 core: 0.76 against 2.2 ms).
    Either operand order, scale by multiplication or division; every intermediate value read
    only inside the formula. Float32 rounding differs (~1e-7 relative). Reverse rebuilds the
    nodes as they were. Conditions in cpp/passes/fuse_tanh_gelu.h.
    """


class MoveActivationBeforeReshape(BuiltinTransformation):
    """An activation reading a reshape of a Linear's result runs on the Linear's result, before
    the reshape.

    Computation-preserving (an elementwise op commutes with a reshape: the same bits) and
    reversible. GPT-2's Conv1D views its product back to [batch, seq, features] with sizes a
    Dynamo graph computes at run time, so the GELU reads a view, not the Linear; moved before
    the view it is the Linear's only reader, which ``FuseLinearActivationOneDnn`` and
    ``QuantizeLinearsInt8``'s per-token kernel then apply inside the Linear's call. Conditions
    in cpp/passes/move_activation_before_reshape.h.
    """


class ChooseAttentionKernel(BuiltinTransformation):
    """A bfloat16 ``scaled_dot_product_attention`` runs fxopt's attention kernel where that
    measured faster.

    Not computation-preserving. The call's target becomes
    ``fxopt.runtime.prefill_attention.attention_bf16``, which takes the same arguments: AVX512-BF16
    dot products (``kernels/prefill_attention.h``), scores and softmax in float32, the
    probabilities rounded to bfloat16 for the weighted sum of values, as oneDNN's bfloat16
    attention does (cosine against float64 equal to ATen's bfloat16 flash attention to six
    digits); any call its kernel does not take runs ``scaled_dot_product_attention`` itself. Per
    call the kernel chooser times both at the graph's shapes; the static fallback is fxopt's
    kernel, never picked on a CPU without AVX512-BF16. Skipped with the reason: other dtypes
    (``ChangePrecision`` lowers the operands first: the ``fast`` preset runs it after), head
    sizes that are not a multiple of 16 up to 128, dropout, ATen graphs (``torch.export``'s).
    Inference only. Reverse restores the call's target.

    Measured on an AMD Zen 4 core at 128 tokens: 560 -> 233 us a MiniLM layer (12 heads of 32),
    884 -> 370 us a BERT-base layer; the whole real MiniLM under ``fast`` 21.6 -> 19.9 ms.
    """


class FoldPadInConv(BuiltinTransformation):
    """A zero padding read only by a convolution becomes the convolution's own padding.

    ``conv2d(F.pad(x, (l, l, t, t)), W, b, padding=p)`` becomes ``conv2d(x, W, b, padding=p +
    (t, l))`` (``F.pad``, ``aten.constant_pad_nd`` and ``aten.pad``, mode constant, value 0; any
    convolution form, not transposed). Models ported from TensorFlow pad each convolution's
    input explicitly ("same" padding: transformers' MobileNet, EfficientNet), often by nothing:
    every pad copies the activation and drops the channels-last layout of the convolution
    before it. Skipped with the reason: a pad wider on one side than the other (a stride-2
    "same" convolution), one with other readers or another mode or value. Reverse rebuilds the
    pad and the convolution as they were. Conditions in cpp/passes/fold_pad_in_conv.h.
    """


class ConvWeightsChannelsLast(BuiltinTransformation):
    """2-D convolution weights are stored channels-last (NHWC strides), values unchanged.

    torch gives a convolution's output the channels-last layout when its weight has it, so the
    whole network then runs in oneDNN's fast NHWC layout without converting the input. Weights
    are copied (``<path>_channels_last``); reverse points each convolution back at its original
    weight, bit for bit. Outputs match float32 within its rounding (another loop order).
    """


class SmoothLinearInputs(CalibratedPass):
    """A Linear's input is divided per channel by factors its weight's columns are multiplied by.

    Computation-preserving (float rounding only) and reversible, bit for bit: SmoothQuant's
    smoothing for int8 activations. Kernels that quantize activations with one scale per tensor
    lose the ordinary channels next to a few outlier channels; dividing the outliers by s_j and
    multiplying the weight's column j by it moves their range into the weight, which int8
    quantizes per output channel. The division is an explicit multiply before the Linear (its
    producer is shared with other readers in transformer blocks, so folding it there is not
    exact); the smoothed weight is a copy, the original stays.

    `factors` maps Linear node names to one factor per input channel. ``calibrate=True`` computes
    them instead from the inputs of :meth:`calibrate_on` (one forward run), for every Linear
    whose input's largest per-channel range exceeds `spread` times the median one:
    s_j = max|x_j|^alpha / max|W[:, j]|^(1 - alpha). Opt-in, and no preset runs it: on the real
    all-MiniLM-L6-v2 (held-out sentences, every Linear in int8) it lowered the cosine from 0.952
    to 0.938 (alpha 0.5) and 0.901 (0.65) with oneDNN's per-tensor activations, and from 0.971
    to 0.969 / 0.938 per token, though each Linear's own error fell: the error that matters
    there is in a few tokens, not channels.
    """

    def __init__(
        self,
        factors: dict[str, Sequence[float]] | None = None,
        calibrate: bool = False,
        alpha: float = 0.5,
        spread: float = 4.0,
    ) -> None:
        self._factors = {name: list(values) for name, values in (factors or {}).items()}
        self.calibrate = calibrate
        self.alpha = alpha
        self.spread = spread

    @property
    def factors(self) -> dict[str, list[float]]:
        """The factors per Linear node: given, or what the last calibration computed."""
        return self._factors

    def choose(self, graph_module: GraphModule, calibration: Inputs, held_out: Sequence[Inputs]) -> None:
        self._factors = smoothing_factors(graph_module, calibration, self.alpha, self.spread)

    def core_options(self) -> dict[str, Any]:
        return {"factors": self._factors}


class QuantizeLinearsInt8(CalibratedPass):
    """Float32 Linears become int8 matrix products with activations quantized at run time.

    Opt-in and not computation-preserving. Each Linear's weight is quantized once per output
    channel (symmetric, ``max|W[n]| / 127``; ``/ 63`` for fbgemm on a CPU without VNNI, whose
    16-bit sums would otherwise saturate, so activations keep all 8 bits) and stored as int8 next
    to the original
    (``<weight path>_int8`` and ``_int8_scale``). Which int8 kernel each Linear gets, or none,
    is measured on this CPU (``fxopt.tuning``; the report lists the choices):
    ``int8_per_token`` (every token gets its own activation scale, by fxopt's kernels around
    ``aten._int_mm``, ``fxopt.runtime.per_token_int8``: the most accurate, fast only with VNNI
    or AMX), ``int8_onednn`` / ``int8_fbgemm`` (torch's packed int8 GEMMs, one activation scale
    per call, through ``fxopt.runtime.dynamic_int8``: fbgemm the only fast int8 on AVX2-only
    CPUs), or ``float32`` where none wins. Each is one call that returns its input's dtype, so a
    bfloat16 lowering that follows leaves the int8 Linears in bfloat16 (the per-token kernel
    reads and writes it directly; the packed ones cast inside). Graphs hold plain tensors only,
    so they deep-copy and save with ``fxopt.save``. Reverse points the graph back at the
    untouched float Linears, bit for bit.

    `compare_with` is the precision a Linear left alone will run in: ``torch.bfloat16`` when a
    lowering follows (the ``fast`` preset's ``ChangePrecision``), so int8 is picked only where
    it beats that Linear on bfloat16 activations. `keep` names Linear nodes to leave in float;
    :meth:`calibrated` chooses them by measured sensitivity so that the model's outputs stay
    within a cosine bound on given inputs, and so does ``calibrate=True`` on the inputs of
    :meth:`calibrate_on` (the ``fast`` preset, when ``fxopt.optimize`` gets ``calibration=``).
    Skipped, with the reason: non-float32 or non-CPU weights.

    `outliers` (node name -> input channels; calibration finds them) are channels the int8
    kernels leave out of the int8 product and multiply in float32 instead (the weight's
    columns for them stored as ``<weight path>_int8_outliers``): a LayerNorm's output has a few
    channels many times larger than the rest, and a token's scale sized to them leaves the
    others a few levels. Where the per-token kernel is fast, a Linear with outlier channels is
    offered it only (and float): one scale per tensor serves them worse even with them set aside.

    Measured on the real all-MiniLM-L6-v2 with every Linear in int8: cosine 0.9947 per token,
    0.986 per tensor (oneDNN); per token with the outlier channels calibration finds in float
    and the rest of the graph in bfloat16 (``fast``), 0.99916 at worst over 15 held-out
    sentences. See ``docs/benchmarks.md`` for speed per CPU.
    """

    def __init__(
        self,
        keep: Sequence[str] = (),
        calibrate: bool = False,
        min_cosine: float = 0.999,
        compare_with: torch.dtype = torch.float32,
        outliers: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        if compare_with not in (torch.float32, torch.bfloat16):
            raise ValueError(f"QuantizeLinearsInt8 compares with torch.float32 or torch.bfloat16, not {compare_with}")
        # A calibration's choices: not part of the signature.
        self._keep = tuple(keep)
        self._outliers = {name: [int(c) for c in channels] for name, channels in (outliers or {}).items()}
        self._choose_only = False  # calibration's probe for the kernel choices
        self.calibrate = calibrate
        self.min_cosine = min_cosine
        self.compare_with = compare_with

    @property
    def keep(self) -> tuple[str, ...]:
        """The Linear nodes left in float: given, or what the last calibration chose."""
        return self._keep

    @property
    def outliers(self) -> dict[str, list[int]]:
        """Input channels each int8 Linear leaves to their float product: given, or what the
        last calibration found."""
        return self._outliers

    def choose(self, graph_module: GraphModule, calibration: Inputs, held_out: Sequence[Inputs]) -> None:
        chosen = _fewest_kept(graph_module, calibration, self.min_cosine, held_out, self.compare_with)
        self._keep, self._outliers = tuple(chosen.kept), chosen.outliers

    def core_options(self) -> dict[str, Any]:
        return {
            "keep": list(self._keep),
            "outliers": self._outliers,
            "outliers_per_token_only": _outliers_per_token_only(),
            "compare_with": dtype_name(self.compare_with),
            "fbgemm_weight_max": dynamic_int8.weight_max("fbgemm"),
            "onednn_weight_max": dynamic_int8.weight_max("onednn"),
            "choose_only": self._choose_only,
        }

    @classmethod
    def calibrated(
        cls,
        graph_module: GraphModule,
        inputs: Inputs,
        min_cosine: float = 0.999,
        held_out: Sequence[Inputs] = (),
    ) -> QuantizeLinearsInt8:
        """An instance that keeps in float32 the fewest, most sensitive Linears such that every
        float output of `graph_module` keeps cosine >= `min_cosine` on `inputs`, and then on each
        of the `held_out` inputs, with the outlier input channels `inputs` show (`outliers`).

        The channels, sensitivity and the cosines come from a few forward runs of the float graph
        with int8 Linears stood in (`int8_calibration`), each with the kernel the choice gives it
        here: one run for the channels, one with every Linear in int8, and where that misses the
        bound one for every Linear's sensitivity and one per step of a bisection over how many to
        keep. `graph_module` is not changed. Raises ValueError if no Linear goes int8 here.
        """
        chosen = _fewest_kept(graph_module, inputs, min_cosine, held_out, torch.float32)
        if not chosen.int8:
            raise ValueError(
                "no Linear in this graph goes int8 here (float32 weights on the CPU, and an int8 "
                "kernel this CPU runs faster than float32: see QuantizeLinearsInt8's choices)"
            )
        return cls(chosen.kept, outliers=chosen.outliers)


def _outliers_per_token_only() -> bool:
    """Whether a Linear with outlier channels is offered the per-token kernel only (and float):
    where that kernel is fast here and no pin names another int8 kernel. Elsewhere (a CPU with
    neither int8 dot products nor AVX2) the packed kernels take the outlier channels too."""
    pin = tuning.current().pins.get("int8_linear", "int8_per_token")
    return per_token_int8.available() and pin == "int8_per_token"


class _CalibratedChoice(NamedTuple):
    kept: list[str]
    """The Linears kept in float."""
    outliers: dict[str, list[int]]
    """The outlier channels of those that go int8."""
    int8: list[str]
    """The Linears that go int8."""


def _fewest_kept(
    graph_module: GraphModule,
    inputs: Inputs,
    min_cosine: float,
    held_out: Sequence[Inputs],
    compare_with: torch.dtype,
) -> _CalibratedChoice:
    """QuantizeLinearsInt8.calibrated's choice. Every Linear whose kernel choice here is float
    is kept too: the pass, given other outlier channels (only those of int8 Linears), would ask
    another query and could pick an int8 kernel no calibration checked (MobileNetV2's classifier,
    on activations of 1e-21 where fbgemm's dynamic quantization gives zeros, once went so)."""
    outliers = outlier_channels(graph_module, inputs)
    # The kernel each Linear gets here (measured, cached or pinned): calibration runs it.
    probe = QuantizeLinearsInt8(compare_with=compare_with, outliers=outliers)
    probe._choose_only = True  # the choices only: no weight quantized
    probe(sharing_copy(graph_module))
    choices = probe.report.choices if probe.report else []
    picked = {choice.node: choice.picked for choice in choices if choice.picked.startswith("int8_")}
    left_float = [choice.node for choice in choices if choice.node not in picked]
    if not picked:
        return _CalibratedChoice(left_float, {}, [])
    outliers = {name: channels for name, channels in outliers.items() if name in picked}
    calibration = Calibration(graph_module, picked, linear_stand_in(picked, outliers), inputs)
    kept = fewest_kept(calibration, min_cosine, held_out)
    int8 = [name for name in picked if name not in kept]
    return _CalibratedChoice(
        left_float + kept, {name: channels for name, channels in outliers.items() if name in int8}, int8
    )


class QuantizeConvsInt8(CalibratedPass):
    """Float32 2-D convolutions become oneDNN's int8 convolutions on activations quantized with
    calibrated scales (static quantization).

    Opt-in and not computation-preserving. Each weight is quantized once per output channel
    (symmetric, ``max|W[o]| / 127``) and stored as int8 next to the original
    (``<weight path>_int8`` and ``_int8_scale``); each convolution's input is quantized at run
    time to uint8 with the scale and zero point in `input_scales` (node name -> (scale, zero
    point)) by fxopt's kernel, and the residual add and the activation (ReLU; without an add
    also ReLU6, hardswish, SiLU) that read only its result run in the same oneDNN call
    (``fxopt.runtime.static_int8_conv``). The call returns its input's dtype, so a bfloat16
    lowering that follows leaves it in bfloat16. Whether each convolution runs faster in int8
    than as the float one it would be (`compare_with`: ``torch.bfloat16`` when a lowering
    follows; for a 1x1 or depthwise convolution also as fxopt's own kernel would run it, which
    FusePointwiseConv / FuseDepthwiseConv then give it) is measured on this CPU
    (``fxopt.tuning``; the report lists the choices), and so is which kernel runs a 1x1 one in
    int8: oneDNN's or fxopt's (``int8_fxopt``, AVX512-VNNI: ResNet-50's 1x1 convolutions took
    0.72-0.94 of oneDNN's time on a Zen 4 core, most of the gain the 25-35 us oneDNN's call
    through torch costs). Reverse points the graph back at the untouched float convolutions,
    bit for bit.

    ``calibrate=True`` computes the scales from the inputs of :meth:`calibrate_on` (the ``fast``
    preset, when ``fxopt.optimize`` gets ``calibration=``): each input's range over the
    calibration batch (static: values beyond it are clipped), then, from the measured
    sensitivity of each convolution, the fewest kept in float so that every float output keeps
    cosine >= `min_cosine` on the calibration batch and the held-out ones (`int8_calibration`).
    Skipped, with the reason: convolutions without a scale, those FuseConvActivationOneDnn
    skips, weights not float32 or not on the CPU.

    Measured on a Zen 4 (VNNI, one thread, batch 1): int8 convolutions 1.4-1.8x faster than
    oneDNN's bfloat16 ones at ResNet-50's sizes; all 53 of ResNet-50's in int8 kept cosine
    0.99986 against float32. See ``docs/benchmarks.md``.
    """

    def __init__(
        self,
        input_scales: Mapping[str, tuple[float, int]] | None = None,
        calibrate: bool = False,
        min_cosine: float = 0.999,
        compare_with: torch.dtype = torch.float32,
    ) -> None:
        if compare_with not in (torch.float32, torch.bfloat16):
            raise ValueError(f"QuantizeConvsInt8 compares with torch.float32 or torch.bfloat16, not {compare_with}")
        self._input_scales = {name: (float(s), int(z)) for name, (s, z) in (input_scales or {}).items()}
        self._choose_only = False  # calibration's probe for the kernel choices
        self.calibrate = calibrate
        self.min_cosine = min_cosine
        self.compare_with = compare_with

    @property
    def input_scales(self) -> dict[str, tuple[float, int]]:
        """The input quantization per convolution node: given, or what the last calibration chose
        (convolutions kept in float have none)."""
        return self._input_scales

    def choose(self, graph_module: GraphModule, calibration: Inputs, held_out: Sequence[Inputs]) -> None:
        probe = QuantizeConvsInt8(compare_with=self.compare_with)
        probe._choose_only = True  # the choices only: no weight quantized
        probe(sharing_copy(graph_module))
        choices = probe.report.choices if probe.report else []
        picked = [choice.node for choice in choices if choice.picked.startswith("int8_")]
        scales = input_scales(graph_module, picked, [calibration]) if picked else {}
        if not scales:
            self._input_scales = {}
            return
        run = Calibration(graph_module, list(scales), conv_stand_in(scales), calibration)
        kept = set(fewest_kept(run, self.min_cosine, held_out))
        self._input_scales = {name: scale for name, scale in scales.items() if name not in kept}

    def core_options(self) -> dict[str, Any]:
        return {
            "input_scales": {name: [scale, zero] for name, (scale, zero) in self._input_scales.items()},
            "compare_with": dtype_name(self.compare_with),
            "choose_only": self._choose_only,
        }


def int8_kernel_available() -> bool:
    """Whether any int8 kernel QuantizeLinearsInt8 may choose runs fast on this CPU and torch."""
    candidates = kernels.KERNELS["int8_linear"]
    return any(kernel.available() for name, kernel in candidates.items() if name.startswith("int8_"))


class QuantizeLinearsWeightOnly(BuiltinTransformation):
    """Float32 Linears read an int8 (or int4) copy of their weight through a weight-only kernel.

    Opt-in and not computation-preserving: weight-only int8 for decoding, where every new token
    reads every weight once and fewer bytes per weight is what makes it faster. Each weight is
    quantized once per output channel (symmetric, ``max|W[n]| / 127``) and stored next to the
    original (``<weight path>_int8wo`` and ``_int8wo_scale``); activations are not quantized,
    only cast to `activation` (``torch.bfloat16`` or ``torch.float32``) around the kernel, and
    the bias is added in float32. Leading sizes are read from the input on every call, so one
    graph serves every sequence length. Reverse points the graph back at the untouched float
    Linears, bit for bit.

    ``bits=4`` (opt-in, coarser): 4-bit weights with a scale and zero per `group_size` columns
    of a row, through ``aten._weight_int4pack_mm_for_cpu`` (bfloat16 activations) or, where it
    measures faster, fxopt's own (``fxopt.runtime.int4_weight_linear``: each activation row
    rounded to int8 inside the kernel, AVX-512 VNNI or AVX2 dot products, float16 group
    parameters); Linears whose in_features is not a multiple of `group_size` or whose
    out_features is not a multiple of 16 are skipped.

    Kernels for 8 bits, chosen per Linear by measurement (fxopt.tuning): ATen's
    ``_weight_int8pack_mm`` (activations cast to `activation`) or fxopt's own
    (``fxopt.runtime.int8_weight_linear``: float32 activations, no casts). Measured on an Intel
    Xeon with AVX512-BF16 and AMX (one thread, one token, weights not in cache as inside a
    model): ATen's 1.8-2.3x faster than a float32 Linear with bfloat16 activations and 4-5x
    slower with float32 ones (:func:`weight_only_activation` is where that dtype is chosen);
    fxopt's 3-5x faster. Skipped, with the reason: non-float32 or non-CPU weights, inputs of
    unknown rank.
    """

    def __init__(self, activation: torch.dtype = torch.bfloat16, bits: int = 8, group_size: int = 32) -> None:
        if activation not in (torch.float32, torch.bfloat16):
            raise ValueError(
                f"QuantizeLinearsWeightOnly takes torch.float32 or torch.bfloat16 activations, not {activation}"
            )
        if bits not in (8, 4):
            raise ValueError(f"QuantizeLinearsWeightOnly takes bits=8 or bits=4, not {bits}")
        self.activation = activation
        self.bits = bits
        self.group_size = group_size

    def core_options(self) -> dict[str, Any]:
        return {
            "activation": dtype_name(self.activation),
            "activation_dtype": self.activation,
            "float32_dtype": torch.float32,
            "bits": self.bits,
            "group_size": self.group_size,
        }


def weight_only_activation(bits: int = 8) -> torch.dtype | None:
    """The activation dtype of weight-only `bits`-bit Linears on this CPU, or None where none pays.

    The one place that dtype is chosen: ATen's int8 kernel with bfloat16 activations beat
    float32 Linears at every decode shape measured, with float32 activations it lost 4-5x, and
    bfloat16 is only fast where the CPU has it. Without native bfloat16, float32 where fxopt's
    own kernel for `bits` runs here (AVX2 or AVX-512), which takes float32 activations and is
    then the static choice. Whether each Linear pays at its own
    sizes, and which kernel, is measured (fxopt.tuning, ops `int8_weight_only` and
    `int4_weight_only`).
    """
    if fast_bfloat16_cpu():
        return torch.bfloat16
    op, own = ("int8_weight_only", "fxopt_int8") if bits == 8 else ("int4_weight_only", "fxopt_int4")
    return torch.float32 if kernels.KERNELS[op][own].available() else None
