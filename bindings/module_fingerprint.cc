#include "bindings/module_fingerprint.h"

#include <algorithm>
#include <utility>

#include "bindings/fx_nodes.h"
#include "bindings/module_tree.h"

namespace fxopt::bindings {

namespace {

// hasattr(cls, name) for a name the class or its metaclass defines (no instance involved).
bool class_has(PyTypeObject* cls, PyObject* name) {
  return _PyType_Lookup(cls, name) || _PyType_Lookup(Py_TYPE(cls), name);
}

struct Walk {
  const std::unordered_set<std::string>& imported;
  const std::vector<nb::object>& attributes;
  std::vector<nb::object>& objects;
  std::vector<size_t>& tensors;  // positions of parameter and buffer values in `objects`

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

  // The key its parent files it under, the module, and, the first time it is reached, its
  // tensors and the attributes read of it.
  void operator()(const std::string& path, PyObject* key, nb::handle module, nb::handle state) {
    if (key) add(key);
    if (!state.is_valid()) return;
    const ModuleKeys& keys = module_keys();
    add(module.ptr());
    add_tensors(module_table(state.ptr(), keys.parameters));
    add_tensors(module_table(state.ptr(), keys.buffers));
    if (!imported.contains(path)) return;
    for (const nb::object& name : attributes) {
      PyObject* value = PyDict_GetItemWithError(state.ptr(), name.ptr());
      if (!value && PyErr_Occurred()) throw nb::python_error();
      add(value);
    }
  }
};

}  // namespace

nb::object module_attribute(nb::handle object, nb::handle name, nb::handle module_type) {
  int is_module = PyObject_IsInstance(object.ptr(), module_type.ptr());
  if (is_module < 0) throw nb::python_error();
  if (is_module && !class_has(Py_TYPE(object.ptr()), name.ptr())) {
    const ModuleKeys& keys = module_keys();
    nb::object state = module_state(object);
    for (PyObject* where :
         {state.ptr(), module_table(state.ptr(), keys.parameters),
          module_table(state.ptr(), keys.buffers), module_table(state.ptr(), keys.modules)}) {
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
  for_each_module(root, Walk{imported_, attributes_, objects, tensors});
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

void ModuleFingerprint::take(nb::handle root, const std::unordered_set<std::string>& imported,
                             std::vector<std::string> attributes,
                             const std::vector<std::string>& paths, nb::handle module_type) {
  imported_ = imported;
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
