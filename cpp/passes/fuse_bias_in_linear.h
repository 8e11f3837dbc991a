// FuseBiasInLinear: the bias moves into the weight as one more input column, and the input gets
// a matching column of ones (optimum's FuseBiasInLinear).
//
//   before:  %y = linear(%x, W, b)        after:  %x1 = pad(%x, (0, 1), value=1.0)
//            %z = linear(%x, V, c)                %y = linear(%x1, [W | b])
//                                                 %z = linear(%x1, [V | c])
//
// x1 = cat([x, ones(..., 1)], -1), written as one constant pad of the last dimension, so it
// has x's dtype and device whatever they are at run time (aten.constant_pad_nd in exported
// graphs). One x1 is shared by every Linear of this pass reading the same x. The Linear keeps
// its node, name and users; its module is replaced by a copy with in_features + 1 and no bias
// (or its weight attribute by [W | b] and the bias get_attr removed). The caller's model keeps
// its parameters untouched.
//
// Preconditions: the Linear has a bias; bias and weight agree in requires_grad and
// parameter-ness (they become one tensor); its module / tensors are read by it alone.
// Numerics: the bias is now added inside the GEMM's accumulation instead of after it: float
// rounding differences only (3e-6 max abs on all-MiniLM-L6-v2's output).
// Cost: one extra input column and a pad per distinct input. Measured (bench/linear_passes.py,
// all-MiniLM-L6-v2 exported, CPU, 1 thread): 4-6% slower at 8x128 tokens, within noise at
// 1x16. It is a building block (bias-free matmuls for backends that want them), not a speedup.
// Reversal: the record (plain values: the spelling, paths, get_attr names) lets reverse split
// the current [W | b] back into W and b, wherever and in whatever dtype it now lives; the ones
// column is erased with its last reader. Reverse is exact.
#pragma once

#include <optional>

#include "ops/tied_tensors.h"
#include "rewrite/pass.h"

namespace fxopt {

class FuseBiasInLinear final : public Pass {
 public:
  std::vector<Trigger> triggers() const override;
  void begin(const Program& program) const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;

 private:
  mutable std::optional<TiedTensors> tied_;  // of the run's program, from begin()
};

}  // namespace fxopt
