// What a pass fires on, and whether a node is one of those. Op recognition (`cpp/ops/`) names
// its ops as triggers, so it lives with the IR, not with the pass machinery that consumes it.
#pragma once

#include <vector>

#include "ir/node.h"
#include "ir/program.h"
#include "ir/symbol.h"

namespace fxopt {

// A (kind, target) pair, except that for call_module the target is the module's type (e.g.
// torch.nn.modules.linear.Linear), since call_module targets are paths.
struct Trigger {
  NodeKind kind;
  Symbol target;
};

// True if `node` is one of the nodes `triggers` name (for call_module: by its module's type).
bool matches_trigger(const Program& program, const Node& node,
                     const std::vector<Trigger>& triggers);

}  // namespace fxopt
