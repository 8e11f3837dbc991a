#include "bindings/fx_nodes.h"

#include <nanobind/stl/string.h>

#include <unordered_map>

namespace fxopt::bindings {

nb::handle interned(const char* text) {
  PyObject* name = PyUnicode_InternFromString(text);
  if (!name) throw nb::python_error();
  return name;
}

const NodeKeys& node_keys() {
  static const NodeKeys keys = {interned("op"),
                                interned("target"),
                                interned("name"),
                                interned("_args"),
                                interned("_kwargs"),
                                interned("meta"),
                                interned("_next"),
                                interned("type"),
                                interned("fxopt_transformations"),
                                interned("fxopt_reversal"),
                                interned("val"),
                                interned("tensor_meta"),
                                interned("is_wrapped"),
                                interned("shape"),
                                interned("dtype"),
                                interned("device"),
                                interned("layout"),
                                interned("graph"),
                                interned("nodes")};
  return keys;
}

const std::string& dtype_name(nb::handle dtype) {
  // Keys: torch's dtype objects, singletons held here so their addresses stay theirs.
  static std::unordered_map<PyObject*, std::string> names;
  auto it = names.find(dtype.ptr());
  if (it != names.end()) return it->second;
  std::string name = nb::cast<std::string>(nb::str(dtype));
  if (name.starts_with("torch.")) name.erase(0, 6);
  Py_INCREF(dtype.ptr());
  return names.emplace(dtype.ptr(), std::move(name)).first->second;
}

nb::object get(nb::handle object, nb::handle key) {
  PyObject* value = PyObject_GetAttr(object.ptr(), key.ptr());
  if (!value) throw nb::python_error();
  return nb::steal(value);
}

nb::object lookup(nb::handle dict, nb::handle key) {
  PyObject* value = PyDict_GetItemWithError(dict.ptr(), key.ptr());
  if (!value && PyErr_Occurred()) throw nb::python_error();
  return nb::borrow(value);
}

}  // namespace fxopt::bindings
