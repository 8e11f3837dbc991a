// What the core knows about a GraphModule: its graph plus, as metadata, the submodules and
// tensors that passes read. Tensor data never enters the core; a TensorInfo carries a handle
// that the TensorOps implementation (torch in the bridge, a reference one in C++ tests) resolves.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/arg.h"
#include "ir/graph.h"
#include "ir/symbol.h"

namespace fxopt {

struct TensorInfo {
  std::vector<int64_t> shape;
  std::string dtype;   // torch spelling without the prefix: "float32", "float16", ...
  std::string device;  // "cpu", "cuda:0", ...
  bool requires_grad = false;
  bool is_parameter = false;  // nn.Parameter rather than a plain tensor / buffer
  uint64_t handle = 0;        // 0: no tensor (e.g. a None bias)

  bool present() const { return handle != 0; }
  int64_t dim(int64_t i) const { return shape.at(i < 0 ? shape.size() + i : i); }
  friend bool operator==(const TensorInfo&, const TensorInfo&) = default;
};

struct ModuleInfo {
  Symbol type;      // qualified class name, e.g. torch.nn.modules.linear.Linear
  Dict attributes;  // in_features, stride, eps, training, ... as plain values
  // Direct parameters and buffers by name; a registered-but-None entry has no handle.
  std::map<std::string, TensorInfo> tensors;

  const TensorInfo* tensor(const std::string& name) const;
  const Arg* attribute(std::string_view name) const { return attributes.find(name); }
};

struct Program {
  Graph graph;
  // Submodules the graph calls, by qualified path.
  std::map<std::string, ModuleInfo> modules;
  // Tensors read by get_attr nodes, by qualified path.
  std::map<std::string, TensorInfo> attributes;
  // Every attribute path of the root module (submodules, parameters, buffers), so new names
  // never collide with existing ones.
  std::set<std::string> taken_paths;
  // The dtype name ("float32", ...) of every opaque argument value that is a torch.dtype, by
  // opaque id: the one kind of opaque value passes need to read (casts, explicit dtypes).
  std::map<uint64_t, std::string> dtype_opaques;

  // The dtype an argument names, if it is a torch.dtype; empty otherwise.
  std::string_view dtype_of(const Arg& value) const;

  const ModuleInfo* module(Symbol path) const;
  // The tensor a get_attr of `path` reads: an attribute's, or a called submodule's parameter or
  // buffer; nullptr if neither is known.
  const TensorInfo* attribute(Symbol path) const;
  // `base`, or `base_1`, `base_2`, ... whichever is not taken yet; reserves the result.
  std::string unique_path(const std::string& base);
};

}  // namespace fxopt
