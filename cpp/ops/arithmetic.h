// Op views: elementwise arithmetic with a constant number or between two graph tensors, in every
// dialect:
//   view            symbolic_trace / Dynamo                                   torch.export
//   scale           x * c, c * x, torch.mul, x.mul(c), x / c (scalar_div.h)    aten.mul / div
//   offset          x + c, c + x, torch.add(x, c), x.add(c)   (no alpha)       aten.add.Tensor / Scalar
//   power           x ** c, torch.pow(x, c), x.pow(c)                          aten.pow.Tensor_Scalar
//   tensor add      a + b, torch.add(a, b), a.add(b)          (no alpha)       aten.add.Tensor
//   tensor product  a * b, torch.mul(a, b), a.mul(b)                           aten.mul.Tensor
#pragma once

#include <optional>

#include "ir/node.h"

namespace fxopt {

// `input` times a constant Python number (a division by c is a scale by 1 / c).
struct Scale {
  Node* input = nullptr;
  double factor = 1.0;
};
std::optional<Scale> as_scale(const Node& node);

// `input` plus a constant Python number.
struct Offset {
  Node* input = nullptr;
  double value = 0.0;
};
std::optional<Offset> as_offset(const Node& node);

// `input` to a constant Python number's power.
struct Power {
  Node* input = nullptr;
  double exponent = 1.0;
};
std::optional<Power> as_power(const Node& node);

// Two graph tensors added (without an alpha) or multiplied.
struct TensorPair {
  Node* a = nullptr;
  Node* b = nullptr;
};
std::optional<TensorPair> as_tensor_add(const Node& node);
std::optional<TensorPair> as_tensor_mul(const Node& node);

}  // namespace fxopt
