#include "bindings/module_fingerprint.h"

#include <utility>

#include "bindings/fx_nodes.h"

namespace fxopt::bindings {

namespace {

struct ModuleKeys {
  nb::handle dict, parameters, buffers, modules;
};

const ModuleKeys& module_keys() {
  static const ModuleKeys keys = {
      PyUnicode_InternFromString("__dict__"), PyUnicode_InternFromString("_parameters"),
      PyUnicode_InternFromString("_buffers"), PyUnicode_InternFromString("_modules")};
  return keys;
}

// `state[key]`, which must be a dict (nn.Module's tables always are).
PyObject* table(PyObject* state, nb::handle key) {
  PyObject* value = PyDict_GetItemWithError(state, key.ptr());
  if (!value && PyErr_Occurred()) throw nb::python_error();
  if (!value || !PyDict_Check(value))
    throw nb::type_error("a module's __dict__ lacks nn.Module's tables");
  return value;
}

struct Walk {
  const std::unordered_set<std::string>& imported;
  const std::vector<nb::object>& attributes;
  std::vector<nb::object>& objects;
  std::vector<size_t>& tensors;  // positions of parameter and buffer values in `objects`
  std::unordered_set<PyObject*> seen;

  void add(PyObject* object) { objects.push_back(nb::borrow(object ? object : Py_None)); }

  void add_tensors(PyObject* table) {
    Py_ssize_t position = 0;
    PyObject *key, *value;
    while (PyDict_Next(table, &position, &key, &value)) {
      add(key);
      if (value != Py_None) tensors.push_back(objects.size());
      add(value);
    }
  }

  // named_modules(): depth first, each module once (the first path reaching it), None skipped.
  void module(nb::handle module, const std::string& path) {
    if (!seen.insert(module.ptr()).second) return;
    const ModuleKeys& keys = module_keys();
    nb::object state = get(module, keys.dict);
    if (!PyDict_Check(state.ptr())) throw nb::type_error("a module's __dict__ is not a dict");
    add(module.ptr());
    add_tensors(table(state.ptr(), keys.parameters));
    add_tensors(table(state.ptr(), keys.buffers));
    if (imported.contains(path)) {
      for (const nb::object& name : attributes) {
        PyObject* value = PyDict_GetItemWithError(state.ptr(), name.ptr());
        if (!value && PyErr_Occurred()) throw nb::python_error();
        add(value);
      }
    }
    PyObject* children = table(state.ptr(), keys.modules);
    Py_ssize_t position = 0;
    PyObject *key, *child;
    while (PyDict_Next(children, &position, &key, &child)) {
      if (child == Py_None) continue;
      add(key);
      Py_ssize_t size = 0;
      const char* text = PyUnicode_AsUTF8AndSize(key, &size);
      if (!text) throw nb::python_error();
      std::string name(text, size_t(size));
      this->module(child, path.empty() ? name : path + "." + name);
    }
  }
};

}  // namespace

std::vector<nb::object> ModuleFingerprint::walk(nb::handle root,
                                                std::vector<size_t>& tensors) const {
  std::vector<nb::object> objects;
  objects.reserve(objects_.size());
  Walk{imported_, attributes_, objects, tensors, {}}.module(root, "");
  return objects;
}

void ModuleFingerprint::take(nb::handle root, std::unordered_set<std::string> imported,
                             std::vector<std::string> attributes) {
  imported_ = std::move(imported);
  attributes_.clear();
  for (const std::string& name : attributes)
    attributes_.push_back(nb::steal(PyUnicode_InternFromString(name.c_str())));
  tensors_.clear();
  objects_ = walk(root, tensors_);
}

bool ModuleFingerprint::matches(nb::handle root) const {
  std::vector<size_t> tensors;
  std::vector<nb::object> now = walk(root, tensors);
  if (now.size() != objects_.size()) return false;
  for (size_t i = 0; i < now.size(); ++i)
    if (!now[i].is(objects_[i])) return false;
  return true;
}

nb::list ModuleFingerprint::tensors() const {
  nb::list tensors;
  for (size_t position : tensors_) tensors.append(objects_[position]);
  return tensors;
}

int ModuleFingerprint::traverse(visitproc visit, void* arg) const {
  for (const nb::object& object : objects_) Py_VISIT(object.ptr());
  return 0;
}

}  // namespace fxopt::bindings
