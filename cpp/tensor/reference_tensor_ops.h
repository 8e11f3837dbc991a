// TensorOps on plain C++ vectors, for the engine's own tests: values are held as doubles and
// rounded to float32 / float16-like precision only through `cast`, which the tests do not need.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "tensor/tensor_ops.h"

namespace fxopt {

class ReferenceTensorOps final : public TensorOps {
 public:
  TensorInfo make(std::vector<int64_t> shape, std::vector<double> values,
                  std::string dtype = "float32");
  const std::vector<double>& values(const TensorInfo& t) const;

  TensorInfo cat(const std::vector<TensorInfo>& parts, int64_t dim) override;
  TensorInfo slice(const TensorInfo& t, int64_t dim, int64_t start, int64_t end) override;
  TensorInfo add(const TensorInfo& a, const TensorInfo& b) override;
  TensorInfo sub(const TensorInfo& a, const TensorInfo& b) override;
  TensorInfo mul(const TensorInfo& a, const TensorInfo& b) override;
  TensorInfo add_scalar(const TensorInfo& a, double value) override;
  TensorInfo rsqrt(const TensorInfo& a) override;
  TensorInfo sum(const TensorInfo& a, int64_t dim) override;
  TensorInfo reshape(const TensorInfo& a, const std::vector<int64_t>& shape) override;
  TensorInfo transpose(const TensorInfo& a, int64_t dim0, int64_t dim1) override;
  TensorInfo cast(const TensorInfo& a, const std::string& dtype) override;
  TensorInfo full(const std::vector<int64_t>& shape, double value, const TensorInfo& like) override;
  TensorInfo clone(const TensorInfo& a) override;
  TensorInfo from_values(const std::vector<double>& values, const TensorInfo& like) override {
    return make({int64_t(values.size())}, values, like.dtype);
  }
  // Layout is not modelled here: a plain copy.
  TensorInfo channels_last(const TensorInfo& a) override { return clone(a); }
  QuantizedRows quantize_rows_int8(const TensorInfo& a, int max_level) override;
  QuantizedGroups quantize_groups_int4(const TensorInfo& a, int64_t group_size,
                                       Int4Layout layout) override;
  // Calls `evaluator` (tests set it to their interpreter's kernels); nullopt without one.
  std::optional<TensorInfo> evaluate(const Node& node,
                                     const std::vector<TensorInfo>& operands) override {
    return evaluator ? evaluator(node, operands) : std::nullopt;
  }
  std::function<std::optional<TensorInfo>(const Node&, const std::vector<TensorInfo>&)> evaluator;

 private:
  template <class F>
  TensorInfo broadcast(const TensorInfo& a, const TensorInfo& b, F op);
  TensorInfo map(const TensorInfo& a, double (*op)(double, double), double scalar);

  std::unordered_map<uint64_t, std::vector<double>> data_;
  uint64_t next_handle_ = 1;
};

}  // namespace fxopt
