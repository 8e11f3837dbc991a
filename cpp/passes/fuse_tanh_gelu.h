// FuseTanhGelu: GELU's tanh approximation written out in elementwise ops becomes one gelu call.
//
//   before:  %h = 0.5 * %x                       after:  %y = gelu(%x, approximate="tanh")
//            %c = pow(%x, 3.0)
//            %r = 0.044715 * %c
//            %q = %x + %r
//            %s = 0.7978845608028654 * %q        (sqrt(2 / pi))
//            %t = tanh(%s)
//            %p = 1.0 + %t
//            %y = %h * %p
//
// Why: transformers' "gelu_new" (GPT-2, GPT-J, CodeGen; `NewGELUActivation`) computes GELU this
// way, eight passes over the MLP's widest activation: on a Zen 4 core ([1, 128, 3072], float32)
// they took 2.2 ms where one gelu call took 0.76 ms (bfloat16: 1.2 against 0.76 ms). One call is
// also an activation FuseLinearActivationOneDnn can run inside a Linear right before it (GPT-2
// has a view in between: not fused yet).
// Matched in every dialect the arithmetic op views know (ops/arithmetic.h): either operand order
// of each sum and product, scales by multiplication or division, `x ** 3`; the constants within
// a relative 1e-6 of those above. Every intermediate value must have no other reader.
// Numerics: the same formula in one kernel (torch's gelu with approximate="tanh"): float32
// rounding, ~1e-7 relative.
// Reverse rebuilds the captured nodes (rewrite/capture.h): exact.
#pragma once

#include "rewrite/pass.h"

namespace fxopt {

class FuseTanhGelu final : public Pass {
 public:
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;
};

}  // namespace fxopt
