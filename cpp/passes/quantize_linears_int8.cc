#include "passes/quantize_linears_int8.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "passes/linear_chain.h"
#include "passes/linear_choice.h"
#include "passes/linear_rewrite.h"
#include "passes/op_chain.h"
#include "rewrite/capture.h"

namespace fxopt {
namespace {

const Symbol kAbs = Symbol::intern("aten.abs.default");
const Symbol kAmax = Symbol::intern("aten.amax.default");
const Symbol kDiv = Symbol::intern("aten.div.Tensor");
const Symbol kClampMin = Symbol::intern("aten.clamp_min.default");
const Symbol kRound = Symbol::intern("aten.round.default");
const Symbol kToCopy = Symbol::intern("aten._to_copy.default");
const Symbol kIntMm = Symbol::intern("aten._int_mm.default");
const Symbol kMul = Symbol::intern("aten.mul.Tensor");
// The Python function that runs torch's packed int8 GEMMs (python/fxopt/runtime/dynamic_int8.py).
const Symbol kDynamicInt8Linear = Symbol::intern("fxopt.runtime.dynamic_int8.dynamic_int8_linear");
const char* const kPerToken = "int8_per_token";
const char* const kOneDnn = "int8_onednn";
const char* const kFbgemm = "int8_fbgemm";

// The weight as int8 rows and their scales, stored next to it: the module's own, or the
// attribute the get_attr operand reads. Returns the two paths.
std::pair<std::string, std::string> store_weight(PassContext& ctx, const LinearView& view,
                                                 bool transposed, int max_level) {
  Rewriter& rewriter = ctx.rewriter;
  QuantizedRows quantized =
      ctx.tensors.quantize_rows_int8(*view.params.tensor("weight"), max_level);
  std::string base =
      view.weight_node ? view.weight_node->target().str() : view.module() + ".weight";
  std::string values_path = rewriter.unique_path(base + "_int8");
  rewriter.set_attribute(
      values_path, transposed ? ctx.tensors.transpose(quantized.values, 0, 1) : quantized.values);
  std::string scales_path = rewriter.unique_path(base + "_int8_scale");
  rewriter.set_attribute(scales_path, quantized.scales);
  return {values_path, scales_path};
}

// One call of the packed-GEMM function, which takes x of any rank and the bias as they are.
void dynamic_call(PassContext& ctx, Node* node, const LinearView& view, const char* engine,
                  int max_level, Arg captured) {
  Rewriter& rewriter = ctx.rewriter;
  auto [values_path, scales_path] = store_weight(ctx, view, /*transposed=*/false, max_level);
  Arg bias = view.has_bias() ? read_linear_tensor(rewriter, view, node, "bias") : Arg{};
  Node* y =
      ChainBuilder(rewriter, node)
          .call(kDynamicInt8Linear, "int8_linear",
                {view.input, rewriter.read_attribute(node, values_path),
                 rewriter.read_attribute(node, scales_path), std::move(bias), std::string(engine)});
  replace_linear(ctx, view, node, y, std::move(captured), {values_path, scales_path});
}

}  // namespace

QuantizeLinearsInt8::QuantizeLinearsInt8(Arg int8_dtype, std::vector<std::string> keep,
                                         std::string compare_with, int fbgemm_weight_max,
                                         bool choose_only)
    : int8_dtype_(std::move(int8_dtype)),
      keep_(std::move(keep)),
      compare_with_(std::move(compare_with)),
      fbgemm_weight_max_(fbgemm_weight_max),
      choose_only_(choose_only) {
  if (compare_with_ != "float32" && compare_with_ != "bfloat16")
    throw std::invalid_argument(
        "option 'compare_with' must be \"float32\" or \"bfloat16\", not \"" + compare_with_ + "\"");
  if (fbgemm_weight_max_ < 1 || fbgemm_weight_max_ > 127)
    throw std::invalid_argument("option 'fbgemm_weight_max' must be in [1, 127], not " +
                                std::to_string(fbgemm_weight_max_));
}

std::unique_ptr<Pass> QuantizeLinearsInt8::from_options(const Dict& options) {
  const Arg* int8 = options.find("int8");
  if (!int8 || !int8->is<Opaque>())
    throw std::invalid_argument("option 'int8' must be the torch.int8 dtype object");
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
  std::string compare_with = "float32";
  if (const Arg* dtype = options.find("compare_with")) {
    if (!dtype->is<std::string>())
      throw std::invalid_argument("option 'compare_with' must be a dtype name");
    compare_with = dtype->as<std::string>();
  }
  int fbgemm_weight_max = 127;
  if (const Arg* level = options.find("fbgemm_weight_max")) {
    if (!level->is<int64_t>())
      throw std::invalid_argument("option 'fbgemm_weight_max' must be an integer");
    fbgemm_weight_max = int(std::clamp<int64_t>(level->as<int64_t>(), 0, 128));
  }
  bool choose_only = false;
  if (const Arg* flag = options.find("choose_only")) {
    if (!flag->is<bool>()) throw std::invalid_argument("option 'choose_only' must be a bool");
    choose_only = flag->as<bool>();
  }
  return std::make_unique<QuantizeLinearsInt8>(*int8, std::move(keep), std::move(compare_with),
                                               fbgemm_weight_max, choose_only);
}

std::vector<Trigger> QuantizeLinearsInt8::triggers() const { return linear_triggers(); }

void QuantizeLinearsInt8::rewrite(PassContext& ctx, Node* node) const {
  if (std::ranges::find(keep_, node->name()) != keep_.end())
    return ctx.skip(*node, "kept in float32 (option 'keep')");
  std::optional<QuantizableLinear> found = quantizable_linear(ctx, node, "the int8 path");
  if (!found) return;
  // A lowering that follows would lower the per-token chain's ATen ops (its scales) too; the
  // packed kernels' call it keeps in float32 (ops/dtype_flow.h).
  std::vector<std::string> kernels = {compare_with_, kPerToken, kOneDnn, kFbgemm};
  if (compare_with_ != "float32") kernels.erase(kernels.begin() + 1);
  ChoiceQuery query = linear_choice_query(found->view, "int8_linear", "none", kernels, 1);
  query.dtype = compare_with_;
  std::string kernel = ctx.choose(*node, query);
  if (kernel == compare_with_)
    return ctx.skip(*node, "the " + compare_with_ +
                               " Linear was measured faster here, or this CPU has no fast int8 "
                               "matmul (see the pass's choices)");
  if (choose_only_) return ctx.skip(*node, "option 'choose_only': its kernel is in the choices");
  Node* inputs[] = {found->view.input};
  Node* pattern[] = {node};
  std::optional<Arg> captured = capture_nodes(pattern, inputs);
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");
  if (kernel == kPerToken)
    per_token_chain(ctx, node, *found, std::move(*captured));
  else if (kernel == kOneDnn)
    dynamic_call(ctx, node, found->view, "onednn", 127, std::move(*captured));
  else
    dynamic_call(ctx, node, found->view, "fbgemm", fbgemm_weight_max_, std::move(*captured));
}

void QuantizeLinearsInt8::per_token_chain(PassContext& ctx, Node* node,
                                          const QuantizableLinear& linear, Arg captured) const {
  Rewriter& rewriter = ctx.rewriter;
  const auto& [view, rank] = linear;
  auto [values_path, scales_path] = store_weight(ctx, view, /*transposed=*/true, 127);
  ChainBuilder chain(rewriter, node);
  Node* x = flat_linear_input(chain, view, view.input, rank);
  Node* peak = chain.call(kAmax, "amax", {chain.call(kAbs, "abs", {x}), List{{-1}}, true});
  Node* scale = chain.call(
      kClampMin, "token_scale",
      {chain.call(kDiv, "div", {peak, 127.0}), double(std::numeric_limits<float>::min())});
  Node* rounded = chain.call(kRound, "round", {chain.call(kDiv, "div", {x, scale})});
  Dict to_int8;
  to_int8.set("dtype", int8_dtype_);
  Node* q = chain.call(kToCopy, "quantized", {rounded}, std::move(to_int8));
  Node* product = chain.call(kIntMm, "int_mm", {q, rewriter.read_attribute(node, values_path)});
  Node* y = chain.call(kMul, "mul", {product, scale});
  y = chain.call(kMul, "mul", {y, rewriter.read_attribute(node, scales_path)});
  end_linear_chain(ctx, chain, view, node, y, rank, "int8_linear", /*use_recorded=*/true,
                   std::move(captured), {values_path, scales_path});
}

void QuantizeLinearsInt8::restore(PassContext& ctx, Node* node, const RecordReader& record) const {
  ChainWalker walk(node, "int8 Linear");
  if (node->target() == kDynamicInt8Linear)
    return restore_linear_chain(ctx, walk, node, walk.operand(node, kDynamicInt8Linear, 0), record);
  Node* scaled = walk.operand(walk_linear_chain_end(walk, node, record), kMul, 0);
  Node* product = walk.operand(scaled, kMul, 0);  // y = scaled * weight scales
  Node* scale = walk.operand(scaled, kMul, 1);    // the token scales
  Node* rounded = walk.operand(walk.operand(product, kIntMm, 0), kToCopy, 0);
  Node* x = walk.operand(walk.operand(rounded, kRound, 0), kDiv, 0);
  walk.operand(walk.operand(walk.operand(walk.operand(scale, kClampMin, 0), kDiv, 0), kAmax, 0),
               kAbs, 0);
  if (linear_chain_flattened(record)) x = walk.operand(x, kReshape, 0);
  restore_linear_chain(ctx, walk, node, x, record);
}

}  // namespace fxopt
