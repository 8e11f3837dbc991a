// One bridge session: a GraphModule imported into a core Program, the passes run on it, and the
// edit log written back onto the GraphModule (`Replay` for structure, `write_meta` for metadata).
//
// The session owns everything that ties core values to Python objects: fx nodes by node id,
// opaque argument values, and target callables by symbol. The core itself never sees them.
// It stays attached to its GraphModule between transformations (`fxopt.engine.bridge.attached`), so it
// also keeps a fingerprint of the fx graph as it last saw it: the identity of every node and of
// the objects fx replaces on any edit (op, target, name, args, kwargs, meta, fxopt's metadata
// values and the recorded value facts). `matches` compares the live fx graph with it in one native walk.
#pragma once

#include <nanobind/nanobind.h>

#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bindings/module_fingerprint.h"
#include "bindings/tensor_table.h"
#include "ir/program.h"
#include "rewrite/edit_log.h"
#include "rewrite/pass.h"

namespace fxopt::bindings {

namespace nb = nanobind;

class Session {
 public:
  // node_type: torch.fx.Node; tensor_type: torch.Tensor; size_type: torch.Size; strided:
  // torch.strided; qualname(target) -> str names call_function targets; resolve(name) ->
  // callable turns a symbol the graph did not have back into a target.
  Session(nb::handle node_type, nb::handle tensor_type, nb::handle size_type, nb::handle strided,
          nb::object qualname, nb::object resolve);

  // Imports the fx graph whose sentinel is `root` (`fx.Graph._root`) in one walk of its node
  // list: nodes, their fxopt metadata (the rest of node.meta stays), and the dtype, sizes and
  // device fx recorded for each value. Returns the paths call_module nodes call and get_attr
  // nodes read, each once, for the caller to register (`add_module`, `add_attribute`).
  std::pair<std::vector<std::string>, std::vector<std::string>> import_graph(nb::handle root);
  // True if the fx graph whose sentinel is `root` is still the one imported or last synced.
  bool matches(nb::handle root) const;
  // Records the fx graph as it is now (after a sync made it equal to the core graph again).
  void snapshot(nb::handle root);
  // The modules as they are now, and whether they still are (ModuleFingerprint): every module
  // with its tensors, the attributes read of those imported, and the values at `paths`.
  void snapshot_modules(nb::handle root, std::vector<std::string> attributes,
                        const std::vector<std::string>& paths, nb::handle module_type) {
    modules_.take(root, imported_modules_, std::move(attributes), paths, module_type);
  }
  bool modules_match(nb::handle root) const { return modules_.matches(root); }
  nb::list module_tensors() const { return modules_.tensors(); }
  // Walks the module tree below `root` (the GraphModule) natively, in named_modules() order:
  // takes every module, parameter and buffer path (created modules get other names), and
  // registers the modules at `paths` (every module where absent) not registered yet: the
  // class's qualified name, the plain values among `attributes` in the instance dict, and the
  // parameters and buffers, registered in `tensors`.
  void import_modules(nb::handle root, const std::optional<std::unordered_set<std::string>>& paths,
                      const std::vector<std::string>& attributes, TensorTable& tensors);
  void add_attribute(const std::string& path, const TensorInfo& tensor);
  // Node names fx never gives (Graph::reserve_names).
  void reserve_names(nb::handle names);

  // Runs one pass; `tensor_ops` computes new weights with torch on the tensors of
  // `tensor_table` (py_tensor_ops.h); `chooser` answers its kernel choices (py_chooser.h),
  // None: each pass's static fallback.
  PassResult run(const std::string& pass, nb::dict options, const std::string& signature,
                 bool reverse, nb::object tensor_ops, TensorTable& tensor_table,
                 nb::object chooser);

  size_t edit_count() const { return log_.size(); }
  // Indices of the edits a replay applies (`fxopt::effective_edits`), split into the structural
  // ones `Replay` applies (replay.h) and the metadata edits `write_meta` writes (node_meta.cc).
  std::pair<std::vector<size_t>, std::vector<size_t>> effective_edits() const;
  // Writes the SetMeta / EraseMeta edits at `indices` into their fx nodes' meta dicts, after
  // the structural edits bound every node they name. Every value is converted before the first
  // write, so a failure leaves every meta dict as it was.
  void write_meta(const std::vector<size_t>& indices);
  // The transformations whose marks the fx graph carried at the last `snapshot`, sorted.
  std::vector<std::string> applied_marks() const;
  void clear_edits() { log_.clear(); }
  void bind(uint64_t id, nb::handle fx_node);
  nb::object py_node(uint64_t id) const;

