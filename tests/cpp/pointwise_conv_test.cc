#include "kernels/pointwise_conv.h"

#include <gtest/gtest.h>

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
  bool bias, residual;
};

std::vector<uint16_t> bfloat16_values(size_t count, double step, double scale) {
  std::vector<uint16_t> values(count);
  for (size_t i = 0; i < count; ++i)
    values[i] = float_to_bfloat16(float(std::sin(step * double(i)) * scale));
  return values;
}

// The definition in double: y[p, n] = clamp(b[n] + sum_k x[p, k] w[n, k] + r[p, n]).
std::vector<double> reference(const PointwiseConv& s, const std::vector<uint16_t>& x,
                              const std::vector<uint16_t>& w, const std::vector<float>& b,
                              const std::vector<uint16_t>& r) {
  std::vector<double> y;
  for (int64_t p = 0; p < s.pixels; ++p)
    for (int64_t n = 0; n < s.out_channels; ++n) {
      double sum = b.empty() ? 0.0 : b[n];
      for (int64_t k = 0; k < s.in_channels; ++k)
        sum += double(bfloat16_to_float(x[p * s.in_channels + k])) *
               bfloat16_to_float(w[n * s.in_channels + k]);
      if (!r.empty()) sum += bfloat16_to_float(r[p * s.out_channels + n]);
      y.push_back(std::min(std::max(sum, double(s.lower)), double(s.upper)));
    }
  return y;
}

// Output channels that fill whole blocks of 32, half of one (16: the one-vector steps), and
// neither (24, 40, 7); input channels even and odd (bfloat16: the last one paired with the
// packing's zero); pixel counts that leave every remainder of a six- and a twelve-pixel step;
// every clamp, with and without bias and residual; bfloat16 and float32 from the same values.
// Run capped at AVX2 and SSE4.1 by ctest, so the vector and plain paths meet the same cases.
TEST(PointwiseConv, MatchesItsDefinition) {
  const float inf = std::numeric_limits<float>::infinity();
  const Case cases[] = {
      {49, 64, 96, 0.0f, 6.0f, true, false}, {23, 16, 16, -inf, inf, true, true},
      {17, 24, 144, 0.0f, inf, false, true}, {1, 3, 24, -1.0f, 1.0f, true, false},
      {11, 33, 40, -inf, inf, true, true},   {30, 160, 7, 0.0f, 6.0f, true, false},
      {0, 8, 32, -inf, inf, true, false},    {61, 96, 64, -inf, inf, false, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << c.pixels << " pixels, " << c.in << " -> " << c.out << " channels");
    PointwiseConv s;
    s.pixels = c.pixels, s.in_channels = c.in, s.out_channels = c.out;
    s.lower = c.lower, s.upper = c.upper;
    std::vector<uint16_t> x = bfloat16_values(size_t(c.pixels * c.in), 0.37, 2.0);
    std::vector<uint16_t> w = bfloat16_values(size_t(c.out * c.in), 0.91, 1.0 / std::sqrt(c.in));
    std::vector<uint16_t> r =
        c.residual ? bfloat16_values(size_t(c.pixels * c.out), 0.13, 1.5) : std::vector<uint16_t>();
    std::vector<float> b;
    if (c.bias)
      for (int64_t n = 0; n < c.out; ++n) b.push_back(float(0.25 * double(n % 5) - 0.5));
    std::vector<char> packed(size_t(pointwise_packed_bytes(c.out, c.in, true)));
    pointwise_pack_bf16(w.data(), c.bias ? b.data() : nullptr, c.out, c.in, packed.data());
    std::vector<double> expected = reference(s, x, w, b, r);

    std::vector<uint16_t> y(expected.size() + 1, 0xffff);  // one past the end: never written
    pointwise_conv_bf16(s, x.data(), packed.data(), c.residual ? r.data() : nullptr, y.data(), 1);
    // Float32 sums of exact products, then one rounding to bfloat16.
    const double bound = 2.0 * std::sqrt(c.in) + 2.0;
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_NEAR(bfloat16_to_float(y[i]), expected[i],
                  std::abs(expected[i]) * 0x1p-8 + 1e-5 * bound)
          << "bfloat16, element " << i;
    EXPECT_EQ(y.back(), 0xffff);

    // float32: the same values, float32 sums.
    auto widened = [](const std::vector<uint16_t>& v) {
      std::vector<float> out;
      for (uint16_t h : v) out.push_back(bfloat16_to_float(h));
      return out;
    };
    std::vector<float> xf = widened(x), wf = widened(w), rf = widened(r);
    std::vector<char> packed_f(size_t(pointwise_packed_bytes(c.out, c.in, false)));
    pointwise_pack_f32(wf.data(), c.bias ? b.data() : nullptr, c.out, c.in, packed_f.data());
    std::vector<float> yf(expected.size() + 1, -7.0f);
    pointwise_conv_f32(s, xf.data(), packed_f.data(), c.residual ? rf.data() : nullptr, yf.data(),
                       1);
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_NEAR(yf[i], expected[i], 1e-6 * bound) << "float32, element " << i;
    EXPECT_EQ(yf.back(), -7.0f);
  }
}

