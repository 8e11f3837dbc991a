#include "ops/matmul.h"

#include <algorithm>

namespace fxopt {

std::vector<Trigger> matmul_triggers() {
  std::vector<Trigger> triggers;
  for (const char* f : {"_operator.matmul", "torch.matmul", "torch.mm", "torch.bmm",
                        "aten.matmul.default", "aten.mm.default", "aten.bmm.default"})
    triggers.push_back({NodeKind::CallFunction, Symbol::intern(f)});
  for (const char* m : {"matmul", "mm", "bmm"})
    triggers.push_back({NodeKind::CallMethod, Symbol::intern(m)});
  return triggers;
}

std::optional<MatMul> as_matmul(const Node& node, std::string* why_not) {
  static const std::vector<Trigger> triggers = matmul_triggers();
  if (std::none_of(triggers.begin(), triggers.end(),
                   [&](const Trigger& t) { return node.is(t.kind, t.target); })) {
    *why_not = "not a matrix product";
    return std::nullopt;
  }
  if (node.args().size() != 2 || !node.kwargs().items.empty() || !node.args()[0].node() ||
      !node.args()[1].node()) {
    *why_not = "its operands are not two positional graph tensors";
    return std::nullopt;
  }
  return MatMul{node.args()[0].node(), node.args()[1].node()};
}

}  // namespace fxopt
