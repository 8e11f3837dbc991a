#include "rewrite/placement.h"

#include <algorithm>
#include <optional>

#include "rewrite/capture.h"
#include "rewrite/marks.h"

namespace fxopt {
namespace {

// The live node named by `name`, a name or None.
Node* live(const Graph& graph, const RecordField& name) {
  const std::string* text = name.optional_text();
  Node* node = text ? graph.find_by_name(*text) : nullptr;
  return node && !node->erased() ? node : nullptr;
}

void restore_meta(Rewriter& rewriter, Node* node, const RecordField& meta,
                  std::string_view signature) {
  restore_meta(rewriter, node, meta);
  // What the reversed transformation left on the node before erasing it is undone with it.
  if (has_reversal_record(*node, signature)) clear_reversal_record(rewriter, node, signature);
  if (is_marked(*node, signature)) unmark(rewriter, node, signature);
}

// Whether every input of `node` comes before it and every user after it.
bool in_order(const Graph& graph, Node* node) {
  bool inputs_before = true;
  node->for_each_input([&](Node* input) { inputs_before &= graph.before(input, node); });
  const std::vector<Node*>& users = node->users();
  return inputs_before && std::all_of(users.begin(), users.end(),
                                      [&](const Node* user) { return graph.before(node, user); });
}

struct Move {
  Node* node;
  Node* old_next;
};

// Moves the node `placement` names back before its anchor, if reverse recreated it.
std::optional<Move> restore_placement(Rewriter& rewriter, const RecordField& placement,
                                      std::string_view signature) {
  std::vector<RecordField> fields = placement.items(5);
  const Graph& graph = rewriter.graph();
  Node* node = live(graph, fields[0]);
  if (!node || !node->is(fields[1].kind(), Symbol::intern(fields[2].text()))) return std::nullopt;
  restore_meta(rewriter, node, fields[4], signature);
  Node* anchor = live(graph, fields[3]);
  if (!anchor || anchor == node || node->next() == anchor) return std::nullopt;
  Move move{node, node->next()};
  rewriter.move_before(node, anchor);
  return move;
}

}  // namespace

Arg capture_placement(const Node& node, uint64_t first_new_id) {
  const Node* anchor = node.next();
  while (anchor && anchor->id() >= first_new_id) anchor = anchor->next();
  return Tuple{{Arg(node.name()), Arg(std::string(kind_name(node.kind()))),
                Arg(node.target().str()), anchor ? Arg(anchor->name()) : Arg(None{}),
                capture_meta(node)}};
}

void restore_placements(Rewriter& rewriter, const RecordField& placements,
                        std::string_view signature) {
  std::vector<RecordField> entries = placements.items();
  // Each move may leave a node before the users the next moves have yet to put back, so order
  // is checked once all are done; if reverse recreated some nodes elsewhere, or not at all, and
  // the order no longer holds, every move is undone (the graph stays as restore left it).
  std::vector<Move> moves;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it)
    if (std::optional<Move> move = restore_placement(rewriter, *it, signature))
      moves.push_back(*move);
  const Graph& graph = rewriter.graph();
  if (std::all_of(moves.begin(), moves.end(),
                  [&](const Move& m) { return in_order(graph, m.node); }))
    return;
  for (auto it = moves.rbegin(); it != moves.rend(); ++it)
    rewriter.move_before(it->node, it->old_next);
}

}  // namespace fxopt
