// ChangePrecision: Linear, convolution and matrix-product work runs in float16 or bfloat16,
// while every value outside those ops keeps its dtype (not computation-preserving).
//
//   before:  %y = linear(%x)          after:  %to      = to(%x, float16)
//                                             %y       = linear_16(%to)     (weights in float16)
//                                             %type_as = type_as(%y, %x)    (readers of %y read it)
//
// Linear and Conv* / ConvTranspose* (op views, every dialect) get their weight and bias cast
// once and stored copy-on-write (passes/replace_params.h: a module copy at `<path>_float16`, or
// attributes `<weight path>_float16`); a matrix product casts both operands. The result is cast
// back to the dtype of the op's first operand, so graph inputs and outputs, and every op in
// between, keep their dtypes.
// Preconditions: the weight is float32 or float64 (an op already in a lower precision is
// skipped); matrix products take two positional graph tensors.
// Numerics: inputs and weights are rounded to the low precision and the op accumulates the way
// torch does for that dtype on that device; expect ~1e-3 relative error for float16, ~1e-2 for
// bfloat16.
// Reverse points the op back at its original module or attributes, which the forward pass
// never touched, so the original weights come back bit for bit; the casts are removed.
// fxopt's int8 Linears (ops/dtype_flow.h follows_first_operand) compute in their input's
// dtype, so the lowering passes through them; one whose result is a graph output reads its
// input cast back up instead (its result, GPT-2's [tokens, vocabulary] logits, then needs no
// cast down inside the call and back up at the output).
// Options: "dtype" ("float16" | "bfloat16") and "dtype_object", the torch.dtype itself as an
// opaque value the casts pass to torch.
#pragma once

#include <string>

#include "rewrite/pass.h"

namespace fxopt {

class ChangePrecision final : public Pass {
 public:
  // Throws std::invalid_argument unless dtype is float16 or bfloat16.
  ChangePrecision(std::string dtype, Arg dtype_object, Dict full_dtype_objects = {});
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;

 private:
  std::string dtype_;
  Arg dtype_object_;
  Dict full_dtype_objects_;  // "float32" / "float64" -> the torch.dtype to cast outputs back to
};

}  // namespace fxopt
