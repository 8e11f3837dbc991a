#include "passes/fuse_conv_activation_onednn.h"

#include "passes/conv_fusion.h"
#include "passes/fused_call.h"
#include "passes/onednn_dtypes.h"
#include "rewrite/capture.h"

namespace fxopt {
namespace {

// The Python function that packs the weight and runs oneDNN (python/fxopt/runtime/onednn_conv.py).
const Symbol kConvPointwise = Symbol::intern("fxopt.runtime.onednn_conv.conv_pointwise");
constexpr size_t kArity = 11;

}  // namespace

FuseConvActivationOneDnn::FuseConvActivationOneDnn(std::vector<std::string> dtypes)
    : dtypes_(std::move(dtypes)) {}

std::unique_ptr<Pass> FuseConvActivationOneDnn::from_options(const Dict& options) {
  return std::make_unique<FuseConvActivationOneDnn>(onednn_dtypes_option(options));
}

std::vector<Trigger> FuseConvActivationOneDnn::triggers() const { return conv_triggers(); }

void FuseConvActivationOneDnn::rewrite(PassContext& ctx, Node* node) const {
  Rewriter& rewriter = ctx.rewriter;
  std::string why_not;
  std::optional<ConvFusion> fusion = conv_fusion(rewriter.program(), node, &why_not);
  if (!fusion) return ctx.skip(*node, why_not);
  const Conv& conv = fusion->conv;
  if (std::optional<std::string> refusal = onednn_refusal(
          dtypes_, conv.weight().dtype, conv.weight().device, "oneDNN's fused convolution"))
    return ctx.skip(*node, *refusal);

  bool fusable = fusion->add || fusion->activation;
  std::vector<std::string> kernels = {"aten", fusable ? "onednn_fused" : "onednn"};
  std::string kernel =
      ctx.choose(*node, ChoiceQuery{"conv2d", fusion->choice_shape(), conv.weight().dtype,
                                    fusion->choice_variant(), conv.input->name(), kernels,
                                    kernels.size() - 1});
  if (kernel == "aten")
    return ctx.skip(*node, "ATen's convolution was measured faster here (see the pass's choices)");
  if (kernel != "onednn_fused") fusion->unfuse();

  std::vector<Node*> pattern = fusion->pattern();
  std::optional<Arg> captured = capture_nodes(pattern, fusion->inputs());
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");

  Node* result = pattern.back();
  PostOp op = fusion->activation ? fusion->activation->op : no_post_op();
  Args args = {conv.input,
               stored_tensor_operand(rewriter, conv.params, result, "weight"),
               stored_tensor_operand(rewriter, conv.params, result, "bias"),
               int_list(fusion->geometry.stride),
               int_list(fusion->geometry.padding),
               int_list(fusion->geometry.dilation),
               conv.groups,
               fusion->add ? Arg(fusion->add->residual) : Arg(None{}),
               op.attr,
               op.scalars,
               op.algorithm};
  replace_by_fused_call(ctx, pattern, std::move(*captured), kConvPointwise, "conv_pointwise",
                        std::move(args));
}

void FuseConvActivationOneDnn::restore(PassContext& ctx, Node* node,
                                       const RecordReader& record) const {
  if (node->args().size() != kArity || !node->args()[0].node())
    throw PassError(*node, "is no longer the oneDNN convolution this transformation made");
  std::vector<Node*> inputs = {node->args()[0].node()};
  if (Node* residual = node->args()[7].node()) inputs.push_back(residual);
  restore_fused_chain(ctx, node, record, inputs, {1, 2});
}

}  // namespace fxopt
