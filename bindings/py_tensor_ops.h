// TensorOps whose methods call into a Python object (fxopt's torch implementation). Passes run
// with the GIL released; each call takes it back for as long as torch needs it.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <functional>

#include "tensor/tensor_ops.h"

namespace fxopt::bindings {

namespace nb = nanobind;

class PyTensorOps final : public TensorOps {
 public:
  // call_form(node, operands) spells a call for Python (Session::call_form).
  using CallForm = std::function<nb::tuple(const Node&, const std::vector<TensorInfo>&)>;
  PyTensorOps(nb::object impl, CallForm call_form)
      : impl_(std::move(impl)), call_form_(std::move(call_form)) {}

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
  TensorInfo cast(const TensorInfo& a, const std::string& dtype) override {
    return call("cast", a, dtype);
  }
  TensorInfo full(const std::vector<int64_t>& shape, double value,
                  const TensorInfo& like) override {
    return call("full", shape, value, like);
  }
  TensorInfo clone(const TensorInfo& a) override { return call("clone", a); }
  TensorInfo channels_last(const TensorInfo& a) override { return call("channels_last", a); }
  QuantizedRows quantize_rows_int8(const TensorInfo& a) override {
    nb::gil_scoped_acquire gil;
    auto [values, scales] =
        nb::cast<std::pair<TensorInfo, TensorInfo>>(impl_.attr("quantize_rows_int8")(a));
    return {values, scales};
  }
  std::optional<TensorInfo> evaluate(const Node& node,
                                     const std::vector<TensorInfo>& operands) override {
    nb::gil_scoped_acquire gil;
    nb::object result = impl_.attr("evaluate")(*call_form_(node, operands));
    if (result.is_none()) return std::nullopt;
    return nb::cast<TensorInfo>(result);
  }

 private:
  template <class... A>
  TensorInfo call(const char* method, const A&... args) {
    nb::gil_scoped_acquire gil;
    return nb::cast<TensorInfo>(impl_.attr(method)(args...));
  }

  nb::object impl_;
  CallForm call_form_;
};

}  // namespace fxopt::bindings
