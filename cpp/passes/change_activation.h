// ChangeActivation: every activation of one kind becomes another (not computation-preserving).
//
//   before:  %y = gelu(%x)             after:  %y = gelu(%x, approximate='tanh')
//            %y = call_module[act](%x)         %y = torch.nn.functional.silu(%x)
//
// Kinds and their spellings are the activation op view's (ops/activation.h): relu, relu6,
// gelu (exact), gelu_tanh, silu, sigmoid, tanh, mish, hardswish. The node keeps its name and
// users; a module, function or method call becomes a torch function call, an ATen call an
// ATen call. A module left uncalled stays registered, for reverse.
// Preconditions: the activation is `source` exactly (a GELU with the other approximation is
// skipped); an in-place one (nn.ReLU(inplace=True)) only when nothing else reads its input,
// since the replacement leaves its input alone.
// Reverse restores the node's original kind, target and operands from its record, which holds
// them with the data operand as a parameter (rewrite/recorded_call.h).
#pragma once

#include <string>

#include "rewrite/pass.h"

namespace fxopt {

class ChangeActivation final : public Pass {
 public:
  // Throws std::invalid_argument for an unknown activation name or source == target.
  ChangeActivation(std::string source, std::string target);
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;

 private:
  std::string source_, target_;
};

}  // namespace fxopt
