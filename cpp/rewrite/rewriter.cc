#include "rewrite/rewriter.h"

#include <stdexcept>

namespace fxopt {

Edit& Rewriter::record(Edit::Kind kind, uint64_t node) {
  Edit& edit = log_.emplace_back();
  edit.kind = kind;
  edit.node = node;
  return edit;
}

Node* Rewriter::insert_before(Node* anchor, NodeKind kind, Symbol target,
                              std::string_view name_hint, Args args, Kwargs kwargs) {
  Node* node = program_.graph.insert_before(anchor, kind, target, name_hint, args, kwargs);
  Edit& edit = record(Edit::Kind::CreateNode, node->id());
  edit.anchor = anchor->id();
  edit.node_kind = kind;
  edit.target = target;
  edit.name = node->name();
  edit.args = std::move(args);
  edit.kwargs = std::move(kwargs);
  return node;
}

void Rewriter::set_inputs(Node* node, Args args, Kwargs kwargs) {
  program_.graph.set_inputs(node, args, kwargs);
  Edit& edit = record(Edit::Kind::SetInputs, node->id());
  edit.args = std::move(args);
  edit.kwargs = std::move(kwargs);
}

void Rewriter::set_target(Node* node, NodeKind kind, Symbol target) {
  program_.graph.set_target(node, kind, target);
  Edit& edit = record(Edit::Kind::SetTarget, node->id());
  edit.node_kind = kind;
  edit.target = target;
}

void Rewriter::set_meta(Node* node, std::string_view key, Arg value) {
  program_.graph.set_meta(node, key, value);
  Edit& edit = record(Edit::Kind::SetMeta, node->id());
  edit.name = key;
  edit.value = std::move(value);
}

void Rewriter::erase_meta(Node* node, std::string_view key) {
  if (!node->meta().find(key)) return;
  program_.graph.erase_meta(node, key);
  record(Edit::Kind::EraseMeta, node->id()).name = key;
}

void Rewriter::replace_all_uses(Node* old_node, Node* replacement, Node* except) {
  for (Node* user : program_.graph.replace_all_uses(old_node, replacement, except)) {
    Edit& edit = record(Edit::Kind::SetInputs, user->id());
    edit.args = user->args();
    edit.kwargs = user->kwargs();
  }
}

void Rewriter::erase(Node* node) {
  if (before_erase) before_erase(*node);
  program_.graph.erase(node);
  record(Edit::Kind::EraseNode, node->id());
}

void Rewriter::move_before(Node* node, Node* anchor) {
  if (node->next() == anchor) return;
  program_.graph.move_before(node, anchor);
  record(Edit::Kind::MoveNode, node->id()).anchor = anchor->id();
}

void Rewriter::replace_and_erase(Node* old_node, Node* replacement) {
  replace_all_uses(old_node, replacement);
  erase(old_node);
}

void Rewriter::erase_if_unused_read(Node* node) {
  if (node->kind() == NodeKind::GetAttr && node->users().empty() && !node->erased()) erase(node);
}

Node* Rewriter::read_attribute(Node* user, const std::string& path, std::string_view name) {
  Symbol target = Symbol::intern(path);
  for (Node* read : program_.graph.find(NodeKind::GetAttr, target))
    if (program_.graph.before(read, user)) return read;
  return insert_before(user, NodeKind::GetAttr, target, name.empty() ? path : name, {});
}

void Rewriter::set_module(const std::string& path, const std::string& like, ModuleInfo module) {
  program_.modules[path] = module;
  program_.taken_paths.insert(path);
  Edit& edit = record(Edit::Kind::SetModule);
  edit.name = path;
  edit.like = like;
  edit.module = std::move(module);
}

void Rewriter::remove_module(const std::string& path) {
  program_.modules.erase(path);
  record(Edit::Kind::RemoveModule).name = path;
}

void Rewriter::set_attribute(const std::string& path, TensorInfo tensor) {
  program_.attributes[path] = tensor;
  program_.taken_paths.insert(path);
  Edit& edit = record(Edit::Kind::SetAttribute);
  edit.name = path;
  edit.tensor = std::move(tensor);
}

void Rewriter::remove_attribute(const std::string& path) {
  program_.attributes.erase(path);
  // An attribute stored in a module is also one of that module's tensors as imported: a later
  // copy of the module (a reverse rebuilding it) must not bring the removed tensor back.
  size_t dot = path.rfind('.');
  if (dot != std::string::npos) {
    auto module = program_.modules.find(path.substr(0, dot));
    if (module != program_.modules.end()) module->second.tensors.erase(path.substr(dot + 1));
  }
  record(Edit::Kind::RemoveAttribute).name = path;
}

}  // namespace fxopt
