#include "kernels/prefill_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/bfloat16.h"

namespace fxopt {
namespace {

// q [batch, rows, heads, d] and k, v [batch, keys, kv_heads, d] in memory (a model's projections
// viewed per head), an additive mask [batch, 1, rows, keys] broadcast over heads.
struct PrefillCase {
  PrefillAttention s;
  std::vector<uint16_t> q, k, v;
  std::vector<float> mask;

  PrefillCase(int64_t batch, int64_t heads, int64_t kv_heads, int64_t rows, int64_t keys, int64_t d,
              bool masked, bool causal) {
    s.batch = batch, s.heads = heads, s.kv_heads = kv_heads, s.rows = rows, s.keys = keys, s.d = d;
    s.q = {rows * heads * d, d, heads * d};
    s.k = s.v = {keys * kv_heads * d, d, kv_heads * d};
    s.scale = 1.0f / std::sqrt(float(d));
    s.causal = causal;
    q.resize(batch * rows * heads * d);
    k.resize(batch * keys * kv_heads * d);
    v.resize(k.size());
    for (size_t i = 0; i < q.size(); ++i)
      q[i] = float_to_bfloat16(float(std::sin(0.37 * double(i)) * 2));
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = float_to_bfloat16(float(std::cos(0.11 * double(i)) * 1.5));
      v[i] = float_to_bfloat16(float(std::sin(0.05 * double(i) + 1.0)));
    }
    if (masked) {
      s.mask = {rows * keys, 0, keys};
      mask.assign(batch * rows * keys, 0.0f);
      for (int64_t b = 0; b < batch; ++b)  // the last keys padding, more of them in later batches
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = keys - 1 - b; j < keys; ++j)
            if (j > 0) mask[(b * rows + i) * keys + j] = -std::numeric_limits<float>::infinity();
    }
  }

  std::vector<float> run(int threads) const {
    std::vector<uint16_t> out(s.batch * s.rows * s.heads * s.d);
    prefill_attention_bf16(s, q.data(), k.data(), v.data(), mask.empty() ? nullptr : mask.data(),
                           out.data(), threads);
    std::vector<float> result(out.size());
    for (size_t i = 0; i < out.size(); ++i) result[i] = bfloat16_to_float(out[i]);
    return result;
  }

  // The float32 kernel on the same values (bfloat16 ones, exact in float32).
  std::vector<float> run_f32(int threads) const {
    auto widened = [](const std::vector<uint16_t>& x) {
      std::vector<float> y(x.size());
      for (size_t i = 0; i < x.size(); ++i) y[i] = bfloat16_to_float(x[i]);
      return y;
    };
    std::vector<float> qf = widened(q), kf = widened(k), vf = widened(v);
    std::vector<float> out(s.batch * s.rows * s.heads * s.d);
    prefill_attention_f32(s, qf.data(), kf.data(), vf.data(), mask.empty() ? nullptr : mask.data(),
                          out.data(), threads);
    return out;
  }

  // The definition in double precision, on the bfloat16 inputs; [batch, rows, heads, d].
  std::vector<double> expected() const {
    std::vector<double> out(s.batch * s.rows * s.heads * s.d, 0.0);
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t i = 0; i < s.rows; ++i) {
          int64_t g = h / (s.heads / s.kv_heads);
          std::vector<double> p(s.keys);
          double top = -INFINITY, total = 0.0;
          for (int64_t j = 0; j < s.keys; ++j) {
            double dot = 0.0;
            for (int64_t c = 0; c < s.d; ++c)
              dot += double(bfloat16_to_float(q[b * s.q.batch + h * s.q.head + i * s.q.row + c])) *
                     bfloat16_to_float(k[b * s.k.batch + g * s.k.head + j * s.k.row + c]);
            p[j] = dot * s.scale + (mask.empty() ? 0.0 : mask[(b * s.rows + i) * s.keys + j]);
            if (s.causal && j > i + s.keys - s.rows) p[j] = -INFINITY;
            top = std::max(top, p[j]);
          }
          for (double& x : p) total += x = std::exp(x - top);
          double* o = &out[((b * s.rows + i) * s.heads + h) * s.d];
          for (int64_t j = 0; j < s.keys; ++j)
            for (int64_t c = 0; c < s.d; ++c)
              o[c] += p[j] / total *
                      bfloat16_to_float(v[b * s.v.batch + g * s.v.head + j * s.v.row + c]);
        }
    return out;
  }
};

struct Shape {
  int64_t batch, heads, kv_heads, rows, keys, d;
  bool masked, causal;
};

std::string describe(const Shape& c) {
  return "batch " + std::to_string(c.batch) + ", heads " + std::to_string(c.heads) + "/" +
         std::to_string(c.kv_heads) + ", rows " + std::to_string(c.rows) + ", keys " +
         std::to_string(c.keys) + ", d " + std::to_string(c.d) + (c.masked ? ", masked" : "") +
         (c.causal ? ", causal" : "");
}

class PrefillAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The kernel's only instructions are AVX512-BF16's; the chooser never offers it elsewhere.
    if (!prefill_attention_bf16_available()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  }
};

