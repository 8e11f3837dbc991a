#include "bindings/replay.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <unordered_set>

#include "bindings/fx_nodes.h"
#include "bindings/module_tree.h"

namespace fxopt::bindings {
namespace {

struct ReplayKeys {
  nb::handle graph, create_node, inserting_before, exit, prepend, erase_node, update_inputs, users,
      new_, copy, namespace_, used_names, difference_update;
};

const ReplayKeys& keys() {
  static const ReplayKeys k = {interned("graph"),
                               interned("create_node"),
                               interned("inserting_before"),
                               interned("__exit__"),
                               interned("prepend"),
                               interned("erase_node"),
                               interned("_update_args_kwargs"),
                               interned("users"),
                               interned("__new__"),
                               interned("copy"),
                               interned("_graph_namespace"),
                               interned("_used_names"),
                               interned("difference_update")};
  return k;
}

void set_item(nb::handle dict, nb::handle key, nb::handle value) {
  if (PyDict_SetItem(dict.ptr(), key.ptr(), value.ptr()) != 0) throw nb::python_error();
}

void pop_item(nb::handle dict, nb::handle key) {
  if (PyDict_DelItem(dict.ptr(), key.ptr()) == 0) return;
  if (!PyErr_ExceptionMatches(PyExc_KeyError)) throw nb::python_error();
  PyErr_Clear();
}

bool contains(nb::handle dict, nb::handle key) { return lookup(dict, key).is_valid(); }

// The tables a module can hold a name in.
struct SlotTables {
  nb::object parameters, buffers, modules, state;  // state: the instance dict

