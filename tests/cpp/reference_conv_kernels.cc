// Reference kernels for the batch-norm folding tests: (transposed) convolution and batch norm in
// the module and ATen dialects, and getitem on the tuple-returning batch norms (whose kernel
// returns the normalized tensor alone, so getitem 0 passes it through).
#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "reference_interpreter.h"

namespace fxopt::testing {
namespace {

using Shape = std::vector<int64_t>;

const TensorInfo& tensor(const std::vector<Value>& args, size_t i) {
  return std::get<TensorInfo>(args.at(i));
}

const TensorInfo* optional_tensor(const std::vector<Value>& args, size_t i) {
  return i < args.size() ? std::get_if<TensorInfo>(&args[i]) : nullptr;
}

// Calls fn(index) for every index of `shape`, in row-major order.
template <class F>
void for_each_index(const Shape& shape, F&& fn) {
  Shape index(shape.size(), 0);
  for (int64_t d : shape)
    if (d == 0) return;
  while (true) {
    fn(index);
    size_t d = shape.size();
    while (d > 0 && ++index[d - 1] == shape[d - 1]) index[--d] = 0;
    if (d == 0) return;
  }
}

int64_t flat(const Shape& shape, const Shape& index) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + index[d];
  return f;
}

struct ConvConfig {
  Shape stride, padding, dilation, output_padding;
  int64_t groups = 1;
  bool transposed = false;
};

// An int or int sequence operand as one value per spatial dimension.
Shape per_dim(const Arg* value, size_t dims, int64_t fallback) {
  if (!value) return Shape(dims, fallback);
  if (auto i = value->integer()) return Shape(dims, *i);
  Shape out;
  for (const Arg& item : *value->sequence()) out.push_back(*item.integer());
  return out.size() == 1 ? Shape(dims, out[0]) : out;
}

ConvConfig module_config(const ModuleInfo& module, size_t dims) {
  ConvConfig c;
  c.stride = per_dim(module.attribute("stride"), dims, 1);
  c.padding = per_dim(module.attribute("padding"), dims, 0);
  c.dilation = per_dim(module.attribute("dilation"), dims, 1);
  c.output_padding = per_dim(module.attribute("output_padding"), dims, 0);
  if (const Arg* g = module.attribute("groups")) c.groups = *g->integer();
  c.transposed = module.type.str().find("Transpose") != std::string::npos;
  return c;
}

// Operand positions: aten.convNd (stride 3, padding 4, dilation 5, groups 6),
// aten.conv_transposeNd.input (stride 3, padding 4, output_padding 5, groups 6, dilation 7),
// aten.convolution (stride 3, padding 4, dilation 5, transposed 6, output_padding 7, groups 8).
ConvConfig function_config(const Node& node, size_t dims) {
  const std::string& target = node.target().str();
  bool convolution = target == "aten.convolution.default";
  ConvConfig c;
  c.transposed =
      convolution ? node.args().at(6) == Arg(true) : target.find("transpose") != std::string::npos;
  c.stride = per_dim(node.input(3, "stride"), dims, 1);
  c.padding = per_dim(node.input(4, "padding"), dims, 0);
  bool transposed_form = c.transposed && !convolution;
  c.dilation = per_dim(node.input(transposed_form ? 7 : 5, "dilation"), dims, 1);
  c.output_padding = per_dim(node.input(transposed_form ? 5 : 7, "output_padding"), dims, 0);
  if (const Arg* g = node.input(convolution ? 8 : 6, "groups")) c.groups = *g->integer();
  return c;
}

// y[n, o, q] = b[o] + sum x[n, i, p] * w[...], with q = p * stride - padding + k * dilation for
// a transposed convolution and p = q * stride - padding + k * dilation otherwise.
TensorInfo conv(ReferenceTensorOps& ops, const TensorInfo& x, const TensorInfo& w,
                const TensorInfo* b, const ConvConfig& c) {
  size_t dims = x.shape.size() - 2;
  Shape kernel(w.shape.begin() + 2, w.shape.end());
  int64_t in_per_group = c.transposed ? w.dim(0) / c.groups : w.dim(1);
  int64_t out_per_group = c.transposed ? w.dim(1) : w.dim(0) / c.groups;
  Shape out_shape = {x.dim(0), out_per_group * c.groups};
  for (size_t d = 0; d < dims; ++d) {
    int64_t span = c.dilation[d] * (kernel[d] - 1);
    out_shape.push_back(c.transposed
                            ? (x.dim(2 + d) - 1) * c.stride[d] - 2 * c.padding[d] + span +
                                  c.output_padding[d] + 1
                            : (x.dim(2 + d) + 2 * c.padding[d] - span - 1) / c.stride[d] + 1);
  }
  int64_t size = 1;
  for (int64_t d : out_shape) size *= d;
  std::vector<double> y(size, 0.0);
  const auto &xv = ops.values(x), &wv = ops.values(w);
  // The outer index runs over the output (convolution) or the input (transposed convolution);
  // `other` is the position it reads from (convolution) or adds to (transposed).
  Shape in_iter = {x.dim(0), x.dim(1)};
  in_iter.insert(in_iter.end(), x.shape.begin() + 2, x.shape.end());
  const Shape& outer = c.transposed ? in_iter : out_shape;
  const Shape& other_shape = c.transposed ? out_shape : x.shape;
  int64_t per_group = c.transposed ? in_per_group : out_per_group;
  int64_t partners = c.transposed ? out_per_group : in_per_group;
  for_each_index(outer, [&](const Shape& at) {
    int64_t channel = at[1], group = channel / per_group;
    for_each_index(kernel, [&](const Shape& k) {
      Shape other = {at[0], 0};
      for (size_t d = 0; d < dims; ++d) {
        int64_t pos = at[2 + d] * c.stride[d] - c.padding[d] + k[d] * c.dilation[d];
        if (pos < 0 || pos >= other_shape[2 + d]) return;
        other.push_back(pos);
      }
      for (int64_t j = 0; j < partners; ++j) {
        other[1] = group * partners + j;
        Shape widx = {channel, j};  // [out, in / groups, k...] or [in, out / groups, k...]
        widx.insert(widx.end(), k.begin(), k.end());
        double weight = wv[flat(w.shape, widx)];
        if (c.transposed)
          y[flat(out_shape, other)] += xv[flat(x.shape, at)] * weight;
        else
          y[flat(out_shape, at)] += xv[flat(x.shape, other)] * weight;
      }
    });
  });
  if (b)
    for_each_index(out_shape,
                   [&](const Shape& at) { y[flat(out_shape, at)] += ops.values(*b)[at[1]]; });
  return ops.make(out_shape, std::move(y), x.dtype);
}

// (x - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c], c along dim 1.
// y + residual, elementwise (residual null: y).
TensorInfo plus_residual(ReferenceTensorOps& ops, const TensorInfo& y, const TensorInfo* residual) {
  if (!residual) return y;
  std::vector<double> sum = ops.values(y);
  const std::vector<double>& r = ops.values(*residual);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += r.at(i);
  return ops.make(y.shape, std::move(sum), y.dtype);
}

// y clamped to [lower, upper], bounds given as the fxopt kernels' calls give them (None:
// unbounded).
TensorInfo clamped(ReferenceTensorOps& ops, const TensorInfo& y, const Arg& lower_bound,
                   const Arg& upper_bound) {
  std::optional<double> lower = lower_bound.number(), upper = upper_bound.number();
  std::vector<double> values = ops.values(y);
  for (double& v : values) {
    if (lower) v = std::max(v, *lower);
    if (upper) v = std::min(v, *upper);
  }
  return ops.make(y.shape, std::move(values), y.dtype);
}

TensorInfo batch_norm(ReferenceTensorOps& ops, const TensorInfo& x, const TensorInfo& mean,
                      const TensorInfo& var, const TensorInfo* w, const TensorInfo* b, double eps) {
  std::vector<double> y = ops.values(x);
  for_each_index(x.shape, [&](const Shape& at) {
    int64_t c = at[1];
    double& v = y[flat(x.shape, at)];
    v = (v - ops.values(mean)[c]) / std::sqrt(ops.values(var)[c] + eps);
    if (w) v *= ops.values(*w)[c];
    if (b) v += ops.values(*b)[c];
  });
  return ops.make(x.shape, std::move(y), x.dtype);
}

const TensorInfo* present(const TensorInfo* t) { return t && t->present() ? t : nullptr; }

}  // namespace

