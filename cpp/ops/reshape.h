// Op view: a reshape that keeps the element order, in every dialect:
//   x.view(...), x.reshape(...), torch.reshape(x, ...)                  symbolic_trace
//   aten.view.default, aten.reshape.default, aten._unsafe_view.default   torch.export
// The new shape is not read here: passes compare the shapes fx recorded (Node::shape).
#pragma once

#include "ir/node.h"

namespace fxopt {

// The tensor `node` reshapes, or nullptr if it is no reshape.
Node* reshape_source(const Node& node);

}  // namespace fxopt
