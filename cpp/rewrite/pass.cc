#include "rewrite/pass.h"

#include <algorithm>

#include "rewrite/removal.h"

namespace fxopt {

void PassContext::changed(Node* node) {
  result.changed.push_back(node->name());
  mark(rewriter, node, signature);
}

void PassContext::skip(const Node& node, std::string reason) {
  result.skipped.push_back({node.name(), std::move(reason)});
}

void PassContext::remove(Node* node, Node* replacement) {
  removals.push_back(capture_removal(*node));
  result.changed.push_back(node->name());
  if (replacement) rewriter.replace_all_uses(node, replacement);
  rewriter.erase(node);
}

void Pass::restore(PassContext&, Node* node, const Record&) const {
  throw PassError(*node, "this transformation is not reversible");
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
  if (pass.visit() != Visit::Triggers) {
    nodes.reserve(graph.size());
    for (Node* n : graph) nodes.push_back(n);
    if (pass.visit() == Visit::AllNodesBackwards) std::reverse(nodes.begin(), nodes.end());
    return nodes;
  }
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

constexpr std::string_view kRemovedKey = "removed";

Node* output_node(const Graph& graph) {
  Node* output = graph.last();
  if (!output || output->kind() != NodeKind::Output)
    throw std::invalid_argument("the graph does not end with its output node");
  return output;
}

// The runs recorded on the output node for this signature: one list of removals per run.
std::vector<Arg> removal_runs(const Node& output, std::string_view signature) {
  std::optional<Record> record = reversal_record(output, signature);
  const Arg* runs = record ? record->get(kRemovedKey) : nullptr;
  if (!runs) return {};
  if (!runs->sequence())
    throw std::invalid_argument("malformed removal record: " + to_string(*runs));
  return *runs->sequence();
}

void store_runs(PassContext& ctx, Node* output, std::vector<Arg> runs) {
  set_reversal_record(ctx.rewriter, output, ctx.signature,
                      Record().set(std::string(kRemovedKey), Tuple{std::move(runs)}));
}

// Appends this run's removals to the pass's record on the output node, as one more run: reverse
// undoes the latest run only, so compose(EliminateDeadCode(), X, EliminateDeadCode()) reverses
// in order. A run that removed nothing is recorded only to keep runs paired with an earlier one.
void store_removals(PassContext& ctx, const Graph& graph) {
  if (ctx.removals.empty() && (!graph.last() || graph.last()->kind() != NodeKind::Output)) return;
  Node* output = output_node(graph);
  std::vector<Arg> runs = removal_runs(*output, ctx.signature);
  if (ctx.removals.empty() && runs.empty()) return;
  runs.push_back(Tuple{std::move(ctx.removals)});
  ctx.removals.clear();
  store_runs(ctx, output, std::move(runs));
  mark(ctx.rewriter, output, ctx.signature);
}

void run_forward(const Pass& pass, PassContext& ctx, const Program& program) {
  pass.begin(program);
  for (Node* node : candidates(pass, program)) {
    // An earlier rewrite may have absorbed this candidate or changed what it is.
    if (node->erased() || is_marked(*node, ctx.signature)) continue;
    guarded(*node, [&] { pass.rewrite(ctx, node); });
  }
  store_removals(ctx, program.graph);
}

// The output node's record lists runs of removals; any other record is the pass's own. Returns
// false while the output node keeps runs of earlier calls (and so its record and mark).
bool restore(const Pass& pass, PassContext& ctx, Node* node, const Record& record) {
  if (!record.get(kRemovedKey) || node->kind() != NodeKind::Output) {
    pass.restore(ctx, node, record);
    return true;
  }
  std::vector<Arg> runs = removal_runs(*node, ctx.signature);
  const std::vector<Arg>* entries = runs.empty() ? nullptr : runs.back().sequence();
  if (!entries) throw std::invalid_argument("malformed removal record: no runs");
  for (auto it = entries->rbegin(); it != entries->rend(); ++it)
    ctx.restored(restore_removal(ctx.rewriter, *it));
  runs.pop_back();
  if (runs.empty()) return true;
  store_runs(ctx, node, std::move(runs));
  return false;
}

void run_reverse(const Pass& pass, PassContext& ctx, const Graph& graph) {
  for (Node* node : marked_nodes(graph, ctx.signature)) {
    if (node->erased()) continue;
    if (std::optional<Record> record = reversal_record(*node, ctx.signature)) {
      bool finished = true;
      guarded(*node, [&] { finished = restore(pass, ctx, node, *record); });
      if (node->erased() || !finished) continue;
      clear_reversal_record(ctx.rewriter, node, ctx.signature);
    }
    if (!node->erased()) unmark(ctx.rewriter, node, ctx.signature);
  }
}

}  // namespace

PassResult run_pass(const Pass& pass, Program& program, EditLog& log, TensorOps& tensors,
                    const std::string& signature, bool reverse) {
  Rewriter rewriter(program, log);
  PassContext ctx{rewriter, tensors, signature, {}, {}};
  if (reverse)
    run_reverse(pass, ctx, program.graph);
  else
    run_forward(pass, ctx, program);
  return std::move(ctx.result);
}

}  // namespace fxopt
