// Reference kernels for what QuantizeLinearsInt8 builds: the ATen ops of dynamic per-token int8
// quantization, the int8 matrix product, the packed-GEMM call and the weight-only int8 and int4 products (held as doubles, like every reference tensor).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/float16.h"
#include "kernels/int4_weight_mm.h"
#include "kernels/int8_weight_mm.h"
#include "reference_interpreter.h"

namespace fxopt::testing {
namespace {

const TensorInfo& tensor(const std::vector<Value>& args, size_t i) {
  return std::get<TensorInfo>(args.at(i));
}

TensorInfo map(ReferenceTensorOps& ops, const TensorInfo& x, double (*fn)(double)) {
  std::vector<double> v = ops.values(x);
  for (double& e : v) e = fn(e);
  return ops.make(x.shape, std::move(v), x.dtype);
}

// Elementwise a op b, where b is a number, a tensor of a's shape, or a tensor broadcast along
// rows ([m, 1]) or columns ([n]) of a 2-D a.
template <class Op>
Value elementwise(ReferenceInterpreter& in, const std::vector<Value>& args, Op op) {
  const TensorInfo& a = tensor(args, 0);
  const std::vector<double>& av = in.ops().values(a);
  std::vector<double> out(av.size());
  if (const double* scalar = std::get_if<double>(&args.at(1))) {
    for (size_t i = 0; i < av.size(); ++i) out[i] = op(av[i], *scalar);
  } else {
    const TensorInfo& b = tensor(args, 1);
    const std::vector<double>& bv = in.ops().values(b);
    int64_t cols = a.shape.back();
    for (size_t i = 0; i < av.size(); ++i) {
      size_t j = bv.size() == av.size()                   ? i
                 : b.shape.size() == 2 && b.shape[1] == 1 ? i / cols
                 : b.shape.size() == 1 && b.shape[0] == cols
                     ? i % cols
                     : throw std::invalid_argument("reference int8 kernels: unsupported broadcast");
      out[i] = op(av[i], bv[j]);
    }
  }
  return in.ops().make(a.shape, std::move(out), a.dtype);
}

// amax(x, [-1], keepdim=True) of a 2-D x.
Value row_max(ReferenceInterpreter& in, const Node&, const std::vector<Value>& args) {
  const TensorInfo& x = tensor(args, 0);
  if (x.shape.size() != 2) throw std::invalid_argument("reference amax: 2-D only");
  const std::vector<double>& v = in.ops().values(x);
  int64_t rows = x.shape[0], cols = x.shape[1];
  std::vector<double> out(rows);
  for (int64_t r = 0; r < rows; ++r)
    out[r] = *std::max_element(v.begin() + r * cols, v.begin() + (r + 1) * cols);
  return in.ops().make({rows, 1}, std::move(out), x.dtype);
}

Value int_mm(ReferenceInterpreter& in, const Node&, const std::vector<Value>& args) {
  const TensorInfo &a = tensor(args, 0), &b = tensor(args, 1);
  if (a.dtype != "int8" || b.dtype != "int8") throw std::invalid_argument("_int_mm: int8 only");
  int64_t n = a.shape.at(0), k = a.shape.at(1), m = b.shape.at(1);
  const auto &av = in.ops().values(a), &bv = in.ops().values(b);
  std::vector<double> out(n * m, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j)
      for (int64_t p = 0; p < k; ++p) out[i * m + j] += av[i * k + p] * bv[p * m + j];
  return in.ops().make({n, m}, std::move(out), "int32");
}

// aten._weight_int8pack_mm: a [M, K] times int8 b [N, K] transposed, column n scaled by s[n].
Value weight_int8pack_mm(ReferenceInterpreter& in, const Node&, const std::vector<Value>& args) {
  const TensorInfo &a = tensor(args, 0), &b = tensor(args, 1), &s = tensor(args, 2);
  if (b.dtype != "int8") throw std::invalid_argument("_weight_int8pack_mm: int8 weights only");
  int64_t m = a.shape.at(0), k = a.shape.at(1), n = b.shape.at(0);
  const auto &av = in.ops().values(a), &bv = in.ops().values(b), &sv = in.ops().values(s);
  std::vector<double> out(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t p = 0; p < k; ++p) out[i * n + j] += av[i * k + p] * bv[j * k + p];
      out[i * n + j] *= sv[j];
    }
  return in.ops().make({m, n}, std::move(out), a.dtype);
}

// fxopt's own kernel (kernels/int8_weight_mm.h), run for real on float copies of the values:
// the pass test then checks the graph and the kernel together.
Value own_int8_weight_linear(ReferenceInterpreter& in, const Node&,
                             const std::vector<Value>& args) {
  const TensorInfo &a = tensor(args, 0), &b = tensor(args, 1), &s = tensor(args, 2);
  int64_t k = a.shape.back(), n = b.shape.at(0), m = 1;
  for (size_t d = 0; d + 1 < a.shape.size(); ++d) m *= a.shape[d];
  const auto &av = in.ops().values(a), &bv = in.ops().values(b), &sv = in.ops().values(s);
  std::vector<float> x(av.begin(), av.end()), scale(sv.begin(), sv.end()), y(size_t(m * n));
  std::vector<int8_t> w(bv.begin(), bv.end());
  int8_weight_mm(x.data(), m, k, w.data(), scale.data(), n, y.data());
  std::vector<int64_t> shape = a.shape;
  shape.back() = n;
  return in.ops().make(shape, std::vector<double>(y.begin(), y.end()), "float32");
}

// fxopt's own int4 kernel (kernels/int4_weight_mm.h) on the reference layout of QuantizedGroups
// (one value per element, [N, K]), packed here and run for real like the int8 one.
Value own_int4_weight_linear(ReferenceInterpreter& in, const Node&,
                             const std::vector<Value>& args) {
  const TensorInfo &a = tensor(args, 0), &b = tensor(args, 1), &p = tensor(args, 2);
  int64_t k = a.shape.back(), n = b.shape.at(0), groups = p.shape.at(2), m = 1;
  for (size_t d = 0; d + 1 < a.shape.size(); ++d) m *= a.shape[d];
  const auto &av = in.ops().values(a), &bv = in.ops().values(b), &pv = in.ops().values(p);
  std::vector<float> x(av.begin(), av.end()), y(size_t(m * n));
  std::vector<uint16_t> params(pv.size());
  std::transform(pv.begin(), pv.end(), params.begin(),
                 [](double v) { return float_to_half(float(v)); });
  std::vector<uint8_t> q(bv.begin(), bv.end()), packed(size_t(n * k / 2));
  int4_pack_rows(q.data(), n, k, packed.data());
  int4_weight_mm(x.data(), m, k, packed.data(), params.data(), k / groups, n, y.data());
  std::vector<int64_t> shape = a.shape;
  shape.back() = n;
  return in.ops().make(shape, std::vector<double>(y.begin(), y.end()), "float32");
}

// aten._weight_int4pack_mm_for_cpu on the reference layout of QuantizedGroups (one int32 per
// element, [N, K]): a times ((q - 8) * scale + zero) transposed, per group of columns.
Value weight_int4pack_mm(ReferenceInterpreter& in, const Node& node,
                         const std::vector<Value>& args) {
  const TensorInfo &a = tensor(args, 0), &b = tensor(args, 1), &sz = tensor(args, 3);
  int64_t group = node.args().at(2).integer().value();
  int64_t m = a.shape.at(0), k = a.shape.at(1), n = b.shape.at(0);
  const auto &av = in.ops().values(a), &bv = in.ops().values(b), &szv = in.ops().values(sz);
  std::vector<double> out(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) {
        size_t at = size_t((p / group * n + j) * 2);
        out[i * n + j] += av[i * k + p] * ((bv[j * k + p] - 8) * szv[at] + szv[at + 1]);
      }
  return in.ops().make({m, n}, std::move(out), a.dtype);
}

// fxopt.runtime.dynamic_int8.dynamic_int8_linear (torch's packed int8 GEMMs): x [.., K] rounded
// to 256 levels between min(x, 0) and max(x, 0) (one scale and zero point for the tensor), times
// the int8 weight [N, K] scaled per row, plus the bias (None: none).
Value dynamic_int8_linear(ReferenceInterpreter& in, const Node&, const std::vector<Value>& args) {
  const TensorInfo &x = tensor(args, 0), &w = tensor(args, 1), &s = tensor(args, 2);
  const TensorInfo* bias = std::get_if<TensorInfo>(&args.at(3));
  const auto &xv = in.ops().values(x), &wv = in.ops().values(w), &sv = in.ops().values(s);
  int64_t k = x.shape.back(), n = w.shape.at(0), rows = int64_t(xv.size()) / k;
  double low = std::min(0.0, *std::min_element(xv.begin(), xv.end()));
  double high = std::max(0.0, *std::max_element(xv.begin(), xv.end()));
  double scale = high > low ? (high - low) / 255 : 1.0;
  double zero = std::nearbyint(-low / scale);
  std::vector<double> out(rows * n, 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        double q = std::clamp(std::nearbyint(xv[i * k + p] / scale) + zero, 0.0, 255.0);
        sum += (q - zero) * scale * wv[j * k + p];
      }
      out[i * n + j] = sum * sv[j] + (bias ? in.ops().values(*bias)[j] : 0.0);
    }
  std::vector<int64_t> shape = x.shape;
  shape.back() = n;
  return in.ops().make(shape, std::move(out), x.dtype);
}

}  // namespace

