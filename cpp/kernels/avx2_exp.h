// e^x on 8 floats with AVX2 and FMA, for the float32 kernels' softmax: exp_avx512's method
// (kernels/avx512_exp.h) on 256-bit vectors, 2^n built in the exponent bits (AVX2 has no
// scalef). Inputs below -87 give 0 (-inf included), above 88 give e^88.
#pragma once

#include <immintrin.h>

#include "kernels/cpu_dispatch.h"

#ifdef FXOPT_AVX2
namespace fxopt {

FXOPT_AVX2 inline __m256 exp_avx2(__m256 x) {
  const __m256 lowest = _mm256_set1_ps(-87.0f);
  __m256 vanishing = _mm256_cmp_ps(x, lowest, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lowest), _mm256_set1_ps(88.0f));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  for (float c : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
  // n is in [-126, 127] here: 2^n is the float whose exponent field holds n + 127.
  __m256i power =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(vanishing, _mm256_mul_ps(p, _mm256_castsi256_ps(power)));
}

}  // namespace fxopt
#endif
