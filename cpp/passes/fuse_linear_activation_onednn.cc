#include "passes/fuse_linear_activation_onednn.h"

#include <algorithm>

#include "ops/effects.h"
#include "ops/targets.h"
#include "passes/activation_clamp.h"
#include "passes/fused_call.h"
#include "passes/linear_choice.h"
#include "passes/linear_rewrite.h"
#include "passes/onednn_dtypes.h"
#include "passes/onednn_post_op.h"
#include "rewrite/capture.h"

namespace fxopt {
namespace {

// The Python function that packs the weight and runs fxopt's GEMM
// (python/fxopt/runtime/packed_linear.py).
const Symbol kPackedLinear = Symbol::intern("fxopt.runtime.packed_linear.packed_linear");

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
  std::optional<std::string> refusal =
      onednn_refusal(dtypes_, view->dtype(), view->device(), "oneDNN's fused linear");
  const bool own =
      (view->dtype() == "float32" || view->dtype() == "bfloat16") && view->device() == "cpu";
  if (refusal && !own) return ctx.skip(*node, *refusal);

  std::optional<FusableActivation> activation = fusable_activation(rewriter.program(), node);
  std::vector<std::string> kernels = {"aten"};
  if (own) kernels.push_back("fxopt");
  if (!refusal) kernels.push_back("onednn");
  if (!refusal && activation) kernels.push_back("onednn_fused");
  // Unmeasured, oneDNN's most fused form where it runs (fxopt's kernel only by measurement).
  const size_t fallback = refusal ? 0 : kernels.size() - 1;
  std::string kernel =
      ctx.choose(*node, linear_choice_query(*view, "linear", activation ? activation->name : "none",
                                            kernels, fallback));
  if (kernel == "aten")
    return ctx.skip(*node, refusal ? *refusal + ", and fxopt's kernel was not picked"
                                   : "ATen's linear was measured faster here (see the pass's "
                                     "choices)");
  const bool onednn = kernel != "fxopt";
  // fxopt's kernel takes a ReLU / ReLU6 as the clamp of its sums; other activations stay.
  std::optional<Clamp> clamp = !onednn && activation ? clamp_of(activation->name) : std::nullopt;
  if (onednn ? kernel != "onednn_fused" : !clamp) activation.reset();
  std::vector<Node*> pattern = {node};
  if (activation) pattern.push_back(activation->node);
  Node* inputs[] = {view->input};
  std::optional<Arg> captured = capture_nodes(pattern, inputs);
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");

  Node* result = pattern.back();
  // Dynamo graphs keep in-place updates (Falcon's `mlp_output += attention_output`); under
  // grad mode torch refuses them on the output of the fused op, which has no autograd formula.
  if (onednn && updated_in_place(rewriter.program(), result))
    return ctx.skip(*node,
                    "a reader updates its result in place, which oneDNN's fused linear's "
                    "output does not allow under autograd");
  Arg weight = read_linear_tensor(rewriter, *view, result, "weight");
  Arg bias = read_linear_tensor(rewriter, *view, result, "bias");
  if (!onednn) {
    Args args = {view->input, weight, bias, clamp ? clamp->lower : Arg(None{}),
                 clamp ? clamp->upper : Arg(None{})};
    replace_by_fused_call(ctx, pattern, std::move(*captured), kPackedLinear, "packed_linear",
                          std::move(args));
    return;
  }
  PostOp op = activation ? activation->op : no_post_op();
  Args args = {view->input, weight, bias, op.attr, op.scalars, op.algorithm};
  replace_by_fused_call(ctx, pattern, std::move(*captured), targets::kOnednnLinearPointwise,
                        "linear_pointwise", std::move(args));
}

void FuseLinearActivationOneDnn::restore(PassContext& ctx, Node* node,
                                         const RecordReader& record) const {
  const size_t arity = node->target() == kPackedLinear ? 5 : 6;
  if (node->args().size() != arity || !node->args()[0].node())
    throw PassError(*node, "is no longer the Linear call this transformation made");
  Node* inputs[] = {node->args()[0].node()};
  restore_fused_chain(ctx, node, record, inputs, {1, 2});
}

}  // namespace fxopt
