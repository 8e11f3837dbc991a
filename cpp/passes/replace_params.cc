#include "passes/replace_params.h"

#include <stdexcept>

#include "ops/input_slot.h"
#include "rewrite/pass_error.h"
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

void restore_operand(Rewriter& rewriter, Node* node, const RecordField& operand) {
  std::vector<RecordField> entry = operand.items(6);
  const std::string& name = entry[0].text();
  int64_t position = entry[1].integer();
  if (position < 0) entry[1].fail("is not an operand position");
  size_t index = size_t(position);
  const std::string& created = entry[4].text();
  const Arg* current = node->input(index, name);
  Node* read = current ? current->node() : nullptr;
  if (!read || !read->is(NodeKind::GetAttr, Symbol::intern(created)))
    throw PassError(*node, "its " + name + " no longer reads '" + created + "'");

  std::optional<Arg> original;
  if (entry[3].boolean()) original = Arg(None{});
  if (const std::string* path_or_none = entry[2].optional_text()) {
    const std::string& path = *path_or_none;
    if (!path_exists(rewriter.program(), path))
      throw PassError(*node,
                      "the original " + name + " '" + path + "' is gone from the GraphModule");
    // The original read's name, so reverse rebuilds the traced graph's code exactly. A read
    // still there (the tensor is shared with another op) is read again; one forward erased
    // comes back before the op, and the driver moves it to where it stood (rewrite/placement.h).
    const std::string* read_name = entry[5].optional_text();
    std::string name_hint = read_name ? *read_name : path;
    original = Arg(rewriter.read_attribute(node, path, name_hint));
  }
  auto [args, kwargs] = with_operand(*node, index, name, std::move(original));
  rewriter.set_inputs(node, std::move(args), std::move(kwargs));
  rewriter.erase_if_unused_read(read);
  if (rewriter.graph().find(NodeKind::GetAttr, Symbol::intern(created)).empty())
    rewriter.remove_attribute(created);
}

}  // namespace

Arg replace_params(Rewriter& rewriter, const StoredParams& params,
                   const std::map<std::string, TensorInfo>& tensors, std::string_view suffix) {
  for (const auto& [name, tensor] : tensors)
    if (!params.find(name)) throw std::logic_error("op has no parameter '" + name + "'");
  return params.module.empty() ? replace_operands(rewriter, params, tensors, suffix)
                               : replace_module(rewriter, params, tensors, suffix);
}

void restore_params(Rewriter& rewriter, Node* node, const RecordField& record) {
  std::vector<RecordField> r = record.items();
  if (r.empty()) record.fail("is empty");
  if (r[0].text() == kModuleRecord) {
    r = record.items(3);
    return restore_module(rewriter, node, r[1].text(), r[2].text());
  }
  if (r[0].text() != kOperandsRecord) r[0].fail("is neither 'module' nor 'operands'");
  for (const RecordField& operand : record.items(2)[1].items())
    restore_operand(rewriter, node, operand);
}

}  // namespace fxopt
