#include "passes/fuse_tanh_gelu.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "ops/activation.h"
#include "ops/arithmetic.h"
#include "ops/spelling.h"
#include "passes/fused_call.h"
#include "rewrite/capture.h"

namespace fxopt {
namespace {

constexpr const char* kNotInner = "its input is not sqrt(2 / pi) * (x + 0.044715 * x ** 3)";

bool near(double value, double expected) {
  return std::abs(value - expected) <= 1e-6 * std::abs(expected);
}

// The only reader of `node`, or nullptr.
Node* only_reader(const Node& node) {
  return node.users().size() == 1 ? node.users().front() : nullptr;
}

// The nodes of the written-out GELU around its tanh, in graph order, and its input; nullopt
// with `why_not` if `tanh` is not part of one.
struct Match {
  Node* x = nullptr;
  std::vector<Node*> nodes;
};

std::optional<Match> match(const Program& program, Node* tanh, std::string* why_not) {
  std::optional<Activation> activation = as_activation(program, *tanh, why_not);
  if (!activation || activation->name != "tanh" || activation->in_place) {
    *why_not = "not an out-of-place tanh";
    return std::nullopt;
  }
  // Inside the tanh: sqrt(2 / pi) * (x + 0.044715 * x ** 3).
  Node* s = activation->input;
  std::optional<Scale> outer = as_scale(*s);
  std::optional<TensorPair> sum = outer ? as_tensor_add(*outer->input) : std::nullopt;
  if (!outer || !near(outer->factor, std::sqrt(2.0 / std::numbers::pi)) || !sum) {
    *why_not = kNotInner;
    return std::nullopt;
  }
  Node* q = outer->input;
  Node *x = nullptr, *r = nullptr, *cube = nullptr;
  for (auto [plain, other] : {std::pair{sum->a, sum->b}, std::pair{sum->b, sum->a}}) {
    std::optional<Scale> inner = as_scale(*other);
    std::optional<Power> power = inner ? as_power(*inner->input) : std::nullopt;
    if (inner && near(inner->factor, 0.044715) && power && power->input == plain &&
        near(power->exponent, 3.0)) {
      x = plain, r = other, cube = inner->input;
      break;
    }
  }
  if (!x) {
    *why_not = kNotInner;
    return std::nullopt;
  }
  // Around it: (0.5 * x) * (1.0 + tanh).
  Node* p = only_reader(*tanh);
  std::optional<Offset> one = p ? as_offset(*p) : std::nullopt;
  Node* y = one && one->input == tanh && one->value == 1.0 ? only_reader(*p) : nullptr;
  std::optional<TensorPair> product = y ? as_tensor_mul(*y) : std::nullopt;
  Node* h = !product          ? nullptr
            : product->a == p ? product->b
            : product->b == p ? product->a
                              : nullptr;
  std::optional<Scale> half = h ? as_scale(*h) : std::nullopt;
  if (!half || half->input != x || half->factor != 0.5) {
    *why_not = "its result is not taken as 0.5 * x * (1.0 + tanh(...))";
    return std::nullopt;
  }
  std::vector<Node*> nodes = {h, cube, r, q, s, tanh, p, y};
  for (Node* n : nodes) {
    if (n != y && only_reader(*n) == nullptr) {
      *why_not = "a value inside it has other readers";
      return std::nullopt;
    }
    // x.mul_(0.5) would write x, which the formula's other terms read.
    if (is_method(*n, {"mul_", "div_"})) {
      *why_not = "a step of it writes its input in place";
      return std::nullopt;
    }
  }
  std::ranges::sort(nodes, [&](Node* a, Node* b) { return program.graph.before(a, b); });
  return Match{x, std::move(nodes)};
}

}  // namespace

std::vector<Trigger> FuseTanhGelu::triggers() const { return activation_triggers("tanh"); }

void FuseTanhGelu::rewrite(PassContext& ctx, Node* node) const {
  Rewriter& rewriter = ctx.rewriter;
  std::string why_not;
  std::optional<Match> found = match(rewriter.program(), node, &why_not);
  if (!found) return ctx.skip(*node, why_not);
  std::vector<Node*> inputs = {found->x};
  std::optional<Arg> captured = capture_nodes(found->nodes, inputs);
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");
  bool aten = found->nodes.back()->target().str().starts_with("aten.");
  ActivationCall gelu = activation_call("gelu_tanh", found->x, aten);
  replace_by_fused_call(ctx, found->nodes, std::move(*captured), gelu.target, "gelu",
                        std::move(gelu.args), std::move(gelu.kwargs));
}

void FuseTanhGelu::restore(PassContext& ctx, Node* node, const RecordReader& record) const {
  if (node->args().size() != 1 || !node->args()[0].node())
    throw PassError(*node, "is no longer the gelu call this transformation made");
  Node* inputs[] = {node->args()[0].node()};
  restore_fused_chain(ctx, node, record, inputs, {});
}

}  // namespace fxopt
