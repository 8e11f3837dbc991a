// FoldConstants: a call whose value depends only on stored tensors (parameters, buffers,
// get_attr constants) and literals is computed once, stored, and read instead.
//
//   before:  %w = get_attr[w]                    after:  %x = placeholder[x]
//            %wt = aten.t.default(%w)                    %wt = get_attr[_folded_wt]
//            %s = aten.mul.Tensor(%wt, 2.0)              %s = get_attr[_folded_s]   (dead %wt:
//            %y = aten.mm.default(%x, %s)                %y = aten.mm.default(%x, %s)  DCE)
//
// Which values are constant is decided once per run (Pass::begin, O(n)): get_attr reads of
// tensors, and pure calls (ops/effects.h: no mutation, randomness, runtime check or other
// effect; no operand written in place) of call_function / call_method whose node operands are
// all constant. A constant read by anything that is not constant (the frontier) is computed
// through TensorOps::evaluate (the bridge runs the very op with torch, under no_grad) from the
// values of the constants it reads, and the node itself becomes a get_attr of the result, so it
// keeps its name and users; interior constants are left for EliminateDeadCode. The new tensor
// is registered as a parameter if one of the stored tensors it was computed from is one.
// Skipped, with the reason: calls that do not return a tensor, and results larger than their
// operands together and above 64 KiB (an expand or repeat of a buffer: materialising it would
// trade memory for a cheap op).
// Reverse turns the node back into the recorded call (kind, target, arguments; operands named)
// and drops the stored tensor.
// What it finds in transformers-5 graphs is little (mask and position arithmetic depends on the
// inputs; Dynamo traces of MiniLM / GPT-2 give 1-2 folds: a buffer slice, an arange), far below
// the noise; it pays on users' modules that transform their weights in forward (a transposed
// or scaled weight, a mask built from a buffer).
#pragma once

#include <unordered_set>

#include "rewrite/pass.h"

namespace fxopt {

class FoldConstants final : public Pass {
 public:
  std::vector<Trigger> triggers() const override { return {}; }
  Visit visit() const override { return Visit::AllNodes; }
  void begin(const Program& program) const override;
  void rewrite(PassContext& ctx, Node* node) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;

 private:
  mutable std::unordered_set<const Node*> constant_;
};

}  // namespace fxopt
