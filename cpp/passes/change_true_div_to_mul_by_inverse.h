// ChangeTrueDivToMulByInverse: division by a constant becomes multiplication by its inverse.
//
//   before:  %y = div(%x, c)          after:  %y = mul(%x, 1/c)
//
// Any dialect the scalar-division op view knows (operator, torch, method, ATen); the node keeps
// its name and users, only its target and divisor change.
// Preconditions: the divisor is a Python int or float, non-zero, with a finite normal inverse
// (so no overflow to inf); no rounding_mode.
// Numerics: x * (1/c) may differ from x / c by one rounding step unless c is a power of two.
// Reverse restores the original target and the original divisor object (value and type), not
// 1/(1/c).
#pragma once

#include "rewrite/pass.h"

namespace fxopt {

class ChangeTrueDivToMulByInverse final : public Pass {
 public:
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;
};

}  // namespace fxopt
