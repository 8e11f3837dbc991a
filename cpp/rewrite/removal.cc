#include "rewrite/removal.h"

#include <algorithm>
#include <stdexcept>

#include "rewrite/capture.h"
#include "rewrite/record_fields.h"

namespace fxopt {
namespace {

constexpr RecordFields kRecord{"removal"};

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
  Tuple meta;
  for (const auto& [key, value] : node.meta().items) meta.items.push_back(Tuple{{key, value}});
  Tuple names;
  for (const Node* r : refs) names.items.emplace_back(r->name());
  return Tuple{{std::move(captured), std::move(meta),
                node.next() ? Arg(node.next()->name()) : Arg(None{}), std::move(names),
                std::move(users)}};
}

Node* restore_removal(Rewriter& rewriter, const Arg& captured) {
  const std::vector<Arg>& fields = kRecord.items(captured, 5);
  const std::vector<Arg>& node_fields = kRecord.items(fields[0], 6);
  const std::string& name = kRecord.text(node_fields[2]);
  const Graph& graph = rewriter.graph();

  const std::vector<Arg>& ref_names = kRecord.items(fields[3]);
  if (ref_names.empty()) kRecord.malformed(fields[3]);
  std::vector<Node*> refs{nullptr};  // refs[0] is the node itself, recreated below
  for (size_t i = 1; i < ref_names.size(); ++i)
    refs.push_back(live_node(graph, kRecord.text(ref_names[i]), name, "the node"));
  std::vector<std::pair<Node*, const std::vector<Arg>*>> users;
  for (const Arg& user : kRecord.items(fields[4])) {
    const std::vector<Arg>& u = kRecord.items(user, 3);
    users.emplace_back(live_node(graph, kRecord.text(u[0]), name, "its user"), &u);
  }

  Node* anchor =
      fields[2].is<std::string>() ? graph.find_by_name(fields[2].as<std::string>()) : nullptr;
  if (!anchor || anchor->erased()) {
    anchor = graph.last();
    for (const auto& [user, u] : users)
      if (graph.before(user, anchor)) anchor = user;
  }
  Node* node = rebuild_nodes(rewriter, anchor, Tuple{{fields[0]}}, refs).at(0);
  refs[0] = node;
  for (const Arg& entry : kRecord.items(fields[1])) {
    const std::vector<Arg>& kv = kRecord.items(entry, 2);
    rewriter.set_meta(node, kRecord.text(kv[0]), kv[1]);
  }
  for (const auto& [user, u] : users) {
    Arg args = rebuild_value(rewriter, user, (*u)[1], refs);
    Arg kwargs = rebuild_value(rewriter, user, (*u)[2], refs);
    if (!args.is<Tuple>() || !kwargs.is<Dict>()) kRecord.malformed(captured);
    rewriter.set_inputs(user, args.as<Tuple>().items, kwargs.as<Dict>());
  }
  return node;
}

}  // namespace fxopt
