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

using Value = std::variant<TensorInfo, double>;

class ReferenceInterpreter {
 public:
  using Kernel = std::function<Value(ReferenceInterpreter&, const Node&, const std::vector<Value>&)>;

  ReferenceInterpreter(const Program& program, ReferenceTensorOps& ops);
  // Values of the output node's (flattened) arguments.
  std::vector<TensorInfo> run(const std::map<std::string, TensorInfo>& inputs);

  ReferenceTensorOps& ops() { return ops_; }
  const Program& program() const { return program_; }

 private:
  Value evaluate(const Arg& arg, const std::map<const Node*, Value>& env);

  const Program& program_;
  ReferenceTensorOps& ops_;
  std::map<std::pair<NodeKind, std::string>, Kernel> kernels_;
};

// Largest absolute elementwise difference; infinity when the shapes differ.
double max_abs_diff(ReferenceTensorOps& ops, const TensorInfo& a, const TensorInfo& b);

}  // namespace fxopt::testing
