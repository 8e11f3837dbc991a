#include "kernels/int8_pointwise_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "kernels/bfloat16.h"
#include "kernels/cpu_dispatch.h"
#include "kernels/quantize_u8.h"
#include "kernels/row_split.h"

namespace fxopt {
namespace {

// Output channels a packed block holds: two AVX-512 vectors of int32 sums.
constexpr int64_t kBlock = 32;
// Pixels a step of one block (twelve where a block has one vector).
constexpr int64_t kRows = 6;
// The quantized rows of a chunk: about a third of a 1 MiB L2, so they stay there while every
// block reads them.
constexpr int64_t kChunkBytes = 96 << 10;

int64_t blocks(int64_t out_channels) { return (out_channels + kBlock - 1) / kBlock; }
int64_t quads(int64_t in_channels) { return (in_channels + 3) / 4; }
int64_t weight_bytes(int64_t out_channels, int64_t in_channels) {
  return blocks(out_channels) * quads(in_channels) * kBlock * 4;
}

// The packed weight's parts, as int8_pointwise_pack lays them out.
struct Packed {
  const int8_t* weight;  // [block][quad][32][4]
  const float* scale;    // [block * 32]
  const float* shift;    // [block * 32]
};

Packed parts(const PointwiseConv& s, const void* packed) {
  const auto* bytes = static_cast<const char*>(packed);
  const auto* scale =
      reinterpret_cast<const float*>(bytes + weight_bytes(s.out_channels, s.in_channels));
  return {reinterpret_cast<const int8_t*>(bytes), scale, scale + blocks(s.out_channels) * kBlock};
}

// What one call's rows share: the shape, the packing, the operands and the quantization.
struct Call {
  const PointwiseConv& s;
  Packed w;
  const void* x;
  const void* residual;
  void* y;
  RowDtype dtype;
  float inverse_scale;
  int32_t zero_point;
};

float load(const void* v, RowDtype dtype, int64_t i) {
  return dtype == RowDtype::Float32 ? static_cast<const float*>(v)[i]
                                    : bfloat16_to_float(static_cast<const uint16_t*>(v)[i]);
}

void store(void* v, RowDtype dtype, int64_t i, float value) {
  if (dtype == RowDtype::Float32)
    static_cast<float*>(v)[i] = value;
  else
    static_cast<uint16_t*>(v)[i] = float_to_bfloat16(value);
}

// Pixels [first, first + count) quantized into q, each row `stride` bytes (its input channels,
// then zeros up to a whole quad).
void quantize_rows(const Call& c, int64_t first, int64_t count, int64_t stride, uint8_t* q) {
  const int64_t in = c.s.in_channels;
  const size_t element = c.dtype == RowDtype::Float32 ? 4 : 2;
  const auto* x = static_cast<const char*>(c.x) + first * in * int64_t(element);
  if (stride == in)
    return quantize_u8_here(x, c.dtype, count * in, c.inverse_scale, c.zero_point, q);
  for (int64_t r = 0; r < count; ++r) {
    quantize_u8_here(x + r * in * int64_t(element), c.dtype, in, c.inverse_scale, c.zero_point,
                     q + r * stride);
    std::memset(q + r * stride + in, 0, size_t(stride - in));
  }
}

// Pixels [first, first + count) of every output channel from their quantized rows q.
void portable_rows(const Call& c, const uint8_t* q, int64_t stride, int64_t first, int64_t count) {
  const int64_t in = c.s.in_channels, out = c.s.out_channels, quad_count = quads(in);
  for (int64_t r = 0; r < count; ++r)
    for (int64_t n = 0; n < out; ++n) {
      const int8_t* block = c.w.weight + (n / kBlock) * quad_count * kBlock * 4 + (n % kBlock) * 4;
      int32_t sum = 0;
      for (int64_t k = 0; k < in; ++k)
        sum += int32_t(q[r * stride + k]) * block[k / 4 * kBlock * 4 + k % 4];
      const int64_t at = (first + r) * out + n;
      float v = float(sum) * c.w.scale[n] + c.w.shift[n];
      if (c.residual) v += load(c.residual, c.dtype, at);
      // NaN stays NaN, as after ATen's relu / hardtanh.
      store(c.y, c.dtype, at, std::min(std::max(v, c.s.lower), c.s.upper));
    }
}

#ifdef FXOPT_AVX512_VNNI_BF16
namespace avx512_vnni {

// What every step of one output block shares.
struct Block {
  const int8_t* weight;  // the block's quads
  int64_t n0;            // its first output channel
  __mmask16 masks[2];    // the channels of each vector that exist
};

FXOPT_AVX512_VNNI_BF16 __m512 load16(const void* v, RowDtype dtype, int64_t at, __mmask16 mask) {
  if (dtype == RowDtype::Float32)
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(v) + at);
  __m256i halves = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(v) + at);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
}

// float32 to bfloat16, rounded to nearest even, NaN kept a (quiet) NaN: float_to_bfloat16 on
// sixteen lanes, in one instruction with AVX512-BF16 (subnormal results then flush to zero),
// else in integer steps (a CPU with VNNI and no BF16: Cascade Lake, Ice Lake).
template <bool kBf16>
FXOPT_AVX512_VNNI_BF16 __m256i to_bfloat16(__m512 v) {
  if constexpr (kBf16) return (__m256i)_mm512_cvtneps_pbh(v);
  __m512i bits = _mm512_castps_si512(v);
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  rounded = _mm512_mask_or_epi32(rounded, nan, bits, _mm512_set1_epi32(0x00400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(rounded, 16));
}

template <bool kBf16>
FXOPT_AVX512_VNNI_BF16 void store16(void* v, RowDtype dtype, int64_t at, __mmask16 mask,
                                    __m512 value) {
  if (dtype == RowDtype::Float32)
    _mm512_mask_storeu_ps(static_cast<float*>(v) + at, mask, value);
  else
    _mm256_mask_storeu_epi16(static_cast<uint16_t*>(v) + at, mask, to_bfloat16<kBf16>(value));
}

// Pixels [p, p + R) of one block, C vectors of it, from their quantized rows q (the chunk's
// row p0 first): R x C int32 sums in registers, one broadcast quad of inputs per pixel a step.
template <bool kBf16, int R, int C>
FXOPT_AVX512_VNNI_BF16 void tile(const Call& c, const uint8_t* q, int64_t stride, int64_t p0,
                                 const Block& b, int64_t p) {
  const int64_t quad_count = stride / 4, out = c.s.out_channels;
  __m512i sums[R][C];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < C; ++v) sums[r][v] = _mm512_setzero_si512();
  const uint8_t* rows = q + (p - p0) * stride;
  for (int64_t k = 0; k < quad_count; ++k) {
    __m512i w[C];
    for (int v = 0; v < C; ++v) w[v] = _mm512_loadu_si512(b.weight + k * kBlock * 4 + 64 * v);
    for (int r = 0; r < R; ++r) {
      int32_t quad;
      std::memcpy(&quad, rows + r * stride + 4 * k, sizeof(quad));
      __m512i a = _mm512_set1_epi32(quad);
      for (int v = 0; v < C; ++v) sums[r][v] = _mm512_dpbusd_epi32(sums[r][v], a, w[v]);
    }
  }
  const __m512 lower = _mm512_set1_ps(c.s.lower), upper = _mm512_set1_ps(c.s.upper);
  for (int v = 0; v < C; ++v) {
    const __m512 scale = _mm512_loadu_ps(c.w.scale + b.n0 + 16 * v);
    const __m512 shift = _mm512_loadu_ps(c.w.shift + b.n0 + 16 * v);
    for (int r = 0; r < R; ++r) {
      const int64_t at = (p + r) * out + b.n0 + 16 * v;
      __m512 value = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[r][v]), scale, shift);
      if (c.residual) value = _mm512_add_ps(value, load16(c.residual, c.dtype, at, b.masks[v]));
      // max / min return their second operand when either is NaN: value, so NaN stays NaN.
      value = _mm512_min_ps(upper, _mm512_max_ps(lower, value));
      store16<kBf16>(c.y, c.dtype, at, b.masks[v], value);
    }
  }
}

