// FusePointwiseConv: a 1x1 convolution, with the residual add and the ReLU or ReLU6 after it, becomes one call of fxopt's kernel where that measured faster.
//
//   before:  %c = conv2d(%x, %w, %b, [1, 1], [0, 0], [1, 1], 1)    (%w [out, in, 1, 1])
//            %s = add(%c, %r)                            (optional: the convolution's only reader)
//            %y = relu6(%s)                              (optional: relu, relu6 / hardtanh(0, 6))
//   after:   %y = fxopt.runtime.pointwise_conv.pointwise_conv2d(%x, %w, %b, %r, 0.0, 6.0)
//
// Why: a channels-last 1x1 convolution is a matrix product, and at batch 1 oneDNN's call
// through torch costs 25-40 us of descriptors and allocations before its 20-250 us of work
// (ATen's without oneDNN reorders the weight at every call): MobileNetV2 makes 34 such calls
// (kernels/pointwise_conv.h for the numbers). Kernel choice (tuning/chooser.h), per
// convolution: "left" (the graph as the later passes make it: oneDNN's fused convolution, or
// ATen's where torch has none) or "fxopt"; the static fallback, when nothing was measured, is
// fxopt's kernel. A CPU without AVX2 never gets it (its plain loops are no faster); a bfloat16
// call on one without AVX512-BF16 runs ATen's convolution.
// Preconditions: Conv2d (op view, every dialect), not transposed, kernel 1x1, stride 1, no
// padding, dilation 1, one group; its weight float32 or bfloat16 on the CPU; a 3-D or 4-D input. The add
// and the activation are those conv_fusion finds (after an add, ReLU only); an activation other
// than ReLU / ReLU6 stays a node of its own. Everything else is skipped with the reason.
// Numerics: the same products, summed in float32 in another order (~1e-7 relative in float32;
// bfloat16 results rounded once from the float32 sum). Inference only: the call runs without autograd.
// Reverse rebuilds the captured convolution, add and activation (rewrite/capture.h): exact.
#pragma once

#include "rewrite/pass.h"

namespace fxopt {

class FusePointwiseConv final : public Pass {
 public:
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;
};

}  // namespace fxopt
