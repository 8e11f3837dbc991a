// MoveActivationBeforeReshape: an activation that reads a reshape of a Linear's result runs on
// the Linear's result itself, before the reshape.
//
//   before:  %h = linear(%x2, %w, %b)        after:  %h = linear(%x2, %w, %b)
//            %v = view(%h, %size)                    %a = gelu(%h)
//            %y = gelu(%v)                           %v = view(%a, %size)   (%y's readers)
//
// Why: GPT-2's Conv1D flattens its input and views the product back to [batch, seq, features];
// in a Dynamo graph the sizes are computed at run time, so RecognizeLinears keeps the views,
// and the GELU then reads a view instead of the Linear. Moved before the view, the activation is
// the Linear's only reader again: FuseLinearActivationOneDnn or QuantizeLinearsInt8's
// per-token kernel apply it inside the Linear's call (GPT-2's GELU alone took 0.78 ms a layer in
// bfloat16 on a Zen 4 core, batch 1, 128 tokens).
// Conditions: an out-of-place activation (ops/activation.h) whose input is a reshape
// (ops/reshape.h) of a Linear (every dialect, ops/linear.h), the reshape read by the activation
// only. An elementwise op commutes with a reshape: values are the same bits.
// Reverse puts the captured activation back after the reshape, reading it, and removes the
// moved one: exact.
#pragma once

#include "rewrite/pass.h"

namespace fxopt {

class MoveActivationBeforeReshape final : public Pass {
 public:
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;
};

}  // namespace fxopt
