#include "passes/fuse_conv_activation_onednn.h"

#include <algorithm>

#include "ops/attention.h"
#include "ops/conv.h"
#include "passes/fused_call.h"
#include "passes/onednn_dtypes.h"
#include "passes/onednn_post_op.h"
#include "rewrite/capture.h"

namespace fxopt {
namespace {

// The Python function that packs the weight and runs oneDNN (python/fxopt/runtime/onednn_conv.py).
const Symbol kConvPointwise = Symbol::intern("fxopt.runtime.onednn_conv.conv_pointwise");
constexpr size_t kArity = 11;

bool is_in_place_add(const Node& node) {
  static const Symbol iadd = Symbol::intern("_operator.iadd");
  static const Symbol aten = Symbol::intern("aten.add_.Tensor");
  static const Symbol method = Symbol::intern("add_");
  return node.is(NodeKind::CallFunction, iadd) || node.is(NodeKind::CallFunction, aten) ||
         node.is(NodeKind::CallMethod, method);
}

// `conv + residual` (either order, no alpha) or `conv += residual` (operator, ATen or method),
// read by nothing else.
struct ResidualAdd {
  Node* node;
  Node* residual;
};
std::optional<ResidualAdd> residual_add(Node* conv) {
  if (conv->users().size() != 1) return std::nullopt;
  Node* user = conv->users().front();
  Node* other = nullptr;
  if (std::optional<TensorPair> add = as_tensor_add(*user))
    other = add->a == conv ? add->b : add->a;
  else if (is_in_place_add(*user) && user->args().size() == 2 && user->kwargs().items.empty() &&
           user->args()[0].node() == conv)
    other = user->args()[1].node();  // conv += r writes conv's value only
  if (!other || other == conv) return std::nullopt;
  bool known = std::ranges::none_of(conv->shape(), [](int64_t d) { return d < 0; });
  if (!known || other->shape() != conv->shape() || other->dtype() != conv->dtype())
    return std::nullopt;
  return ResidualAdd{user, other};
}

}  // namespace

FuseConvActivationOneDnn::FuseConvActivationOneDnn(std::vector<std::string> dtypes)
    : dtypes_(std::move(dtypes)) {}

std::unique_ptr<Pass> FuseConvActivationOneDnn::from_options(const Dict& options) {
  return std::make_unique<FuseConvActivationOneDnn>(onednn_dtypes_option(options));
}

std::vector<Trigger> FuseConvActivationOneDnn::triggers() const { return conv_triggers(); }

void FuseConvActivationOneDnn::rewrite(PassContext& ctx, Node* node) const {
  Rewriter& rewriter = ctx.rewriter;
  const Program& program = rewriter.program();
  std::string why_not;
  std::optional<Conv> conv = as_conv(program, node, &why_not);
  if (!conv) return ctx.skip(*node, why_not);
  if (conv->spatial_dims != 2 || conv->transposed)
    return ctx.skip(*node, "oneDNN's fused convolution here takes 2-D, not transposed, ones");
  std::optional<ConvGeometry> geometry = conv_geometry(program, *conv, &why_not);
  if (!geometry) return ctx.skip(*node, why_not);
  if (std::optional<std::string> refusal = onednn_refusal(
          dtypes_, conv->weight().dtype, conv->weight().device, "oneDNN's fused convolution"))
    return ctx.skip(*node, *refusal);
  // Sizes for the kernel chooser: unknown ones (a symbolic trace records none) leave the choice
  // to the static fallback; an unbatched input runs as a batch of one.
  std::vector<int64_t> in = conv->input->shape();
  if (in.size() == 3) in.insert(in.begin(), 1);
  if (in.empty()) in.assign(4, -1);
  if (in.size() != 4) return ctx.skip(*node, "its input is neither 3-D nor 4-D");

  // What could run in the same call: a residual add, then an activation of the last result.
  std::optional<ResidualAdd> add = residual_add(node);
  std::optional<FusableActivation> activation = fusable_activation(program, add ? add->node : node);
  // After an add, oneDNN's binary convolution applies ReLU only ("Unary Fusion behavior
  // undefined" for the others).
  if (add && activation && activation->name != "relu") activation.reset();
  bool fusable = add || activation;
  std::vector<std::string> kernels = {"aten", fusable ? "onednn_fused" : "onednn"};
  const TensorInfo& w = conv->weight();
  std::vector<int64_t> shape = {in[0], in[1], in[2], in[3], w.dim(0), w.dim(2), w.dim(3)};
  for (const std::vector<int64_t>* v : {&geometry->stride, &geometry->padding, &geometry->dilation})
    shape.insert(shape.end(), v->begin(), v->end());
  shape.push_back(conv->groups);
  std::string variant = std::string(activation ? activation->name : "none") + (add ? ",add" : "") +
                        (conv->params.tensor("bias") ? "" : ",no_bias");
  std::string kernel =
      ctx.choose(*node, ChoiceQuery{"conv2d", shape, w.dtype, variant, conv->input->name(), kernels,
                                    kernels.size() - 1});
  if (kernel == "aten")
    return ctx.skip(*node, "ATen's convolution was measured faster here (see the pass's choices)");
  if (kernel != "onednn_fused") {
    add.reset();
    activation.reset();
  }

  std::vector<Node*> pattern = {node};
  if (add) pattern.push_back(add->node);
  if (activation) pattern.push_back(activation->node);
  std::vector<Node*> inputs = {conv->input};
  if (add) inputs.push_back(add->residual);
  std::optional<Arg> captured = capture_nodes(pattern, inputs);
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");

  Node* result = pattern.back();
  PostOp op = activation ? activation->op : no_post_op();
  Args args = {conv->input,
               stored_tensor_operand(rewriter, conv->params, result, "weight"),
               stored_tensor_operand(rewriter, conv->params, result, "bias"),
               int_list(geometry->stride),
               int_list(geometry->padding),
               int_list(geometry->dilation),
               conv->groups,
               add ? Arg(add->residual) : Arg(None{}),
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
