#include "bindings/session.h"

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <bit>
#include <cstdint>
#include <stdexcept>
#include <unordered_set>

#include "bindings/fx_nodes.h"
#include "bindings/py_chooser.h"
#include "bindings/py_tensor_ops.h"
#include "passes/registry.h"

namespace fxopt::bindings {

Session::Session(nb::handle node_type, nb::handle tensor_type, nb::handle size_type,
                 nb::handle strided, nb::object qualname, nb::object resolve)
    : node_type_(node_type),
      tensor_type_(tensor_type),
      size_type_(size_type),
      strided_(strided),
      qualname_(std::move(qualname)),
      resolve_(std::move(resolve)) {}

Symbol Session::target_symbol(NodeKind kind, nb::handle target) {
  if (kind != NodeKind::CallFunction) {
    // Interned from the str's own UTF-8, not a copy per node; nb::cast raises for a non-str.
    if (!PyUnicode_Check(target.ptr())) return Symbol::intern(nb::cast<std::string>(target));
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(target.ptr(), &size);
    if (!text) throw nb::python_error();
    return Symbol::intern(std::string_view(text, size));
  }
  // Graphs call few distinct functions: name each once.
  auto it = symbols_.find(target.ptr());
  if (it != symbols_.end()) return it->second;
  Symbol symbol = Symbol::intern(nb::cast<std::string>(qualname_(target)));
  symbols_.emplace(target.ptr(), symbol);
  callables_.emplace(symbol, nb::borrow(target));
  return symbol;
}

nb::object Session::target_object(NodeKind kind, Symbol target) {
  if (kind != NodeKind::CallFunction) return nb::str(target.str().c_str());
  auto it = callables_.find(target);
  if (it != callables_.end()) return it->second;
  nb::object callable = resolve_(target.str());
  callables_.emplace(target, callable);
  return callable;
}

Arg Session::sequence_to_arg(nb::handle value, bool is_list) {
  std::vector<Arg> items;
  items.reserve(nb::len(value));
  for (nb::handle item : value) items.push_back(to_arg(item));
  if (is_list) return List{std::move(items)};
  return Tuple{std::move(items)};
}

Arg Session::to_arg(nb::handle value) {
  PyObject* o = value.ptr();
  if (o == Py_None) return None{};
  if (PyBool_Check(o)) return o == Py_True;
  if (PyLong_CheckExact(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (!overflow) return int64_t{v};
  } else if (PyFloat_CheckExact(o)) {
    return PyFloat_AS_DOUBLE(o);
  } else if (PyUnicode_CheckExact(o)) {
    return nb::cast<std::string>(value);
  } else if (nb::isinstance(value, node_type_)) {
    Node* node = imported_.find(o);
    if (!node)
      throw std::invalid_argument("argument refers to node '" +
                                  nb::cast<std::string>(value.attr("name")) +
                                  "', which is not in this graph or not defined before its use");
    return node;
  } else if (PyTuple_CheckExact(o)) {
    return sequence_to_arg(value, false);
  } else if (PyList_Check(o)) {  // fx stores lists as immutable_list, a list subclass
    return sequence_to_arg(value, true);
  } else if (PySlice_Check(o)) {
    return Slice{
        {to_arg(value.attr("start")), to_arg(value.attr("stop")), to_arg(value.attr("step"))}};
  } else if (PyDict_Check(o)) {
    bool string_keys = true;
    for (auto [k, v] : nb::borrow<nb::dict>(value)) string_keys &= PyUnicode_CheckExact(k.ptr());
    if (string_keys) {
      Dict dict;
      for (auto [k, v] : nb::borrow<nb::dict>(value))
        dict.items.emplace_back(nb::cast<std::string>(k), to_arg(v));
      return dict;
    }
  }
  // Anything else passes through untouched. Containers we do not model (namedtuples,
  // torch.Size, dicts with other keys) may not hide node references: the core would miss uses.
  if (PyTuple_Check(o) || PyDict_Check(o)) {
    bool has_node = false;
    sequence_to_arg(PyDict_Check(o) ? nb::handle(nb::borrow<nb::dict>(value).values()) : value,
                    false)
        .for_each_node([&](Node*) { has_node = true; });
    if (has_node)
      throw std::invalid_argument("unsupported container holding graph nodes: " +
                                  nb::cast<std::string>(nb::repr(value)));
  }
  // One id per distinct value: the same object, or an equal torch.device / dtype / layout /
  // memory_format (immutable values torch.export spells as a new object per node), so passes
  // that compare arguments (EliminateCommonSubexpressions) see equal values as equal.
  if (auto it = opaque_by_object_.find(o); it != opaque_by_object_.end()) return Opaque{it->second};
  std::string_view type = Py_TYPE(o)->tp_name;
  bool by_value = type == "torch.device" || type == "torch.dtype" || type == "torch.layout" ||
                  type == "torch.memory_format";
  if (by_value) {
    if (PyObject* id = PyDict_GetItemWithError(opaque_by_value_.ptr(), o))
      return Opaque{nb::cast<uint64_t>(nb::handle(id))};
    if (PyErr_Occurred()) throw nb::python_error();
  }
  opaques_.push_back(nb::borrow(value));
  Opaque opaque{opaques_.size()};
  opaque_by_object_.emplace(o, opaque.id);
  if (by_value) opaque_by_value_[value] = opaque.id;
  if (std::string_view(Py_TYPE(o)->tp_name) == "torch.dtype")
    program_.dtype_opaques[opaque.id] = dtype_name(value);
  return opaque;
}

nb::object Session::to_py(const Arg& arg, const NodeValues* values) const {
  return std::visit(
      [&](const auto& v) -> nb::object {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, None>) {
          return nb::none();
        } else if constexpr (std::is_same_v<V, Node*>) {
          return values ? values->at(v) : py_node(v->id());
        } else if constexpr (std::is_same_v<V, bool>) {
          return nb::bool_(v);
        } else if constexpr (std::is_same_v<V, int64_t>) {
          return nb::int_(v);
        } else if constexpr (std::is_same_v<V, double>) {
          return nb::float_(v);
        } else if constexpr (std::is_same_v<V, std::string>) {
          return nb::str(v.c_str(), v.size());
        } else if constexpr (std::is_same_v<V, List>) {
          nb::list out;
          for (const Arg& item : v.items) out.append(to_py(item, values));
          return out;
        } else if constexpr (std::is_same_v<V, Tuple>) {
          return to_py(v.items, values);
        } else if constexpr (std::is_same_v<V, Slice>) {
          return nb::steal(PySlice_New(to_py(v.items[0], values).ptr(),
                                       to_py(v.items[1], values).ptr(),
                                       to_py(v.items[2], values).ptr()));
        } else if constexpr (std::is_same_v<V, Dict>) {
          nb::dict out;
          for (const auto& [key, item] : v.items) out[key.c_str()] = to_py(item, values);
          return out;
        } else {
          return opaques_.at(v.id - 1);
        }
      },
      arg.value);
}

nb::object Session::to_py(const Args& args, const NodeValues* values) const {
  nb::list items;
  for (const Arg& item : args) items.append(to_py(item, values));
  return nb::tuple(items);
}

nb::tuple Session::call_form(const Node& node, const std::vector<nb::object>& operands) {
  NodeValues values;
  size_t next = 0;
  node.for_each_input([&](Node* input) { values.emplace(input, operands.at(next++)); });
  return nb::make_tuple(target_object(node.kind(), node.target()),
                        node.kind() == NodeKind::CallMethod, to_py(node.args(), &values),
                        to_py(Arg(node.kwargs()), &values));
}

std::pair<std::vector<std::string>, std::vector<std::string>> Session::import_graph(
    nb::handle root) {
  const NodeKeys& keys = node_keys();
  std::pair<std::vector<std::string>, std::vector<std::string>> paths;
  std::unordered_set<Symbol> seen;
  // Every table that grows per node is sized once, from len(graph.nodes), instead of rehashing
  // and reallocating all the way up.
  Py_ssize_t count = PyObject_Size(get(get(root, keys.graph), keys.nodes).ptr());
  if (count < 0) throw nb::python_error();
  program_.graph.reserve(count);
  imported_.reset(count);
  py_nodes_.reserve(program_.graph.next_id() + count);
  fingerprints_.reserve(fingerprints_.size() + count);
  int64_t origin = 0;
  for_each_fx_node(root, [&](nb::handle py) {
    Fingerprint print = fingerprint(py);
    std::string op = nb::cast<std::string>(print.op);
    std::optional<NodeKind> kind = parse_kind(op);
    if (!kind) throw std::invalid_argument("node kind '" + op + "' is not a torch.fx kind");
    Symbol target = target_symbol(*kind, print.target);
    if ((kind == NodeKind::CallModule || kind == NodeKind::GetAttr) && seen.insert(target).second)
      (kind == NodeKind::CallModule ? paths.first : paths.second).push_back(target.str());
    Args args;
    args.reserve(nb::len(print.args));
    for (nb::handle a : print.args) args.push_back(to_arg(a));
    Kwargs kwargs = std::get<Dict>(to_arg(print.kwargs).value);  // moved out, not copied
    Node* node = program_.graph.append(*kind, target, nb::cast<std::string>(print.name),
                                       std::move(args), std::move(kwargs), origin++);
    if (print.marks.is_valid())
      program_.graph.set_meta(node, "fxopt_transformations", to_arg(print.marks));
    if (print.reversal.is_valid())
      program_.graph.set_meta(node, "fxopt_reversal", to_arg(print.reversal));
    read_value_info(node, print);
    imported_.insert(py.ptr(), node);
    bind(node->id(), py);
    fingerprints_.push_back(std::move(print));
  });
  imported_.reset(0);
  return paths;
}

void Session::ImportedNodes::reset(size_t count) {
  slots_ = std::vector<Slot>(std::bit_ceil(2 * count + 2));  // a new array: frees a large one
  size_ = 0;
}

size_t Session::ImportedNodes::home(PyObject* key) const {
  // Objects are aligned, so the address's low bits say little: mix it, keep the high bits.
  uint64_t mixed = reinterpret_cast<uintptr_t>(key) * uint64_t{0x9E3779B97F4A7C15};
  return (mixed >> 32) & (slots_.size() - 1);
}

void Session::ImportedNodes::insert(PyObject* fx_node, Node* node) {
  if (2 * (size_ + 1) > slots_.size()) {  // more nodes than len(graph.nodes) said
    std::vector<Slot> old = std::move(slots_);
    reset(old.size());
    for (const Slot& slot : old)
      if (slot.key) insert(slot.key, slot.node);
  }
  size_t i = home(fx_node);
  while (slots_[i].key && slots_[i].key != fx_node) i = (i + 1) & (slots_.size() - 1);
  size_ += !slots_[i].key;
  slots_[i] = {fx_node, node};
}

Node* Session::ImportedNodes::find(PyObject* fx_node) const {
  if (slots_.empty()) return nullptr;
  for (size_t i = home(fx_node); slots_[i].key; i = (i + 1) & (slots_.size() - 1))
    if (slots_[i].key == fx_node) return slots_[i].node;
  return nullptr;
}

Session::Fingerprint Session::fingerprint(nb::handle node) const {
  const NodeKeys& keys = node_keys();
  nb::object meta = get(node, keys.meta);
  if (!PyDict_Check(meta.ptr())) throw std::invalid_argument("node.meta is not a dict");
  return {node.ptr(),
          get(node, keys.op),
          get(node, keys.target),
          get(node, keys.name),
          get(node, keys.args),
          get(node, keys.kwargs),
          meta,
          lookup(meta, keys.marks),
          lookup(meta, keys.reversal),
          lookup(meta, keys.val),
          lookup(meta, keys.tensor_meta)};
}

bool Session::same(const Fingerprint& a, const Fingerprint& b) const {
  return a.node == b.node && a.op.is(b.op) && a.target.is(b.target) && a.name.is(b.name) &&
         a.args.is(b.args) && a.kwargs.is(b.kwargs) && a.meta.is(b.meta) && a.marks.is(b.marks) &&
         a.reversal.is(b.reversal) && a.val.is(b.val) && a.tensor_meta.is(b.tensor_meta);
}

bool Session::matches(nb::handle root) const {
  size_t index = 0;
  bool same_graph = true;
  // The walk stops comparing at the first difference but must not leave the loop early from
  // inside the callback; graphs that changed are re-imported anyway.
  for_each_fx_node(root, [&](nb::handle py) {
    if (!same_graph) return;
    same_graph = index < fingerprints_.size() && same(fingerprint(py), fingerprints_[index]);
    ++index;
  });
  return same_graph && index == fingerprints_.size();
}

void Session::snapshot(nb::handle root) {
  fingerprints_.clear();
  for_each_fx_node(root, [&](nb::handle py) { fingerprints_.push_back(fingerprint(py)); });
}

// Export's fake tensor in meta["val"] (with its device, for strided tensors only, so equal
// devices also mean equal layouts), else ShapeProp's meta["tensor_meta"] (no device).
void Session::read_value_info(Node* node, const Fingerprint& print) {
  const NodeKeys& keys = node_keys();
  nb::object value = print.val;
  std::string device;
  bool tensor = value.is_valid() && PyObject_IsInstance(value.ptr(), tensor_type_.ptr()) == 1;
  if (tensor && get(value, keys.layout).is(strided_))
    device = nb::cast<std::string>(nb::str(get(value, keys.device)));
  if (!tensor) {
    value = print.tensor_meta;
    if (!value.is_valid() || !PyObject_HasAttr(value.ptr(), keys.shape.ptr())) return;
  }
  nb::object shape = get(value, keys.shape);
  if (!PyObject_TypeCheck(shape.ptr(), (PyTypeObject*)size_type_.ptr())) return;
  std::vector<int64_t> sizes;
  for (nb::handle size : shape)
    sizes.push_back(PyLong_CheckExact(size.ptr()) ? PyLong_AsLongLong(size.ptr())
                                                  : symbolic_size(size));
  program_.graph.set_value_info(node, dtype_name(get(value, keys.dtype)), std::move(sizes),
                                std::move(device));
}

// A SymInt's sympy expression names its size: one number below -1 per expression, so values
// fx traced with one batch symbol compare equal (Node::shape); -1 where it has none.
int64_t Session::symbolic_size(nb::handle size) {
  nb::object expr;
  try {
    expr = size.attr("node").attr("expr");
  } catch (const nb::python_error&) {
    return -1;
  }
  if (PyObject* id = PyDict_GetItemWithError(symbolic_sizes_.ptr(), expr.ptr()))
    return PyLong_AsLongLong(id);
  if (PyErr_Occurred()) throw nb::python_error();
  int64_t id = -2 - int64_t(symbolic_sizes_.size());
  symbolic_sizes_[expr] = id;
  return id;
}

int Session::traverse(visitproc visit, void* arg) const {
  for (const nb::object& node : py_nodes_) Py_VISIT(node.ptr());
  for (const Fingerprint& f : fingerprints_)
    for (const nb::object* o : {&f.op, &f.target, &f.name, &f.args, &f.kwargs, &f.meta, &f.marks,
                                &f.reversal, &f.val, &f.tensor_meta})
      Py_VISIT(o->ptr());
  for (const nb::object& o : opaques_) Py_VISIT(o.ptr());
  for (const auto& [symbol, callable] : callables_) Py_VISIT(callable.ptr());
  Py_VISIT(opaque_by_value_.ptr());
  Py_VISIT(symbolic_sizes_.ptr());
  Py_VISIT(qualname_.ptr());
  Py_VISIT(resolve_.ptr());
  return modules_.traverse(visit, arg);
}

void Session::clear_references() {
  // Only what can lead back to an fx graph; the session is not used again.
  py_nodes_.clear();
  fingerprints_.clear();
  modules_.clear();
}

void Session::add_attribute(const std::string& path, const TensorInfo& tensor) {
  program_.attributes[path] = tensor;
}

void Session::reserve_names(nb::handle names) {
  std::vector<std::string> out;
  for (nb::handle n : names) out.push_back(nb::cast<std::string>(n));
  program_.graph.reserve_names(std::move(out));
}

PassResult Session::run(const std::string& pass_name, nb::dict options,
                        const std::string& signature, bool reverse, nb::object tensor_ops,
                        TensorTable& tensor_table, nb::object chooser) {
  const PassInfo* info = find_pass(pass_name);
  if (!info) throw std::invalid_argument("no built-in transformation named '" + pass_name + "'");
  std::unique_ptr<Pass> pass = info->make(to_arg(options).as<Dict>());
  PyTensorOps tensors(
      std::move(tensor_ops), tensor_table,
      [this](const Node& node, const auto& operands) { return call_form(node, operands); });
  std::optional<PyChooser> measured;
  if (!chooser.is_none()) measured.emplace(std::move(chooser));
  Chooser& choices = measured ? static_cast<Chooser&>(*measured) : static_chooser();
  nb::gil_scoped_release release;
  return run_pass(*pass, program_, log_, tensors, signature, reverse, choices);
}

nb::object Session::tensor_to_py(const TensorInfo& tensor) const {
  return tensor.present() ? nb::cast(tensor) : nb::none();
}

void Session::bind(uint64_t id, nb::handle fx_node) {
  if (!program_.graph.find_by_id(id))
    throw std::invalid_argument("no node with id " + std::to_string(id));
  if (id >= py_nodes_.size()) py_nodes_.resize(program_.graph.next_id());
  py_nodes_[id] = nb::borrow(fx_node);
}

nb::object Session::py_node(uint64_t id) const {
  if (id >= py_nodes_.size() || !py_nodes_[id].is_valid())
    throw std::logic_error("node id " + std::to_string(id) + " has no fx node yet");
  return py_nodes_[id];
}

std::vector<uint64_t> Session::node_ids() const {
  std::vector<uint64_t> ids;
  for (const Node* n : program_.graph) ids.push_back(n->id());
  return ids;
}

nb::tuple Session::node(uint64_t id) {
  const Node* n = program_.graph.find_by_id(id);
  if (!n || n->erased()) throw std::invalid_argument("no live node with id " + std::to_string(id));
  return nb::make_tuple(kind_name(n->kind()).data(), target_object(n->kind(), n->target()),
                        n->name(), to_py(n->args()), to_py(Arg(n->kwargs())), n->origin());
}

nb::list Session::lint() const {
  nb::list out;
  for (const LintError& e : program_.graph.lint()) out.append(nb::make_tuple(e.node, e.problem));
  return out;
}

}  // namespace fxopt::bindings
