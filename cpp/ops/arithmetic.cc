#include "ops/arithmetic.h"

#include "ops/scalar_div.h"
#include "ops/spelling.h"

namespace fxopt {
namespace {

struct NumberAndTensor {
  Node* tensor;
  double number;
};

// A number operand and a tensor operand among operands 0 and 1, in either order.
std::optional<NumberAndTensor> number_and_tensor(const Node& node) {
  const Arg* a = node.input(0, "input");
  const Arg* b = node.input(1, "other");
  if (!a || !b) return std::nullopt;
  if (a->node() && b->is_number()) return NumberAndTensor{a->node(), *b->number()};
  if (b->node() && a->is_number()) return NumberAndTensor{b->node(), *a->number()};
  return std::nullopt;
}

bool is_add(const Node& node) {
  if (!is_function(node, {"_operator.add", "torch.add", "aten.add.Tensor", "aten.add.Scalar"}) &&
      !is_method(node, {"add"}))
    return false;
  const Arg* alpha = node.kwargs().find("alpha");
  return (!alpha || *alpha == Arg(1)) && node.args().size() <= 2;
}

bool is_mul(const Node& node) {
  return is_function(node, {"_operator.mul", "torch.mul", "aten.mul.Tensor", "aten.mul.Scalar"}) ||
         is_method(node, {"mul", "mul_"});
}

std::optional<TensorPair> tensor_pair(const Node& node) {
  Node* a = node_input(node, 0, "input");
  Node* b = node_input(node, 1, "other");
  if (!a || !b) return std::nullopt;
  return TensorPair{a, b};
}

}  // namespace

std::optional<Scale> as_scale(const Node& node) {
  std::string why_not;
  if (std::optional<ScalarDiv> div = as_scalar_div(node, &why_not)) {
    double divisor = *div->divisor.read(node).number();
    if (divisor == 0) return std::nullopt;
    return Scale{node.input(0, "input")->node(), 1.0 / divisor};
  }
  if (!is_mul(node)) return std::nullopt;
  std::optional<NumberAndTensor> operands = number_and_tensor(node);
  if (!operands) return std::nullopt;
  return Scale{operands->tensor, operands->number};
}

std::optional<Offset> as_offset(const Node& node) {
  if (!is_add(node)) return std::nullopt;
  std::optional<NumberAndTensor> operands = number_and_tensor(node);
  if (!operands) return std::nullopt;
  return Offset{operands->tensor, operands->number};
}

std::optional<Power> as_power(const Node& node) {
  if (!is_function(node, {"_operator.pow", "torch.pow", "aten.pow.Tensor_Scalar"}) &&
      !is_method(node, {"pow"}))
    return std::nullopt;
  Node* input = node_input(node, 0, "input");
  const Arg* exponent = node.input(1, "exponent");
  if (!input || !exponent || !exponent->is_number()) return std::nullopt;
  return Power{input, *exponent->number()};
}

std::optional<TensorPair> as_tensor_add(const Node& node) {
  return is_add(node) ? tensor_pair(node) : std::nullopt;
}

std::optional<TensorPair> as_tensor_mul(const Node& node) {
  if (!is_mul(node) || is_method(node, {"mul_"})) return std::nullopt;
  return tensor_pair(node);
}

}  // namespace fxopt
