#include "bindings/tensor_table.h"

#include <nanobind/stl/string.h>

#include <unordered_set>

#include "bindings/fx_nodes.h"

namespace fxopt::bindings {

TensorTable::TensorTable(nb::handle tensor_type, nb::handle parameter_type)
    : tensor_type_(nb::borrow(tensor_type)), parameter_type_(nb::borrow(parameter_type)) {}

std::string TensorTable::device_name(nb::handle device) {
  nb::object known = lookup(device_names_, device);
  if (known.is_valid()) return nb::cast<std::string>(known);
  nb::str name = nb::str(device);
  device_names_[device] = name;
  return nb::cast<std::string>(name);
}

bool TensorTable::is_parameter(nb::handle tensor) const {
  // Parameter's isinstance goes through a Python metaclass hook: only for other subclasses.
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(tensor.ptr()));
  if (type == parameter_type_.ptr()) return true;
  if (type == tensor_type_.ptr()) return false;
  int is_parameter = PyObject_IsInstance(tensor.ptr(), parameter_type_.ptr());
  if (is_parameter < 0) throw nb::python_error();
  return is_parameter == 1;
}

bool TensorTable::requires_grad(nb::handle tensor) {
  static const nb::handle key = interned("requires_grad");
  int value = PyObject_IsTrue(get(tensor, key).ptr());
  if (value < 0) throw nb::python_error();
  return value == 1;
}

TensorInfo TensorTable::add(nb::handle tensor) {
  const NodeKeys& keys = node_keys();  // a tensor's shape, dtype and device have fx's key names
  TensorInfo info;
  nb::object shape = get(tensor, keys.shape);
  if (!PyTuple_Check(shape.ptr())) throw nb::type_error("a tensor's shape is not a torch.Size");
  for (nb::handle size : nb::borrow<nb::tuple>(shape))
    info.shape.push_back(nb::cast<int64_t>(size));
  info.dtype = dtype_name(get(tensor, keys.dtype));
  info.device = device_name(get(tensor, keys.device));
  info.requires_grad = requires_grad(tensor);
  info.is_parameter = is_parameter(tensor);
  auto [it, added] = handles_.try_emplace(tensor.ptr(), next_);
  if (added) tensors_.emplace(next_++, nb::borrow(tensor));
  info.handle = it->second;
  return info;
}

nb::object TensorTable::tensor(uint64_t handle) const {
  auto it = tensors_.find(handle);
  if (it == tensors_.end())
    throw nb::key_error(("no tensor with handle " + std::to_string(handle)).c_str());
  return it->second;
}

nb::object TensorTable::stored(const TensorInfo& info) {
  nb::object tensor = this->tensor(info.handle);
  if (!info.is_parameter || (is_parameter(tensor) && requires_grad(tensor) == info.requires_grad))
    return tensor;
  nb::object parameter = parameter_type_(tensor, info.requires_grad);
  rebind(info.handle, parameter);
  return parameter;
}

void TensorTable::rebind(uint64_t handle, nb::handle tensor) {
  auto it = tensors_.find(handle);
  if (it == tensors_.end())
    throw nb::key_error(("no tensor with handle " + std::to_string(handle)).c_str());
  if (auto old = handles_.find(it->second.ptr()); old != handles_.end() && old->second == handle)
    handles_.erase(old);  // the old tensor may be freed now, and its address reused
  handles_[tensor.ptr()] = handle;
  it->second = nb::borrow(tensor);
}

void TensorTable::retain(nb::handle live) {
  std::unordered_set<PyObject*> keep;
  for (nb::handle object : live) keep.insert(object.ptr());
  std::unordered_map<uint64_t, nb::object> tensors;
  std::erase_if(handles_, [&](const auto& entry) {
    if (!keep.contains(entry.first)) return true;
    tensors.emplace(entry.second, tensors_.at(entry.second));
    return false;
  });
  tensors_ = std::move(tensors);
}

}  // namespace fxopt::bindings
