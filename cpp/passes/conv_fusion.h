// What the passes that turn a 2-D convolution into one oneDNN call share (FuseConvActivationOneDnn,
// QuantizeConvsInt8): which residual add and activation after it the call can take in, and how
// such a convolution is described to the kernel chooser.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ops/conv.h"
#include "passes/onednn_post_op.h"
#include "rewrite/pass.h"

namespace fxopt {

// `conv + residual` (either order, no alpha) or `conv += residual` (operator, ATen or method),
// the convolution's only reader, with the other operand of the result's known shape and dtype.
struct ResidualAdd {
  Node* node;
  Node* residual;
};

// A 2-D convolution and what may run in the same call after it.
struct ConvFusion {
  Conv conv;
  ConvGeometry geometry;
  std::optional<ResidualAdd> add;
  std::optional<FusableActivation> activation;  // of the add's result if there is one

  // The sizes the kernel chooser is asked with: the input's N, C, H, W (-1 where unknown), out
  // channels, kernel height and width, stride, padding, dilation, groups.
  std::vector<int64_t> choice_shape() const;
  // The activation, ",add" and ",no_bias": what else changes the kernels' time.
  std::string choice_variant() const;
  // The nodes the call replaces, in order, and the values it reads from outside them.
  std::vector<Node*> pattern() const;
  std::vector<Node*> inputs() const;
  // Forgets the add and the activation (a kernel that does not take them in).
  void unfuse();
};

// The convolutions fxopt's own kernels take in later passes: a 1x1 one at stride 1 without
// padding, dilation or groups (FusePointwiseConv), a depthwise one, one filter per input channel
// of a known count (FuseDepthwiseConv, which also needs dilation 1).
bool is_pointwise(const ConvFusion& fusion);
bool is_depthwise(const ConvFusion& fusion);

// The view of `node` as a 2-D, not transposed convolution with constant zero-padding geometry
// and a 3-D or 4-D input (or one of unknown rank), with the residual add and the activation
// oneDNN can apply after it (after an add, ReLU only: oneDNN's binary convolution leaves the
// others undefined); nullopt with `why_not` otherwise.
std::optional<ConvFusion> conv_fusion(const Program& program, Node* node, std::string* why_not);

}  // namespace fxopt
