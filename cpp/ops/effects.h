// What an op does besides computing its value, in every dialect: mutation, randomness, runtime
// checks and other side effects. The cleanup passes ask these before they remove, merge or
// bypass a node.
//
//   mutates an input   x.add_(y), aten.add_.Tensor, aten.add.out, torch.relu_, operator.iadd,
//                      operator.setitem, F.relu(x, inplace=True), nn.ReLU(inplace=True)
//   random             torch.rand*, bernoulli, normal, multinomial, dropout in training (any
//                      spelling), nn.Dropout / nn.RReLU in training mode
//   runtime check      aten._assert_async, aten._assert_scalar, aten._assert_tensor_metadata,
//                      aten.sym_constrain_range(_for_size), torch._assert, torch._check*,
//                      torch.export's input guard module (GuardsFn)
//   other effects      print, grad-mode and autocast switches, profiler ranges, manual_seed,
//                      and calls of modules not known to be pure
// Python functions fxopt does not know are taken to be pure, as torch.fx's own dead-code
// elimination does: a leaf function wrapped with torch.fx.wrap that prints or logs may be removed
// when its result is unused.
#pragma once

#include <string_view>
#include <unordered_set>
#include <vector>

#include "ir/trigger.h"

namespace fxopt {

// The operation's own name, without namespace or overload: "add_" for aten.add_.Tensor, "relu_"
// for torch.relu_, the method name, the module's class name ("Dropout") for call_module; empty
// for placeholders, get_attr and output.
std::string_view op_name(const Program& program, const Node& node);

bool is_mutating(const Program& program, const Node& node);
// Whether the op is known to return a new tensor rather than a view of its first operand:
// mutating its result never reaches the operand. Anything else may alias it (written_in_place).
bool fresh_result(const Program& program, const Node& node);
bool is_random(const Program& program, const Node& node);
bool is_runtime_check(const Program& program, const Node& node);
// Every (kind, target) a runtime check can have (call_module triggers name the guard's type).
std::vector<Trigger> runtime_check_triggers();

// Why removing this node (when nothing reads its value) or merging it with an equal call could
// change what the program does, as a reason a user understands; empty if it is pure.
std::string_view side_effect(const Program& program, const Node& node);

// Nodes whose value may be written in place: operands of mutating ops and every value that may
// alias one (views of it, what it is a view of). Conservative: an op not known to return a fresh
// tensor is taken to alias its first operand. O(n), once per pass run.
std::unordered_set<const Node*> written_in_place(const Program& program);

}  // namespace fxopt
