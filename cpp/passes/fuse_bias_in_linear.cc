#include "passes/fuse_bias_in_linear.h"

#include "passes/linear_rewrite.h"

namespace fxopt {
namespace {

// The ones column of `view`'s input this pass already made, or a new one before the Linear.
Node* ones_column(PassContext& ctx, const LinearView& view) {
  for (Node* user : view.input->users())
    if (ctx.marked(*user) && ones_column_source(view, *user) == view.input) return user;
  Node* column = create_ones_column(ctx.rewriter, view, view.node, view.input);
  ctx.changed(column);
  return column;
}

}  // namespace

std::vector<Trigger> FuseBiasInLinear::triggers() const { return linear_triggers(); }

void FuseBiasInLinear::begin(const Program& program) const { tied_.emplace(program); }

void FuseBiasInLinear::rewrite(PassContext& ctx, Node* node) const {
  std::string why_not;
  std::optional<LinearView> view = as_linear(ctx.rewriter.program(), *node, &why_not);
  if (!view) return ctx.skip(*node, why_not);
  if (!view->has_bias()) return ctx.skip(*node, "has no bias");
  if (view->bias.requires_grad != view->weight.requires_grad ||
      view->bias.is_parameter != view->weight.is_parameter)
    return ctx.skip(*node, "its bias and weight differ in requires_grad or parameter-ness");
  if (!owns_tensors(ctx.rewriter.program(), *view, &why_not)) return ctx.skip(*node, why_not);

  TensorOps& ops = ctx.tensors;
  TensorInfo column = ops.reshape(view->bias, {view->out_features, 1});
  TensorInfo weight = stored_like(ops.cat({view->weight, column}, 1), view->weight);
  Record record;
  describe(*view, *tied_, record);
  Node* extended = ones_column(ctx, *view);
  replace_tensors(ctx.rewriter, *view, weight, TensorInfo{});
  set_linear_input(ctx.rewriter, *view, extended);
  set_reversal_record(ctx.rewriter, node, ctx.signature, record);
  ctx.changed(node);
}

void FuseBiasInLinear::restore(PassContext& ctx, Node* node, const RecordReader& record) const {
  std::string why_not;
  std::optional<LinearView> view = as_linear(ctx.rewriter.program(), *node, &why_not);
  if (!view) throw PassError(*node, "is no longer a Linear (" + why_not + ")");
  Node* extended = view->input;
  Node* x = ones_column_source(*view, *extended);
  if (!x) throw PassError(*node, "is no longer a Linear reading a ones column");
  if (view->has_bias() || view->in_features < 1)
    throw PassError(*node, "does not hold a fused bias column");

  TensorOps& ops = ctx.tensors;
  int64_t in = view->in_features - 1;
  TensorInfo weight = stored_like(ops.slice(view->weight, 1, 0, in), view->weight);
  TensorInfo column = ops.slice(view->weight, 1, in, in + 1);
  TensorInfo bias = stored_like(ops.reshape(column, {view->out_features}), view->weight);
  restore_linear(ctx.rewriter, node, record, x, weight, bias, *view);
  ctx.restored(node);
  if (extended->users().empty()) ctx.rewriter.erase(extended);
}

}  // namespace fxopt
