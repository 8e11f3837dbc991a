// Values that appear in node arguments, keyword arguments and metadata.
//
// Mirrors what torch.fx allows in `Node.args`: references to other nodes, Python scalars,
// strings, None and nested lists / tuples / dicts. Anything else (dtypes, devices, slices,
// tensors held as constants) is an Opaque handle owned by the bridge: the core passes it through
// untouched, so an import followed by an export reproduces the original value exactly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace fxopt {

class Node;
struct Arg;

struct None {
  friend bool operator==(None, None) { return true; }
};
struct Opaque {
  uint64_t id = 0;
  friend bool operator==(Opaque, Opaque) = default;
};
struct List {
  std::vector<Arg> items;
  friend bool operator==(const List&, const List&) = default;
};
struct Tuple {
  std::vector<Arg> items;
  friend bool operator==(const Tuple&, const Tuple&) = default;
};
// A Python slice; kept structured because fx allows node references inside (x[:, n]).
struct Slice {
  std::vector<Arg> items;  // start, stop, step
  friend bool operator==(const Slice&, const Slice&) = default;
};
struct Dict {
  std::vector<std::pair<std::string, Arg>> items;
  friend bool operator==(const Dict&, const Dict&) = default;

  const Arg* find(std::string_view key) const;
  void set(std::string_view key, Arg value);
  bool erase(std::string_view key);
};

struct Arg {
  using Value = std::variant<None, Node*, bool, int64_t, double, std::string, List, Tuple, Slice,
                             Dict, Opaque>;
  Value value;

  Arg() = default;
  Arg(None) {}
  Arg(Node* node) : value(node) {}
  Arg(bool b) : value(b) {}
  Arg(int v) : value(int64_t{v}) {}
  Arg(int64_t v) : value(v) {}
  Arg(double v) : value(v) {}
  Arg(const char* s) : value(std::string(s)) {}
  Arg(std::string s) : value(std::move(s)) {}
  Arg(List l) : value(std::move(l)) {}
  Arg(Tuple t) : value(std::move(t)) {}
  Arg(Slice s) : value(std::move(s)) {}
  Arg(Dict d) : value(std::move(d)) {}
  Arg(Opaque o) : value(o) {}

  template <class T>
  bool is() const {
    return std::holds_alternative<T>(value);
  }
  template <class T>
  const T& as() const {
    return std::get<T>(value);
  }
  bool is_none() const { return is<None>(); }
  Node* node() const { return is<Node*>() ? as<Node*>() : nullptr; }
  // A Python int or float (bools excluded, as torch treats them as a separate type).
  bool is_number() const { return is<int64_t>() || is<double>(); }
  std::optional<double> number() const;
  std::optional<int64_t> integer() const {
    return is<int64_t>() ? std::optional(as<int64_t>()) : std::nullopt;
  }
  // The elements of a list or tuple; nullptr for anything else.
  const std::vector<Arg>* sequence() const;

  // Calls fn(Node*) for every node reference, depth first, in argument order.
  template <class F>
  void for_each_node(F&& fn) const;
  // A copy with every node reference replaced by fn(Node*).
  template <class F>
  Arg map_nodes(F&& fn) const;

  friend bool operator==(const Arg&, const Arg&) = default;
};

using Args = std::vector<Arg>;
using Kwargs = Dict;

// A Python list of ints (a convolution's stride or padding operand, say).
List int_list(const std::vector<int64_t>& values);

template <class F>
void Arg::for_each_node(F&& fn) const {
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, Node*>) {
          fn(v);
        } else if constexpr (std::is_same_v<V, List> || std::is_same_v<V, Tuple> ||
                             std::is_same_v<V, Slice>) {
          for (const Arg& item : v.items) item.for_each_node(fn);
        } else if constexpr (std::is_same_v<V, Dict>) {
          for (const auto& [key, item] : v.items) item.for_each_node(fn);
        }
      },
      value);
}

template <class F>
Arg Arg::map_nodes(F&& fn) const {
  return std::visit(
      [&](const auto& v) -> Arg {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, Node*>) {
          return Arg(fn(v));
        } else if constexpr (std::is_same_v<V, List> || std::is_same_v<V, Tuple> ||
                             std::is_same_v<V, Slice>) {
          V out;
          out.items.reserve(v.items.size());
          for (const Arg& item : v.items) out.items.push_back(item.map_nodes(fn));
          return Arg(std::move(out));
        } else if constexpr (std::is_same_v<V, Dict>) {
          Dict out;
          out.items.reserve(v.items.size());
          for (const auto& [key, item] : v.items) out.items.emplace_back(key, item.map_nodes(fn));
          return Arg(std::move(out));
        } else {
          return Arg(v);
        }
      },
      value);
}

// Debug rendering in Python syntax, used by lint messages and tests.
std::string to_string(const Arg& arg);

}  // namespace fxopt
