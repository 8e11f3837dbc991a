// int8_matmul: an exact int8 x int8 -> int32 matrix product for CPUs without int8 dot products
// (AVX2 only: AMD Zen 3 and older, Intel before Ice Lake), the product of fxopt's per-token
// int8 Linear (kernels/per_token_int8.h) where aten._int_mm has no fast kernel.
//
// Why fxopt has it: on such CPUs torch's only int8 GEMMs either have no vector kernel
// (aten._int_mm: 30-50x slower than float32 on a Zen 3) or sum pairs of u8 x s8 products in
// saturating 16-bit lanes (fbgemm's and oneDNN's vpmaddubsw), which is exact only for 7-bit
// activations or 63-level weights: on the real MiniLM that error alone keeps most Linears out
// of int8 at cosine 0.999. Here both operands are widened to 16 bits and multiplied with
// vpmaddwd, whose pair sums are 32-bit: every product is exact, at twice the multiply-adds per
// instruction of a float32 FMA.
//
// The weight [k, n] is packed once (pack_int8_matmul_weight) into blocks of 16 columns, each a
// run of k/2 rows of 16 (column, pair of k) 16-bit values: one 32-byte load per pair of k and
// 8 columns, as the multiply consumes them. Rows are split over `threads` threads by blocks of
// columns (kernels/row_split.h); plain C++ where the CPU lacks AVX2 (same results).
#pragma once

#include <cstdint>

namespace fxopt {

// Whether this CPU runs the AVX2 product (under a oneDNN ISA cap, kernels/cpu_dispatch.h);
// elsewhere the plain loops run, exact but slow.
bool int8_matmul_available();

// int16 elements of the packed form of a [k, n] weight.
int64_t int8_matmul_packed_size(int64_t k, int64_t n);

// weight [k, n] int8 contiguous -> packed (int8_matmul_packed_size(k, n) elements).
void pack_int8_matmul_weight(const int8_t* weight, int64_t k, int64_t n, int16_t* packed);

// y [m, n] int32 = a [m, k] int8 (contiguous) x the packed weight.
void int8_matmul(const int8_t* a, const int16_t* packed, int64_t m, int64_t k, int64_t n,
                 int32_t* y, int threads = 1);

}  // namespace fxopt
