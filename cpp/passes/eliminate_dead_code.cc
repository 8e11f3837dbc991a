#include "passes/eliminate_dead_code.h"

#include "ops/effects.h"

namespace fxopt {

void EliminateDeadCode::rewrite(PassContext& ctx, Node* node) const {
  if (!node->users().empty() || node->kind() == NodeKind::Placeholder ||
      node->kind() == NodeKind::Output)
    return;
  std::string_view effect = side_effect(ctx.rewriter.program(), *node);
  if (!effect.empty()) return ctx.skip(*node, "unused, but kept: it " + std::string(effect));
  ctx.remove(node);
}

}  // namespace fxopt
