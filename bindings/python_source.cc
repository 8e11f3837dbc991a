// Session::python_source: the engine's twin of torch's `Graph.python_code`, for the graph the
// session mirrors. The printer answers what the core cannot print itself by asking Python once
// per distinct value or callable.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <functional>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "bindings/fx_nodes.h"
#include "bindings/session.h"
#include "codegen/python_source.h"

namespace fxopt::bindings {
namespace {

class CallbackPrinter : public SourcePrinter {
 public:
  CallbackPrinter(nb::object opaque_source, nb::object call_target, nb::object type_source,
                  nb::object prologue, const std::vector<nb::object>& opaques,
                  std::function<nb::object(Symbol)> callable)
      : opaque_source_(std::move(opaque_source)),
        call_target_(std::move(call_target)),
        type_source_(std::move(type_source)),
        prologue_(std::move(prologue)),
        opaques_(opaques),
        callable_(std::move(callable)) {}

  // The fx type of each core node that has one (the node id), read while checking the mirror.
  std::unordered_map<uint64_t, nb::object> types;

  std::optional<TypeAnnotation> type_annotation(const Node& node) override {
    auto it = types.find(node.id());
    if (it == types.end()) return TypeAnnotation{};
    // fx names equal annotations once (its namespace is a dict keyed by the object).
    nb::handle type = it->second;
    PyObject* known = PyDict_GetItemWithError(type_keys_.ptr(), type.ptr());
    if (!known && PyErr_Occurred()) {
      PyErr_Clear();  // unhashable
      return std::nullopt;
    }
    uint64_t key = known ? nb::cast<uint64_t>(nb::handle(known)) : type_objects_.size();
    if (!known) {
      type_keys_[type] = key;
      type_objects_.push_back(nb::borrow(type));
      std::optional<CallTarget> spelled = spell(type_source_(type));
      if (spelled && spelled->style != CallTarget::Style::Qualified &&
          spelled->style != CallTarget::Style::Global)
        spelled.reset();
      type_spellings_.push_back(spelled);
    }
    if (!type_spellings_[key]) return std::nullopt;
    return TypeAnnotation{*type_spellings_[key], key};
  }

  // The annotation objects, by `TypeAnnotation::key`.
  const std::vector<nb::object>& type_objects() const { return type_objects_; }

  std::optional<std::string> prologue(const std::vector<std::string>& free_vars,
                                      const std::string& return_annotation) override {
    nb::object text = prologue_(free_vars, return_annotation);
    if (text.is_none()) return std::nullopt;
    return nb::cast<std::string>(text);
  }

  std::optional<std::string> opaque(Opaque value, bool plain) override {
    auto key = std::make_pair(value.id, plain);
    auto it = opaque_cache_.find(key);
    if (it != opaque_cache_.end()) return it->second;
    nb::object text = opaque_source_(opaques_.at(value.id - 1), plain);
    std::optional<std::string> out;
    if (!text.is_none()) out = nb::cast<std::string>(text);
    return opaque_cache_.emplace(key, out).first->second;
  }

  std::optional<CallTarget> call_target(Symbol target) override {
    nb::object callable = callable_(target);
    if (callable.is_none()) return std::nullopt;
    return spell(call_target_(callable));
  }

 private:
  static std::optional<CallTarget> spell(nb::handle spelled) {
    if (spelled.is_none()) return std::nullopt;
    auto [style, text, builtin_object] =
        nb::cast<std::tuple<std::string, std::string, bool>>(spelled);
    CallTarget out{CallTarget::Style::Global, text, builtin_object};
    if (style == "operator") {
      out.style = CallTarget::Style::Operator;
    } else if (style == "inplace") {
      out.style = CallTarget::Style::Inplace;
    } else if (style == "qualified") {
      out.style = CallTarget::Style::Qualified;
    } else if (style != "global") {
      throw std::invalid_argument("unknown call target style '" + style + "'");
    }
    return out;
  }

