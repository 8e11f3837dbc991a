// Walking an nn.Module tree natively, as `named_modules()` does, reading the modules' tables
// directly. Importing a large graph's modules and checking them again before reuse both walk
// tens of thousands of modules; through Python's generator each cost more than the work done
// per module.
#pragma once

#include <nanobind/nanobind.h>

#include <string>
#include <unordered_set>

#include "bindings/fx_nodes.h"

namespace fxopt::bindings {

namespace nb = nanobind;

// The tables of nn.Module's instance dict (`ModuleKeys`), by interned name.
struct ModuleKeys {
  nb::handle dict, parameters, buffers, modules;
};
const ModuleKeys& module_keys();

// A module's __dict__, which must be a dict.
nb::object module_state(nb::handle module);
// `state[key]`, which must be a dict (nn.Module's tables always are).
PyObject* module_table(PyObject* state, nb::handle key);

// Calls `visit(path, key, module, state)` for every module of the tree below `root` in
// named_modules() order: depth first, each module once at the first path reaching it, None
// entries skipped. `key` is the name its parent files it under (null for `root`); `state` is
// its __dict__, or null where the module was reached before by another path (such an alias is
// visited, but not walked into again).
template <class F>
void for_each_module(nb::handle root, F&& visit) {
  std::unordered_set<PyObject*> seen;
  auto walk = [&](auto&& self, nb::handle module, PyObject* key, const std::string& path) -> void {
    if (!seen.insert(module.ptr()).second) {
      visit(path, key, module, nb::handle());
      return;
    }
    nb::object state = module_state(module);
    visit(path, key, module, nb::handle(state));
    PyObject* children = module_table(state.ptr(), module_keys().modules);
    Py_ssize_t position = 0;
    PyObject *name, *child;
    while (PyDict_Next(children, &position, &name, &child)) {
      if (child == Py_None) continue;
      Py_ssize_t size = 0;
      const char* text = PyUnicode_AsUTF8AndSize(name, &size);
      if (!text) throw nb::python_error();
      std::string child_path = path.empty() ? std::string(text, size_t(size))
                                            : path + "." + std::string(text, size_t(size));
      self(self, child, name, child_path);
    }
  };
  walk(walk, root, nullptr, std::string());
}

}  // namespace fxopt::bindings
