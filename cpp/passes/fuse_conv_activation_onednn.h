// FuseConvActivationOneDnn: a 2-D convolution, with the residual add and the activation that
// read only its result, becomes one call of oneDNN's convolution on a weight packed once.
//
//   before:  %c = conv2d(%x, %w, %b, stride, padding, dilation, groups)
//            %s = add(%c, %r)            (optional: %c + %r, %r + %c, %c += %r, %c.add_(%r))
//            %y = relu(%s)               (optional: any post-op of passes/onednn_post_op.h
//                                         without an add, ReLU only after one)
//   after:   %y = fxopt.runtime.onednn_conv.conv_pointwise(%x, %w, %b, stride, padding,
//                     dilation, groups, %r, "relu", [], None)
//
// Why: at batch 1 ATen's convolution reorders its weight into oneDNN's blocked layout on every
// call; the runtime function packs it once (torch.ops.mkldnn._reorder_convolution_weight, for
// the input size of the first call) and keeps the packing while the weight lives, so the graph
// holds plain tensors and deep-copies, saves and reverses like any other. The add and the
// activation then run as post-ops on the convolution's output while it is in cache. Measured on
// an Intel Xeon (AMX, one thread, batch 1, 224x224, bf16 after ChangePrecision): ResNet-50
// 29 -> 21 ms with the packing alone, 18.7 ms with residual add + ReLU fused; MobileNetV2 9.2 ->
// 6.7 ms; float32 ResNet-50 67 -> 54 ms. The output is channels-last whatever the input's layout.
// Kernel choice (tuning/chooser.h), per convolution: "aten" (leave it) or oneDNN's packed call,
// "onednn_fused" with the add and activation where they fuse, else "onednn"; the static
// fallback, when nothing was measured, is oneDNN's. The packed call without the add and
// activation that could fuse is no candidate: on a Zen 4 (fast, one thread) dropping it left
// ResNet-50 and MobileNetV2 as fast (44.4 / 44.5 ms, 8.77 / 8.79 ms, 15 alternating rounds)
// and their tuning 1.6 -> 0.7 s and 1.6 -> 1.0 s; pinning the fused call had measured 3-5%
// faster end to end than the choice among the three on an Intel Xeon.
// Preconditions: Conv2d (op view, every dialect; not transposed), constant integer stride,
// padding and dilation, zero padding; the weight's dtype in option "dtypes" (what oneDNN runs
// natively here, decided in Python), on the CPU; a 3-D or 4-D input (or one of unknown rank). A residual add fuses when the
// convolution's result is its only reader, the other operand has the result's known shape and
// dtype, and it has no alpha; `%r += %c` does not (it writes %r). Everything else is skipped
// with the reason.
// Numerics: oneDNN's algorithms sum in another order (~1e-6 relative in float32; bfloat16
// rounding in bfloat16). Inference only: the call runs without autograd.
// Reverse rebuilds the captured convolution, add and activation (rewrite/capture.h); the weights
// were never changed, so it is exact.
#pragma once

#include <string>
#include <vector>

#include "rewrite/pass.h"

namespace fxopt {

class FuseConvActivationOneDnn final : public Pass {
 public:
  explicit FuseConvActivationOneDnn(std::vector<std::string> dtypes);
  // From the options {"dtypes": [name, ...]}; throws std::invalid_argument if malformed.
  static std::unique_ptr<Pass> from_options(const Dict& options);
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;

 private:
  std::vector<std::string> dtypes_;
};

}  // namespace fxopt
