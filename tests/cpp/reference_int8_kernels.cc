// Reference kernels for what QuantizeLinearsInt8 builds (the per-token call and the packed-GEMM
// call) and the weight-only int8 and int4 products (held as doubles, like every reference
// tensor).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/float16.h"
#include "kernels/int4_weight_mm.h"
#include "kernels/int8_weight_mm.h"
#include "kernels/per_token_int8.h"
#include "reference_interpreter.h"

namespace fxopt::testing {
namespace {

const TensorInfo& tensor(const std::vector<Value>& args, size_t i) {
  return std::get<TensorInfo>(args.at(i));
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

// fxopt.runtime.per_token_int8.per_token_int8_linear: fxopt's quantize and dequantize kernels
// (kernels/per_token_int8.h) run for real on float32 copies, around an exact integer product
// (aten._int_mm's part); values [K, N]; the activation named by a fifth operand, outlier
// channels (a list) and their float weight [channels, N] by a sixth and seventh.
Value per_token_int8_linear(ReferenceInterpreter& in, const Node& node,
                            const std::vector<Value>& args) {
  const TensorInfo &x = tensor(args, 0), &w = tensor(args, 1), &s = tensor(args, 2);
  const TensorInfo* bias = std::get_if<TensorInfo>(&args.at(3));
  const auto &xv = in.ops().values(x), &wv = in.ops().values(w), &sv = in.ops().values(s);
  int64_t k = x.shape.back(), n = w.shape.at(1), rows = int64_t(xv.size()) / k;
  std::vector<float> xf(xv.begin(), xv.end()), token_scales(static_cast<size_t>(rows));
  std::vector<float> y(static_cast<size_t>(rows * n));
  std::vector<float> col_scales(sv.begin(), sv.end()), b;
  if (bias) b.assign(in.ops().values(*bias).begin(), in.ops().values(*bias).end());
  std::vector<int64_t> channels;
  std::vector<float> outlier_weight;
  if (node.args().size() > 6) {
    for (const Arg& c : *node.args()[5].sequence()) channels.push_back(c.as<int64_t>());
    const auto& ov = in.ops().values(tensor(args, 6));
    outlier_weight.assign(ov.begin(), ov.end());
  }
  std::vector<int8_t> q(xf.size());
  quantize_rows_int8(xf.data(), RowDtype::Float32, rows, k, q.data(), token_scales.data(), 1, 127,
                     channels);
  std::vector<int32_t> acc(size_t(rows * n), 0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        acc[i * n + j] += int32_t(q[i * k + p]) * int32_t(wv[p * n + j]);
  Activation activation = node.args().size() > 4
                              ? activation_named(node.args()[4].as<std::string>())
                              : Activation::None;
  OutlierChannels outliers{xf.data(), RowDtype::Float32, k, channels, outlier_weight.data()};
  dequantize_rows_int32(acc.data(), rows, n, token_scales.data(), col_scales.data(),
                        bias ? b.data() : nullptr, y.data(), RowDtype::Float32, 1, activation,
                        &outliers);
  std::vector<int64_t> shape = x.shape;
  shape.back() = n;
  return in.ops().make(shape, std::vector<double>(y.begin(), y.end()), x.dtype);
}

// fxopt.runtime.dynamic_int8.dynamic_int8_linear (torch's packed int8 GEMMs): x [.., K] rounded
// to 256 levels between min(x, 0) and max(x, 0) (one scale and zero point for the tensor), times
// the int8 weight [N, K] scaled per row, plus the bias (None: none) and the outlier channels'
// float product.
Value dynamic_int8_linear(ReferenceInterpreter& in, const Node& node,
                          const std::vector<Value>& args) {
  const TensorInfo &x = tensor(args, 0), &w = tensor(args, 1), &s = tensor(args, 2);
  const TensorInfo* bias = std::get_if<TensorInfo>(&args.at(3));
  const auto &wv = in.ops().values(w), &sv = in.ops().values(s);
  std::vector<double> xv = in.ops().values(x);
  int64_t k = x.shape.back(), n = w.shape.at(0), rows = int64_t(xv.size()) / k;
  // Outlier channels (a sixth and seventh operand): out of the quantized x, their float product
  // with the outlier weight [channels, N] added.
  std::vector<int64_t> channels;
  std::vector<double> added(size_t(rows * n), 0.0);
  if (node.args().size() > 6) {
    for (const Arg& c : *node.args()[5].sequence()) channels.push_back(c.as<int64_t>());
    const auto& ov = in.ops().values(tensor(args, 6));
    for (int64_t i = 0; i < rows; ++i)
      for (size_t c = 0; c < channels.size(); ++c) {
        double v = xv[i * k + channels[c]];
        for (int64_t j = 0; j < n; ++j) added[i * n + j] += v * ov[c * n + j];
      }
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c : channels) xv[i * k + c] = 0.0;
  }
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
      out[i * n + j] = sum * sv[j] + (bias ? in.ops().values(*bias)[j] : 0.0) + added[i * n + j];
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
  add("fxopt.runtime.per_token_int8.per_token_int8_linear", per_token_int8_linear);
  add("fxopt.runtime.dynamic_int8.dynamic_int8_linear", dynamic_int8_linear);
  add("aten._weight_int8pack_mm.default", weight_int8pack_mm);
  add("aten._weight_int4pack_mm_for_cpu.default", weight_int4pack_mm);
  add("fxopt.runtime.int8_weight_linear.int8_weight_linear", own_int8_weight_linear);
  add("fxopt.runtime.int4_weight_linear.int4_weight_linear", own_int4_weight_linear);
}

}  // namespace fxopt::testing
