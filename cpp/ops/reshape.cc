#include "ops/reshape.h"

#include <array>

namespace fxopt {

Node* reshape_source(const Node& node) {
  static const std::array<Symbol, 4> functions = {
      Symbol::intern("torch.reshape"), Symbol::intern("aten.view.default"),
      Symbol::intern("aten.reshape.default"), Symbol::intern("aten._unsafe_view.default")};
  static const std::array<Symbol, 2> methods = {Symbol::intern("view"), Symbol::intern("reshape")};
  bool reshape = false;
  if (node.kind() == NodeKind::CallFunction)
    for (Symbol f : functions) reshape |= node.target() == f;
  if (node.kind() == NodeKind::CallMethod)
    for (Symbol m : methods) reshape |= node.target() == m;
  // x.view(dtype) reinterprets the bytes: its operand is not a size (an int, a list or a node).
  if (!reshape || node.args().size() < 2 || !node.kwargs().items.empty()) return nullptr;
  const Arg& size = node.args()[1];
  if (!size.integer() && !size.sequence() && !size.node()) return nullptr;
  return node.args()[0].node();
}

}  // namespace fxopt
