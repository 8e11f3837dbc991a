#include "kernels/per_token_int8.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/avx2_exp.h"
#include "kernels/avx2_sum.h"
#include "kernels/avx512_exp.h"
#include "kernels/bfloat16.h"
#include "kernels/cpu_dispatch.h"
#include "kernels/row_split.h"

namespace fxopt {
namespace {

constexpr float kFloatMin = std::numeric_limits<float>::min();

float load(const void* row, RowDtype dtype, int64_t i) {
  return dtype == RowDtype::Float32 ? static_cast<const float*>(row)[i]
                                    : bfloat16_to_float(static_cast<const uint16_t*>(row)[i]);
}

const void* row_at(const void* x, RowDtype dtype, int64_t offset) {
  size_t bytes = dtype == RowDtype::Float32 ? 4 : 2;
  return static_cast<const char*>(x) + offset * bytes;
}

int8_t to_int8(float v) {  // v is already rounded; NaN (a NaN row) becomes 0, not UB
  return std::isnan(v) ? 0 : int8_t(std::clamp(v, -128.0f, 127.0f));
}

// The scale of a row whose largest magnitude is `peak`, mapped to `max_level`.
float row_scale(float peak, float max_level) { return std::max(peak / max_level, kFloatMin); }

// x[r][i] times kept[i] (1, or 0 for a skipped channel); kept may be null (none skipped).
float load_kept(const void* row, RowDtype dtype, int64_t i, const float* kept) {
  return kept ? load(row, dtype, i) * kept[i] : load(row, dtype, i);
}

void quantize_portable(const void* x, RowDtype dtype, int64_t k, int8_t* q, float* scales,
                       float max_level, const float* kept, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const void* row = row_at(x, dtype, r * k);
    float peak = 0.0f;
    for (int64_t i = 0; i < k; ++i) peak = std::max(peak, std::abs(load_kept(row, dtype, i, kept)));
    float s = scales[r] = row_scale(peak, max_level);
    for (int64_t i = 0; i < k; ++i)
      q[r * k + i] = to_int8(std::nearbyint(load_kept(row, dtype, i, kept) / s));
  }
}

// Vectors the dequantize loops carry at once (see dequantize_avx512).
constexpr int kVectorsPerStep = 4;
constexpr float kSqrtHalf = 0.70710678118654752f;
constexpr float kTanhGeluScale = 0.79788456080286536f;  // sqrt(2 / pi)

// erf(x) = x P(x^2) / Q(x^2) on |x| < kErfOne (past it erf(x) rounds to +-1 in float32): a
// rational fit by fxopt (weighted least squares iterated towards the minimax error, in double;
// 4e-8 there, within 4.1e-7 evaluated in float32 as the vector kernels do; GELU, v (1 + erf) / 2,
// is then within 2.1e-7 of v). Highest power first.
// Why not erf's usual form 1 - t poly(t) e^(-x^2): with its exp it costs 1.6x the operations,
// and the GELU after MiniLM's and BERT's FFN-input Linears spent more time there than in
// dequantizing.
constexpr float kErfOne = 3.92f;
constexpr float kErfNumerator[] = {1.9919839999715805e-08f, -1.9942185645049904e-06f,
                                   0.00014898815425112844f, 0.003973124548792839f,
                                   0.05139816924929619f,    0.20612092316150665f,
                                   1.1283787488937378f};
constexpr float kErfDenominator[] = {0.0010241655400022864f, 0.014889759011566639f,
                                     0.11756732314825058f, 0.5159986615180969f, 1.0f};

float activate(float v, Activation activation) {
  switch (activation) {
    case Activation::None:
      return v;
    case Activation::Relu:
      return v < 0.0f ? 0.0f : v;
    case Activation::Gelu:
      return 0.5f * v * (1.0f + std::erf(v * kSqrtHalf));
    case Activation::GeluTanh:
      return 0.5f * v * (1.0f + std::tanh(kTanhGeluScale * (v + 0.044715f * v * v * v)));
    case Activation::Silu:
      return v / (1.0f + std::exp(-v));
  }
  return v;
}

void store(void* y, RowDtype dtype, int64_t i, float v) {
  if (dtype == RowDtype::Float32)
    static_cast<float*>(y)[i] = v;
  else
    static_cast<uint16_t*>(y)[i] = float_to_bfloat16(v);
}

// Row r's values in the outlier channels, into `values`.
void outlier_values(const OutlierChannels& outliers, int64_t r, std::vector<float>& values) {
  const void* row = row_at(outliers.x, outliers.dtype, r * outliers.k);
  for (size_t c = 0; c < outliers.channels.size(); ++c)
    values[c] = load(row, outliers.dtype, outliers.channels[c]);
}

// Columns [j_begin, n) of rows [begin, end).
void dequantize_portable(const int32_t* acc, int64_t n, const float* row_scales,
                         const float* col_scales, const float* bias,
                         const OutlierChannels* outliers, void* y, RowDtype dtype,
                         Activation activation, int64_t begin, int64_t end, int64_t j_begin = 0) {
  std::vector<float> values(outliers ? outliers->channels.size() : 0);
  for (int64_t r = begin; r < end; ++r) {
    if (outliers) outlier_values(*outliers, r, values);
    for (int64_t j = j_begin; j < n; ++j) {
      float v = float(acc[r * n + j]) * row_scales[r] * col_scales[j];
      if (bias) v += bias[j];
      for (size_t c = 0; c < values.size(); ++c)  // fused, as the vector form adds them
        v = std::fma(values[c], outliers->weight[int64_t(c) * n + j], v);
      store(y, dtype, r * n + j, activate(v, activation));
    }
  }
}

void check_channels(std::span<const int64_t> channels, int64_t k, const char* kernel) {
  for (int64_t c : channels)
    if (c < 0 || c >= k)
      throw std::invalid_argument(std::string(kernel) + ": channel " + std::to_string(c) +
                                  " is not in [0, " + std::to_string(k) + ")");
}

#ifdef FXOPT_AVX512
constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

FXOPT_AVX512 __m512 load16(const void* row, RowDtype dtype, int64_t i) {
  if (dtype == RowDtype::Float32) return _mm512_loadu_ps(static_cast<const float*>(row) + i);
  __m256i halves =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + i));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
}

