#include "passes/fuse_linear_activation_onednn.h"

#include <algorithm>

#include "ops/effects.h"
#include "ops/targets.h"
#include "passes/fused_call.h"
#include "passes/linear_choice.h"
#include "passes/linear_rewrite.h"
#include "passes/onednn_dtypes.h"
#include "passes/onednn_post_op.h"
#include "rewrite/capture.h"

namespace fxopt {
namespace {

// Whether a reader of `value` writes it in place (x += y, x.add_(y)).
bool updated_in_place(const Program& program, const Node* value) {
  return std::ranges::any_of(value->users(), [&](const Node* user) {
    return is_mutating(program, *user) && !user->args().empty() && user->args()[0].node() == value;
  });
}

}  // namespace

FuseLinearActivationOneDnn::FuseLinearActivationOneDnn(std::vector<std::string> dtypes)
    : dtypes_(std::move(dtypes)) {}

std::unique_ptr<Pass> FuseLinearActivationOneDnn::from_options(const Dict& options) {
  return std::make_unique<FuseLinearActivationOneDnn>(onednn_dtypes_option(options));
}

std::vector<Trigger> FuseLinearActivationOneDnn::triggers() const { return linear_triggers(); }

void FuseLinearActivationOneDnn::rewrite(PassContext& ctx, Node* node) const {
  Rewriter& rewriter = ctx.rewriter;
  std::string why_not;
  std::optional<LinearView> view = as_linear(rewriter.program(), *node, &why_not);
  if (!view) return ctx.skip(*node, why_not);
  if (std::optional<std::string> refusal =
          onednn_refusal(dtypes_, view->dtype(), view->device(), "oneDNN's fused linear"))
    return ctx.skip(*node, *refusal);

  std::optional<FusableActivation> activation = fusable_activation(rewriter.program(), node);
  std::vector<std::string> kernels = {"aten", "onednn"};
  if (activation) kernels.push_back("onednn_fused");
  // The query names the activation; linear_choice_query adds ",no_bias" where it applies.
  std::string kernel =
      ctx.choose(*node, linear_choice_query(*view, "linear", activation ? activation->name : "none",
                                            kernels, kernels.size() - 1));
  if (kernel == "aten")
    return ctx.skip(*node, "ATen's linear was measured faster here (see the pass's choices)");
  if (kernel != "onednn_fused") activation.reset();
  std::vector<Node*> pattern = {node};
  if (activation) pattern.push_back(activation->node);
  Node* inputs[] = {view->input};
  std::optional<Arg> captured = capture_nodes(pattern, inputs);
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");

  Node* result = pattern.back();
  // Dynamo graphs keep in-place updates (Falcon's `mlp_output += attention_output`); under
  // grad mode torch refuses them on the output of the fused op, which has no autograd formula.
  if (updated_in_place(rewriter.program(), result))
    return ctx.skip(*node,
                    "a reader updates its result in place, which oneDNN's fused linear's "
                    "output does not allow under autograd");
  PostOp op = activation ? activation->op : no_post_op();
  Args args = {view->input,
               read_linear_tensor(rewriter, *view, result, "weight"),
               read_linear_tensor(rewriter, *view, result, "bias"),
               op.attr,
               op.scalars,
               op.algorithm};
  replace_by_fused_call(ctx, pattern, std::move(*captured), targets::kOnednnLinearPointwise,
                        "linear_pointwise", std::move(args));
}

void FuseLinearActivationOneDnn::restore(PassContext& ctx, Node* node,
                                         const RecordReader& record) const {
  if (node->args().size() != 6 || !node->args()[0].node())
    throw PassError(*node, "is no longer the oneDNN linear this transformation made");
  Node* inputs[] = {node->args()[0].node()};
  restore_fused_chain(ctx, node, record, inputs, {1, 2});
}

}  // namespace fxopt
