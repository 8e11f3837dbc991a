// TensorOps whose methods call into a Python object (fxopt's torch implementation). Passes run
// with the GIL released; each call takes it back for as long as torch needs it.
//
// Python sees tensors only: the operands are looked up in the session's TensorTable here and the
// result registered there, so the torch side is tensor arithmetic and nothing else, and no
// TensorInfo crosses into Python and back (each did: a copy of its shape and names, twice per
// operand; tens of thousands of calls on a large graph).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <functional>

#include "bindings/tensor_table.h"
#include "tensor/tensor_ops.h"

namespace fxopt::bindings {

namespace nb = nanobind;

class PyTensorOps final : public TensorOps {
 public:
  // call_form(node, operand tensors) spells a call for Python (Session::call_form).
  using CallForm = std::function<nb::tuple(const Node&, const std::vector<nb::object>&)>;
  PyTensorOps(nb::object impl, TensorTable& tensors, CallForm call_form)
      : impl_(std::move(impl)), tensors_(tensors), call_form_(std::move(call_form)) {}

  TensorInfo cat(const std::vector<TensorInfo>& parts, int64_t dim) override {
    return call("cat", parts, dim);
  }
  TensorInfo slice(const TensorInfo& t, int64_t dim, int64_t start, int64_t end) override {
    return call("slice", t, dim, start, end);
  }
  TensorInfo add(const TensorInfo& a, const TensorInfo& b) override { return call("add", a, b); }
  TensorInfo sub(const TensorInfo& a, const TensorInfo& b) override { return call("sub", a, b); }
  TensorInfo mul(const TensorInfo& a, const TensorInfo& b) override { return call("mul", a, b); }
  TensorInfo add_scalar(const TensorInfo& a, double value) override {
    return call("add_scalar", a, value);
  }
  TensorInfo rsqrt(const TensorInfo& a) override { return call("rsqrt", a); }
  TensorInfo sum(const TensorInfo& a, int64_t dim) override { return call("sum", a, dim); }
  TensorInfo reshape(const TensorInfo& a, const std::vector<int64_t>& shape) override {
    return call("reshape", a, shape);
  }
  TensorInfo transpose(const TensorInfo& a, int64_t dim0, int64_t dim1) override {
    return call("transpose", a, dim0, dim1);
  }
  TensorInfo transposed_view(const TensorInfo& a, int64_t dim0, int64_t dim1) override {
    return call("transposed_view", a, dim0, dim1);
  }
  TensorInfo cast(const TensorInfo& a, const std::string& dtype) override {
    return call("cast", a, dtype);
  }
  TensorInfo full(const std::vector<int64_t>& shape, double value,
                  const TensorInfo& like) override {
    return call("full", shape, value, like);
  }
  TensorInfo clone(const TensorInfo& a) override { return call("clone", a); }
  TensorInfo from_values(const std::vector<double>& values, const TensorInfo& like) override {
    return call("from_values", values, like);
  }
  TensorInfo channels_last(const TensorInfo& a) override { return call("channels_last", a); }
  QuantizedRows quantize_rows_int8(const TensorInfo& a, int max_level) override {
    nb::gil_scoped_acquire gil;
    auto [values, scales] = nb::cast<std::pair<nb::object, nb::object>>(
        impl_.attr("quantize_rows_int8")(py(a), max_level));
    return {tensors_.add(values), tensors_.add(scales)};
  }
  QuantizedGroups quantize_groups_int4(const TensorInfo& a, int64_t group_size,
                                       Int4Layout layout) override {
    nb::gil_scoped_acquire gil;
    const char* kernel = layout == Int4Layout::kAten ? "aten" : "fxopt";
    auto [values, scales_and_zeros] = nb::cast<std::pair<nb::object, nb::object>>(
        impl_.attr("quantize_groups_int4")(py(a), group_size, kernel));
    return {tensors_.add(values), tensors_.add(scales_and_zeros)};
  }
  std::optional<TensorInfo> evaluate(const Node& node,
                                     const std::vector<TensorInfo>& operands) override {
    nb::gil_scoped_acquire gil;
    std::vector<nb::object> values;
    for (const TensorInfo& operand : operands) values.push_back(py(operand));
    nb::object result = impl_.attr("evaluate")(*call_form_(node, values));
    if (result.is_none()) return std::nullopt;
    return tensors_.add(result);
  }

 private:
  template <class... A>
  TensorInfo call(const char* method, const A&... args) {
    nb::gil_scoped_acquire gil;
    return tensors_.add(impl_.attr(method)(py(args)...));
  }
  // An argument as Python sees it: a tensor for a TensorInfo, the value itself otherwise.
  nb::object py(const TensorInfo& t) const { return tensors_.tensor(t.handle); }
  nb::list py(const std::vector<TensorInfo>& ts) const {
    nb::list out;
    for (const TensorInfo& t : ts) out.append(py(t));
    return out;
  }
  template <class T>
  const T& py(const T& value) const {
    return value;
  }

  nb::object impl_;
  TensorTable& tensors_;
  CallForm call_form_;
};

}  // namespace fxopt::bindings
