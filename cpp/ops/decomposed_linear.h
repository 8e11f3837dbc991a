// Op view: a Linear spelled as a matrix product with a stored weight, in every dialect:
//   addmm(b, x, Wt)           torch.addmm, b.addmm(x, Wt), aten.addmm.default   (GPT-2's Conv1D)
//   mm(x, Wt) [+ b]           torch.mm, x.mm(Wt), aten.mm.default
//   matmul(x, Wt) [+ b]       x @ Wt, torch.matmul, x.matmul(Wt), aten.matmul.default
// where the second operand is a stored tensor (get_attr) Wt of shape [in, out], or a stored
// W of shape [out, in] transposed on the way: W.t(), W.T, torch.t(W), W.transpose(0, 1),
// W.permute(1, 0) and their ATen forms (aten.t, aten.numpy_T, aten.transpose.int,
// aten.permute). The bias b is a stored 1-D tensor of out elements: addmm's first operand, or
// the other operand of an add (operator.add, torch.add, .add, aten.add.Tensor, no alpha) that
// is the product's only reader. Weight and bias share dtype and device.
// Every form computes what linear(x, W, b) computes: a Linear works on the last dimension,
// mm / addmm take 2-D inputs only, matmul of an N-D x by a matrix is the same product.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/trigger.h"

namespace fxopt {

struct DecomposedLinear {
  Node* product = nullptr;      // the addmm / mm / matmul
  Node* input = nullptr;        // x
  Node* weight_read = nullptr;  // the get_attr of the stored weight
  Node* transpose = nullptr;    // what transposes it to [in, out]; nullptr: stored as [in, out]
  Node* bias_add = nullptr;     // the add of the bias after an mm / matmul, else nullptr
  Node* bias_read = nullptr;    // the get_attr of the bias; nullptr: no bias
  TensorInfo stored_weight;     // as stored: [in, out] without transpose, else [out, in]
  TensorInfo bias;              // not present() without a bias
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool aten = false;  // an ATen graph: the Linear it becomes is aten.linear

  // The node whose value is the Linear's output.
  Node* result() const { return bias_add ? bias_add : product; }
};

// Every (kind, target) of a product that may be a decomposed Linear.
std::vector<Trigger> decomposed_linear_triggers();
// The view of `product`, or nullopt with `why_not` saying what does not fit.
std::optional<DecomposedLinear> as_decomposed_linear(const Program& program, const Node& product,
                                                     std::string* why_not);

}  // namespace fxopt
