#include "kernels/int4_weight_mm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/avx2_sum.h"
#include "kernels/cpu_dispatch.h"
#include "kernels/float16.h"
#include "kernels/row_split.h"

namespace fxopt {
namespace {

constexpr int64_t kRun = 32;     // columns per 16 packed bytes
constexpr int64_t kBlock = 128;  // columns per 64 packed bytes: one cache line of a row

// Column c of a packed row (the layout in the header).
int nibble(const uint8_t* row, int64_t c) {
  uint8_t byte = row[c / kRun * 16 + c % 16];
  return c % kRun < 16 ? byte & 15 : byte >> 4;
}

// Where the 16 columns c .. c+15 (c a multiple of 16) of an activation row sit in a row of
// Activations::values: in each block of 128 columns, first the four runs' low-nibble columns
// (c .. c+15 of each run), then their high-nibble ones, so that one 64-byte load of packed
// weights, split into its low and high nibbles, lines up with two 64-byte loads of activations.
int64_t permuted(int64_t c) {
  int64_t in_block = c % kBlock, run = in_block / kRun, high = in_block % kRun / 16;
  return c - in_block + 64 * high + 16 * run;
}

// Each row of x rounded to int8 with its own scale, in the kernel's column order (zero past k,
// up to a whole block), and its sums over each group of columns.
struct Activations {
  int64_t padded;              // k rounded up to a whole block
  std::vector<int8_t> values;  // [rows, padded]
  std::vector<float> scales;   // [rows]: x ~ values * scale
  std::vector<float> sums;     // [rows, k / group]: of x itself, for the minimums' term
};

// One row: its scale returned, its rounded values and group sums written.
float quantize_row(const float* x, int64_t k, int64_t group, int8_t* values, float* sums) {
  float largest = 0.0f;
  for (int64_t i = 0; i < k; ++i) largest = std::max(largest, std::fabs(x[i]));
  float inverse = largest > 0.0f ? 127.0f / largest : 0.0f;
  for (int64_t c = 0; c < k; c += 16)
    for (int64_t t = 0; t < 16; ++t) {
      values[permuted(c) + t] = int8_t(std::nearbyint(x[c + t] * inverse));
      sums[(c + t) / group] += x[c + t];
    }
  return largest / 127.0f;
}

struct Problem {
  const Activations& a;
  int64_t rows, k;
  const uint8_t* packed;
  const uint16_t* params;  // float16
  int64_t group, n;
  float* y;
};

// The minimums times the activations' group sums: row j's float32 term, exact in x.
float minimum_term(const Problem& p, int64_t r, int64_t j) {
  int64_t groups = p.k / p.group;
  const uint16_t* minimum = p.params + (j * 2 + 1) * groups;
  const float* sums = p.a.sums.data() + r * groups;
  float sum = 0.0f;
  for (int64_t g = 0; g < groups; ++g) sum += half_to_float(minimum[g]) * sums[g];
  return sum;
}

void portable(const Problem& p, int64_t j_begin, int64_t j_end) {
  int64_t groups = p.k / p.group;
  for (int64_t r = 0; r < p.rows; ++r) {
    const int8_t* xq = p.a.values.data() + r * p.a.padded;
    for (int64_t j = j_begin; j < j_end; ++j) {
      const uint8_t* row = p.packed + j * (p.k / 2);
      const uint16_t* scale = p.params + j * 2 * groups;
      float sum = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t part = 0;
        for (int64_t i = g * p.group; i < (g + 1) * p.group; ++i)
          part += int32_t(nibble(row, i)) * xq[permuted(i - i % 16) + i % 16];
        sum += half_to_float(scale[g]) * float(part);
      }
      p.y[r * p.n + j] = p.a.scales[r] * sum + minimum_term(p, r, j);
    }
  }
}

#ifdef FXOPT_AVX512
// Distance, in blocks of output channels, of the prefetch into L2: as int8_weight_mm.cc, whose
// measurements chose it; this kernel spends about as few instructions per byte as int8's.
constexpr int64_t kPrefetchAhead = 4;

// The scale of each 32-column run of the block at column c, each spread over the 4 lanes that
// run's products land in. Groups of 32 (the decode-int4 preset's): four consecutive scales.
template <bool kGroupOf32>
FXOPT_AVX512_VNNI __m512 run_scales(const uint16_t* scale, int64_t c, int64_t k, int64_t group) {
  const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  int64_t runs = std::min<int64_t>(4, (k - c) / kRun);
  __mmask32 present = __mmask32((1u << runs) - 1);
  __m512i halves;
  if constexpr (kGroupOf32) {
    halves = _mm512_maskz_loadu_epi16(present, scale + c / kRun);
  } else {
    uint16_t four[4] = {};
    for (int64_t m = 0; m < runs; ++m) four[m] = scale[(c + m * kRun) / group];
    halves = _mm512_maskz_loadu_epi16(present, four);
  }
  return _mm512_permutexvar_ps(spread, _mm512_cvtph_ps(_mm512_castsi512_si256(halves)));
}

// quantize_row's vector form: the same products and rounding (to nearest even, as nearbyint
// under the default rounding mode), 16 columns at a time; the group sums add in another order.
FXOPT_AVX512_VNNI float quantize_row_avx512(const float* x, int64_t k, int64_t group,
                                            int8_t* values, float* sums) {
  __m512 largest = _mm512_setzero_ps();
  for (int64_t c = 0; c < k; c += 16)
    largest = _mm512_max_ps(largest, _mm512_abs_ps(_mm512_loadu_ps(x + c)));
  float top = _mm512_reduce_max_ps(largest);
  const __m512 inverse = _mm512_set1_ps(top > 0.0f ? 127.0f / top : 0.0f);
  for (int64_t g = 0; g < k / group; ++g) {
    __m512 sum = _mm512_setzero_ps();
    for (int64_t c = g * group; c < (g + 1) * group; c += 16) {
      __m512 v = _mm512_loadu_ps(x + c);
      sum = _mm512_add_ps(sum, v);
      __m512i rounded = _mm512_cvtps_epi32(_mm512_mul_ps(v, inverse));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(values + permuted(c)),
                       _mm512_cvtsepi32_epi8(rounded));
    }
    sums[g] = _mm512_reduce_add_ps(sum);
  }
  return top / 127.0f;
}

