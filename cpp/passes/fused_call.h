// What the oneDNN fusions (FuseLinearActivationOneDnn, FuseConvActivationOneDnn) share: a chain
// of nodes (the op, then what it fuses) becomes one call, and reverse rebuilds the chain.
#pragma once

#include <initializer_list>
#include <span>
#include <string_view>
#include <vector>

#include "rewrite/pass.h"

namespace fxopt {

// Places `target(args)` where the chain's last node was, gives it that node's readers and value
// facts, erases the chain and records `captured` (capture_nodes of the chain) for reverse.
Node* replace_by_fused_call(PassContext& ctx, const std::vector<Node*>& chain, Arg captured,
                            Symbol target, std::string_view name, Args args);
// Rebuilds the chain `call` replaced; `inputs` are the chain's captured inputs, as the call
// reads them now. The operands at `tensor_operands` are get_attr reads, erased if unused.
void restore_fused_chain(PassContext& ctx, Node* call, const RecordReader& record,
                         std::span<Node* const> inputs,
                         std::initializer_list<size_t> tensor_operands);

}  // namespace fxopt