// Pixels split over threads give the bits one thread gives; NaN stays NaN through the clamp.
TEST(PointwiseConv, ThreadsAndNaN) {
  PointwiseConv s;
  s.pixels = 56 * 56 * 4, s.in_channels = 48, s.out_channels = 72, s.lower = 0.0f, s.upper = 6.0f;
  std::vector<uint16_t> x = bfloat16_values(size_t(s.pixels * 48), 1.0, 1.0);
  std::vector<uint16_t> w = bfloat16_values(72 * 48, 0.5, 0.2);
  x[5 * 48 + 3] = float_to_bfloat16(NAN);
  std::vector<char> packed(size_t(pointwise_packed_bytes(72, 48, true)));
  pointwise_pack_bf16(w.data(), nullptr, 72, 48, packed.data());
  std::vector<uint16_t> one(size_t(s.pixels * 72)), two(one.size());
  pointwise_conv_bf16(s, x.data(), packed.data(), nullptr, one.data(), 1);
  pointwise_conv_bf16(s, x.data(), packed.data(), nullptr, two.data(), 2);
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(uint16_t)));
  for (int64_t n = 0; n < 72; ++n) EXPECT_TRUE(std::isnan(bfloat16_to_float(one[5 * 72 + n])));
  EXPECT_FALSE(std::isnan(bfloat16_to_float(one[4 * 72])));

  std::vector<float> xf(x.size()), wf(w.size()), y1(one.size()), y2(one.size());
  for (size_t i = 0; i < x.size(); ++i) xf[i] = bfloat16_to_float(x[i]);
  for (size_t i = 0; i < w.size(); ++i) wf[i] = bfloat16_to_float(w[i]);
  std::vector<char> packed_f(size_t(pointwise_packed_bytes(72, 48, false)));
  pointwise_pack_f32(wf.data(), nullptr, 72, 48, packed_f.data());
  pointwise_conv_f32(s, xf.data(), packed_f.data(), nullptr, y1.data(), 1);
  pointwise_conv_f32(s, xf.data(), packed_f.data(), nullptr, y2.data(), 2);
  EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)));
  EXPECT_TRUE(std::isnan(y1[5 * 72 + 7]));
  EXPECT_FALSE(std::isnan(y1[4 * 72]));
}

TEST(PointwiseConv, RefusesSizesOfNoProduct) {
  PointwiseConv s;
  uint16_t x = 0, y = 0;
  float xf = 0, yf = 0;
  char packed[256] = {};
  EXPECT_THROW(pointwise_conv_bf16(s, &x, packed, nullptr, &y, 1), std::invalid_argument);
  EXPECT_THROW(pointwise_conv_f32(s, &xf, packed, nullptr, &yf, 1), std::invalid_argument);
}

}  // namespace
}  // namespace fxopt
