#include "ops/dtype_flow.h"

#include <array>
#include <string>
#include <utility>

#include "ops/conv.h"
#include "ops/linear.h"
#include "ops/matmul.h"
#include "ops/targets.h"

namespace fxopt {
namespace {

// Beyond the Linear, convolution and matmul views: ops with several floating operands that
// torch runs only in one dtype.
constexpr std::array kMatchingFunctions = {
    "aten.scaled_dot_product_attention.default",
    "torch._C._nn.scaled_dot_product_attention",
    "aten.addmm.default",
    "aten.baddbmm.default",
    "aten.layer_norm.default",
    "aten.native_layer_norm.default",
    "aten.group_norm.default",
    "aten.batch_norm.default",
    "aten._native_batch_norm_legit_no_training.default",
    "aten.embedding.default",
    "aten.rms_norm.default",
    "fxopt.runtime.onednn_linear.linear_pointwise",
    "fxopt.runtime.onednn_conv.conv_pointwise",
    "torch.addmm",
    "torch.baddbmm",
    "torch.nn.functional.layer_norm",
    "torch.nn.functional.group_norm",
    "torch.nn.functional.batch_norm",
    "torch.nn.functional.embedding",
    "torch.nn.functional.rms_norm",
    "torch.layer_norm",
};
constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kFloatMethods = {
    {{"float", "float32"}, {"double", "float64"}, {"half", "float16"}, {"bfloat16", "bfloat16"}}};

}  // namespace

bool is_full_float(std::string_view dtype) { return dtype == "float32" || dtype == "float64"; }

bool is_float(std::string_view dtype) {
  return is_full_float(dtype) || dtype == "float16" || dtype == "bfloat16";
}

bool needs_matching_float_operands(const Program& program, const Node& node) {
  if (node.kind() == NodeKind::CallModule) return true;  // its own tensors meet its input
  if (matches_trigger(program, node, linear_triggers()) ||
      matches_trigger(program, node, conv_triggers()) ||
      matches_trigger(program, node, matmul_triggers()))
    return true;
  if (node.kind() != NodeKind::CallFunction) return false;
  const std::string& target = node.target().str();
  for (const char* name : kMatchingFunctions)
    if (target == name) return true;
  return false;
}

bool follows_first_operand(const Node& node) {
  return node.is(NodeKind::CallFunction, targets::kDynamicInt8Linear) ||
         node.is(NodeKind::CallFunction, targets::kPerTokenInt8Linear) ||
         node.is(NodeKind::CallFunction, targets::kInt8Conv2d) ||
         node.is(NodeKind::CallFunction, targets::kInt8WeightLinear) ||
         node.is(NodeKind::CallFunction, targets::kInt4WeightLinear);
}

std::string_view explicit_result_dtype(const Program& program, const Node& node) {
  if (node.kind() == NodeKind::CallMethod) {
    const std::string& method = node.target().str();
    for (const auto& [name, dtype] : kFloatMethods)
      if (method == name) return dtype;
  }
  std::string_view named;
  auto look = [&](const Arg& value) {
    if (std::string_view d = program.dtype_of(value); !d.empty()) named = d;
  };
  for (const Arg& arg : node.args()) look(arg);
  for (const auto& [key, value] : node.kwargs().items)
    if (key == "dtype") look(value);
  return named;
}

}  // namespace fxopt
