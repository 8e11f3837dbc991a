// Op view: convolution and transposed convolution with stored weights, in every dialect:
//   call_module   nn.Conv1d / 2d / 3d, nn.ConvTranspose1d / 2d / 3d       symbolic_trace
//   call_function torch.conv{1,2,3}d / torch.conv_transpose{1,2,3}d      F.conv2d(x, w, b, ...)
//   call_function aten.conv{1,2,3}d.default / .padding, aten.conv_transpose{1,2,3}d.input
//                                                                         torch.export .module()
//   call_function aten.convolution.default(x, w, b, stride, padding, dilation, transposed,
//                 output_padding, groups)                                 decomposed export
// Weight layout: [out, in / groups, *kernel] for a convolution and [in, out / groups, *kernel]
// for a transposed one, so the output channels of a transposed convolution are dim 1 of its
// weight within each group.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/trigger.h"
#include "ops/stored_params.h"

namespace fxopt {

struct Conv {
  StoredParams params;    // "weight" (always present) and "bias" (may be absent)
  Node* input = nullptr;  // the data operand
  int spatial_dims = 0;   // 1, 2 or 3
  bool transposed = false;
  int64_t groups = 1;

  const TensorInfo& weight() const { return *params.tensor("weight"); }
  int64_t out_channels() const { return transposed ? weight().dim(1) * groups : weight().dim(0); }
};

// Stride, zero padding and dilation of a convolution, one value per spatial dimension.
struct ConvGeometry {
  std::vector<int64_t> stride, padding, dilation;
};

// Every (kind, target) that may be a convolution; call_module triggers name module types.
std::vector<Trigger> conv_triggers();
// The view of `node`, or nullopt with `why_not` saying what does not fit.
std::optional<Conv> as_conv(const Program& program, Node* node, std::string* why_not);
// The geometry of a (not transposed) convolution, from its module or operands; nullopt with
// `why_not` where it is not constant integers and zero padding ('same', padding_mode
// 'reflect', a transposed convolution).
std::optional<ConvGeometry> conv_geometry(const Program& program, const Conv& conv,
                                          std::string* why_not);

}  // namespace fxopt
