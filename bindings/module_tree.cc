#include "bindings/module_tree.h"

namespace fxopt::bindings {

const ModuleKeys& module_keys() {
  static const ModuleKeys keys = {interned("__dict__"), interned("_parameters"),
                                  interned("_buffers"), interned("_modules")};
  return keys;
}

nb::object module_state(nb::handle module) {
  nb::object state = get(module, module_keys().dict);
  if (!PyDict_Check(state.ptr())) throw nb::type_error("a module's __dict__ is not a dict");
  return state;
}

PyObject* module_table(PyObject* state, nb::handle key) {
  PyObject* value = PyDict_GetItemWithError(state, key.ptr());
  if (!value && PyErr_Occurred()) throw nb::python_error();
  if (!value || !PyDict_Check(value))
    throw nb::type_error("a module's __dict__ lacks nn.Module's tables");
  return value;
}

}  // namespace fxopt::bindings
