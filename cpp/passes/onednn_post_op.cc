#include "passes/onednn_post_op.h"

#include "ops/activation.h"

namespace fxopt {

std::optional<PostOp> post_op(const std::string& activation) {
  if (activation == "gelu") return PostOp{"gelu", {}, "none"};
  if (activation == "gelu_tanh") return PostOp{"gelu", {}, "tanh"};
  if (activation == "relu6") return PostOp{"hardtanh", List{{0.0, 6.0}}, None{}};
  if (activation == "silu") return PostOp{"swish", {}, None{}};
  for (const char* same : {"relu", "sigmoid", "tanh", "hardswish"})
    if (activation == same) return PostOp{same, {}, None{}};
  return std::nullopt;
}

PostOp no_post_op() { return PostOp{"none", {}, None{}}; }

std::optional<FusableActivation> fusable_activation(const Program& program, Node* producer) {
  if (producer->users().size() != 1) return std::nullopt;
  Node* user = producer->users().front();
  std::string not_one;
  std::optional<Activation> act = as_activation(program, *user, &not_one);
  if (!act || act->input != producer) return std::nullopt;
  std::optional<PostOp> op = post_op(act->name);
  if (!op) return std::nullopt;
  return FusableActivation{user, act->name, std::move(*op)};
}

}  // namespace fxopt
