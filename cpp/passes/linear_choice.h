// Asking the kernel chooser about a Linear: the query every Linear pass sends (one shape
// convention, so the Python side times every Linear candidate the same way).
#pragma once

#include <string>
#include <vector>

#include "ops/linear.h"
#include "tuning/chooser.h"

namespace fxopt {

// Shape {tokens, in_features, out_features}, tokens being the product of the input's leading
// sizes (-1 if one is symbolic or unknown: the chooser then reads the value's size hints);
// dtype the weight's.
ChoiceQuery linear_choice_query(const LinearView& view, std::string op, std::string variant,
                                std::vector<std::string> candidates, size_t fallback);

}  // namespace fxopt
