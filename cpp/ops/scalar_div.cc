#include "ops/scalar_div.h"

#include <array>

#include "ops/targets.h"

namespace fxopt {
namespace {

struct DivForm {
  NodeKind kind;
  Symbol div;
  Symbol mul;
  const char* divisor_keyword;  // how the divisor is spelled when passed by keyword
};

const std::array<DivForm, 8>& div_forms() {
  using namespace targets;
  static const std::array<DivForm, 8> forms = {{
      {NodeKind::CallFunction, kOperatorTrueDiv, kOperatorMul, ""},
      {NodeKind::CallFunction, kTorchDiv, kTorchMul, "other"},
      {NodeKind::CallFunction, kTorchTrueDivide, kTorchMul, "other"},
      {NodeKind::CallMethod, kMethodDiv, kMethodMul, "other"},
      {NodeKind::CallMethod, kMethodDivInplace, kMethodMulInplace, "other"},
      {NodeKind::CallMethod, kMethodTrueDivide, kMethodMul, "other"},
      {NodeKind::CallFunction, kAtenDivTensor, kAtenMulTensor, "other"},
      {NodeKind::CallFunction, kAtenDivScalar, kAtenMulScalar, "other"},
  }};
  return forms;
}

}  // namespace

std::vector<Trigger> scalar_div_triggers() {
  std::vector<Trigger> triggers;
  for (const DivForm& f : div_forms()) triggers.push_back({f.kind, f.div});
  return triggers;
}

std::optional<ScalarDiv> as_scalar_div(const Node& node, std::string* why_not) {
  for (const DivForm& form : div_forms()) {
    if (!node.is(form.kind, form.div)) continue;
    if (const Arg* mode = node.kwargs().find("rounding_mode"); mode && !mode->is_none()) {
      *why_not = "has a rounding_mode, which a multiplication cannot express";
      return std::nullopt;
    }
    const Arg* numerator = node.input(0, "input");
    if (!numerator || !numerator->node()) {
      *why_not = "the dividend is not a tensor produced by the graph";
      return std::nullopt;
    }
    std::optional<InputSlot> slot = find_slot(node, 1, form.divisor_keyword);
    if (!slot || !slot->read(node).is_number()) {
      *why_not = "the divisor is not a constant Python number";
      return std::nullopt;
    }
    return ScalarDiv{*slot, form.kind, form.mul};
  }
  *why_not = "not a division";
  return std::nullopt;
}

}  // namespace fxopt
