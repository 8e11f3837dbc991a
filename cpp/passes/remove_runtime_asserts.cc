#include "passes/remove_runtime_asserts.h"

#include <algorithm>

#include "ops/effects.h"

namespace fxopt {
namespace {

std::vector<Node*> operands(const Node& node) {
  std::vector<Node*> nodes;
  auto add = [&](Node* n) {
    if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
  };
  node.for_each_input(add);
  return nodes;
}

}  // namespace

std::vector<Trigger> RemoveRuntimeAsserts::triggers() const { return runtime_check_triggers(); }

void RemoveRuntimeAsserts::rewrite(PassContext& ctx, Node* node) const {
  if (!node->users().empty())
    return ctx.skip(*node, "its result is read by " + node->users().front()->name());
  const Program& program = ctx.rewriter.program();
  std::vector<Node*> pending = operands(*node);
  ctx.remove(node);
  // Producers that only fed the check: a stack walk over the removed expression.
  while (!pending.empty()) {
    Node* value = pending.back();
    pending.pop_back();
    if (value->erased() || !value->users().empty() || !side_effect(program, *value).empty())
      continue;
    std::vector<Node*> more = operands(*value);
    ctx.remove(value);
    pending.insert(pending.end(), more.begin(), more.end());
  }
}

}  // namespace fxopt