// The last pixels of a chunk, fewer than a whole step: tile<rest, C>.
template <bool kBf16, int C, int R>
FXOPT_AVX512_VNNI_BF16 void rest(int64_t count, const Call& c, const uint8_t* q, int64_t stride,
                                 int64_t p0, const Block& b, int64_t p) {
  if constexpr (R > 0) {
    if (count == R) return tile<kBf16, R, C>(c, q, stride, p0, b, p);
    rest<kBf16, C, R - 1>(count, c, q, stride, p0, b, p);
  }
}

// Twelve sums in registers either way: six pixels of 32 channels, or twelve of 16.
template <bool kBf16, int C>
FXOPT_AVX512_VNNI_BF16 void block_rows(const Call& c, const uint8_t* q, int64_t stride, int64_t p0,
                                       int64_t count, const Block& b) {
  constexpr int kStep = C == 2 ? kRows : 2 * kRows;
  int64_t p = p0;
  for (; p + kStep <= p0 + count; p += kStep) tile<kBf16, kStep, C>(c, q, stride, p0, b, p);
  rest<kBf16, C, kStep - 1>(p0 + count - p, c, q, stride, p0, b, p);
}

template <bool kBf16>
FXOPT_AVX512_VNNI_BF16 void rows(const Call& c, const uint8_t* q, int64_t stride, int64_t p0,
                                 int64_t count) {
  const int64_t quad_count = stride / 4, out = c.s.out_channels;
  for (int64_t block = 0; block < blocks(out); ++block) {
    const int64_t n0 = block * kBlock, left = std::min(kBlock, out - n0);
    auto mask = [](int64_t lanes) {
      return lanes >= 16 ? __mmask16(0xffff) : __mmask16((1u << std::max<int64_t>(lanes, 0)) - 1);
    };
    Block b{c.w.weight + block * quad_count * kBlock * 4, n0, {mask(left), mask(left - 16)}};
    if (left > 16)
      block_rows<kBf16, 2>(c, q, stride, p0, count, b);
    else
      block_rows<kBf16, 1>(c, q, stride, p0, count, b);
  }
}

}  // namespace avx512_vnni
#endif

}  // namespace

