#include "bindings/fx_nodes.h"

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
                                interned("layout")};
  return keys;
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
