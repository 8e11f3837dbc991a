#include "passes/op_chain.h"

#include <algorithm>

namespace fxopt {

const Symbol kSymSize = Symbol::intern("aten.sym_size.int");

void ChainWalker::mismatch() const {
  throw PassError(*last_, "is no longer the " + what_ + " this transformation made");
}

Node* ChainWalker::operand(Node* node, Symbol target, size_t index) {
  if (!node || !node->is(NodeKind::CallFunction, target) || node->args().size() <= index ||
      !node->args()[index].node())
    mismatch();
  if (std::ranges::find(nodes_, node) == nodes_.end()) nodes_.push_back(node);
  return node->args()[index].node();
}

void ChainWalker::erase(Rewriter& rewriter) {
  std::vector<Node*> chain = nodes_;
  std::ranges::sort(chain, [&](Node* a, Node* b) { return rewriter.graph().before(b, a); });
  for (Node* n : chain) {
    std::vector<Node*> reads;
    n->for_each_input([&](Node* input) {
      if (input->kind() == NodeKind::GetAttr) reads.push_back(input);
    });
    rewriter.erase(n);
    for (Node* read : reads) rewriter.erase_if_unused_read(read);
  }
}

List output_shape(ChainBuilder& chain, Node* x, int rank, int64_t n, bool use_recorded) {
  const std::vector<int64_t>& sizes = x->shape();
  List shape;
  for (int d = 0; d + 1 < rank; ++d) {
    bool known = use_recorded && int(sizes.size()) == rank && sizes[d] >= 0;
    shape.items.push_back(known ? Arg(sizes[d]) : Arg(chain.call(kSymSize, "sym_size", {x, d})));
  }
  shape.items.push_back(n);
  return shape;
}

}  // namespace fxopt
