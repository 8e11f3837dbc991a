#include "kernels/int8_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu_dispatch.h"
#include "kernels/row_split.h"

namespace fxopt {
namespace {

constexpr int64_t kColumns = 16;  // a packed block's columns: two vectors of 8 int32 sums
constexpr int64_t kRows = 6;      // rows per tile: 12 sums, 2 weight and 1 activation registers
// Pairs of k per pass over a block: its 16 KB stay in L1 while every row tile reads them.
constexpr int64_t kPairsPerPass = 256;

int64_t pairs_of(int64_t k) { return (k + 1) / 2; }
int64_t blocks_of(int64_t n) { return (n + kColumns - 1) / kColumns; }

// a [m, k] int8 -> [m, 2 * pairs] int16, an odd k's last pair completed with 0, and zero rows
// up to a multiple of kRows (a last, partial tile reads them).
std::vector<int16_t> widen(const int8_t* a, int64_t m, int64_t k) {
  int64_t stride = 2 * pairs_of(k), padded = (m + kRows - 1) / kRows * kRows;
  std::vector<int16_t> wide(size_t(padded * stride), 0);
  for (int64_t r = 0; r < m; ++r) std::copy(a + r * k, a + (r + 1) * k, wide.begin() + r * stride);
  return wide;
}

// Columns [0, width) of rows [0, rows) of a tile: y[r][j] (+)= sum over pairs p of
// a[r][2p] b[p][j][0] + a[r][2p + 1] b[p][j][1].
void tile_portable(const int16_t* a, int64_t lda, const int16_t* b, int64_t pairs, int64_t rows,
                   int64_t width, int32_t* y, int64_t ldy, bool first) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j) {
      int32_t sum = first ? 0 : y[r * ldy + j];
      for (int64_t p = 0; p < pairs; ++p)
        sum += int32_t(a[r * lda + 2 * p]) * b[(p * kColumns + j) * 2] +
               int32_t(a[r * lda + 2 * p + 1]) * b[(p * kColumns + j) * 2 + 1];
      y[r * ldy + j] = sum;
    }
}

#ifdef FXOPT_AVX2
// low += madd(x, w_low), high += madd(x, w_high), x the pair of a row at `pair` broadcast. In
// assembly, on named sums: GCC 12, given the intrinsics on arrays of sums, kept half of them on
// the stack and ran no faster than float32.
#define FXOPT_ACCUMULATE(pair, low, high)                                     \
  asm("vpbroadcastd %[a], %[x]\n\t"                                           \
      "vpmaddwd %[w_low], %[x], %[product]\n\t"                               \
      "vpaddd %[product], %[l], %[l]\n\t"                                     \
      "vpmaddwd %[w_high], %[x], %[x]\n\t"                                    \
      "vpaddd %[x], %[h], %[h]"                                               \
      : [l] "+x"(low), [h] "+x"(high), [x] "=&x"(x), [product] "=&x"(product) \
      :                                                                       \
      [a] "m"(*reinterpret_cast<const int32_t*>(pair)), [w_low] "x"(w_low), [w_high] "x"(w_high))

// A full tile: kRows rows x kColumns columns.
FXOPT_AVX2 void tile_avx2(const int16_t* a, int64_t lda, const int16_t* b, int64_t pairs,
                          int32_t* y, int64_t ldy, bool first) {
  static_assert(kRows == 6);
  auto start = [&](int r, int half) FXOPT_AVX2 {
    return first ? _mm256_setzero_si256()
                 : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + r * ldy) + half);
  };
  __m256i l0 = start(0, 0), h0 = start(0, 1), l1 = start(1, 0), h1 = start(1, 1);
  __m256i l2 = start(2, 0), h2 = start(2, 1), l3 = start(3, 0), h3 = start(3, 1);
  __m256i l4 = start(4, 0), h4 = start(4, 1), l5 = start(5, 0), h5 = start(5, 1);
  for (int64_t p = 0; p < pairs; ++p) {
    auto* w = reinterpret_cast<const __m256i*>(b + p * 2 * kColumns);
    __m256i w_low = _mm256_loadu_si256(w), w_high = _mm256_loadu_si256(w + 1), x, product;
    const int16_t* column = a + 2 * p;
    FXOPT_ACCUMULATE(column, l0, h0);
    FXOPT_ACCUMULATE(column + lda, l1, h1);
    FXOPT_ACCUMULATE(column + 2 * lda, l2, h2);
    FXOPT_ACCUMULATE(column + 3 * lda, l3, h3);
    FXOPT_ACCUMULATE(column + 4 * lda, l4, h4);
    FXOPT_ACCUMULATE(column + 5 * lda, l5, h5);
  }
  __m256i sums[kRows][2] = {{l0, h0}, {l1, h1}, {l2, h2}, {l3, h3}, {l4, h4}, {l5, h5}};
  for (int r = 0; r < kRows; ++r)
    for (int half = 0; half < 2; ++half)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + r * ldy) + half, sums[r][half]);
}
#undef FXOPT_ACCUMULATE
#endif

