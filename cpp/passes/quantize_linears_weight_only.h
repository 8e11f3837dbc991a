// QuantizeLinearsWeightOnly: a float32 Linear reads an int8 copy of its weight (per-channel
// scales) or an int4 one (per-group scales and zeros) through ATen's weight-only CPU kernels;
// activations stay floating point (opt-in; not computation-preserving).
//
//   before:  %y = linear(%x, %w, %b)
//   after:   %xa = aten._to_copy(%x, dtype=<activation>)          (only for bfloat16 activations)
//            %x2 = aten.reshape(%xa, [-1, K])                       (only if x is not 2-D)
//            %y2 = aten._weight_int8pack_mm(%x2, %w_int8, %w_scale)
//            %y3 = aten._to_copy(%y2, dtype=torch.float32)          (only for bfloat16 activations)
//            %y4 = aten.add(%y3, %b)                                (only with a bias)
//            %y  = aten.reshape(%y4, [sym_size(%x, 0), ..., N])    (only if x is not 2-D)
// with w_int8 = round(W / w_scale) ([N, K] int8), w_scale = max |W[n]| / 127 in the activation
// dtype (the kernel wants both in one dtype), computed once (TensorOps::quantize_rows_int8) and
// stored next to the weight (`<weight path>_int8wo`, `<weight path>_int8wo_scale`). With 4 bits
// the product is aten._weight_int4pack_mm_for_cpu(%x2, %w_int4, group_size, %scales_and_zeros)
// (TensorOps::quantize_groups_int4; `_int4wo`, `_int4wo_scale_zeros`). The original weight
// stays registered, so reverse is exact. The bias is added in float32, unquantized.
//
// Why weight-only: decoding one token at a time is memory-bound (every weight is read once per
// token), so a quarter of the bytes is the lever; the error stays that of the weights alone
// (activations are not rounded to int8). Leading sizes are read with aten.sym_size on every
// call, never taken from a recorded shape, so one graph serves every sequence and cache length.
//
// Measured on an Intel Xeon with AVX512-VNNI, AVX512-BF16 and AMX (one thread, one token, median
// of 5; docs/benchmarks.md): with bfloat16 activations 768x768 0.031 ms vs 0.064 float32,
// 768x2048 0.083 vs 0.235, 768x32000 1.45 vs 4.84 (2.1-3.3x faster); with float32 activations
// the kernel is 4-5x *slower* than float32 (0.35 / 0.91 / 19.3 ms). So the activation dtype is
// an option, and the decode preset picks bfloat16 only where the CPU has it natively.
// Kernel choice (tuning/chooser.h), per 8-bit Linear: "float32" (leave it), "int8_weight_only"
// (the chain above) or "fxopt_int8": fxopt's own kernel (kernels/int8_weight_mm.h, called as
// fxopt.runtime.int8_weight_linear.int8_weight_linear(%x, %w_int8, %w_scale) in place of the
// reshapes and _weight_int8pack_mm) with float32 activations and scales, so without the casts,
// on x of any rank; it streams the int8 weight at float32's memory
// speed (3-5x float32 at one token on that Xeon, where _weight_int8pack_mm gives 1.7-2.3x).
// Each is timed at the Linear's own sizes; the static fallback is "int8_weight_only" with
// bfloat16 activations, "fxopt_int8" with float32 ones (CPUs without native bfloat16).
// Per 4-bit Linear likewise: "float32", "int4_weight_only" (ATen's, above) or "fxopt_int4":
// fxopt's own (kernels/int4_weight_mm.h) as
// fxopt.runtime.int4_weight_linear.int4_weight_linear(%x, %w_int4, %w_scale_min), float32
// activations of any rank (the kernel rounds each row to int8 and multiplies with AVX-512 VNNI
// or AVX2 byte products), the weight packed two values per byte in the kernel's layout and a float16 scale and
// minimum per group ([N, 2, K / group]; TensorOps::quantize_groups_int4 with
// Int4Layout::kFxopt). The static fallback is ATen's with bfloat16 activations, fxopt's with
// float32 ones; each kernel is offered only where it can take the Linear.
//
// Options: "activation" ("float32" or "bfloat16"), "activation_dtype" and "float32_dtype" (the
// torch dtype objects the casts pass on, opaque to the core; needed for bfloat16), "bits" (8,
// the default, or 4) and "group_size" (int4: columns per scale, default 32). Skips, with the
// reason: weights not float32 or not on the CPU, inputs of unknown rank; for int4, in_features
// not a multiple of group_size, or neither kernel's shape (out_features a multiple of 16 for
// ATen's packing, group_size of 32 for fxopt's kernel).
#pragma once

#include <string>

#include "rewrite/pass.h"

namespace fxopt {

class QuantizeLinearsWeightOnly final : public Pass {
 public:
  // `activation`: "float32" (no casts; the dtype objects are unused) or "bfloat16"; `bits`: 8
  // or 4 (then `group_size` columns share a scale and zero).
  QuantizeLinearsWeightOnly(std::string activation, Arg activation_dtype, Arg float32_dtype,
                            int bits = 8, int64_t group_size = 32);
  // From the options above; throws std::invalid_argument if malformed.
  static std::unique_ptr<Pass> from_options(const Dict& options);
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;

 private:
  std::string activation_;
  Arg activation_dtype_, float32_dtype_;
  int bits_;
  int64_t group_size_;
};

}  // namespace fxopt
