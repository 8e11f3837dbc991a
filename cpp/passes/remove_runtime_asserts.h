// RemoveRuntimeAsserts (opt-in): the runtime checks torch.export leaves in a graph go, with the
// values that only fed them.
//
//   before:  %s = aten.sym_size.int(%x, 0)               after:  %y = aten.relu(%x)
//            %ge = %s >= 2
//            %a = aten._assert_scalar(%ge, "...")
//            %y = aten.relu(%x)
//
// Checks (ops/effects.h): aten._assert_async, aten._assert_scalar, aten._assert_tensor_metadata,
// aten.sym_constrain_range(_for_size), torch._assert, torch._check*, and the `_guards_fn` module
// call of torch.export graphs (torch.export._unlift.GuardsFn), which checks the input shapes.
// After a check goes, each value it read that nothing else reads and that has no side effect
// goes too, recursively up its producers (O(size of the removed expression)).
// A check whose result is read (a functional assert's token) is skipped.
// Computation: unchanged for valid inputs; for inputs that break the assumptions torch.export
// recorded, the graph no longer raises and may return garbage or fail later, so it is not in
// the presets. Reverse puts every check and every value back (rewrite/removal.h).
// Measured: not a speed lever on its own (3-4 metadata checks per 2-layer BERT / GPT-2 graph).
#pragma once

#include "rewrite/pass.h"

namespace fxopt {

class RemoveRuntimeAsserts final : public Pass {
 public:
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* node) const override;
};

}  // namespace fxopt
