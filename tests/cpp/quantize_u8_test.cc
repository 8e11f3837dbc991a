#include "kernels/quantize_u8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/bfloat16.h"

namespace fxopt {
namespace {

// The definition, in float32: round to nearest even, then the zero point, then the clamp.
uint8_t defined(float x, float inverse_scale, int32_t zero_point) {
  float v = std::nearbyint(x * inverse_scale) + float(zero_point);
  if (std::isnan(v)) return 0;
  return uint8_t(std::min(std::max(v, 0.0f), 255.0f));
}

std::vector<float> activations(int64_t count) {
  std::vector<float> x(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) x[i] = float(std::sin(0.37 * double(i)) * 6.0 - 1.0);
  return x;
}

TEST(QuantizeU8, Float32AndBfloat16AsDefinedAtEverySize) {
  const float inverse_scale = 255.0f / 14.0f;  // [-7.5, 6.5] over 255 levels
  const int32_t zero_point = 137;
  for (int64_t count : {1, 15, 16, 33, 1000, 40000}) {
    SCOPED_TRACE(count);
    std::vector<float> x = activations(count);
    std::vector<uint8_t> q(x.size());
    quantize_u8(x.data(), RowDtype::Float32, count, inverse_scale, zero_point, q.data());
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(q[i], defined(x[i], inverse_scale, zero_point)) << i;
    std::vector<uint16_t> halves(x.size());
    for (size_t i = 0; i < x.size(); ++i) halves[i] = float_to_bfloat16(x[i]);
    quantize_u8(halves.data(), RowDtype::Bfloat16, count, inverse_scale, zero_point, q.data());
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(q[i], defined(bfloat16_to_float(halves[i]), inverse_scale, zero_point)) << i;
  }
}

// Ties round to the even neighbour before an odd zero point is added; values beyond the range
// clamp, NaN becomes 0. 17 values: the vector loop and the scalar tail both see them.
TEST(QuantizeU8, TiesClampsAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.5f, 1.5f,   2.5f,    -0.5f, -1.5f, 1e9f,   -1e9f, inf, -inf,
                          nan,  200.0f, -200.0f, 0.0f,  3.0f,  120.5f, -3.5f, 0.5f};
  std::vector<uint8_t> q(x.size());
  quantize_u8(x.data(), RowDtype::Float32, int64_t(x.size()), 1.0f, 1, q.data());
  for (size_t i = 0; i < x.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(q[i], defined(x[i], 1.0f, 1));
  }
  EXPECT_EQ(q[0], 1);  // 0.5 -> 0, + 1
  EXPECT_EQ(q[1], 3);  // 1.5 -> 2, + 1
  EXPECT_EQ(q[2], 3);  // 2.5 -> 2, + 1
  EXPECT_EQ(q[4], 0);  // -1.5 -> -2, + 1, clamped
  EXPECT_EQ(q[5], 255);
  EXPECT_EQ(q[7], 255);
  EXPECT_EQ(q[8], 0);
  EXPECT_EQ(q[9], 0);
  EXPECT_EQ(q[14], 121);  // 120.5 -> 120, + 1
  quantize_u8(x.data(), RowDtype::Float32, int64_t(x.size()), 1.0f, 128, q.data());
  EXPECT_EQ(q[4], 126);   // -1.5 -> -2, + 128
  EXPECT_EQ(q[15], 124);  // -3.5 -> -4, + 128
}

TEST(QuantizeU8, ThreadsGiveTheSameBytes) {
  const int64_t count = 1 << 20;
  std::vector<float> x = activations(count);
  std::vector<uint8_t> one(x.size()), four(x.size());
  quantize_u8(x.data(), RowDtype::Float32, count, 20.0f, 128, one.data(), 1);
  quantize_u8(x.data(), RowDtype::Float32, count, 20.0f, 128, four.data(), 4);
  EXPECT_EQ(one, four);
}

}  // namespace
}  // namespace fxopt
