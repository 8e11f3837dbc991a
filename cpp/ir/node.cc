#include "ir/node.h"

#include <array>

namespace fxopt {
namespace {

constexpr std::array<std::string_view, 6> kKindNames = {
    "placeholder", "get_attr", "call_function", "call_module", "call_method", "output"};

}  // namespace

std::string_view kind_name(NodeKind kind) { return kKindNames[static_cast<size_t>(kind)]; }

std::optional<NodeKind> parse_kind(std::string_view name) {
  for (size_t i = 0; i < kKindNames.size(); ++i)
    if (kKindNames[i] == name) return static_cast<NodeKind>(i);
  return std::nullopt;
}

const Arg* Node::input(size_t index, std::string_view keyword) const {
  if (index < args_.size()) return &args_[index];
  return kwargs_.find(keyword);
}

std::string Node::describe() const {
  return "%" + name_ + " : " + std::string(kind_name(kind_)) + "[target=" + target_.str() +
         "](args = " + to_string(Tuple{args_}) + ", kwargs = " + to_string(kwargs_) + ")";
}

}  // namespace fxopt
