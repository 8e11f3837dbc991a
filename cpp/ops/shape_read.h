// Reads of a value's shape only (its sizes or rank), in every dialect. A rewrite that keeps a
// value's shape, such as a batch norm folded into the convolution or Linear before it, need not
// mind these readers: timm's BatchNormAct2d asserts `x.ndim == 4` on the convolution's output
// before it normalizes it, and that check holds on the folded output as well.
//
//   symbolic, Dynamo   getattr(x, "shape"), getattr(x, "ndim"), x.size(...), x.dim(),
//                      x.ndimension(), x.numel()
//   ATen               aten.sym_size.int, aten.sym_numel.default, aten.dim.default
#pragma once

#include "ir/node.h"

namespace fxopt {

// True if `user` reads `value` only to know its shape, sizes or rank.
bool reads_only_shape(const Node& user, const Node& value);
// True if every user of `value` but `reader` reads only its shape.
bool only_shape_read_besides(const Node& value, const Node& reader);

}  // namespace fxopt
