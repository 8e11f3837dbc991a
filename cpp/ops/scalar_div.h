// Op view: a tensor divided by a constant Python number, in every dialect fx graphs use:
//   a / c                  call_function _operator.truediv
//   torch.div(a, c)        call_function torch.div (no rounding_mode), torch.true_divide
//   a.div(c), a.div_(c)    call_method div / div_ / true_divide
//   aten.div.Tensor(a, c)  torch.export graphs (also aten.div.Scalar)
// The view also names the multiplication of the same dialect, so a pass can swap one for the
// other without knowing which dialect it is in.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/trigger.h"
#include "ops/input_slot.h"

namespace fxopt {

struct ScalarDiv {
  InputSlot divisor;
  NodeKind kind;
  Symbol mul_target;  // the same-dialect multiplication
};

// Every (kind, target) that may be a scalar division.
std::vector<Trigger> scalar_div_triggers();
// The view of `node`, or nullopt with `why_not` saying what does not fit.
std::optional<ScalarDiv> as_scalar_div(const Node& node, std::string* why_not);

}  // namespace fxopt
