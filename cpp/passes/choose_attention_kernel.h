// ChooseAttentionKernel: a bfloat16 or float32 scaled_dot_product_attention call runs fxopt's
// attention kernel for its dtype where that measured faster (not computation-preserving: another
// summation order; in bfloat16 the probabilities are rounded to bfloat16 for the weighted sum of
// values, as oneDNN's bfloat16 attention rounds them).
//
//   before:  %o = torch._C._nn.scaled_dot_product_attention(%q, %k, %v, attn_mask=%m, scale=s)
//   after:   %o = fxopt.runtime.prefill_attention.attention_bf16(%q, %k, %v, attn_mask=%m, scale=s)
//            (attention_f32 for float32 operands)
//
// The call keeps its name, operands and readers; only its target changes (the runtime functions
// take scaled_dot_product_attention's arguments and run it themselves for calls their kernel
// does not take). Why: on a Zen 4 core ATen's flash attention for CPU took 560 us a layer of the
// real MiniLM in bfloat16 (12 heads of 32 over 128 tokens) and the kernel 233 us; the whole
// MiniLM under `fast` 21.6 -> 19.9 ms, BERT-base 144 -> 136 ms. In float32 ATen's took 432-457 us
// and converted the model's boolean mask at every layer, the AVX2 kernel 374-379 us with the
// mask converted once a forward (cpp/kernels/prefill_attention.h).
//
// The chooser is asked `attention`, shape {batch, heads, kv_heads, rows, keys, head size} (-1
// where symbolic), dtype bfloat16 or float32, variant "mask", "causal" or "none", candidates
// {sdpa, fxopt_bf16} or {sdpa, fxopt_f32}. The static fallback is fxopt_bf16 for bfloat16 (the
// chooser never picks it on a CPU without AVX512-BF16) and sdpa for float32 (a float32 graph is
// `default`'s, which changes nothing it did not measure).
// Preconditions, each skipped with its reason otherwise: a torch-level call (an ATen graph is
// torch.export's, which holds ATen ops only), operands all bfloat16 or all float32
// (ops/value_dtype.h: the facts fx recorded predate the lowering) of known rank 4, on the CPU
// where the device is known, a head size the kernel takes (bfloat16: a multiple of 16 up to
// 128; float32: of 8 up to 256), no dropout. A graph without recorded sizes (a symbolic trace
// that never ran) gets no rewrite.
// Reverse gives the call its original target back.
#pragma once

#include <optional>

#include "ops/value_dtype.h"
#include "rewrite/pass.h"

namespace fxopt {

class ChooseAttentionKernel final : public Pass {
 public:
  std::vector<Trigger> triggers() const override;
  // The operands' dtypes as the graph runs them (ops/value_dtype.h): a lowering's are stale.
  void begin(const Program& program) const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;

 private:
  mutable std::optional<ValueDtypes> dtypes_;
};

}  // namespace fxopt
