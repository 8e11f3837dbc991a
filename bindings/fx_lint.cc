#include "bindings/fx_lint.h"

#include <array>
#include <unordered_set>

#include "bindings/fx_nodes.h"
#include "bindings/module_fingerprint.h"

namespace fxopt::bindings {
namespace {

bool equal(nb::handle a, nb::handle b) {
  return a.is(b) || (PyUnicode_Check(a.ptr()) && PyUnicode_Compare(a.ptr(), b.ptr()) == 0);
}

bool contains(nb::handle container, nb::handle item) {
  int found = PySequence_Contains(container.ptr(), item.ptr());
  if (found < 0) throw nb::python_error();
  return found == 1;
}

// fx's target checks for one node: call_function targets are callable, other targets are
// strings, and get_attr / call_module targets name attributes of the owning module (modules,
// for call_module, at every step).
bool target_exists(nb::handle op, nb::handle target, nb::handle owner, nb::handle module_type) {
  static const nb::handle call_function = interned("call_function"),
                          call_module = interned("call_module"), get_attr = interned("get_attr"),
                          dot = interned(".");
  if (equal(op, call_function)) return PyCallable_Check(target.ptr());
  if (!PyUnicode_Check(target.ptr())) return false;
  bool is_module = equal(op, call_module);
  if (!is_module && !equal(op, get_attr)) return true;
  nb::object object = nb::borrow(owner);
  for (nb::handle atom : nb::steal(PyUnicode_Split(target.ptr(), dot.ptr(), -1))) {
    object = module_attribute(object, atom, module_type);
    if (!object.is_valid() || object.is_none()) return false;
    if (is_module) {
      int is_module_object = PyObject_IsInstance(object.ptr(), module_type.ptr());
      if (is_module_object < 0) throw nb::python_error();
      if (!is_module_object) return false;
    }
  }
  return true;
}

}  // namespace

bool fx_graph_lints_clean(nb::handle graph, nb::handle module_type) {
  const NodeKeys& keys = node_keys();
  static const nb::handle graph_key = interned("graph"), input_nodes = interned("_input_nodes"),
                          lookup_table = interned("_find_nodes_lookup_table"),
                          table_key = interned("table"), owning_module = interned("owning_module"),
                          call_function = interned("call_function");
  static const std::array<nb::handle, 7> legal_ops = {
      interned("placeholder"),   interned("call_method"), interned("call_module"),
      interned("call_function"), interned("get_attr"),    interned("output"),
      interned("root")};

  nb::object root = get(graph, nb::str("_root"));
  nb::object table = get(get(graph, lookup_table), table_key);
  if (!PyDict_Check(table.ptr())) return false;
  nb::object owner = get(graph, owning_module);
  int owned = PyObject_IsTrue(owner.ptr());
  if (owned < 0) throw nb::python_error();
  std::unordered_set<PyObject*> seen_values;  // the graph's nodes keep them alive
  nb::set seen_names;
  // fx checks the nodes in one loop and the targets in a second; one loop finds the same
  // problems (which one fx reports first does not matter: its own lint reports it).
  bool clean = true;
  for_each_fx_node(root, [&](nb::handle node) {
    if (!clean) return;
    clean = false;
    nb::object op = get(node, keys.op), target = get(node, keys.target);
    bool legal = false;
    for (nb::handle candidate : legal_ops) legal |= equal(op, candidate);
    if (!legal || !get(node, graph_key).is(graph)) return;
    // fx's side table files each node under (op, target if call_function else None)
    nb::object side =
        lookup(table, nb::make_tuple(op, equal(op, call_function) ? target : nb::none()));
    if (!side.is_valid() || !contains(side, node)) return;
    nb::object inputs = get(node, input_nodes);
    if (!PyDict_Check(inputs.ptr())) return;
    Py_ssize_t position = 0;
    PyObject *input, *unused;
    while (PyDict_Next(inputs.ptr(), &position, &input, &unused))
      if (!get(input, graph_key).is(graph) || !seen_values.contains(input)) return;
    seen_values.insert(node.ptr());
    nb::object name = get(node, keys.name);
    if (contains(seen_names, name)) return;
    seen_names.add(name);
    clean = !owned || target_exists(op, target, owner, module_type);
  });
  return clean;
}

}  // namespace fxopt::bindings