int64_t int8_pointwise_packed_bytes(int64_t out_channels, int64_t in_channels) {
  return weight_bytes(out_channels, in_channels) +
         2 * blocks(out_channels) * kBlock * int64_t(sizeof(float));
}

void int8_pointwise_pack(const int8_t* weight, const float* w_scales, const float* bias,
                         int64_t out_channels, int64_t in_channels, float x_scale,
                         int32_t zero_point, void* packed) {
  std::memset(packed, 0, size_t(int8_pointwise_packed_bytes(out_channels, in_channels)));
  const int64_t quad_count = quads(in_channels);
  auto* w = static_cast<int8_t*>(packed);
  auto* scale = reinterpret_cast<float*>(w + weight_bytes(out_channels, in_channels));
  float* shift = scale + blocks(out_channels) * kBlock;
  for (int64_t n = 0; n < out_channels; ++n) {
    int8_t* block = w + (n / kBlock) * quad_count * kBlock * 4 + (n % kBlock) * 4;
    int64_t total = 0;
    for (int64_t k = 0; k < in_channels; ++k) {
      block[k / 4 * kBlock * 4 + k % 4] = weight[n * in_channels + k];
      total += weight[n * in_channels + k];
    }
    scale[n] = x_scale * w_scales[n];
    // In double, rounded once: the zero point's share of every sum of this channel.
    shift[n] = float((bias ? double(bias[n]) : 0.0) -
                     double(zero_point) * double(scale[n]) * double(total));
  }
}

void int8_pointwise_conv(const PointwiseConv& s, const void* x, RowDtype dtype, float x_scale,
                         int32_t zero_point, const void* packed, const void* residual, void* y,
                         int threads) {
  if (s.pixels < 0 || s.in_channels <= 0 || s.out_channels <= 0 || !(x_scale > 0))
    throw std::invalid_argument("int8_pointwise_conv: sizes that describe no product");
  const Call c{s, parts(s, packed), x, residual, y, dtype, 1.0f / x_scale, zero_point};
  const int64_t stride = quads(s.in_channels) * 4;
  const int64_t chunk =
      std::max<int64_t>(2 * kRows, kChunkBytes / stride / (2 * kRows) * 2 * kRows);
  const int64_t element = dtype == RowDtype::Float32 ? 4 : 2;
  split_rows(s.pixels, (s.in_channels + s.out_channels) * element, threads, 2 * kRows,
             [&](int64_t begin, int64_t end) {
               // Uninitialized: quantize_rows writes every byte a step reads.
               auto q = std::make_unique_for_overwrite<uint8_t[]>(
                   size_t(std::min(chunk, end - begin) * stride));
               for (int64_t p0 = begin; p0 < end; p0 += chunk) {
                 const int64_t count = std::min(chunk, end - p0);
                 quantize_rows(c, p0, count, stride, q.get());
#ifdef FXOPT_AVX512_VNNI_BF16
                 if (has_avx512_vnni()) {
                   if (has_avx512_bf16())
                     avx512_vnni::rows<true>(c, q.get(), stride, p0, count);
                   else
                     avx512_vnni::rows<false>(c, q.get(), stride, p0, count);
                   continue;
                 }
#endif
                 portable_rows(c, q.get(), stride, p0, count);
               }
             });
}

bool int8_pointwise_conv_vectorized() {
#ifdef FXOPT_AVX512_VNNI_BF16
  return has_avx512_vnni();
#else
  return false;
#endif
}

}  // namespace fxopt
