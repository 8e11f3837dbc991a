#include "kernels/pointwise_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernels/bfloat16.h"
#include "kernels/cpu_dispatch.h"
#include "kernels/float_lanes.h"
#include "kernels/row_split.h"

namespace fxopt {
namespace {

// Output channels a packed block holds: two AVX-512 vectors of float32 sums.
constexpr int64_t kBlock = 32;

int64_t blocks(int64_t out_channels) { return (out_channels + kBlock - 1) / kBlock; }
int64_t pairs(int64_t in_channels) { return (in_channels + 1) / 2; }
// The weight part of a packing: bfloat16 pairs, or float32 one input channel a row.
int64_t weight_bytes(int64_t out_channels, int64_t in_channels, bool bfloat16) {
  return bfloat16
             ? blocks(out_channels) * pairs(in_channels) * kBlock * 2 * int64_t(sizeof(uint16_t))
             : blocks(out_channels) * in_channels * kBlock * int64_t(sizeof(float));
}

// The packed weight's parts, as the pack functions lay them out.
template <class T>
struct Packed {
  const T* weight;    // bfloat16 [block][pair][32][2], float32 [block][in][32]
  const float* bias;  // [block][32]
};

template <class T>
Packed<T> parts(const PointwiseConv& s, const void* packed) {
  const auto* bytes = static_cast<const char*>(packed);
  const int64_t weights = weight_bytes(s.out_channels, s.in_channels, sizeof(T) == 2);
  return {reinterpret_cast<const T*>(bytes), reinterpret_cast<const float*>(bytes + weights)};
}

float* packed_bias(void* packed, int64_t out_channels, int64_t in_channels, bool bfloat16) {
  return reinterpret_cast<float*>(static_cast<char*>(packed) +
                                  weight_bytes(out_channels, in_channels, bfloat16));
}

void check(const PointwiseConv& s) {
  if (s.pixels < 0 || s.in_channels <= 0 || s.out_channels <= 0)
    throw std::invalid_argument("pointwise_conv: sizes that describe no product");
}

namespace f32_portable {
using V = lanes::Portable;
#include "kernels/pointwise_conv_f32.inc"
}  // namespace f32_portable

#ifdef FXOPT_PRAGMA_VECTORS
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace f32_avx2 {
using V = lanes::Avx2;
#include "kernels/pointwise_conv_f32.inc"
}  // namespace f32_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f")
namespace f32_avx512 {
using V = lanes::Avx512;
#include "kernels/pointwise_conv_f32.inc"
}  // namespace f32_avx512
#pragma GCC pop_options
#endif

namespace bf16_portable {

void rows(const PointwiseConv& s, const uint16_t* x, const Packed<uint16_t>& w,
          const uint16_t* residual, uint16_t* y, int64_t begin, int64_t end) {
  const int64_t in = s.in_channels, out = s.out_channels, pair_count = pairs(in);
  for (int64_t p = begin; p < end; ++p)
    for (int64_t n = 0; n < out; ++n) {
      const uint16_t* block = w.weight + (n / kBlock) * pair_count * kBlock * 2 + (n % kBlock) * 2;
      float sum = w.bias[n];
      for (int64_t k = 0; k < in; ++k)
        sum +=
            bfloat16_to_float(x[p * in + k]) * bfloat16_to_float(block[k / 2 * kBlock * 2 + k % 2]);
      if (residual) sum += bfloat16_to_float(residual[p * out + n]);
      // NaN stays NaN, as after ATen's relu / hardtanh.
      y[p * out + n] = float_to_bfloat16(std::min(std::max(sum, s.lower), s.upper));
    }
}

}  // namespace bf16_portable

#ifdef FXOPT_AVX512_BF16
namespace avx512_bf16 {

// What every step of one output block shares.
struct Block {
  const uint16_t* weight;  // the block's pairs
  const float* bias;       // its 32 sums' starting values
  int64_t n0;              // its first output channel
  __mmask16 masks[2];      // the channels of each vector that exist
};

FXOPT_AVX512_BF16 __m512bh weights(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

// Pixels [p, p + R) of one block, C vectors of it (C = 1 where the block's last 16 channels are
// past the end): R x C float32 sums in registers, one broadcast pair of inputs per pixel a step.
template <int R, int C>
FXOPT_AVX512_BF16 void tile(const PointwiseConv& s, const uint16_t* x, const Block& b,
                            const uint16_t* residual, uint16_t* y, int64_t p) {
  const int64_t in = s.in_channels, out = s.out_channels, full = in / 2;
  __m512 sums[R][C];
  for (int c = 0; c < C; ++c) {
    __m512 bias = _mm512_loadu_ps(b.bias + 16 * c);
    for (int r = 0; r < R; ++r) sums[r][c] = bias;
  }
  const uint16_t* rows = x + p * in;
  for (int64_t k = 0; k < full; ++k) {
    __m512bh w[C];
    for (int c = 0; c < C; ++c) w[c] = weights(b.weight + k * kBlock * 2 + 32 * c);
    for (int r = 0; r < R; ++r) {
      uint32_t pair;
      std::memcpy(&pair, rows + r * in + 2 * k, sizeof(pair));
      __m512bh a = (__m512bh)_mm512_set1_epi32(int32_t(pair));
      for (int c = 0; c < C; ++c) sums[r][c] = _mm512_dpbf16_ps(sums[r][c], a, w[c]);
    }
  }
  if (in % 2) {  // the last input channel, paired with the packing's zero (never read past x)
    __m512bh w[C];
    for (int c = 0; c < C; ++c) w[c] = weights(b.weight + full * kBlock * 2 + 32 * c);
    for (int r = 0; r < R; ++r) {
      __m512bh a = (__m512bh)_mm512_set1_epi32(int32_t(rows[r * in + in - 1]));
      for (int c = 0; c < C; ++c) sums[r][c] = _mm512_dpbf16_ps(sums[r][c], a, w[c]);
    }
  }
  const __m512 lower = _mm512_set1_ps(s.lower), upper = _mm512_set1_ps(s.upper);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      const int64_t at = (p + r) * out + b.n0 + 16 * c;
      __m512 v = sums[r][c];
      if (residual) {
        __m256i added = _mm256_maskz_loadu_epi16(b.masks[c], residual + at);
        v = _mm512_add_ps(v,
                          _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(added), 16)));
      }
      // max / min return their second operand when either is NaN: v, so NaN stays NaN.
      v = _mm512_min_ps(upper, _mm512_max_ps(lower, v));
      _mm256_mask_storeu_epi16(y + at, b.masks[c], (__m256i)_mm512_cvtneps_pbh(v));
    }
}

// The last pixels of a range, fewer than a whole step: tile<rest, C>.
template <int C, int R>
FXOPT_AVX512_BF16 void rest(int64_t count, const PointwiseConv& s, const uint16_t* x,
                            const Block& b, const uint16_t* residual, uint16_t* y, int64_t p) {
  if constexpr (R > 0) {
    if (count == R) return tile<R, C>(s, x, b, residual, y, p);
    rest<C, R - 1>(count, s, x, b, residual, y, p);
  }
}

// Twelve sums in registers either way: six pixels of 32 channels, or twelve of 16.
template <int C>
FXOPT_AVX512_BF16 void block_rows(const PointwiseConv& s, const uint16_t* x, const Block& b,
                                  const uint16_t* residual, uint16_t* y, int64_t begin,
                                  int64_t end) {
  constexpr int kRows = C == 2 ? 6 : 12;
  int64_t p = begin;
  for (; p + kRows <= end; p += kRows) tile<kRows, C>(s, x, b, residual, y, p);
  rest<C, kRows - 1>(end - p, s, x, b, residual, y, p);
}

FXOPT_AVX512_BF16 void rows(const PointwiseConv& s, const uint16_t* x, const Packed<uint16_t>& w,
                            const uint16_t* residual, uint16_t* y, int64_t begin, int64_t end) {
  const int64_t pair_count = pairs(s.in_channels);
  for (int64_t block = 0; block < blocks(s.out_channels); ++block) {
    const int64_t n0 = block * kBlock, left = std::min(kBlock, s.out_channels - n0);
    auto mask = [](int64_t lanes) {
      return lanes >= 16 ? __mmask16(0xffff) : __mmask16((1u << std::max<int64_t>(lanes, 0)) - 1);
    };
    Block b{
        w.weight + block * pair_count * kBlock * 2, w.bias + n0, n0, {mask(left), mask(left - 16)}};
    if (left > 16)
      block_rows<2>(s, x, b, residual, y, begin, end);
    else
      block_rows<1>(s, x, b, residual, y, begin, end);
  }
}

}  // namespace avx512_bf16
#endif

}  // namespace