TEST_F(PrefillAttentionTest, MatchesItsDefinitionForShapesMasksAndGroups) {
  // Head sizes of one to eight vectors, key counts short of and past whole blocks of 16 and 64,
  // prompts of other lengths than their keys, grouped-query heads, masks, causal rows.
  for (Shape c : std::vector<Shape>{{1, 12, 12, 128, 128, 32, true, false},
                                    {1, 4, 4, 77, 77, 64, false, false},
                                    {2, 4, 2, 33, 45, 16, true, false},
                                    {1, 2, 1, 20, 20, 128, false, true},
                                    {1, 3, 3, 5, 9, 48, false, true},
                                    {2, 2, 2, 67, 131, 80, true, false},
                                    {1, 1, 1, 1, 1, 16, false, false}}) {
    SCOPED_TRACE(describe(c));
    PrefillCase pc(c.batch, c.heads, c.kv_heads, c.rows, c.keys, c.d, c.masked, c.causal);
    std::vector<float> out = pc.run(1);
    std::vector<double> expected = pc.expected();
    // The probabilities are rounded to bfloat16 (8 bits) and so is the result.
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], expected[i], 0.02) << "at " << i;
  }
}

TEST_F(PrefillAttentionTest, ARowWithNoVisibleKeyIsNanAsSoftmaxGives) {
  PrefillCase c(1, 2, 2, 3, 4, 16, true, false);
  for (int64_t j = 0; j < 4; ++j) c.mask[1 * 4 + j] = -std::numeric_limits<float>::infinity();
  std::vector<float> out = c.run(1);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 3; ++i)
      EXPECT_EQ(std::isnan(out[(i * 2 + h) * 16]), i == 1) << "row " << i << ", head " << h;
}

TEST_F(PrefillAttentionTest, HeadsSplitOverThreadsGiveTheSameBits) {
  PrefillCase c(1, 8, 8, 256, 256, 64, true, false);
  EXPECT_EQ(c.run(1), c.run(2));
}

class PrefillAttentionF32Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!prefill_attention_f32_available()) GTEST_SKIP() << "this CPU has no AVX2 with FMA";
  }
};

TEST_F(PrefillAttentionF32Test, MatchesItsDefinitionForShapesMasksAndGroups) {
  // Head sizes of one vector of 8 up to 32 of them, key counts short of and past whole blocks of
  // 8 and 16, query rows short of and past a group of 6, grouped-query heads, masks, causal rows,
  // and rows with no mask and every key visible (their largest score found unscaled).
  for (Shape c : std::vector<Shape>{{1, 12, 12, 128, 128, 32, true, false},
                                    {1, 4, 4, 77, 77, 64, false, false},
                                    {1, 4, 4, 40, 64, 32, false, false},
                                    {2, 4, 2, 33, 45, 16, true, false},
                                    {1, 2, 1, 20, 20, 128, false, true},
                                    {1, 3, 3, 5, 9, 8, false, true},
                                    {2, 2, 2, 67, 131, 40, true, false},
                                    {1, 2, 2, 3, 7, 256, true, true},
                                    {1, 1, 1, 1, 1, 8, false, false}}) {
    SCOPED_TRACE(describe(c));
    PrefillCase pc(c.batch, c.heads, c.kv_heads, c.rows, c.keys, c.d, c.masked, c.causal);
    std::vector<float> out = pc.run_f32(1);
    std::vector<double> expected = pc.expected();
    // float32 sums of at most 256 terms of order 1, e^x within 2e-7.
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], expected[i], 2e-5) << "at " << i;
  }
}

TEST_F(PrefillAttentionF32Test, ARowWithNoVisibleKeyIsNanAsSoftmaxGives) {
  PrefillCase c(1, 2, 2, 3, 4, 16, true, false);
  for (int64_t j = 0; j < 4; ++j) c.mask[1 * 4 + j] = -std::numeric_limits<float>::infinity();
  std::vector<float> out = c.run_f32(1);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t x = 0; x < 16; ++x)
        EXPECT_EQ(std::isnan(out[(i * 2 + h) * 16 + x]), i == 1) << "row " << i << ", head " << h;
}

TEST_F(PrefillAttentionF32Test, HeadsSplitOverThreadsGiveTheSameBits) {
  PrefillCase c(1, 8, 8, 256, 256, 64, true, false);
  EXPECT_EQ(c.run_f32(1), c.run_f32(2));
}

TEST(PrefillAttention, RefusesHeadSizesItHasNoPathFor) {
  PrefillAttention f32;
  for (int64_t d : {4, 12, 264}) {
    f32.d = d;
    EXPECT_FALSE(prefill_attention_f32_supports(f32)) << d;
    EXPECT_THROW(prefill_attention_f32(f32, nullptr, nullptr, nullptr, nullptr, nullptr),
                 std::invalid_argument);
  }
  PrefillAttention s;
  for (int64_t d : {8, 24, 144}) {
    s.d = d;
    EXPECT_FALSE(prefill_attention_bf16_supports(s)) << d;
    EXPECT_THROW(prefill_attention_bf16(s, nullptr, nullptr, nullptr, nullptr, nullptr),
                 std::invalid_argument);
  }
  s.d = 32, s.heads = 3, s.kv_heads = 2;
  EXPECT_FALSE(prefill_attention_bf16_supports(s));
}

}  // namespace
}  // namespace fxopt
