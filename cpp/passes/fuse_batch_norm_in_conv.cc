#include "passes/fuse_batch_norm_in_conv.h"

#include <algorithm>

#include "ops/conv.h"
#include "ops/shape_read.h"
#include "passes/fold_batch_norm.h"

namespace fxopt {
namespace {

// Output channel o of a transposed convolution is, in group o / (out / groups), column
// o % (out / groups) of dim 1 of the weight: split dim 0 into groups to line the channels up.
ChannelLayout output_channels(const Conv& conv) {
  const std::vector<int64_t>& shape = conv.weight().shape;
  ChannelLayout layout{shape, std::vector<int64_t>(shape.size(), 1)};
  if (!conv.transposed) {
    layout.channels[0] = shape[0];
    return layout;
  }
  layout.shape.insert(layout.shape.begin(), conv.groups);
  layout.shape[1] = shape[0] / conv.groups;
  layout.channels.insert(layout.channels.begin(), conv.groups);
  layout.channels[2] = shape[1];
  return layout;
}

}  // namespace

std::vector<Trigger> FuseBatchNormInConv::triggers() const {
  return batch_norm_triggers(only_2d_ ? 2 : 0);
}

void FuseBatchNormInConv::rewrite(PassContext& ctx, Node* node) const {
  const Program& program = ctx.rewriter.program();
  std::string why_not;
  std::optional<BatchNorm> bn = as_batch_norm(program, node, &why_not);
  if (!bn) return ctx.skip(*node, why_not);
  std::optional<Conv> conv = as_conv(program, bn->input, &why_not);
  if (!conv) return ctx.skip(*node, "its input is not a foldable convolution: " + why_not);
  if (only_2d_ && (conv->spatial_dims != 2 || conv->transposed))
    return ctx.skip(*node, "folds only a Conv2d into a BatchNorm2d");
  if (!only_shape_read_besides(*bn->input, *bn->node))
    return ctx.skip(*node, "the convolution's output has other users (besides reads of its shape)");
  if (ctx.marked(*bn->input))
    return ctx.skip(*node, "the convolution already absorbed a batch norm");
  if (conv->out_channels() != bn->features())
    return ctx.skip(*node, "its feature count differs from the convolution's output channels");
  // Batch norm normalizes dim 1, the channel axis of a batched convolution output only.
  int batched_rank = conv->spatial_dims + 2;
  std::optional<int> rank = bn->input->rank();
  if ((rank && *rank != batched_rank) ||
      (!bn->ranks.empty() && std::ranges::find(bn->ranks, batched_rank) == bn->ranks.end()))
    return ctx.skip(*node,
                    "does not normalize the convolution's channel axis (unbatched input, or a "
                    "batch norm for another rank)");
  std::optional<Arg> captured = capture_batch_norm(*bn);
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");

  FoldedParams folded = fold_into_outputs(ctx.tensors, bn->stats, conv->weight(),
                                          conv->params.tensor("bias"), output_channels(*conv));
  absorb_batch_norm(ctx, conv->params, *bn, std::move(*captured), BatchNormSide::After, folded);
}

void FuseBatchNormInConv::restore(PassContext& ctx, Node* node, const RecordReader& record) const {
  restore_batch_norm(ctx, node, record);
}

}  // namespace fxopt