// minimum_term 16 groups at a time.
FXOPT_AVX512_VNNI float minimum_term_avx512(const Problem& p, int64_t r, int64_t j) {
  int64_t groups = p.k / p.group;
  const uint16_t* minimum = p.params + (j * 2 + 1) * groups;
  const float* sums = p.a.sums.data() + r * groups;
  __m512 sum = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; g += 16) {
    int64_t count = std::min<int64_t>(16, groups - g);
    __m512i halves = _mm512_maskz_loadu_epi16(__mmask32((1u << count) - 1), minimum + g);
    sum = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(halves)),
                          _mm512_maskz_loadu_ps(__mmask16((1u << count) - 1), sums + g), sum);
  }
  return _mm512_reduce_add_ps(sum);
}

// Output channels j0 .. j0+B-1 for every row of x. Per block of 128 columns a channel takes one
// 64-byte load, its low and high nibbles as unsigned bytes, two VNNI dot products with the int8
// activations (4 products summed per int32 lane; lane l holds run l / 4, whose scale it then
// takes in one conversion and one FMA). A later block's rows are prefetched into L2 on the
// first row's pass, as int8_weight_mm does, and so are its channels' scales and minimums, a
// second stream the hardware prefetcher left to miss.
template <int B, bool kGroupOf32>
FXOPT_AVX512_VNNI void block_avx512(const Problem& p, int64_t j0, int64_t j_end) {
  const int64_t groups = p.k / p.group, row_bytes = p.k / 2;
  const uint8_t* next = j0 + (kPrefetchAhead + 1) * B <= j_end
                            ? p.packed + (j0 + kPrefetchAhead * B) * row_bytes
                            : nullptr;
  if (next) {
    const char* params =
        reinterpret_cast<const char*>(p.params + (j0 + kPrefetchAhead * B) * 2 * groups);
    for (int64_t at = 0; at < B * 2 * groups * int64_t(sizeof(uint16_t)); at += 64)
      _mm_prefetch(params + at, _MM_HINT_T1);
  }
  const __m512i low_nibble = _mm512_set1_epi8(15);
  for (int64_t r = 0; r < p.rows; ++r) {
    const int8_t* xq = p.a.values.data() + r * p.a.padded;
    __m512 acc[B];
    for (int b = 0; b < B; ++b) acc[b] = _mm512_setzero_ps();
    for (int64_t c = 0; c < p.k; c += kBlock) {
      __mmask64 present = p.k - c >= kBlock ? ~__mmask64(0) : (__mmask64(1) << (p.k - c) / 2) - 1;
      __m512i x_low = _mm512_loadu_si512(xq + c), x_high = _mm512_loadu_si512(xq + c + 64);
      for (int b = 0; b < B; ++b) {
        const uint8_t* row = p.packed + (j0 + b) * row_bytes;
        if (next && r == 0)
          _mm_prefetch(reinterpret_cast<const char*>(next + b * row_bytes + c / 2), _MM_HINT_T1);
        __m512i q = _mm512_maskz_loadu_epi8(present, row + c / 2);
        __m512i low = _mm512_and_si512(q, low_nibble);
        __m512i high = _mm512_and_si512(_mm512_srli_epi16(q, 4), low_nibble);
        __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), low, x_low);
        dot = _mm512_dpbusd_epi32(dot, high, x_high);
        const uint16_t* scale = p.params + (j0 + b) * 2 * groups;
        acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                                 run_scales<kGroupOf32>(scale, c, p.k, p.group), acc[b]);
      }
    }
    for (int b = 0; b < B; ++b)
      p.y[r * p.n + j0 + b] =
          p.a.scales[r] * _mm512_reduce_add_ps(acc[b]) + minimum_term_avx512(p, r, j0 + b);
  }
}

