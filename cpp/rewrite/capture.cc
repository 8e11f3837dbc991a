#include "rewrite/capture.h"

#include <algorithm>
#include <stdexcept>

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

[[noreturn]] void malformed(const Arg& value) {
  throw std::invalid_argument("malformed captured value in a reversal record: " + to_string(value));
}

// Resolves captured values; reads attributes through existing get_attr nodes where it can.
class Rebuilder {
 public:
  Rebuilder(Rewriter& rewriter, Node* anchor, std::span<Node* const> inputs)
      : rewriter_(rewriter), anchor_(anchor), inputs_(inputs) {}

  std::vector<Node*> nodes;

  Arg operator()(const Arg& captured) {
    if (!captured.is<Tuple>()) return captured;  // scalars, strings, None, opaque values
    const std::vector<Arg>& pair = captured.as<Tuple>().items;
    if (pair.size() != 2 || !pair[0].is<std::string>()) malformed(captured);
    const std::string& tag = pair[0].as<std::string>();
    const Arg& payload = pair[1];
    if (tag == kNode) return Arg(nodes.at(index(payload, nodes.size())));
    if (tag == kInput) return Arg(inputs_[index(payload, inputs_.size())]);
    if (!payload.is<Tuple>()) malformed(captured);
    const std::vector<Arg>& items = payload.as<Tuple>().items;
    if (tag == kAttr) return Arg(attribute(items));
    if (tag == kDict) return dict(items);
    std::vector<Arg> rebuilt;
    for (const Arg& item : items) rebuilt.push_back((*this)(item));
    if (tag == kList) return List{std::move(rebuilt)};
    if (tag == kTuple) return Tuple{std::move(rebuilt)};
    if (tag == kSlice && rebuilt.size() == 3) return Slice{std::move(rebuilt)};
    malformed(captured);
  }

  Dict dict(const std::vector<Arg>& items) {
    Dict out;
    for (const Arg& entry : items) {
      const std::vector<Arg>* kv = entry.sequence();
      if (!kv || kv->size() != 2 || !(*kv)[0].is<std::string>()) malformed(entry);
      out.items.emplace_back((*kv)[0].as<std::string>(), (*this)((*kv)[1]));
    }
    return out;
  }

 private:
  static size_t index(const Arg& payload, size_t bound) {
    std::optional<int64_t> i = payload.integer();
    if (!i || *i < 0 || size_t(*i) >= bound) malformed(payload);
    return size_t(*i);
  }

  // (path, name): the read gets back the name its tracer gave it (Dynamo's differ from paths).
  Node* attribute(const std::vector<Arg>& items) {
    if (items.size() != 2 || !items[0].is<std::string>() || !items[1].is<std::string>())
      malformed(Tuple{items});
    return rewriter_.read_attribute(anchor_, items[0].as<std::string>(),
                                    items[1].as<std::string>());
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

Arg rebuild_value(Rewriter& rewriter, Node* anchor, const Arg& captured,
                  std::span<Node* const> inputs, std::span<Node* const> nodes) {
  Rebuilder rebuild(rewriter, anchor, inputs);
  rebuild.nodes.assign(nodes.begin(), nodes.end());
  return rebuild(captured);
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
    Tuple meta;
    for (const auto& [key, value] : n->meta().items) meta.items.push_back(Tuple{{key, value}});
    out.items.push_back(
        Tuple{{Arg(std::string(kind_name(n->kind()))), Arg(n->target().str()), Arg(n->name()),
               std::move(*args), std::move(*kwargs), std::move(meta)}});
  }
  return out;
}

std::vector<Node*> rebuild_nodes(Rewriter& rewriter, Node* anchor, const Arg& captured,
                                 std::span<Node* const> inputs) {
  const std::vector<Arg>* entries = captured.sequence();
  if (!entries) malformed(captured);
  Rebuilder rebuild(rewriter, anchor, inputs);
  for (const Arg& entry : *entries) {
    const std::vector<Arg>* f = entry.sequence();
    if (!f || f->size() != 6 || !(*f)[0].is<std::string>() || !(*f)[1].is<std::string>() ||
        !(*f)[2].is<std::string>() || !(*f)[5].sequence())
      malformed(entry);
    std::optional<NodeKind> kind = parse_kind((*f)[0].as<std::string>());
    Arg args = rebuild((*f)[3]);
    Arg kwargs = rebuild((*f)[4]);
    if (!kind || !args.is<Tuple>() || !kwargs.is<Dict>()) malformed(entry);
    Node* node = rewriter.insert_before(anchor, *kind, Symbol::intern((*f)[1].as<std::string>()),
                                        (*f)[2].as<std::string>(), args.as<Tuple>().items,
                                        kwargs.as<Dict>());
    for (const Arg& item : *(*f)[5].sequence()) {
      const std::vector<Arg>* kv = item.sequence();
      if (!kv || kv->size() != 2 || !(*kv)[0].is<std::string>()) malformed(item);
      rewriter.set_meta(node, (*kv)[0].as<std::string>(), (*kv)[1]);
    }
    rebuild.nodes.push_back(node);
  }
  return rebuild.nodes;
}

}  // namespace fxopt
