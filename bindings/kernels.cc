#include "bindings/kernels.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/decode_attention.h"
#include "kernels/depthwise_conv.h"
#include "kernels/int4_weight_mm.h"
#include "kernels/int8_matmul.h"
#include "kernels/int8_pointwise_conv.h"
#include "kernels/int8_weight_mm.h"
#include "kernels/per_token_int8.h"
#include "kernels/pointwise_conv.h"
#include "kernels/prefill_attention.h"
#include "kernels/quantize_u8.h"
#include "kernels/rms_norm.h"
#include "kernels/row_split.h"

namespace nb = nanobind;

namespace fxopt::bindings {
namespace {

template <class T>
T* at(uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

// sizes: batch, heads, kv_heads, rows, keys, d; strides: batch, head and row of q, k, v, mask.
PrefillAttention prefill_shape(const std::vector<int64_t>& sizes,
                               const std::vector<int64_t>& strides, float scale, bool causal) {
  if (sizes.size() != 6 || strides.size() != 12)
    throw std::invalid_argument("prefill_attention: 6 sizes and 12 strides");
  PrefillAttention s;
  s.batch = sizes[0], s.heads = sizes[1], s.kv_heads = sizes[2], s.rows = sizes[3];
  s.keys = sizes[4], s.d = sizes[5];
  AttentionStrides* parts[] = {&s.q, &s.k, &s.v, &s.mask};
  for (size_t i = 0; i < 4; ++i)
    *parts[i] = {strides[3 * i], strides[3 * i + 1], strides[3 * i + 2]};
  s.scale = scale;
  s.causal = causal;
  return s;
}

}  // namespace

// Addresses, not tensors: the engine has no torch headers, and converting four tensors through
// DLPack would cost more than a decoding step's kernel (fxopt/runtime/int8_weight_linear.py and
// int4_weight_linear.py check the tensors and pass their data_ptr()). `threads`: torch's thread
// count.
void bind_kernels(nb::module_& m) {
  m.def("use_openmp_team", &use_openmp_team, nb::arg("library"),
        "Split kernels' work on the team of the OpenMP runtime loaded from `library` (torch's); "
        "False, and the own thread pool kept, where it is not loaded. \"\" goes back to the pool.");
  m.def(
      "int8_weight_mm",
      [](uintptr_t x, int64_t rows, int64_t k, uintptr_t w, uintptr_t scale, int64_t n, uintptr_t y,
         int threads) {
        int8_weight_mm(at<const float>(x), rows, k, at<const int8_t>(w), at<const float>(scale), n,
                       at<float>(y), threads);
      },
      nb::arg("x"), nb::arg("rows"), nb::arg("k"), nb::arg("w"), nb::arg("scale"), nb::arg("n"),
      nb::arg("y"), nb::arg("threads"), nb::call_guard<nb::gil_scoped_release>(),
      "y[rows, n] = x[rows, k] (float32) times int8 rows w[n, k] scaled by scale[n] "
      "(kernels/int8_weight_mm.h); arguments are data addresses of contiguous arrays.");
  m.def(
      "int4_weight_mm",
      [](uintptr_t x, int64_t rows, int64_t k, uintptr_t packed, uintptr_t params, int64_t group,
         int64_t n, uintptr_t y, int threads) {
        int4_weight_mm(at<const float>(x), rows, k, at<const uint8_t>(packed),
                       at<const uint16_t>(params), group, n, at<float>(y), threads);
      },
      nb::arg("x"), nb::arg("rows"), nb::arg("k"), nb::arg("packed"), nb::arg("params"),
      nb::arg("group"), nb::arg("n"), nb::arg("y"), nb::arg("threads"),
      nb::call_guard<nb::gil_scoped_release>(),
      "y[rows, n] = x[rows, k] (float32, rounded to int8 per row) times 4-bit rows "
      "packed[n, k / 2] with a scale and minimum per group of columns, params[n, 2, k / group] "
      "float16 (kernels/int4_weight_mm.h); arguments are data addresses of contiguous arrays.");
  m.def(
      "int4_pack_rows",
      [](uintptr_t q, int64_t n, int64_t k, uintptr_t packed) {
        int4_pack_rows(at<const uint8_t>(q), n, k, at<uint8_t>(packed));
      },
      nb::arg("q"), nb::arg("n"), nb::arg("k"), nb::arg("packed"),
      nb::call_guard<nb::gil_scoped_release>(),
      "packed[n, k / 2] = q[n, k] (uint8 values in [0, 15]) in int4_weight_mm's layout.");
  m.def(
      "decode_attention",
      [](uintptr_t q, int64_t heads, int64_t d, uintptr_t k, uintptr_t v, int64_t kv_heads,
         int64_t length, int64_t head_stride, float scale, uintptr_t out, int threads) {
        decode_attention(at<const float>(q), heads, d, at<const float>(k), at<const float>(v),
                         kv_heads, length, head_stride, scale, at<float>(out), threads);
      },
      nb::arg("q"), nb::arg("heads"), nb::arg("d"), nb::arg("k"), nb::arg("v"), nb::arg("kv_heads"),
      nb::arg("length"), nb::arg("head_stride"), nb::arg("scale"), nb::arg("out"),
      nb::arg("threads"), nb::call_guard<nb::gil_scoped_release>(),
      "out[heads, d] = softmax(scale * q . k) v for one float32 query row per head against "
      "kv_heads blocks of length rows of keys and values, head_stride floats apart "
      "(kernels/decode_attention.h); arguments are data addresses.");
  m.def(
      "quantize_rows_int8",
      [](uintptr_t x, bool bfloat16, int64_t rows, int64_t k, uintptr_t q, uintptr_t scales,
         int threads, int max_level, const std::vector<int64_t>& skipped) {
        quantize_rows_int8(at<const void>(x), bfloat16 ? RowDtype::Bfloat16 : RowDtype::Float32,
                           rows, k, at<int8_t>(q), at<float>(scales), threads, max_level, skipped);
      },
      nb::arg("x"), nb::arg("bfloat16"), nb::arg("rows"), nb::arg("k"), nb::arg("q"),
      nb::arg("scales"), nb::arg("threads"), nb::arg("max_level") = 127,
      nb::arg("skipped") = std::vector<int64_t>(), nb::call_guard<nb::gil_scoped_release>(),
      "q[rows, k] (int8) and scales[rows] (float32) of x[rows, k] (float32, or bfloat16 if "
      "`bfloat16`), one symmetric scale per row mapping its largest magnitude to max_level, the "
      "channels `skipped` read as zeros (kernels/per_token_int8.h); arguments are data addresses "
      "of contiguous arrays.");
  m.def("int8_matmul_available", &int8_matmul_available,
        "Whether this CPU runs int8_matmul's AVX2 product (under a oneDNN ISA cap).");
  m.def("int8_matmul_packed_size", &int8_matmul_packed_size, nb::arg("k"), nb::arg("n"),
        "int16 elements of a [k, n] int8 weight packed for int8_matmul.");
  m.def(
      "pack_int8_matmul_weight",
      [](uintptr_t weight, int64_t k, int64_t n, uintptr_t packed) {
        pack_int8_matmul_weight(at<const int8_t>(weight), k, n, at<int16_t>(packed));
      },
      nb::arg("weight"), nb::arg("k"), nb::arg("n"), nb::arg("packed"),
      nb::call_guard<nb::gil_scoped_release>(),
      "packed (int16, int8_matmul_packed_size(k, n) elements) of weight[k, n] (int8) "
      "(kernels/int8_matmul.h); arguments are data addresses of contiguous arrays.");
  m.def(
      "int8_matmul",
      [](uintptr_t a, uintptr_t packed, int64_t m, int64_t k, int64_t n, uintptr_t y, int threads) {
        int8_matmul(at<const int8_t>(a), at<const int16_t>(packed), m, k, n, at<int32_t>(y),
                    threads);
      },
      nb::arg("a"), nb::arg("packed"), nb::arg("m"), nb::arg("k"), nb::arg("n"), nb::arg("y"),
      nb::arg("threads"), nb::call_guard<nb::gil_scoped_release>(),
      "y[m, n] (int32) = a[m, k] (int8) x the packed weight, exactly, with AVX2 16-bit pair "
      "products (kernels/int8_matmul.h); arguments are data addresses of contiguous arrays.");
  m.def(
      "rms_norm",
      [](uintptr_t x, int64_t rows, int64_t n, uintptr_t weight, float eps, uintptr_t y) {
        rms_norm(at<const float>(x), rows, n, at<const float>(weight), eps, at<float>(y));
      },
      nb::arg("x"), nb::arg("rows"), nb::arg("n"), nb::arg("weight"), nb::arg("eps"), nb::arg("y"),
      nb::call_guard<nb::gil_scoped_release>(),
      "y[rows, n] = weight * (x / sqrt(mean(x^2) + eps)) per row, float32 (kernels/rms_norm.h); "
      "arguments are data addresses of contiguous arrays.");
  m.def("depthwise_conv_vectorized", &depthwise_conv_vectorized,
        "Whether depthwise_conv runs its vector paths here (AVX2 with FMA, under a oneDNN ISA "
        "cap).");
  m.def("depthwise_packed_size", &depthwise_packed_size, nb::arg("channels"), nb::arg("taps"),
        "Floats depthwise_pack writes (kernels/depthwise_conv.h).");
  m.def(
      "depthwise_pack",
      [](uintptr_t weight, uintptr_t bias, int64_t channels, int64_t taps, uintptr_t packed) {
        depthwise_pack(at<const float>(weight), bias ? at<const float>(bias) : nullptr, channels,
                       taps, at<float>(packed));
      },
      nb::arg("weight"), nb::arg("bias"), nb::arg("channels"), nb::arg("taps"), nb::arg("packed"),
      nb::call_guard<nb::gil_scoped_release>(),
      "The packed filters and bias depthwise_conv reads, from float32 weight [channels, taps] "
      "and bias [channels] (0: none); arguments are data addresses of contiguous arrays.");
  m.def(
      "depthwise_conv",
      [](const std::vector<int64_t>& sizes, float lower, float upper, bool bfloat16, uintptr_t x,
         uintptr_t packed, uintptr_t y, int threads) {
        if (sizes.size() != 12) throw std::invalid_argument("depthwise_conv: 12 sizes");
        DepthwiseConv s;
        s.batch = sizes[0], s.channels = sizes[1], s.height = sizes[2], s.width = sizes[3];
        s.kernel_h = sizes[4], s.kernel_w = sizes[5], s.stride_h = sizes[6], s.stride_w = sizes[7];
        s.pad_top = sizes[8], s.pad_left = sizes[9], s.out_h = sizes[10], s.out_w = sizes[11];
        s.lower = lower, s.upper = upper;
        if (bfloat16)
          depthwise_conv_bf16(s, at<const uint16_t>(x), at<const float>(packed), at<uint16_t>(y),
                              threads);
        else
          depthwise_conv_f32(s, at<const float>(x), at<const float>(packed), at<float>(y), threads);
      },
      nb::arg("sizes"), nb::arg("lower"), nb::arg("upper"), nb::arg("bfloat16"), nb::arg("x"),
      nb::arg("packed"), nb::arg("y"), nb::arg("threads"), nb::call_guard<nb::gil_scoped_release>(),
      "y [batch, out_h, out_w, channels] = clamp(depthwise conv(x [batch, height, width, "
      "channels]) + bias, lower, upper), float32 or bfloat16 (kernels/depthwise_conv.h); sizes: "
      "batch, channels, height, width, kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_left, "
      "out_h, out_w; arguments are data addresses of contiguous arrays.");
  m.def("pointwise_conv_vectorized", &pointwise_conv_vectorized, nb::arg("bfloat16"),
        "Whether pointwise_conv runs a vector path here for the dtype (bfloat16: AVX512-BF16; "
        "float32: AVX2 with FMA), under a oneDNN ISA cap.");
  m.def("pointwise_packed_bytes", &pointwise_packed_bytes, nb::arg("out_channels"),
        nb::arg("in_channels"), nb::arg("bfloat16"),
        "Bytes pointwise_pack writes (kernels/pointwise_conv.h).");
  m.def(
      "pointwise_pack",
      [](uintptr_t weight, uintptr_t bias, int64_t out_channels, int64_t in_channels, bool bfloat16,
         uintptr_t packed) {
        const float* shift = bias ? at<const float>(bias) : nullptr;
        if (bfloat16)
          pointwise_pack_bf16(at<const uint16_t>(weight), shift, out_channels, in_channels,
                              at<void>(packed));
        else
          pointwise_pack_f32(at<const float>(weight), shift, out_channels, in_channels,
                             at<void>(packed));
      },
      nb::arg("weight"), nb::arg("bias"), nb::arg("out_channels"), nb::arg("in_channels"),
      nb::arg("bfloat16"), nb::arg("packed"), nb::call_guard<nb::gil_scoped_release>(),
      "The packed weight and bias pointwise_conv reads, from weight [out_channels, in_channels] "
      "(bfloat16 if `bfloat16`, else float32) and float32 bias [out_channels] (0: none); "
      "arguments are data addresses of contiguous arrays.");
  m.def(
      "pointwise_conv",
      [](const std::vector<int64_t>& sizes, float lower, float upper, bool bfloat16, uintptr_t x,
         uintptr_t packed, uintptr_t residual, uintptr_t y, int threads) {
        if (sizes.size() != 3) throw std::invalid_argument("pointwise_conv: 3 sizes");
        PointwiseConv s;
        s.pixels = sizes[0], s.in_channels = sizes[1], s.out_channels = sizes[2];
        s.lower = lower, s.upper = upper;
        if (bfloat16)
          pointwise_conv_bf16(s, at<const uint16_t>(x), at<const void>(packed),
                              residual ? at<const uint16_t>(residual) : nullptr, at<uint16_t>(y),
                              threads);
        else
          pointwise_conv_f32(s, at<const float>(x), at<const void>(packed),
                             residual ? at<const float>(residual) : nullptr, at<float>(y), threads);
      },
      nb::arg("sizes"), nb::arg("lower"), nb::arg("upper"), nb::arg("bfloat16"), nb::arg("x"),
      nb::arg("packed"), nb::arg("residual"), nb::arg("y"), nb::arg("threads"),
      nb::call_guard<nb::gil_scoped_release>(),
      "y [pixels, out] = clamp(x [pixels, in] w^T + bias (+ residual [pixels, out]), lower, "
      "upper), float32 or bfloat16 (kernels/pointwise_conv.h); sizes: pixels, in_channels, "
      "out_channels; arguments are data addresses of contiguous arrays (residual 0: none).");
  m.def("int8_pointwise_conv_vectorized", &int8_pointwise_conv_vectorized,
        "Whether int8_pointwise_conv runs its VNNI path here, under a oneDNN ISA cap.");
  m.def("int8_pointwise_packed_bytes", &int8_pointwise_packed_bytes, nb::arg("out_channels"),
        nb::arg("in_channels"),
        "Bytes int8_pointwise_pack writes (kernels/int8_pointwise_conv.h).");
  m.def(
      "int8_pointwise_pack",
      [](uintptr_t weight, uintptr_t w_scales, uintptr_t bias, int64_t out_channels,
         int64_t in_channels, float x_scale, int32_t zero_point, uintptr_t packed) {
        int8_pointwise_pack(at<const int8_t>(weight), at<const float>(w_scales),
                            bias ? at<const float>(bias) : nullptr, out_channels, in_channels,
                            x_scale, zero_point, at<void>(packed));
      },
      nb::arg("weight"), nb::arg("w_scales"), nb::arg("bias"), nb::arg("out_channels"),
      nb::arg("in_channels"), nb::arg("x_scale"), nb::arg("zero_point"), nb::arg("packed"),
      nb::call_guard<nb::gil_scoped_release>(),
      "The packing int8_pointwise_conv reads, from the int8 weight [out_channels, in_channels], "
      "its float32 scales [out_channels], float32 bias [out_channels] (0: none) and the input's "
      "scale and zero point; arguments are data addresses of contiguous arrays.");
  m.def(
      "int8_pointwise_conv",
      [](const std::vector<int64_t>& sizes, float lower, float upper, bool bfloat16, uintptr_t x,
         float x_scale, int32_t zero_point, uintptr_t packed, uintptr_t residual, uintptr_t y,
         int threads) {
        if (sizes.size() != 3) throw std::invalid_argument("int8_pointwise_conv: 3 sizes");
        PointwiseConv s;
        s.pixels = sizes[0], s.in_channels = sizes[1], s.out_channels = sizes[2];
        s.lower = lower, s.upper = upper;
        int8_pointwise_conv(s, at<const void>(x), bfloat16 ? RowDtype::Bfloat16 : RowDtype::Float32,
                            x_scale, zero_point, at<const void>(packed),
                            residual ? at<const void>(residual) : nullptr, at<void>(y), threads);
      },
      nb::arg("sizes"), nb::arg("lower"), nb::arg("upper"), nb::arg("bfloat16"), nb::arg("x"),
      nb::arg("x_scale"), nb::arg("zero_point"), nb::arg("packed"), nb::arg("residual"),
      nb::arg("y"), nb::arg("threads"), nb::call_guard<nb::gil_scoped_release>(),
      "y [pixels, out] = clamp((quantize_u8(x) - zero_point) x_scale w^T scales + bias (+ "
      "residual), lower, upper) from x [pixels, in], float32 or bfloat16 "
      "(kernels/int8_pointwise_conv.h); sizes: pixels, in_channels, out_channels; arguments "
      "are data addresses of contiguous arrays (residual 0: none).");
  m.def(
      "quantize_u8",
      [](uintptr_t x, bool bfloat16, int64_t count, float inverse_scale, int32_t zero_point,
         uintptr_t q, int threads) {
        quantize_u8(at<const void>(x), bfloat16 ? RowDtype::Bfloat16 : RowDtype::Float32, count,
                    inverse_scale, zero_point, at<uint8_t>(q), threads);
      },
      nb::arg("x"), nb::arg("bfloat16"), nb::arg("count"), nb::arg("inverse_scale"),
      nb::arg("zero_point"), nb::arg("q"), nb::arg("threads"),
      nb::call_guard<nb::gil_scoped_release>(),
      "q[count] (uint8) = clamp(round(x * inverse_scale) + zero_point, 0, 255) of x[count] "
      "(float32, or bfloat16 if `bfloat16`; kernels/quantize_u8.h); arguments are data addresses "
      "of contiguous arrays.");
  m.def(
      "dequantize_rows_int32",
      [](uintptr_t acc, int64_t rows, int64_t n, uintptr_t row_scales, uintptr_t col_scales,
         uintptr_t bias, uintptr_t y, bool bfloat16, int threads, const std::string& activation,
         const std::vector<int64_t>& outliers, uintptr_t x, int64_t k, uintptr_t outlier_weight) {
        Activation applied = activation_named(activation);
        RowDtype dtype = bfloat16 ? RowDtype::Bfloat16 : RowDtype::Float32;
        OutlierChannels channels{at<const void>(x), dtype, k, outliers,
                                 at<const float>(outlier_weight)};
        nb::gil_scoped_release unlocked;
        dequantize_rows_int32(at<const int32_t>(acc), rows, n, at<const float>(row_scales),
                              at<const float>(col_scales), bias ? at<const float>(bias) : nullptr,
                              at<void>(y), dtype, threads, applied,
                              outliers.empty() ? nullptr : &channels);
      },
      nb::arg("acc"), nb::arg("rows"), nb::arg("n"), nb::arg("row_scales"), nb::arg("col_scales"),
      nb::arg("bias"), nb::arg("y"), nb::arg("bfloat16"), nb::arg("threads"),
      nb::arg("activation") = "none", nb::arg("outliers") = std::vector<int64_t>(),
      nb::arg("x") = 0, nb::arg("k") = 0, nb::arg("outlier_weight") = 0,
      "y[rows, n] = activation(acc[rows, n] (int32) * row_scales[rows] * col_scales[n] + bias[n] "
      "+ x[rows, k][:, outliers] @ outlier_weight[len(outliers), n]) (float32; bias address 0: "
      "none; activation none, relu, gelu, gelu_tanh or silu; x in y's dtype), written "
      "as float32, or bfloat16 if `bfloat16` (kernels/per_token_int8.h); arguments are data "
      "addresses of contiguous arrays.");
  m.def("prefill_attention_bf16_available", &prefill_attention_bf16_available,
        "Whether this CPU runs prefill_attention_bf16 (AVX512-BF16, under a oneDNN ISA cap).");
  m.def(
      "prefill_attention_bf16",
      [](const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, uintptr_t q,
         uintptr_t k, uintptr_t v, uintptr_t mask, float scale, bool causal, uintptr_t out,
         int threads) {
        PrefillAttention shape = prefill_shape(sizes, strides, scale, causal);
        prefill_attention_bf16(shape, at<const uint16_t>(q), at<const uint16_t>(k),
                               at<const uint16_t>(v), mask ? at<const float>(mask) : nullptr,
                               at<uint16_t>(out), threads);
      },
      nb::arg("sizes"), nb::arg("strides"), nb::arg("q"), nb::arg("k"), nb::arg("v"),
      nb::arg("mask"), nb::arg("scale"), nb::arg("causal"), nb::arg("out"), nb::arg("threads"),
      nb::call_guard<nb::gil_scoped_release>(),
      "out[batch, rows, heads, d] (bfloat16) = softmax(scale * q k^T + mask) v for bfloat16 q "
      "[batch, heads, rows, d] and k, v [batch, kv_heads, keys, d] (kernels/prefill_attention.h); "
      "sizes: batch, heads, kv_heads, rows, keys, d; strides (elements): batch, head and row of "
      "q, k, v and the float32 mask (address 0: none); arguments are data addresses.");
  m.def("prefill_attention_f32_available", &prefill_attention_f32_available,
        "Whether this CPU runs prefill_attention_f32 (AVX2 with FMA, under a oneDNN ISA cap).");
  m.def(
      "prefill_attention_f32",
      [](const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, uintptr_t q,
         uintptr_t k, uintptr_t v, uintptr_t mask, float scale, bool causal, uintptr_t out,
         int threads) {
        PrefillAttention shape = prefill_shape(sizes, strides, scale, causal);
        prefill_attention_f32(shape, at<const float>(q), at<const float>(k), at<const float>(v),
                              mask ? at<const float>(mask) : nullptr, at<float>(out), threads);
      },
      nb::arg("sizes"), nb::arg("strides"), nb::arg("q"), nb::arg("k"), nb::arg("v"),
      nb::arg("mask"), nb::arg("scale"), nb::arg("causal"), nb::arg("out"), nb::arg("threads"),
      nb::call_guard<nb::gil_scoped_release>(),
      "prefill_attention_bf16's computation in float32: out[batch, rows, heads, d] for float32 "
      "q, k, v (kernels/prefill_attention.h); the same sizes, strides and addresses.");
}

}  // namespace fxopt::bindings
