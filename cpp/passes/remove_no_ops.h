// RemoveNoOps: calls that return their input unchanged go; their users read the input.
//
//   before:  %d = aten.dropout(%h, 0.1, False)      after:  %y = aten.linear(%h, %w, %b)
//            %y = aten.linear(%d, %w, %b)
//
// What counts as a no-op, in every dialect, is the no-op view's (ops/no_op.h): dropout in eval
// mode or with p = 0, nn.Identity, clone, detach, alias, contiguous after a Linear / matmul /
// embedding, a cast to the dtype (and device) the value already has, and view / reshape / expand
// to the shape it already has. Dtypes, devices and shapes must be recorded by fx (torch.export
// records them; run ShapeProp on a symbolic trace for dtypes and shapes), or named by the call.
// Preconditions for copies (clone, _to_copy, to(copy=True)), which a reader could otherwise tell
// apart from their input: neither the copy nor its input is written in place anywhere (the
// in-place op would then reach the other one; ops/effects.h), and the graph does not return the
// copy (it would return an alias of its input instead).
// Numerics: identical; detach is removed too, so only use the result where no gradients flow
// (inference graphs). Reverse puts every node back (rewrite/removal.h).
// Measured: not a speed lever on its own (eval-mode dropout and same-dtype casts already return
// their input in eager PyTorch); it removes 5 dropout calls per 2-layer BERT / GPT-2 export graph
// and lets pattern passes (attention, Linear recognition) see through them.
#pragma once

#include <optional>
#include <unordered_set>

#include "ops/value_dtype.h"
#include "rewrite/pass.h"

namespace fxopt {

class RemoveNoOps final : public Pass {
 public:
  std::vector<Trigger> triggers() const override;
  void begin(const Program& program) const override;
  void rewrite(PassContext& ctx, Node* node) const override;

 private:
  mutable std::unordered_set<const Node*> written_;  // per run: values written in place
  mutable std::optional<ValueDtypes> dtypes_;        // per run: the dtypes as the graph runs
};

}  // namespace fxopt
