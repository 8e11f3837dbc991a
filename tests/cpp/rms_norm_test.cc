#include "kernels/rms_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace fxopt {
namespace {

// Rows of different sizes and magnitudes (row 2 all zeros: eps alone), against the definition in
// double precision.
TEST(RmsNorm, MatchesItsDefinitionAtEverySize) {
  for (int64_t n : {1, 15, 16, 33, 768}) {
    SCOPED_TRACE(n);
    const int64_t rows = 4;
    std::vector<float> x(static_cast<size_t>(rows * n)), w(static_cast<size_t>(n)), y(x.size());
    for (int64_t i = 0; i < rows * n; ++i)
      x[i] = i / n == 2 ? 0.0f : float(std::sin(0.3 * double(i)) * std::pow(4.0, i / n));
    for (int64_t i = 0; i < n; ++i) w[i] = float(0.5 + 0.01 * double(i % 7));
    const float eps = 1e-6f;
    rms_norm(x.data(), rows, n, w.data(), eps, y.data());
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += double(x[r * n + i]) * x[r * n + i];
      double inverse = 1.0 / std::sqrt(sum / double(n) + eps);
      for (int64_t i = 0; i < n; ++i) {
        double expected = w[i] * (x[r * n + i] * inverse);
        ASSERT_NEAR(y[r * n + i], expected, 4e-7 * std::abs(expected) + 1e-30) << r << ", " << i;
      }
    }
  }
}

TEST(RmsNorm, WritesInPlace) {
  std::vector<float> x = {3.0f, 4.0f}, w = {1.0f, 2.0f}, y(2);
  rms_norm(x.data(), 1, 2, w.data(), 0.0f, y.data());
  rms_norm(x.data(), 1, 2, w.data(), 0.0f, x.data());
  EXPECT_EQ(x, y);
  // mean square 12.5: 3 / sqrt(12.5), 2 * 4 / sqrt(12.5)
  EXPECT_NEAR(y[0], 3.0 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y[1], 8.0 / std::sqrt(12.5), 1e-6);
}

}  // namespace
}  // namespace fxopt
