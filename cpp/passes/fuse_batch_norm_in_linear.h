// FuseBatchNorm1dInLinear: an eval-mode BatchNorm1d next to a Linear folds into the Linear, on
// either side (as Optimum's pass does):
//
//   Linear -> BN:   %y = linear(%x) ; %z = bn(%y)       ->  %y = linear'(%x)   (reads of %z read
//   %y) BN -> Linear:   %z = bn(%x) ; %y = linear(%z)       ->  %y = linear'(%x)
//
// In every dialect the Linear and batch-norm op views know (modules, F.linear, ATen).
// Preconditions: the batch norm is in eval mode with running statistics (op view); the value
// between the two feeds nothing else; feature counts agree; the input is known to be 2-D
// (N, C). Batch norm normalizes dim 1 while a Linear works on the last dim, so on a 3-D
// (N, C, L) input they meet on different axes; a fold is refused unless fx recorded the rank
// (node.meta["val"] from torch.export, ["tensor_meta"] from ShapeProp), since an unknown rank
// could be 3. When BN sits between two Linears it folds into the one before it.
// Numerics: weight math in float32 or wider (tensor/batch_norm_fold.h); BN -> Linear adds
// W @ shift to the bias, a sum over in_features, so its rounding grows with in_features.
// The Linear gets new tensors copy-on-write (passes/replace_params.h); reverse restores the
// original module or attributes and rebuilds the batch norm, in any later session.
#pragma once

#include "rewrite/pass.h"

namespace fxopt {

class FuseBatchNorm1dInLinear final : public Pass {
 public:
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;
};

}  // namespace fxopt
