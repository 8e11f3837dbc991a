#include "tensor/batch_norm_fold.h"

namespace fxopt {
namespace {

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
  a.scale = ops.rsqrt(ops.add_scalar(ops.cast(bn.var, a.dtype), bn.eps));
  if (bn.weight) a.scale = ops.mul(a.scale, ops.cast(*bn.weight, a.dtype));
  TensorInfo centred = ops.mul(ops.cast(bn.mean, a.dtype), a.scale);
  TensorInfo beta = bn.bias ? ops.cast(*bn.bias, a.dtype) : ops.full(bn.mean.shape, 0.0, a.scale);
  a.shift = ops.sub(beta, centred);
  return a;
}

FoldedParams cast_back(TensorOps& ops, const TensorInfo& new_weight, const TensorInfo& new_bias,
                       const TensorInfo& weight, const TensorInfo* bias) {
  return {ops.cast(new_weight, weight.dtype),
          ops.cast(new_bias, bias ? bias->dtype : weight.dtype)};
}

}  // namespace

FoldedParams fold_into_outputs(TensorOps& ops, const BatchNormStats& bn, const TensorInfo& weight,
                               const TensorInfo* bias, const ChannelLayout& layout) {
  Affine a = affine(ops, bn, weight, bias);
  TensorInfo grouped = ops.reshape(ops.cast(weight, a.dtype), layout.shape);
  TensorInfo scaled = ops.mul(grouped, ops.reshape(a.scale, layout.channels));
  TensorInfo new_bias =
      bias ? ops.add(ops.mul(ops.cast(*bias, a.dtype), a.scale), a.shift) : a.shift;
  return cast_back(ops, ops.reshape(scaled, weight.shape), new_bias, weight, bias);
}

FoldedParams fold_into_inputs(TensorOps& ops, const BatchNormStats& bn, const TensorInfo& weight,
                              const TensorInfo* bias) {
  Affine a = affine(ops, bn, weight, bias);
  TensorInfo w = ops.cast(weight, a.dtype);
  std::vector<int64_t> row = {1, weight.dim(1)};
  TensorInfo shifted = ops.sum(ops.mul(w, ops.reshape(a.shift, row)), 1);  // W @ shift
  TensorInfo new_bias = bias ? ops.add(ops.cast(*bias, a.dtype), shifted) : shifted;
  return cast_back(ops, ops.mul(w, ops.reshape(a.scale, row)), new_bias, weight, bias);
}

}  // namespace fxopt
