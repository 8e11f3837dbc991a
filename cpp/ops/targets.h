// Targets the op views recognise, spelled the way the bridge names them: fx's qualified name
// for Python callables, `str(op)` for ATen overloads, the method name for call_method.
#pragma once

#include <cstddef>

#include "ir/symbol.h"

namespace fxopt::targets {

inline const Symbol kOperatorTrueDiv = Symbol::intern("_operator.truediv");
inline const Symbol kOperatorMul = Symbol::intern("_operator.mul");
inline const Symbol kTorchDiv = Symbol::intern("torch.div");
inline const Symbol kTorchTrueDivide = Symbol::intern("torch.true_divide");
inline const Symbol kTorchMul = Symbol::intern("torch.mul");
inline const Symbol kMethodDiv = Symbol::intern("div");
inline const Symbol kMethodDivInplace = Symbol::intern("div_");
inline const Symbol kMethodTrueDivide = Symbol::intern("true_divide");
inline const Symbol kMethodMul = Symbol::intern("mul");
inline const Symbol kMethodMulInplace = Symbol::intern("mul_");
inline const Symbol kAtenDivTensor = Symbol::intern("aten.div.Tensor");
inline const Symbol kAtenDivScalar = Symbol::intern("aten.div.Scalar");
inline const Symbol kAtenMulTensor = Symbol::intern("aten.mul.Tensor");
inline const Symbol kAtenMulScalar = Symbol::intern("aten.mul.Scalar");
inline const Symbol kLinearModule = Symbol::intern("torch.nn.modules.linear.Linear");
inline const Symbol kNonDynamicallyQuantizableLinearModule =
    Symbol::intern("torch.nn.modules.linear.NonDynamicallyQuantizableLinear");
inline const Symbol kFunctionalLinear = Symbol::intern("torch._C._nn.linear");
inline const Symbol kAtenLinear = Symbol::intern("aten.linear.default");
inline const Symbol kTorchNarrow = Symbol::intern("torch.narrow");
inline const Symbol kAtenSliceTensor = Symbol::intern("aten.slice.Tensor");
inline const Symbol kFunctionalPad = Symbol::intern("torch.nn.functional.pad");
inline const Symbol kAtenConstantPadNd = Symbol::intern("aten.constant_pad_nd.default");
// Decomposed Linears (ops/decomposed_linear.h) and oneDNN's fused linear.
inline const Symbol kTorchAddmm = Symbol::intern("torch.addmm");
inline const Symbol kAtenAddmm = Symbol::intern("aten.addmm.default");
inline const Symbol kMethodAddmm = Symbol::intern("addmm");
// The Python function that packs a Linear's weight once and runs oneDNN's fused linear
// (python/fxopt/runtime/onednn_linear.py).
inline const Symbol kOnednnLinearPointwise =
    Symbol::intern("fxopt.runtime.onednn_linear.linear_pointwise");
// fxopt's bfloat16 attention with scaled_dot_product_attention's signature
// (python/fxopt/runtime/prefill_attention.py).
inline const Symbol kPrefillAttentionBf16 =
    Symbol::intern("fxopt.runtime.prefill_attention.attention_bf16");
// Its float32 counterpart (AVX2 with FMA), same signature.
inline const Symbol kPrefillAttentionF32 =
    Symbol::intern("fxopt.runtime.prefill_attention.attention_f32");

// QuantizeLinearsInt8's calls: fxopt's per-token int8 Linear and torch's packed int8 GEMMs
// (python/fxopt/runtime/per_token_int8.py, dynamic_int8.py).
inline const Symbol kPerTokenInt8Linear =
    Symbol::intern("fxopt.runtime.per_token_int8.per_token_int8_linear");
inline const Symbol kDynamicInt8Linear =
    Symbol::intern("fxopt.runtime.dynamic_int8.dynamic_int8_linear");
// QuantizeLinearsWeightOnly's calls of fxopt's own weight-only kernels (kernels/int8_weight_mm.h,
// int4_weight_mm.h through python/fxopt/runtime/int8_weight_linear.py, int4_weight_linear.py).
inline const Symbol kInt8WeightLinear =
    Symbol::intern("fxopt.runtime.int8_weight_linear.int8_weight_linear");
inline const Symbol kInt4WeightLinear =
    Symbol::intern("fxopt.runtime.int4_weight_linear.int4_weight_linear");
// QuantizeConvsInt8's call: oneDNN's int8 convolution on activations quantized with calibrated
// scales (python/fxopt/runtime/static_int8_conv.py).
inline const Symbol kInt8Conv2d = Symbol::intern("fxopt.runtime.static_int8_conv.int8_conv2d");
// Its argument that is true where nothing else reads the residual, so the call adds into it,
// and its last: which kernel runs the product ("onednn" or "fxopt").
inline constexpr size_t kInt8Conv2dResidualDies = 14;
inline constexpr size_t kInt8Conv2dKernel = 15;

}  // namespace fxopt::targets
