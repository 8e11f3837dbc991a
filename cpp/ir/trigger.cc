#include "ir/trigger.h"

#include <algorithm>

namespace fxopt {

bool matches_trigger(const Program& program, const Node& node,
                     const std::vector<Trigger>& triggers) {
  const ModuleInfo* module =
      node.kind() == NodeKind::CallModule ? program.module(node.target()) : nullptr;
  Symbol target = module ? module->type : node.target();
  return std::any_of(triggers.begin(), triggers.end(),
                     [&](const Trigger& t) { return t.kind == node.kind() && t.target == target; });
}

}  // namespace fxopt
