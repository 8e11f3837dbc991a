#include "kernels/decode_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace fxopt {
namespace {

// One query row per head against a cache of kv_heads blocks with room past `length`.
struct AttentionCase {
  int64_t heads, kv_heads, d, length, room;
  std::vector<float> q, k, v;

  AttentionCase(int64_t heads_, int64_t kv_heads_, int64_t d_, int64_t length_, int64_t room_)
      : heads(heads_),
        kv_heads(kv_heads_),
        d(d_),
        length(length_),
        room(room_),
        q(heads * d),
        k(kv_heads * room * d, 1e30f),  // rows past `length` must never be read
        v(kv_heads * room * d, 1e30f) {
    for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37 * double(i)) * 2;
    for (int64_t g = 0; g < kv_heads; ++g)
      for (int64_t t = 0; t < length; ++t)
        for (int64_t i = 0; i < d; ++i) {
          int64_t at = (g * room + t) * d + i;
          k[at] = float(std::cos(0.11 * double(at)) * 1.5);
          v[at] = float(std::sin(0.05 * double(at) + 1.0));
        }
  }

  std::vector<float> run(int threads) const {
    std::vector<float> out(heads * d);
    decode_attention(q.data(), heads, d, k.data(), v.data(), kv_heads, length, room * d,
                     1.0f / std::sqrt(float(d)), out.data(), threads);
    return out;
  }

  // The definition in double precision.
  std::vector<double> expected() const {
    std::vector<double> out(heads * d, 0.0);
    double scale = 1.0 / std::sqrt(double(d));
    for (int64_t h = 0; h < heads; ++h) {
      int64_t g = h / (heads / kv_heads);
      std::vector<double> p(length);
      double top = -1e300, total = 0.0;
      for (int64_t t = 0; t < length; ++t) {
        double dot = 0.0;
        for (int64_t i = 0; i < d; ++i) dot += double(q[h * d + i]) * k[(g * room + t) * d + i];
        p[t] = dot * scale;
        top = std::max(top, p[t]);
      }
      for (double& x : p) total += x = std::exp(x - top);
      for (int64_t t = 0; t < length; ++t)
        for (int64_t i = 0; i < d; ++i) out[h * d + i] += p[t] / total * v[(g * room + t) * d + i];
    }
    return out;
  }
};

TEST(DecodeAttention, MatchesItsDefinitionForHeadSizesLengthsAndGroups) {
  // Head sizes past and short of whole vectors of 16 and 8, one to a few hundred cached rows,
  // grouped-query heads (4 query heads a key head) and one each.
  for (auto [heads, kv_heads, d] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {12, 12, 64}, {8, 2, 64}, {4, 4, 80}, {2, 1, 128}, {3, 3, 20}, {2, 2, 7}})
    for (int64_t length : {1, 5, 33, 300}) {
      SCOPED_TRACE("heads " + std::to_string(heads) + "/" + std::to_string(kv_heads) + ", d " +
                   std::to_string(d) + ", length " + std::to_string(length));
      AttentionCase c(heads, kv_heads, d, length, length + 7);
      std::vector<float> out = c.run(1);
      std::vector<double> expected = c.expected();
      for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], expected[i], 2e-5) << "at " << i;
    }
}

TEST(DecodeAttention, HeadsSplitOverThreadsGiveTheSameBits) {
  // 16 heads of 4096 rows: 32 MB of keys and values, enough for the split to use two threads.
  AttentionCase c(16, 16, 64, 4096, 4096);
  EXPECT_EQ(c.run(1), c.run(2));
}

}  // namespace
}  // namespace fxopt
