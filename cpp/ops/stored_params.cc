#include "ops/stored_params.h"

namespace fxopt {

const StoredParam* StoredParams::find(std::string_view name) const {
  for (const StoredParam& p : params)
    if (p.name == name) return &p;
  return nullptr;
}

const TensorInfo* StoredParams::tensor(std::string_view name) const {
  const StoredParam* p = find(name);
  return p ? p->tensor : nullptr;
}

std::optional<StoredParams> read_stored_params(
    const Program& program, Node* node, const std::vector<std::pair<size_t, std::string>>& operands,
    std::string* why_not) {
  StoredParams out{node, {}, {}};
  if (node->kind() == NodeKind::CallModule) {
    const ModuleInfo* module = program.module(node->target());
    if (!module) {
      *why_not = "module '" + node->target().str() + "' is not known to the core";
      return std::nullopt;
    }
    out.module = node->target().str();
    for (const auto& [index, name] : operands) {
      const TensorInfo* t = module->tensor(name);
      out.params.push_back({name, index, t && t->present() ? t : nullptr});
    }
    return out;
  }
  for (const auto& [index, name] : operands) {
    const Arg* operand = node->input(index, name);
    StoredParam param{name, index, nullptr};
    if (operand && !operand->is_none()) {
      Node* read = operand->node();
      param.tensor =
          read && read->kind() == NodeKind::GetAttr ? program.attribute(read->target()) : nullptr;
      if (!param.tensor) {
        *why_not = "its " + name + " is not a stored tensor (a get_attr of a parameter or buffer)";
        return std::nullopt;
      }
    }
    out.params.push_back(std::move(param));
  }
  return out;
}

}  // namespace fxopt
