#include "passes/eliminate_common_subexpressions.h"

#include <bit>
#include <functional>

#include "ops/effects.h"

namespace fxopt {
namespace {

size_t combine(size_t seed, size_t value) {
  return seed ^ (value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}

size_t hash_arg(const Arg& arg) {
  size_t h = arg.value.index();
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, Node*>) {
          h = combine(h, std::hash<const void*>()(v));
        } else if constexpr (std::is_same_v<V, bool> || std::is_same_v<V, int64_t>) {
          h = combine(h, std::hash<int64_t>()(v));
        } else if constexpr (std::is_same_v<V, double>) {
          h = combine(h, std::hash<uint64_t>()(std::bit_cast<uint64_t>(v)));
        } else if constexpr (std::is_same_v<V, std::string>) {
          h = combine(h, std::hash<std::string>()(v));
        } else if constexpr (std::is_same_v<V, Opaque>) {
          h = combine(h, std::hash<uint64_t>()(v.id));
        } else if constexpr (std::is_same_v<V, List> || std::is_same_v<V, Tuple> ||
                             std::is_same_v<V, Slice>) {
          for (const Arg& item : v.items) h = combine(h, hash_arg(item));
        } else if constexpr (std::is_same_v<V, Dict>) {
          for (const auto& [key, item] : v.items)
            h = combine(combine(h, std::hash<std::string>()(key)), hash_arg(item));
        }
      },
      arg.value);
  return h;
}

// Arg equality, except that floats compare by their bits: x * 0.0 and x * -0.0 differ.
bool same(const Arg& a, const Arg& b) {
  if (a.value.index() != b.value.index()) return false;
  if (a.is<double>())
    return std::bit_cast<uint64_t>(a.as<double>()) == std::bit_cast<uint64_t>(b.as<double>());
  auto same_items = [](const std::vector<Arg>& x, const std::vector<Arg>& y) {
    return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), same);
  };
  if (const std::vector<Arg>* items = a.sequence()) return same_items(*items, *b.sequence());
  if (a.is<Slice>()) return same_items(a.as<Slice>().items, b.as<Slice>().items);
  if (a.is<Dict>()) {
    const auto& x = a.as<Dict>().items;
    const auto& y = b.as<Dict>().items;
    return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), [](auto& p, auto& q) {
             return p.first == q.first && same(p.second, q.second);
           });
  }
  return a == b;
}

size_t hash_call(const Node& node) {
  size_t h = combine(static_cast<size_t>(node.kind()), std::hash<Symbol>()(node.target()));
  for (const Arg& a : node.args()) h = combine(h, hash_arg(a));
  return combine(h, hash_arg(node.kwargs()));
}

bool same_call(const Node& a, const Node& b) {
  return a.kind() == b.kind() && a.target() == b.target() &&
         same(Tuple{a.args()}, Tuple{b.args()}) && same(a.kwargs(), b.kwargs());
}

}  // namespace

void EliminateCommonSubexpressions::begin(const Program& program) const {
  written_ = written_in_place(program);
  seen_.clear();
}

void EliminateCommonSubexpressions::rewrite(PassContext& ctx, Node* node) const {
  if (node->kind() == NodeKind::Placeholder || node->kind() == NodeKind::Output) return;
  const Program& program = ctx.rewriter.program();
  // Why a node cannot stand for, or be replaced by, an equal one; empty if it can.
  auto reason = [&](const Node& n) -> std::string {
    std::string_view effect = side_effect(program, n);
    if (!effect.empty()) return std::string(effect);
    bool written = written_.contains(&n);
    auto check = [&](Node* operand) { written |= written_.contains(operand); };
    n.for_each_input(check);
    return written ? "reads or aliases a value modified in place" : "";
  };

  size_t hash = hash_call(*node);
  auto [first, last] = seen_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    Node* earlier = it->second;
    if (!same_call(*earlier, *node)) continue;
    std::string why_node = reason(*node);
    std::string why_earlier = why_node.empty() ? reason(*earlier) : "";
    if (why_node.empty() && why_earlier.empty()) return ctx.remove(node, earlier);
    // An earlier node that cannot be merged gives way to this one, if it can.
    if (why_node.empty()) it->second = node;
    return ctx.skip(*node, "repeats " + earlier->name() + ", but " +
                               (why_node.empty() ? earlier->name() : std::string("it")) + " " +
                               (why_node.empty() ? why_earlier : why_node));
  }
  seen_.emplace(hash, node);
}

}  // namespace fxopt
