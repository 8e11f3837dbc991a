#include "kernels/per_token_int8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/bfloat16.h"

namespace fxopt {
namespace {

// rows x k values of rows with different magnitudes; row 1 is all zeros.
std::vector<float> activations(int64_t rows, int64_t k) {
  std::vector<float> x(size_t(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i)
      x[r * k + i] =
          r == 1 ? 0.0f : float(std::sin(0.7 * double(r * k + i)) * std::pow(3.0, r % 4));
  return x;
}

// The definition, in float32 as ATen's ops compute it.
void expect_quantized_as_defined(const std::vector<float>& x, int64_t rows, int64_t k,
                                 const std::vector<int8_t>& q, const std::vector<float>& scales,
                                 float max_level = 127.0f) {
  for (int64_t r = 0; r < rows; ++r) {
    float peak = 0;
    for (int64_t i = 0; i < k; ++i) peak = std::max(peak, std::abs(x[r * k + i]));
    float s = std::max(peak / max_level, std::numeric_limits<float>::min());
    ASSERT_EQ(scales[r], s) << "row " << r;
    for (int64_t i = 0; i < k; ++i)
      ASSERT_EQ(q[r * k + i], int8_t(std::nearbyint(x[r * k + i] / s))) << r << ", " << i;
  }
}

TEST(PerTokenInt8, QuantizesFloat32AndBfloat16RowsAsDefined) {
  for (int64_t k : {5, 16, 37, 384}) {
    SCOPED_TRACE(k);
    const int64_t rows = 6;
    std::vector<float> x = activations(rows, k);
    std::vector<int8_t> q(x.size());
    std::vector<float> scales(rows);
    quantize_rows_int8(x.data(), RowDtype::Float32, rows, k, q.data(), scales.data());
    expect_quantized_as_defined(x, rows, k, q, scales);
    EXPECT_EQ(scales[1], std::numeric_limits<float>::min());  // an all-zero row
    // bfloat16 activations: their float32 values, quantized the same way.
    std::vector<uint16_t> halves(x.size());
    for (size_t i = 0; i < x.size(); ++i) halves[i] = float_to_bfloat16(x[i]);
    for (size_t i = 0; i < x.size(); ++i) x[i] = bfloat16_to_float(halves[i]);
    quantize_rows_int8(halves.data(), RowDtype::Bfloat16, rows, k, q.data(), scales.data());
    expect_quantized_as_defined(x, rows, k, q, scales);
  }
}

// Weights quantized for a kernel that needs 7-bit values (fbgemm's reduce_range) map each row's
// largest magnitude to 63; a level outside [1, 127] is refused.
TEST(PerTokenInt8, QuantizesToASmallerLevel) {
  const int64_t rows = 6, k = 37;
  std::vector<float> x = activations(rows, k);
  std::vector<int8_t> q(x.size());
  std::vector<float> scales(rows);
  quantize_rows_int8(x.data(), RowDtype::Float32, rows, k, q.data(), scales.data(), 2, 63);
  expect_quantized_as_defined(x, rows, k, q, scales, 63.0f);
  EXPECT_EQ(*std::max_element(q.begin(), q.end()), 63);
  for (int level : {0, 128})
    EXPECT_THROW(
        quantize_rows_int8(x.data(), RowDtype::Float32, rows, k, q.data(), scales.data(), 1, level),
        std::invalid_argument);
}

// A row whose largest magnitude is 127 has scale 1: halves round to the even neighbour.
TEST(PerTokenInt8, TiesRoundToEven) {
  std::vector<float> x = {127.0f, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.5f, -127.0f};
  std::vector<int8_t> q(x.size());
  float scale = 0;
  quantize_rows_int8(x.data(), RowDtype::Float32, 1, int64_t(x.size()), q.data(), &scale);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(q, (std::vector<int8_t>{127, 2, 4, -2, 0, 0, 2, -127}));
}

TEST(PerTokenInt8, DequantizesInFloat32AndRoundsOnceToBfloat16) {
  const int64_t rows = 3, n = 21;  // a 16-wide block and a tail
  std::vector<int32_t> acc(size_t(rows * n));
  std::vector<float> row_scales = {0.5f, 0.003f, 2.0f}, col_scales(n), bias(n);
  for (int64_t i = 0; i < rows * n; ++i) acc[i] = int32_t((i * 7919) % 40001) - 20000;
  for (int64_t j = 0; j < n; ++j) {
    col_scales[j] = 0.01f * float(j + 1);
    bias[j] = float(j) - 10.0f;
  }
  for (bool with_bias : {true, false}) {
    std::vector<float> y(acc.size());
    std::vector<uint16_t> y16(acc.size());
    const float* b = with_bias ? bias.data() : nullptr;
    dequantize_rows_int32(acc.data(), rows, n, row_scales.data(), col_scales.data(), b, y.data(),
                          RowDtype::Float32);
    dequantize_rows_int32(acc.data(), rows, n, row_scales.data(), col_scales.data(), b, y16.data(),
                          RowDtype::Bfloat16);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) {
        float product = float(acc[r * n + j]) * row_scales[r];
        product = product * col_scales[j];
        float expected = with_bias ? product + bias[j] : product;
        ASSERT_EQ(y[r * n + j], expected) << r << ", " << j;
        ASSERT_EQ(y16[r * n + j], float_to_bfloat16(expected)) << r << ", " << j;
      }
  }
}

// Outlier channels: quantized as zeros (the row's scale fits the others), their float32 product
// with the outlier weight joins the sum after the bias and before the activation, on the
// vector columns and the tail alike; a channel outside the row is refused.
TEST(PerTokenInt8, LeavesOutlierChannelsToTheirFloatProduct) {
  const int64_t rows = 2, k = 20, n = 19;
  std::vector<float> x(size_t(rows * k));
  for (int64_t i = 0; i < rows * k; ++i) x[i] = float(i % 9) - 4.0f;
  x[3] = 1000.0f;
  x[k + 17] = -500.0f;
  const std::vector<int64_t> channels = {3, 17};
  std::vector<int8_t> q(x.size());
  std::vector<float> row_scales(rows);
  quantize_rows_int8(x.data(), RowDtype::Float32, rows, k, q.data(), row_scales.data(), 1, 127,
                     channels);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(row_scales[r], 4.0f / 127.0f) << r;  // the largest other magnitude
    EXPECT_EQ(q[r * k + 3], 0);
    EXPECT_EQ(q[r * k + 17], 0);
  }
  std::vector<int32_t> acc(size_t(rows * n));
  std::vector<float> col_scales(n, 0.5f), bias(n), weight(channels.size() * n);
  for (int64_t i = 0; i < rows * n; ++i) acc[i] = int32_t(i % 7) - 3;
  for (int64_t j = 0; j < n; ++j) bias[j] = 0.125f * float(j);
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = 0.001f * float(int(i % 11) - 5);
  OutlierChannels outliers{x.data(), RowDtype::Float32, k, channels, weight.data()};
  std::vector<float> y(acc.size());
  dequantize_rows_int32(acc.data(), rows, n, row_scales.data(), col_scales.data(), bias.data(),
                        y.data(), RowDtype::Float32, 1, Activation::Relu, &outliers);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      float v = float(acc[r * n + j]) * row_scales[r] * col_scales[j] + bias[j];
      v = std::fma(x[r * k + 17], weight[n + j], std::fma(x[r * k + 3], weight[j], v));
      ASSERT_EQ(y[r * n + j], v < 0.0f ? 0.0f : v) << r << ", " << j;
    }
  const std::vector<int64_t> outside = {20};
  EXPECT_THROW(quantize_rows_int8(x.data(), RowDtype::Float32, rows, k, q.data(), row_scales.data(),
                                  1, 127, outside),
               std::invalid_argument);
}

