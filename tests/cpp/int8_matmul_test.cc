#include "kernels/int8_matmul.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace fxopt {
namespace {

std::vector<int8_t> values(int64_t count, int seed) {
  std::vector<int8_t> v(static_cast<size_t>(count));
  uint32_t state = uint32_t(seed) * 2654435761u + 1;
  for (int8_t& x : v) {
    state = state * 1664525u + 1013904223u;
    x = int8_t(state >> 24);  // the whole range, -128 included
  }
  return v;
}

std::vector<int32_t> product(const std::vector<int8_t>& a, const std::vector<int8_t>& w, int64_t m,
                             int64_t k, int64_t n, int threads = 1) {
  std::vector<int16_t> packed(size_t(int8_matmul_packed_size(k, n)));
  pack_int8_matmul_weight(w.data(), k, n, packed.data());
  std::vector<int32_t> y(size_t(m * n), -7);
  int8_matmul(a.data(), packed.data(), m, k, n, y.data(), threads);
  return y;
}

// The definition, in 64-bit integers.
std::vector<int32_t> defined(const std::vector<int8_t>& a, const std::vector<int8_t>& w, int64_t m,
                             int64_t k, int64_t n) {
  std::vector<int32_t> y(size_t(m * n));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      int64_t sum = 0;
      for (int64_t i = 0; i < k; ++i) sum += int64_t(a[r * k + i]) * w[i * n + j];
      y[r * n + j] = int32_t(sum);
    }
  return y;
}

TEST(Int8Matmul, IsExactOnRaggedSizes) {
  // Rows not a multiple of the 6-row tile, odd k, columns not a multiple of the 16-column
  // block, k past one 256-value pass over a block.
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                         {5, 7, 19},
                         {6, 16, 16},
                         {13, 33, 40},
                         {7, 257, 31},
                         {20, 600, 48},
                         {128, 384, 96}}) {
    std::vector<int8_t> a = values(m * k, 1), w = values(k * n, 2);
    EXPECT_EQ(product(a, w, m, k, n), defined(a, w, m, k, n)) << m << "x" << k << "x" << n;
  }
}

TEST(Int8Matmul, KeepsTheExtremeProductsExact) {
  // -128 x -128 everywhere: every pair sums to 32768, past int16 (where a saturating 16-bit
  // pair sum, vpmaddubsw's, would clip), and 4096 of them reach 2^26.
  const int64_t m = 7, k = 4096, n = 17;
  std::vector<int8_t> a(size_t(m * k), -128), w(size_t(k * n), -128);
  std::vector<int32_t> y = product(a, w, m, k, n);
  for (int32_t v : y) ASSERT_EQ(v, 128 * 128 * k);
  w.assign(w.size(), 127);
  for (int32_t v : product(a, w, m, k, n)) ASSERT_EQ(v, -128 * 127 * k);
}

TEST(Int8Matmul, EmptySizes) {
  std::vector<int8_t> a = values(6, 1), w;
  EXPECT_EQ(product(a, w, 3, 0, 2), std::vector<int32_t>(6, 0));  // no k: zeros
  EXPECT_TRUE(product({}, values(8, 2), 0, 4, 2).empty());
}

TEST(Int8Matmul, ColumnsSplitOverThreadsGiveTheSameResult) {
  const int64_t m = 64, k = 512, n = 512;  // enough work to split
  std::vector<int8_t> a = values(m * k, 3), w = values(k * n, 4);
  EXPECT_EQ(product(a, w, m, k, n, 2), product(a, w, m, k, n, 1));
}

}  // namespace
}  // namespace fxopt
