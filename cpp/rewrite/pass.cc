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

bool matches_trigger(const Program& program, const Node& node,
                     const std::vector<Trigger>& triggers) {
  const ModuleInfo* module =
      node.kind() == NodeKind::CallModule ? program.module(node.target()) : nullptr;
  Symbol target = module ? module->type : node.target();
  return std::any_of(triggers.begin(), triggers.end(),
                     [&](const Trigger& t) { return t.kind == node.kind() && t.target == target; });
}

namespace {

// The nodes a trigger names; call_module triggers name a module type, so they reach the call
// sites of every module of that type (one pass over the module table, not over the graph).
std::vector<Node*> triggered(const Trigger& t, const Program& program) {
  if (t.kind != NodeKind::CallModule) return program.graph.find(t.kind, t.target);
  std::vector<Node*> nodes;
  for (const auto& [path, module] : program.modules) {
    if (module.type != t.target) continue;
    std::vector<Node*> calls = program.graph.find(t.kind, Symbol::intern(path));
    nodes.insert(nodes.end(), calls.begin(), calls.end());
  }
  return nodes;
}

std::vector<Node*> candidates(const Pass& pass, const Program& program) {
  const Graph& graph = program.graph;
  std::vector<Node*> nodes;
  for (const Trigger& t : pass.triggers()) {
    std::vector<Node*> found = triggered(t, program);
    nodes.insert(nodes.end(), found.begin(), found.end());
  }
  std::sort(nodes.begin(), nodes.end(), [&](Node* a, Node* b) { return graph.before(a, b); });
  return nodes;
}

// Any failure inside a rewrite aborts the pass with an error that names the node.
template <class F>
void guarded(const Node& node, F&& step) {
  try {
    step();
  } catch (const PassError&) {
    throw;
  } catch (const std::exception& e) {
    throw PassError(node, e.what());
  }
}

void run_forward(const Pass& pass, PassContext& ctx, const Program& program) {
  for (Node* node : candidates(pass, program)) {
    // An earlier rewrite may have absorbed this candidate or changed what it is.
    if (node->erased() || is_marked(*node, ctx.signature)) continue;
    guarded(*node, [&] { pass.rewrite(ctx, node); });
  }
}

void run_reverse(const Pass& pass, PassContext& ctx, const Graph& graph) {
  for (Node* node : marked_nodes(graph, ctx.signature)) {
    if (node->erased()) continue;
    if (std::optional<Record> record = reversal_record(*node, ctx.signature)) {
      guarded(*node, [&] { pass.restore(ctx, node, *record); });
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
  if (reverse)
    run_reverse(pass, ctx, program.graph);
  else
    run_forward(pass, ctx, program);
  return std::move(ctx.result);
}

}  // namespace fxopt
