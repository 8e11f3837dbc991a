#include "rewrite/capture.h"

#include <algorithm>

namespace fxopt {
namespace {

constexpr std::string_view kNode = "fxopt.node";
constexpr std::string_view kInput = "fxopt.input";
constexpr std::string_view kAttr = "fxopt.attr";
constexpr std::string_view kList = "fxopt.list";
constexpr std::string_view kTuple = "fxopt.tuple";
constexpr std::string_view kSlice = "fxopt.slice";
constexpr std::string_view kDict = "fxopt.dict";

Arg tagged(std::string_view tag, Arg payload) {
  return Tuple{{Arg(std::string(tag)), std::move(payload)}};
}

std::optional<int64_t> position(std::span<Node* const> nodes, const Node* node) {
  auto it = std::find(nodes.begin(), nodes.end(), node);
  if (it == nodes.end()) return std::nullopt;
  return it - nodes.begin();
}

std::optional<Arg> capture_items(std::string_view tag, const std::vector<Arg>& items,
                                 std::span<Node* const> inputs, std::span<Node* const> nodes) {
  Tuple out;
  for (const Arg& item : items) {
    std::optional<Arg> captured = capture_value(item, inputs, nodes);
    if (!captured) return std::nullopt;
    out.items.push_back(std::move(*captured));
  }
  return tagged(tag, std::move(out));
}

// Resolves captured values; reads attributes through existing get_attr nodes where it can.
class Rebuilder {
 public:
  Rebuilder(Rewriter& rewriter, Node* anchor, std::span<Node* const> inputs)
      : rewriter_(rewriter), anchor_(anchor), inputs_(inputs) {}

  std::vector<Node*> nodes;

  Arg operator()(const RecordField& captured) {
    if (!captured.value().is<Tuple>()) return captured.value();  // scalars, strings, None, opaque
    std::vector<RecordField> pair = captured.items(2);
    const std::string& tag = pair[0].text();
    const RecordField& payload = pair[1];
    if (tag == kNode) return Arg(nodes[payload.index(nodes.size())]);
    if (tag == kInput) return Arg(inputs_[payload.index(inputs_.size())]);
    if (tag == kAttr) return Arg(attribute(payload));
    if (tag == kDict) return dict(payload);
    std::vector<Arg> rebuilt;
    for (const RecordField& item : payload.items()) rebuilt.push_back((*this)(item));
    if (tag == kList) return List{std::move(rebuilt)};
    if (tag == kTuple) return Tuple{std::move(rebuilt)};
    if (tag != kSlice) pair[0].fail("is not a tag of a captured value");
    if (rebuilt.size() != 3) payload.fail("is not a slice's start, stop and step");
    return Slice{std::move(rebuilt)};
  }

  // A node's positional arguments, as capture_value stored its Tuple.
  Args args(const RecordField& captured) {
    Arg rebuilt = (*this)(captured);
    if (!rebuilt.is<Tuple>()) captured.fail("is not a captured tuple of arguments");
    return std::get<Tuple>(std::move(rebuilt.value)).items;
  }

  // A node's keyword arguments, as capture_value stored its Dict.
  Dict kwargs(const RecordField& captured) {
    Arg rebuilt = (*this)(captured);
    if (!rebuilt.is<Dict>()) captured.fail("is not captured keyword arguments");
    return std::get<Dict>(std::move(rebuilt.value));
  }

 private:
  Dict dict(const RecordField& payload) {
    Dict out;
    for (const RecordField& entry : payload.items()) {
      std::vector<RecordField> kv = entry.items(2);
      out.items.emplace_back(kv[0].text(), (*this)(kv[1]));
    }
    return out;
  }

  // (path, name): the read gets back the name its tracer gave it (Dynamo's differ from paths).
  Node* attribute(const RecordField& payload) {
    std::vector<RecordField> path_name = payload.items(2);
    return rewriter_.read_attribute(anchor_, path_name[0].text(), path_name[1].text());
  }

