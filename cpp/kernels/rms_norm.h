// rms_norm: root-mean-square normalisation of float32 rows (Llama, Qwen2 and Mistral's RMSNorm):
//
//   y[r][i] = w[i] * (x[r][i] * (1 / sqrt(mean_i(x[r][i]^2) + eps)))
//
// in float32, the products in transformers' order; the sum of squares adds in another order than
// torch's, so results are within a few float32 roundings of the module's, not equal to them. Why
// fxopt has it: a decoding step of a Llama runs two RMSNorms a layer, eight ATen ops each (18 us a
// call at 768 features on a Zen 4 core, 0.4 ms of a 8 ms int4 step); here one pass, a
// microsecond. AVX-512F where the CPU has it, plain C++ elsewhere.
#pragma once

#include <cstdint>

namespace fxopt {

// x and y [rows, n] contiguous, weight [n]; y is written (it may be x).
void rms_norm(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y);

}  // namespace fxopt