FXOPT_AVX512 __m512 load16_kept(const void* row, RowDtype dtype, int64_t i, const float* kept) {
  __m512 v = load16(row, dtype, i);
  return kept ? _mm512_mul_ps(v, _mm512_loadu_ps(kept + i)) : v;
}

FXOPT_AVX512 void quantize_avx512(const void* x, RowDtype dtype, int64_t k, int8_t* q,
                                  float* scales, float max_level, const float* kept, int64_t begin,
                                  int64_t end) {
  int64_t vector_end = k - k % 16;
  for (int64_t r = begin; r < end; ++r) {
    const void* row = row_at(x, dtype, r * k);
    __m512 peaks = _mm512_setzero_ps();
    for (int64_t i = 0; i < vector_end; i += 16)
      peaks = _mm512_max_ps(peaks, _mm512_abs_ps(load16_kept(row, dtype, i, kept)));
    float peak = _mm512_reduce_max_ps(peaks);
    for (int64_t i = vector_end; i < k; ++i)
      peak = std::max(peak, std::abs(load_kept(row, dtype, i, kept)));
    float s = scales[r] = row_scale(peak, max_level);
    __m512 divisor = _mm512_set1_ps(s);
    int8_t* out = q + r * k;
    for (int64_t i = 0; i < vector_end; i += 16) {
      // Division, not a multiplication by 1/s: ATen divides, and ties must round alike.
      __m512 rounded =
          _mm512_roundscale_ps(_mm512_div_ps(load16_kept(row, dtype, i, kept), divisor), kRound);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                       _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(rounded)));
    }
    for (int64_t i = vector_end; i < k; ++i)
      out[i] = to_int8(std::nearbyint(load_kept(row, dtype, i, kept) / s));
  }
}