  Rewriter& rewriter_;
  Node* anchor_;
  std::span<Node* const> inputs_;
};

}  // namespace

std::optional<Arg> capture_value(const Arg& value, std::span<Node* const> inputs,
                                 std::span<Node* const> nodes) {
  return std::visit(
      [&](const auto& v) -> std::optional<Arg> {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, Node*>) {
          if (auto i = position(nodes, v)) return tagged(kNode, *i);
          if (auto k = position(inputs, v)) return tagged(kInput, *k);
          if (v->kind() == NodeKind::GetAttr)
            return tagged(kAttr, Tuple{{Arg(v->target().str()), Arg(v->name())}});
          return std::nullopt;
        } else if constexpr (std::is_same_v<V, List>) {
          return capture_items(kList, v.items, inputs, nodes);
        } else if constexpr (std::is_same_v<V, Tuple>) {
          return capture_items(kTuple, v.items, inputs, nodes);
        } else if constexpr (std::is_same_v<V, Slice>) {
          return capture_items(kSlice, v.items, inputs, nodes);
        } else if constexpr (std::is_same_v<V, Dict>) {
          Tuple out;
          for (const auto& [key, item] : v.items) {
            std::optional<Arg> captured = capture_value(item, inputs, nodes);
            if (!captured) return std::nullopt;
            out.items.push_back(Tuple{{Arg(key), std::move(*captured)}});
          }
          return tagged(kDict, std::move(out));
        } else {
          return value;
        }
      },
      value.value);
}

std::pair<Args, Kwargs> rebuild_inputs(Rewriter& rewriter, Node* anchor, const RecordField& args,
                                       const RecordField& kwargs, std::span<Node* const> inputs,
                                       std::span<Node* const> nodes) {
  Rebuilder rebuild(rewriter, anchor, inputs);
  rebuild.nodes.assign(nodes.begin(), nodes.end());
  return {rebuild.args(args), rebuild.kwargs(kwargs)};
}

std::optional<Arg> capture_nodes(std::span<Node* const> nodes, std::span<Node* const> inputs) {
  Tuple out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node* n = nodes[i];
    std::span<Node* const> earlier = nodes.first(i);
    std::optional<Arg> args = capture_value(Tuple{n->args()}, inputs, earlier);
    std::optional<Arg> kwargs = capture_value(n->kwargs(), inputs, earlier);
    if (!args || !kwargs) return std::nullopt;
    // Its metadata too: the marks and reversal records other transformations left on it, so
    // their reverse finds the node again once this one is undone (compositions reverse).
    out.items.push_back(
        Tuple{{Arg(std::string(kind_name(n->kind()))), Arg(n->target().str()), Arg(n->name()),
               std::move(*args), std::move(*kwargs), capture_meta(*n)}});
  }
  return out;
}

namespace {

Node* rebuild_one(Rewriter& rewriter, Rebuilder& rebuild, Node* anchor,
                  const RecordField& captured) {
  std::vector<RecordField> f = captured.items(6);  // kind, target, name, args, kwargs, meta
  NodeKind kind = f[0].kind();
  const std::string &target = f[1].text(), &name = f[2].text();
  Args args = rebuild.args(f[3]);
  Dict kwargs = rebuild.kwargs(f[4]);
  Node* node = rewriter.insert_before(anchor, kind, Symbol::intern(target), name, std::move(args),
                                      std::move(kwargs));
  restore_meta(rewriter, node, f[5]);
  return node;
}

}  // namespace

std::vector<Node*> rebuild_nodes(Rewriter& rewriter, Node* anchor, const RecordField& captured,
                                 std::span<Node* const> inputs) {
  std::vector<RecordField> entries = captured.items();
  if (entries.empty()) captured.fail("holds no nodes");
  Rebuilder rebuild(rewriter, anchor, inputs);
  for (const RecordField& entry : entries)
    rebuild.nodes.push_back(rebuild_one(rewriter, rebuild, anchor, entry));
  return rebuild.nodes;
}

Node* rebuild_node(Rewriter& rewriter, Node* anchor, const RecordField& captured,
                   std::span<Node* const> inputs) {
  Rebuilder rebuild(rewriter, anchor, inputs);
  return rebuild_one(rewriter, rebuild, anchor, captured);
}

Arg capture_meta(const Node& node) {
  Tuple meta;
  for (const auto& [key, value] : node.meta().items) meta.items.push_back(Tuple{{key, value}});
  return meta;
}

void restore_meta(Rewriter& rewriter, Node* node, const RecordField& captured) {
  for (const RecordField& entry : captured.items()) {
    std::vector<RecordField> kv = entry.items(2);
    const Arg* current = node->meta().find(kv[0].text());
    if (!current || *current != kv[1].value()) rewriter.set_meta(node, kv[0].text(), kv[1].value());
  }
}

}  // namespace fxopt
