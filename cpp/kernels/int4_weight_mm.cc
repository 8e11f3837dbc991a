#include "kernels/int4_weight_mm.h"

#include <immintrin.h>

#include <vector>

#include "kernels/cpu_dispatch.h"
#include "kernels/row_split.h"

namespace fxopt {
namespace {

constexpr int64_t kRun = 32;  // columns per 16 packed bytes

// Column c of a packed row (the layout in the header).
int nibble(const uint8_t* row, int64_t c) {
  uint8_t byte = row[c / kRun * 16 + c % 16];
  return c % kRun < 16 ? byte & 15 : byte >> 4;
}

// xsum[r][g]: each row of x summed over each group.
std::vector<float> group_sums(const float* x, int64_t rows, int64_t k, int64_t group) {
  int64_t groups = k / group;
  std::vector<float> sums(size_t(rows * groups), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i) sums[r * groups + i / group] += x[r * k + i];
  return sums;
}

struct Problem {
  const float* x;
  int64_t rows, k;
  const uint8_t* packed;
  const float* params;
  int64_t group, n;
  float* y;
  const float* xsum;
};

void portable(const Problem& p, int64_t j_begin, int64_t j_end) {
  int64_t groups = p.k / p.group;
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t j = j_begin; j < j_end; ++j) {
      const uint8_t* row = p.packed + j * (p.k / 2);
      const float* scale = p.params + j * 2 * groups;
      float sum = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        float part = 0.0f;
        for (int64_t i = g * p.group; i < (g + 1) * p.group; ++i)
          part += p.x[r * p.k + i] * float(nibble(row, i));
        sum += scale[g] * part + scale[groups + g] * p.xsum[r * groups + g];
      }
      p.y[r * p.n + j] = sum;
    }
}

#ifdef FXOPT_AVX512
// Output channels j0 .. j0+B-1 for every row of x (as int8_weight_mm.cc's block_avx512: the B
// packed rows stay in L1 while the activation rows pass; the next block is prefetched into
// L1: int8's farther prefetch into L2 measured 0-9% slower here, as this kernel spends more
// instructions per byte than int8's and streams half the bytes). Per 32
// columns a row takes one widening of 16 bytes, a mask and a shift (the two nibbles), two
// conversions and two FMAs; the group's scale multiplies its partial sum once.
template <int B>
FXOPT_AVX512 void block_avx512(const Problem& p, int64_t j0, int64_t j_end) {
  const int64_t groups = p.k / p.group, row_bytes = p.k / 2;
  const uint8_t* next = j0 + 2 * B <= j_end ? p.packed + (j0 + B) * row_bytes : nullptr;
  const __m512i low_nibble = _mm512_set1_epi32(15);
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* xr = p.x + r * p.k;
    const float* xsum = p.xsum + r * groups;
    __m512 acc[B];
    for (int b = 0; b < B; ++b) acc[b] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      __m512 part[B];
      for (int b = 0; b < B; ++b) part[b] = _mm512_setzero_ps();
      for (int64_t i = g * p.group; i < (g + 1) * p.group; i += kRun) {
        if (next && r == 0 && i % 128 == 0)  // one prefetch per 64-byte line, first pass
          for (int b = 0; b < B; ++b)
            _mm_prefetch(reinterpret_cast<const char*>(next + b * row_bytes + i / 2), _MM_HINT_T0);
        __m512 x_low = _mm512_loadu_ps(xr + i), x_high = _mm512_loadu_ps(xr + i + 16);
        for (int b = 0; b < B; ++b) {
          const uint8_t* at = p.packed + (j0 + b) * row_bytes + i / 2;
          __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
          __m512 low = _mm512_cvtepi32_ps(_mm512_and_si512(q, low_nibble));
          __m512 high = _mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4));
          part[b] = _mm512_fmadd_ps(low, x_low, part[b]);
          part[b] = _mm512_fmadd_ps(high, x_high, part[b]);
        }
      }
      for (int b = 0; b < B; ++b) {
        const float* scale = p.params + (j0 + b) * 2 * groups;
        acc[b] = _mm512_fmadd_ps(part[b], _mm512_set1_ps(scale[g]), acc[b]);
      }
    }
    // The minimums times the group sums: a dot product over the groups, 16 at a time.
    for (int b = 0; b < B; ++b) {
      const float* minimum = p.params + (j0 + b) * 2 * groups + groups;
      for (int64_t g = 0; g < groups; g += 16) {
        __mmask16 present =
            groups - g >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (groups - g)) - 1);
        acc[b] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(present, minimum + g),
                                 _mm512_maskz_loadu_ps(present, xsum + g), acc[b]);
      }
      p.y[r * p.n + j0 + b] = _mm512_reduce_add_ps(acc[b]);
    }
  }
}

FXOPT_AVX512 void avx512(const Problem& p, int64_t j_begin, int64_t j_end) {
  constexpr int kBlock = 4;
  int64_t j = j_begin;
  for (; j + kBlock <= j_end; j += kBlock) block_avx512<kBlock>(p, j, j_end);
  for (; j < j_end; ++j) block_avx512<1>(p, j, j_end);
}
#endif

}  // namespace

void int4_weight_mm(const float* x, int64_t rows, int64_t k, const uint8_t* packed,
                    const float* params, int64_t group, int64_t n, float* y, int threads) {
  std::vector<float> xsum = group_sums(x, rows, k, group);
  Problem problem{x, rows, k, packed, params, group, n, y, xsum.data()};
  // Bytes per output channel: its packed values, scales and minimums.
  int64_t row_bytes = k / 2 + 8 * (k / group);
  split_rows(n, row_bytes, threads, 4, [&](int64_t begin, int64_t end) {
#ifdef FXOPT_AVX512
    if (has_avx512()) return avx512(problem, begin, end);
#endif
    portable(problem, begin, end);
  });
}

void int4_pack_rows(const uint8_t* q, int64_t n, int64_t k, uint8_t* packed) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < k; c += kRun)
      for (int64_t t = 0; t < 16; ++t)
        packed[j * (k / 2) + c / 2 + t] =
            uint8_t((q[j * k + c + t] & 15) | (q[j * k + c + 16 + t] & 15) << 4);
}

}  // namespace fxopt