// Eight channels a block, then four, then one: with the parameters' prefetch, eight measured
// 1.08-1.29x four (one token, weights streamed from DRAM, in-process alternation on a Zen 4:
// 768 x 32000 0.96-1.04 -> 0.79-0.81 ms); eight alone was 0.93-1.09x.
template <bool kGroupOf32>
FXOPT_AVX512_VNNI void avx512(const Problem& p, int64_t j_begin, int64_t j_end) {
  int64_t j = j_begin;
  for (; j + 8 <= j_end; j += 8) block_avx512<8, kGroupOf32>(p, j, j_end);
  for (; j + 4 <= j_end; j += 4) block_avx512<4, kGroupOf32>(p, j, j_end);
  for (; j < j_end; ++j) block_avx512<1, kGroupOf32>(p, j, j_end);
}

// The scales of the two 32-column runs from column c, each spread over the 4 lanes that run's
// products land in; the second 0 past k.
FXOPT_AVX2 __m256 two_run_scales(const uint16_t* scale, int64_t c, int64_t k, int64_t group) {
  uint16_t two[2] = {scale[c / group], k - c >= 2 * kRun ? scale[(c + kRun) / group] : uint16_t(0)};
  int32_t bits;
  std::memcpy(&bits, two, sizeof bits);
  __m128 pair = _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(pair),
                                  _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

// block_avx512 for CPUs without VNNI (AVX2, as AMD Zen 3): two runs (64 columns, 32 packed
// bytes) per step; the 4-bit by 8-bit products through vpmaddubsw (pairs summed into 16 bits:
// at most 2 * 15 * 127, no saturation; the low and high nibbles' sums added, still within 16
// bits) and vpmaddwd (into 32-bit lanes, 4 products each as with VNNI), the same activation
// layout read a half block at a time.
template <int B>
FXOPT_AVX2 void block_avx2(const Problem& p, int64_t j0, int64_t j_end) {
  const int64_t groups = p.k / p.group, row_bytes = p.k / 2;
  const uint8_t* next = j0 + (kPrefetchAhead + 1) * B <= j_end
                            ? p.packed + (j0 + kPrefetchAhead * B) * row_bytes
                            : nullptr;
  const __m256i low_nibble = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
  for (int64_t r = 0; r < p.rows; ++r) {
    const int8_t* xq = p.a.values.data() + r * p.a.padded;
    __m256 acc[B];
    for (int b = 0; b < B; ++b) acc[b] = _mm256_setzero_ps();
    for (int64_t c = 0; c < p.k; c += 2 * kRun) {
      const int8_t* half_block = xq + c - c % kBlock + (c % kBlock) / 2;
      __m256i x_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(half_block));
      __m256i x_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(half_block + 64));
      bool both = p.k - c >= 2 * kRun;
      for (int b = 0; b < B; ++b) {
        const uint8_t* at = p.packed + (j0 + b) * row_bytes + c / 2;
        if (next && r == 0 && c % kBlock == 0)
          _mm_prefetch(reinterpret_cast<const char*>(next + b * row_bytes + c / 2), _MM_HINT_T1);
        __m128i first = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
        __m128i second =
            both ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + 16)) : _mm_setzero_si128();
        __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(first), second, 1);
        __m256i low = _mm256_and_si256(q, low_nibble);
        __m256i high = _mm256_and_si256(_mm256_srli_epi16(q, 4), low_nibble);
        __m256i pairs =
            _mm256_add_epi16(_mm256_maddubs_epi16(low, x_low), _mm256_maddubs_epi16(high, x_high));
        __m256i dot = _mm256_madd_epi16(pairs, ones);
        const uint16_t* scale = p.params + (j0 + b) * 2 * groups;
        acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), two_run_scales(scale, c, p.k, p.group),
                                 acc[b]);
      }
    }
    for (int b = 0; b < B; ++b) {
      p.y[r * p.n + j0 + b] = p.a.scales[r] * sum_lanes(acc[b]) + minimum_term(p, r, j0 + b);
    }
  }
}

