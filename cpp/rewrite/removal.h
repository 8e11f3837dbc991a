// Reversible node removal: the one mechanism every pass that deletes nodes shares (dead code,
// common subexpressions, no-ops, runtime checks).
//
// A pass calls PassContext::remove(node, replacement): the node's users read `replacement`
// instead and the node is erased. Just before, the removal is captured as a plain value
// (rewrite/capture.h), so it survives deep copies and later bridge sessions:
//   (node, meta, anchor, refs, users)
//   node    the node as capture_nodes stores it: kind, target, name, args, kwargs
//   meta    its fxopt metadata (marks and reversal records other passes left), as pairs
//   anchor  the name of the node that followed it
//   refs    names of every node its arguments and its users' arguments read; refs[0] is the
//           node itself, which is how its users' arguments refer to it
//   users   (name, args, kwargs) of each user before it was rewired
// The driver (rewrite/pass.cc) keeps one record per transformation on the graph's output node,
// which no pass removes, listing the removals of each run in the order they happened (one list
// per run; reverse undoes the latest run, so a transformation that appears twice in a composition
// reverses in order). Reverse restores a run's removals last to first: when a removal's turn comes, the graph is as it was right after it, so its anchor, its
// references and its users are all there, and the node comes back with the same name, arguments,
// metadata and position. If a later edit that was not reversed took its anchor away, the node is
// put before its first user (or the output) instead; a reference or user that is gone is an
// error naming it.
#pragma once

#include "rewrite/record_reader.h"
#include "rewrite/rewriter.h"

namespace fxopt {

// Captures the removal of `node` (call before any edit of it or its users).
Arg capture_removal(const Node& node);
// Puts one captured removal back and returns the recreated node.
Node* restore_removal(Rewriter& rewriter, const RecordField& captured);

}  // namespace fxopt