  struct KeyHash {
    size_t operator()(const std::pair<uint64_t, bool>& key) const {
      return std::hash<uint64_t>()(key.first * 2 + key.second);
    }
  };
  nb::object opaque_source_, call_target_, type_source_, prologue_;
  nb::dict type_keys_;
  std::vector<nb::object> type_objects_;
  std::vector<std::optional<CallTarget>> type_spellings_;
  const std::vector<nb::object>& opaques_;
  std::function<nb::object(Symbol)> callable_;
  std::unordered_map<std::pair<uint64_t, bool>, std::optional<std::string>, KeyHash> opaque_cache_;
};

// fx's `_lineno_map`: {first + i: node_index[i], or None where it is -1}.
nb::dict lineno_map(int64_t first, const std::vector<int64_t>& node_index) {
  nb::dict map;
  for (size_t line = 0; line < node_index.size(); ++line) {
    nb::object key = nb::steal(PyLong_FromLongLong(first + static_cast<int64_t>(line)));
    nb::object value =
        node_index[line] < 0 ? nb::none() : nb::steal(PyLong_FromLongLong(node_index[line]));
    if (!key.is_valid() || !value.is_valid() || PyDict_SetItem(map.ptr(), key.ptr(), value.ptr()))
      throw nb::python_error();
  }
  return map;
}

}  // namespace

std::optional<Session::Source> Session::python_source(
    nb::handle root, const std::vector<std::string>& illegal_names,
    const std::vector<std::string>& custom_builtins, const std::string& output_prefix,
    const std::string& output_suffix, nb::object opaque_source, nb::object call_target,
    nb::object type_source, nb::object prologue) {
  // Two callables with one qualified name share a symbol in the core; fx would name both.
  std::unordered_map<Symbol, int> objects_per_symbol;
  for (const auto& [object, symbol] : symbols_) ++objects_per_symbol[symbol];
  CallbackPrinter printer(std::move(opaque_source), std::move(call_target), std::move(type_source),
                          std::move(prologue), opaques_, [&](Symbol target) -> nb::object {
                            if (objects_per_symbol[target] > 1) return nb::none();
                            return target_object(NodeKind::CallFunction, target);
                          });

  // Code generation reads the core graph, so it must be the fx graph node for node. The fx
  // graph must be the one the session last imported or synced, unchanged since: its nodes in
  // order, each with what fx replaces on an edit that changes the code (op, target, name, args,
  // kwargs; the fingerprint `matches` compares, less what the code does not show), and no core
  // edit waiting for a sync. Checked in the walk that reads what the code does show and the
  // core does not hold: types and wrapped functions.
  if (!log_.empty()) return std::nullopt;
  const NodeKeys& keys = node_keys();
  Node* core = program_.graph.first();
  size_t index = 0;
  for (nb::object py = get(root, keys.next); !py.is(root); py = get(py, keys.next), ++index) {
    if (!core || index >= fingerprints_.size()) return std::nullopt;
    const Fingerprint& print = fingerprints_[index];
    nb::object name = get(py, keys.name);
    if (print.node != py.ptr() || !name.is(print.name) || !get(py, keys.op).is(print.op) ||
        !get(py, keys.target).is(print.target) || !get(py, keys.args).is(print.args) ||
        !get(py, keys.kwargs).is(print.kwargs))
      return std::nullopt;
    // The session's own invariant (a sync makes the core graph the fx graph), checked as well:
    // the core node at this place is bound to this fx node and has its name.
    if (core->id() >= py_nodes_.size() || !py_nodes_[core->id()].is(py)) return std::nullopt;
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(name.ptr(), &size);
    if (!text) throw nb::python_error();
    if (std::string_view(text, size) != core->name()) return std::nullopt;
    if (nb::object type = get(py, keys.type); !type.is_none()) {
      // fx would name an annotation that is also a call target once, for both
      if (symbols_.contains(type.ptr())) return std::nullopt;
      printer.types[core->id()] = type;
    }
    nb::object meta = get(py, keys.meta);
    if (!PyDict_Check(meta.ptr())) return std::nullopt;
    if (PyDict_GetItemWithError(meta.ptr(), keys.is_wrapped.ptr()) || PyErr_Occurred()) {
      PyErr_Clear();
      return std::nullopt;
    }
    core = core->next();
  }
  if (core || index != fingerprints_.size()) return std::nullopt;

  SourceOptions options{"self", output_prefix, output_suffix, illegal_names, custom_builtins};
  std::optional<PythonSource> source = fxopt::python_source(program_.graph, options, printer);
  if (!source) return std::nullopt;

  nb::list globals;
  for (const auto& [name, symbol] : source->globals)
    globals.append(nb::make_tuple(name, target_object(NodeKind::CallFunction, symbol)));
  for (const auto& [name, key] : source->type_globals)
    globals.append(nb::make_tuple(name, printer.type_objects().at(key)));
  return Source{std::move(source->src), globals, std::move(source->custom_builtin_names),
                lineno_map(source->lineno_start, source->node_index), source->prologue_start};
}

}  // namespace fxopt::bindings
