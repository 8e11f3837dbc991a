#include "passes/remove_no_ops.h"

#include <algorithm>

#include "ops/effects.h"
#include "ops/no_op.h"

namespace fxopt {

std::vector<Trigger> RemoveNoOps::triggers() const { return no_op_triggers(); }

void RemoveNoOps::begin(const Program& program) const {
  written_ = written_in_place(program);
  dtypes_.emplace(program);
}

void RemoveNoOps::rewrite(PassContext& ctx, Node* node) const {
  std::string why_not;
  std::optional<NoOp> no_op = as_no_op(ctx.rewriter.program(), *dtypes_, *node, &why_not);
  if (!no_op) return ctx.skip(*node, why_not.empty() ? "not a no-op" : why_not);
  if (no_op->copies) {
    if (written_.contains(node) || written_.contains(no_op->input))
      return ctx.skip(*node, "a copy whose result or input is modified in place");
    const std::vector<Node*>& users = node->users();
    if (std::any_of(users.begin(), users.end(),
                    [](const Node* u) { return u->kind() == NodeKind::Output; }))
      return ctx.skip(*node, "the graph returns this copy; without it, it would return an alias");
  }
  ctx.remove(node, no_op->input);
}

}  // namespace fxopt
