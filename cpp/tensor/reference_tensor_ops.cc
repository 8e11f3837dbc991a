#include "tensor/reference_tensor_ops.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "kernels/float16.h"

namespace fxopt {
namespace {

int64_t numel(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

int64_t normalize_dim(int64_t dim, size_t rank) { return dim < 0 ? dim + int64_t(rank) : dim; }

// Product of the sizes after `dim`: the stride of `dim` in a contiguous tensor.
int64_t inner_size(const std::vector<int64_t>& shape, int64_t dim) {
  return std::accumulate(shape.begin() + dim + 1, shape.end(), int64_t{1}, std::multiplies<>());
}

}  // namespace

TensorInfo ReferenceTensorOps::make(std::vector<int64_t> shape, std::vector<double> values,
                                    std::string dtype) {
  if (numel(shape) != int64_t(values.size())) throw std::invalid_argument("shape/values mismatch");
  TensorInfo info{std::move(shape), std::move(dtype), "cpu", false, false, next_handle_++};
  data_[info.handle] = std::move(values);
  return info;
}

const std::vector<double>& ReferenceTensorOps::values(const TensorInfo& t) const {
  return data_.at(t.handle);
}

TensorInfo ReferenceTensorOps::cat(const std::vector<TensorInfo>& parts, int64_t dim) {
  dim = normalize_dim(dim, parts.at(0).shape.size());
  std::vector<int64_t> shape = parts[0].shape;
  shape[dim] = 0;
  for (const TensorInfo& p : parts) shape[dim] += p.shape[dim];
  int64_t outer = numel(shape) / (shape[dim] * inner_size(shape, dim));
  std::vector<double> out;
  out.reserve(numel(shape));
  for (int64_t o = 0; o < outer; ++o) {
    for (const TensorInfo& p : parts) {
      int64_t block = p.shape[dim] * inner_size(p.shape, dim);
      const auto& v = values(p);
      out.insert(out.end(), v.begin() + o * block, v.begin() + (o + 1) * block);
    }
  }
  return make(shape, std::move(out), parts[0].dtype);
}

TensorInfo ReferenceTensorOps::slice(const TensorInfo& t, int64_t dim, int64_t start, int64_t end) {
  dim = normalize_dim(dim, t.shape.size());
  std::vector<int64_t> shape = t.shape;
  shape[dim] = end - start;
  int64_t inner = inner_size(t.shape, dim);
  int64_t outer = numel(t.shape) / (t.shape[dim] * inner);
  const auto& v = values(t);
  std::vector<double> out;
  for (int64_t o = 0; o < outer; ++o) {
    auto row = v.begin() + o * t.shape[dim] * inner;
    out.insert(out.end(), row + start * inner, row + end * inner);
  }
  return make(shape, std::move(out), t.dtype);
}

template <class F>
TensorInfo ReferenceTensorOps::broadcast(const TensorInfo& a, const TensorInfo& b, F op) {
  size_t rank = std::max(a.shape.size(), b.shape.size());
  auto padded = [&](const std::vector<int64_t>& s) {
    std::vector<int64_t> p(rank - s.size(), 1);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  std::vector<int64_t> sa = padded(a.shape), sb = padded(b.shape), shape(rank);
  for (size_t i = 0; i < rank; ++i) {
    if (sa[i] != sb[i] && sa[i] != 1 && sb[i] != 1)
      throw std::invalid_argument("not broadcastable");
    shape[i] = std::max(sa[i], sb[i]);
  }
  const auto &va = values(a), &vb = values(b);
  std::vector<double> out(numel(shape));
  std::vector<int64_t> index(rank, 0);
  for (size_t flat = 0; flat < out.size(); ++flat) {
    int64_t ia = 0, ib = 0;
    for (size_t d = 0; d < rank; ++d) {
      ia = ia * sa[d] + (sa[d] == 1 ? 0 : index[d]);
      ib = ib * sb[d] + (sb[d] == 1 ? 0 : index[d]);
    }
    out[flat] = op(va[ia], vb[ib]);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return make(shape, std::move(out), a.dtype);
}

TensorInfo ReferenceTensorOps::add(const TensorInfo& a, const TensorInfo& b) {
  return broadcast(a, b, std::plus<>());
}
TensorInfo ReferenceTensorOps::sub(const TensorInfo& a, const TensorInfo& b) {
  return broadcast(a, b, std::minus<>());
}
TensorInfo ReferenceTensorOps::mul(const TensorInfo& a, const TensorInfo& b) {
  return broadcast(a, b, std::multiplies<>());
}

TensorInfo ReferenceTensorOps::map(const TensorInfo& a, double (*op)(double, double), double s) {
  std::vector<double> out = values(a);
  for (double& x : out) x = op(x, s);
  return make(a.shape, std::move(out), a.dtype);
}

TensorInfo ReferenceTensorOps::add_scalar(const TensorInfo& a, double value) {
  return map(
      a, [](double x, double s) { return x + s; }, value);
}

TensorInfo ReferenceTensorOps::rsqrt(const TensorInfo& a) {
  return map(
      a, [](double x, double) { return 1.0 / std::sqrt(x); }, 0.0);
}

TensorInfo ReferenceTensorOps::sum(const TensorInfo& a, int64_t dim) {
  dim = normalize_dim(dim, a.shape.size());
  int64_t inner = inner_size(a.shape, dim), size = a.shape[dim];
  std::vector<int64_t> shape = a.shape;
  shape.erase(shape.begin() + dim);
  std::vector<double> out(numel(shape), 0.0);
  const auto& v = values(a);
  for (size_t i = 0; i < v.size(); ++i) out[i / (size * inner) * inner + i % inner] += v[i];
  return make(shape, std::move(out), a.dtype);
}

TensorInfo ReferenceTensorOps::reshape(const TensorInfo& a, const std::vector<int64_t>& shape) {
  if (numel(shape) != numel(a.shape)) throw std::invalid_argument("reshape changes numel");
  return make(shape, values(a), a.dtype);
}

TensorInfo ReferenceTensorOps::transpose(const TensorInfo& a, int64_t dim0, int64_t dim1) {
  size_t rank = a.shape.size();
  dim0 = normalize_dim(dim0, rank);
  dim1 = normalize_dim(dim1, rank);
  std::vector<int64_t> shape = a.shape;
  std::swap(shape[dim0], shape[dim1]);
  const auto& v = values(a);
  std::vector<double> out(v.size());
  std::vector<int64_t> index(rank, 0);  // position in `a`, row-major
  for (size_t flat = 0; flat < v.size(); ++flat) {
    std::vector<int64_t> swapped = index;
    std::swap(swapped[dim0], swapped[dim1]);
    int64_t target = 0;
    for (size_t d = 0; d < rank; ++d) target = target * shape[d] + swapped[d];
    out[target] = v[flat];
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < a.shape[d]) break;
      index[d] = 0;
    }
  }
  return make(shape, std::move(out), a.dtype);
}

TensorInfo ReferenceTensorOps::cast(const TensorInfo& a, const std::string& dtype) {
  return make(a.shape, values(a), dtype);
}

TensorInfo ReferenceTensorOps::full(const std::vector<int64_t>& shape, double value,
                                    const TensorInfo& like) {
  return make(shape, std::vector<double>(numel(shape), value), like.dtype);
}

TensorInfo ReferenceTensorOps::clone(const TensorInfo& a) {
  TensorInfo copy = make(a.shape, values(a), a.dtype);
  copy.requires_grad = a.requires_grad;
  copy.is_parameter = a.is_parameter;
  return copy;
}

QuantizedRows ReferenceTensorOps::quantize_rows_int8(const TensorInfo& a, int max_level) {
  if (a.shape.size() != 2) throw std::invalid_argument("quantize_rows_int8 needs a 2-D tensor");
  if (max_level < 1 || max_level > 127)
    throw std::invalid_argument("quantize_rows_int8 needs max_level in [1, 127]");
  const std::vector<double>& v = values(a);
  int64_t rows = a.shape[0], cols = a.shape[1];
  std::vector<double> quantized(v.size()), scales(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double peak = 0;
    for (int64_t c = 0; c < cols; ++c) peak = std::max(peak, std::abs(v[r * cols + c]));
    scales[r] = std::max(peak / max_level, double(std::numeric_limits<float>::min()));
    for (int64_t c = 0; c < cols; ++c)
      quantized[r * cols + c] = std::nearbyint(v[r * cols + c] / scales[r]);
  }
  return {make(a.shape, std::move(quantized), "int8"), make({rows}, std::move(scales))};
}

QuantizedGroups ReferenceTensorOps::quantize_groups_int4(const TensorInfo& a, int64_t group_size,
                                                         Int4Layout layout) {
  if (a.shape.size() != 2 || group_size <= 0 || a.shape[1] % group_size != 0)
    throw std::invalid_argument("quantize_groups_int4 needs a 2-D tensor of whole groups");
  const std::vector<double>& v = values(a);
  int64_t rows = a.shape[0], cols = a.shape[1], groups = cols / group_size;
  std::vector<double> quantized(v.size()), scales_and_zeros(groups * rows * 2);
  // fxopt's kernel stores float16 parameters: q is computed from the rounded ones, so each
  // value is the nearest the stored parameters can give.
  auto stored = [&](double value) {
    return layout == Int4Layout::kAten ? value : double(half_to_float(float_to_half(float(value))));
  };
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      auto first = v.begin() + r * cols + g * group_size;
      auto [lowest, highest] = std::minmax_element(first, first + group_size);
      double low = stored(*lowest);
      double scale = stored(std::max((*highest - *lowest) / 15, 1e-6));
      for (int64_t c = g * group_size; c < (g + 1) * group_size; ++c)
        quantized[r * cols + c] =
            std::clamp(std::nearbyint((v[r * cols + c] - low) / scale), 0.0, 15.0);
      if (layout == Int4Layout::kAten) {
        scales_and_zeros[(g * rows + r) * 2] = scale;
        scales_and_zeros[(g * rows + r) * 2 + 1] = low + 8 * scale;
      } else {
        scales_and_zeros[(r * 2) * groups + g] = scale;
        scales_and_zeros[(r * 2 + 1) * groups + g] = low;
      }
    }
  std::vector<int64_t> shape = layout == Int4Layout::kAten ? std::vector<int64_t>{groups, rows, 2}
                                                           : std::vector<int64_t>{rows, 2, groups};
  return {make(a.shape, std::move(quantized), "int32"),
          make(shape, std::move(scales_and_zeros),
               layout == Int4Layout::kAten ? "float32" : "float16")};
}

}  // namespace fxopt
