#include "passes/fuse_batch_norm_in_linear.h"

#include "ops/linear.h"
#include "ops/shape_read.h"
#include "passes/fold_batch_norm.h"

namespace fxopt {
namespace {

// The Linear that reads the batch norm's result as its data input, and nothing else does.
std::optional<LinearView> sole_linear_user(const Program& program, const BatchNorm& bn) {
  if (bn.result->users().size() != 1) return std::nullopt;
  std::optional<LinearView> linear = as_linear(program, *bn.result->users().front());
  if (!linear || linear->input != bn.result) return std::nullopt;
  return linear;
}

std::optional<int> input_rank(const BatchNorm& bn) {
  if (std::optional<int> rank = bn.input->rank()) return rank;
  return bn.result->rank();
}

}  // namespace

std::vector<Trigger> FuseBatchNorm1dInLinear::triggers() const { return batch_norm_triggers(1); }

void FuseBatchNorm1dInLinear::rewrite(PassContext& ctx, Node* node) const {
  const Program& program = ctx.rewriter.program();
  std::string why_not;
  std::optional<BatchNorm> bn = as_batch_norm(program, node, &why_not);
  if (!bn) return ctx.skip(*node, why_not);
  std::optional<LinearView> linear = as_linear(program, *bn->input);
  BatchNormSide side = BatchNormSide::After;
  if (!linear) {
    linear = sole_linear_user(program, *bn);
    side = BatchNormSide::Before;
  }
  if (!linear) return ctx.skip(*node, "neither reads a Linear's output nor feeds only a Linear");
  std::optional<int> rank = input_rank(*bn);
  if (!rank)
    return ctx.skip(*node,
                    "the rank of its input is unknown: on a 3-D input batch norm normalizes dim 1 "
                    "while the Linear works on the last dim (torch.export records ranks; or run "
                    "torch.fx.passes.shape_prop.ShapeProp first)");
  if (*rank != 2)
    return ctx.skip(*node, "its input is " + std::to_string(*rank) +
                               "-D: batch norm normalizes dim 1 while the Linear works on the "
                               "last dim");
  if (side == BatchNormSide::After && !only_shape_read_besides(*bn->input, *bn->node))
    return ctx.skip(*node, "the Linear's output has other users (besides reads of its shape)");
  if (ctx.marked(*linear->node)) return ctx.skip(*node, "the Linear already absorbed a batch norm");
  int64_t features = side == BatchNormSide::After ? linear->out_features : linear->in_features;
  if (features != bn->features())
    return ctx.skip(*node, "its feature count differs from the Linear's");
  std::optional<Arg> captured = capture_batch_norm(*bn);
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");

  const TensorInfo* bias = linear->params.tensor("bias");
  FoldedParams folded = side == BatchNormSide::After
                            ? fold_into_outputs(ctx.tensors, bn->stats, linear->weight, bias,
                                                {linear->weight.shape, {linear->out_features, 1}})
                            : fold_into_inputs(ctx.tensors, bn->stats, linear->weight, bias);
  absorb_batch_norm(ctx, linear->params, *bn, std::move(*captured), side, folded);
}

void FuseBatchNorm1dInLinear::restore(PassContext& ctx, Node* node,
                                      const RecordReader& record) const {
  restore_batch_norm(ctx, node, record);
}

}  // namespace fxopt