FXOPT_AVX512 __m512 erf_avx512(__m512 x) {
  // Past kErfOne, +-1 exactly: the GELU of a large negative input is then 0, as it should be.
  __mmask16 beyond = _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(kErfOne), _CMP_GE_OQ);
  __m512 one = _mm512_castsi512_ps(_mm512_or_si512(
      _mm512_castps_si512(_mm512_set1_ps(1.0f)),
      _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(int32_t(0x80000000u)))));
  __m512 t = _mm512_mul_ps(x, x), p = _mm512_set1_ps(kErfNumerator[0]);
  for (float c : std::span(kErfNumerator).subspan(1)) p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(c));
  __m512 q = _mm512_set1_ps(kErfDenominator[0]);
  for (float c : std::span(kErfDenominator).subspan(1))
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(c));
  return _mm512_mask_blend_ps(beyond, _mm512_div_ps(_mm512_mul_ps(x, p), q), one);
}

FXOPT_AVX512 __m512 activate_avx512(__m512 v, Activation activation) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  switch (activation) {
    case Activation::None:
      return v;
    case Activation::Relu:
      return _mm512_max_ps(v, _mm512_setzero_ps());
    case Activation::Gelu:
      return _mm512_mul_ps(
          _mm512_mul_ps(half, v),
          _mm512_add_ps(one, erf_avx512(_mm512_mul_ps(v, _mm512_set1_ps(kSqrtHalf)))));
    case Activation::GeluTanh: {
      // tanh(u) = 1 - 2 / (e^(2u) + 1), so 0.5 v (1 + tanh(u)) = v - v / (e^(2u) + 1).
      __m512 cube = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
      __m512 u = _mm512_mul_ps(_mm512_set1_ps(2.0f * kTanhGeluScale),
                               _mm512_fmadd_ps(cube, _mm512_set1_ps(0.044715f), v));
      return _mm512_sub_ps(v, _mm512_div_ps(v, _mm512_add_ps(exp_avx512(u), one)));
    }
    case Activation::Silu:
      return _mm512_div_ps(v,
                           _mm512_add_ps(one, exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), v))));
  }
  return v;
}

// float32 to bfloat16 with round to nearest even, NaN kept a quiet NaN (AVX-512F only: CPUs
// without AVX512-BF16 run this too).
FXOPT_AVX512 __m256i to_bfloat16(__m512 v) {
  __m512i bits = _mm512_castps_si512(v);
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  rounded = _mm512_mask_mov_epi32(
      rounded, nan, _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(rounded);
}

FXOPT_AVX512 void dequantize_avx512(const int32_t* acc, int64_t n, const float* row_scales,
                                    const float* col_scales, const float* bias,
                                    const OutlierChannels* outliers, void* y, RowDtype dtype,
                                    Activation activation, int64_t begin, int64_t end) {
  int64_t vector_end = n - n % 16;
  std::vector<float> values(outliers ? outliers->channels.size() : 0);
  for (int64_t r = begin; r < end; ++r) {
    __m512 s = _mm512_set1_ps(row_scales[r]);
    if (outliers) outlier_values(*outliers, r, values);
    // Vectors [j, j + W) of the row: each outlier value is broadcast once for W of them, and
    // the W chains of FMAs and activations overlap.
    auto vectors = [&]<int W>(int64_t j) FXOPT_AVX512 {
      __m512 v[W];
      for (int w = 0; w < W; ++w) {
        int64_t at = j + 16 * w;
        v[w] = _mm512_cvtepi32_ps(_mm512_loadu_si512(acc + r * n + at));
        v[w] = _mm512_mul_ps(_mm512_mul_ps(v[w], s), _mm512_loadu_ps(col_scales + at));
        if (bias) v[w] = _mm512_add_ps(v[w], _mm512_loadu_ps(bias + at));
      }
      for (size_t c = 0; c < values.size(); ++c) {
        __m512 value = _mm512_set1_ps(values[c]);
        const float* weight = outliers->weight + int64_t(c) * n + j;
        for (int w = 0; w < W; ++w)
          v[w] = _mm512_fmadd_ps(value, _mm512_loadu_ps(weight + 16 * w), v[w]);
      }
      for (int w = 0; w < W; ++w) {
        int64_t at = r * n + j + 16 * w;
        __m512 out = activate_avx512(v[w], activation);
        if (dtype == RowDtype::Float32)
          _mm512_storeu_ps(static_cast<float*>(y) + at, out);
        else
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(y) + at),
                              to_bfloat16(out));
      }
    };
    int64_t j = 0;
    for (; j + 16 * kVectorsPerStep <= vector_end; j += 16 * kVectorsPerStep)
      vectors.template operator()<kVectorsPerStep>(j);
    for (; j < vector_end; j += 16) vectors.template operator()<1>(j);
    if (vector_end < n)
      dequantize_portable(acc, n, row_scales, col_scales, bias, outliers, y, dtype, activation, r,
                          r + 1, vector_end);
  }
}
#endif

