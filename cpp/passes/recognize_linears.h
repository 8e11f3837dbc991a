// RecognizeLinears: a Linear spelled as a matrix product with stored weights becomes a Linear,
// so every Linear pass (MergeLinears, FuseBiasInLinear, FuseBatchNorm1dInLinear,
// ChangePrecision, FuseLinearActivationOneDnn) fires on it.
//
//   GPT-2's Conv1D (torch.export):              after:
//     %v = view(%x, [-1, 768])                    %y = aten.linear(%x, %w_t, %b)
//     %a = addmm(%b, %v, %w)      w: [in, out]     %w_t = get_attr[h.0.attn.c_attn.weight_t]
//     %y = view(%a, [B, S, 2304])                       (w viewed transposed, [out, in])
//
//   a user's x @ W.t() + b (symbolic_trace):    after:
//     %t = W.t()                                  %y = torch._C._nn.linear(%x, %W, %b)
//     %m = x @ %t                                 (W read as it is: no new tensor)
//     %y = %m + %b
//
// Forms (ops/decomposed_linear.h): addmm(b, x, Wt), mm(x, Wt) [+ b], matmul(x, Wt) [+ b], with
// Wt a stored [in, out] tensor or a stored [out, in] W transposed (t, T, transpose, permute), in
// every dialect. ATen graphs get aten.linear.default, the others torch._C._nn.linear (F.linear).
// A stored [in, out] weight is read through a new attribute `<weight path>_t` (parameter-ness
// and requires_grad copied), its transposed view (TensorOps::transposed_view): the original
// stays registered, untouched, for reverse, and holds the values both read, so the model's
// memory does not grow and a state dict loaded later reaches the Linear too.
// The flatten / unflatten views around an addmm or mm (Conv1D's x.view(-1, in) and
// .view(*x.shape[:-1], out)) go away too when the recorded shapes prove they only flatten and
// restore the leading dimensions: x's last size is in, the flatten keeps it, and the unflatten's
// shape is x's leading sizes followed by out, all sizes known numbers. Otherwise (shapes
// unknown, symbolic sizes fx records as -1 in dynamic exports, another reader of either view)
// the views stay around the Linear, which is still correct.
// Preconditions: the product and the flatten are read only inside the match; the bias add
// absorbs the product only if it is its only reader; weight and bias share dtype and device.
// Numerics: the GEMM may be called with another shape (3-D instead of 2-D, a transposed weight
// layout), so expect float rounding differences (~1e-7 relative in float32), not equality.
// Reverse rebuilds the captured nodes (rewrite/capture.h) under their old names where free,
// reading the original, untouched weight, so outputs and parameters come back bit for bit;
// the transposed view is removed. Nodes outside the match that the captured ones read (the
// sizes of an unflatten, say) are found again by name.
// Not a speed lever by itself (addmm and linear call the same GEMM); it is what lets the Linear
// passes see GPT-2 at all.
#pragma once

#include "rewrite/pass.h"

namespace fxopt {

class RecognizeLinears final : public Pass {
 public:
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;
};

}  // namespace fxopt
