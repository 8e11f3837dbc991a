#include "passes/fuse_depthwise_conv.h"

#include <algorithm>
#include <limits>

#include "ops/pad.h"
#include "passes/activation_clamp.h"
#include "passes/conv_fusion.h"
#include "passes/fused_call.h"
#include "rewrite/capture.h"

namespace fxopt {
namespace {

// The Python function that packs the filters and runs the kernel
// (python/fxopt/runtime/depthwise_conv.py).
const Symbol kDepthwiseConv = Symbol::intern("fxopt.runtime.depthwise_conv.depthwise_conv2d");
constexpr size_t kArity = 7;

// The zero pad feeding `conv` that the kernel can take in: read by the convolution alone, on
// the two spatial dimensions only. Its widths in torch's order (left, right, top, bottom).
std::optional<ZeroPad> spatial_pad(Node* input) {
  std::string why_not;
  std::optional<ZeroPad> pad = as_zero_pad(*input, &why_not);
  if (!pad || input->users().size() != 1 || pad->widths.size() > 8) return std::nullopt;
  if (std::any_of(pad->widths.begin() + std::min<size_t>(4, pad->widths.size()), pad->widths.end(),
                  [](int64_t w) { return w != 0; }))
    return std::nullopt;
  pad->widths.resize(4, 0);
  return pad;
}

}  // namespace

std::vector<Trigger> FuseDepthwiseConv::triggers() const { return conv_triggers(); }

void FuseDepthwiseConv::rewrite(PassContext& ctx, Node* node) const {
  Rewriter& rewriter = ctx.rewriter;
  std::string why_not;
  std::optional<ConvFusion> fusion = conv_fusion(rewriter.program(), node, &why_not);
  if (!fusion) return ctx.skip(*node, why_not);
  const Conv& conv = fusion->conv;
  const TensorInfo& weight = conv.weight();
  const std::vector<int64_t>& in = conv.input->shape();
  int64_t channels = in.empty() ? -1 : in[in.size() - 3];
  if (!is_depthwise(*fusion))
    return ctx.skip(*node, "it is not depthwise (one filter per input channel, known channels)");
  if (std::ranges::any_of(fusion->geometry.dilation, [](int64_t d) { return d != 1; }))
    return ctx.skip(*node, "it is dilated");
  // The weight's dtype is the convolution's: a lowering before this pass changes weights and
  // casts, and the values between them keep the dtype they were traced with. The call checks
  // its input and runs ATen's convolution for any other dtype.
  if ((weight.dtype != "float32" && weight.dtype != "bfloat16") || weight.device != "cpu")
    return ctx.skip(*node, "fxopt's kernel takes float32 or bfloat16 weights on the CPU, not " +
                               weight.dtype + " on " + weight.device);
  std::optional<Clamp> clamp;  // set only where the activation stays fused
  if (fusion->add || !fusion->activation || !(clamp = clamp_of(fusion->activation->name)))
    fusion->unfuse();

  // The four sides' zeros: the convolution's own padding plus the pad's.
  std::optional<ZeroPad> pad = spatial_pad(conv.input);
  std::vector<int64_t> sides = {fusion->geometry.padding[0], fusion->geometry.padding[0],
                                fusion->geometry.padding[1], fusion->geometry.padding[1]};
  if (pad)
    for (size_t i = 0; i < 4; ++i) sides[i] += pad->widths[i < 2 ? i + 2 : i - 2];
  Node* input = pad ? pad->input : conv.input;

  const std::vector<int64_t>& image = input->shape();
  int64_t batch = image.size() == 4 ? image[0] : 1;
  std::vector<int64_t> shape = {batch,
                                channels,
                                image.empty() ? -1 : image[image.size() - 2],
                                image.empty() ? -1 : image.back(),
                                weight.dim(2),
                                weight.dim(3),
                                fusion->geometry.stride[0],
                                fusion->geometry.stride[1]};
  shape.insert(shape.end(), sides.begin(), sides.end());
  std::string variant = std::string(fusion->activation ? fusion->activation->name : "none") +
                        (conv.params.tensor("bias") ? "" : ",no_bias");
  std::vector<std::string> kernels = {"left", "fxopt"};
  std::string kernel = ctx.choose(*node, ChoiceQuery{"depthwise_conv2d", shape, weight.dtype,
                                                     variant, input->name(), kernels, 1});
  if (kernel != "fxopt")
    return ctx.skip(*node,
                    "the convolution as it is was measured faster here (see the "
                    "pass's choices)");

  std::vector<Node*> pattern = fusion->pattern();
  if (pad) pattern.insert(pattern.begin(), conv.input);
  Node* inputs[] = {input};
  std::optional<Arg> captured = capture_nodes(pattern, inputs);
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");

  Node* result = pattern.back();
  Args args = {input,
               stored_tensor_operand(rewriter, conv.params, result, "weight"),
               stored_tensor_operand(rewriter, conv.params, result, "bias"),
               int_list(fusion->geometry.stride),
               int_list(sides),
               clamp ? clamp->lower : Arg(None{}),
               clamp ? clamp->upper : Arg(None{})};
  replace_by_fused_call(ctx, pattern, std::move(*captured), kDepthwiseConv, "depthwise_conv",
                        std::move(args));
}

void FuseDepthwiseConv::restore(PassContext& ctx, Node* node, const RecordReader& record) const {
  if (node->args().size() != kArity || !node->args()[0].node())
    throw PassError(*node, "is no longer the depthwise convolution this transformation made");
  Node* inputs[] = {node->args()[0].node()};
  restore_fused_chain(ctx, node, record, inputs, {1, 2});
}

}  // namespace fxopt
