// pointwise_conv: a 1x1 convolution of a channels-last bfloat16 image (stride 1, no padding, one
// group), with its bias, an optional residual added and a clamp after it (ReLU, ReLU6): for
// each pixel, out[n] = clamp(bias[n] + sum_k x[k] * w[n, k] + residual[n]). A matrix product of
// [pixels, in] by [in, out], which is what a channels-last 1x1 convolution is.
//
// Why fxopt has it: MobileNetV2's 34 1x1 convolutions at batch 1 are 0.2-20 M multiply-adds
// each, and oneDNN's call through torch costs 25-40 us before any of them (a 16-channel 4x4
// image took 38 us on a Zen 4 core, most of it descriptors and allocations made per call), on
// top of 50-250 us of work; ATen's path without oneDNN's packed weight reorders the weight at
// every call. Here the packing is made once and the call costs a few microseconds.
//
// AVX512-BF16 dot products (vdpbf16ps: two bfloat16 products added into a float32 lane):
// output channels in blocks of 32 (two vectors), six pixels a step (twelve sums in registers),
// each pair of input channels one broadcast per pixel. Elsewhere a plain C++ loop, correct but
// slow (the pass never picks it). The sum starts from the bias and adds the products in input
// channel order, a pair at a time, so results differ from ATen's and oneDNN's in the last bits;
// the result is rounded to nearest even once, from the float32 sum. As the instructions define
// it, bfloat16 subnormal inputs count as zero and subnormal results are flushed to zero.
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

// Bytes pointwise_pack writes for a weight [out_channels, in_channels].
int64_t pointwise_packed_bytes(int64_t out_channels, int64_t in_channels);
// packed = the weight in blocks of 32 output channels, each block's input channels in pairs
// ([block][pair][32 channels][2] bfloat16, zeros past the last channel), then the bias as
// float32 (zeros when `bias` is null) for every block's 32 channels.
void pointwise_pack(const uint16_t* weight, const float* bias, int64_t out_channels,
                    int64_t in_channels, void* packed);

// y [pixels, out] = clamp(x [pixels, in] * w^T + bias [+ residual [pixels, out]]), all
// contiguous bfloat16 (residual may be null), on up to `threads` threads (kernels/row_split.h).
// Throws std::invalid_argument for sizes that describe no product.
void pointwise_conv_bf16(const PointwiseConv& shape, const uint16_t* x, const void* packed,
                         const uint16_t* residual, uint16_t* y, int threads);

// Whether the vector path runs here (AVX512-BF16, under a oneDNN ISA cap).
bool pointwise_conv_vectorized();

}  // namespace fxopt
