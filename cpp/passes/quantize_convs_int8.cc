#include "passes/quantize_convs_int8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string_view>

#include "ops/effects.h"
#include "ops/targets.h"
#include "passes/conv_fusion.h"
#include "passes/fused_call.h"
#include "passes/onednn_dtypes.h"
#include "passes/pass_options.h"
#include "rewrite/capture.h"

namespace fxopt {
namespace {

using targets::kInt8Conv2d;
constexpr size_t kArity = targets::kInt8Conv2dKernel + 1;
const char* const kInt8 = "int8_onednn";
const char* const kInt8Fxopt = "int8_fxopt";

// The activations oneDNN's int8 convolution applies to a float result, as ops/activation.h
// names them (after a residual add, ReLU only: passes/conv_fusion.h).
constexpr std::array<std::string_view, 4> kInt8Activations = {"relu", "relu6", "hardswish", "silu"};
// Those fxopt's int8 kernel applies, as a clamp.
constexpr std::array<std::string_view, 2> kFxoptActivations = {"relu", "relu6"};

// Whether the call may add into the residual's memory (see the header): a tensor of its own
// whose other readers all run before the add and make tensors of their own, so no view of it
// is read after the call either.
bool residual_dies(const Program& program, const std::optional<ResidualAdd>& add) {
  if (!add || !fresh_result(program, *add->residual)) return false;
  return std::ranges::all_of(add->residual->users(), [&](const Node* reader) {
    return reader == add->node ||
           (program.graph.before(reader, add->node) && fresh_result(program, *reader));
  });
}

bool valid(const InputQuantization& q) {
  return std::isfinite(q.scale) && q.scale > 0 && q.zero_point >= 0 && q.zero_point <= 255;
}

// The weight as int8 values per output channel (its own shape) and their scales, stored next
// to it. Returns the two paths.
std::pair<std::string, std::string> store_weight(PassContext& ctx, const Conv& conv) {
  Rewriter& rewriter = ctx.rewriter;
  const TensorInfo& weight = conv.weight();
  int64_t out = weight.dim(0);
  int64_t rest = 1;
  for (size_t d = 1; d < weight.shape.size(); ++d) rest *= weight.dim(d);
  QuantizedRows quantized =
      ctx.tensors.quantize_rows_int8(ctx.tensors.reshape(weight, {out, rest}), 127);
  const StoredParams& params = conv.params;
  std::string base =
      params.module.empty()
          ? params.node->input(params.find("weight")->index, "weight")->node()->target().str()
          : params.module + ".weight";
  std::string values_path = rewriter.unique_path(base + "_int8");
  rewriter.set_attribute(values_path, ctx.tensors.reshape(quantized.values, weight.shape));
  std::string scales_path = rewriter.unique_path(base + "_int8_scale");
  rewriter.set_attribute(scales_path, quantized.scales);
  return {values_path, scales_path};
}

}  // namespace

QuantizeConvsInt8::QuantizeConvsInt8(std::map<std::string, InputQuantization> input_scales,
                                     std::string compare_with, bool choose_only)
    : input_scales_(std::move(input_scales)),
      compare_with_(std::move(compare_with)),
      choose_only_(choose_only) {
  check_compare_with(compare_with_);
}

std::unique_ptr<Pass> QuantizeConvsInt8::from_options(const Dict& options) {
  std::map<std::string, InputQuantization> input_scales;
  if (const Arg* given = options.find("input_scales")) {
    if (!given->is<Dict>())
      throw std::invalid_argument(
          "option 'input_scales' must map convolution node names to [scale, zero point]");
    for (const auto& [name, value] : given->as<Dict>().items) {
      const std::vector<Arg>* pair = value.sequence();
      std::optional<double> scale = pair && pair->size() == 2 ? (*pair)[0].number() : std::nullopt;
      if (!scale || !(*pair)[1].is<int64_t>())
        throw std::invalid_argument("input scale of '" + name +
                                    "' must be [scale, zero point] (a number and an integer)");
      input_scales[name] = {*scale, (*pair)[1].as<int64_t>()};
    }
  }
  return std::make_unique<QuantizeConvsInt8>(std::move(input_scales),
                                             string_option(options, "compare_with", "float32"),
                                             bool_option(options, "choose_only", false));
}

std::vector<Trigger> QuantizeConvsInt8::triggers() const { return conv_triggers(); }

void QuantizeConvsInt8::rewrite(PassContext& ctx, Node* node) const {
  auto found = input_scales_.find(node->name());
  if (!choose_only_ && found == input_scales_.end())
    return ctx.skip(*node, "no calibrated input scale (option 'input_scales')");
  if (!choose_only_ && !valid(found->second))
    return ctx.skip(*node,
                    "its input scale is not positive and finite with a zero point in "
                    "[0, 255]");
  Rewriter& rewriter = ctx.rewriter;
  std::string why_not;
  std::optional<ConvFusion> fusion = conv_fusion(rewriter.program(), node, &why_not);
  if (!fusion) return ctx.skip(*node, why_not);
  const Conv& conv = fusion->conv;
  if (std::optional<std::string> refusal =
          onednn_refusal({"float32"}, conv.weight().dtype, conv.weight().device, "int8"))
    return ctx.skip(*node, *refusal);
  if (fusion->activation &&
      std::ranges::find(kInt8Activations, fusion->activation->name) == kInt8Activations.end())
    fusion->activation.reset();

  bool dies = residual_dies(rewriter.program(), fusion->add);
  std::vector<std::string> kernels = {compare_with_, kInt8};
  // Left in float, a convolution one of fxopt's kernels takes runs there where that measures
  // faster: the int8 call must beat it too.
  bool own_kernel =
      is_pointwise(*fusion) ||
      (is_depthwise(*fusion) &&
       std::ranges::all_of(fusion->geometry.dilation, [](int64_t d) { return d == 1; }));
  if (own_kernel) kernels.push_back(compare_with_ + "_fxopt");
  if (is_pointwise(*fusion) &&
      (!fusion->activation ||
       std::ranges::find(kFxoptActivations, fusion->activation->name) != kFxoptActivations.end()))
    kernels.push_back(kInt8Fxopt);
  std::string kernel =
      ctx.choose(*node, ChoiceQuery{"int8_conv2d", fusion->choice_shape(), compare_with_,
                                    fusion->choice_variant() + (dies ? ",owned" : ""),
                                    conv.input->name(), kernels, 1});
  if (kernel != kInt8 && kernel != kInt8Fxopt)
    return ctx.skip(
        *node, "the " + kernel + " convolution was measured faster here (see the pass's choices)");
  if (choose_only_) return ctx.skip(*node, "option 'choose_only': its kernel is in the choices");

  std::vector<Node*> pattern = fusion->pattern();
  std::optional<Arg> captured = capture_nodes(pattern, fusion->inputs());
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");

  Node* result = pattern.back();
  auto [values_path, scales_path] = store_weight(ctx, conv);
  PostOp op = fusion->activation ? fusion->activation->op : no_post_op();
  Args args = {conv.input,
               rewriter.read_attribute(result, values_path),
               rewriter.read_attribute(result, scales_path),
               stored_tensor_operand(rewriter, conv.params, result, "bias"),
               int_list(fusion->geometry.stride),
               int_list(fusion->geometry.padding),
               int_list(fusion->geometry.dilation),
               conv.groups,
               found->second.scale,
               found->second.zero_point,
               fusion->add ? Arg(fusion->add->residual) : Arg(None{}),
               op.attr,
               op.scalars,
               op.algorithm,
               dies,
               Arg(std::string(kernel == kInt8Fxopt ? "fxopt" : "onednn"))};
  replace_by_fused_call(ctx, pattern, std::move(*captured), kInt8Conv2d, "int8_conv2d",
                        std::move(args));
}

void QuantizeConvsInt8::restore(PassContext& ctx, Node* node, const RecordReader& record) const {
  // A graph saved before the call took its kernel (and residual_dies) holds fewer arguments.
  size_t arity = node->args().size();
  if (arity > kArity || arity < kArity - 2 || !node->args()[0].node())
    throw PassError(*node, "is no longer the int8 convolution this transformation made");
  std::vector<Node*> inputs = {node->args()[0].node()};
  if (Node* residual = node->args()[10].node()) inputs.push_back(residual);
  restore_fused_chain(ctx, node, record, inputs, {3}, {1, 2});
}

}  // namespace fxopt
