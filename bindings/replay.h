// A session's structural edits applied to its GraphModule, each with the step that undoes it.
//
// A sync writes tens of thousands of edits on a large graph (a merge creates nodes and modules,
// a bias fusion copies every Linear it rewrites). Replayed one at a time in Python, each
// cost a Python frame, a view and its converted fields on top of fx's own work; here the
// edits go straight from the log to fx's public API (`Graph.create_node`, `Node.prepend`, the
// `args`/`target` setters, `Graph.erase_node`) and to nn.Module's tables, all or nothing: the
// bridge undoes every applied edit when a later one (or the metadata written after them) fails.
// Erasing nodes is deferred until nothing can fail, since an erased fx node cannot come back.
#pragma once

#include <nanobind/nanobind.h>

#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "bindings/session.h"
#include "bindings/tensor_table.h"

namespace fxopt::bindings {

namespace nb = nanobind;

class Replay {
 public:
  // `module_type`: torch.nn.Module; `registration_hooks`: torch's global module registration
  // hooks (a dict; while any is registered, modules are set through nn.Module.__setattr__ so the
  // hooks see them); `direct_inputs`: set a node's args and kwargs in one call of fx's
  // `Node._update_args_kwargs` instead of two property assignments (only on the torch versions
  // that was checked against: the assignments do nothing else there).
  Replay(Session& session, nb::handle graph_module, TensorTable& tensors, nb::handle module_type,
         nb::handle registration_hooks, bool direct_inputs);

  // Applies the structural edits at `indices` of the session's log, in order.
  void apply(const std::vector<size_t>& indices);
  // Raises unless every node the log erases is read only by others it erases.
  void check_erasable() const;
  // Erases those nodes (after check_erasable); the replay is final from here on.
  void erase();
  // Undoes every applied edit, last first.
  void undo();
  // fx gave a created node another name than the core did: the session cannot be reused.
  bool renamed() const { return renamed_; }

 private:
  void create(const Edit& edit);
  // Gives the fx node made for core node `id` the value fx recorded (meta "val", "tensor_meta")
  // for the node whose value it computes, where a pass said so (Node::value_twin).
  void share_recorded_value(uint64_t id, nb::handle node) const;
  void set_inputs(const Edit& edit);
  void set_target(const Edit& edit);
  void move(const Edit& edit);
  void set_module(const Edit& edit);
  void set_attribute(const Edit& edit);
  void remove_slot(const Edit& edit);

  void write_inputs(nb::handle node, nb::handle args, nb::handle kwargs) const;
  // The object at a dotted path below the GraphModule ("" is the GraphModule itself).
  nb::object lookup_path(std::string_view path) const;
  // A copy of `like` sharing its tensors, with its own tables (copy-on-write).
  nb::object copy_module(nb::handle like, Symbol type);
  // Registers the tensor `info` names (None where absent) as a parameter or buffer of `module`.
  void store(nb::handle module, nb::handle name, const TensorInfo& info);
  void put_module(nb::handle parent, nb::handle name, nb::handle module) const;
  // Applies `change` to the slot at `path`, the parent's tables saved first.
  void edit_slot(const std::string& path,
                 const std::function<void(nb::handle, nb::handle)>& change);

  Session& session_;
  TensorTable& tensors_;
  nb::object graph_module_, graph_, module_type_, registration_hooks_;
  bool direct_inputs_;
  bool renamed_ = false;
  std::vector<std::function<void()>> undo_;
  std::vector<nb::object> to_erase_;
  std::unordered_set<PyObject*> saved_tables_;  // the undo steps keep them alive
};

}  // namespace fxopt::bindings
