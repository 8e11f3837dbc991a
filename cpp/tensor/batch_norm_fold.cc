#include "tensor/batch_norm_fold.h"

#include <string>
#include <vector>

namespace fxopt {
namespace {

// `t` in `dtype` / `shape`: `t` itself where it is so already. Every result below comes out of
// an arithmetic op, so it is a new tensor either way; each skipped cast or reshape was a copy
// of the weight (five per folded convolution made ResNet-50's preparation copy 0.5 GB).
TensorInfo in_dtype(TensorOps& ops, const TensorInfo& t, const std::string& dtype) {
  return t.dtype == dtype ? t : ops.cast(t, dtype);
}

TensorInfo in_shape(TensorOps& ops, const TensorInfo& t, const std::vector<int64_t>& shape) {
  return t.shape == shape ? t : ops.reshape(t, shape);
}

// The batch norm as x * scale + shift, in the precision the fold is computed in.
struct Affine {
  std::string dtype;
  TensorInfo scale, shift;
};

Affine affine(TensorOps& ops, const BatchNormStats& bn, const TensorInfo& weight,
              const TensorInfo* bias) {
  bool wide = false;
  for (const TensorInfo* t : {&bn.mean, &bn.var, &weight, bias, bn.weight ? &*bn.weight : nullptr,
                              bn.bias ? &*bn.bias : nullptr})
    wide |= t && t->dtype == "float64";
  Affine a{wide ? "float64" : "float32", {}, {}};
  a.scale = ops.rsqrt(ops.add_scalar(in_dtype(ops, bn.var, a.dtype), bn.eps));
  if (bn.weight) a.scale = ops.mul(a.scale, in_dtype(ops, *bn.weight, a.dtype));
  TensorInfo centred = ops.mul(in_dtype(ops, bn.mean, a.dtype), a.scale);
  TensorInfo beta =
      bn.bias ? in_dtype(ops, *bn.bias, a.dtype) : ops.full(bn.mean.shape, 0.0, a.scale);
  a.shift = ops.sub(beta, centred);
  return a;
}

FoldedParams cast_back(TensorOps& ops, const TensorInfo& new_weight, const TensorInfo& new_bias,
                       const TensorInfo& weight, const TensorInfo* bias) {
  return {in_dtype(ops, new_weight, weight.dtype),
          in_dtype(ops, new_bias, bias ? bias->dtype : weight.dtype)};
}

}  // namespace

FoldedParams fold_into_outputs(TensorOps& ops, const BatchNormStats& bn, const TensorInfo& weight,
                               const TensorInfo* bias, const ChannelLayout& layout) {
  Affine a = affine(ops, bn, weight, bias);
  TensorInfo grouped = in_shape(ops, in_dtype(ops, weight, a.dtype), layout.shape);
  TensorInfo scaled = ops.mul(grouped, ops.reshape(a.scale, layout.channels));
  TensorInfo new_bias =
      bias ? ops.add(ops.mul(in_dtype(ops, *bias, a.dtype), a.scale), a.shift) : a.shift;
  return cast_back(ops, in_shape(ops, scaled, weight.shape), new_bias, weight, bias);
}

FoldedParams fold_into_inputs(TensorOps& ops, const BatchNormStats& bn, const TensorInfo& weight,
                              const TensorInfo* bias) {
  Affine a = affine(ops, bn, weight, bias);
  TensorInfo w = in_dtype(ops, weight, a.dtype);
  std::vector<int64_t> row = {1, weight.dim(1)};
  TensorInfo shifted = ops.sum(ops.mul(w, ops.reshape(a.shift, row)), 1);  // W @ shift
  TensorInfo new_bias = bias ? ops.add(in_dtype(ops, *bias, a.dtype), shifted) : shifted;
  return cast_back(ops, ops.mul(w, ops.reshape(a.scale, row)), new_bias, weight, bias);
}

}  // namespace fxopt
