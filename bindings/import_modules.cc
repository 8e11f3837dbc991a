// Session::import_modules: the module tree, read natively in one walk. A large graph calls tens
// of thousands of modules; reading each one's attributes and tensors in Python cost more than
// importing its nodes, and listing every path taken cost as much again.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unordered_set.h>
#include <nanobind/stl/vector.h>

#include "bindings/fx_nodes.h"
#include "bindings/module_tree.h"
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

void Session::import_modules(nb::handle root,
                             const std::optional<std::unordered_set<std::string>>& paths,
                             const std::vector<std::string>& attributes, TensorTable& tensors) {
  std::vector<nb::object> names;
  for (const std::string& name : attributes)
    names.push_back(nb::steal(PyUnicode_InternFromString(name.c_str())));
  const ModuleKeys& keys = module_keys();
  for_each_module(
      root, [&](const std::string& path, PyObject*, nb::handle module, nb::handle state) {
        program_.taken_paths.insert(path);
        if (!state.is_valid()) return;  // an alias of a module walked already
        std::string prefix = path.empty() ? path : path + ".";
        for (nb::handle table : {keys.parameters, keys.buffers}) {
          for (auto [name, tensor] : nb::borrow<nb::dict>(module_table(state.ptr(), table)))
            program_.taken_paths.insert(prefix + nb::cast<std::string>(name));
        }
        if (path.empty() || imported_modules_.contains(path) || (paths && !paths->contains(path)))
          return;
        ModuleInfo info{module_type_name(module), {}, {}};
        for (size_t i = 0; i < names.size(); ++i) {
          nb::object value = lookup(state, names[i]);
          if (value.is_valid() && !value.is_none() && plain(value.ptr()))
            info.attributes.items.emplace_back(attributes[i], to_arg(value));
        }
        for (nb::handle table : {keys.parameters, keys.buffers}) {
          for (auto [name, tensor] : nb::borrow<nb::dict>(module_table(state.ptr(), table)))
            info.tensors[nb::cast<std::string>(name)] =
                tensor.is_none() ? TensorInfo{} : tensors.add(tensor);
        }
        program_.modules[path] = std::move(info);
        imported_modules_.insert(path);
      });
}

}  // namespace fxopt::bindings
