// int8_weight_mm: a few rows of float32 activations times a weight stored as int8 rows with one
// float32 scale per row (output channel) — a decoding step's weight-only int8 Linear.
//
//   y[r][j] = scale[j] * sum_i x[r][i] * w[j][i]      x [rows, k], w [n, k], y [rows, n]
//
// Why fxopt has its own: at batch 1 a Linear reads every weight byte once and does two flops per
// byte, so its speed is how fast the weight streams in. ATen's `_weight_int8pack_mm` converts
// and reduces too slowly for that on the AMX Xeon measured (about 6 GB/s of int8 weights with
// bfloat16 activations, against 13 GB/s float32 weights stream at), and is 4-5x slower with
// float32 activations. Here each 16 int8 weights are widened and multiplied into float32
// accumulators in three vector instructions (AVX-512F, or 8 at a time with AVX2 and FMA, chosen
// at run time; plain C++ elsewhere), four weight rows at a time so each activation load serves
// four. The activations stay float32, so the only rounding is the weight's: with no bfloat16
// needed, this is the weight-only kernel of CPUs without native bfloat16 too.
//
// Output channels are split over `threads` threads (kernels/row_split.h; the bindings pass
// torch's thread count); whether it beats torch's kernels at that count is the kernel chooser's
// measurement (fxopt.tuning), never assumed. Accumulation order differs from torch's.
#pragma once

#include <cstdint>

namespace fxopt {

// All arrays contiguous and row-major; `y` is written, never read.
void int8_weight_mm(const float* x, int64_t rows, int64_t k, const int8_t* w, const float* scale,
                    int64_t n, float* y, int threads = 1);

}  // namespace fxopt
