// int4_weight_mm: a few rows of float32 activations times a weight stored as 4-bit values with a
// float16 scale and minimum per group of columns of each row — a decoding step's weight-only
// int4 Linear, fxopt's own next to int8_weight_mm.
//
//   w[j][i] = q[j][i] * scale[j][g] + min[j][g]          g = i / group, q in [0, 15]
//   y[r][j] = a[r] * sum_g scale[j][g] * (sum_{i in g} q[j][i] * xq[r][i]) + min[j][g] * xsum[r][g]
// Each activation row is rounded to int8 with its own scale (a[r] = max|x[r]| / 127,
// xq = round(x / a[r])), as llama.cpp's q4 x q8 products do: 4-bit by 8-bit products are what
// AVX-512 VNNI multiplies 64 at a time (vpdpbusd), four times the float32 FMAs' rate, and the
// float32 kernel this replaces spent more instructions widening the 4-bit values than int8's
// kernel does, so it ran slower than int8 despite half the bytes (decode_kernels_t1_zen4.md).
// The minimums' term takes xsum, the sums of x itself over each group, so the activations'
// rounding reaches only the scaled products. On a row of 768 the rounding's error is about
// 1/254 of its largest value per element, well inside int4's own (1/30 of a group's range).
//
// Layout (int4_pack_rows writes it): `packed` [n, k / 2] bytes; in each run of 32 columns
// c .. c+31 of a row, byte t (0..15) holds column c+t in its low nibble and c+16+t in its high
// one. The kernel reads 128 columns (one 64-byte line of a row) at a time and lays the int8
// activations out once per call in the matching order, so the nibbles need one mask and one
// shift. `params` [n, 2, k / group] float16 (kernels/float16.h): each row's scales, then its
// minimums; half the bytes of float32 ones, which were a third of what the kernel streamed
// (0.75 -> 0.625 bytes per weight at groups of 32), at a rounding 1/2048 of a value, far below
// the 4-bit step. group is a multiple of 32.
//
// AVX-512 with VNNI chosen at run time (groups of 32 take their four scales per 128 columns in
// one load), else AVX2 (the same products through vpmaddubsw and vpmaddwd, 64 columns a step),
// plain C++ with the same integer products elsewhere; eight output channels per block with
// AVX-512 (four with AVX2, which is compute-bound there), a later block's values and parameters
// prefetched into L2, output channels split over `threads` threads (kernels/row_split.h).
#pragma once

#include <cstdint>

namespace fxopt {

// All arrays contiguous and row-major; `y` is written, never read. k % group == 0,
// group % 32 == 0. The result does not depend on `threads`.
void int4_weight_mm(const float* x, int64_t rows, int64_t k, const uint8_t* packed,
                    const uint16_t* params, int64_t group, int64_t n, float* y, int threads = 1);

// q [n, k] (one value in [0, 15] per byte) into the layout above; k % 32 == 0.
void int4_pack_rows(const uint8_t* q, int64_t n, int64_t k, uint8_t* packed);

}  // namespace fxopt
