// Op view: a tensor padded with zeros, in every dialect fx graphs use:
//   F.pad(x, widths) / F.pad(x, widths, "constant", 0.0)   call_function torch._C._nn.pad
//                                                           (torch.nn.functional.pad)
//   aten.constant_pad_nd.default(x, widths, 0)              torch.export graphs
//   aten.pad.default(x, widths, "constant", 0.0)
// `widths` is torch's order: (left, right) of the last dimension, then of the one before, ...
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/trigger.h"

namespace fxopt {

struct ZeroPad {
  Node* input = nullptr;
  std::vector<int64_t> widths;  // non-negative, torch's order
};

// Every (kind, target) that may be a zero padding.
std::vector<Trigger> pad_triggers();
// The view of `node`, or nullopt with `why_not` saying what does not fit (another mode or
// value, widths the graph computes, a negative width, which crops).
std::optional<ZeroPad> as_zero_pad(const Node& node, std::string* why_not);

}  // namespace fxopt
