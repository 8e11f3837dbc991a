// Reference kernels for the activation and precision tests: relu, gelu (exact and tanh), silu,
// tanh and powers in every dialect, dtype casts (which keep the values: the reference tensors do not round),
// 2-D matrix products, and oneDNN's fused linear as a Linear followed by its activation.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "reference_interpreter.h"

namespace fxopt::testing {
namespace {

using Fn = double (*)(double);

double relu(double x) { return x > 0 ? x : 0; }
double gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double silu(double x) { return x / (1 + std::exp(-x)); }

TensorInfo apply(ReferenceTensorOps& ops, const TensorInfo& x, Fn fn) {
  std::vector<double> v = ops.values(x);
  for (double& e : v) e = fn(e);
  return ops.make(x.shape, std::move(v), x.dtype);
}

ReferenceInterpreter::Kernel elementwise(Fn fn) {
  return [fn](ReferenceInterpreter& in, const Node&, const std::vector<Value>& args) -> Value {
    return apply(in.ops(), std::get<TensorInfo>(args.at(0)), fn);
  };
}

// GELU reads its approximation from the module or the call.
Value gelu_kernel(ReferenceInterpreter& in, const Node& node, const std::vector<Value>& args) {
  const Arg* approximate = node.kind() == NodeKind::CallModule
                               ? in.program().module(node.target())->attribute("approximate")
                               : node.input(1, "approximate");
  bool tanh = approximate && *approximate == Arg("tanh");
  return apply(in.ops(), std::get<TensorInfo>(args.at(0)), tanh ? gelu_tanh : gelu);
}

Value matmul(ReferenceInterpreter& in, const Node&, const std::vector<Value>& args) {
  const TensorInfo &a = std::get<TensorInfo>(args.at(0)), &b = std::get<TensorInfo>(args.at(1));
  if (a.shape.size() != 2 || b.shape.size() != 2 || a.dim(1) != b.dim(0))
    throw std::invalid_argument("reference matmul: 2-D operands only");
  int64_t n = a.dim(0), k = a.dim(1), m = b.dim(1);
  const auto &av = in.ops().values(a), &bv = in.ops().values(b);
  std::vector<double> out(n * m, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j)
      for (int64_t p = 0; p < k; ++p) out[i * m + j] += av[i * k + p] * bv[p * m + j];
  return in.ops().make({n, m}, std::move(out), a.dtype);
}

// fxopt.runtime.onednn_linear.linear_pointwise(x, w, b, attr, scalars, algorithm): linear, then the post-op.
Value onednn_linear(ReferenceInterpreter& in, const Node& node, const std::vector<Value>& args) {
  const TensorInfo* bias = std::get_if<TensorInfo>(&args.at(2));
  TensorInfo y =
      linear(in.ops(), std::get<TensorInfo>(args.at(0)), std::get<TensorInfo>(args.at(1)), bias);
  return onednn_post_op(in.ops(), y, node.args().at(3), node.args().at(4), node.args().at(5));
}

// A cast keeps the values; `type_as` takes the other operand's dtype.
Value cast(ReferenceInterpreter& in, const Node&, const std::vector<Value>& args) {
  const TensorInfo& x = std::get<TensorInfo>(args.at(0));
  const TensorInfo* like = std::get_if<TensorInfo>(&args.at(1));
  return in.ops().cast(x, like ? like->dtype : x.dtype);
}

}  // namespace

TensorInfo onednn_post_op(ReferenceTensorOps& ops, const TensorInfo& y, const Arg& attr,
                          const Arg& scalars, const Arg& algorithm) {
  const std::string& name = attr.as<std::string>();
  if (name == "none") return y;
  if (name == "relu") return apply(ops, y, relu);
  if (name == "swish") return apply(ops, y, silu);
  if (name == "gelu") return apply(ops, y, algorithm == Arg("tanh") ? gelu_tanh : gelu);
  if (name == "hardtanh") {
    const std::vector<Arg>& bounds = *scalars.sequence();
    double lo = *bounds.at(0).number(), hi = *bounds.at(1).number();
    std::vector<double> v = ops.values(y);
    for (double& e : v) e = std::clamp(e, lo, hi);
    return ops.make(y.shape, std::move(v), y.dtype);
  }
  throw std::invalid_argument("reference oneDNN post-op: no " + name);
}

void add_activation_kernels(ReferenceInterpreter& interpreter) {
  const std::string module = "torch.nn.modules.activation.";
  struct Entry {
    const char* module;
    std::vector<const char*> functions, methods;
    ReferenceInterpreter::Kernel kernel;
  };
  for (const Entry& e : std::vector<Entry>{
           {"ReLU",
            {"torch.relu", "torch.nn.functional.relu", "aten.relu.default"},
            {"relu"},
            elementwise(relu)},
           {"GELU", {"torch._C._nn.gelu", "aten.gelu.default"}, {}, gelu_kernel},
           {"SiLU", {"torch.nn.functional.silu", "aten.silu.default"}, {}, elementwise(silu)},
           {"Tanh", {"torch.tanh", "aten.tanh.default"}, {"tanh"}, elementwise([](double x) {
              return std::tanh(x);
            })},
       }) {
    interpreter.add_kernel(NodeKind::CallModule, module + e.module, e.kernel);
    for (const char* f : e.functions) interpreter.add_kernel(NodeKind::CallFunction, f, e.kernel);
    for (const char* m : e.methods) interpreter.add_kernel(NodeKind::CallMethod, m, e.kernel);
  }
  // x ** c for a number c (operand 1).
  ReferenceInterpreter::Kernel power = [](ReferenceInterpreter& in, const Node&,
                                          const std::vector<Value>& args) -> Value {
    const TensorInfo& x = std::get<TensorInfo>(args.at(0));
    std::vector<double> v = in.ops().values(x);
    for (double& e : v) e = std::pow(e, std::get<double>(args.at(1)));
    return in.ops().make(x.shape, std::move(v), x.dtype);
  };
  for (const char* f : {"_operator.pow", "torch.pow", "aten.pow.Tensor_Scalar"})
    interpreter.add_kernel(NodeKind::CallFunction, f, power);
  interpreter.add_kernel(NodeKind::CallMethod, "pow", power);
  for (const char* f : {"_operator.matmul", "aten.matmul.default"})
    interpreter.add_kernel(NodeKind::CallFunction, f, matmul);
  interpreter.add_kernel(NodeKind::CallMethod, "matmul", matmul);
  interpreter.add_kernel(NodeKind::CallFunction, "fxopt.runtime.onednn_linear.linear_pointwise",
                         onednn_linear);
  interpreter.add_kernel(
      NodeKind::CallFunction, "torch.nn.functional.hardtanh",
      [](ReferenceInterpreter& in, const Node& node, const std::vector<Value>& args) -> Value {
        return onednn_post_op(in.ops(), std::get<TensorInfo>(args.at(0)), Arg("hardtanh"),
                              List{{*node.input(1, "min_val"), *node.input(2, "max_val")}}, None{});
      });
  for (const char* f : {"aten.to.dtype", "aten.type_as.default"})
    interpreter.add_kernel(NodeKind::CallFunction, f, cast);
  for (const char* m : {"to", "type_as"}) interpreter.add_kernel(NodeKind::CallMethod, m, cast);
}

}  // namespace fxopt::testing