#ifdef FXOPT_AVX2
// The AVX-512 paths' arithmetic on 8 lanes, for CPUs without AVX-512 (a Zen 3): the same
// operations in the same order, so the same results.
constexpr int kRound2 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

FXOPT_AVX2 __m256 load8(const void* row, RowDtype dtype, int64_t i) {
  if (dtype == RowDtype::Float32) return _mm256_loadu_ps(static_cast<const float*>(row) + i);
  __m128i halves =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + i));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
}

FXOPT_AVX2 __m256 load8_kept(const void* row, RowDtype dtype, int64_t i, const float* kept) {
  __m256 v = load8(row, dtype, i);
  return kept ? _mm256_mul_ps(v, _mm256_loadu_ps(kept + i)) : v;
}

FXOPT_AVX2 __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

FXOPT_AVX2 void quantize_avx2(const void* x, RowDtype dtype, int64_t k, int8_t* q, float* scales,
                              float max_level, const float* kept, int64_t begin, int64_t end) {
  int64_t vector_end = k - k % 8;
  for (int64_t r = begin; r < end; ++r) {
    const void* row = row_at(x, dtype, r * k);
    __m256 peaks = _mm256_setzero_ps();
    for (int64_t i = 0; i < vector_end; i += 8)
      peaks = _mm256_max_ps(peaks, abs8(load8_kept(row, dtype, i, kept)));
    float peak = max_lanes(peaks);
    for (int64_t i = vector_end; i < k; ++i)
      peak = std::max(peak, std::abs(load_kept(row, dtype, i, kept)));
    float s = scales[r] = row_scale(peak, max_level);
    __m256 divisor = _mm256_set1_ps(s);
    int8_t* out = q + r * k;
    for (int64_t i = 0; i < vector_end; i += 8) {
      __m256 rounded =
          _mm256_round_ps(_mm256_div_ps(load8_kept(row, dtype, i, kept), divisor), kRound2);
      // A NaN converts to INT32_MIN, which saturates to -128: the portable loop writes 0.
      rounded = _mm256_and_ps(rounded, _mm256_cmp_ps(rounded, rounded, _CMP_ORD_Q));
      __m256i words = _mm256_cvtps_epi32(rounded);
      __m128i shorts =
          _mm_packs_epi32(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), _mm_packs_epi16(shorts, shorts));
    }
    for (int64_t i = vector_end; i < k; ++i)
      out[i] = to_int8(std::nearbyint(load_kept(row, dtype, i, kept) / s));
  }
}

