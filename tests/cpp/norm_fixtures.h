// Programs with convolutions and batch norms in each dialect, for the batch-norm folding tests:
// modules registered the way the bridge registers them (attributes and tensors), and helpers
// to compare a graph's structure before and after a reverse.
#pragma once

#include <string>
#include <vector>

#include "linear_fixtures.h"

namespace fxopt::testing {

class NormFixture : public LinearFixture {
 public:
  // A positive tensor (running variances).
  TensorInfo positive(std::vector<int64_t> shape) {
    TensorInfo t = param(std::move(shape));
    std::vector<double> v = ops.values(t);
    for (double& x : v) x = 0.5 + x * x;
    TensorInfo out = ops.make(t.shape, std::move(v), t.dtype);
    out.is_parameter = false;  // a buffer
    return out;
  }

  // nn.Conv{dims}d or nn.ConvTranspose{dims}d at `path`, kernel 3, stride 1, padding 1.
  void conv_module(const std::string& path, int dims, int64_t in, int64_t out, int64_t groups,
                   bool bias, bool transposed = false) {
    std::string type = std::string(transposed ? "ConvTranspose" : "Conv") + char('0' + dims) + "d";
    Tuple ones{std::vector<Arg>(dims, Arg(1))}, zeros{std::vector<Arg>(dims, Arg(0))};
    ModuleInfo module{Symbol::intern("torch.nn.modules.conv." + type),
                      Dict{{{"in_channels", in},
                            {"out_channels", out},
                            {"stride", ones},
                            {"padding", ones},
                            {"dilation", ones},
                            {"output_padding", zeros},
                            {"groups", groups},
                            {"training", false}}},
                      {}};
    std::vector<int64_t> shape = transposed ? std::vector<int64_t>{in, out / groups}
                                            : std::vector<int64_t>{out, in / groups};
    shape.insert(shape.end(), dims, 3);
    module.tensors["weight"] = param(shape);
    module.tensors["bias"] = bias ? param({out}) : TensorInfo{};
    program.modules[path] = module;
    program.taken_paths.insert({path, path + ".weight", path + ".bias"});
  }

  // nn.BatchNorm{dims}d at `path`.
  void bn_module(const std::string& path, int dims, int64_t features, bool affine = true,
                 bool training = false, bool track_running_stats = true) {
    ModuleInfo module{Symbol::intern("torch.nn.modules.batchnorm.BatchNorm" +
                                     std::string(1, char('0' + dims)) + "d"),
                      Dict{{{"num_features", features},
                            {"eps", 1e-5},
                            {"momentum", 0.1},
                            {"affine", affine},
                            {"track_running_stats", track_running_stats},
                            {"training", training}}},
                      {}};
    module.tensors["weight"] = affine ? param({features}) : TensorInfo{};
    module.tensors["bias"] = affine ? param({features}) : TensorInfo{};
    module.tensors["running_mean"] = track_running_stats ? param({features}) : TensorInfo{};
    module.tensors["running_var"] = track_running_stats ? positive({features}) : TensorInfo{};
    program.modules[path] = module;
    program.taken_paths.insert(path);
  }

  // get_attr nodes for a batch norm's statistics registered under `path`.
  struct BnReads {
    Node *weight = nullptr, *bias = nullptr, *mean, *var;
  };
  BnReads bn_attributes(const std::string& path, int64_t features, bool affine = true) {
    if (affine) {
      attribute(path + ".weight", {features});
      attribute(path + ".bias", {features});
    }
    attribute(path + ".running_mean", {features});
    program.attributes[path + ".running_var"] = positive({features});
    program.taken_paths.insert(path + ".running_var");
    std::string name = path;
    for (char& c : name)
      if (c == '.') c = '_';
    BnReads reads;
    if (affine) {
      reads.weight = b.attr(name + "_weight", path + ".weight");
      reads.bias = b.attr(name + "_bias", path + ".bias");
    }
    reads.mean = b.attr(name + "_running_mean", path + ".running_mean");
    reads.var = b.attr(name + "_running_var", path + ".running_var");
    return reads;
  }

  // `node` with float32 CPU value info of `shape` (what ShapeProp would have recorded).
  Node* shaped(Node* node, std::vector<int64_t> shape) {
    program.graph.set_value_info(node, "float32", std::move(shape), "cpu");
    return node;
  }

  // Every live node as "name=kind:target(args)", to compare graphs before and after a reverse.
  std::vector<std::string> structure() const {
    std::vector<std::string> out;
    for (const Node* n : program.graph) out.push_back(n->describe());
    return out;
  }

  size_t modules_of_type(const std::string& type) const {
    size_t n = 0;
    for (const auto& [path, m] : program.modules) n += m.type.str() == type;
    return n;
  }
};

}  // namespace fxopt::testing
