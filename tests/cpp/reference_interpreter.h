// Runs a core graph on ReferenceTensorOps so C++ tests can compare a graph's outputs before and
// after a pass. Knows only the ops the tests use; an unknown op fails the test loudly.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "ir/program.h"
#include "tensor/reference_tensor_ops.h"

namespace fxopt::testing {

// A tensor, a number, or (monostate) anything else: None, shapes, pad widths, which kernels
// read from the node itself.
using Value = std::variant<TensorInfo, double, std::monostate>;

class ReferenceInterpreter {
 public:
  using Kernel =
      std::function<Value(ReferenceInterpreter&, const Node&, const std::vector<Value>&)>;

  ReferenceInterpreter(const Program& program, ReferenceTensorOps& ops);
  // Values of the output node's (flattened) arguments.
  std::vector<TensorInfo> run(const std::map<std::string, TensorInfo>& inputs);

  ReferenceTensorOps& ops() { return ops_; }
  // The value of one call, its operands' values taken from `env`.
  Value call(const Node& node, const std::map<const Node*, Value>& env);
  // Kernels of call_module nodes are found by the module's type.
  void add_kernel(NodeKind kind, const std::string& target, Kernel kernel) {
    kernels_[{kind, target}] = std::move(kernel);
  }
  const Program& program() const { return program_; }

 private:
  Value evaluate(const Arg& arg, const std::map<const Node*, Value>& env);
  TensorInfo read_attribute(const std::string& path) const;

  const Program& program_;
  ReferenceTensorOps& ops_;
  std::map<std::pair<NodeKind, std::string>, Kernel> kernels_;
};

// Kernels for Linear in every dialect, last-dimension slices and constant pads
// (reference_linear_kernels.cc).
void add_linear_kernels(ReferenceInterpreter& interpreter);
// Kernels for (transposed) convolution and batch norm in the module and ATen dialects, torch's
// conv2d, fxopt's oneDNN convolution, and getitem 0 (reference_conv_kernels.cc).
void add_conv_kernels(ReferenceInterpreter& interpreter);
// Kernels for relu / gelu / silu in every dialect, dtype casts, 2-D matmul and oneDNN's fused
// linear (reference_activation_kernels.cc).
void add_activation_kernels(ReferenceInterpreter& interpreter);
// Kernels for the ATen ops of per-token int8 Linears but mul / div / add, which the interpreter
// has (reference_int8_kernels.cc).
void add_int8_kernels(ReferenceInterpreter& interpreter);

// x W^T + b over the last dimension of x (b may be nullptr); reference_linear_kernels.cc.
TensorInfo linear(ReferenceTensorOps& ops, const TensorInfo& x, const TensorInfo& w,
                  const TensorInfo* b);

// oneDNN's post-op `attr` (with its scalars and algorithm) applied to y: none, relu, swish,
// gelu, hardtanh; reference_activation_kernels.cc.
TensorInfo onednn_post_op(ReferenceTensorOps& ops, const TensorInfo& y, const Arg& attr,
                          const Arg& scalars, const Arg& algorithm);

// Largest absolute elementwise difference; infinity when the shapes differ.
double max_abs_diff(ReferenceTensorOps& ops, const TensorInfo& a, const TensorInfo& b);

}  // namespace fxopt::testing
