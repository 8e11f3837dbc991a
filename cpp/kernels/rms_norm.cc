#include "kernels/rms_norm.h"

#include <immintrin.h>

#include <cmath>

#include "kernels/cpu_dispatch.h"

namespace fxopt {
namespace {

float inverse_rms(float sum_of_squares, int64_t n, float eps) {
  return 1.0f / std::sqrt(sum_of_squares / float(n) + eps);
}

void row_portable(const float* x, int64_t n, const float* w, float eps, float* y) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  float inverse = inverse_rms(sum, n, eps);
  for (int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * inverse);
}

#ifdef FXOPT_AVX512
FXOPT_AVX512 void row_avx512(const float* x, int64_t n, const float* w, float eps, float* y) {
  int64_t vector_end = n - n % 16;
  __m512 sums = _mm512_setzero_ps();
  for (int64_t i = 0; i < vector_end; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
    sums = _mm512_fmadd_ps(v, v, sums);
  }
  float sum = _mm512_reduce_add_ps(sums);
  for (int64_t i = vector_end; i < n; ++i) sum += x[i] * x[i];
  float inverse = inverse_rms(sum, n, eps);
  __m512 scale = _mm512_set1_ps(inverse);
  for (int64_t i = 0; i < vector_end; i += 16)
    _mm512_storeu_ps(
        y + i, _mm512_mul_ps(_mm512_loadu_ps(w + i), _mm512_mul_ps(_mm512_loadu_ps(x + i), scale)));
  for (int64_t i = vector_end; i < n; ++i) y[i] = w[i] * (x[i] * inverse);
}
#endif

}  // namespace

void rms_norm(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y) {
#ifdef FXOPT_AVX512
  if (has_avx512()) {
    for (int64_t r = 0; r < rows; ++r) row_avx512(x + r * n, n, weight, eps, y + r * n);
    return;
  }
#endif
  for (int64_t r = 0; r < rows; ++r) row_portable(x + r * n, n, weight, eps, y + r * n);
}

}  // namespace fxopt
