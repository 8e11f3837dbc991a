#include "rewrite/removal.h"

#include <algorithm>
#include <stdexcept>

#include "rewrite/capture.h"

namespace fxopt {
namespace {

Node* live_node(const Graph& graph, const std::string& name, const std::string& restoring,
                const char* role) {
  Node* node = graph.find_by_name(name);
  if (!node || node->erased())
    throw std::invalid_argument("cannot put back removed node '" + restoring + "': " + role + " '" +
                                name + "' is no longer in the graph");
  return node;
}

}  // namespace

Arg capture_removal(const Node& node) {
  std::vector<Node*> refs{const_cast<Node*>(&node)};
  auto add = [&](Node* n) {
    if (std::find(refs.begin(), refs.end(), n) == refs.end()) refs.push_back(n);
  };
  auto add_all = [&](const Node& n) { n.for_each_input(add); };
  add_all(node);
  for (const Node* user : node.users()) add_all(*user);

  // Every reference is in refs, so nothing here can fail to capture.
  Node* const self[] = {const_cast<Node*>(&node)};
  Arg captured = capture_nodes(self, refs)->sequence()->at(0);
  Tuple users;
  for (const Node* user : node.users())
    users.items.push_back(Tuple{{Arg(user->name()), *capture_value(Tuple{user->args()}, refs),
                                 *capture_value(user->kwargs(), refs)}});
  Tuple names;
  for (const Node* r : refs) names.items.emplace_back(r->name());
  return Tuple{{std::move(captured), capture_meta(node),
                node.next() ? Arg(node.next()->name()) : Arg(None{}), std::move(names),
                std::move(users)}};
}

Node* restore_removal(Rewriter& rewriter, const RecordField& captured) {
  std::vector<RecordField> fields = captured.items(5);
  const std::string& name = fields[0].items(6)[2].text();
  const Graph& graph = rewriter.graph();

  std::vector<RecordField> ref_names = fields[3].items();
  if (ref_names.empty()) fields[3].fail("names no nodes");
  std::vector<Node*> refs{nullptr};  // refs[0] is the node itself, recreated below
  for (size_t i = 1; i < ref_names.size(); ++i)
    refs.push_back(live_node(graph, ref_names[i].text(), name, "the node"));
  std::vector<std::pair<Node*, std::vector<RecordField>>> users;
  for (const RecordField& user : fields[4].items()) {
    std::vector<RecordField> u = user.items(3);
    users.emplace_back(live_node(graph, u[0].text(), name, "its user"), std::move(u));
  }

  const std::string* anchor_name = fields[2].optional_text();
  Node* anchor = anchor_name ? graph.find_by_name(*anchor_name) : nullptr;
  if (!anchor || anchor->erased()) {
    anchor = graph.last();
    for (const auto& [user, u] : users)
      if (graph.before(user, anchor)) anchor = user;
  }
  Node* node = rebuild_node(rewriter, anchor, fields[0], refs);
  refs[0] = node;
  restore_meta(rewriter, node, fields[1]);
  for (const auto& [user, u] : users) {
    auto [args, kwargs] = rebuild_inputs(rewriter, user, u[1], u[2], refs);
    rewriter.set_inputs(user, std::move(args), std::move(kwargs));
  }
  return node;
}

}  // namespace fxopt
