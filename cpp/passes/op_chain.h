// Building and finding again a chain of ATen calls that stands for one op (the int8 Linears).
//
// A pass that replaces an op by several plain ATen calls builds them with ChainBuilder and, on
// reverse, finds them again from the chain's last node with ChainWalker, by argument position:
// fx may rename nodes between syncs, so names are not stable, but the chain's shape is.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "rewrite/pass.h"

namespace fxopt {

// Creates the chain's ATen calls before `anchor`.
class ChainBuilder {
 public:
  ChainBuilder(Rewriter& rewriter, Node* anchor) : rewriter_(rewriter), anchor_(anchor) {}

  Node* call(Symbol target, std::string_view hint, Args args, Kwargs kwargs = {}) {
    return rewriter_.insert_before(anchor_, NodeKind::CallFunction, target, hint, std::move(args),
                                   std::move(kwargs));
  }

 private:
  Rewriter& rewriter_;
  Node* anchor_;
};

// Walks a chain back from its last node, collecting its nodes; `what` names the op the chain
// stands for, in the error a changed chain raises ("the int8 Linear").
class ChainWalker {
 public:
  ChainWalker(Node* last, std::string what) : last_(last), what_(std::move(what)) {}

  // The operand `index` of `node`, which must be a call of `target`; `node` joins the chain.
  Node* operand(Node* node, Symbol target, size_t index);
  // Throws the error of a chain that is no longer what the pass made.
  [[noreturn]] void mismatch() const;
  // Every node met, users before the values they read.
  const std::vector<Node*>& nodes() const { return nodes_; }
  // Erases the chain (users first) and the get_attr reads only it used.
  void erase(Rewriter& rewriter);

 private:
  Node* last_;
  std::string what_;
  std::vector<Node*> nodes_;
};

// x.shape[:-1] + [n] for an x of `rank`: the recorded sizes where known and `use_recorded`,
// aten.sym_size reads of x otherwise (they follow x's shape from call to call).
List output_shape(ChainBuilder& chain, Node* x, int rank, int64_t n, bool use_recorded);

// The aten.sym_size target output_shape reads sizes with.
extern const Symbol kSymSize;

}  // namespace fxopt
