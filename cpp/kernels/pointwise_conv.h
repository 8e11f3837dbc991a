// pointwise_conv: a 1x1 convolution of a channels-last image (stride 1, no padding, one group),
// float32 or bfloat16, with its bias, an optional residual added and a clamp after it (ReLU,
// ReLU6): for each pixel, out[n] = clamp(bias[n] + sum_k x[k] * w[n, k] + residual[n]). A
// matrix product of [pixels, in] by [in, out], which is what a channels-last 1x1 convolution is.
//
// Why fxopt has it: MobileNetV2's 34 1x1 convolutions at batch 1 are 0.2-20 M multiply-adds
// each, and oneDNN's call through torch costs 25-40 us before any of them (a 16-channel 4x4
// image took 38 us on a Zen 4 core, most of it descriptors and allocations made per call), on
// top of 50-250 us of work; ATen's path without oneDNN's packed weight reorders the weight at
// every call. Here the packing is made once and the call costs a few microseconds.
//
// Output channels in packed blocks of 32, six pixels a step, twelve float32 sums in registers.
// bfloat16: AVX512-BF16 dot products (vdpbf16ps: two bfloat16 products added into a float32
// lane), each pair of input channels one broadcast per pixel a step; the result rounded to
// nearest even once, from the float32 sum; as the instructions define it, subnormal inputs
// count as zero and subnormal results are flushed to zero. float32: fused multiply-adds, one
// input channel a step (AVX-512F, or AVX2 with FMA in columns of 16 channels). Elsewhere plain
// C++ loops, correct but slow (the pass never picks them). The sum starts from the bias and
// adds the products in input channel order, so results differ from ATen's and oneDNN's in the
// last bits.
#pragma once

#include <cstdint>
#include <limits>

namespace fxopt {

struct PointwiseConv {
  int64_t pixels = 0;                                     // batch x height x width
  int64_t in_channels = 0;                                // K
  int64_t out_channels = 0;                               // N
  float lower = -std::numeric_limits<float>::infinity();  // the clamp after bias and residual
  float upper = std::numeric_limits<float>::infinity();
};

// Bytes a pack function writes for a weight [out_channels, in_channels].
int64_t pointwise_packed_bytes(int64_t out_channels, int64_t in_channels, bool bfloat16);
// packed = the weight in blocks of 32 output channels (zeros past the last channel): bfloat16
// with each block's input channels in pairs ([block][pair][32 channels][2]), float32 one input
// channel a row ([block][in][32 channels]); then the bias as float32 (zeros when `bias` is
// null) for every block's 32 channels.
void pointwise_pack_bf16(const uint16_t* weight, const float* bias, int64_t out_channels,
                         int64_t in_channels, void* packed);
void pointwise_pack_f32(const float* weight, const float* bias, int64_t out_channels,
                        int64_t in_channels, void* packed);

// y [pixels, out] = clamp(x [pixels, in] * w^T + bias [+ residual [pixels, out]]), all
// contiguous and of the packing's dtype (residual may be null), on up to `threads` threads
// (kernels/row_split.h). Throw std::invalid_argument for sizes that describe no product.
void pointwise_conv_bf16(const PointwiseConv& shape, const uint16_t* x, const void* packed,
                         const uint16_t* residual, uint16_t* y, int threads);
void pointwise_conv_f32(const PointwiseConv& shape, const float* x, const void* packed,
                        const float* residual, float* y, int threads);

// Whether a vector path runs here for the dtype (bfloat16: AVX512-BF16; float32: AVX2 with FMA,
// in a GCC build), under a oneDNN ISA cap.
bool pointwise_conv_vectorized(bool bfloat16);

}  // namespace fxopt
