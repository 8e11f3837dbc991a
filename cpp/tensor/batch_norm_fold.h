// The weight arithmetic of folding an eval-mode batch norm into an adjacent affine op (Linear,
// Conv), written once for every pass that folds one.
//
// In eval mode batch norm is an affine map per channel c:
//   bn(x)[c] = (x[c] - mean[c]) / sqrt(var[c] + eps) * gamma[c] + beta[c]
//            = x[c] * scale[c] + shift[c]
// Folded into the op before it (y = W x + b, output channel c feeds channel c):
//   W'[c] = W[c] * scale[c]             b'[c] = b[c] * scale[c] + shift[c]
// Folded into a Linear after it (input feature i reads channel i):
//   W'[:, i] = W[:, i] * scale[i]       b' = b + W @ shift
// Without gamma / beta (affine=False) they are 1 and 0; without b it is 0.
//
// Numerics: everything is computed in float32, or float64 if any operand is float64, so
// float16 / bfloat16 parameters lose nothing in the intermediate steps; each result is cast
// back once, to the dtype of the tensor it replaces (a new bias takes the weight's).
#pragma once

#include <optional>
#include <vector>

#include "tensor/tensor_ops.h"

namespace fxopt {

struct BatchNormStats {
  TensorInfo mean, var;
  std::optional<TensorInfo> weight, bias;  // gamma, beta; nullopt when affine=False
  double eps = 1e-5;
};

struct FoldedParams {
  TensorInfo weight, bias;
};

// Where the output channels lie in a weight: reshaped to `shape`, the weight broadcasts against
// the per-channel vector reshaped to `channels`. For a [out, in, k...] weight that is the
// weight's own shape and [out, 1, 1...]; a grouped transposed convolution needs a reshape.
struct ChannelLayout {
  std::vector<int64_t> shape, channels;
};

FoldedParams fold_into_outputs(TensorOps& ops, const BatchNormStats& bn, const TensorInfo& weight,
                               const TensorInfo* bias, const ChannelLayout& layout);
// `weight` is a Linear's [out, in] weight whose input features the batch norm produced.
FoldedParams fold_into_inputs(TensorOps& ops, const BatchNormStats& bn, const TensorInfo& weight,
                              const TensorInfo* bias);

}  // namespace fxopt
