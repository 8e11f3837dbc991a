// int8_pointwise_conv: a statically quantized 1x1 convolution of a channels-last image (stride
// 1, no padding, one group): the input quantized to uint8 with the calibrated scale and zero
// point, times int8 weights with one scale per output channel, in int32, then scaled back,
// biased, an optional residual added and a clamp after it (ReLU, ReLU6):
//
//   q[p, k]  = clamp(round(x[p, k] / x_scale) + zero_point, 0, 255)          (quantize_u8.h)
//   y[p, n]  = clamp(sum_k (q[p, k] - zero_point) w[n, k] * x_scale * w_scale[n] + bias[n]
//                    [+ residual[p, n]])
//
// What QuantizeConvsInt8's oneDNN call computes, in one fxopt call. Why fxopt has it: at batch 1
// oneDNN's int8 convolution through torch costs 25-35 us a call before its work (descriptors,
// allocations, the scratchpad: a 2x2 image with 8 channels took 27 us on a Zen 4 core), and
// the input's quantization is a pass of its own before it; MobileNetV2's 1x1 convolutions are
// 50-250 us of work each, so that overhead decided most of them for bfloat16.
//
// The input's rows are quantized a chunk at a time into a buffer that stays in the core's
// cache, then multiplied: output channels in packed blocks of 32, six pixels a step, twelve
// int32 sums in registers, four uint8 x int8 products a lane per VNNI instruction (vpdpbusd,
// exact: the sums cannot overflow below 2^31 / (255 * 128) input channels). The zero point's
// share (zero_point * sum_k w[n, k]) is folded into each channel's shift when packing, so a sum
// becomes float32 once: y = sum * scale[n] + shift[n]. AVX512-VNNI where the CPU has it (under
// a oneDNN ISA cap: kernels/cpu_dispatch.h); plain C++ loops elsewhere, correct but slow (the
// pass never picks them). float32 or bfloat16 input, output and residual (all one dtype);
// bfloat16 results rounded to nearest even from the float32 value (with AVX512-BF16's
// conversion where the CPU has it, which flushes subnormal results to zero).
#pragma once

#include <cstdint>

#include "kernels/per_token_int8.h"
#include "kernels/pointwise_conv.h"

namespace fxopt {

// Bytes int8_pointwise_pack writes for a weight [out_channels, in_channels].
int64_t int8_pointwise_packed_bytes(int64_t out_channels, int64_t in_channels);

// packed = the int8 weight [out_channels, in_channels] in blocks of 32 output channels, each
// block's input channels in fours ([block][quad][32 channels][4], zeros past either end), then
// per output channel its float32 scale (x_scale * w_scales[n]) and shift (bias[n], or 0 when
// `bias` is null, less zero_point * x_scale * w_scales[n] * sum_k w[n, k]).
void int8_pointwise_pack(const int8_t* weight, const float* w_scales, const float* bias,
                         int64_t out_channels, int64_t in_channels, float x_scale,
                         int32_t zero_point, void* packed);

// y [pixels, out] as above from x [pixels, in] (and residual [pixels, out], may be null), all
// contiguous in `dtype`; on up to `threads` threads (kernels/row_split.h). Throws
// std::invalid_argument for sizes that describe no product.
void int8_pointwise_conv(const PointwiseConv& shape, const void* x, RowDtype dtype, float x_scale,
                         int32_t zero_point, const void* packed, const void* residual, void* y,
                         int threads);

// Whether the VNNI path runs here.
bool int8_pointwise_conv_vectorized();

}  // namespace fxopt
