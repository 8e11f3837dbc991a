// depthwise_conv: a depthwise 2-D convolution (one filter per channel: groups = input channels
// = output channels) of channels-last images, with its bias, zero padding on each of the four
// sides and a clamp after it (ReLU, ReLU6), in float32 or bfloat16 (summed in float32).
//
// Why fxopt has it: MobileNetV2's 17 depthwise convolutions at batch 1 are 0.4-4 M
// multiply-adds each, and oneDNN's call through torch spent 85-200 us on each on a Zen 4 core
// (13-20 GMAC/s in bfloat16; ~23 us before any work even on a 4x4 image), a quarter of the
// model. And a model from TensorFlow pads a stride-2 convolution on one side only ('same'
// padding), which a convolution's own padding cannot express, so it ran a separate pad first
// (a copy of the image, 0.4 ms of MobileNetV2): here the four sides are the kernel's own.
//
// Channels are the vector lanes (16 a step with AVX-512F, 8 with AVX2 + FMA, one in the plain
// C++ path elsewhere), eight output columns at a time where every tap is inside the image, one
// at a time near its edges. Products are summed from the bias in tap order (row-major), so
// results differ from ATen's and oneDNN's in the last bits; bfloat16 results are rounded to
// nearest even from the float32 sum.
#pragma once

#include <cstdint>
#include <limits>

namespace fxopt {

struct DepthwiseConv {
  int64_t batch = 1, channels = 0, height = 0, width = 0;  // the input image
  int64_t kernel_h = 0, kernel_w = 0, stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_left = 0;  // zeros before the first row and column
  int64_t out_h = 0, out_w = 0;       // the result's size, which implies the bottom/right pads
  float lower = -std::numeric_limits<float>::infinity();  // the clamp after the bias
  float upper = std::numeric_limits<float>::infinity();
};

// Floats depthwise_pack writes for `channels` filters of `taps` (kernel_h * kernel_w) weights.
int64_t depthwise_packed_size(int64_t channels, int64_t taps);
// packed = every tap's weights across the channels, then the bias (zeros when `bias` is null),
// each row padded with zeros to a whole number of vectors; weight [channels, taps] float32.
void depthwise_pack(const float* weight, const float* bias, int64_t channels, int64_t taps,
                    float* packed);

// y [batch, out_h, out_w, channels] = clamp(conv(x [batch, height, width, channels]) + bias),
// both contiguous, on up to `threads` threads (kernels/row_split.h). Throws
// std::invalid_argument for sizes that do not describe a convolution.
void depthwise_conv_f32(const DepthwiseConv& shape, const float* x, const float* packed, float* y,
                        int threads);
void depthwise_conv_bf16(const DepthwiseConv& shape, const uint16_t* x, const float* packed,
                         uint16_t* y, int threads);

// Whether the vector paths run here (AVX2 with FMA, under a oneDNN ISA cap): where they do not
// the plain C++ loops are correct but no faster than ATen's.
bool depthwise_conv_vectorized();

}  // namespace fxopt