int64_t pointwise_packed_bytes(int64_t out_channels, int64_t in_channels, bool bfloat16) {
  return weight_bytes(out_channels, in_channels, bfloat16) +
         blocks(out_channels) * kBlock * int64_t(sizeof(float));
}

void pointwise_pack_bf16(const uint16_t* weight, const float* bias, int64_t out_channels,
                         int64_t in_channels, void* packed) {
  std::memset(packed, 0, size_t(pointwise_packed_bytes(out_channels, in_channels, true)));
  const int64_t pair_count = pairs(in_channels);
  auto* w = static_cast<uint16_t*>(packed);
  float* b = packed_bias(packed, out_channels, in_channels, true);
  for (int64_t n = 0; n < out_channels; ++n) {
    uint16_t* block = w + (n / kBlock) * pair_count * kBlock * 2 + (n % kBlock) * 2;
    for (int64_t k = 0; k < in_channels; ++k)
      block[k / 2 * kBlock * 2 + k % 2] = weight[n * in_channels + k];
    if (bias) b[n] = bias[n];
  }
}

void pointwise_pack_f32(const float* weight, const float* bias, int64_t out_channels,
                        int64_t in_channels, void* packed) {
  std::memset(packed, 0, size_t(pointwise_packed_bytes(out_channels, in_channels, false)));
  auto* w = static_cast<float*>(packed);
  float* b = packed_bias(packed, out_channels, in_channels, false);
  for (int64_t n = 0; n < out_channels; ++n) {
    float* block = w + (n / kBlock) * in_channels * kBlock + n % kBlock;
    for (int64_t k = 0; k < in_channels; ++k) block[k * kBlock] = weight[n * in_channels + k];
    if (bias) b[n] = bias[n];
  }
}