// bfloat16 keeps 8 significant bits: 1 + 2^-8 lies halfway and rounds to the even 1.0, 1 + 3 *
// 2^-8 to 1 + 2^-6; NaN stays NaN.
TEST(PerTokenInt8, Bfloat16RoundingIsToNearestEven) {
  EXPECT_EQ(float_to_bfloat16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(std::nanf("")))));
  // The kernel's vector path rounds the same way (16 equal values fill one vector).
  std::vector<int32_t> acc(16, 1);
  std::vector<float> ones(16, 1.0f), row = {1.0f + 0x1p-8f};
  std::vector<uint16_t> y(16);
  dequantize_rows_int32(acc.data(), 1, 16, row.data(), ones.data(), nullptr, y.data(),
                        RowDtype::Bfloat16);
  EXPECT_EQ(y, std::vector<uint16_t>(16, 0x3f80));
}

// The activations the kernel applies, against the exact functions on every 1/64 of [-12, 12]:
// within 2.2e-7 of each value's scale (the vector forms approximate erf and e^x; GELU's worst,
// 2.1e-7 of v, is near v = 4.5, where ATen's own vector GELU on an AVX-512 CPU is 3.4e-7 of v
// off), on both sides of zero and in the tails, where GELU is 0 and v exactly.
TEST(PerTokenInt8, ActivationsMatchTheirDefinitions) {
  const int64_t n = 24 * 64 + 1;  // 16-wide blocks and a tail
  std::vector<int32_t> acc(n);
  for (int64_t j = 0; j < n; ++j) acc[j] = int32_t(j) - 12 * 64;
  std::vector<float> row = {1.0f / 64}, cols(n, 1.0f), y(n);
  auto exact = [](float v, Activation a) -> double {
    double x = v;
    switch (a) {
      case Activation::Relu:
        return std::max(x, 0.0);
      case Activation::Gelu:
        return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
      case Activation::GeluTanh:
        return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      case Activation::Silu:
        return x / (1 + std::exp(-x));
      default:
        return x;
    }
  };
  for (Activation a :
       {Activation::Relu, Activation::Gelu, Activation::GeluTanh, Activation::Silu}) {
    SCOPED_TRACE(int(a));
    dequantize_rows_int32(acc.data(), 1, n, row.data(), cols.data(), nullptr, y.data(),
                          RowDtype::Float32, 1, a);
    for (int64_t j = 0; j < n; ++j) {
      float v = float(acc[j]) / 64;
      EXPECT_NEAR(y[j], exact(v, a), 2.2e-7 * std::max(1.0f, std::abs(v))) << v;
    }
    if (a == Activation::Gelu) {
      EXPECT_EQ(y.front(), 0.0f);
      EXPECT_EQ(y.back(), 12.0f);
    }
  }
}

