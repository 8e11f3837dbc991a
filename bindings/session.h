// One bridge session: a GraphModule imported into a core Program, the passes run on it, and the
// edit log handed back to Python edit by edit.
//
// The session owns everything that ties core values to Python objects: fx nodes by node id,
// opaque argument values, and target callables by symbol. The core itself never sees them.
#pragma once

#include <nanobind/nanobind.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "ir/program.h"
#include "rewrite/edit_log.h"
#include "rewrite/pass.h"

namespace fxopt::bindings {

namespace nb = nanobind;

class Session {
 public:
  // node_type: torch.fx.Node; qualname(target) -> str names call_function targets;
  // resolve(name) -> callable turns a symbol the graph did not have back into a target.
  Session(nb::handle node_type, nb::object qualname, nb::object resolve);

  // Imports fx nodes in order; their fxopt metadata comes along, the rest of node.meta stays.
  void import_graph(nb::handle nodes);
  void add_module(const std::string& path, const std::string& type, nb::dict attributes,
                  nb::dict tensors);
  void add_attribute(const std::string& path, const TensorInfo& tensor);
  void add_taken_paths(nb::handle paths);
  // Node names fx never gives (Graph::reserve_names).
  void reserve_names(nb::handle names);
  // The rank of each imported node's value, by import position; -1 where fx does not know it.
  // Per imported node (by position), (dtype name, sizes with -1 for symbolic ones, device or "")
  // or None.
  void set_values(nb::handle values);

  PassResult run(const std::string& pass, nb::dict options, const std::string& signature,
                 bool reverse, nb::object tensor_ops);

  size_t edit_count() const { return log_.size(); }
  // The edit as a Python tuple; its node references must already be bound.
  nb::tuple edit(size_t index);
  void clear_edits() { log_.clear(); }
  void bind(uint64_t id, nb::handle fx_node);
  nb::object py_node(uint64_t id) const;

  // Ids of the live nodes in order, and one node as (op, target, name, args, kwargs, origin).
  std::vector<uint64_t> node_ids() const;
  nb::tuple node(uint64_t id);
  nb::list lint() const;
  size_t size() const { return program_.graph.size(); }

 private:
  Arg to_arg(nb::handle value);
  Arg sequence_to_arg(nb::handle value, bool is_list);
  // Node references become their fx nodes, or their entries in `values` when given.
  using NodeValues = std::unordered_map<const Node*, nb::object>;
  nb::object to_py(const Arg& arg, const NodeValues* values = nullptr) const;
  nb::object to_py(const Args& args, const NodeValues* values = nullptr) const;
  // (target callable or method name, is_method, args, kwargs) of `node`, with `operands` (as
  // TensorInfo objects) for the nodes it reads: what TensorOps::evaluate calls in Python.
  nb::tuple call_form(const Node& node, const std::vector<TensorInfo>& operands);
  nb::object target_object(NodeKind kind, Symbol target);
  Symbol target_symbol(NodeKind kind, nb::handle target);
  nb::object tensor_to_py(const TensorInfo& tensor) const;

  Program program_;
  EditLog log_;
  nb::handle node_type_;
  nb::object qualname_;
  nb::object resolve_;
  std::unordered_map<PyObject*, Node*> imported_;  // fx node -> core node, during import
  std::unordered_map<uint64_t, nb::object> py_nodes_;
  std::vector<nb::object> opaques_;
  std::unordered_map<PyObject*, uint64_t> opaque_by_object_;  // opaques_ keeps the keys alive
  nb::dict opaque_by_value_;  // equal devices, dtypes, layouts, memory formats -> one id
  std::unordered_map<PyObject*, Symbol> symbols_;  // call_function target -> symbol
  std::unordered_map<Symbol, nb::object> callables_;
};

}  // namespace fxopt::bindings
