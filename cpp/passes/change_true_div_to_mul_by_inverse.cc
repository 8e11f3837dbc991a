#include "passes/change_true_div_to_mul_by_inverse.h"

#include <cmath>

#include "ops/scalar_div.h"

namespace fxopt {

std::vector<Trigger> ChangeTrueDivToMulByInverse::triggers() const { return scalar_div_triggers(); }

void ChangeTrueDivToMulByInverse::rewrite(PassContext& ctx, Node* node) const {
  std::string why_not;
  std::optional<ScalarDiv> div = as_scalar_div(*node, &why_not);
  if (!div) return ctx.skip(*node, why_not);
  const Arg& divisor = div->divisor.read(*node);
  double inverse = 1.0 / *divisor.number();
  if (*divisor.number() == 0.0) return ctx.skip(*node, "divides by zero");
  if (!std::isnormal(inverse))
    return ctx.skip(*node, "the inverse of the divisor is not a normal float");

  Record record;
  record.set("target", node->target().str()).set("divisor", divisor);
  auto [args, kwargs] = div->divisor.write(*node, inverse);
  ctx.rewriter.set_target(node, div->kind, div->mul_target);
  ctx.rewriter.set_inputs(node, std::move(args), std::move(kwargs));
  set_reversal_record(ctx.rewriter, node, ctx.signature, record);
  ctx.changed(node);
}

void ChangeTrueDivToMulByInverse::restore(PassContext& ctx, Node* node,
                                          const Record& record) const {
  const Arg& target = record.at("target");
  if (!target.is<std::string>()) throw PassError(*node, "reversal record has a malformed target");
  Symbol original = Symbol::intern(target.as<std::string>());
  // The divisor went back where it came from: the forward view on the original target finds it.
  ctx.rewriter.set_target(node, node->kind(), original);
  std::string why_not;
  std::optional<ScalarDiv> div = as_scalar_div(*node, &why_not);
  if (!div) throw PassError(*node, "cannot restore the division: " + why_not);
  auto [args, kwargs] = div->divisor.write(*node, record.at("divisor"));
  ctx.rewriter.set_inputs(node, std::move(args), std::move(kwargs));
  ctx.restored(node);
}

}  // namespace fxopt