void add_int8_kernels(ReferenceInterpreter& interpreter) {
  using Kernel = ReferenceInterpreter::Kernel;
  auto add = [&](const char* target, Kernel kernel) {
    interpreter.add_kernel(NodeKind::CallFunction, target, std::move(kernel));
  };
  add("aten.abs.default", [](ReferenceInterpreter& in, const Node&, const std::vector<Value>& a) {
    return Value(map(in.ops(), tensor(a, 0), [](double x) { return std::abs(x); }));
  });
  add("aten.round.default", [](ReferenceInterpreter& in, const Node&, const std::vector<Value>& a) {
    return Value(map(in.ops(), tensor(a, 0), [](double x) { return std::nearbyint(x); }));
  });
  add("aten._to_copy.default",
      [](ReferenceInterpreter& in, const Node&, const std::vector<Value>& a) {
        return Value(in.ops().cast(tensor(a, 0), "int8"));
      });
  add("aten.amax.default", row_max);
  add("aten._int_mm.default", int_mm);
  add("fxopt.runtime.dynamic_int8.dynamic_int8_linear", dynamic_int8_linear);
  add("aten._weight_int8pack_mm.default", weight_int8pack_mm);
  add("aten._weight_int4pack_mm_for_cpu.default", weight_int4pack_mm);
  add("fxopt.runtime.int8_weight_linear.int8_weight_linear", own_int8_weight_linear);
  add("fxopt.runtime.int4_weight_linear.int4_weight_linear", own_int4_weight_linear);
  add("aten.clamp_min.default",
      [](ReferenceInterpreter& in, const Node&, const std::vector<Value>& a) {
        return elementwise(in, a, [](double x, double y) { return std::max(x, y); });
      });
}

}  // namespace fxopt::testing
