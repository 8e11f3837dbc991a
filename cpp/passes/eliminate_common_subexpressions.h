// EliminateCommonSubexpressions: a call that repeats an earlier one (same kind, target,
// arguments and keyword arguments, node references compared by identity) is dropped and its
// users read the earlier result.
//
//   before:  %a = aten.arange(%n, device=cpu)        after:  %a = aten.arange(%n, device=cpu)
//            %b = aten.add(%a, 0)                            %b = aten.add(%a, 0)
//            %c = aten.arange(%n, device=cpu)                %d = aten.unsqueeze(%b, 0)
//            %d = aten.add(%c, 0)                            ... reads %b where it read %d
//            ... reads %d
//
// One pass in graph order with a hash of (kind, target, args, kwargs): once %c is merged into %a,
// %d reads %a and repeats %b, so whole repeated chains (the attention-mask arithmetic that
// transformers repeats per layer, repeated size / getattr / view calls) collapse in one run.
// Numbers compare by their bits (0.0 and -0.0 differ), 1 and 1.0 differ, equal devices and
// dtypes are equal (the bridge gives equal ones one opaque id), get_attr nodes merge only when
// they read the same path.
// Never merged (ops/effects.h): placeholders, the output, in-place ops, random ops, runtime
// checks and other side effects, calls of modules not known to be pure, and any value that is,
// or may alias, or reads a value that is modified in place somewhere in the graph (a
// conservative O(n) alias analysis made once per run).
// Reverse puts every dropped node back and points its users at it again (rewrite/removal.h).
// Not a speed lever on CPU by itself (the repeated work is size arithmetic and masks); it makes
// graphs smaller for the passes after it.
#pragma once

#include <cstddef>
#include <unordered_map>
#include <unordered_set>

#include "rewrite/pass.h"

namespace fxopt {

class EliminateCommonSubexpressions final : public Pass {
 public:
  std::vector<Trigger> triggers() const override { return {}; }
  Visit visit() const override { return Visit::AllNodes; }
  void begin(const Program& program) const override;
  void rewrite(PassContext& ctx, Node* node) const override;

 private:
  // Per run: values written in place, and the nodes seen so far by the hash of their call.
  mutable std::unordered_set<const Node*> written_;
  mutable std::unordered_multimap<size_t, Node*> seen_;
};

}  // namespace fxopt