  explicit SlotTables(nb::handle module) : state(module_state(module)) {
    const ModuleKeys& keys = module_keys();
    parameters = nb::borrow(module_table(state.ptr(), keys.parameters));
    buffers = nb::borrow(module_table(state.ptr(), keys.buffers));
    modules = nb::borrow(module_table(state.ptr(), keys.modules));
  }
  std::array<nb::handle, 4> all() const { return {parameters, buffers, modules, state}; }
};

// A dict of the template's instance dict: an empty one costs less to make than to copy.
nb::object fresh_table(nb::handle table) {
  if (PyDict_GET_SIZE(table.ptr()) != 0)
    return PyDict_CheckExact(table.ptr()) ? nb::steal(PyDict_Copy(table.ptr()))
                                          : table.attr(keys().copy)();
  return PyDict_CheckExact(table.ptr()) ? nb::steal(PyDict_New())
                                        : nb::borrow(nb::handle(Py_TYPE(table.ptr())))();
}

}  // namespace

Replay::Replay(Session& session, nb::handle graph_module, TensorTable& tensors,
               nb::handle module_type, nb::handle registration_hooks, bool direct_inputs)
    : session_(session),
      tensors_(tensors),
      graph_module_(nb::borrow(graph_module)),
      graph_(get(graph_module, keys().graph)),
      module_type_(nb::borrow(module_type)),
      registration_hooks_(nb::borrow(registration_hooks)),
      direct_inputs_(direct_inputs) {}

void Replay::apply(const std::vector<size_t>& indices) {
  for (size_t index : indices) {
    const Edit& edit = session_.log_.at(index);
    switch (edit.kind) {
      case Edit::Kind::CreateNode:
        create(edit);
        break;
      case Edit::Kind::SetInputs:
        set_inputs(edit);
        break;
      case Edit::Kind::SetTarget:
        set_target(edit);
        break;
      case Edit::Kind::EraseNode:
        to_erase_.push_back(session_.py_node(edit.node));
        break;
      case Edit::Kind::MoveNode:
        move(edit);
        break;
      case Edit::Kind::SetModule:
        set_module(edit);
        break;
      case Edit::Kind::SetAttribute:
        set_attribute(edit);
        break;
      case Edit::Kind::RemoveModule:
      case Edit::Kind::RemoveAttribute:
        remove_slot(edit);
        break;
      case Edit::Kind::SetMeta:
      case Edit::Kind::EraseMeta:
        throw std::invalid_argument("edit " + std::to_string(index) +
                                    " is a metadata edit: Session.write_meta writes those");
    }
  }
}

void Replay::create(const Edit& edit) {
  nb::object point = graph_.attr(keys().inserting_before)(session_.py_node(edit.anchor));
  nb::object node;
  try {
    // Inputs are set afterwards: create_node scans its arguments with torch's generic pytree
    // walk for raw symbolic values, which cost more than the rest of creating the node, and the
    // core's arguments are graph values and constants it read from fx nodes.
    node = graph_.attr(keys().create_node)(kind_name(edit.node_kind).data(),
                                           session_.target_object(edit.node_kind, edit.target),
                                           nb::tuple(), nb::dict(), edit.name);
  } catch (...) {
    point.attr(keys().exit)(nb::none(), nb::none(), nb::none());
    throw;
  }
  point.attr(keys().exit)(nb::none(), nb::none(), nb::none());
  undo_.push_back([graph = graph_, node] { graph.attr(keys().erase_node)(node); });
  write_inputs(node, session_.to_py(edit.args), session_.to_py(Arg(edit.kwargs)));
  renamed_ |= nb::cast<std::string>(get(node, node_keys().name)) != edit.name;
  session_.bind(edit.node, node);
  share_recorded_value(edit.node, node);
}

void Replay::share_recorded_value(uint64_t id, nb::handle node) const {
  const Node* created = session_.program_.graph.find_by_id(id);
  uint64_t twin = created ? created->value_twin() : 0;
  if (!twin) return;
  const NodeKeys& fx = node_keys();
  nb::object recorded = get(session_.py_node(twin), fx.meta), meta = get(node, fx.meta);
  for (nb::handle key : {fx.val, fx.tensor_meta})
    if (nb::object value = lookup(recorded, key); value.is_valid()) meta[key] = value;
}

void Replay::set_inputs(const Edit& edit) {
  nb::object node = session_.py_node(edit.node);
  nb::object args = session_.to_py(edit.args), kwargs = session_.to_py(Arg(edit.kwargs));
  nb::object old_args = get(node, node_keys().args), old_kwargs = get(node, node_keys().kwargs);
  write_inputs(node, args, kwargs);
  undo_.push_back([this, node, old_args, old_kwargs] { write_inputs(node, old_args, old_kwargs); });
}

void Replay::write_inputs(nb::handle node, nb::handle args, nb::handle kwargs) const {
  if (direct_inputs_) {
    node.attr(keys().update_inputs)(args, kwargs);
  } else {
    node.attr("args") = args;
    node.attr("kwargs") = kwargs;
  }
}

void Replay::set_target(const Edit& edit) {
  const NodeKeys& fx = node_keys();
  nb::object node = session_.py_node(edit.node);
  nb::object op = nb::str(kind_name(edit.node_kind).data());
  nb::object target = session_.target_object(edit.node_kind, edit.target);
  nb::object old_op = get(node, fx.op), old_target = get(node, fx.target);
  // Each assignment re-files the node in fx's lookup table, under (op, target) for
  // call_function and (op, None) otherwise: unchanged fields are skipped, and a node becoming a
  // call_function gets its target first, so it is never filed under a call_function of a module
  // path (fx keeps every key it ever filed under, emptied).
  static const nb::handle call_function = interned("call_function");
  auto write = [fx](nb::handle node, nb::handle op, nb::handle target) {
    auto write_op = [&] {
      if (!get(node, fx.op).equal(op)) node.attr(fx.op) = op;
    };
    bool target_first = op.equal(call_function);
    if (!target_first) write_op();
    if (!get(node, fx.target).is(target)) node.attr(fx.target) = target;
    if (target_first) write_op();
  };
  undo_.push_back([write, node, old_op, old_target] { write(node, old_op, old_target); });
  write(node, op, target);
}

void Replay::move(const Edit& edit) {
  nb::object node = session_.py_node(edit.node);
  nb::object old_next = get(node, node_keys().next);  // fx's root sentinel when it is last
  session_.py_node(edit.anchor).attr(keys().prepend)(node);
  undo_.push_back([node, old_next] { old_next.attr(keys().prepend)(node); });
}

nb::object Replay::lookup_path(std::string_view path) const {
  nb::object object = graph_module_;
  for (size_t start = 0; !path.empty() && start <= path.size();) {
    size_t dot = std::min(path.find('.', start), path.size());
    nb::str part(path.data() + start, dot - start);
    object = module_attribute(object, part, module_type_);
    if (!object.is_valid())
      throw nb::attribute_error(
          ("the GraphModule has no attribute '" + std::string(path) + "'").c_str());
    start = dot + 1;
  }
  return object;
}

nb::object Replay::copy_module(nb::handle like, Symbol type) {
  Symbol like_type = session_.module_type_name(like);
  if (like_type != type)
    throw nb::type_error(("cannot derive a " + type.str() + " from a " + like_type.str()).c_str());
  nb::handle cls(reinterpret_cast<PyObject*>(Py_TYPE(like.ptr())));
  nb::object module = cls.attr(keys().new_)(cls);
  nb::object state = module_state(module);
  Py_ssize_t position = 0;
  PyObject *key, *value;
  nb::object template_state = module_state(like);
  while (PyDict_Next(template_state.ptr(), &position, &key, &value))
    set_item(state, key, PyDict_Check(value) ? fresh_table(value) : nb::borrow(value));
  return module;
}

void Replay::set_module(const Edit& edit) {
  nb::object module = copy_module(lookup_path(edit.like), edit.module.type);
  // Plain values only (the core has no others): straight into the instance dict, as
  // nn.Module.__setattr__ would put them, without its checks of every table.
  nb::object state = module_state(module);
  for (const auto& [name, value] : edit.module.attributes.items) {
    nb::object converted = session_.to_py(value);
    if (PyList_Check(converted.ptr())) converted = nb::tuple(converted);
    set_item(state, nb::str(name.c_str(), name.size()), converted);
  }
  for (const auto& [name, info] : edit.module.tensors)
    store(module, nb::str(name.c_str(), name.size()), info);
  edit_slot(edit.name,
            [&](nb::handle parent, nb::handle name) { put_module(parent, name, module); });
}

void Replay::set_attribute(const Edit& edit) {
  edit_slot(edit.name,
            [&](nb::handle parent, nb::handle name) { store(parent, name, edit.tensor); });
}

void Replay::remove_slot(const Edit& edit) {
  edit_slot(edit.name, [](nb::handle parent, nb::handle name) {
    if (PyObject_DelAttr(parent.ptr(), name.ptr()) != 0) throw nb::python_error();
  });
}

void Replay::store(nb::handle module, nb::handle name, const TensorInfo& info) {
  nb::object tensor = info.present() ? tensors_.stored(info) : nb::none();
  SlotTables tables(module);
  for (nb::handle table : tables.all()) pop_item(table, name);
  set_item(!info.present() || info.is_parameter ? tables.parameters : tables.buffers, name, tensor);
}

void Replay::put_module(nb::handle parent, nb::handle name, nb::handle module) const {
  // Straight into the submodule table where that is all nn.Module.__setattr__ would do: no
  // other table holds the name (it would remove it from there, or refuse a parameter's name)
  // and no global registration hook wants to see it.
  SlotTables tables(parent);
  if (contains(tables.state, name) || contains(tables.parameters, name) ||
      contains(tables.buffers, name) || PyObject_IsTrue(registration_hooks_.ptr()) != 0) {
    if (PyObject_SetAttr(parent.ptr(), name.ptr(), module.ptr()) != 0) throw nb::python_error();
  } else {
    set_item(tables.modules, name, module);
  }
}

void Replay::edit_slot(const std::string& path,
                       const std::function<void(nb::handle, nb::handle)>& change) {
  size_t dot = path.rfind('.');
  nb::object parent = lookup_path(dot == std::string::npos ? "" : path.substr(0, dot));
  nb::str name(dot == std::string::npos ? path.c_str() : path.c_str() + dot + 1);
  // Each table is copied when the replay first edits it and put back whole on undo: setting a
  // name back would move it to the end, and the order of a module's tables is the order of
  // named_modules() and state_dict(). Once per table, so a flat root with thousands of
  // submodules is copied once, not once per edit.
  for (nb::handle table : SlotTables(parent).all()) {
    if (!saved_tables_.insert(table.ptr()).second) continue;
    nb::object copy = nb::steal(PyDict_Copy(table.ptr()));
    if (!copy.is_valid()) throw nb::python_error();
    undo_.push_back([table = nb::borrow(table), copy] {
      table.attr("clear")();
      table.attr("update")(copy);
    });
  }
  change(parent, name);
}

void Replay::check_erasable() const {
  std::unordered_set<PyObject*> doomed;
  for (const nb::object& node : to_erase_) doomed.insert(node.ptr());
  for (const nb::object& node : to_erase_) {
    for (nb::handle user : get(node, keys().users)) {
      if (doomed.contains(user.ptr())) continue;
      throw std::runtime_error(
          "cannot erase node '" + nb::cast<std::string>(get(node, node_keys().name)) +
          "': still used by " + nb::cast<std::string>(get(user, node_keys().name)));
    }
  }
}

void Replay::erase() {
  // Log order: the core erased each node once nothing read it, so fx can too.
  nb::list names;
  for (const nb::object& node : to_erase_) {
    graph_.attr(keys().erase_node)(node);
    names.append(get(node, node_keys().name));
  }
  // fx never frees a name; freeing those of erased nodes lets a later reverse give a recreated
  // node its original name back.
  if (nb::hasattr(graph_, keys().namespace_)) {
    nb::object space = get(graph_, keys().namespace_);
    if (nb::hasattr(space, keys().used_names))
      get(space, keys().used_names).attr(keys().difference_update)(names);
  }
  undo_.clear();
  to_erase_.clear();
  saved_tables_.clear();
}

void Replay::undo() {
  for (auto step = undo_.rbegin(); step != undo_.rend(); ++step) (*step)();
  undo_.clear();
  saved_tables_.clear();
}

}  // namespace fxopt::bindings
