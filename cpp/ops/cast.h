// Op builders for dtype casts, in the dialect of the node they serve, and their inverse view:
//              cast to a dtype                      cast to another tensor's dtype
//   ATen       aten.to.dtype(x, dtype)              aten.type_as.default(y, x)
//   otherwise  x.to(dtype)        (call_method)     y.type_as(x)        (call_method)
// which is how torch.export and symbolic_trace spell `x.to(dtype)` and `y.type_as(x)`. A dtype
// is an opaque Python value (torch.float16) the pass was given; the core never reads it.
#pragma once

#include "rewrite/rewriter.h"

namespace fxopt {

// True for ATen calls (torch.export graphs): what they build is ATen too.
bool is_aten_call(const Node& node);
// `value` cast to `dtype`, created before `anchor`.
Node* insert_cast(Rewriter& rewriter, Node* anchor, Node* value, const Arg& dtype, bool aten);
// `value` cast to the dtype of `like`, created before `anchor`.
Node* insert_type_as(Rewriter& rewriter, Node* anchor, Node* value, Node* like, bool aten);
// The tensor a cast of either kind converts, or nullptr if `node` is no such cast.
Node* cast_source(const Node& node);

}  // namespace fxopt