  // Ids of the live nodes in order, and one node as (op, target, name, args, kwargs, origin).
  std::vector<uint64_t> node_ids() const;
  nb::tuple node(uint64_t id);
  nb::list lint() const;
  // The forward torch's plain CodeGen would generate for the fx graph whose sentinel is `root`,
  // built from the core graph (`fxopt::python_source`): (src, globals as (name, callable), the
  // names the custom builtins got, fx's line map {line: node index or None}, prologue start), or
  // None where the generator declines or the fx graph is not node for node the core graph (not
  // the graph last imported or synced, a core edit not synced yet, a wrapped function). One walk
  // of the fx graph checks that (python_source.cc); the modules play no part in the code.
  // The callbacks are `SourcePrinter`'s: opaque_source(value, plain) -> str | None,
  // call_target(callable) -> (style, text, builtin_object) | None, type_source(type) -> str |
  // None and prologue(free_vars, return_annotation) -> str | None.
  using Source = std::tuple<std::string, nb::list, std::vector<std::string>, nb::dict, int64_t>;
  std::optional<Source> python_source(nb::handle root,
                                      const std::vector<std::string>& illegal_names,
                                      const std::vector<std::string>& custom_builtins,
                                      const std::string& output_prefix,
                                      const std::string& output_suffix, nb::object opaque_source,
                                      nb::object call_target, nb::object type_source,
                                      nb::object prologue);
  size_t size() const { return program_.graph.size(); }

  // Python's cyclic collector: the session holds fx nodes, which hold their graph, which holds
  // the session while it is attached. Visiting and clearing these references lets the collector
  // free such cycles.
  int traverse(visitproc visit, void* arg) const;
  void clear_references();

 private:
  friend class Replay;

  // What `matches` compares, per fx node in graph order (identity only; holding the objects
  // keeps their addresses from being reused).
  struct Fingerprint {
    PyObject* node;
    // `val` and `tensor_meta`: the value facts fx recorded (ShapeProp adds them in place).
    nb::object op, target, name, args, kwargs, meta, marks, reversal, val, tensor_meta;
  };
  Fingerprint fingerprint(nb::handle node) const;
  bool same(const Fingerprint& a, const Fingerprint& b) const;
  // The recorded dtype, sizes and device of `node`'s value, if fx recorded them.
  void read_value_info(Node* node, const Fingerprint& print);
  int64_t symbolic_size(nb::handle size);

  Arg to_arg(nb::handle value);
  Arg sequence_to_arg(nb::handle value, bool is_list);
  // Node references become their fx nodes, or their entries in `values` when given.
  using NodeValues = std::unordered_map<const Node*, nb::object>;
  nb::object to_py(const Arg& arg, const NodeValues* values = nullptr) const;
  nb::object to_py(const Args& args, const NodeValues* values = nullptr) const;
  // (target callable or method name, is_method, args, kwargs) of `node`, with `operands` (the
  // tensors) for the nodes it reads: what TensorOps::evaluate calls in Python.
  nb::tuple call_form(const Node& node, const std::vector<nb::object>& operands);
  nb::object target_object(NodeKind kind, Symbol target);
  Symbol target_symbol(NodeKind kind, nb::handle target);
  nb::object tensor_to_py(const TensorInfo& tensor) const;
  // "module.qualname" of `module`'s class, named once per class.
  Symbol module_type_name(nb::handle module);

  Program program_;
  EditLog log_;
  nb::handle node_type_, tensor_type_, size_type_, strided_;
  nb::object qualname_;
  nb::object resolve_;
  // fx node -> core node, during import. Open addressing on the object's address in one array
  // sized for the graph: a node-based map cost an allocation, a free and cache misses per node.
  class ImportedNodes {
   public:
    // Empties the table, with room for `count` nodes.
    void reset(size_t count);
    void insert(PyObject* fx_node, Node* node);
    Node* find(PyObject* fx_node) const;

   private:
    struct Slot {
      PyObject* key = nullptr;
      Node* node = nullptr;
    };
    size_t home(PyObject* key) const;
    std::vector<Slot> slots_;  // a power of two in size, at most half full
    size_t size_ = 0;
  };
  ImportedNodes imported_;
  std::vector<nb::object> py_nodes_;  // by node id (ids count up from 1); null: not bound yet
  std::vector<nb::object> opaques_;
  std::unordered_map<PyObject*, uint64_t> opaque_by_object_;  // opaques_ keeps the keys alive
  nb::dict opaque_by_value_;  // equal devices, dtypes, layouts, memory formats -> one id
  nb::dict symbolic_sizes_;   // a symbolic size's sympy expression -> its number (below -1)
  std::unordered_map<PyObject*, Symbol> symbols_;  // call_function target -> symbol
  std::unordered_map<Symbol, nb::object> callables_;
  std::vector<Fingerprint> fingerprints_;
  ModuleFingerprint modules_;
  std::unordered_set<std::string> imported_modules_;  // paths import_modules registered
  std::unordered_map<PyObject*, std::pair<nb::object, Symbol>> module_types_;  // keeps the class
};

}  // namespace fxopt::bindings
