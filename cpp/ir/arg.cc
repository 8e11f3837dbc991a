#include "ir/arg.h"

#include <algorithm>
#include <sstream>

#include "ir/node.h"

namespace fxopt {

const Arg* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(std::string_view key, Arg value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::string(key), std::move(value));
}

bool Dict::erase(std::string_view key) {
  auto it =
      std::find_if(items.begin(), items.end(), [&](const auto& kv) { return kv.first == key; });
  if (it == items.end()) return false;
  items.erase(it);
  return true;
}

std::optional<double> Arg::number() const {
  if (is<int64_t>()) return static_cast<double>(as<int64_t>());
  if (is<double>()) return as<double>();
  return std::nullopt;
}

List int_list(const std::vector<int64_t>& values) {
  List out;
  for (int64_t v : values) out.items.push_back(v);
  return out;
}

const std::vector<Arg>* Arg::sequence() const {
  if (is<List>()) return &as<List>().items;
  if (is<Tuple>()) return &as<Tuple>().items;
  return nullptr;
}

namespace {

void render(std::ostream& out, const Arg& arg) {
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, None>) {
          out << "None";
        } else if constexpr (std::is_same_v<V, Node*>) {
          out << '%' << v->name();
        } else if constexpr (std::is_same_v<V, bool>) {
          out << (v ? "True" : "False");
        } else if constexpr (std::is_same_v<V, int64_t> || std::is_same_v<V, double>) {
          out << v;
        } else if constexpr (std::is_same_v<V, std::string>) {
          out << '\'' << v << '\'';
        } else if constexpr (std::is_same_v<V, Slice>) {
          out << "slice(";
          for (size_t i = 0; i < v.items.size(); ++i) {
            if (i) out << ", ";
            render(out, v.items[i]);
          }
          out << ')';
        } else if constexpr (std::is_same_v<V, List> || std::is_same_v<V, Tuple>) {
          constexpr bool is_list = std::is_same_v<V, List>;
          out << (is_list ? '[' : '(');
          for (size_t i = 0; i < v.items.size(); ++i) {
            if (i) out << ", ";
            render(out, v.items[i]);
          }
          if (!is_list && v.items.size() == 1) out << ',';
          out << (is_list ? ']' : ')');
        } else if constexpr (std::is_same_v<V, Dict>) {
          out << '{';
          for (size_t i = 0; i < v.items.size(); ++i) {
            if (i) out << ", ";
            out << '\'' << v.items[i].first << "': ";
            render(out, v.items[i].second);
          }
          out << '}';
        } else {
          out << "<opaque " << v.id << '>';
        }
      },
      arg.value);
}

}  // namespace

std::string to_string(const Arg& arg) {
  std::ostringstream out;
  render(out, arg);
  return out.str();
}

}  // namespace fxopt
