// FuseAttentionToSdpa: a hand-written attention becomes one scaled_dot_product_attention call.
//
//   before:                                        after:
//     %kt     = transpose(%k, -2, -1)                %out = scaled_dot_product_attention(
//     %scores = matmul(%q, %kt)                               %q, %k, %v, attn_mask=%mask,
//     %scaled = %scores / c     (or * c)                      scale=1/c)
//     %masked = %scaled + %mask
//     %probs  = softmax(%masked, dim=-1)
//     %probs2 = dropout(%probs)  (inactive)
//     %out    = matmul(%probs2, %v)
//
// Every piece but the two products and the softmax is optional, in every dialect (op views in
// ops/attention.h): a scale on q before the product (`(q * c) @ kt`); several scales (their
// product); the mask as `scores + mask` (or `mask + scores`), `scores.masked_fill(m, v)` or
// `torch.where(c, scores, v)`; `softmax(..., dtype=float32)` and casts (`.to(q.dtype)`,
// `.type(v.dtype)`, `.type_as(v)`) before the second product; dropout in eval mode, with
// training=False or p=0 (nn.Dropout, F.dropout, aten.dropout); torch.export's runtime checks of
// those values. The final product becomes the SDPA call and keeps its name and users; the
// model's transpose of k is dropped (SDPA takes k untransposed); a key the model transposed
// some other way (or whose transpose other nodes read) is transposed back by a new node.
//
// Preconditions (checked; a candidate that fails one is skipped with the reason):
//   - matched by walking producers from the final product; every interior value (transposed
//     k, scores, scaled, masked, probabilities, casts) is read only inside the match, so an
//     attention whose probabilities are also returned (output_attentions) stays as it is;
//   - softmax over the last dim (-1, or rank-1 where the rank is known);
//   - dropout inactive: an active one cannot be expressed without SDPA's own dropout RNG;
//   - scales are constant Python numbers; a mask fill is -inf or <= -1e4 (a real mask: its
//     exp underflows to 0), not a finite bias;
//   - where fx recorded them (torch.export, ShapeProp): q, k and v of equal rank, 3-D or 4-D;
//     the mask does not broadcast the scores to a larger shape; a key that is not a transpose
//     needs a known rank (a matmul with a 2-D weight is no attention).
// Masks. An additive mask is passed as attn_mask, which SDPA adds; one of a known bool or
// integer dtype (which `scores + mask` promotes to 0.0/1.0) is cast to q's dtype first, since
// SDPA would read a bool mask as "True = attend". A fill (masked_fill(m, v): masked where m is
// True) becomes the additive mask torch.where(m, v, 0.0): the same result as the fill in every
// row (also rows where every key is masked, for a fill like finfo.min that absorbs the scores;
// a boolean SDPA mask would give zeros there). Its dtype is the default float dtype.
// Numerical caveats: SDPA's kernels order the arithmetic differently (a division becomes a
// multiplication by 1/c; softmax and products are fused and blocked), so results match within
// float rounding, not bit for bit. A softmax computed in float32 for a reduced-precision model
// runs in SDPA's own accumulation precision instead. Rows where every key is masked with -inf
// give NaN in the eager form and zeros from SDPA. q, k and v must share dtype and device, as
// any attention that runs does.
//
// Reverse: the final node gets its original target and operands back and the removed nodes
// are rebuilt from the record (rewrite/capture.h) under their names, in their original places
// where those still exist; the helper transpose or mask nodes are removed. So reverse restores
// the graph's code and its outputs exactly, in this session or a later one, after a deep copy.
//
// Gains, measured on the 2-core AMD EPYC (Zen 4) dev machine, torch 2.13 CPU, one thread, batch
// 1, seq 128, hidden 384, 12 heads, 15 interleaved rounds of 10 calls, median [min, max]:
//   attention alone (q, k, v -> masked_fill causal -> softmax -> @ v), symbolic:
//       1.10 [0.75, 2.06] ms -> 0.70 [0.68, 0.73] ms, 1.57x
//   a user's attention module (qkv Linear, the above, output Linear), symbolic:
//       2.86 [2.62, 3.58] ms -> 2.36 [2.29, 2.75] ms, 1.21x (1.07x-1.21x over three runs)
//   6-layer BERT-like model, eager attention, torch.export graph, padding mask:
//       44.4 [42.4, 55.1] ms -> 44.1 [41.8, 53.6] ms: no measurable difference (1.01x-1.06x
//       over three runs, spreads overlap); at seq 128 the Linears and GELU dominate.
#pragma once

#include "rewrite/pass.h"

namespace fxopt {

class FuseAttentionToSdpa final : public Pass {
 public:
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;
};

}  // namespace fxopt
