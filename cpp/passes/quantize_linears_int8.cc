#include "passes/quantize_linears_int8.h"

#include <algorithm>
#include <array>
#include <bit>
#include <optional>
#include <stdexcept>
#include <string>

#include "ops/targets.h"
#include "passes/linear_chain.h"
#include "passes/linear_choice.h"
#include "passes/linear_rewrite.h"
#include "passes/onednn_post_op.h"
#include "passes/op_chain.h"
#include "passes/pass_options.h"
#include "rewrite/capture.h"

namespace fxopt {
namespace {

using targets::kDynamicInt8Linear;
using targets::kPerTokenInt8Linear;
const char* const kPerToken = "int8_per_token";
const char* const kOneDnn = "int8_onednn";
const char* const kFbgemm = "int8_fbgemm";

// Where the pass stores what it derives from a weight: next to the module's own, or the
// attribute the get_attr operand reads.
std::string weight_base(const LinearView& view) {
  return view.weight_node ? view.weight_node->target().str() : view.module() + ".weight";
}

// The weight as int8 rows and their scales, stored next to it, with its columns for the
// `outliers` input channels zeroed first (the per-token kernel leaves those channels to their
// float product, so the scales fit the others). Returns the two paths.
std::pair<std::string, std::string> store_weight(PassContext& ctx, const LinearView& view,
                                                 bool transposed, int max_level,
                                                 const std::vector<int64_t>& outliers) {
  Rewriter& rewriter = ctx.rewriter;
  TensorInfo weight = *view.params.tensor("weight");
  if (!outliers.empty()) {
    std::vector<double> kept(size_t(view.in_features), 1.0);
    for (int64_t c : outliers) kept[size_t(c)] = 0.0;
    weight = ctx.tensors.mul(weight, ctx.tensors.from_values(kept, weight));
  }
  QuantizedRows quantized = ctx.tensors.quantize_rows_int8(weight, max_level);
  std::string values_path = rewriter.unique_path(weight_base(view) + "_int8");
  rewriter.set_attribute(
      values_path, transposed ? ctx.tensors.transpose(quantized.values, 0, 1) : quantized.values);
  std::string scales_path = rewriter.unique_path(weight_base(view) + "_int8_scale");
  rewriter.set_attribute(scales_path, quantized.scales);
  return {values_path, scales_path};
}

// The float weight's columns for the outlier channels as rows [channels, N] float32, stored next
// to the weight; returns the path.
std::string store_outlier_weight(PassContext& ctx, const LinearView& view,
                                 const std::vector<int64_t>& outliers) {
  const TensorInfo& weight = *view.params.tensor("weight");
  std::vector<TensorInfo> columns;
  for (int64_t c : outliers) columns.push_back(ctx.tensors.slice(weight, 1, c, c + 1));
  std::string path = ctx.rewriter.unique_path(weight_base(view) + "_int8_outliers");
  ctx.rewriter.set_attribute(path, ctx.tensors.transpose(ctx.tensors.cat(columns, 1), 0, 1));
  return path;
}

// The activations the per-token kernel applies to its result (kernels/per_token_int8.h), as
// ops/activation.h names them.
constexpr std::array<std::string_view, 4> kPerTokenActivations = {"relu", "gelu", "gelu_tanh",
                                                                  "silu"};

// The activation reading only the Linear's result, if the per-token kernel can apply it.
std::optional<FusableActivation> per_token_activation(const Program& program, Node* linear) {
  std::optional<FusableActivation> activation = fusable_activation(program, linear);
  if (activation &&
      std::ranges::find(kPerTokenActivations, activation->name) == kPerTokenActivations.end())
    activation.reset();
  return activation;
}

// One call that takes x of any rank and the bias as they are: the per-token kernel (the weight
// transposed to [K, N] for aten._int_mm; with `activation`, which it applies too) or a packed
// engine's, either with the `outliers` channels it leaves to their float product.
void int8_call(PassContext& ctx, Node* node, const LinearView& view, const std::string& kernel,
               int max_level, const std::optional<FusableActivation>& activation,
               const std::vector<int64_t>& outliers, Arg captured) {
  Rewriter& rewriter = ctx.rewriter;
  bool per_token = kernel == kPerToken;
  auto [values_path, scales_path] = store_weight(ctx, view, per_token, max_level, outliers);
  std::vector<std::string> stored = {values_path, scales_path};
  Arg bias = view.has_bias() ? read_linear_tensor(rewriter, view, node, "bias") : Arg{};
  Args args = {view.input, rewriter.read_attribute(node, values_path),
               rewriter.read_attribute(node, scales_path), std::move(bias)};
  if (!per_token) args.push_back(kernel.substr(std::string_view("int8_").size()));  // the engine
  // The per-token call's activation operand comes before its outliers.
  if (per_token && (activation || !outliers.empty()))
    args.push_back(activation ? activation->name : "none");
  if (!outliers.empty()) {
    stored.push_back(store_outlier_weight(ctx, view, outliers));
    args.push_back(int_list(outliers));
    args.push_back(rewriter.read_attribute(node, stored.back()));
  }
  Node* y = ChainBuilder(rewriter, node)
                .call(per_token ? kPerTokenInt8Linear : kDynamicInt8Linear, "int8_linear",
                      std::move(args));
  replace_linear(ctx, view, node, y, std::move(captured), std::move(stored), {}, {},
                 activation ? activation->node : nullptr);
}

// The outlier channels of `node` that fit a Linear of `in_features` inputs, or why not.
std::optional<std::string> outliers_unfit(const std::vector<int64_t>& outliers,
                                          int64_t in_features) {
  for (int64_t c : outliers)
    if (c < 0 || c >= in_features)
      return "outlier channel " + std::to_string(c) + " is not one of its " +
             std::to_string(in_features) + " input channels";
  return std::nullopt;
}

}  // namespace

QuantizeLinearsInt8::QuantizeLinearsInt8(std::vector<std::string> keep, std::string compare_with,
                                         PackedWeightMax weight_max, bool choose_only,
                                         std::map<std::string, std::vector<int64_t>> outliers,
                                         bool outliers_per_token_only)
    : keep_(std::move(keep)),
      compare_with_(std::move(compare_with)),
      weight_max_(weight_max),
      choose_only_(choose_only),
      outliers_(std::move(outliers)),
      outliers_per_token_only_(outliers_per_token_only) {
  check_compare_with(compare_with_);
  for (const auto& [name, levels] :
       {std::pair{"fbgemm", weight_max_.fbgemm}, {"onednn", weight_max_.onednn}})
    if (levels < 1 || levels > 127)
      throw std::invalid_argument("option '" + std::string(name) +
                                  "_weight_max' must be in [1, 127], not " +
                                  std::to_string(levels));
}

std::unique_ptr<Pass> QuantizeLinearsInt8::from_options(const Dict& options) {
  std::vector<std::string> keep;
  if (const Arg* names = options.find("keep")) {
    const std::vector<Arg>* items = names->sequence();
    if (!items) throw std::invalid_argument("option 'keep' must be a list of node names");
    for (const Arg& item : *items) {
      if (!item.is<std::string>())
        throw std::invalid_argument("option 'keep' must be a list of node names");
      keep.push_back(item.as<std::string>());
    }
  }
  std::map<std::string, std::vector<int64_t>> outliers;
  if (const Arg* given = options.find("outliers")) {
    const char* const malformed =
        "option 'outliers' must map Linear node names to lists of channels";
    if (!given->is<Dict>()) throw std::invalid_argument(malformed);
    for (const auto& [name, channels] : given->as<Dict>().items) {
      const std::vector<Arg>* items = channels.sequence();
      if (!items) throw std::invalid_argument(malformed);
      for (const Arg& item : *items) {
        if (!item.is<int64_t>()) throw std::invalid_argument(malformed);
        outliers[name].push_back(item.as<int64_t>());
      }
    }
  }
  // Clamped into int's range just outside the valid one, so the constructor names the value.
  auto levels = [&](const char* name) {
    return int(std::clamp<int64_t>(integer_option(options, name, 127), 0, 128));
  };
  PackedWeightMax weight_max{levels("onednn_weight_max"), levels("fbgemm_weight_max")};
  return std::make_unique<QuantizeLinearsInt8>(
      std::move(keep), string_option(options, "compare_with", "float32"), weight_max,
      bool_option(options, "choose_only", false), std::move(outliers),
      bool_option(options, "outliers_per_token_only", true));
}

std::vector<Trigger> QuantizeLinearsInt8::triggers() const { return linear_triggers(); }

void QuantizeLinearsInt8::rewrite(PassContext& ctx, Node* node) const {
  if (std::ranges::find(keep_, node->name()) != keep_.end())
    return ctx.skip(*node, "kept in float32 (option 'keep')");
  std::optional<LinearView> view = quantizable_weight(ctx, node, "the int8 path");
  if (!view) return;
  // The activation reading the Linear is part of what is timed: the per-token kernel applies it,
  // the packed ones leave it to its own op, a Linear left as it is gets it fused by oneDNN.
  std::optional<FusableActivation> activation = per_token_activation(ctx.rewriter.program(), node);
  std::vector<int64_t> outliers;
  if (auto found = outliers_.find(node->name()); found != outliers_.end()) outliers = found->second;
  if (std::optional<std::string> why = outliers_unfit(outliers, view->in_features))
    return ctx.skip(*node, *why + " (option 'outliers')");
  // Outlier channels are what one activation scale per tensor serves worst (all-MiniLM-L6-v2's
  // FFN input: 4.4% error per tensor, 0.5% per token with them set aside, 1.0% per tensor): with
  // "outliers_per_token_only" a Linear that has them chooses between the per-token kernel and
  // the float Linear.
  std::vector<std::string> kernels = {compare_with_, kPerToken, kOneDnn, kFbgemm};
  if (!outliers.empty() && outliers_per_token_only_) kernels.resize(2);
  ChoiceQuery query =
      linear_choice_query(*view, "int8_linear", activation ? activation->name : "none", kernels, 1);
  query.dtype = compare_with_;
  // The int8 kernels are timed with this Linear's outlier channels, their count rounded up to a
  // power of two: the cost grows with the count, and fewer distinct queries are timed.
  if (!outliers.empty())
    query.variant += ",outliers=" + std::to_string(std::bit_ceil(outliers.size()));
  std::string kernel = ctx.choose(*node, query);
  if (kernel == compare_with_)
    return ctx.skip(*node, "the " + compare_with_ +
                               " Linear was measured faster here, or this CPU has no fast int8 "
                               "matmul (see the pass's choices)");
  if (choose_only_) return ctx.skip(*node, "option 'choose_only': its kernel is in the choices");
  if (kernel != kPerToken) activation.reset();
  Node* inputs[] = {view->input};
  std::vector<Node*> pattern = {node};
  if (activation) pattern.push_back(activation->node);
  std::optional<Arg> captured = capture_nodes(pattern, inputs);
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");
  int levels = kernel == kFbgemm   ? weight_max_.fbgemm
               : kernel == kOneDnn ? weight_max_.onednn
                                   : 127;
  int8_call(ctx, node, *view, kernel, levels, activation, outliers, std::move(*captured));
}

void QuantizeLinearsInt8::restore(PassContext& ctx, Node* node, const RecordReader& record) const {
  ChainWalker walk(node, "int8 Linear");
  const Symbol& target =
      node->target() == kPerTokenInt8Linear ? kPerTokenInt8Linear : kDynamicInt8Linear;
  restore_linear_chain(ctx, walk, node, walk.operand(node, target, 0), record);
}

}  // namespace fxopt
