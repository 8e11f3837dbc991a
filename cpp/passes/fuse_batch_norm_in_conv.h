// FuseBatchNormInConv: an eval-mode batch norm after a convolution folds into the convolution.
//
//   before:  %y = conv(%x) ; %z = batch_norm(%y)      after:  %y = conv'(%x)   (reads of %z read
//   %y)
//
// Conv1d / 2d / 3d and ConvTranspose1d / 2d / 3d, any groups, in every dialect the conv and
// batch-norm op views know (modules, F.conv*, ATen). With `only_2d` (FuseBatchNorm2dInConv2d,
// Optimum's pass) only Conv2d followed by BatchNorm2d.
// Preconditions: the batch norm is in eval mode with running statistics (op view); the
// convolution's output feeds nothing but the batch norm; their channel counts agree; the
// batch norm normalizes the convolution's channel axis: a batched input (rank known from fx,
// or a BatchNorm2d / 3d module, which only accepts batched input). An unbatched Conv1d into a
// BatchNorm1d with as many features as the sequence length is only told apart when fx
// recorded shapes.
// Numerics: weight math in float32 or wider (tensor/batch_norm_fold.h); the folded convolution
// may differ from conv + batch norm by a few ulps of the output dtype.
// The convolution gets new weights copy-on-write (a copy of the module at `<path>_fused`, or new
// attributes `<weight path>_fused`); the original module, attributes and batch norm stay
// registered, which is what reverse restores, in any later session.
#pragma once

#include "rewrite/pass.h"

namespace fxopt {

class FuseBatchNormInConv final : public Pass {
 public:
  explicit FuseBatchNormInConv(bool only_2d) : only_2d_(only_2d) {}
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;

 private:
  bool only_2d_;
};

}  // namespace fxopt
