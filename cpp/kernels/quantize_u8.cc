#include "kernels/quantize_u8.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/bfloat16.h"
#include "kernels/cpu_dispatch.h"
#include "kernels/row_split.h"

namespace fxopt {
namespace {

// Elements per part handed to a thread: large enough that waking one pays.
constexpr int64_t kBlock = 16384;

float load(const void* x, RowDtype dtype, int64_t i) {
  return dtype == RowDtype::Float32 ? static_cast<const float*>(x)[i]
                                    : bfloat16_to_float(static_cast<const uint16_t*>(x)[i]);
}

uint8_t to_u8(float value, float inverse_scale, float zero_point) {
  float v = std::nearbyint(value * inverse_scale) + zero_point;
  return std::isnan(v) ? 0 : uint8_t(std::clamp(v, 0.0f, 255.0f));
}

void quantize_portable(const void* x, RowDtype dtype, float inverse_scale, float zero_point,
                       uint8_t* q, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) q[i] = to_u8(load(x, dtype, i), inverse_scale, zero_point);
}

#ifdef FXOPT_AVX512
FXOPT_AVX512 __m512 load16(const void* x, RowDtype dtype, int64_t i) {
  if (dtype == RowDtype::Float32) return _mm512_loadu_ps(static_cast<const float*>(x) + i);
  __m256i halves =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(x) + i));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
}

FXOPT_AVX512 void quantize_avx512(const void* x, RowDtype dtype, float inverse_scale,
                                  float zero_point, uint8_t* q, int64_t begin, int64_t end) {
  const __m512 scale = _mm512_set1_ps(inverse_scale), zero = _mm512_set1_ps(zero_point);
  const __m512 low = _mm512_setzero_ps(), high = _mm512_set1_ps(255.0f);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(load16(x, dtype, i), scale),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // max(v, 0) returns its second operand for a NaN v: NaN becomes 0, as in to_u8.
    v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, zero), low), high);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i),
                     _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
  }
  quantize_portable(x, dtype, inverse_scale, zero_point, q, i, end);
}
#endif

void quantize_range(const void* x, RowDtype dtype, float inverse_scale, float zero_point,
                    uint8_t* q, int64_t begin, int64_t end) {
#ifdef FXOPT_AVX512
  if (has_avx512()) return quantize_avx512(x, dtype, inverse_scale, zero_point, q, begin, end);
#endif
  quantize_portable(x, dtype, inverse_scale, zero_point, q, begin, end);
}

}  // namespace

void quantize_u8(const void* x, RowDtype dtype, int64_t count, float inverse_scale,
                 int32_t zero_point, uint8_t* q, int threads) {
  int64_t blocks = (count + kBlock - 1) / kBlock;
  int64_t bytes = kBlock * (dtype == RowDtype::Float32 ? 4 : 2);
  float zero = float(zero_point);
  split_rows(blocks, bytes, threads, 1, [&](int64_t begin, int64_t end) {
    int64_t first = begin * kBlock, last = std::min(end * kBlock, count);
    quantize_range(x, dtype, inverse_scale, zero, q, first, last);
  });
}

void quantize_u8_here(const void* x, RowDtype dtype, int64_t count, float inverse_scale,
                      int32_t zero_point, uint8_t* q) {
  quantize_range(x, dtype, inverse_scale, float(zero_point), q, 0, count);
}

}  // namespace fxopt
