// What every pass that stands a chain of ATen calls in for a Linear shares (the int8 and
// weight-only Linears): the chain's two ends and its reversal.
//
//   forward:  x [.., K] -> (x flattened to [tokens, K] if not 2-D) -> the pass's own product
//             [tokens, N] -> end_linear_chain: + bias, reshape back to x's leading sizes, in
//             the Linear's place; the record says whether it flattened, had a bias, and which
//             attributes (the quantized weight and its scales) it stored.
//             A kernel that takes the Linear's input and bias as they are is one call: it
//             takes the Linear's place with replace_linear, and the record says neither.
//   reverse:  walk_linear_chain_end finds the product again from the chain's last node;
//             restore_linear_chain rebuilds the captured Linear on x and removes the chain and
//             its attributes.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ops/linear.h"
#include "passes/op_chain.h"
#include "rewrite/record_reader.h"

namespace fxopt {

extern const Symbol kReshape;

// A Linear a quantizing pass may replace, with its input's rank.
struct QuantizableLinear {
  LinearView view;
  int rank;
};
// The checks every quantizing pass makes first: a Linear with a float32 weight on the CPU (where
// `kernel`, named in the reason, runs); nullopt after skipping the node with the reason.
std::optional<LinearView> quantizable_weight(PassContext& ctx, Node* node, std::string_view kernel);
// quantizable_weight's checks, and an input of known rank (a chain flattens it); nullopt after
// skipping the node with the reason.
std::optional<QuantizableLinear> quantizable_linear(PassContext& ctx, Node* node,
                                                    std::string_view kernel);

// x as [tokens, K]: itself when 2-D, else a reshape of it.
Node* flat_linear_input(ChainBuilder& chain, const LinearView& view, Node* x, int rank);
// Adds the bias to the product `y` ([tokens, N]), gives it x's leading sizes back (recorded ones
// where known and `use_recorded`), puts it in `node`'s place and records the reversal (`captured`
// the Linear, `attributes` the paths the pass stored, `extra` its own fields). Returns the chain's
// last node, marked as changed.
Node* end_linear_chain(PassContext& ctx, ChainBuilder& chain, const LinearView& view, Node* node,
                       Node* y, int rank, std::string_view name, bool use_recorded, Arg captured,
                       std::vector<std::string> attributes, Record extra = {});
// What a chain added around the pass's own product: a flattening of x (and the reshape back),
// an add of the bias.
struct ChainEnds {
  bool flattened = false;
  bool bias_added = false;
};
// Puts `y`, the Linear's whole result (bias added, x's leading sizes), in `node`'s place and
// records the reversal (`record` the pass's own fields, `ends` what walk_linear_chain_end will
// pass). With `fused`, the Linear's only reader that y computes too (an activation, captured
// with the Linear), y takes that reader's place instead. Returns y, marked as changed.
Node* replace_linear(PassContext& ctx, const LinearView& view, Node* node, Node* y, Arg captured,
                     std::vector<std::string> attributes, Record record = {}, ChainEnds ends = {},
                     Node* fused = nullptr);
// From the chain's last node back past the reshape and the bias: the node before them.
Node* walk_linear_chain_end(ChainWalker& walk, Node* node, const RecordReader& record);
// Whether the forward flattened x (the walk then passes one more reshape to reach x).
bool linear_chain_flattened(const RecordReader& record);
// Rebuilds the captured Linear reading `x` in `node`'s place; erases the walked chain and the
// attributes the forward stored.
void restore_linear_chain(PassContext& ctx, ChainWalker& walk, Node* node, Node* x,
                          const RecordReader& record);

}  // namespace fxopt
