// Op views for the pieces of a hand-written attention, in every dialect, and the builders of
// scaled_dot_product_attention and its helpers in the dialect of the node they serve.
//
//   piece                 symbolic_trace (modules, torch functions, methods)      torch.export
//   swap of the last      x.transpose(-2, -1), torch.transpose(x, 2, 3),           aten.transpose.int
//   two dims              x.permute(0, 1, 3, 2), torch.permute(x, [...])           aten.permute.default
//   scale by a number     x / c, x * c, c * x, torch.div / mul, x.div(c), x.mul(c) aten.div / mul
//   additive mask         x + m, m + x, torch.add(x, m), x.add(m)   (no alpha)     aten.add.Tensor
//   fill where masked     x.masked_fill(m, v), torch.masked_fill(x, m, v),         aten.masked_fill.Scalar
//                         torch.where(c, x, v), torch.where(c, v, x)               aten.where.ScalarOther
//                                                                                  / ScalarSelf
//   softmax               nn.Softmax(dim), F.softmax, torch.softmax, x.softmax     aten.softmax.int
//                                                                                  aten._softmax.default
//   dropout               nn.Dropout, F.dropout, torch.dropout                     aten.dropout.default
//   cast                  x.to(dtype), x.type(dtype), x.type_as(y)                 aten.to.dtype,
//                                                                                  aten.type_as.default
//   runtime check         -                                                        aten._assert_tensor_
//                                                                                  metadata.default
// Built calls: ATen calls for ATen nodes (aten.scaled_dot_product_attention.default, ...), torch
// functions and methods otherwise (torch._C._nn.scaled_dot_product_attention, which is what
// torch.nn.functional.scaled_dot_product_attention is).
#pragma once

#include <optional>
#include <string>

#include "ir/trigger.h"
#include "ops/arithmetic.h"
#include "rewrite/rewriter.h"

namespace fxopt {

// The tensor whose last two dims `node` swaps, or nullptr. Positive dims count only where the
// rank is known (Node::rank); permute spells the rank out itself.
Node* last_two_transposed(const Node& node);

// `scores` with `fill` written where `condition` is `fill_where`: masked_fill(scores, m, v) is
// {m, v, true}, where(c, scores, v) is {c, v, false}.
struct MaskFill {
  Node* scores = nullptr;
  Node* condition = nullptr;
  double fill = 0.0;
  bool fill_where = true;
};
// nullopt if `node` is no such fill; a fill value that is not a Python number sets `why_not`.
std::optional<MaskFill> as_mask_fill(const Node& node, std::string* why_not);

// A softmax over the last dim; nullopt if `node` is none, with `why_not` set if it is a softmax
// over another (or an unknown) dim.
std::optional<Node*> as_last_dim_softmax(const Program& program, const Node& node,
                                         std::string* why_not);

struct Dropout {
  Node* input = nullptr;
  bool identity = false;  // eval mode (module or training=False) or p == 0
};
std::optional<Dropout> as_dropout(const Program& program, const Node& node);

// The tensor a dtype cast converts (x.to(dtype), x.type(dtype), x.type_as(y), ATen
// equivalents), or nullptr.
Node* cast_input(const Node& node);

// True for a runtime check of a value's metadata (torch.export inserts them after casts): it has
// no result, so it can go with the value it checks.
bool is_value_check(const Node& node);

// A call a node becomes.
struct Call {
  NodeKind kind;
  Symbol target;
  Args args;
  Kwargs kwargs;
};
// scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale); no attn_mask when `mask`
// is nullptr.
Call sdpa_call(Node* q, Node* k, Node* v, Node* mask, double scale, bool aten);
// True if `node` is a call `sdpa_call` builds.
bool is_sdpa_call(const Node& node);
// `x` with its last two dims swapped, created before `anchor`.
Node* insert_last_two_transpose(Rewriter& rewriter, Node* anchor, Node* x, bool aten);
// The additive mask of a fill: `fill` where `condition` is `fill_where`, 0.0 elsewhere
// (torch.where of two numbers: the default dtype), created before `anchor`.
Node* insert_additive_mask(Rewriter& rewriter, Node* anchor, const MaskFill& fill, bool aten);

}  // namespace fxopt