TEST(PerTokenInt8, RowsSplitOverThreadsGiveTheSameBits) {
  const int64_t rows = 300, k = 1000, n = 1000;  // enough bytes to split
  std::vector<float> x = activations(rows, k);
  std::vector<int8_t> q1(x.size()), q2(x.size());
  std::vector<float> s1(rows), s2(rows);
  quantize_rows_int8(x.data(), RowDtype::Float32, rows, k, q1.data(), s1.data(), 1);
  quantize_rows_int8(x.data(), RowDtype::Float32, rows, k, q2.data(), s2.data(), 2);
  EXPECT_EQ(q1, q2);
  EXPECT_EQ(s1, s2);
  std::vector<int32_t> acc(size_t(rows * n));
  for (size_t i = 0; i < acc.size(); ++i) acc[i] = int32_t(i % 1009) - 504;
  std::vector<float> cols(n, 0.25f), y1(acc.size()), y2(acc.size());
  dequantize_rows_int32(acc.data(), rows, n, s1.data(), cols.data(), nullptr, y1.data(),
                        RowDtype::Float32, 1);
  dequantize_rows_int32(acc.data(), rows, n, s1.data(), cols.data(), nullptr, y2.data(),
                        RowDtype::Float32, 2);
  EXPECT_EQ(y1, y2);
}

}  // namespace
}  // namespace fxopt
