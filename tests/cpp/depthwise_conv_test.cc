#include "kernels/depthwise_conv.h"

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
  int64_t batch, channels, height, width, kernel_h, kernel_w, stride_h, stride_w;
  int64_t top, bottom, left, right;
  float lower, upper;
  bool bias;
};

DepthwiseConv shape_of(const Case& c) {
  DepthwiseConv s;
  s.batch = c.batch, s.channels = c.channels, s.height = c.height, s.width = c.width;
  s.kernel_h = c.kernel_h, s.kernel_w = c.kernel_w, s.stride_h = c.stride_h,
  s.stride_w = c.stride_w;
  s.pad_top = c.top, s.pad_left = c.left;
  s.out_h = (c.height + c.top + c.bottom - c.kernel_h) / c.stride_h + 1;
  s.out_w = (c.width + c.left + c.right - c.kernel_w) / c.stride_w + 1;
  s.lower = c.lower, s.upper = c.upper;
  return s;
}

// The definition in double: y[n, i, j, c] = clamp(b[c] + sum over taps inside the image of
// x[n, i * sh - top + kh, j * sw - left + kw, c] * w[c, kh, kw]).
std::vector<double> reference(const DepthwiseConv& s, const std::vector<float>& x,
                              const std::vector<float>& w, const std::vector<float>& b) {
  std::vector<double> y;
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t i = 0; i < s.out_h; ++i)
      for (int64_t j = 0; j < s.out_w; ++j)
        for (int64_t c = 0; c < s.channels; ++c) {
          double sum = b.empty() ? 0.0 : b[c];
          for (int64_t kh = 0; kh < s.kernel_h; ++kh)
            for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
              int64_t ih = i * s.stride_h - s.pad_top + kh, iw = j * s.stride_w - s.pad_left + kw;
              if (ih < 0 || ih >= s.height || iw < 0 || iw >= s.width) continue;
              sum += double(x[((n * s.height + ih) * s.width + iw) * s.channels + c]) *
                     w[(c * s.kernel_h + kh) * s.kernel_w + kw];
            }
          y.push_back(std::min(std::max(sum, double(s.lower)), double(s.upper)));
        }
  return y;
}

// Channel counts with and without a tail of a vector (1, 7, 19, 40), kernels 3x3, 5x5 and 1x3,
// strides 1-3, the four sides' zeros equal or not (TensorFlow's 'same' for stride 2), zeros
// wider than the kernel (outputs of bias alone), images narrower than a column block, a batch,
// every clamp, with and without bias; float32 and bfloat16. Run capped at AVX2 and SSE4.1 by
// ctest, so the AVX-512, AVX2 and plain paths all meet the same cases.
TEST(DepthwiseConv, MatchesItsDefinition) {
  const float inf = std::numeric_limits<float>::infinity();
  const Case cases[] = {
      {1, 16, 12, 12, 3, 3, 1, 1, 1, 1, 1, 1, 0.0f, 6.0f, true},
      {2, 19, 9, 23, 3, 3, 2, 2, 0, 1, 0, 1, -inf, inf, true},
      {1, 40, 14, 14, 3, 3, 2, 2, 1, 1, 1, 1, 0.0f, inf, false},
      {1, 7, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 0.0f, 6.0f, true},
      {1, 1, 11, 17, 5, 5, 1, 1, 2, 2, 2, 2, -inf, inf, true},
      {1, 33, 13, 13, 5, 5, 2, 2, 1, 2, 1, 2, -1.0f, 1.0f, true},
      {1, 24, 8, 20, 1, 3, 3, 1, 0, 0, 4, 0, -inf, inf, true},
      {1, 16, 3, 3, 3, 3, 1, 1, 4, 4, 4, 4, -inf, inf, true},
  };
  for (const Case& c : cases) {
    DepthwiseConv s = shape_of(c);
    SCOPED_TRACE(testing::Message()
                 << "channels " << c.channels << ", " << c.height << "x" << c.width << ", kernel "
                 << c.kernel_h << "x" << c.kernel_w << ", stride " << c.stride_h);
    int64_t taps = c.kernel_h * c.kernel_w;
    std::vector<float> x(size_t(c.batch * c.height * c.width * c.channels));
    std::vector<float> w(size_t(c.channels * taps)), b(c.bias ? size_t(c.channels) : 0);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(0.37 * double(i)) * 3.0);
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(std::cos(0.91 * double(i)));
    for (size_t i = 0; i < b.size(); ++i) b[i] = float(0.25 * double(i % 5) - 0.5);
    std::vector<float> packed(size_t(depthwise_packed_size(c.channels, taps)));
    depthwise_pack(w.data(), c.bias ? b.data() : nullptr, c.channels, taps, packed.data());
    std::vector<double> expected = reference(s, x, w, b);

    std::vector<float> y(expected.size(), NAN);
    depthwise_conv_f32(s, x.data(), packed.data(), y.data(), 1);
    double bound = 0;
    for (float v : w) bound += std::abs(v) * 3.0;
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y[i], expected[i], 1e-6 * bound) << "float32, element " << i;

    // bfloat16: the same sums from the rounded input, rounded once to nearest even.
    std::vector<uint16_t> xh(x.size()), yh(y.size(), 0xffff);
    std::vector<float> rounded(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      xh[i] = float_to_bfloat16(x[i]);
      rounded[i] = bfloat16_to_float(xh[i]);
    }
    std::vector<double> expected_h = reference(s, rounded, w, b);
    depthwise_conv_bf16(s, xh.data(), packed.data(), yh.data(), 1);
    for (size_t i = 0; i < yh.size(); ++i)
      ASSERT_NEAR(bfloat16_to_float(yh[i]), expected_h[i],
                  std::abs(expected_h[i]) * 0x1p-8 + 1e-6 * bound)
          << "bfloat16, element " << i;
  }
}

// Rows split over threads give the bits one thread gives; NaN stays NaN through the clamp, and
// a bfloat16 NaN stays a NaN.
TEST(DepthwiseConv, ThreadsAndNaN) {
  Case c{2, 32, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1, 0.0f, 6.0f, true};
  DepthwiseConv s = shape_of(c);
  std::vector<float> x(size_t(2 * 64 * 64 * 32)), w(32 * 9, 0.5f), b(32, 0.1f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(double(i)));
  x[5 * 32 + 3] = NAN;
  std::vector<float> packed(size_t(depthwise_packed_size(32, 9)));
  depthwise_pack(w.data(), b.data(), 32, 9, packed.data());
  std::vector<float> one(size_t(2 * 64 * 64 * 32)), two(one.size());
  depthwise_conv_f32(s, x.data(), packed.data(), one.data(), 1);
  depthwise_conv_f32(s, x.data(), packed.data(), two.data(), 2);
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)));
  EXPECT_TRUE(std::isnan(one[5 * 32 + 3]));  // the NaN's own output pixel, channel 3
  EXPECT_FALSE(std::isnan(one[5 * 32 + 4]));

  std::vector<uint16_t> xh(x.size()), yh(one.size());
  for (size_t i = 0; i < x.size(); ++i) xh[i] = float_to_bfloat16(x[i]);
  depthwise_conv_bf16(s, xh.data(), packed.data(), yh.data(), 2);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(yh[5 * 32 + 3])));
}

TEST(DepthwiseConv, RefusesSizesOfNoConvolution) {
  DepthwiseConv s;
  float x = 0, packed[32] = {}, y = 0;
  EXPECT_THROW(depthwise_conv_f32(s, &x, packed, &y, 1), std::invalid_argument);
}

}  // namespace
}  // namespace fxopt
