#include "kernels/depthwise_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>
#include <utility>

#include "kernels/bfloat16.h"
#include "kernels/cpu_dispatch.h"
#include "kernels/row_split.h"

namespace fxopt {
namespace {

// The vector paths are compiled from one text per instruction set under GCC's target pragmas;
// clang has no such pragma, so its builds run the plain loops (and the pass never picks them).
#if defined(FXOPT_AVX2) && !defined(__clang__)
#define FXOPT_DEPTHWISE_VECTORS 1
#endif

// Packed rows are whole AVX-512 vectors, so every path loads weights and bias without a tail.
constexpr int64_t kPackedLanes = 16;

int64_t packed_row_floats(int64_t channels) {
  return (channels + kPackedLanes - 1) / kPackedLanes * kPackedLanes;
}

namespace portable {

struct V {
  static constexpr int64_t kLanes = 1;
  using Vec = float;
  static Vec load(const float* p) { return *p; }
  static Vec load(const uint16_t* p) { return bfloat16_to_float(*p); }
  static void store(float* p, Vec v) { *p = v; }
  static void store(uint16_t* p, Vec v) { *p = float_to_bfloat16(v); }
  static Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }
  static Vec broadcast(float v) { return v; }
  // NaN stays NaN, as after ATen's relu / hardtanh.
  static Vec clamp(Vec v, Vec lower, Vec upper) { return std::min(std::max(v, lower), upper); }
};

#include "kernels/depthwise_conv_rows.inc"

}  // namespace portable

#ifdef FXOPT_DEPTHWISE_VECTORS
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {

struct V {
  static constexpr int64_t kLanes = 8;
  using Vec = __m256;
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static Vec load(const uint16_t* p) {
    __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
  }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static void store(uint16_t* p, Vec v) {  // float_to_bfloat16, eight at a time
    __m256i bits = _mm256_castps_si256(v);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
    __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    __m256i halves = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet), nan));
    // Pack to 16 bits within each 128-bit lane, then gather the two lanes' halves.
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(halves, halves), 0b1000);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec broadcast(float v) { return _mm256_set1_ps(v); }
  // max / min return their second operand when either is NaN: v, so NaN stays NaN.
  static Vec clamp(Vec v, Vec lower, Vec upper) {
    return _mm256_min_ps(upper, _mm256_max_ps(lower, v));
  }
};

#include "kernels/depthwise_conv_rows.inc"

}  // namespace avx2
#pragma GCC pop_options
#endif

#ifdef FXOPT_DEPTHWISE_VECTORS
#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {

struct V {
  static constexpr int64_t kLanes = 16;
  using Vec = __m512;
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static Vec load(const uint16_t* p) {
    __m256i halves = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
  }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static void store(uint16_t* p, Vec v) {  // float_to_bfloat16, sixteen at a time
    __m512i bits = _mm512_castps_si512(v);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    __m512i halves = _mm512_mask_blend_epi32(nan, rounded, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(halves));
  }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec broadcast(float v) { return _mm512_set1_ps(v); }
  static Vec clamp(Vec v, Vec lower, Vec upper) {
    return _mm512_min_ps(upper, _mm512_max_ps(lower, v));
  }
};

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
#ifdef FXOPT_DEPTHWISE_VECTORS
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
#ifdef FXOPT_DEPTHWISE_VECTORS
  return has_avx2();
#else
  return false;
#endif
}

}  // namespace fxopt
