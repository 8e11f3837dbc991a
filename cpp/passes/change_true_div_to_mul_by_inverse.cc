#include "passes/change_true_div_to_mul_by_inverse.h"

#include <cmath>
#include <limits>
#include <string_view>

#include "ops/scalar_div.h"

namespace fxopt {
namespace {

// The record: the division's target and its divisor as written.
constexpr RecordKey<Symbol> kTarget{"target"};
constexpr RecordKey<Arg> kDivisor{"divisor"};

// The smallest normal and largest finite value of the float type torch computes `node` in.
// The division runs in the node's own dtype, so the divisor and its inverse must both be normal
// there: 1 / 1e-39 is a fine double but inf in float32, and x * inf is not x / 1e-39. Unknown
// dtypes (graphs without recorded facts) get float16's range, the narrowest of torch's floats.
struct FloatRange {
  double min_normal, max;
};

FloatRange range_of(const Node& node) {
  std::string_view dtype = node.dtype();
  if (dtype == "float64")
    return {std::numeric_limits<double>::min(), std::numeric_limits<double>::max()};
  if (dtype == "bfloat16") return {0x1p-126, 0x1.fep127};
  if (dtype == "float16" || dtype.empty()) return {0x1p-14, 65504.0};
  // float32, and integer or bool inputs, which true division computes in the default float32.
  return {std::numeric_limits<float>::min(), std::numeric_limits<float>::max()};
}

bool normal_in(double value, FloatRange range) {
  double magnitude = std::fabs(value);
  return std::isfinite(value) && magnitude >= range.min_normal && magnitude <= range.max;
}

}  // namespace

std::vector<Trigger> ChangeTrueDivToMulByInverse::triggers() const { return scalar_div_triggers(); }

void ChangeTrueDivToMulByInverse::rewrite(PassContext& ctx, Node* node) const {
  std::string why_not;
  std::optional<ScalarDiv> div = as_scalar_div(*node, &why_not);
  if (!div) return ctx.skip(*node, why_not);
  const Arg& divisor = div->divisor.read(*node);
  double inverse = 1.0 / *divisor.number();
  if (*divisor.number() == 0.0) return ctx.skip(*node, "divides by zero");
  FloatRange range = range_of(*node);
  if (!normal_in(*divisor.number(), range) || !normal_in(inverse, range))
    return ctx.skip(*node, "the divisor or its inverse is not a normal number in " +
                               (node->dtype().empty() ? std::string("float16 (dtype unknown)")
                                                      : node->dtype()));

  Record record;
  record.set(kTarget, node->target()).set(kDivisor, divisor);
  auto [args, kwargs] = div->divisor.write(*node, inverse);
  ctx.rewriter.set_target(node, div->kind, div->mul_target);
  ctx.rewriter.set_inputs(node, std::move(args), std::move(kwargs));
  set_reversal_record(ctx.rewriter, node, ctx.signature, record);
  ctx.changed(node);
}

void ChangeTrueDivToMulByInverse::restore(PassContext& ctx, Node* node,
                                          const RecordReader& record) const {
  Symbol original = record.get(kTarget);
  // The divisor went back where it came from: the forward view on the original target finds it.
  ctx.rewriter.set_target(node, node->kind(), original);
  std::string why_not;
  std::optional<ScalarDiv> div = as_scalar_div(*node, &why_not);
  if (!div) throw PassError(*node, "cannot restore the division: " + why_not);
  auto [args, kwargs] = div->divisor.write(*node, record.get(kDivisor).value());
  ctx.rewriter.set_inputs(node, std::move(args), std::move(kwargs));
  ctx.restored(node);
}

}  // namespace fxopt
