// float_lanes: a vector of float32 lanes per instruction set, for kernels whose loops are written
// once over `V` (kLanes, Vec, load and store of float32 and bfloat16, fma, add, broadcast,
// clamp) and compiled per set: the plain C++ one lane at a time (`Portable`), AVX2 with FMA
// (`Avx2`, 8 lanes), AVX-512F (`Avx512`, 16 lanes).
//
// GCC will not inline one template into functions built for two instruction sets, so a kernel
// includes its loops once per set, inside a `#pragma GCC target` region and a namespace whose
// `V` is that set's struct here (depthwise_conv.cc, pointwise_conv.cc). The vector structs are
// defined only where those pragmas exist (FXOPT_PRAGMA_VECTORS: GCC on x86-64); clang builds
// run the portable loops, and the passes never pick them.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/bfloat16.h"
#include "kernels/cpu_dispatch.h"

#if defined(FXOPT_AVX2) && !defined(__clang__)
#define FXOPT_PRAGMA_VECTORS 1
#endif

namespace fxopt::lanes {

struct Portable {
  static constexpr int64_t kLanes = 1;
  using Vec = float;
  static Vec load(const float* p) { return *p; }
  static Vec load(const uint16_t* p) { return bfloat16_to_float(*p); }
  static void store(float* p, Vec v) { *p = v; }
  static void store(uint16_t* p, Vec v) { *p = float_to_bfloat16(v); }
  static Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }
  static Vec add(Vec a, Vec b) { return a + b; }
  static Vec broadcast(float v) { return v; }
  // NaN stays NaN, as after ATen's relu / hardtanh.
  static Vec clamp(Vec v, Vec lower, Vec upper) { return std::min(std::max(v, lower), upper); }
};

#ifdef FXOPT_PRAGMA_VECTORS
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

struct Avx2 {
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
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec broadcast(float v) { return _mm256_set1_ps(v); }
  // max / min return their second operand when either is NaN: v, so NaN stays NaN.
  static Vec clamp(Vec v, Vec lower, Vec upper) {
    return _mm256_min_ps(upper, _mm256_max_ps(lower, v));
  }
};

#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f")

struct Avx512 {
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
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec broadcast(float v) { return _mm512_set1_ps(v); }
  static Vec clamp(Vec v, Vec lower, Vec upper) {
    return _mm512_min_ps(upper, _mm512_max_ps(lower, v));
  }
};

#pragma GCC pop_options
#endif

}  // namespace fxopt::lanes
