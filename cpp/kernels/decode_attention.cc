#include "kernels/decode_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/avx2_sum.h"
#include "kernels/cpu_dispatch.h"
#include "kernels/row_split.h"

namespace fxopt {
namespace {

// Rows ahead a key or value row is prefetched: the rows come from DRAM in a decoding step.
constexpr int64_t kPrefetchRows = 8;

struct Head {
  const float* q;  // [d]
  const float* k;  // [length, d]
  const float* v;  // [length, d]
  float* out;      // [d]
};

// exp(scores - max) in place, returning their sum: the part every path shares.
float exponentiate(float* scores, int64_t length) {
  float top = *std::max_element(scores, scores + length);
  float total = 0.0f;
  for (int64_t t = 0; t < length; ++t) total += scores[t] = std::exp(scores[t] - top);
  return total;
}

void head_portable(const Head& h, int64_t d, int64_t length, float scale, float* scores) {
  for (int64_t t = 0; t < length; ++t) {
    float dot = 0.0f;
    for (int64_t i = 0; i < d; ++i) dot += h.q[i] * h.k[t * d + i];
    scores[t] = dot * scale;
  }
  float inverse = 1.0f / exponentiate(scores, length);
  std::fill(h.out, h.out + d, 0.0f);
  for (int64_t t = 0; t < length; ++t)
    for (int64_t i = 0; i < d; ++i) h.out[i] += scores[t] * h.v[t * d + i];
  for (int64_t i = 0; i < d; ++i) h.out[i] *= inverse;
}

void prefetch_row(const float* row, int64_t d) {
  for (int64_t i = 0; i < d; i += 16)
    _mm_prefetch(reinterpret_cast<const char*>(row + i), _MM_HINT_T0);
}

#ifdef FXOPT_AVX512
// Columns per pass of the weighted sum: four vectors of accumulators; wider heads take passes.
constexpr int64_t kChunk = 64;

FXOPT_AVX512 __mmask16 lanes(int64_t left) {
  return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
}

FXOPT_AVX512 void head_avx512(const Head& h, int64_t d, int64_t length, float scale,
                              float* scores) {
  for (int64_t t = 0; t < length; ++t) {
    if (t + kPrefetchRows < length) prefetch_row(h.k + (t + kPrefetchRows) * d, d);
    const float* row = h.k + t * d;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; i += 16) {
      __mmask16 m = lanes(d - i);
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, h.q + i), _mm512_maskz_loadu_ps(m, row + i),
                            acc);
    }
    scores[t] = _mm512_reduce_add_ps(acc) * scale;
  }
  __m512 inverse = _mm512_set1_ps(1.0f / exponentiate(scores, length));
  for (int64_t c = 0; c < d; c += kChunk) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    int64_t vectors = std::min<int64_t>(4, (std::min(d - c, kChunk) + 15) / 16);
    for (int64_t t = 0; t < length; ++t) {
      if (t + kPrefetchRows < length && c == 0) prefetch_row(h.v + (t + kPrefetchRows) * d, d);
      __m512 p = _mm512_set1_ps(scores[t]);
      const float* row = h.v + t * d + c;
      for (int64_t j = 0; j < vectors; ++j)
        acc[j] =
            _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(lanes(d - c - 16 * j), row + 16 * j), acc[j]);
    }
    for (int64_t j = 0; j < vectors; ++j)
      _mm512_mask_storeu_ps(h.out + c + 16 * j, lanes(d - c - 16 * j),
                            _mm512_mul_ps(acc[j], inverse));
  }
}

FXOPT_AVX2 __m256i lanes8(int64_t left) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::min<int64_t>(left, 8))), index);
}

// head_avx512 eight columns at a time, the tails through masked loads.
FXOPT_AVX2 void head_avx2(const Head& h, int64_t d, int64_t length, float scale, float* scores) {
  for (int64_t t = 0; t < length; ++t) {
    if (t + kPrefetchRows < length) prefetch_row(h.k + (t + kPrefetchRows) * d, d);
    const float* row = h.k + t * d;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < d; i += 8) {
      __m256i m = lanes8(d - i);
      acc = _mm256_fmadd_ps(_mm256_maskload_ps(h.q + i, m), _mm256_maskload_ps(row + i, m), acc);
    }
    scores[t] = sum_lanes(acc) * scale;
  }
  __m256 inverse = _mm256_set1_ps(1.0f / exponentiate(scores, length));
  constexpr int64_t kChunk8 = 32;  // four vectors of eight
  for (int64_t c = 0; c < d; c += kChunk8) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t vectors = std::min<int64_t>(4, (std::min(d - c, kChunk8) + 7) / 8);
    for (int64_t t = 0; t < length; ++t) {
      if (t + kPrefetchRows < length && c == 0) prefetch_row(h.v + (t + kPrefetchRows) * d, d);
      __m256 p = _mm256_set1_ps(scores[t]);
      const float* row = h.v + t * d + c;
      for (int64_t j = 0; j < vectors; ++j)
        acc[j] = _mm256_fmadd_ps(p, _mm256_maskload_ps(row + 8 * j, lanes8(d - c - 8 * j)), acc[j]);
    }
    for (int64_t j = 0; j < vectors; ++j)
      _mm256_maskstore_ps(h.out + c + 8 * j, lanes8(d - c - 8 * j), _mm256_mul_ps(acc[j], inverse));
  }
}
#endif

}  // namespace

void decode_attention(const float* q, int64_t heads, int64_t d, const float* k, const float* v,
                      int64_t kv_heads, int64_t length, int64_t head_stride, float scale,
                      float* out, int threads) {
  int64_t group = heads / kv_heads;
  auto head = head_portable;
#ifdef FXOPT_AVX512
  if (has_avx512())
    head = head_avx512;
  else if (has_avx2())
    head = head_avx2;
#endif
  // Bytes a head reads: its keys and values.
  split_rows(heads, 2 * length * d * int64_t(sizeof(float)), threads, 1,
             [&](int64_t begin, int64_t end) {
               std::vector<float> scores(length);
               for (int64_t i = begin; i < end; ++i) {
                 const float* kv_k = k + (i / group) * head_stride;
                 const float* kv_v = v + (i / group) * head_stride;
                 head({q + i * d, kv_k, kv_v, out + i * d}, d, length, scale, scores.data());
               }
             });
}

}  // namespace fxopt
