// FoldPadInConv: a zero padding read only by a convolution becomes the convolution's own
// padding.
//
//   before:  %p = pad(%x, [l, r, t, b])                  (F.pad, aten.constant_pad_nd, aten.pad;
//            %y = conv2d(%p, %w, %b, stride, padding,     mode constant, value 0)
//                        dilation, groups)
//   after:   %y = conv2d(%x, %w, %b, stride, padding + [t, l], dilation, groups)
//
// Why: models ported from TensorFlow ("same" padding: transformers' MobileNet, EfficientNet
// with tf_padding) pad every convolution's input explicitly, often by zero. Each pad copies the
// activation into a new, contiguous (NCHW) tensor, which also undoes the channels-last layout
// the previous convolution produced: measured on a Zen 4, transformers' MobileNetV2 at batch 1
// spent 52 pads and about 10% of its bfloat16 time in them.
// Preconditions: the pad's widths are constant, non-negative and equal on both sides of each
// spatial dimension (torch's convolutions pad symmetrically), zero on the batch and channel
// dimensions; its only reader is a convolution (op view, every dialect, not transposed) that
// reads it as its input, with constant integer zero padding. The asymmetric "same" padding of
// a stride-2 convolution stays a pad.
// The result is one convolution call, `torch.convNd` (`aten.convNd.default` in an ATen graph),
// whatever the convolution's form was; a module's weight and bias are read through get_attr.
// Numerics: the same sums over the same values (a convolution's own padding is zeros).
// Reverse rebuilds the captured pad and convolution (rewrite/capture.h): exact.
#pragma once

#include "rewrite/pass.h"

namespace fxopt {

class FoldPadInConv final : public Pass {
 public:
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;
};

}  // namespace fxopt
