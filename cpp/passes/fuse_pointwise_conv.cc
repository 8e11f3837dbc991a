#include "passes/fuse_pointwise_conv.h"

#include "passes/activation_clamp.h"
#include "passes/conv_fusion.h"
#include "passes/fused_call.h"
#include "rewrite/capture.h"

namespace fxopt {
namespace {

// The Python function that packs the weight and runs the kernel
// (python/fxopt/runtime/pointwise_conv.py).
const Symbol kPointwiseConv = Symbol::intern("fxopt.runtime.pointwise_conv.pointwise_conv2d");
constexpr size_t kArity = 6;

}  // namespace

std::vector<Trigger> FusePointwiseConv::triggers() const { return conv_triggers(); }

void FusePointwiseConv::rewrite(PassContext& ctx, Node* node) const {
  Rewriter& rewriter = ctx.rewriter;
  std::string why_not;
  std::optional<ConvFusion> fusion = conv_fusion(rewriter.program(), node, &why_not);
  if (!fusion) return ctx.skip(*node, why_not);
  const Conv& conv = fusion->conv;
  const TensorInfo& weight = conv.weight();
  if (!is_pointwise(*fusion))
    return ctx.skip(*node,
                    "it is not a 1x1 convolution at stride 1 without padding, dilation or groups");
  // The weight's dtype is the convolution's (a lowering before this pass changes weights and
  // casts); the call checks its input and runs ATen's convolution for any other dtype.
  if ((weight.dtype != "float32" && weight.dtype != "bfloat16") || weight.device != "cpu")
    return ctx.skip(*node, "fxopt's kernel takes float32 or bfloat16 weights on the CPU, not " +
                               weight.dtype + " on " + weight.device);
  std::optional<Clamp> clamp;  // set only where the activation stays fused
  if (fusion->activation && !(clamp = clamp_of(fusion->activation->name)))
    fusion->activation.reset();

  std::vector<std::string> kernels = {"left", "fxopt"};
  std::string kernel =
      ctx.choose(*node, ChoiceQuery{"pointwise_conv2d", fusion->choice_shape(), weight.dtype,
                                    fusion->choice_variant(), conv.input->name(), kernels, 1});
  if (kernel != "fxopt")
    return ctx.skip(*node,
                    "the convolution as it is was measured faster here (see the "
                    "pass's choices)");

  std::vector<Node*> pattern = fusion->pattern();
  std::optional<Arg> captured = capture_nodes(pattern, fusion->inputs());
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");

  Node* result = pattern.back();
  Args args = {conv.input,
               stored_tensor_operand(rewriter, conv.params, result, "weight"),
               stored_tensor_operand(rewriter, conv.params, result, "bias"),
               fusion->add ? Arg(fusion->add->residual) : Arg(None{}),
               clamp ? clamp->lower : Arg(None{}),
               clamp ? clamp->upper : Arg(None{})};
  replace_by_fused_call(ctx, pattern, std::move(*captured), kPointwiseConv, "pointwise_conv",
                        std::move(args));
}

void FusePointwiseConv::restore(PassContext& ctx, Node* node, const RecordReader& record) const {
  if (node->args().size() != kArity || !node->args()[0].node())
    throw PassError(*node, "is no longer the 1x1 convolution this transformation made");
  std::vector<Node*> inputs = {node->args()[0].node()};
  if (Node* residual = node->args()[3].node()) inputs.push_back(residual);
  restore_fused_chain(ctx, node, record, inputs, {1, 2});
}

}  // namespace fxopt
