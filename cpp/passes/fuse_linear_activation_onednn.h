// FuseLinearActivationOneDnn: a Linear, and the activation that is its only reader, become one
// call of oneDNN's fused linear (torch.ops.mkldnn._linear_pointwise) on a weight packed once.
//
//   before:  %h = linear(%x, %w, %b)        after:  %y = fxopt.runtime.onednn_linear.
//            %y = gelu(%h)                                 linear_pointwise(%x, %w, %b,
//                                                                   "gelu", [], "none")
//
// Linears in every dialect (the Linear op view): a module's weight and bias are read through
// get_attr nodes (`fc.weight`), the functional forms' get_attr operands are reused. Fused
// activations (ops/activation.h names -> oneDNN attr): relu, gelu ("gelu", algorithm "none"),
// gelu_tanh ("gelu", "tanh"), silu ("swish"), sigmoid, tanh, hardswish, relu6 ("hardtanh",
// [0, 6]). Any other reader (mish, a residual add, a cast back after ChangePrecision) leaves the
// activation alone and the Linear becomes the op with attr "none".
// The graph keeps plain weights: reordered weights are opaque tensors that copy.deepcopy and
// torch.save refuse, which would break DeepCopy, inplace=False and saving. The Python target
// (python/fxopt/runtime/onednn_linear.py) packs each weight into oneDNN's layout on its first
// call (mkldnn._reorder_linear_weight, for any row count) and keeps it while the weight lives
// unchanged: oneDNN would otherwise reorder a plain weight on every call (5-12% of a Linear at
// 128 rows, 40% at one row, bfloat16 on a Zen 4), with the same results up to rounding.
// Availability is decided in Python, where torch is: option "dtypes" lists the weight dtypes
// the running torch and CPU may fuse (float32 where the op exists and oneDNN is enabled,
// bfloat16 where oneDNN runs it natively); other Linears, and those not on the CPU, are skipped
// with the reason.
// Kernel choice (tuning/chooser.h), per Linear: "aten" (leave it), "onednn" (the op with attr
// "none", the activation left as it is) or "onednn_fused" (with the activation); the static
// fallback, when nothing was measured, is the most fused form. Measured on one CPU the same
// rewrite won at one shape and lost at the next (Zen 3: fused Linear+GELU 1.18-1.34x slower than
// ATen at MiniLM/BERT shapes, GPT-2's 768x50257 head in 0.61x of ATen's time).
// The op takes inputs of any rank (1-D to 4-D tried), non-contiguous inputs and weights, and a
// None bias; float16 and float64 fail in oneDNN, hence the dtype list.
// Numerics: oneDNN's GEMM sums in another order than MKL's (and its GELU / swish differ in the
// last bits): expect ~1e-6 relative in float32, bfloat16 rounding in bfloat16.
// Caveat: the op has no autograd formula: the transformed graph is for inference only.
// Reverse rebuilds the captured Linear and activation (rewrite/capture.h); the weights were
// never changed, so it is exact.
// Measured on AMD EPYC Zen 4 (avx512_bf16), oneDNN sgemm vs MKL: torch.export graphs, one
// thread, batch 1, seq 128, interleaved rounds (15-40), shared 2-core machine (load ~2), median
// (min / max) ms; bf16 = ChangePrecision(bfloat16) first:
//   model            fp32         + this pass          bf16          bf16 + this pass
//   MiniLM (real)    45.8 (42-93) 41.3 (39-79) 1.11x   27.8 (24-54)  26.0 (24-53) +7% (min +1%)
//   BERT-base        337 (285-437) 281 (253-312) 1.20x 162 (150-219) 164 (144-185) +-0 (min +4%)
//   GPT-2 (*)        626 (503-646) 424 (388-438) 1.48x 258 (228-304) 248 (220-294) +4%
// (*) after RecognizeLinears: all 49 Linears, incl. the 768 x 50257 lm_head, which gains most.
// Error vs fp32 eager: <= 1.5e-6 relative in float32. It pays in float32 (1.1-1.5x); on top of
// bfloat16 the gain is within the noise of this machine (0-7% median, 0-4% best case).
#pragma once

#include <string>
#include <vector>

#include "rewrite/pass.h"

namespace fxopt {

class FuseLinearActivationOneDnn final : public Pass {
 public:
  explicit FuseLinearActivationOneDnn(std::vector<std::string> dtypes);
  // From the options {"dtypes": [name, ...]}; throws std::invalid_argument if malformed.
  static std::unique_ptr<Pass> from_options(const Dict& options);
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;

 private:
  std::vector<std::string> dtypes_;
};

}  // namespace fxopt
