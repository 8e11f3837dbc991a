// quantize_u8: activations to unsigned 8 bits with one scale and zero point for the whole
// tensor, what a statically quantized int8 convolution reads (oneDNN's u8 x s8 kernels):
//
//   q[i] = clamp(round(x[i] * inverse_scale) + zero_point, 0, 255)
//
// rounded to nearest even before the zero point is added (so ties round alike whatever the
// zero point), in float32 whatever x's dtype (float32 or bfloat16, read as torch stores it);
// NaN becomes 0. The tensor is read as one flat array: any dense layout (NCHW or channels-last)
// gives q in the same layout. Why fxopt has it: in ATen ops (multiply, round, add, clamp, cast)
// the step was five passes over the activations, 0.4-2.2 ms at ResNet-50's and MobileNetV2's
// early sizes on a Zen 4, as much as the int8 convolution it feeds.
//
// Parts of the array are split over `threads` threads (kernels/row_split.h); AVX-512F where
// the CPU has it, plain C++ elsewhere (same results).
#pragma once

#include <cstdint>

#include "kernels/per_token_int8.h"

namespace fxopt {

// x [count] contiguous in `dtype`; q [count] is written.
void quantize_u8(const void* x, RowDtype dtype, int64_t count, float inverse_scale,
                 int32_t zero_point, uint8_t* q, int threads = 1);
// The same on the calling thread: for a kernel that quantizes its own rows.
void quantize_u8_here(const void* x, RowDtype dtype, int64_t count, float inverse_scale,
                      int32_t zero_point, uint8_t* q);

}  // namespace fxopt
