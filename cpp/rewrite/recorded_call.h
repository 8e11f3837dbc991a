// A node's call as it was, kept in its reversal record: for passes that make the node another
// call in place (ChangeActivation, FoldConstants, FuseAttentionToSdpa) and whose reverse makes it
// that call again. The record's fields (kind, target, args, kwargs) are written and read only
// here; the arguments are captured (rewrite/capture.h) against operands the pass names again on
// reverse.
#pragma once

#include <optional>
#include <span>

#include "rewrite/marks.h"

namespace fxopt {

// A record holding `node`'s call, its arguments reading `inputs`, for the pass to add its own
// fields to; nullopt when the arguments hold a value a record cannot.
std::optional<Record> record_call(const Node& node, std::span<Node* const> inputs);
// Makes `node` the call `record` holds again, its arguments reading `inputs`.
void restore_call(Rewriter& rewriter, Node* node, const RecordReader& record,
                  std::span<Node* const> inputs);

}  // namespace fxopt