void add_conv_kernels(ReferenceInterpreter& interpreter) {
  for (const char* type :
       {"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"})
    interpreter.add_kernel(
        NodeKind::CallModule, std::string("torch.nn.modules.conv.") + type,
        [](ReferenceInterpreter& in, const Node& node, const std::vector<Value>& args) -> Value {
          const ModuleInfo& m = *in.program().module(node.target());
          const TensorInfo& x = tensor(args, 0);
          return conv(in.ops(), x, *m.tensor("weight"), present(m.tensor("bias")),
                      module_config(m, x.shape.size() - 2));
        });
  auto functional = [](ReferenceInterpreter& in, const Node& node,
                       const std::vector<Value>& args) -> Value {
    const TensorInfo& x = tensor(args, 0);
    return conv(in.ops(), x, tensor(args, 1), optional_tensor(args, 2),
                function_config(node, x.shape.size() - 2));
  };
  for (const char* target :
       {"torch.conv2d", "aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default",
        "aten.conv_transpose1d.input", "aten.conv_transpose2d.input", "aten.conv_transpose3d.input",
        "aten.convolution.default"})
    interpreter.add_kernel(NodeKind::CallFunction, target, functional);

  // fxopt.runtime.onednn_conv.conv_pointwise(x, w, b, stride, padding, dilation, groups,
  // residual, attr, scalars, algorithm).
  interpreter.add_kernel(
      NodeKind::CallFunction, "fxopt.runtime.onednn_conv.conv_pointwise",
      [](ReferenceInterpreter& in, const Node& node, const std::vector<Value>& args) -> Value {
        const TensorInfo& x = tensor(args, 0);
        size_t dims = x.shape.size() - 2;
        ConvConfig c{per_dim(&node.args().at(3), dims, 1), per_dim(&node.args().at(4), dims, 0),
                     per_dim(&node.args().at(5), dims, 1), Shape(dims, 0),
                     *node.args().at(6).integer()};
        TensorInfo y =
            plus_residual(in.ops(), conv(in.ops(), x, tensor(args, 1), optional_tensor(args, 2), c),
                          optional_tensor(args, 7));
        return onednn_post_op(in.ops(), y, node.args().at(8), node.args().at(9),
                              node.args().at(10));
      });
  // fxopt.runtime.depthwise_conv.depthwise_conv2d(x, w, b, stride, [top, bottom, left, right],
  // lower, upper): the image padded with zeros on each side, the depthwise convolution, the
  // clamp (None: unbounded).
  interpreter.add_kernel(
      NodeKind::CallFunction, "fxopt.runtime.depthwise_conv.depthwise_conv2d",
      [](ReferenceInterpreter& in, const Node& node, const std::vector<Value>& args) -> Value {
        auto& ops = in.ops();
        const TensorInfo& x = tensor(args, 0);
        Shape sides = per_dim(&node.args().at(4), 4, 0);
        Shape padded = {x.dim(0), x.dim(1), x.dim(2) + sides[0] + sides[1],
                        x.dim(3) + sides[2] + sides[3]};
        std::vector<double> image(size_t(padded[0] * padded[1] * padded[2] * padded[3]), 0.0);
        for_each_index(x.shape, [&](const Shape& at) {
          image[flat(padded, {at[0], at[1], at[2] + sides[0], at[3] + sides[2]})] =
              ops.values(x)[flat(x.shape, at)];
        });
        ConvConfig c{per_dim(&node.args().at(3), 2, 1), Shape(2, 0), Shape(2, 1), Shape(2, 0),
                     x.dim(1)};
        TensorInfo y = conv(ops, ops.make(padded, std::move(image), x.dtype), tensor(args, 1),
                            optional_tensor(args, 2), c);
        return clamped(ops, y, node.args().at(5), node.args().at(6));
      });
  // fxopt.runtime.pointwise_conv.pointwise_conv2d(x, w, b, residual, lower, upper): the 1x1
  // convolution, the residual added (None: none), the clamp (None: unbounded).
  interpreter.add_kernel(
      NodeKind::CallFunction, "fxopt.runtime.pointwise_conv.pointwise_conv2d",
      [](ReferenceInterpreter& in, const Node& node, const std::vector<Value>& args) -> Value {
        ConvConfig c{Shape(2, 1), Shape(2, 0), Shape(2, 1), Shape(2, 0), 1};
        TensorInfo y = plus_residual(
            in.ops(), conv(in.ops(), tensor(args, 0), tensor(args, 1), optional_tensor(args, 2), c),
            optional_tensor(args, 3));
        return clamped(in.ops(), y, node.args().at(4), node.args().at(5));
      });
  // fxopt.runtime.static_int8_conv.int8_conv2d(x, values, scales, bias, stride, padding,
  // dilation, groups, x_scale, x_zero_point, residual, attr, scalars, algorithm): x rounded to
  // uint8 with the given scale and zero point (kernels/quantize_u8.h), the int8 weight scaled per
  // output channel, then as conv_pointwise.
  interpreter.add_kernel(
      NodeKind::CallFunction, "fxopt.runtime.static_int8_conv.int8_conv2d",
      [](ReferenceInterpreter& in, const Node& node, const std::vector<Value>& args) -> Value {
        auto& ops = in.ops();
        const TensorInfo& x = tensor(args, 0);
        const TensorInfo& values = tensor(args, 1);
        double scale = *node.args().at(8).number();
        double zero = double(*node.args().at(9).integer());
        float inverse = float(1.0 / scale);
        std::vector<double> xq = ops.values(x);
        for (double& v : xq)
          v = (std::clamp(std::nearbyint(float(v) * inverse) + zero, 0.0, 255.0) - zero) * scale;
        std::vector<double> w = ops.values(values);
        const std::vector<double>& channel_scales = ops.values(tensor(args, 2));
        int64_t per_channel = int64_t(w.size()) / values.shape.at(0);
        for (size_t i = 0; i < w.size(); ++i) w[i] *= channel_scales[i / per_channel];
        size_t dims = x.shape.size() - 2;
        ConvConfig c{per_dim(&node.args().at(4), dims, 1), per_dim(&node.args().at(5), dims, 0),
                     per_dim(&node.args().at(6), dims, 1), Shape(dims, 0),
                     *node.args().at(7).integer()};
        TensorInfo y =
            conv(ops, ops.make(x.shape, std::move(xq), x.dtype),
                 ops.make(values.shape, std::move(w), x.dtype), optional_tensor(args, 3), c);
        if (const TensorInfo* residual = optional_tensor(args, 10)) {
          std::vector<double> sum = ops.values(y);
          const std::vector<double>& r = ops.values(*residual);
          for (size_t i = 0; i < sum.size(); ++i) sum[i] += r.at(i);
          y = ops.make(y.shape, std::move(sum), y.dtype);
        }
        return onednn_post_op(ops, y, node.args().at(11), node.args().at(12), node.args().at(13));
      });
  for (const char* type : {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d"})
    interpreter.add_kernel(
        NodeKind::CallModule, std::string("torch.nn.modules.batchnorm.") + type,
        [](ReferenceInterpreter& in, const Node& node, const std::vector<Value>& args) -> Value {
          const ModuleInfo& m = *in.program().module(node.target());
          if (m.attribute("training") && *m.attribute("training") == Arg(true))
            throw std::invalid_argument("reference batch norm runs in eval mode only");
          return batch_norm(in.ops(), tensor(args, 0), *m.tensor("running_mean"),
                            *m.tensor("running_var"), present(m.tensor("weight")),
                            present(m.tensor("bias")), *m.attribute("eps")->number());
        });
  // aten.batch_norm(x, w, b, mean, var, training, momentum, eps, cudnn) and
  // aten._native_batch_norm_legit_no_training(x, w, b, mean, var, momentum, eps).
  auto aten_batch_norm = [](size_t eps_index) {
    return [eps_index](ReferenceInterpreter& in, const Node& node,
                       const std::vector<Value>& args) -> Value {
      return batch_norm(in.ops(), tensor(args, 0), tensor(args, 3), tensor(args, 4),
                        optional_tensor(args, 1), optional_tensor(args, 2),
                        *node.args().at(eps_index).number());
    };
  };
  interpreter.add_kernel(NodeKind::CallFunction, "aten.batch_norm.default", aten_batch_norm(7));
  interpreter.add_kernel(NodeKind::CallFunction,
                         "aten._native_batch_norm_legit_no_training.default", aten_batch_norm(6));
  interpreter.add_kernel(
      NodeKind::CallFunction, "_operator.getitem",
      [](ReferenceInterpreter&, const Node& node, const std::vector<Value>& args) -> Value {
        if (node.args().at(1) != Arg(0)) throw std::invalid_argument("reference getitem: only 0");
        return args.at(0);
      });
}

}  // namespace fxopt::testing
