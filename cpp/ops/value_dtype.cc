#include "ops/value_dtype.h"

#include "ops/dtype_flow.h"

namespace fxopt {
namespace {

// torch's promotion between two floating dtypes: the wider; float16 with bfloat16 is float32.
std::string promote(const std::string& a, const std::string& b) {
  if (a.empty() || a == b) return b;
  if (a == "float64" || b == "float64") return "float64";
  return "float32";
}

// The dtype of the first floating tensor a module holds (a lowered Linear's bfloat16 weight).
std::string module_dtype(const ModuleInfo& module) {
  for (const auto& [name, tensor] : module.tensors)
    if (tensor.present() && is_float(tensor.dtype)) return tensor.dtype;
  return {};
}

bool is_type_as(const Node& node) {
  static const Symbol method = Symbol::intern("type_as");
  static const Symbol aten = Symbol::intern("aten.type_as.default");
  return node.is(NodeKind::CallMethod, method) || node.is(NodeKind::CallFunction, aten);
}

}  // namespace

ValueDtypes::ValueDtypes(const Program& program) {
  for (const Node* node : program.graph) dtypes_[node] = follow(program, *node);
}

std::string_view ValueDtypes::of(const Node* node) const {
  auto it = dtypes_.find(node);
  return it == dtypes_.end() ? std::string_view() : std::string_view(it->second);
}

std::string ValueDtypes::follow(const Program& program, const Node& node) const {
  const std::string& fact = node.dtype();
  if (node.kind() == NodeKind::Placeholder) return fact;
  if (node.kind() == NodeKind::GetAttr) {
    const TensorInfo* tensor = program.attribute(node.target());
    return tensor ? tensor->dtype : fact;
  }
  if (!fact.empty() && !is_float(fact)) return fact;  // integer and boolean results stay so
  if (std::string_view named = explicit_result_dtype(program, node); !named.empty())
    return std::string(named);
  if (follows_first_operand(node)) {
    const Node* x = node.args().empty() ? nullptr : node.args()[0].node();
    auto it = x ? dtypes_.find(x) : dtypes_.end();
    return it == dtypes_.end() ? fact : it->second;
  }
  if (is_type_as(node)) {  // x.type_as(y): y's dtype
    const Node* like = node.args().size() == 2 ? node.args()[1].node() : nullptr;
    auto it = like ? dtypes_.find(like) : dtypes_.end();
    return it == dtypes_.end() ? fact : it->second;
  }
  if (node.kind() == NodeKind::CallModule)
    if (const ModuleInfo* module = program.module(node.target()))
      if (std::string held = module_dtype(*module); !held.empty()) return held;
  std::string result;
  node.for_each_input([&](Node* input) {
    auto it = dtypes_.find(input);
    if (it != dtypes_.end() && is_float(it->second)) result = promote(result, it->second);
  });
  return result.empty() ? fact : result;  // no floating operand: a constant the op creates
}

}  // namespace fxopt
