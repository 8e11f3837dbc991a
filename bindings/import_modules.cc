// Session::import_modules: the modules a graph calls, read natively. A large graph calls tens of
// thousands of modules; reading each one's attributes and tensors in Python cost more than
// importing its nodes.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings/fx_nodes.h"
#include "bindings/session.h"
#include "bindings/tensor_table.h"

namespace fxopt::bindings {
namespace {

// The values passes may read of a module: plain Python values, or tuples and lists of them.
bool plain(PyObject* value) {
  if (PyTuple_Check(value) || PyList_Check(value)) {
    for (nb::handle item : nb::borrow(value))
      if (!plain(item.ptr())) return false;
    return true;
  }
  return value == Py_None || PyBool_Check(value) || PyLong_Check(value) || PyFloat_Check(value) ||
         PyUnicode_Check(value);
}

// `state[key]` as a dict: nn.Module's parameter and buffer tables.
nb::dict module_table(nb::handle state, nb::handle key) {
  nb::object table = lookup(state, key);
  if (!table.is_valid() || !PyDict_Check(table.ptr()))
    throw nb::type_error("a module's __dict__ lacks nn.Module's tables");
  return nb::borrow<nb::dict>(table);
}

}  // namespace

Symbol Session::module_type_name(nb::handle module) {
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(module.ptr()));
  auto it = module_types_.find(type);
  if (it != module_types_.end()) return it->second.second;
  nb::handle cls(type);
  Symbol name = Symbol::intern(nb::cast<std::string>(cls.attr("__module__")) + "." +
                               nb::cast<std::string>(cls.attr("__qualname__")));
  module_types_.emplace(type, std::make_pair(nb::borrow(cls), name));
  return name;
}

void Session::import_modules(nb::handle modules, const std::vector<std::string>& attributes,
                             TensorTable& tensors) {
  std::vector<nb::object> names;
  for (const std::string& name : attributes)
    names.push_back(nb::steal(PyUnicode_InternFromString(name.c_str())));
  static const nb::handle dict_key = interned("__dict__"), parameters = interned("_parameters"),
                          buffers = interned("_buffers");
  for (nb::handle entry : modules) {
    auto [path, module] = nb::cast<std::pair<std::string, nb::object>>(entry);
    nb::object state = get(module, dict_key);
    if (!PyDict_Check(state.ptr())) throw nb::type_error("a module's __dict__ is not a dict");
    ModuleInfo info{module_type_name(module), {}, {}};
    for (size_t i = 0; i < names.size(); ++i) {
      nb::object value = lookup(state, names[i]);
      if (value.is_valid() && !value.is_none() && plain(value.ptr()))
        info.attributes.items.emplace_back(attributes[i], to_arg(value));
    }
    for (nb::handle table : {parameters, buffers}) {
      for (auto [name, tensor] : module_table(state, table))
        info.tensors[nb::cast<std::string>(name)] =
            tensor.is_none() ? TensorInfo{} : tensors.add(tensor);
    }
    program_.modules[path] = std::move(info);
  }
}

}  // namespace fxopt::bindings
