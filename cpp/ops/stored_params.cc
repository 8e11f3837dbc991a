#include "ops/stored_params.h"

#include <stdexcept>

#include "ops/input_slot.h"
#include "rewrite/pass.h"
#include "tensor/tensor_ops.h"

namespace fxopt {
namespace {

constexpr std::string_view kModuleRecord = "module";
constexpr std::string_view kOperandsRecord = "operands";

bool path_exists(const Program& program, const std::string& path) {
  return program.taken_paths.contains(path) || program.modules.contains(path) ||
         program.attributes.contains(path);
}

// Where a new attribute for `param` goes: next to the one it replaces, or next to the weight.
std::string attribute_base(const StoredParams& params, const StoredParam& param) {
  if (param.tensor) return params.node->input(param.index, param.name)->node()->target().str();
  const StoredParam* weight = params.find("weight");
  std::string weight_path = params.node->input(weight->index, weight->name)->node()->target().str();
  size_t dot = weight_path.rfind('.');
  return dot == std::string::npos ? param.name : weight_path.substr(0, dot + 1) + param.name;
}

Arg replace_module(Rewriter& rewriter, const StoredParams& params,
                   const std::map<std::string, TensorInfo>& tensors, std::string_view suffix) {
  ModuleInfo copy = *rewriter.program().module(Symbol::intern(params.module));
  for (const auto& [name, tensor] : tensors) {
    const TensorInfo* original = params.tensor(name);
    copy.tensors[name] = stored_like(tensor, original ? *original : *params.tensor("weight"));
  }
  std::string path = rewriter.unique_path(params.module + "_" + std::string(suffix));
  rewriter.set_module(path, params.module, std::move(copy));
  rewriter.set_target(params.node, NodeKind::CallModule, Symbol::intern(path));
  return Tuple{{Arg(std::string(kModuleRecord)), Arg(params.module), Arg(path)}};
}

Arg replace_operands(Rewriter& rewriter, const StoredParams& params,
                     const std::map<std::string, TensorInfo>& tensors, std::string_view suffix) {
  Node* node = params.node;
  Tuple operands;
  // In operand order, so reverse re-reads the originals in the order the tracer read them.
  for (const StoredParam& param : params.params) {
    auto replaced = tensors.find(param.name);
    if (replaced == tensors.end()) continue;
    const TensorInfo& tensor = replaced->second;
    const Arg* passed = node->input(param.index, param.name);
    Node* old_read = passed ? passed->node() : nullptr;
    std::string path =
        rewriter.unique_path(attribute_base(params, param) + "_" + std::string(suffix));
    const TensorInfo& flags = param.tensor ? *param.tensor : *params.tensor("weight");
    rewriter.set_attribute(path, stored_like(tensor, flags));
    // Where the replaced read was, so reverse puts the original back in its place.
    Node* read = rewriter.insert_before(old_read ? old_read : node, NodeKind::GetAttr,
                                        Symbol::intern(path), path, {});
    auto [args, kwargs] = with_operand(*node, param.index, param.name, Arg(read));
    rewriter.set_inputs(node, std::move(args), std::move(kwargs));
    if (old_read) rewriter.erase_if_unused_read(old_read);
    Arg original = old_read ? Arg(old_read->target().str()) : Arg(None{});
    Arg original_name = old_read ? Arg(old_read->name()) : Arg(None{});
    operands.items.push_back(Tuple{{Arg(param.name), Arg(int64_t(param.index)), std::move(original),
                                    Arg(passed != nullptr), Arg(path), std::move(original_name)}});
  }
  return Tuple{{Arg(std::string(kOperandsRecord)), std::move(operands)}};
}

[[noreturn]] void malformed(const Node& node) {
  throw PassError(node, "malformed stored-parameter record");
}

void restore_module(Rewriter& rewriter, Node* node, const std::string& original,
                    const std::string& created) {
  if (node->target().str() != created)
    throw PassError(*node, "calls '" + node->target().str() + "', not the module '" + created +
                               "' this transformation made");
  if (!path_exists(rewriter.program(), original))
    throw PassError(*node, "the original module '" + original + "' is gone from the GraphModule");
  rewriter.set_target(node, NodeKind::CallModule, Symbol::intern(original));
  if (rewriter.graph().find(NodeKind::CallModule, Symbol::intern(created)).empty())
    rewriter.remove_module(created);
}

void restore_operand(Rewriter& rewriter, Node* node, const std::vector<Arg>& entry) {
  if (entry.size() != 6 || !entry[0].is<std::string>() || !entry[1].is<int64_t>() ||
      !entry[3].is<bool>() || !entry[4].is<std::string>())
    malformed(*node);
  const std::string& name = entry[0].as<std::string>();
  size_t index = size_t(entry[1].as<int64_t>());
  const std::string& created = entry[4].as<std::string>();
  const Arg* current = node->input(index, name);
  Node* read = current ? current->node() : nullptr;
  if (!read || !read->is(NodeKind::GetAttr, Symbol::intern(created)))
    throw PassError(*node, "its " + name + " no longer reads '" + created + "'");

  std::optional<Arg> original;
  if (entry[3].as<bool>()) original = Arg(None{});
  if (entry[2].is<std::string>()) {
    const std::string& path = entry[2].as<std::string>();
    if (!path_exists(rewriter.program(), path))
      throw PassError(*node,
                      "the original " + name + " '" + path + "' is gone from the GraphModule");
    // The original read's name, so reverse rebuilds the traced graph's code exactly. A read
    // still there (the tensor is shared with another op) is read again; one forward erased
    // comes back before the op, and the driver moves it to where it stood (rewrite/placement.h).
    std::string name_hint = entry[5].is<std::string>() ? entry[5].as<std::string>() : path;
    original = Arg(rewriter.read_attribute(node, path, name_hint));
  }
  auto [args, kwargs] = with_operand(*node, index, name, std::move(original));
  rewriter.set_inputs(node, std::move(args), std::move(kwargs));
  rewriter.erase_if_unused_read(read);
  if (rewriter.graph().find(NodeKind::GetAttr, Symbol::intern(created)).empty())
    rewriter.remove_attribute(created);
}

}  // namespace

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

Arg replace_params(Rewriter& rewriter, const StoredParams& params,
                   const std::map<std::string, TensorInfo>& tensors, std::string_view suffix) {
  for (const auto& [name, tensor] : tensors)
    if (!params.find(name)) throw std::logic_error("op has no parameter '" + name + "'");
  return params.module.empty() ? replace_operands(rewriter, params, tensors, suffix)
                               : replace_module(rewriter, params, tensors, suffix);
}

void restore_params(Rewriter& rewriter, Node* node, const Arg& record) {
  const std::vector<Arg>* r = record.sequence();
  if (!r || r->empty() || !(*r)[0].is<std::string>()) malformed(*node);
  const std::string& kind = (*r)[0].as<std::string>();
  if (kind == kModuleRecord && r->size() == 3 && (*r)[1].is<std::string>() &&
      (*r)[2].is<std::string>())
    return restore_module(rewriter, node, (*r)[1].as<std::string>(), (*r)[2].as<std::string>());
  if (kind != kOperandsRecord || r->size() != 2 || !(*r)[1].sequence()) malformed(*node);
  for (const Arg& entry : *(*r)[1].sequence()) {
    if (!entry.sequence()) malformed(*node);
    restore_operand(rewriter, node, *entry.sequence());
  }
}

}  // namespace fxopt
