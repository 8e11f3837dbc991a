// ConvWeightsChannelsLast: 2-D convolution weights are stored channels-last (NHWC strides).
//
//   before:  %y = conv2d(%x, %w, %b)       %w laid out [out, in, kh, kw] contiguous
//   after:   %y = conv2d(%x, %w_cl, %b)    %w_cl: the same values, channels-last strides
//
// Why: torch picks the memory format of a convolution's output from its input and weight; with
// a channels-last weight, oneDNN runs every convolution of the network in NHWC, its fast layout
// on CPU, and the activations stay NHWC from the first convolution on (batch norm, ReLU and
// residual adds keep the format), without converting the graph's input. Measured on AMD EPYC
// (Zen 4, one thread, batch 1) after bfloat16 lowering: ResNet-50 1.72x -> 2.06x, MobileNetV2
// 1.79x -> 2.75x over eager float32 (bench/latency.py has the current figures).
// Preconditions: a convolution (op views, every dialect) with a 4-D stored weight; transposed
// convolutions too. Numerics: the same arithmetic in another loop order; outputs match float32
// eager within its tolerance (not bit-exact).
// Copy-on-write (passes/replace_params.h): the weight copy is a new module or attribute
// `<path>_channels_last`; reverse points the op back at the untouched original, bit for bit.
#pragma once

#include "rewrite/pass.h"

namespace fxopt {

class ConvWeightsChannelsLast final : public Pass {
 public:
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;
};

}  // namespace fxopt
