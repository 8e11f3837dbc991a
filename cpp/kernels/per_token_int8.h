// per_token_int8: the two ends of an int8 Linear whose activations get one scale per row
// (token), around an int8 matrix product the caller runs (torch's aten._int_mm, oneDNN's VNNI
// or AMX kernel):
//
//   quantize:    s[r] = max(max_i |x[r][i]| / 127, FLT_MIN),  q[r][i] = round(x[r][i] / s[r])
//   dequantize:  y[r][j] = activation(float(acc[r][j]) * s[r] * w_scale[j] + bias[j]
//                                     + sum_c x[r][c] * w_outlier[c][j])
//
// in float32 whatever the activations' dtype (float32 or bfloat16, read and written as torch
// stores them), with rounding to nearest even, in the order ATen evaluates the same expression
// as separate ops: float32 results are bit for bit those of that ATen chain, bfloat16 ones its
// float32 result rounded once. Why fxopt has them: as ATen ops the chain is seven passes over
// the activations and casts around a bfloat16 graph (about 0.1 ms a Linear at 128 tokens, as
// much as the 384x384 product itself); here it is one pass at each end, in the activations'
// own dtype, so an int8 Linear fits into a lowered graph without casts. The activation that
// reads only the Linear's result (GELU, exact or tanh, ReLU, SiLU) runs on the float32 value
// before it is written, as oneDNN's post-ops do for its bfloat16 Linears: one pass less over
// the result, and in float32 rather than on bfloat16 values (GPT-2's GELU in bfloat16 ATen took
// 0.78 ms a layer at 128 tokens). Its vector forms are within 2.2e-7 of the exact functions,
// relative to max(1, |v|) (erf: a rational fit, per_token_int8.cc; e^x: kernels/avx512_exp.h),
// not bit-equal to torch's.
//
// The last term is over an int8 Linear's outlier channels c (LLM.int8's decomposition, with
// channels fixed by calibration): a few input channels 7-28x larger than the median one would
// leave every other channel of a row a few of its 255 levels, so quantize reads them as zeros
// and dequantize adds their float32 product with the float weight's rows for them.
//
// Rows are split over `threads` threads (kernels/row_split.h); AVX-512F where the CPU has it,
// else AVX2 with FMA (kernels/int8_matmul.h makes the product there), plain C++ elsewhere (same
// results).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace fxopt {

enum class RowDtype { Float32, Bfloat16 };
enum class Activation { None, Relu, Gelu, GeluTanh, Silu };
// The activation by the name ops/activation.h gives it ("none", "relu", "gelu", "gelu_tanh",
// "silu"); throws std::invalid_argument for any other.
Activation activation_named(std::string_view name);

// x [rows, k] contiguous in `dtype`; q [rows, k] and scales [rows] are written. With a
// `max_level` below 127 (in [1, 127], else std::invalid_argument) each row maps to
// [-max_level, max_level] instead: s[r] = max(max_i |x[r][i]| / max_level, FLT_MIN). The same
// kernel quantizes float32 weights (TensorOps::quantize_rows_int8 in the bridge): ATen's chain
// took 0.3 s of a 95M Llama's preparation, in several passes over each weight.
// The channels `skipped` (each in [0, k), else std::invalid_argument) are read as zeros.
void quantize_rows_int8(const void* x, RowDtype dtype, int64_t rows, int64_t k, int8_t* q,
                        float* scales, int threads = 1, int max_level = 127,
                        std::span<const int64_t> skipped = {});

// The float32 term of the channels an int8 product left out: x [rows, k] in `dtype` as
// quantize_rows_int8 read it, its channels `channels` (each in [0, k)) and `weight`
// [channels.size(), n] float32.
struct OutlierChannels {
  const void* x = nullptr;
  RowDtype dtype = RowDtype::Float32;
  int64_t k = 0;
  std::span<const int64_t> channels;
  const float* weight = nullptr;
};

// acc [rows, n] contiguous; bias may be null; y [rows, n] in `dtype` is written. With
// `outliers`, their term joins the sum before the activation.
void dequantize_rows_int32(const int32_t* acc, int64_t rows, int64_t n, const float* row_scales,
                           const float* col_scales, const float* bias, void* y, RowDtype dtype,
                           int threads = 1, Activation activation = Activation::None,
                           const OutlierChannels* outliers = nullptr);

}  // namespace fxopt
