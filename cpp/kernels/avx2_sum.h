// The sum and the largest of the 8 lanes of an AVX2 float vector: what _mm512_reduce_add_ps and
// _mm512_reduce_max_ps are for AVX-512, which AVX2 lacks. For the kernels' AVX2 paths
// (FXOPT_AVX2 functions only).
#pragma once

#include <immintrin.h>

#include "kernels/cpu_dispatch.h"

#ifdef FXOPT_AVX2
namespace fxopt {

FXOPT_AVX2 inline float sum_lanes(__m256 v) {
  __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  half = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(half, _mm_movehdup_ps(half)));
}

FXOPT_AVX2 inline float max_lanes(__m256 v) {
  __m128 half = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  half = _mm_max_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_max_ss(half, _mm_movehdup_ps(half)));
}

}  // namespace fxopt
#endif
