// QuantizeLinearsInt8: a float32 Linear becomes an int8 matrix product with dynamically
// quantized activations and per-channel weight scales (opt-in; not computation-preserving).
// Which int8 kernel, or none, is a choice measured per Linear on this CPU (tuning/chooser.h):
//
// "int8_per_token", fxopt's kernel with one activation scale per token around aten._int_mm,
// which also applies the activation that is the Linear's only reader (relu, gelu, gelu_tanh,
// silu: one pass less over the result, which a fused oneDNN Linear would otherwise save):
//   before:  %h = linear(%x, %w, %b)
//            %y = gelu(%h)
//   after:   %y = fxopt.runtime.per_token_int8.per_token_int8_linear(%x, %w_int8, %w_int8_scale,
//                                                                  %b, "gelu")
// "int8_onednn" / "int8_fbgemm", torch's packed int8 GEMMs with one 8-bit activation scale and
// zero point per call:
//   after:   %y = fxopt.runtime.dynamic_int8.dynamic_int8_linear(%x, %w_int8, %w_int8_scale,
//                                                                %b, "onednn" | "fbgemm")
// Both take x of any rank and float dtype and return its dtype: a lowering that follows
// (ChangePrecision) leaves them in the activations' dtype, their scales and bias in float32
// (ops/dtype_flow.h); the per-token kernel reads and writes bfloat16 itself, the packed ones
// cast to float32 and back inside the call.
// with w_scale = max |W[n]| / 127 and w_int8 = round(W / w_scale) (transposed to [K, N] for
// _int_mm), or / the engine's weight maximum for the packed kernels' weights, computed once (TensorOps::quantize_rows_int8) and stored next to the weight
// (`<weight path>_int8`, `<weight path>_int8_scale`); the original weight stays registered, so
// reverse is exact. The packed kernels' weight layout is an object, not a tensor: the runtime
// function packs the stored int8 values on first use, so graphs hold plain tensors only.
//
// Why both: per-token scales keep outlier tokens from flattening every other row (the real
// all-MiniLM-L6-v2 with every Linear in int8: cosine 0.9947 per token, 0.986 per tensor); the
// packed kernels were several times faster than per-token scales computed in ATen ops (Intel
// Xeon with AMX, 128x768x3072: 0.42 ms oneDNN, 1.39 ms that chain, 4.0 ms float32), which
// fxopt's own quantize and dequantize kernels now replace, and are the only fast int8 on a CPU
// without VNNI (fbgemm: 1.6-1.8x float32 on a Zen 3, where
// aten._int_mm took 112 ms against 2.3 ms float32). Which Linears stay in float for accuracy is
// the calibration's answer (option "keep"), on the arithmetic of the kernel each one got.
//
// Without VNNI, fbgemm adds pairs of unsigned-by-signed 8-bit products in 16 bits (vpmaddubsw),
// which saturate unless 255 * 2 * max|w_int8| fits: weights of at most 63 levels keep its sums
// exact with full 8-bit activations, where torch's answer (7-bit activations, "reduce_range")
// costs more accuracy (the real all-MiniLM-L6-v2 at cosine 0.999, on a CPU capped at AVX2:
// 19 of 37 Linears kept in float32 against 32).
//
// Outlier channels (option "outliers", from calibration): a few input channels of a Linear
// whose range is many times the median channel's (a LayerNorm's output in BERT: 7-28x in
// all-MiniLM-L6-v2) would size every token's (or the tensor's) scale; the int8 kernels quantize
// them as zeros and add their float32 product instead (LLM.int8's decomposition, channels
// fixed):
//   after:   %y = per_token_int8_linear(%x, %w_int8, %w_int8_scale, %b, "none" | activation,
//                                       [c0, c1, ...], %w_int8_outliers)
//            %y = dynamic_int8_linear(%x, %w_int8, %w_int8_scale, %b, engine, [c0, c1, ...],
//                                     %w_int8_outliers)
// with the weight's columns for them zeroed before it is quantized (its scales fit the other
// channels) and W[:, [c0, c1, ...]] stored transposed as `<weight path>_int8_outliers`
// ([channels, N] float32). One scale per tensor serves such channels worst even so, so with
// "outliers_per_token_only" (the default; calibration clears it where the per-token kernel is
// not fast, as on an AVX2-only CPU) a Linear with outlier channels chooses between the
// per-token kernel and the float Linear only.
//
// Options: "keep" (names of Linear
// nodes left in float32; see fxopt.optimization.QuantizeLinearsInt8.calibrated),
// "outliers" ({Linear node name: [input channel, ...]}; a channel outside the Linear's inputs
// skips it, with the reason), "outliers_per_token_only" (true),
// "fbgemm_weight_max" and "onednn_weight_max" (127, or 63 where the engine adds pairs of
// u8 x s8 products in 16 bits: a CPU without VNNI), "choose_only" (true: every Linear is
// skipped once its kernel is chosen, so the choices are known without quantizing a weight: what
// int8 calibration needs before it runs) and
// "compare_with" ("float32" or "bfloat16": the precision a Linear left as it is will run in,
// bfloat16 when a lowering follows; the query's dtype, so the int8 kernels are timed against
// that Linear, on activations of that dtype, the packed ones with their casts). Skips,
// with the reason: Linears whose weight is not float32 or not on the CPU. Candidates, in order: "float32" or "bfloat16" (leave it, as "compare_with" says it will
// run), "int8_per_token" (the static fallback), "int8_onednn",
// "int8_fbgemm"; the Python chooser never offers a kernel this CPU and torch
// cannot run fast (aten._int_mm without VNNI or AMX, an engine torch lacks).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "passes/linear_chain.h"
#include "rewrite/pass.h"

namespace fxopt {

// The largest |value| each packed engine's int8 weights get (see "fbgemm_weight_max").
struct PackedWeightMax {
  int onednn = 127;
  int fbgemm = 127;
};

class QuantizeLinearsInt8 final : public Pass {
 public:
  explicit QuantizeLinearsInt8(std::vector<std::string> keep, std::string compare_with = "float32",
                               PackedWeightMax weight_max = {}, bool choose_only = false,
                               std::map<std::string, std::vector<int64_t>> outliers = {},
                               bool outliers_per_token_only = true);
  // From the options {"keep": [node name, ...], "compare_with": dtype,
  // "fbgemm_weight_max": int, "onednn_weight_max": int, "choose_only": bool, "outliers": {node name: [channel, ...]},
  // "outliers_per_token_only": bool}; throws std::invalid_argument if malformed.
  static std::unique_ptr<Pass> from_options(const Dict& options);
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;

 private:
  std::vector<std::string> keep_;
  std::string compare_with_;
  PackedWeightMax weight_max_;
  bool choose_only_;
  std::map<std::string, std::vector<int64_t>> outliers_;
  bool outliers_per_token_only_;
};

}  // namespace fxopt
