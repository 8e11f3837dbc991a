// Capturing nodes and operand values in reversal records.
//
// A reversible pass that erases nodes (a folded BatchNorm) or replaces operands (a weight read
// through get_attr) stores what it removed in its record, so reverse can rebuild it, in this
// bridge session or a later one, after a deep copy. A record is a plain immutable value (see
// marks.h), so a captured value may neither point at a live node nor hold a mutable container:
//   a reference to captured node i          -> ("fxopt.node", i)
//   a reference to inputs[k]                -> ("fxopt.input", k)   the caller supplies it again
//   a reference to any other get_attr node  -> ("fxopt.attr", (path, name)) read again on rebuild
//   a list / tuple / slice / dict           -> ("fxopt.list", (items...)) / ... / ("fxopt.dict",
//                                              ((key, value), ...))
// Scalars, strings, None and opaque values stay as they are. Every container is tagged, so a
// user's own tuple can never be mistaken for a reference. Any other node reference cannot be
// captured: capture returns nullopt and the pass skips the candidate.
#pragma once

#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "rewrite/record_reader.h"
#include "rewrite/rewriter.h"

namespace fxopt {

std::optional<Arg> capture_value(const Arg& value, std::span<Node* const> inputs,
                                 std::span<Node* const> nodes = {});
// The arguments and keyword arguments of a call, captured by capture_value, with their
// references resolved, for a node to be placed before `anchor`; attributes are read through an
// existing get_attr node before it, or a new one.
std::pair<Args, Kwargs> rebuild_inputs(Rewriter& rewriter, Node* anchor, const RecordField& args,
                                       const RecordField& kwargs, std::span<Node* const> inputs,
                                       std::span<Node* const> nodes = {});

// Captures `nodes` (in graph order; each may read earlier ones, `inputs` and get_attr nodes)
// with their metadata: (kind, target, name, args, kwargs, meta pairs) each.
std::optional<Arg> capture_nodes(std::span<Node* const> nodes, std::span<Node* const> inputs);
// Recreates captured nodes (at least one) before `anchor` under their old names where free, with
// their metadata (marks and records of other transformations); returns them in captured order.
std::vector<Node*> rebuild_nodes(Rewriter& rewriter, Node* anchor, const RecordField& captured,
                                 std::span<Node* const> inputs);
// Recreates one node of what capture_nodes stored.
Node* rebuild_node(Rewriter& rewriter, Node* anchor, const RecordField& captured,
                   std::span<Node* const> inputs);

// A node's fxopt metadata (marks, reversal records) as (key, value) pairs, and putting it back:
// keys the node lacks or holds another value under are set, others left alone.
Arg capture_meta(const Node& node);
void restore_meta(Rewriter& rewriter, Node* node, const RecordField& captured);

}  // namespace fxopt
