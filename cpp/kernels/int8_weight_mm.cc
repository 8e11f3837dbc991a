#include "kernels/int8_weight_mm.h"

#include <immintrin.h>

#include "kernels/avx2_sum.h"
#include "kernels/cpu_dispatch.h"
#include "kernels/row_split.h"

namespace fxopt {
namespace {

float dot_scalar(const float* x, const int8_t* w, int64_t from, int64_t to) {
  float sum = 0.0f;
  for (int64_t i = from; i < to; ++i) sum += x[i] * float(w[i]);
  return sum;
}

// Output channels [j_begin, j_end) of every row.
void portable(const float* x, int64_t rows, int64_t k, const int8_t* w, const float* scale,
              int64_t n, float* y, int64_t j_begin, int64_t j_end) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = j_begin; j < j_end; ++j)
      y[r * n + j] = scale[j] * dot_scalar(x + r * k, w + j * k, 0, k);
}

#ifdef FXOPT_AVX512
// Output channels j0 .. j0+B-1 for every row of x: the B weight rows (B*k bytes) stay in L1
// while the activation rows pass, so each weight byte comes from memory once. A later block's
// rows are prefetched while this one is multiplied: the hardware prefetcher does not follow B
// interleaved short rows, and without it the kernel streamed half as fast (measured 0.096 vs
// 0.044 ms at 768x768, one row). At one token a model's weights come from DRAM once per step
// (they outgrow L3 on the CPUs measured), and there how far ahead, into which level, decides
// the speed: on a Zen 4 core (32 MB L3, 240 MB of weights streamed) the next block into L1 (T0)
// streamed 9-13 GB/s, the block kPrefetchAhead on into L2 (T1) 18-23 GB/s (768x32000: 2.50 ->
// 1.34 ms; 2 to 8 blocks on level, 1 block on 14 GB/s); weights resident in L3 27-28 GB/s
// either way; an Intel Xeon (300 MB L3) 9.7-10.3 GB/s with every variant.
constexpr int64_t kPrefetchAhead = 4;

template <int B>
FXOPT_AVX512 void block_avx512(const float* x, int64_t rows, int64_t k, const int8_t* w,
                               const float* scale, int64_t n, float* y, int64_t j0, int64_t j_end) {
  int64_t vector_end = k - k % 16;
  const int8_t* next =
      j0 + (kPrefetchAhead + 1) * B <= j_end ? w + (j0 + kPrefetchAhead * B) * k : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * k;
    __m512 acc[B];
    for (int b = 0; b < B; ++b) acc[b] = _mm512_setzero_ps();
    for (int64_t i = 0; i < vector_end; i += 16) {
      if (next && r == 0 && i % 64 == 0)  // one prefetch per cache line, on the first pass
        for (int b = 0; b < B; ++b)
          _mm_prefetch(reinterpret_cast<const char*>(next + b * k + i), _MM_HINT_T1);
      __m512 xv = _mm512_loadu_ps(xr + i);
      for (int b = 0; b < B; ++b) {
        __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + (j0 + b) * k + i));
        acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)), xv, acc[b]);
      }
    }
    for (int b = 0; b < B; ++b) {
      const int8_t* row = w + (j0 + b) * k;
      float sum = _mm512_reduce_add_ps(acc[b]) + dot_scalar(xr, row, vector_end, k);
      y[r * n + j0 + b] = scale[j0 + b] * sum;
    }
  }
}

FXOPT_AVX512 void avx512(const float* x, int64_t rows, int64_t k, const int8_t* w,
                         const float* scale, int64_t n, float* y, int64_t j_begin, int64_t j_end) {
  constexpr int kBlock = 4;
  int64_t j = j_begin;
  for (; j + kBlock <= j_end; j += kBlock)
    block_avx512<kBlock>(x, rows, k, w, scale, n, y, j, j_end);
  for (; j < j_end; ++j) block_avx512<1>(x, rows, k, w, scale, n, y, j, j_end);
}

// block_avx512 for CPUs with AVX2 only (AMD Zen 3 and older, Intel before Skylake-X): 8 columns
// per step, the same blocks and prefetch. At one token the weight's bytes bound both, so half
// the vector width costs little where the weights stream from memory.
template <int B>
FXOPT_AVX2 void block_avx2(const float* x, int64_t rows, int64_t k, const int8_t* w,
                           const float* scale, int64_t n, float* y, int64_t j0, int64_t j_end) {
  int64_t vector_end = k - k % 8;
  const int8_t* next =
      j0 + (kPrefetchAhead + 1) * B <= j_end ? w + (j0 + kPrefetchAhead * B) * k : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * k;
    __m256 acc[B];
    for (int b = 0; b < B; ++b) acc[b] = _mm256_setzero_ps();
    for (int64_t i = 0; i < vector_end; i += 8) {
      if (next && r == 0 && i % 64 == 0)
        for (int b = 0; b < B; ++b)
          _mm_prefetch(reinterpret_cast<const char*>(next + b * k + i), _MM_HINT_T1);
      __m256 xv = _mm256_loadu_ps(xr + i);
      for (int b = 0; b < B; ++b) {
        __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + (j0 + b) * k + i));
        acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), xv, acc[b]);
      }
    }
    for (int b = 0; b < B; ++b) {
      const int8_t* row = w + (j0 + b) * k;
      y[r * n + j0 + b] = scale[j0 + b] * (sum_lanes(acc[b]) + dot_scalar(xr, row, vector_end, k));
    }
  }
}

FXOPT_AVX2 void avx2(const float* x, int64_t rows, int64_t k, const int8_t* w, const float* scale,
                     int64_t n, float* y, int64_t j_begin, int64_t j_end) {
  constexpr int kBlock = 4;
  int64_t j = j_begin;
  for (; j + kBlock <= j_end; j += kBlock) block_avx2<kBlock>(x, rows, k, w, scale, n, y, j, j_end);
  for (; j < j_end; ++j) block_avx2<1>(x, rows, k, w, scale, n, y, j, j_end);
}
#endif

}  // namespace

void int8_weight_mm(const float* x, int64_t rows, int64_t k, const int8_t* w, const float* scale,
                    int64_t n, float* y, int threads) {
  split_rows(n, k, threads, 4, [&](int64_t begin, int64_t end) {
#ifdef FXOPT_AVX512
    if (has_avx512()) return avx512(x, rows, k, w, scale, n, y, begin, end);
    if (has_avx2()) return avx2(x, rows, k, w, scale, n, y, begin, end);
#endif
    portable(x, rows, k, w, scale, n, y, begin, end);
  });
}

}  // namespace fxopt