void pointwise_conv_bf16(const PointwiseConv& s, const uint16_t* x, const void* packed,
                         const uint16_t* residual, uint16_t* y, int threads) {
  check(s);
  const Packed<uint16_t> w = parts<uint16_t>(s, packed);
  // What a pixel reads and writes, as the work a thread part should have; ranges of whole steps.
  const int64_t bytes_per_pixel = (s.in_channels + s.out_channels) * int64_t(sizeof(uint16_t));
  split_rows(s.pixels, bytes_per_pixel, threads, 12, [&](int64_t begin, int64_t end) {
#ifdef FXOPT_AVX512_BF16
    if (has_avx512_bf16()) return avx512_bf16::rows(s, x, w, residual, y, begin, end);
#endif
    bf16_portable::rows(s, x, w, residual, y, begin, end);
  });
}

void pointwise_conv_f32(const PointwiseConv& s, const float* x, const void* packed,
                        const float* residual, float* y, int threads) {
  check(s);
  const Packed<float> w = parts<float>(s, packed);
  const int64_t bytes_per_pixel = (s.in_channels + s.out_channels) * int64_t(sizeof(float));
  split_rows(s.pixels, bytes_per_pixel, threads, 6, [&](int64_t begin, int64_t end) {
#ifdef FXOPT_PRAGMA_VECTORS
    if (has_avx512()) return f32_avx512::rows(s, x, w.weight, w.bias, residual, y, begin, end);
    if (has_avx2()) return f32_avx2::rows(s, x, w.weight, w.bias, residual, y, begin, end);
#endif
    f32_portable::rows(s, x, w.weight, w.bias, residual, y, begin, end);
  });
}

bool pointwise_conv_vectorized(bool bfloat16) {
#ifdef FXOPT_PRAGMA_VECTORS
  if (!bfloat16) return has_avx2();
#endif
#ifdef FXOPT_AVX512_BF16
  if (bfloat16) return has_avx512_bf16();
#endif
  return false;
}

}  // namespace fxopt
