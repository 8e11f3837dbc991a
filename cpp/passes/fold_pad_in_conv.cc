#include "passes/fold_pad_in_conv.h"

#include "ops/conv.h"
#include "ops/pad.h"
#include "passes/fused_call.h"
#include "rewrite/capture.h"

namespace fxopt {
namespace {

constexpr size_t kArity = 7;  // convNd(input, weight, bias, stride, padding, dilation, groups)

// The convolution's padding with `widths` (torch's order: last dimension first) added, or
// nullopt where the pad is not symmetric on the spatial dimensions or pads any other.
std::optional<std::vector<int64_t>> folded_padding(std::vector<int64_t> padding,
                                                   const std::vector<int64_t>& widths) {
  size_t spatial = padding.size();
  for (size_t i = 0; 2 * i < widths.size(); ++i) {
    int64_t left = widths[2 * i], right = widths[2 * i + 1];
    if (i >= spatial) {
      if (left || right) return std::nullopt;
      continue;
    }
    if (left != right) return std::nullopt;
    padding[spatial - 1 - i] += left;
  }
  return padding;
}

Symbol conv_target(const Node& conv, int spatial_dims) {
  std::string name = "conv" + std::to_string(spatial_dims) + "d";
  bool aten = conv.kind() == NodeKind::CallFunction && conv.target().str().starts_with("aten.");
  return Symbol::intern(aten ? "aten." + name + ".default" : "torch." + name);
}

}  // namespace

std::vector<Trigger> FoldPadInConv::triggers() const { return pad_triggers(); }

void FoldPadInConv::rewrite(PassContext& ctx, Node* node) const {
  Rewriter& rewriter = ctx.rewriter;
  std::string why_not;
  std::optional<ZeroPad> pad = as_zero_pad(*node, &why_not);
  if (!pad) return ctx.skip(*node, why_not);
  if (node->users().size() != 1) return ctx.skip(*node, "it has more than one reader");
  Node* reader = node->users().front();
  std::optional<Conv> conv = as_conv(rewriter.program(), reader, &why_not);
  if (!conv) return ctx.skip(*node, "its reader is not a convolution: " + why_not);
  if (conv->input != node || conv->transposed)
    return ctx.skip(*node, "its reader is a transposed convolution or reads it as a weight");
  std::optional<ConvGeometry> geometry = conv_geometry(rewriter.program(), *conv, &why_not);
  if (!geometry) return ctx.skip(*node, "its convolution's " + why_not);
  std::optional<std::vector<int64_t>> padding = folded_padding(geometry->padding, pad->widths);
  if (!padding)
    return ctx.skip(*node,
                    "it pads two sides of a dimension differently, or a batch or channel "
                    "dimension; a convolution pads each spatial dimension symmetrically");
  std::vector<Node*> chain = {node, reader}, inputs = {pad->input};
  std::optional<Arg> captured = capture_nodes(chain, inputs);
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");

  Args args = {pad->input,
               stored_tensor_operand(rewriter, conv->params, reader, "weight"),
               stored_tensor_operand(rewriter, conv->params, reader, "bias"),
               int_list(geometry->stride),
               int_list(*padding),
               int_list(geometry->dilation),
               conv->groups};
  replace_by_fused_call(ctx, chain, std::move(*captured), conv_target(*reader, conv->spatial_dims),
                        "conv_padded", std::move(args));
}

void FoldPadInConv::restore(PassContext& ctx, Node* node, const RecordReader& record) const {
  if (node->args().size() != kArity || !node->args()[0].node())
    throw PassError(*node, "is no longer the convolution this transformation made");
  Node* inputs[] = {node->args()[0].node()};
  restore_fused_chain(ctx, node, record, inputs, {1, 2});
}

}  // namespace fxopt
