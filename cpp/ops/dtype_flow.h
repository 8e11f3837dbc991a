// What passes need to know about how torch picks the dtype of an op's result, to lower a whole
// graph to one floating-point precision (ChangePrecision):
//   - some ops require all their floating operands in one dtype (a Linear's input and weight,
//     both sides of a matmul, attention's q/k/v, a norm's input and affine tensors), where
//     elementwise ops would promote a mix to the wider dtype;
//   - fxopt's int8 Linears and convolutions and its weight-only int8 / int4 Linears return
//     their activations' dtype, whatever it is, while their other floating operands (scales
//     computed in float32, the bias) keep theirs, so a lowering passes its dtype through them
//     and keeps what only they read besides x;
//   - some ops name the dtype of their result themselves (x.to(torch.float32),
//     softmax(x, dim, dtype=torch.float32), torch.full(..., dtype=...), x.float()).
// Everything else computes in the dtype of its floating operands.
#pragma once

#include <string_view>

#include "ir/program.h"

namespace fxopt {

// float32 or float64: the precisions ChangePrecision lowers.
bool is_full_float(std::string_view dtype);
bool is_float(std::string_view dtype);
// True if the op fails, rather than promotes, when its floating operands differ in dtype.
bool needs_matching_float_operands(const Program& program, const Node& node);
// True if the op's result has its first operand's dtype and its other floating operands are
// read as float32 whatever the activations' dtype, or, a residual, in any float dtype
// (runtime/per_token_int8.py, dynamic_int8.py, static_int8_conv.py, int8_weight_linear.py,
// int4_weight_linear.py).
bool follows_first_operand(const Node& node);
// The dtype the op's result is said to have by the op itself; empty when it follows its inputs.
std::string_view explicit_result_dtype(const Program& program, const Node& node);

}  // namespace fxopt
