// FuseDepthwiseConv: a depthwise 2-D convolution, with the zero pad before it and the ReLU or
// ReLU6 after it, becomes one call of fxopt's channels-last kernel where that measured faster.
//
//   before:  %p = pad(%x, [l, r, t, b])                  (optional: read only by the convolution)
//            %c = conv2d(%p, %w, %b, stride, padding, [1, 1], groups = channels)
//            %y = relu6(%c)                              (optional: relu, relu6 / hardtanh(0, 6))
//   after:   %y = fxopt.runtime.depthwise_conv.depthwise_conv2d(%x, %w, %b, stride,
//                     [top, bottom, left, right], 0.0, 6.0)
//
// Why: a depthwise convolution does little work per byte, and oneDNN's call through torch
// costs tens of microseconds before any of it; a model ported from TensorFlow pads a stride-2
// one on one side only, which only a separate pad (a copy of the image) expresses
// (kernels/depthwise_conv.h for the numbers). The kernel takes the four sides' zeros itself.
// Kernel choice (tuning/chooser.h), per convolution: "left" (the graph as the later passes make
// it: the pad, then oneDNN's fused convolution, or ATen's where torch has none) or "fxopt";
// the static fallback, when nothing was measured, is fxopt's kernel. A CPU without AVX2 never
// gets it (its plain loops are no faster).
// Preconditions: Conv2d (op view, every dialect), not transposed, constant zero-padding
// geometry, dilation 1; its weight [C, 1, kh, kw] with groups = C = the input's known channel
// count, float32 or bfloat16 on the CPU; a 3-D or 4-D input. A pad is taken in
// when the convolution is its only reader and it pads only the two spatial dimensions, with
// constant non-negative widths. An activation other than ReLU / ReLU6, or one after a residual
// add, stays a node of its own. Everything else is skipped with the reason.
// Numerics: the same products, summed in another order (~1e-7 relative in float32; bfloat16
// results rounded once from the float32 sum). Inference only: the call runs without autograd.
// Reverse rebuilds the captured pad, convolution and activation (rewrite/capture.h): exact.
#pragma once

#include "rewrite/pass.h"

namespace fxopt {

class FuseDepthwiseConv final : public Pass {
 public:
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;
};

}  // namespace fxopt
