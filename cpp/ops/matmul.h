// Op view: a product of two graph tensors, in every dialect:
//   a @ b (_operator.matmul), torch.matmul / mm / bmm, a.matmul(b) / mm / bmm   symbolic_trace
//   aten.matmul.default, aten.mm.default, aten.bmm.default                       torch.export
// Both operands are positional (a, b).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/trigger.h"

namespace fxopt {

struct MatMul {
  Node* a = nullptr;
  Node* b = nullptr;
};

std::vector<Trigger> matmul_triggers();
// The view of `node`, or nullopt with `why_not` saying what does not fit.
std::optional<MatMul> as_matmul(const Node& node, std::string* why_not);

}  // namespace fxopt
