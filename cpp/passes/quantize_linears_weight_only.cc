#include "passes/quantize_linears_weight_only.h"

#include <stdexcept>
#include <string>

#include "passes/linear_choice.h"
#include "passes/linear_rewrite.h"
#include "passes/op_chain.h"
#include "rewrite/capture.h"

namespace fxopt {
namespace {

const Symbol kReshape = Symbol::intern("aten.reshape.default");
const Symbol kToCopy = Symbol::intern("aten._to_copy.default");
const Symbol kInt8PackMm = Symbol::intern("aten._weight_int8pack_mm.default");
const Symbol kInt4PackMm = Symbol::intern("aten._weight_int4pack_mm_for_cpu.default");
const Symbol kAdd = Symbol::intern("aten.add.Tensor");

const char* const kWhat = "weight-only quantized Linear";

// An integer option, `fallback` when absent; throws naming it if it is not an integer.
int64_t integer_option(const Dict& options, std::string_view name, int64_t fallback) {
  const Arg* value = options.find(name);
  if (!value) return fallback;
  if (!value->is<int64_t>())
    throw std::invalid_argument("option '" + std::string(name) + "' must be an integer");
  return value->as<int64_t>();
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
  const Arg* activation = options.find("activation");
  if (!activation || !activation->is<std::string>())
    throw std::invalid_argument("option 'activation' must be a string");
  const Arg* activation_dtype = options.find("activation_dtype");
  const Arg* float32_dtype = options.find("float32_dtype");
  bool cast = activation->as<std::string>() != "float32";
  if (cast && (!activation_dtype || !activation_dtype->is<Opaque>() || !float32_dtype ||
               !float32_dtype->is<Opaque>()))
    throw std::invalid_argument(
        "options 'activation_dtype' and 'float32_dtype' must be torch dtype objects");
  return std::make_unique<QuantizeLinearsWeightOnly>(
      activation->as<std::string>(), activation_dtype ? *activation_dtype : Arg(None{}),
      float32_dtype ? *float32_dtype : Arg(None{}), int(integer_option(options, "bits", 8)),
      integer_option(options, "group_size", 32));
}

std::vector<Trigger> QuantizeLinearsWeightOnly::triggers() const { return linear_triggers(); }

void QuantizeLinearsWeightOnly::rewrite(PassContext& ctx, Node* node) const {
  Rewriter& rewriter = ctx.rewriter;
  std::string why_not;
  std::optional<LinearView> view = as_linear(rewriter.program(), *node, &why_not);
  if (!view) return ctx.skip(*node, why_not);
  if (view->dtype() != "float32")
    return ctx.skip(*node, "its weight is " + view->dtype() + ", not float32");
  if (view->device() != "cpu")
    return ctx.skip(*node, "its weight is on " + view->device() + "; the kernel is CPU-only");
  std::optional<int> rank = view->input->rank();
  if (!rank || *rank < 1)
    return ctx.skip(*node,
                    "the rank of its input is not known (symbolic traces record it once "
                    "torch.fx.passes.shape_prop.ShapeProp has run)");
  if (bits_ == 4 && view->in_features % group_size_ != 0)
    return ctx.skip(*node, "int4: its in_features " + std::to_string(view->in_features) +
                               " is not a multiple of the group size " +
                               std::to_string(group_size_));
  if (bits_ == 4 && view->out_features % 16 != 0)
    return ctx.skip(*node, "int4: its out_features " + std::to_string(view->out_features) +
                               " is not a multiple of 16 (the kernel's packing)");
  Node* inputs[] = {view->input};
  Node* pattern[] = {node};
  std::optional<Arg> captured = capture_nodes(pattern, inputs);
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");
  if (bits_ == 8) {
    ChoiceQuery query =
        linear_choice_query(*view, "int8_weight_only", "none", {"float32", "int8_weight_only"}, 1);
    query.dtype = activation_;  // what the kernel multiplies in: its speed depends on it
    if (ctx.choose(*node, query) == "float32")
      return ctx.skip(*node,
                      "the float32 Linear was measured faster here at this shape (see the pass's "
                      "choices)");
  }

  const TensorInfo& weight = *view->params.tensor("weight");
  bool cast = activation_ != "float32";
  TensorInfo values, scales;
  if (bits_ == 8) {
    QuantizedRows quantized = ctx.tensors.quantize_rows_int8(weight);
    values = quantized.values, scales = quantized.scales;
  } else {
    QuantizedGroups quantized = ctx.tensors.quantize_groups_int4(weight, group_size_);
    values = quantized.values, scales = quantized.scales_and_zeros;
  }
  if (cast) scales = ctx.tensors.cast(scales, activation_);
  // Next to the weight: the module's own, or the attribute the get_attr operand reads.
  std::string base =
      view->weight_node ? view->weight_node->target().str() : view->module() + ".weight";
  std::string suffix = bits_ == 8 ? "_int8wo" : "_int4wo";
  std::string values_path = rewriter.unique_path(base + suffix);
  rewriter.set_attribute(values_path, values);
  std::string scales_path =
      rewriter.unique_path(base + suffix + (bits_ == 8 ? "_scale" : "_scale_zeros"));
  rewriter.set_attribute(scales_path, scales);

  ChainBuilder chain(rewriter, node);
  Node* x = view->input;
  if (cast) x = chain.call(kToCopy, "to_activation", {x}, dtype_kwarg(activation_dtype_));
  if (*rank != 2) x = chain.call(kReshape, "flat", {x, List{{int64_t{-1}, view->in_features}}});
  Node* values_read = rewriter.read_attribute(node, values_path);
  Node* scales_read = rewriter.read_attribute(node, scales_path);
  Node* y = bits_ == 8 ? chain.call(kInt8PackMm, "int8_weight_mm", {x, values_read, scales_read})
                       : chain.call(kInt4PackMm, "int4_weight_mm",
                                    {x, values_read, group_size_, scales_read});
  if (cast) y = chain.call(kToCopy, "to_float32", {y}, dtype_kwarg(float32_dtype_));
  if (view->has_bias())
    y = chain.call(kAdd, "add", {y, read_linear_tensor(rewriter, *view, node, "bias")});
  if (*rank != 2)
    y = chain.call(kReshape, "int8wo_linear",
                   {y, output_shape(chain, view->input, *rank, view->out_features, false)});

  Node* weight_read = view->weight_node;
  rewriter.replace_and_erase(node, y);
  if (weight_read) rewriter.erase_if_unused_read(weight_read);

  Record record;
  record.set("nodes", std::move(*captured));
  record.set("flattened", *rank != 2);
  record.set("cast", cast);
  record.set("bits", int64_t{bits_});
  record.set("bias", view->has_bias());
  record.set("attributes", Tuple{{values_path, scales_path}});
  set_reversal_record(rewriter, y, ctx.signature, record);
  ctx.changed(y);
}

void QuantizeLinearsWeightOnly::restore(PassContext& ctx, Node* node,
                                        const RecordReader& record) const {
  Rewriter& rewriter = ctx.rewriter;
  bool flattened = record.at("flattened").boolean(), cast = record.at("cast").boolean();
  bool bias = record.at("bias").boolean();
  Symbol product = record.at("bits").integer() == 4 ? kInt4PackMm : kInt8PackMm;
  std::vector<std::string> attributes;  // the quantized weight and its scales
  for (const RecordField& path : record.at("attributes").items()) attributes.push_back(path.text());

  ChainWalker walk(node, kWhat);
  Node* y = node;
  if (flattened) {
    y = walk.operand(y, kReshape, 0);
    const std::vector<Arg>* sizes = node->args().size() > 1 ? node->args()[1].sequence() : nullptr;
    if (!sizes) throw PassError(*node, std::string("is no longer the ") + kWhat + " it made");
    for (const Arg& size : *sizes)
      if (Node* read = size.node()) walk.operand(read, kSymSize, 0);
  }
  if (bias) y = walk.operand(y, kAdd, 0);
  if (cast) y = walk.operand(y, kToCopy, 0);
  Node* x = walk.operand(y, product, 0);
  if (flattened) x = walk.operand(x, kReshape, 0);
  if (cast) x = walk.operand(x, kToCopy, 0);

  Node* inputs[] = {x};
  std::vector<Node*> rebuilt = rebuild_nodes(rewriter, node, record.at("nodes"), inputs);
  rewriter.replace_all_uses(node, rebuilt.back());
  walk.erase(rewriter);
  for (const std::string& path : attributes) rewriter.remove_attribute(path);
  ctx.restored(rebuilt.back());
}

}  // namespace fxopt
