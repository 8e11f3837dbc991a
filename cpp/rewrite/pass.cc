#include "rewrite/pass.h"

#include <algorithm>
#include <utility>

#include "rewrite/placement.h"
#include "rewrite/removal.h"

namespace fxopt {

void PassContext::changed(Node* node) {
  result.changed.push_back(node->name());
  mark(rewriter, node, signature);
}

void PassContext::skip(const Node& node, std::string reason) {
  result.skipped.push_back({node.name(), std::move(reason)});
}

std::string PassContext::choose(const Node& node, const ChoiceQuery& query) {
  KernelChoice choice = chooser.choose(query);
  if (choice.index >= query.candidates.size())
    throw PassError(node, "the kernel chooser picked candidate " + std::to_string(choice.index) +
                              " of " + std::to_string(query.candidates.size()));
  std::string picked = query.candidates[choice.index];
  result.choices.push_back({node.name(), query.op, picked, choice.ratio, std::move(choice.how)});
  return picked;
}

void PassContext::remove(Node* node, Node* replacement) {
  removals.push_back(capture_removal(*node));
  result.changed.push_back(node->name());
  if (replacement) rewriter.replace_all_uses(node, replacement);
  // Its removal record puts it back in place itself: no placement record (rewrite/placement.h).
  auto placing = std::exchange(rewriter.before_erase, nullptr);
  rewriter.erase(node);
  rewriter.before_erase = std::move(placing);
}

void Pass::restore(PassContext&, Node* node, const RecordReader&) const {
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

// The output node's record: per run, the removals (rewrite/removal.h) and the placements
// (rewrite/placement.h).
constexpr RecordKey<Arg> kRemoved{"removed"};
constexpr RecordKey<Arg> kPlaced{"placed"};

Node* output_node(const Graph& graph) {
  Node* output = graph.last();
  if (!output || output->kind() != NodeKind::Output)
    throw std::invalid_argument("the graph does not end with its output node");
  return output;
}

// The runs recorded under `key`, one list per run; none if there is no such record.
std::vector<RecordField> runs_under(const std::optional<RecordReader>& record, RecordKey<Arg> key) {
  std::optional<RecordField> field = record ? record->find(key) : std::nullopt;
  return field ? field->items() : std::vector<RecordField>{};
}

// What the forward runs removed (rewrite/removal.h) and where the reads they erased stood
// (rewrite/placement.h), as recorded on the output node: one list of each per run, paired.
struct Runs {
  Runs(const Node& output, std::string_view signature)
      : record(reversal_record(output, signature)),
        removed(runs_under(record, kRemoved)),
        placed(runs_under(record, kPlaced)) {}

  const std::optional<RecordReader> record;  // what the fields below read
  const std::vector<RecordField> removed, placed;

  // The placements of run `i`; none in records written before placements existed.
  Arg placed_in(size_t i) const { return i < placed.size() ? placed[i].value() : Arg(Tuple{}); }

  // Records the first `count` runs, then `more` (a removal list and a placement list).
  void store(PassContext& ctx, Node* output, size_t count,
             std::optional<std::pair<Arg, Arg>> more) const {
    Tuple all_removed, all_placed;
    for (size_t i = 0; i < count; ++i) {
      all_removed.items.push_back(removed[i].value());
      all_placed.items.push_back(placed_in(i));
    }
    if (more) {
      all_removed.items.push_back(std::move(more->first));
      all_placed.items.push_back(std::move(more->second));
    }
    set_reversal_record(
        ctx.rewriter, output, ctx.signature,
        Record().set(kRemoved, std::move(all_removed)).set(kPlaced, std::move(all_placed)));
  }
};

// Appends this run's removals and placements to the pass's record on the output node, as one
// more run: reverse undoes the latest run only, so compose(EliminateDeadCode(), X,
// EliminateDeadCode()) reverses in order. A run that changed nothing is recorded only to keep
// runs paired with an earlier one. The output node is marked (a transformed node) only when
// nodes were removed; placements alone are bookkeeping.
void store_run(PassContext& ctx, const Graph& graph) {
  bool removed = !ctx.removals.empty();
  bool empty = !removed && ctx.placements.empty();
  if (empty && (!graph.last() || graph.last()->kind() != NodeKind::Output)) return;
  Node* output = output_node(graph);
  Runs runs(*output, ctx.signature);
  if (empty && runs.removed.empty()) return;
  runs.store(ctx, output, runs.removed.size(),
             std::pair(Arg(Tuple{std::exchange(ctx.removals, {})}),
                       Arg(Tuple{std::exchange(ctx.placements, {})})));
  if (removed) mark(ctx.rewriter, output, ctx.signature);
}

void run_forward(const Pass& pass, PassContext& ctx, const Program& program) {
  uint64_t first_new_id = program.graph.next_id();
  ctx.rewriter.before_erase = [&](const Node& node) {
    ctx.placements.push_back(capture_placement(node, first_new_id));
  };
  pass.begin(program);
  for (Node* node : candidates(pass, program)) {
    // An earlier rewrite may have absorbed this candidate or changed what it is.
    if (node->erased() || ctx.marked(*node)) continue;
    guarded(*node, [&] { pass.rewrite(ctx, node); });
  }
  ctx.rewriter.before_erase = nullptr;
  store_run(ctx, program.graph);
}

bool is_run_record(const Node& node, const RecordReader& record) {
  return node.kind() == NodeKind::Output && record.find(kRemoved);
}

// Undoes the latest run recorded on the output node: its removals, last first, then its
// placements (whose anchors may be nodes it removed). Earlier runs stay for later reverses.
void restore_latest_run(PassContext& ctx, Node* output) {
  const Runs runs(*output, ctx.signature);
  if (runs.removed.empty()) return;
  size_t latest = runs.removed.size() - 1;
  std::vector<RecordField> entries = runs.removed[latest].items();
  for (auto it = entries.rbegin(); it != entries.rend(); ++it)
    ctx.restored(restore_removal(ctx.rewriter, *it));
  if (latest < runs.placed.size())
    restore_placements(ctx.rewriter, runs.placed[latest], ctx.signature);
  bool removes = std::any_of(runs.removed.begin(), runs.removed.begin() + latest,
                             [](const RecordField& run) { return !run.items().empty(); });
  if (latest == 0)
    clear_reversal_record(ctx.rewriter, output, ctx.signature);
  else
    runs.store(ctx, output, latest, std::nullopt);
  if (!removes) unmark(ctx.rewriter, output, ctx.signature);
}

void run_reverse(const Pass& pass, PassContext& ctx, const Graph& graph) {
  for (Node* node : marked_nodes(graph, ctx.signature)) {
    if (node->erased()) continue;
    std::optional<RecordReader> record = reversal_record(*node, ctx.signature);
    if (record && is_run_record(*node, *record)) continue;  // last, below
    if (record) {
      guarded(*node, [&] { pass.restore(ctx, node, *record); });
      if (node->erased()) continue;
      clear_reversal_record(ctx.rewriter, node, ctx.signature);
    }
    if (!node->erased()) unmark(ctx.rewriter, node, ctx.signature);
  }
  // Last: every node the run erased has been recreated by now.
  Node* output = graph.last();
  if (output && output->kind() == NodeKind::Output)
    guarded(*output, [&] { restore_latest_run(ctx, output); });
}

}  // namespace

PassResult run_pass(const Pass& pass, Program& program, EditLog& log, TensorOps& tensors,
                    const std::string& signature, bool reverse, Chooser& chooser) {
  Rewriter rewriter(program, log);
  const int latest = latest_application(program.graph, signature);
  const std::string application =
      application_signature(signature, reverse ? std::max(latest, 1) : latest + 1);
  PassContext ctx{rewriter, tensors, chooser, application, signature, {}, {}, {}};
  if (reverse) {
    run_reverse(pass, ctx, program.graph);
  } else {
    run_forward(pass, ctx, program);
    // An application after an earlier one that changed nothing still counts: its reverse must
    // come off first (and change nothing) rather than undo the earlier one's work.
    if (latest > 0 && latest_application(program.graph, signature) == latest)
      mark(rewriter, output_node(program.graph), application);
  }
  return std::move(ctx.result);
}

}  // namespace fxopt
