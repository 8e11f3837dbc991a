#include "bindings/fx_nodes.h"

namespace fxopt::bindings {

const NodeKeys& node_keys() {
  static const NodeKeys keys = {PyUnicode_InternFromString("op"),
                                PyUnicode_InternFromString("target"),
                                PyUnicode_InternFromString("name"),
                                PyUnicode_InternFromString("_args"),
                                PyUnicode_InternFromString("_kwargs"),
                                PyUnicode_InternFromString("meta"),
                                PyUnicode_InternFromString("_next"),
                                PyUnicode_InternFromString("type"),
                                PyUnicode_InternFromString("fxopt_transformations"),
                                PyUnicode_InternFromString("fxopt_reversal"),
                                PyUnicode_InternFromString("val"),
                                PyUnicode_InternFromString("tensor_meta"),
                                PyUnicode_InternFromString("is_wrapped"),
                                PyUnicode_InternFromString("shape"),
                                PyUnicode_InternFromString("dtype"),
                                PyUnicode_InternFromString("device"),
                                PyUnicode_InternFromString("layout")};
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
