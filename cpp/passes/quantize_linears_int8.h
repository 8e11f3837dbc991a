// QuantizeLinearsInt8: a float32 Linear becomes an int8 matrix product with dynamic per-token
// activation scales and per-channel weight scales (opt-in; not computation-preserving).
//
//   before:  %y = linear(%x, %w, %b)
//   after:   %x2 = aten.reshape(%x, [-1, K])                  (only if x is not 2-D)
//            %s  = aten.clamp_min(aten.amax(aten.abs(%x2), [-1], True) / 127, FLT_MIN)
//            %q  = aten._to_copy(aten.round(%x2 / %s), dtype=torch.int8)
//            %y2 = aten._int_mm(%q, %w_int8) * %s * %w_int8_scale + %b
//            %y  = aten.reshape(%y2, [*x.shape[:-1], N])       (only if x is not 2-D)
// with w_int8 = round(W / w_scale)ᵀ ([K, N] int8) and w_scale = max |W[n]| / 127, computed once
// (TensorOps::quantize_rows_int8) and stored next to the weight (`<weight path>_int8`,
// `<weight path>_int8_scale`); the original weight stays registered, so reverse is exact.
//
// Why per token: one scale per row of x (not one per tensor, as torch.ao's dynamic Linear and
// ONNX Runtime's quantize_dynamic use) keeps outlier tokens from flattening every other row.
// On the real all-MiniLM-L6-v2 (seq 128) per-token int8 on every Linear keeps cosine 0.9947
// against float32 where per-tensor activations fall to 0.942. The ops are plain ATen calls on
// plain tensors in every dialect (there is no module- or torch-level spelling of an int8
// matmul), so DeepCopy, torch.save and loading without fxopt keep working; aten._int_mm runs
// VNNI kernels where the CPU has them.
//
// Options: "int8" (the torch.int8 dtype object, opaque to the core) and "keep" (names of
// Linear nodes left in float32: the sensitive layers a calibration found, see
// fxopt.optimization.QuantizeLinearsInt8.calibrate). Skips, with the reason: Linears whose
// weight is not float32 or not on the CPU, inputs of unknown rank.
// Kernel choice (tuning/chooser.h), per Linear: "float32" (leave it) or "int8_per_token"; the
// static fallback quantizes. aten._int_mm has fast kernels only with VNNI or AMX (without them,
// 128x384x1536 took 112 ms against 2.3 ms in float32 on a Zen 3): the Python chooser never picks
// it on such a CPU, tuned or not.
// Measured (bench/latency.py, Intel Xeon with AVX512-VNNI and no native bf16, one thread, batch
// 1, seq 128, 9 interleaved rounds, speedup over eager fp32 with per-round range): MiniLM (real)
// 1.33x (0.72-1.75, within the noise of that run) at cosine 0.9947; BERT-base 1.70x (1.56-1.84),
// cosine 0.99972; GPT-2 1.80x (1.36-2.01), cosine 0.99942. One 384x1536 Linear at 128 tokens:
// 1.34 ms float32, 0.76 ms here.
#pragma once

#include <string>
#include <vector>

#include "rewrite/pass.h"

namespace fxopt {

class QuantizeLinearsInt8 final : public Pass {
 public:
  QuantizeLinearsInt8(Arg int8_dtype, std::vector<std::string> keep);
  // From the options {"int8": torch.int8, "keep": [node name, ...]}; throws
  // std::invalid_argument if malformed.
  static std::unique_ptr<Pass> from_options(const Dict& options);
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;

 private:
  Arg int8_dtype_;
  std::vector<std::string> keep_;
};

}  // namespace fxopt