FXOPT_AVX2 __m256 erf_avx2(__m256 x) {
  __m256 beyond = _mm256_cmp_ps(abs8(x), _mm256_set1_ps(kErfOne), _CMP_GE_OQ);
  __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(x, _mm256_set1_ps(-0.0f)));
  __m256 t = _mm256_mul_ps(x, x), p = _mm256_set1_ps(kErfNumerator[0]);
  for (float c : std::span(kErfNumerator).subspan(1)) p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(c));
  __m256 q = _mm256_set1_ps(kErfDenominator[0]);
  for (float c : std::span(kErfDenominator).subspan(1))
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(c));
  return _mm256_blendv_ps(_mm256_div_ps(_mm256_mul_ps(x, p), q), one, beyond);
}

FXOPT_AVX2 __m256 activate_avx2(__m256 v, Activation activation) {
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  switch (activation) {
    case Activation::None:
      return v;
    case Activation::Relu:
      return _mm256_max_ps(v, _mm256_setzero_ps());
    case Activation::Gelu:
      return _mm256_mul_ps(
          _mm256_mul_ps(half, v),
          _mm256_add_ps(one, erf_avx2(_mm256_mul_ps(v, _mm256_set1_ps(kSqrtHalf)))));
    case Activation::GeluTanh: {
      __m256 cube = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
      __m256 u = _mm256_mul_ps(_mm256_set1_ps(2.0f * kTanhGeluScale),
                               _mm256_fmadd_ps(cube, _mm256_set1_ps(0.044715f), v));
      return _mm256_sub_ps(v, _mm256_div_ps(v, _mm256_add_ps(exp_avx2(u), one)));
    }
    case Activation::Silu:
      return _mm256_div_ps(v, _mm256_add_ps(one, exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), v))));
  }
  return v;
}

// float32 to bfloat16, rounded to nearest even, NaN kept a quiet NaN.
FXOPT_AVX2 __m128i to_bfloat16_avx2(__m256 v) {
  __m256i bits = _mm256_castps_si256(v);
  __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
  __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  rounded =
      _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  // Every lane is below 2^16: unsigned packing keeps it.
  return _mm_packus_epi32(_mm256_castsi256_si128(rounded), _mm256_extracti128_si256(rounded, 1));
}

FXOPT_AVX2 void dequantize_avx2(const int32_t* acc, int64_t n, const float* row_scales,
                                const float* col_scales, const float* bias,
                                const OutlierChannels* outliers, void* y, RowDtype dtype,
                                Activation activation, int64_t begin, int64_t end) {
  int64_t vector_end = n - n % 8;
  std::vector<float> values(outliers ? outliers->channels.size() : 0);
  for (int64_t r = begin; r < end; ++r) {
    __m256 s = _mm256_set1_ps(row_scales[r]);
    if (outliers) outlier_values(*outliers, r, values);
    auto vectors = [&]<int W>(int64_t j) FXOPT_AVX2 {
      __m256 v[W];
      for (int w = 0; w < W; ++w) {
        int64_t at = j + 8 * w;
        v[w] = _mm256_cvtepi32_ps(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + r * n + at)));
        v[w] = _mm256_mul_ps(_mm256_mul_ps(v[w], s), _mm256_loadu_ps(col_scales + at));
        if (bias) v[w] = _mm256_add_ps(v[w], _mm256_loadu_ps(bias + at));
      }
      for (size_t c = 0; c < values.size(); ++c) {
        __m256 value = _mm256_set1_ps(values[c]);
        const float* weight = outliers->weight + int64_t(c) * n + j;
        for (int w = 0; w < W; ++w)
          v[w] = _mm256_fmadd_ps(value, _mm256_loadu_ps(weight + 8 * w), v[w]);
      }
      for (int w = 0; w < W; ++w) {
        int64_t at = r * n + j + 8 * w;
        __m256 out = activate_avx2(v[w], activation);
        if (dtype == RowDtype::Float32)
          _mm256_storeu_ps(static_cast<float*>(y) + at, out);
        else
          _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(y) + at),
                           to_bfloat16_avx2(out));
      }
    };
    int64_t j = 0;
    for (; j + 8 * kVectorsPerStep <= vector_end; j += 8 * kVectorsPerStep)
      vectors.template operator()<kVectorsPerStep>(j);
    for (; j < vector_end; j += 8) vectors.template operator()<1>(j);
    if (vector_end < n)
      dequantize_portable(acc, n, row_scales, col_scales, bias, outliers, y, dtype, activation, r,
                          r + 1, vector_end);
  }
}
#endif

}  // namespace

