// The tensors an engine session refers to by handle, with the TensorInfo it sees of each.
//
// Importing a graph registers every parameter and buffer of every module it calls (tens of
// thousands on a large graph), and each pass result is registered too; built in Python, each
// TensorInfo cost more than the rest of importing its module. The torch TensorOps
// (python/fxopt/engine/tensor_ops.py) keeps its tensors here. Tensors never refer back to the
// table, so it holds them without taking part in Python's cycle collection.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>
#include <unordered_map>

#include "ir/program.h"

namespace fxopt::bindings {

namespace nb = nanobind;

class TensorTable {
 public:
  // tensor_type: torch.Tensor; parameter_type: torch.nn.Parameter.
  TensorTable(nb::handle tensor_type, nb::handle parameter_type);

  // `tensor`'s info, under the handle it was registered with, or a new one the first time: a
  // tensor stored at several paths (tied weights) has one handle.
  TensorInfo add(nb::handle tensor);
  nb::object tensor(uint64_t handle) const;
  // What a module stores for `info`: its tensor, or for a parameter a Parameter with the
  // recorded requires_grad, made once per handle (the handle names it from then on), so a
  // tensor the core stores at several paths (tied weights) stays one object.
  nb::object stored(const TensorInfo& info);
  // Makes `handle` name `tensor` (what a module stores for it) from now on.
  void rebind(uint64_t handle, nb::handle tensor);
  // Forgets every tensor but those in `live` (what the GraphModule still holds), so a session
  // kept between transformations does not keep the weights a pass replaced alive.
  void retain(nb::handle live);
  size_t size() const { return tensors_.size(); }

 private:
  std::string device_name(nb::handle device);
  bool is_parameter(nb::handle tensor) const;
  static bool requires_grad(nb::handle tensor);

  nb::object tensor_type_, parameter_type_;
  std::unordered_map<uint64_t, nb::object> tensors_;
  std::unordered_map<PyObject*, uint64_t> handles_;  // the tensors in tensors_ keep keys alive
  uint64_t next_ = 1;
  nb::dict device_names_;  // torch.device is a value: equal devices, one entry
};

}  // namespace fxopt::bindings
