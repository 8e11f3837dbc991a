#include "ops/shape_read.h"

#include <algorithm>
#include <initializer_list>

#include "ir/symbol.h"

namespace fxopt {
namespace {

const Symbol kGetattr = Symbol::intern("getattr");

bool is_any(const Node& node, NodeKind kind, std::initializer_list<Symbol> targets) {
  return node.kind() == kind && std::ranges::find(targets, node.target()) != targets.end();
}

// The shape reads that take the value first and nothing else that is a graph value.
bool is_shape_call(const Node& user) {
  static const Symbol size = Symbol::intern("size"), dim = Symbol::intern("dim"),
                      ndimension = Symbol::intern("ndimension"), numel = Symbol::intern("numel"),
                      sym_size = Symbol::intern("aten.sym_size.int"),
                      sym_numel = Symbol::intern("aten.sym_numel.default"),
                      aten_dim = Symbol::intern("aten.dim.default");
  if (is_any(user, NodeKind::CallMethod, {size, dim, ndimension, numel})) return true;
  if (is_any(user, NodeKind::CallFunction, {sym_size, sym_numel, aten_dim})) return true;
  return user.is(NodeKind::CallFunction, kGetattr) && user.args().size() == 2 &&
         (user.args()[1] == Arg("shape") || user.args()[1] == Arg("ndim"));
}

}  // namespace

bool reads_only_shape(const Node& user, const Node& value) {
  if (!is_shape_call(user) || user.args().empty() || user.args()[0].node() != &value) return false;
  int references = 0;
  user.for_each_input([&](Node*) { ++references; });
  return references == 1;  // the value, once, and no other graph value
}

bool only_shape_read_besides(const Node& value, const Node& reader) {
  return std::ranges::all_of(value.users(), [&](const Node* user) {
    return user == &reader || reads_only_shape(*user, value);
  });
}

}  // namespace fxopt
