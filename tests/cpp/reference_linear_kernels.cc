// Reference kernels for what the Linear passes produce and consume: Linear in every dialect,
// last-dimension slices (torch.narrow, aten.slice.Tensor), constant pads (F.pad, aten.constant_pad_nd,
// aten.pad),
// the decomposed forms of a Linear (addmm, mm, matrix transposes) and reshapes.
#include <stdexcept>

#include "reference_interpreter.h"

namespace fxopt::testing {
namespace {

const TensorInfo& tensor(const std::vector<Value>& args, size_t i) {
  return std::get<TensorInfo>(args.at(i));
}

int64_t integer(const std::vector<Value>& args, size_t i) {
  return static_cast<int64_t>(std::get<double>(args.at(i)));
}

}  // namespace

// y[r, o] = sum_i x[r, i] * w[o, i] + b[o], over every leading index r.
TensorInfo linear(ReferenceTensorOps& ops, const TensorInfo& x, const TensorInfo& w,
                  const TensorInfo* b) {
  int64_t in = w.dim(1), out = w.dim(0);
  if (x.dim(-1) != in) throw std::invalid_argument("linear: input features do not match");
  const auto &xv = ops.values(x), &wv = ops.values(w);
  int64_t rows = int64_t(xv.size()) / in;
  std::vector<double> y(rows * out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double sum = b ? ops.values(*b)[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) sum += xv[r * in + i] * wv[o * in + i];
      y[r * out + o] = sum;
    }
  std::vector<int64_t> shape = x.shape;
  shape.back() = out;
  return ops.make(shape, std::move(y), x.dtype);
}

namespace {

Value module_linear(ReferenceInterpreter& in, const Node& node, const std::vector<Value>& args) {
  const ModuleInfo& module = *in.program().module(node.target());
  const TensorInfo* bias = module.tensor("bias");
  return linear(in.ops(), tensor(args, 0), *module.tensor("weight"),
                bias && bias->present() ? bias : nullptr);
}

Value functional_linear(ReferenceInterpreter& in, const Node&, const std::vector<Value>& args) {
  const TensorInfo* bias = args.size() > 2 ? std::get_if<TensorInfo>(&args[2]) : nullptr;
  return linear(in.ops(), tensor(args, 0), tensor(args, 1), bias);
}

Value last_dim_slice(ReferenceInterpreter& in, const std::vector<Value>& args, int64_t start,
                     int64_t end) {
  const TensorInfo& x = tensor(args, 0);
  int64_t dim = integer(args, 1);
  if (dim != -1 && dim != int64_t(x.shape.size()) - 1)
    throw std::invalid_argument("reference slices only the last dimension");
  return in.ops().slice(x, dim, start, end);
}

// x padded with `value` by non-negative widths in torch's order (last dimension first).
Value constant_pad(ReferenceInterpreter& in, const Node& node, const std::vector<Value>& args,
                   const Arg* value) {
  const std::vector<Arg>* widths = node.args().at(1).sequence();
  const TensorInfo& x = tensor(args, 0);
  size_t rank = x.shape.size();
  std::vector<int64_t> before(rank, 0), shape = x.shape;
  for (size_t i = 0; widths && 2 * i < widths->size(); ++i) {
    int64_t left = *(*widths)[2 * i].integer(), right = *(*widths)[2 * i + 1].integer();
    if (left < 0 || right < 0 || i >= rank)
      throw std::invalid_argument("reference pads by non-negative widths within the rank");
    before[rank - 1 - i] = left;
    shape[rank - 1 - i] += left + right;
  }
  double fill = value && !value->is_none() ? *value->number() : 0.0;
  int64_t size = 1;
  for (int64_t d : shape) size *= d;
  std::vector<double> y(size_t(size), fill);
  const std::vector<double>& xv = in.ops().values(x);
  for (size_t flat = 0; flat < xv.size(); ++flat) {
    int64_t rest = int64_t(flat), at = 0, stride = 1;
    for (size_t d = rank; d-- > 0;) {
      at += (rest % x.shape[d] + before[d]) * stride;
      rest /= x.shape[d];
      stride *= shape[d];
    }
    y[size_t(at)] = xv[flat];
  }
  return in.ops().make(shape, std::move(y), x.dtype);
}

// addmm(b, x, wt) = linear(x, wt^T, b); mm(x, wt) = linear(x, wt^T).
Value addmm(ReferenceInterpreter& in, const Node&, const std::vector<Value>& args) {
  return linear(in.ops(), tensor(args, 1), in.ops().transpose(tensor(args, 2), 0, 1),
                &tensor(args, 0));
}

Value mm(ReferenceInterpreter& in, const Node&, const std::vector<Value>& args) {
  if (tensor(args, 0).shape.size() != 2) throw std::invalid_argument("reference mm: 2-D only");
  return linear(in.ops(), tensor(args, 0), in.ops().transpose(tensor(args, 1), 0, 1), nullptr);
}

Value transpose_matrix(ReferenceInterpreter& in, const Node&, const std::vector<Value>& args) {
  if (tensor(args, 0).shape.size() != 2) throw std::invalid_argument("reference t: 2-D only");
  return in.ops().transpose(tensor(args, 0), 0, 1);
}

// view / reshape to the sizes the node lists (as one list, or one by one), one of them -1.
Value reshape(ReferenceInterpreter& in, const Node& node, const std::vector<Value>& args) {
  const TensorInfo& x = tensor(args, 0);
  std::vector<Arg> sizes(node.args().begin() + 1, node.args().end());
  if (sizes.size() == 1 && sizes[0].sequence()) sizes = *sizes[0].sequence();
  std::vector<int64_t> shape;
  int64_t known = 1, numel = 1;
  for (int64_t d : x.shape) numel *= d;
  for (const Arg& s : sizes) {
    shape.push_back(s.integer().value());
    if (shape.back() != -1) known *= shape.back();
  }
  for (int64_t& d : shape)
    if (d == -1) d = numel / known;
  return in.ops().reshape(x, shape);
}

}  // namespace

void add_linear_kernels(ReferenceInterpreter& interpreter) {
  for (const char* f : {"torch.addmm", "aten.addmm.default"})
    interpreter.add_kernel(NodeKind::CallFunction, f, addmm);
  interpreter.add_kernel(NodeKind::CallMethod, "addmm", addmm);
  for (const char* f : {"torch.mm", "aten.mm.default"})
    interpreter.add_kernel(NodeKind::CallFunction, f, mm);
  interpreter.add_kernel(NodeKind::CallMethod, "mm", mm);
  for (const char* f : {"torch.t", "aten.t.default", "aten.numpy_T.default", "aten.transpose.int",
                        "aten.permute.default", "getattr"})
    interpreter.add_kernel(NodeKind::CallFunction, f, transpose_matrix);
  for (const char* m : {"t", "transpose", "permute"})
    interpreter.add_kernel(NodeKind::CallMethod, m, transpose_matrix);
  for (const char* f : {"torch.reshape", "aten.view.default", "aten.reshape.default"})
    interpreter.add_kernel(NodeKind::CallFunction, f, reshape);
  for (const char* m : {"view", "reshape"})
    interpreter.add_kernel(NodeKind::CallMethod, m, reshape);
  for (const char* type : {"torch.nn.modules.linear.Linear",
                           "torch.nn.modules.linear.NonDynamicallyQuantizableLinear"})
    interpreter.add_kernel(NodeKind::CallModule, type, module_linear);
  for (const char* target : {"torch._C._nn.linear", "aten.linear.default"})
    interpreter.add_kernel(NodeKind::CallFunction, target, functional_linear);
  interpreter.add_kernel(NodeKind::CallFunction, "torch.narrow",
                         [](ReferenceInterpreter& in, const Node&, const std::vector<Value>& a) {
                           int64_t start = integer(a, 2);
                           return last_dim_slice(in, a, start, start + integer(a, 3));
                         });
  interpreter.add_kernel(NodeKind::CallFunction, "aten.slice.Tensor",
                         [](ReferenceInterpreter& in, const Node&, const std::vector<Value>& a) {
                           return last_dim_slice(in, a, integer(a, 2), integer(a, 3));
                         });
  for (const char* target : {"torch.nn.functional.pad", "torch._C._nn.pad", "aten.pad.default"})
    interpreter.add_kernel(
        NodeKind::CallFunction, target,
        [](ReferenceInterpreter& in, const Node& n, const std::vector<Value>& a) {
          const Arg* mode = n.input(2, "mode");
          if (mode && !mode->is_none() && *mode != Arg("constant"))
            throw std::invalid_argument("reference pads with a constant only");
          return constant_pad(in, n, a, n.input(3, "value"));
        });
  interpreter.add_kernel(NodeKind::CallFunction, "aten.constant_pad_nd.default",
                         [](ReferenceInterpreter& in, const Node& n, const std::vector<Value>& a) {
                           return constant_pad(in, n, a, n.input(2, "value"));
                         });
}

}  // namespace fxopt::testing
