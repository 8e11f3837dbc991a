// Building Linears and the ops next to them, in the dialect of a Linear the pass was given.
//
// Copy-on-write: nothing here changes a module or tensor object the GraphModule already has.
// New tensors go into copies of modules (Rewriter::set_module with `like`) or into attribute
// slots; "replacing" or "removing" a Linear's tensors re-points or drops the GraphModule's
// reference, and the caller's model keeps its own.
//
// Reversal: `describe` writes into a Record how a Linear was spelled, as plain values only
// (kind, target, paths, get_attr node names, its arguments with node references blanked);
// `restore_linear` spells a node that way again around tensors the pass recomputed. Records
// hold no tensors and no node references, so they survive deep copies of the GraphModule and
// later bridge sessions, where this session's tensor handles and nodes mean nothing.
#pragma once

#include <string>

#include "ops/linear.h"
#include "ops/tied_tensors.h"
#include "rewrite/pass.h"

namespace fxopt {

// Where new Linears' tensors are stored: a module, or attributes.
struct StoredLinear {
  std::string module;        // module form: the module's path
  std::string weight, bias;  // get_attr form: attribute paths (bias empty: none)
};
// Stores `weight` / `bias` (absent: no bias) for new Linears in `like`'s dialect, at unique
// paths in like's scope named after `name`: a copy of like's module, or new attributes.
StoredLinear store_linear(Rewriter& rewriter, const LinearView& like, const std::string& name,
                          const TensorInfo& weight, const TensorInfo& bias);
// A call of the stored Linear before `anchor`, reading `input`, named after `name`; several
// calls share the get_attr reads that come before them.
Node* call_linear(Rewriter& rewriter, const LinearView& like, const StoredLinear& stored,
                  Node* anchor, Node* input, const std::string& name);
// Replaces the Linear's tensors at their own paths (in_features follows the weight); an absent
// `bias` drops the bias operand and attribute. Requires owns_tensors.
void replace_tensors(Rewriter& rewriter, const LinearView& view, const TensorInfo& weight,
                     const TensorInfo& bias);
// Removes the Linear's module or attributes (and get_attr nodes) once no node reads them any
// more (call sites sharing them: the last one's call removes them).
void remove_tensors(Rewriter& rewriter, const LinearView& view);
// The Linear's tensor `name` ("weight", "bias") as an operand for a node before `anchor`: the
// get_attr node it was read through, else a new read of the module's tensor; None if absent.
Arg read_linear_tensor(Rewriter& rewriter, const LinearView& view, Node* anchor,
                       std::string_view name);
// Makes the Linear read `input` instead of its current input.
void set_linear_input(Rewriter& rewriter, const LinearView& view, Node* input);

// Turns `node` into source[..., start:end], a view, in `like`'s dialect.
void make_slice(Rewriter& rewriter, const LinearView& like, Node* node, Node* source, int64_t start,
                int64_t end);
// The sliced tensor if `node` is a last-dimension slice `make_slice` builds, else nullptr.
Node* slice_source(const Node& node);

// cat([x, ones(..., 1)], -1) in `like`'s dialect, as one op: a constant pad of the last
// dimension by one column of value 1, which has x's dtype and device whatever they are.
Node* create_ones_column(Rewriter& rewriter, const LinearView& like, Node* anchor, Node* x);
// x if `node` is a ones column of x in `like`'s dialect, else nullptr.
Node* ones_column_source(const LinearView& like, const Node& node);

// Writes how the Linear is spelled into `record` (keys "linear.*": a pass's own fields are
// named otherwise), and where else its tensors
// were stored (ops/tied_tensors.h).
void describe(const LinearView& view, const TiedTensors& tied, Record& record);
// True if the described Linear had a bias.
bool recorded_bias(const RecordReader& record);
// Makes `node` the Linear `record` describes, reading `input`, with `weight` / `bias` (absent:
// None) stored at the recorded paths and read through the recorded get_attr nodes (reused when
// still there, else recreated under their names). A recorded module comes back as a copy of
// `like`'s module (same type: both passes only ever pair a Linear with one of its kind). A
// tensor that was tied to another path takes the tensor stored there, if it can stand in.
void restore_linear(Rewriter& rewriter, Node* node, const RecordReader& record, Node* input,
                    const TensorInfo& weight, const TensorInfo& bias, const LinearView& like);

}  // namespace fxopt
