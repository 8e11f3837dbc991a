#include "kernels/int8_pointwise_conv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/bfloat16.h"

namespace fxopt {
namespace {

struct Case {
  int64_t pixels, in, out;
  float lower, upper;
  int32_t zero_point;
  bool bias, residual;
};

std::vector<float> values(size_t count, double step, double scale, double offset = 0.0) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = float(std::sin(step * double(i)) * scale + offset);
  return v;
}

// bfloat16 values, and the float32 ones they stand for (so both dtypes see the same numbers).
std::vector<uint16_t> narrowed(std::vector<float>& v) {
  std::vector<uint16_t> h;
  for (float& f : v) {
    h.push_back(float_to_bfloat16(f));
    f = bfloat16_to_float(h.back());
  }
  return h;
}

struct Operands {
  std::vector<float> x, residual, w_scales, bias;
  std::vector<int8_t> w;
};

// The definition, in double after the input's quantization (which is float32 arithmetic by
// definition: quantize_u8.h).
std::vector<double> reference(const PointwiseConv& s, const Operands& o, float x_scale,
                              int32_t zero_point) {
  const float inverse = 1.0f / x_scale;
  std::vector<double> y;
  for (int64_t p = 0; p < s.pixels; ++p)
    for (int64_t n = 0; n < s.out_channels; ++n) {
      double sum = 0;
      for (int64_t k = 0; k < s.in_channels; ++k) {
        float q = std::clamp(
            std::nearbyint(o.x[p * s.in_channels + k] * inverse) + float(zero_point), 0.0f, 255.0f);
        sum += (double(q) - zero_point) * o.w[n * s.in_channels + k];
      }
      double v = sum * double(x_scale) * o.w_scales[n] + (o.bias.empty() ? 0.0 : o.bias[n]);
      if (!o.residual.empty()) v += o.residual[p * s.out_channels + n];
      y.push_back(std::min(std::max(v, double(s.lower)), double(s.upper)));
    }
  return y;
}

// Output channels that fill whole blocks of 32, half of one (16: the twelve-pixel steps) and
// neither (24, 40, 7); input channels in whole quads and not (3, 18, 33: zeros pad the last
// quad); pixel counts past a chunk and leaving every remainder of a step; zero points 0 and
// 128; every clamp, with and without bias and residual; float32 and bfloat16 from the same
// values. Run capped at AVX2 and SSE4.1 by ctest, so the VNNI and plain paths meet the same cases.
TEST(Int8PointwiseConv, MatchesItsDefinition) {
  const float inf = std::numeric_limits<float>::infinity();
  const Case cases[] = {
      {49, 64, 96, 0.0f, 6.0f, 0, true, false}, {23, 16, 16, -inf, inf, 128, true, true},
      {17, 24, 144, 0.0f, inf, 3, false, true}, {1, 3, 24, -1.0f, 1.0f, 128, true, false},
      {11, 33, 40, -inf, inf, 0, true, true},   {30, 160, 7, 0.0f, 6.0f, 77, true, false},
      {0, 8, 32, -inf, inf, 0, true, false},    {61, 18, 64, -inf, inf, 255, false, false},
      {3000, 64, 48, 0.0f, inf, 0, true, true},
  };
  const float x_scale = 0.02f;
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << c.pixels << " pixels, " << c.in << " -> " << c.out
                                    << " channels, zero point " << c.zero_point);
    PointwiseConv s;
    s.pixels = c.pixels, s.in_channels = c.in, s.out_channels = c.out;
    s.lower = c.lower, s.upper = c.upper;
    Operands o;
    // Inputs past both ends of the quantized range too (clamped to 0 and 255).
    o.x = values(size_t(c.pixels * c.in), 0.37, 3.0, x_scale * float(128 - c.zero_point));
    std::vector<uint16_t> xh = narrowed(o.x);
    for (int64_t i = 0; i < c.out * c.in; ++i) o.w.push_back(int8_t((i * 37) % 255 - 127));
    o.w_scales = values(size_t(c.out), 0.7, 0.001, 0.002);
    if (c.bias) o.bias = values(size_t(c.out), 1.3, 0.5);
    std::vector<uint16_t> rh;
    if (c.residual) {
      o.residual = values(size_t(c.pixels * c.out), 0.13, 1.5);
      rh = narrowed(o.residual);
    }
    std::vector<char> packed(size_t(int8_pointwise_packed_bytes(c.out, c.in)));
    int8_pointwise_pack(o.w.data(), o.w_scales.data(), c.bias ? o.bias.data() : nullptr, c.out,
                        c.in, x_scale, c.zero_point, packed.data());
    std::vector<double> expected = reference(s, o, x_scale, c.zero_point);
    double largest = 1.0;
    for (double v : expected) largest = std::max(largest, std::abs(v));