Activation activation_named(std::string_view name) {
  static constexpr std::pair<std::string_view, Activation> kNames[] = {
      {"none", Activation::None},
      {"relu", Activation::Relu},
      {"gelu", Activation::Gelu},
      {"gelu_tanh", Activation::GeluTanh},
      {"silu", Activation::Silu}};
  for (const auto& [known, activation] : kNames)
    if (name == known) return activation;
  throw std::invalid_argument("dequantize_rows_int32: no activation '" + std::string(name) +
                              "' (none, relu, gelu, gelu_tanh, silu)");
}

void quantize_rows_int8(const void* x, RowDtype dtype, int64_t rows, int64_t k, int8_t* q,
                        float* scales, int threads, int max_level,
                        std::span<const int64_t> skipped) {
  if (max_level < 1 || max_level > 127)
    throw std::invalid_argument("quantize_rows_int8 needs max_level in [1, 127]");
  check_channels(skipped, k, "quantize_rows_int8");
  const float level = float(max_level);
  // Skipped channels are multiplied by 0 as they are read (a NaN or infinity there gives NaN,
  // as it would in the float product the caller adds for them).
  std::vector<float> kept_channels;
  if (!skipped.empty()) {
    kept_channels.assign(size_t(k), 1.0f);
    for (int64_t c : skipped) kept_channels[size_t(c)] = 0.0f;
  }
  const float* kept = skipped.empty() ? nullptr : kept_channels.data();
  split_rows(rows, k * (dtype == RowDtype::Float32 ? 4 : 2), threads, 1,
             [&](int64_t begin, int64_t end) {
#ifdef FXOPT_AVX512
               if (has_avx512())
                 return quantize_avx512(x, dtype, k, q, scales, level, kept, begin, end);
#endif
#ifdef FXOPT_AVX2
               if (has_avx2())
                 return quantize_avx2(x, dtype, k, q, scales, level, kept, begin, end);
#endif
               quantize_portable(x, dtype, k, q, scales, level, kept, begin, end);
             });
}

void dequantize_rows_int32(const int32_t* acc, int64_t rows, int64_t n, const float* row_scales,
                           const float* col_scales, const float* bias, void* y, RowDtype dtype,
                           int threads, Activation activation, const OutlierChannels* outliers) {
  if (outliers) check_channels(outliers->channels, outliers->k, "dequantize_rows_int32");
  if (outliers && outliers->channels.empty()) outliers = nullptr;
  split_rows(rows, n * 4, threads, 1, [&](int64_t begin, int64_t end) {
#ifdef FXOPT_AVX512
    if (has_avx512())
      return dequantize_avx512(acc, n, row_scales, col_scales, bias, outliers, y, dtype, activation,
                               begin, end);
#endif
#ifdef FXOPT_AVX2
    if (has_avx2())
      return dequantize_avx2(acc, n, row_scales, col_scales, bias, outliers, y, dtype, activation,
                             begin, end);
#endif
    dequantize_portable(acc, n, row_scales, col_scales, bias, outliers, y, dtype, activation, begin,
                        end);
  });
}

}  // namespace fxopt
