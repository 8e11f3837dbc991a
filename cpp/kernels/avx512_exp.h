// e^x on 16 floats with AVX-512F, for the kernels' softmax and activations: 2^n e^r with
// |r| <= ln 2 / 2 and a degree-6 Taylor polynomial (relative error below 2e-7, under float32's
// rounding of a sum of them). Inputs below -87 give 0 (-inf included), above 88 give e^88
// (finite, so 1 / (1 + e^x) stays a number).
#pragma once

#include <immintrin.h>

#include "kernels/cpu_dispatch.h"

#ifdef FXOPT_AVX512
namespace fxopt {

FXOPT_AVX512 inline __m512 exp_avx512(__m512 x) {
  const __m512 lowest = _mm512_set1_ps(-87.0f);
  __mmask16 vanishing = _mm512_cmp_ps_mask(x, lowest, _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lowest), _mm512_set1_ps(88.0f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  for (float c : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
  return _mm512_maskz_mov_ps(__mmask16(~vanishing), _mm512_scalef_ps(p, n));
}

}  // namespace fxopt
#endif