    std::vector<float> yf(expected.size() + 1, -7.0f);  // one past the end: never written
    int8_pointwise_conv(s, o.x.data(), RowDtype::Float32, x_scale, c.zero_point, packed.data(),
                        c.residual ? o.residual.data() : nullptr, yf.data(), 1);
    // Exact integer sums; float32 scaling, shift and residual.
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_NEAR(yf[i], expected[i], 1e-6 * largest) << "float32, element " << i;
    EXPECT_EQ(yf.back(), -7.0f);

    std::vector<uint16_t> yh(expected.size() + 1, 0xffff);
    int8_pointwise_conv(s, xh.data(), RowDtype::Bfloat16, x_scale, c.zero_point, packed.data(),
                        c.residual ? rh.data() : nullptr, yh.data(), 1);
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_NEAR(bfloat16_to_float(yh[i]), expected[i],
                  std::abs(expected[i]) * 0x1p-8 + 1e-6 * largest)
          << "bfloat16, element " << i;
    EXPECT_EQ(yh.back(), 0xffff);
  }
}

// Pixels split over threads give the bits one thread gives; a NaN input quantizes to 0 (as
// quantize_u8 defines), a NaN residual stays NaN through the clamp.
TEST(Int8PointwiseConv, ThreadsAndNaN) {
  PointwiseConv s;
  s.pixels = 56 * 56 * 4, s.in_channels = 48, s.out_channels = 72, s.lower = 0.0f, s.upper = 6.0f;
  std::vector<float> x = values(size_t(s.pixels * 48), 1.0, 1.0);
  std::vector<float> residual = values(size_t(s.pixels * 72), 0.3, 1.0);
  std::vector<int8_t> w;
  for (int64_t i = 0; i < 72 * 48; ++i) w.push_back(int8_t((i * 11) % 200 - 100));
  std::vector<float> w_scales(72, 0.01f);
  x[5 * 48 + 3] = NAN;
  residual[7 * 72 + 2] = NAN;
  std::vector<char> packed(size_t(int8_pointwise_packed_bytes(72, 48)));
  int8_pointwise_pack(w.data(), w_scales.data(), nullptr, 72, 48, 0.01f, 100, packed.data());
  std::vector<float> one(size_t(s.pixels * 72)), two(one.size());
  int8_pointwise_conv(s, x.data(), RowDtype::Float32, 0.01f, 100, packed.data(), residual.data(),
                      one.data(), 1);
  int8_pointwise_conv(s, x.data(), RowDtype::Float32, 0.01f, 100, packed.data(), residual.data(),
                      two.data(), 2);
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)));
  EXPECT_FALSE(std::isnan(one[5 * 72]));
  EXPECT_TRUE(std::isnan(one[7 * 72 + 2]));
  EXPECT_EQ(1, std::count_if(one.begin(), one.end(), [](float v) { return std::isnan(v); }));

  std::vector<uint16_t> xh, rh, yh(one.size());
  for (float v : x) xh.push_back(float_to_bfloat16(v));
  for (float v : residual) rh.push_back(float_to_bfloat16(v));
  int8_pointwise_conv(s, xh.data(), RowDtype::Bfloat16, 0.01f, 100, packed.data(), rh.data(),
                      yh.data(), 2);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(yh[7 * 72 + 2])));
}

TEST(Int8PointwiseConv, RefusesSizesThatDescribeNoProduct) {
  PointwiseConv s;
  s.pixels = 4, s.in_channels = 0, s.out_channels = 8;
  std::vector<char> packed(64);
  float x[4] = {}, y[32] = {};
  EXPECT_THROW(int8_pointwise_conv(s, x, RowDtype::Float32, 1.0f, 0, packed.data(), nullptr, y, 1),
               std::invalid_argument);
  s.in_channels = 4;
  EXPECT_THROW(int8_pointwise_conv(s, x, RowDtype::Float32, 0.0f, 0, packed.data(), nullptr, y, 1),
               std::invalid_argument);
}

}  // namespace
}  // namespace fxopt
