// Op view: a call that returns its input unchanged, in every dialect.
//
//   what                          symbolic_trace (modules, functions, methods)    torch.export
//   dropout in eval mode / p=0    nn.Dropout (training False), F.dropout(x, p,     aten.dropout.default
//                                 training=False), torch.dropout(x, p, False)      (x, p, False)
//   identity module               nn.Identity                                      -
//   copy                          x.clone(), torch.clone(x)                        aten.clone.default
//   gradient stop / alias         x.detach(), torch.detach(x)                      aten.detach.default,
//                                                                                  aten.alias.default
//   contiguous copy of a value    x.contiguous() after a Linear / matmul /         -
//   already contiguous            embedding
//   cast to the same dtype        x.to(dtype), x.to(other), x.float(), ...,        aten.to.dtype /
//   (and device)                  x.type_as(other)                                 dtype_layout /
//                                                                                  device,
//                                                                                  aten._to_copy
//   reshape to the same shape     x.view(...), x.reshape(...), x.expand(...),      aten.view / reshape /
//                                 torch.reshape                                    _unsafe_view / expand
// Devices and shapes come from what fx recorded (Node::device / shape: export's meta["val"],
// ShapeProp's tensor_meta, which has no device), dtypes from the graph as it runs now
// (ops/value_dtype.h: after a lowering, a value recorded float32 may be bfloat16);
// a cast that may move the value to another device needs both devices recorded. Shapes count
// only when every size is static. A memory_format argument is never taken as a no-op.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/trigger.h"
#include "ops/value_dtype.h"

namespace fxopt {

struct NoOp {
  Node* input = nullptr;  // the value the node returns unchanged
  // The node returns a copy (clone, _to_copy, to(copy=True)): without it, its readers share the
  // input's storage. Every other form returns the input itself or a view of it.
  bool copies = false;
};

// Every (kind, target) that may be a no-op; call_module triggers name module types.
std::vector<Trigger> no_op_triggers();
// The view of `node`, or nullopt with `why_not` saying why it is not (or not provably) a no-op.
std::optional<NoOp> as_no_op(const Program& program, const ValueDtypes& dtypes, const Node& node,
                             std::string* why_not);

}  // namespace fxopt