FXOPT_AVX2 void avx2(const Problem& p, int64_t j_begin, int64_t j_end) {
  constexpr int kChannels = 4;
  int64_t j = j_begin;
  for (; j + kChannels <= j_end; j += kChannels) block_avx2<kChannels>(p, j, j_end);
  for (; j < j_end; ++j) block_avx2<1>(p, j, j_end);
}
#endif

Activations quantize_activations(const float* x, int64_t rows, int64_t k, int64_t group) {
  int64_t padded = (k + kBlock - 1) / kBlock * kBlock, groups = k / group;
  Activations a{padded, std::vector<int8_t>(size_t(rows * padded), 0), std::vector<float>(rows),
                std::vector<float>(size_t(rows * groups), 0.0f)};
  auto quantize = quantize_row;
#ifdef FXOPT_AVX512
  if (has_avx512_vnni()) quantize = quantize_row_avx512;
#endif
  for (int64_t r = 0; r < rows; ++r)
    a.scales[r] =
        quantize(x + r * k, k, group, a.values.data() + r * padded, a.sums.data() + r * groups);
  return a;
}

}  // namespace

void int4_weight_mm(const float* x, int64_t rows, int64_t k, const uint8_t* packed,
                    const uint16_t* params, int64_t group, int64_t n, float* y, int threads) {
  Activations activations = quantize_activations(x, rows, k, group);
  Problem problem{activations, rows, k, packed, params, group, n, y};
  // Bytes per output channel: its packed values, scales and minimums.
  int64_t row_bytes = k / 2 + 4 * (k / group);
  split_rows(n, row_bytes, threads, 4, [&](int64_t begin, int64_t end) {
#ifdef FXOPT_AVX512
    if (has_avx512_vnni())
      return group == kRun ? avx512<true>(problem, begin, end) : avx512<false>(problem, begin, end);
    if (has_avx2()) return avx2(problem, begin, end);
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
