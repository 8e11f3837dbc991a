// The graph side of folding an eval-mode batch norm into the weighted op next to it (Conv,
// Linear), and of undoing it: shared by FuseBatchNormInConv and FuseBatchNorm1dInLinear. The
// arithmetic is tensor/batch_norm_fold.h; the op's new tensors go in copy-on-write
// (passes/replace_params.h).
//
//   After:   %y = op(%x) ; %z = bn(%y)       ->  %y = op'(%x)    (users of %z read %y)
//   Before:  %z = bn(%x) ; %y = linear(%z)   ->  %y = linear'(%x)
//
// The op node keeps its name and carries the reversal record: which module or attributes it
// used before, and the batch norm's nodes captured with their input as a parameter
// (rewrite/capture.h). Reverse rebuilds them on the op's output (After) or on its data operand
// (Before), so it works on a deep copy or in a later bridge session. After the op, its output
// may also be read for its shape (ops/shape_read.h), which a fold keeps: the record names those
// readers, and reverse leaves them reading the op. Weighted ops take their
// data operand first (position 0, keyword "input").
#pragma once

#include <optional>

#include "ops/batch_norm.h"
#include "ops/stored_params.h"
#include "rewrite/pass.h"

namespace fxopt {

enum class BatchNormSide { After, Before };  // where the batch norm sits relative to the op

// The batch norm's nodes as a record value, or nullopt if they read values a record cannot hold.
std::optional<Arg> capture_batch_norm(const BatchNorm& bn);
// Rewires the graph: `op` computes with `folded` and the batch norm's nodes are gone.
void absorb_batch_norm(PassContext& ctx, const StoredParams& op, const BatchNorm& bn, Arg captured,
                       BatchNormSide side, const FoldedParams& folded);
// Undoes `absorb_batch_norm` on `op` from its record.
void restore_batch_norm(PassContext& ctx, Node* op, const RecordReader& record);

}  // namespace fxopt
