// Programs with Linears in each dialect, for the Linear pass tests: deterministic weights held by
// ReferenceTensorOps, registered the way the bridge registers them.
#pragma once

#include <cmath>
#include <string>

#include "graph_builder.h"
#include "reference_interpreter.h"
#include "rewrite/edit_log.h"

namespace fxopt::testing {

class LinearFixture {
 public:
  // A parameter of `shape` with values that differ per tensor and element.
  TensorInfo param(std::vector<int64_t> shape, const std::string& dtype = "float32") {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<double> values(n);
    ++seed_;
    for (int64_t i = 0; i < n; ++i) values[i] = std::sin(0.7 * double(i + 1) * seed_) / 2;
    TensorInfo t = ops.make(std::move(shape), std::move(values), dtype);
    t.is_parameter = true;
    t.requires_grad = true;
    return t;
  }

  // Registers an nn.Linear module at `path`.
  void linear_module(const std::string& path, int64_t in, int64_t out, bool bias,
                     const std::string& dtype = "float32") {
    ModuleInfo module{Symbol::intern("torch.nn.modules.linear.Linear"),
                      Dict{{{"in_features", in}, {"out_features", out}, {"training", false}}},
                      {}};
    module.tensors["weight"] = param({out, in}, dtype);
    module.tensors["bias"] = bias ? param({out}, dtype) : TensorInfo{};
    program.modules[path] = module;
    program.taken_paths.insert({path, path + ".weight", path + ".bias"});
  }

  // Registers a tensor for get_attr nodes at `path`.
  void attribute(const std::string& path, std::vector<int64_t> shape,
                 const std::string& dtype = "float32") {
    program.attributes[path] = param(std::move(shape), dtype);
    program.taken_paths.insert(path);
  }

  TensorInfo input(std::vector<int64_t> shape) { return param(std::move(shape)); }

  std::vector<TensorInfo> run(const std::map<std::string, TensorInfo>& inputs) {
    return ReferenceInterpreter(program, ops).run(inputs);
  }

  double max_diff(const std::vector<TensorInfo>& a, const std::vector<TensorInfo>& b) {
    if (a.size() != b.size()) return INFINITY;
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, max_abs_diff(ops, a[i], b[i]));
    return worst;
  }

  size_t count(NodeKind kind, const std::string& target) const {
    return program.graph.find(kind, Symbol::intern(target)).size();
  }

  ReferenceTensorOps ops;
  Program program;
  EditLog edits;
  GraphBuilder b{program.graph};

 private:
  int seed_ = 0;
};

}  // namespace fxopt::testing
