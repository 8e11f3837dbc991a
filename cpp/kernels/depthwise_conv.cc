#include "kernels/depthwise_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>
#include <utility>

#include "kernels/cpu_dispatch.h"
#include "kernels/float_lanes.h"
#include "kernels/row_split.h"

namespace fxopt {
namespace {

// Packed rows are whole AVX-512 vectors, so every path loads weights and bias without a tail.
constexpr int64_t kPackedLanes = 16;

int64_t packed_row_floats(int64_t channels) {
  return (channels + kPackedLanes - 1) / kPackedLanes * kPackedLanes;
}

namespace portable {
using V = lanes::Portable;
#include "kernels/depthwise_conv_rows.inc"
}  // namespace portable

#ifdef FXOPT_PRAGMA_VECTORS
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
using V = lanes::Avx2;
#include "kernels/depthwise_conv_rows.inc"
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
using V = lanes::Avx512;
#include "kernels/depthwise_conv_rows.inc"
}  // namespace avx512
#pragma GCC pop_options
#endif

void check(const DepthwiseConv& s) {
  if (s.batch < 0 || s.channels <= 0 || s.height <= 0 || s.width <= 0 || s.kernel_h <= 0 ||
      s.kernel_w <= 0 || s.stride_h <= 0 || s.stride_w <= 0 || s.pad_top < 0 || s.pad_left < 0 ||
      s.out_h <= 0 || s.out_w <= 0)
    throw std::invalid_argument("depthwise_conv: sizes that describe no convolution");
}

template <class T>
void run(const DepthwiseConv& s, const T* x, const float* packed, T* y, int threads) {
  check(s);
  const int64_t row_floats = packed_row_floats(s.channels);
  // The input rows one output row reads, as the work a thread part should have.
  const int64_t bytes_per_row = s.kernel_h * s.width * s.channels * int64_t(sizeof(T));
  split_rows(s.batch * s.out_h, bytes_per_row, threads, 1, [&](int64_t begin, int64_t end) {
#ifdef FXOPT_PRAGMA_VECTORS
    if (has_avx512()) return avx512::output_rows(s, x, packed, row_floats, begin, end, y);
    if (has_avx2()) return avx2::output_rows(s, x, packed, row_floats, begin, end, y);
#endif
    portable::output_rows(s, x, packed, row_floats, begin, end, y);
  });
}

}  // namespace

int64_t depthwise_packed_size(int64_t channels, int64_t taps) {
  return (taps + 1) * packed_row_floats(channels);
}

void depthwise_pack(const float* weight, const float* bias, int64_t channels, int64_t taps,
                    float* packed) {
  const int64_t row_floats = packed_row_floats(channels);
  std::fill_n(packed, depthwise_packed_size(channels, taps), 0.0f);
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t t = 0; t < taps; ++t) packed[t * row_floats + c] = weight[c * taps + t];
    if (bias) packed[taps * row_floats + c] = bias[c];
  }
}

void depthwise_conv_f32(const DepthwiseConv& s, const float* x, const float* packed, float* y,
                        int threads) {
  run(s, x, packed, y, threads);
}

void depthwise_conv_bf16(const DepthwiseConv& s, const uint16_t* x, const float* packed,
                         uint16_t* y, int threads) {
  run(s, x, packed, y, threads);
}

bool depthwise_conv_vectorized() {
#ifdef FXOPT_PRAGMA_VECTORS
  return has_avx2();
#else
  return false;
#endif
}

}  // namespace fxopt
