#include "passes/quantize_linears_weight_only.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "ops/targets.h"
#include "passes/linear_chain.h"
#include "passes/linear_choice.h"
#include "passes/linear_rewrite.h"
#include "passes/op_chain.h"
#include "passes/pass_options.h"
#include "rewrite/capture.h"

namespace fxopt {
namespace {

const Symbol kToCopy = Symbol::intern("aten._to_copy.default");
const Symbol kInt8PackMm = Symbol::intern("aten._weight_int8pack_mm.default");
const Symbol kInt4PackMm = Symbol::intern("aten._weight_int4pack_mm_for_cpu.default");
using targets::kInt4WeightLinear;
using targets::kInt8WeightLinear;

const char* const kWhat = "weight-only quantized Linear";

// The pass's own fields of the chain's record (passes/linear_chain.h): whether x is cast to the
// activation dtype and back, and the weight's bits.
constexpr RecordKey<bool> kCast{"cast"};
constexpr RecordKey<int64_t> kBits{"bits"};
constexpr RecordKey<bool> kOwnKernel{"own_kernel"};  // fxopt's kernel, not ATen's

// The product a chain calls.
Symbol product(int64_t bits, bool own_kernel) {
  if (bits == 4) return own_kernel ? kInt4WeightLinear : kInt4PackMm;
  return own_kernel ? kInt8WeightLinear : kInt8PackMm;
}

Kwargs dtype_kwarg(const Arg& dtype) {
  Kwargs kwargs;
  kwargs.set("dtype", dtype);
  return kwargs;
}

}  // namespace

QuantizeLinearsWeightOnly::QuantizeLinearsWeightOnly(std::string activation, Arg activation_dtype,
                                                     Arg float32_dtype, int bits,
                                                     int64_t group_size)
    : activation_(std::move(activation)),
      activation_dtype_(std::move(activation_dtype)),
      float32_dtype_(std::move(float32_dtype)),
      bits_(bits),
      group_size_(group_size) {
  if (activation_ != "float32" && activation_ != "bfloat16")
    throw std::invalid_argument("option 'activation' must be 'float32' or 'bfloat16', not '" +
                                activation_ + "'");
  if (bits_ != 8 && bits_ != 4) throw std::invalid_argument("option 'bits' must be 8 or 4");
  if (group_size_ <= 0 || group_size_ % 2 != 0)
    throw std::invalid_argument("option 'group_size' must be a positive even number");
}

std::unique_ptr<Pass> QuantizeLinearsWeightOnly::from_options(const Dict& options) {
  std::string activation = string_option(options, "activation");
  const Arg* activation_dtype = options.find("activation_dtype");
  const Arg* float32_dtype = options.find("float32_dtype");
  bool cast = activation != "float32";
  if (cast && (!activation_dtype || !activation_dtype->is<Opaque>() || !float32_dtype ||
               !float32_dtype->is<Opaque>()))
    throw std::invalid_argument(
        "options 'activation_dtype' and 'float32_dtype' must be torch dtype objects");
  return std::make_unique<QuantizeLinearsWeightOnly>(
      activation, activation_dtype ? *activation_dtype : Arg(None{}),
      float32_dtype ? *float32_dtype : Arg(None{}), int(integer_option(options, "bits", 8)),
      integer_option(options, "group_size", 32));
}

std::vector<Trigger> QuantizeLinearsWeightOnly::triggers() const { return linear_triggers(); }

void QuantizeLinearsWeightOnly::rewrite(PassContext& ctx, Node* node) const {
  Rewriter& rewriter = ctx.rewriter;
  std::optional<QuantizableLinear> found = quantizable_linear(ctx, node, "the kernel");
  if (!found) return;
  const auto& [view, rank] = *found;
  if (bits_ == 4 && view.in_features % group_size_ != 0)
    return ctx.skip(*node, "int4: its in_features " + std::to_string(view.in_features) +
                               " is not a multiple of the group size " +
                               std::to_string(group_size_));
  // ATen's int8 kernel with bfloat16 activations reads in_features in blocks of 16: at other
  // sizes it returned wrong values (24, 40) or crashed (below 8), torch 2.13 on AVX512. Checked
  // before the kernel choice, whose timing would run it on this shape.
  if (bits_ == 8 && activation_ == "bfloat16" && view.in_features % 16 != 0)
    return ctx.skip(*node, "its in_features " + std::to_string(view.in_features) +
                               " is not a multiple of 16, which ATen's int8 kernel needs with "
                               "bfloat16 activations");
  // int4: ATen's kernel packs output channels in tiles of 16, fxopt's reads groups in runs of
  // 32 columns; the candidates are those that can take this Linear.
  bool atens_int4 = view.out_features % 16 == 0, own_int4 = group_size_ % 32 == 0;
  if (bits_ == 4 && !atens_int4 && !own_int4)
    return ctx.skip(*node, "int4: its out_features " + std::to_string(view.out_features) +
                               " is not a multiple of 16 (ATen's packing) and the group size " +
                               std::to_string(group_size_) + " not of 32 (fxopt's kernel)");
  Node* inputs[] = {view.input};
  Node* pattern[] = {node};
  std::optional<Arg> captured = capture_nodes(pattern, inputs);
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");
  // Per Linear the chooser picks float32 (then nothing changes), ATen's kernel or fxopt's own.
  std::string op = bits_ == 8 ? "int8_weight_only" : "int4_weight_only";
  std::string own = bits_ == 8 ? "fxopt_int8" : "fxopt_int4";
  std::vector<std::string> candidates = {"float32"};
  if (bits_ == 8 || atens_int4) candidates.push_back(op);
  if (bits_ == 8 || own_int4) candidates.push_back(own);
  // Without a cast, fxopt's kernel is the static choice: ATen's takes float32 activations 4-5x
  // slower than a float32 Linear. Where the Linear's shape rules that kernel out, the other one
  // (the last candidate).
  auto static_pick =
      std::find(candidates.begin(), candidates.end(), activation_ == "float32" ? own : op);
  size_t fallback = std::min(size_t(static_pick - candidates.begin()), candidates.size() - 1);
  ChoiceQuery query = linear_choice_query(view, op, "none", candidates, fallback);
  query.dtype = activation_;  // what ATen's kernel multiplies in: its speed depends on it
  std::string picked = ctx.choose(*node, query);
  if (picked == "float32")
    return ctx.skip(*node,
                    "the float32 Linear was measured faster here at this shape (see the pass's "
                    "choices)");
  bool own_kernel = picked == own;

  const TensorInfo& weight = *view.params.tensor("weight");
  bool cast = activation_ != "float32" && !own_kernel;  // fxopt's kernel takes float32
  TensorInfo values, scales;
  if (bits_ == 8) {
    QuantizedRows quantized = ctx.tensors.quantize_rows_int8(weight, 127);
    values = quantized.values, scales = quantized.scales;
  } else {
    QuantizedGroups quantized = ctx.tensors.quantize_groups_int4(
        weight, group_size_, own_kernel ? Int4Layout::kFxopt : Int4Layout::kAten);
    values = quantized.values, scales = quantized.scales_and_zeros;
  }
  if (cast) scales = ctx.tensors.cast(scales, activation_);
  // Next to the weight: the module's own, or the attribute the get_attr operand reads.
  std::string base =
      view.weight_node ? view.weight_node->target().str() : view.module() + ".weight";
  std::string suffix = bits_ == 8 ? "_int8wo" : "_int4wo";
  std::string values_path = rewriter.unique_path(base + suffix);
  rewriter.set_attribute(values_path, values);
  std::string scales_path =
      rewriter.unique_path(base + suffix + (bits_ == 8 ? "_scale" : "_scale_zeros"));
  rewriter.set_attribute(scales_path, scales);

  ChainBuilder chain(rewriter, node);
  Node* x = view.input;
  if (cast) x = chain.call(kToCopy, "to_activation", {x}, dtype_kwarg(activation_dtype_));
  // fxopt's kernel takes x with its leading sizes, as a Linear does: no flatten, no unflatten.
  int chain_rank = own_kernel ? 2 : rank;
  x = flat_linear_input(chain, view, x, chain_rank);
  Node* values_read = rewriter.read_attribute(node, values_path);
  Node* scales_read = rewriter.read_attribute(node, scales_path);
  Node* y =
      bits_ == 4 && !own_kernel
          ? chain.call(kInt4PackMm, "int4_weight_mm", {x, values_read, group_size_, scales_read})
          : chain.call(product(bits_, own_kernel), bits_ == 4 ? "int4_weight_mm" : "int8_weight_mm",
                       {x, values_read, scales_read});
  if (cast) y = chain.call(kToCopy, "to_float32", {y}, dtype_kwarg(float32_dtype_));
  Record extra;
  extra.set(kCast, cast);
  extra.set(kBits, bits_);
  extra.set(kOwnKernel, own_kernel);
  end_linear_chain(ctx, chain, view, node, y, chain_rank, "int8wo_linear", /*use_recorded=*/false,
                   std::move(*captured), {values_path, scales_path}, std::move(extra));
}

void QuantizeLinearsWeightOnly::restore(PassContext& ctx, Node* node,
                                        const RecordReader& record) const {
  bool cast = record.get(kCast);
  ChainWalker walk(node, kWhat);
  Node* y = walk_linear_chain_end(walk, node, record);
  if (cast) y = walk.operand(y, kToCopy, 0);
  Node* x = walk.operand(y, product(record.get(kBits), record.get(kOwnKernel)), 0);
  if (linear_chain_flattened(record)) x = walk.operand(x, kReshape, 0);
  if (cast) x = walk.operand(x, kToCopy, 0);
  restore_linear_chain(ctx, walk, node, x, record);
}

}  // namespace fxopt
