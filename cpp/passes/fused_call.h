// What the passes that turn a chain of nodes into one call share (the oneDNN fusions,
// FoldPadInConv, FuseTanhGelu): the chain becomes the call, and reverse rebuilds the chain.
#pragma once

#include <initializer_list>
#include <span>
#include <string_view>
#include <vector>

#include "ops/stored_params.h"
#include "rewrite/pass.h"

namespace fxopt {

// Places `target(*args, **kwargs)` where the chain's last node was, gives it that node's readers and value
// facts, erases the chain and records `captured` (capture_nodes of the chain) for reverse.
Node* replace_by_fused_call(PassContext& ctx, const std::vector<Node*>& chain, Arg captured,
                            Symbol target, std::string_view name, Args args, Kwargs kwargs = {});
// A stored tensor of a weighted op as an operand of the call that replaces it: its get_attr
// operand, or a new read (before `anchor`) of its module's tensor; None if it has none.
Arg stored_tensor_operand(Rewriter& rewriter, const StoredParams& params, Node* anchor,
                          std::string_view name);
// Rebuilds the chain `call` replaced; `inputs` are the chain's captured inputs, as the call
// reads them now. The operands at `tensor_operands` are get_attr reads, erased if unused; those
// at `created_operands` read tensors the pass stored, removed too once nothing reads them.
void restore_fused_chain(PassContext& ctx, Node* call, const RecordReader& record,
                         std::span<Node* const> inputs,
                         std::initializer_list<size_t> tensor_operands,
                         std::initializer_list<size_t> created_operands = {});

}  // namespace fxopt
