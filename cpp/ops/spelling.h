// How op views test a node's spelling: which function or method it calls, and its operands.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "ir/node.h"

namespace fxopt {

// A call_function of one of `targets` (fx's qualified names, ATen overloads).
inline bool is_function(const Node& node, std::initializer_list<const char*> targets) {
  return node.kind() == NodeKind::CallFunction &&
         std::any_of(targets.begin(), targets.end(),
                     [&](const char* t) { return node.target().str() == t; });
}

// A call_method of one of `targets` (method names).
inline bool is_method(const Node& node, std::initializer_list<const char*> targets) {
  return node.kind() == NodeKind::CallMethod &&
         std::any_of(targets.begin(), targets.end(),
                     [&](const char* t) { return node.target().str() == t; });
}

// The graph value passed as operand (`index`, `keyword`), or nullptr (absent, or a constant).
inline Node* node_input(const Node& node, size_t index, std::string_view keyword) {
  const Arg* a = node.input(index, keyword);
  return a ? a->node() : nullptr;
}

}  // namespace fxopt
