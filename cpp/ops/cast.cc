#include "ops/cast.h"

namespace fxopt {
namespace {

const Symbol kAtenTo = Symbol::intern("aten.to.dtype");
const Symbol kAtenTypeAs = Symbol::intern("aten.type_as.default");
const Symbol kMethodTo = Symbol::intern("to");
const Symbol kMethodTypeAs = Symbol::intern("type_as");

}  // namespace

bool is_aten_call(const Node& node) {
  return node.kind() == NodeKind::CallFunction && node.target().str().starts_with("aten.");
}

Node* insert_cast(Rewriter& rewriter, Node* anchor, Node* value, const Arg& dtype, bool aten) {
  return rewriter.insert_before(anchor, aten ? NodeKind::CallFunction : NodeKind::CallMethod,
                                aten ? kAtenTo : kMethodTo, "to", {value, dtype});
}

Node* insert_type_as(Rewriter& rewriter, Node* anchor, Node* value, Node* like, bool aten) {
  return rewriter.insert_before(anchor, aten ? NodeKind::CallFunction : NodeKind::CallMethod,
                                aten ? kAtenTypeAs : kMethodTypeAs, "type_as", {value, like});
}

Node* cast_source(const Node& node) {
  bool cast =
      node.is(NodeKind::CallFunction, kAtenTo) || node.is(NodeKind::CallFunction, kAtenTypeAs) ||
      node.is(NodeKind::CallMethod, kMethodTo) || node.is(NodeKind::CallMethod, kMethodTypeAs);
  return cast && !node.args().empty() ? node.args()[0].node() : nullptr;
}

}  // namespace fxopt