// One tile: rows [0, rows) x the block's columns, of which the first `width` are y's (a last,
// partial block's tile goes through a full-width copy).
void tile(const int16_t* a, int64_t lda, const int16_t* b, int64_t pairs, int64_t rows,
          int64_t width, int32_t* y, int64_t ldy, bool first) {
#ifdef FXOPT_AVX2
  if (has_avx2()) {
    if (rows == kRows && width == kColumns) return tile_avx2(a, lda, b, pairs, y, ldy, first);
    // The rows past `rows` read the widened activations' padding (zeros) and are dropped.
    int32_t full[kRows * kColumns] = {};
    for (int64_t r = 0; r < rows && !first; ++r)
      std::copy(y + r * ldy, y + r * ldy + width, full + r * kColumns);
    tile_avx2(a, lda, b, pairs, full, kColumns, first);
    for (int64_t r = 0; r < rows; ++r)
      std::copy(full + r * kColumns, full + r * kColumns + width, y + r * ldy);
    return;
  }
#endif
  tile_portable(a, lda, b, pairs, rows, width, y, ldy, first);
}

// The run of pairs a thread multiplies after (block, p0) in its blocks [begin, end), or null.
const int16_t* next_run(const int16_t* packed, int64_t block_size, int64_t block, int64_t begin,
                        int64_t end, int64_t p0, int64_t pairs) {
  if (block + 1 < end) return packed + (block + 1) * block_size + p0 * 2 * kColumns;
  if (p0 + kPairsPerPass < pairs)
    return packed + begin * block_size + (p0 + kPairsPerPass) * 2 * kColumns;
  return nullptr;
}

// Tile t of `tiles` asks for its share of the next run's cache lines (one per pair: 16 columns
// x 2 int16), so they are in L2 when its first tile streams them. Why: the weight is read once
// per call and a run's first tile consumes a line every few cycles, faster than the hardware
// prefetcher fetches a cold one; in a model, where the weights are out of cache, the product
// ran 1.3-1.6x slower than on a warm weight.
void prefetch_share(const int16_t* next, int64_t run, int64_t t, int64_t tiles) {
  int64_t share = (run + tiles - 1) / tiles;
  for (int64_t p = t * share; p < std::min(run, (t + 1) * share); ++p)
    __builtin_prefetch(next + p * 2 * kColumns, 0, 2);
}

}  // namespace

bool int8_matmul_available() {
#ifdef FXOPT_AVX2
  return has_avx2();
#else
  return false;
#endif
}

int64_t int8_matmul_packed_size(int64_t k, int64_t n) {
  return blocks_of(n) * pairs_of(k) * 2 * kColumns;
}

void pack_int8_matmul_weight(const int8_t* weight, int64_t k, int64_t n, int16_t* packed) {
  int64_t pairs = pairs_of(k);
  for (int64_t block = 0; block < blocks_of(n); ++block)
    for (int64_t p = 0; p < pairs; ++p)
      for (int64_t j = 0; j < kColumns; ++j)
        for (int64_t t = 0; t < 2; ++t) {
          int64_t row = 2 * p + t, column = block * kColumns + j;
          *packed++ = row < k && column < n ? weight[row * n + column] : 0;
        }
}

void int8_matmul(const int8_t* a, const int16_t* packed, int64_t m, int64_t k, int64_t n,
                 int32_t* y, int threads) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return std::fill(y, y + m * n, 0);
  std::vector<int16_t> wide = widen(a, m, k);
  int64_t pairs = pairs_of(k), lda = 2 * pairs, block_size = pairs * 2 * kColumns;
  // A block's work, counted as the bytes its products would stream, sizes the threads' parts.
  int64_t tiles = (m + kRows - 1) / kRows;
  split_rows(blocks_of(n), block_size * 2 * m, threads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p0 = 0; p0 < pairs; p0 += kPairsPerPass) {
      int64_t run = std::min(kPairsPerPass, pairs - p0);
      for (int64_t block = begin; block < end; ++block) {
        int64_t column = block * kColumns, width = std::min(kColumns, n - column);
        const int16_t* b = packed + block * block_size + p0 * 2 * kColumns;
        const int16_t* next = next_run(packed, block_size, block, begin, end, p0, pairs);
        for (int64_t r = 0, t = 0; r < m; r += kRows, ++t) {
          if (next) prefetch_share(next, run, t, tiles);
          tile(wide.data() + r * lda + 2 * p0, lda, b, run, std::min(kRows, m - r), width,
               y + r * n + column, n, p0 == 0);
        }
      }
    }
  });
}

}  // namespace fxopt
