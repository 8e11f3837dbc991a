#include "rewrite/pass.h"

#include <algorithm>

namespace fxopt {

void PassContext::changed(Node* node) {
  result.changed.push_back(node->name());
  mark(rewriter, node, signature);
}

void PassContext::skip(const Node& node, std::string reason) {
  result.skipped.push_back({node.name(), std::move(reason)});
}

void Pass::restore(PassContext&, Node* node, const Record&) const {
  throw PassError(*node, "this transformation is not reversible");
}

namespace {

std::vector<Node*> candidates(const Pass& pass, const Graph& graph) {
  std::vector<Node*> nodes;
  for (const Trigger& t : pass.triggers()) {
    std::vector<Node*> found = graph.find(t.kind, t.target);
    nodes.insert(nodes.end(), found.begin(), found.end());
  }
  std::sort(nodes.begin(), nodes.end(), [&](Node* a, Node* b) { return graph.before(a, b); });
  return nodes;
}

void run_forward(const Pass& pass, PassContext& ctx, const Graph& graph) {
  for (Node* node : candidates(pass, graph)) {
    // An earlier rewrite may have absorbed this candidate or changed what it is.
    if (node->erased() || is_marked(*node, ctx.signature)) continue;
    pass.rewrite(ctx, node);
  }
}

void run_reverse(const Pass& pass, PassContext& ctx, const Graph& graph) {
  for (Node* node : marked_nodes(graph, ctx.signature)) {
    if (node->erased()) continue;
    if (std::optional<Record> record = reversal_record(*node, ctx.signature)) {
      pass.restore(ctx, node, *record);
      if (node->erased()) continue;
      clear_reversal_record(ctx.rewriter, node, ctx.signature);
    }
    if (!node->erased()) unmark(ctx.rewriter, node, ctx.signature);
  }
}

}  // namespace

PassResult run_pass(const Pass& pass, Program& program, EditLog& log, TensorOps& tensors,
                    const std::string& signature, bool reverse) {
  Rewriter rewriter(program, log);
  PassContext ctx{rewriter, tensors, signature, {}};
  if (reverse) run_reverse(pass, ctx, program.graph);
  else run_forward(pass, ctx, program.graph);
  return std::move(ctx.result);
}

}  // namespace fxopt
