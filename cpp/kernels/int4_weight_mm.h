// int4_weight_mm: a few rows of float32 activations times a weight stored as 4-bit values with a
// float32 scale and minimum per group of columns of each row — a decoding step's weight-only
// int4 Linear, fxopt's own next to int8_weight_mm.
//
//   w[j][i] = q[j][i] * scale[j][g] + min[j][g]          g = i / group, q in [0, 15]
//   y[r][j] = sum_g scale[j][g] * (sum_{i in g} x[r][i] * q[j][i]) + min[j][g] * xsum[r][g]
// with xsum[r][g] the sum of x[r] over group g, computed once per call: the inner loop then
// multiplies the raw 4-bit values and scales one partial sum per group.
//
// Layout (int4_pack_rows writes it): `packed` [n, k / 2] bytes; in each run of 32 columns
// c .. c+31 of a row, byte t (0..15) holds column c+t in its low nibble and c+16+t in its high
// one, so 16 bytes widen to two vectors of 16 lanes with one mask and one shift. `params`
// [n, 2, k / group] float32: each row's scales, then its minimums. group is a multiple of 32.
//
// Why its own: ATen's `_weight_int4pack_mm_for_cpu` takes bfloat16 activations (rounded, and
// cast on every call); here they stay float32, so the only rounding is the weight's, and the
// kernel chooser times both per Linear. Like the int8 kernel: AVX-512F chosen at run time, plain
// C++ elsewhere, four output channels per block with the next block prefetched, output channels
// split over `threads` threads (kernels/row_split.h). Measured at one token on the AMX Xeon
// (bench/results/decode_kernels_t1.md) it is slower than int8_weight_mm: the Llama's weights sit
// in its 480 MB last-level cache, where instructions bound both kernels, and widening 4 bits
// costs as many per weight as 8 (plus a scale per group). Half the bytes can only pay where
// weights stream from memory, which that machine did not show.
#pragma once

#include <cstdint>

namespace fxopt {

// All arrays contiguous and row-major; `y` is written, never read. k % group == 0,
// group % 32 == 0.
void int4_weight_mm(const float* x, int64_t rows, int64_t k, const uint8_t* packed,
                    const float* params, int64_t group, int64_t n, float* y, int threads = 1);

// q [n, k] (one value in [0, 15] per byte) into the layout above; k % 32 == 0.
void int4_pack_rows(const uint8_t* q, int64_t n, int64_t k, uint8_t* packed);

}  // namespace fxopt
