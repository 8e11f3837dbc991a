// EliminateDeadCode: nodes whose value nothing reads, and whose call has no other effect, go.
//
//   before:  %size = x.size(0)          after:  %y = relu(%x)
//            %t = %size * 2                     return %y
//            %y = relu(%x)
//            return %y
//
// Nodes are visited last to first, so a chain whose end is unused dies in one run. Never
// removed (ops/effects.h): placeholders, the output, in-place ops, random ops (removing one would
// shift the random stream), runtime checks (RemoveRuntimeAsserts removes those on request),
// prints and grad-mode / autocast switches, and calls of modules not known to be pure (only
// torch.nn's Linear, convolution, normalization, activation, dropout, embedding, pooling,
// padding and shape modules count as pure; a batch norm only in eval mode). Python functions
// fxopt does not know count as pure, as in torch.fx's own eliminate_dead_code. Unused get_attr
// reads go too; the parameters they read stay registered.
// Reverse puts every node back with its name, arguments and position (rewrite/removal.h).
// Not a speed lever by itself (unused ATen calls on sizes cost microseconds); it tidies what
// other passes and torch.export leave behind, e.g. 4 nodes of an unused attention-mask
// expression in transformers-5 BERT export graphs.
#pragma once

#include "rewrite/pass.h"

namespace fxopt {

class EliminateDeadCode final : public Pass {
 public:
  std::vector<Trigger> triggers() const override { return {}; }
  Visit visit() const override { return Visit::AllNodesBackwards; }
  void rewrite(PassContext& ctx, Node* node) const override;
};

}  // namespace fxopt
