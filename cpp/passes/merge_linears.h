// MergeLinears: Linears that read the same input become one Linear whose output is sliced back.
//
//   before:  %q = linear(%x, Wq, bq)          after:  %m = linear(%x, [Wq; Wk; Wv], [bq; bk; 0])
//            %k = linear(%x, Wk, bk)                  %q = narrow(%m, -1, 0, nq)
//            %v = linear(%x, Wv)                      %k = narrow(%m, -1, nq, nk)
//                                                     %v = narrow(%m, -1, nq + nk, nv)
//
// In every dialect the Linear op view knows: a new module `<scope>.q_k_v_merged` (a copy of the
// first member's module) or new attributes `<scope>.q_k_v_merged_weight` / `_bias`, with
// aten.slice.Tensor instead of torch.narrow in exported graphs. The members keep their nodes,
// names and users; only what they compute changes. The members' own modules / attributes and
// their get_attr nodes are removed from the GraphModule (never changed: the caller's model
// keeps its parameters untouched).
//
// Preconditions, per group: same input node, same spelling (dialect, module type), same dtype,
// device, requires_grad and parameter-ness. Groups form from the users of the input (its use
// list), never by pairing all Linears.
// Shared weights (ALBERT: one layer's module or tensors serve every layer): a Linear whose
// module or tensors have several call sites merges only with Linears whose own call sites line
// up with its own, site for site (each reads the input of one of its sites); the merged tensors
// are stored once and every site calls them, and the members' tensors go once no site reads
// them. A site that cannot take part (a tensor also read by another op, a member missing at one
// site) leaves the whole group alone, with the reason.
// The merged bias exists iff a member had one; members without one get zeros there.
//
// Reversal: each member's record (plain values: its spelling, paths, get_attr names, the rows
// [start, end) it owns) lets reverse slice its weight and bias back out of the merged tensors
// it finds in the graph, then remove the merged Linear when its last member is restored. So
// reverse needs no tensors kept aside: it works after copy.deepcopy, in a later session, after
// .to(device) / .half(), and reflects training of the merged weights (as optimum's does).
// Restored tensors are new copies (no views of the merged ones); a member that had no bias gets
// None again. The original Python objects of modules and parameters are not brought back.
// Why not keep the originals registered and re-point at them (passes/replace_params.h does, as a
// folded BatchNorm cannot be recomputed exactly)? Slicing rows is exact, so keeping them would
// only hold every merged weight twice, in memory and in state_dict, and ignore training.
// Tied weights (two modules holding one Parameter, symbolic graphs) come back tied: the record
// names the other paths that held the tensor (ops/tied_tensors.h).
//
// Numerics: each output element is the same dot product as before, but a different GEMM shape
// may make the BLAS sum in another order: expect float rounding differences (~1e-7 relative in
// float32), not exact equality. Reverse is exact.
// Layout: the slices are strided views (row stride = total out features), not contiguous.
// Views that split the last dimension (q.view(B, S, heads, dim)) or feed a matmul work as
// before; a .view() that merges the last dimension with another would fail on them.
// Measured (bench/linear_passes.py: all-MiniLM-L6-v2 exported, CPU, 1 thread, shared 2-core
// machine, best of 15 interleaved rounds): merged graph within +-2% of the original at 1x16
// and 8x128 tokens (GEMM-bound: one wide GEMM is not faster than three on CPU); copying the
// slices contiguous instead costs 2-6% more at 8x128, so the slices stay views. No GPU was
// available to measure the launch savings merging is meant for.
#pragma once

#include <optional>

#include "ops/tied_tensors.h"
#include "rewrite/pass.h"

namespace fxopt {

class MergeLinears final : public Pass {
 public:
  std::vector<Trigger> triggers() const override;
  void begin(const Program& program) const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;

 private:
  mutable std::optional<TiedTensors> tied_;  // of the run's program, from begin()
};

}  // namespace fxopt
