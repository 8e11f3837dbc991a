#include "bindings/module_fingerprint.h"

#include <algorithm>
#include <utility>

#include "bindings/fx_nodes.h"

namespace fxopt::bindings {

namespace {

struct ModuleKeys {
  nb::handle dict, parameters, buffers, modules;
};

const ModuleKeys& module_keys() {
  static const ModuleKeys keys = {interned("__dict__"), interned("_parameters"),
                                  interned("_buffers"), interned("_modules")};
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

// hasattr(cls, name) for a name the class or its metaclass defines (no instance involved).
bool class_has(PyTypeObject* cls, PyObject* name) {
  return _PyType_Lookup(cls, name) || _PyType_Lookup(Py_TYPE(cls), name);
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

nb::object module_attribute(nb::handle object, nb::handle name, nb::handle module_type) {
  int is_module = PyObject_IsInstance(object.ptr(), module_type.ptr());
  if (is_module < 0) throw nb::python_error();
  if (is_module && !class_has(Py_TYPE(object.ptr()), name.ptr())) {
    const ModuleKeys& keys = module_keys();
    nb::object state = get(object, keys.dict);
    if (!PyDict_Check(state.ptr())) throw nb::type_error("a module's __dict__ is not a dict");
    for (PyObject* where : {state.ptr(), table(state.ptr(), keys.parameters),
                            table(state.ptr(), keys.buffers), table(state.ptr(), keys.modules)}) {
      if (nb::object value = lookup(where, name); value.is_valid()) return value;
    }
    return {};
  }
  PyObject* value = PyObject_GetAttr(object.ptr(), name.ptr());
  if (value) return nb::steal(value);
  if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw nb::python_error();
  PyErr_Clear();
  return {};
}

std::vector<nb::object> ModuleFingerprint::walk(nb::handle root,
                                                std::vector<size_t>& tensors) const {
  std::vector<nb::object> objects;
  objects.reserve(objects_.size());
  Walk{imported_, attributes_, objects, tensors, {}}.module(root, "");
  for (const std::vector<nb::object>& path : paths_) objects.push_back(find(root, path));
  return objects;
}

nb::object ModuleFingerprint::find(nb::handle root, const std::vector<nb::object>& path) const {
  nb::object object = nb::borrow(root);
  for (const nb::object& name : path) {
    object = module_attribute(object, name, module_type_);
    if (!object.is_valid()) return nb::none();
  }
  return object;
}

void ModuleFingerprint::take(nb::handle root, std::unordered_set<std::string> imported,
                             std::vector<std::string> attributes,
                             const std::vector<std::string>& paths, nb::handle module_type) {
  imported_ = std::move(imported);
  attributes_.clear();
  for (const std::string& name : attributes)
    attributes_.push_back(nb::steal(PyUnicode_InternFromString(name.c_str())));
  paths_.clear();
  for (const std::string& path : paths) {
    std::vector<nb::object>& parts = paths_.emplace_back();
    for (size_t start = 0; start <= path.size();) {
      size_t dot = std::min(path.find('.', start), path.size());
      parts.push_back(
          nb::steal(PyUnicode_InternFromString(path.substr(start, dot - start).c_str())));
      start = dot + 1;
    }
  }
  module_type_ = nb::borrow(module_type);
  tensors_.clear();
  objects_ = walk(root, tensors_);
  // The values at the paths come last; a kept session must not forget those either.
  for (size_t position = objects_.size() - paths_.size(); position < objects_.size(); ++position)
    if (!objects_[position].is_none()) tensors_.push_back(position);
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
  Py_VISIT(module_type_.ptr());
  return 0;
}

}  // namespace fxopt::bindings
