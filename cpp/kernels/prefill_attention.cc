#include "kernels/prefill_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/avx512_exp.h"
#include "kernels/cpu_dispatch.h"
#include "kernels/row_split.h"

namespace fxopt {

#ifdef FXOPT_AVX512_BF16
namespace {

// Per thread: a head's keys and values repacked, one row's scores and probabilities.
struct Scratch {
  std::vector<uint32_t> keys;    // [d / 2][keys rounded up to 16]: pair p of every key's q.k
  std::vector<uint32_t> values;  // [(keys + 1) / 2][d]: rows 2t and 2t + 1 interleaved
  std::vector<float> scores;     // [keys rounded up to 16]
  std::vector<uint16_t> probs;   // [keys rounded up to 16], bfloat16
};

uint32_t pair_at(const uint16_t* p) {
  uint32_t pair;
  std::memcpy(&pair, p, sizeof pair);
  return pair;
}

FXOPT_AVX512_BF16 __m512bh as_pairs(__m512i x) { return (__m512bh)x; }

// Scores of R query rows against the key blocks [block, block + 16 * B): each loaded block of
// key pairs feeds R dot products and each broadcast query pair B, R * B chains in flight.
template <int R, int B>
FXOPT_AVX512_BF16 void score_tile(const uint16_t* const* q, int64_t pairs, const uint32_t* keys,
                                  int64_t padded, int64_t block, float* const* scores) {
  __m512 acc[R][B];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) acc[r][b] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const uint32_t* k = keys + p * padded + block;
    __m512bh kb[B];
    for (int b = 0; b < B; ++b) kb[b] = as_pairs(_mm512_loadu_si512(k + 16 * b));
    for (int r = 0; r < R; ++r) {
      __m512bh qp = as_pairs(_mm512_set1_epi32(int(pair_at(q[r] + 2 * p))));
      for (int b = 0; b < B; ++b) acc[r][b] = _mm512_dpbf16_ps(acc[r][b], qp, kb[b]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) _mm512_storeu_ps(scores[r] + block + 16 * b, acc[r][b]);
}

template <int R>
FXOPT_AVX512_BF16 void scores_of(const uint16_t* const* q, int64_t pairs, const uint32_t* keys,
                                 int64_t padded, int64_t end, float* const* scores) {
  int64_t block = 0;
  for (; block + 64 <= end; block += 64) score_tile<R, 4>(q, pairs, keys, padded, block, scores);
  for (; block < end; block += 16) score_tile<R, 1>(q, pairs, keys, padded, block, scores);
}

// scale * scores + mask over the `visible` keys, -inf beyond, then e^(x - max) rounded to
// bfloat16 into `probs`; returns the float32 sum of the exponentials, or NaN where no key is
// visible (what softmax over nothing but -inf gives).
FXOPT_AVX512_BF16 float row_softmax(float* scores, const float* mask, int64_t visible, int64_t end,
                                    float scale, uint16_t* probs) {
  __m512 top = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < end; j += 16) {
    __mmask16 live = visible - j >= 16 ? __mmask16(0xffff)
                     : visible > j     ? __mmask16((1u << (visible - j)) - 1)
                                       : __mmask16(0);
    __m512 x = _mm512_mul_ps(_mm512_loadu_ps(scores + j), _mm512_set1_ps(scale));
    if (mask) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(live, mask + j));
    x = _mm512_mask_blend_ps(live, _mm512_set1_ps(-std::numeric_limits<float>::infinity()), x);
    _mm512_storeu_ps(scores + j, x);
    top = _mm512_max_ps(top, x);
  }
  float peak = _mm512_reduce_max_ps(top);
  if (peak == -std::numeric_limits<float>::infinity())
    return std::numeric_limits<float>::quiet_NaN();
  __m512 total = _mm512_setzero_ps();
  for (int64_t j = 0; j < end; j += 16) {
    __m512 e = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(scores + j), _mm512_set1_ps(peak)));
    total = _mm512_add_ps(total, e);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(probs + j), (__m256i)_mm512_cvtneps_pbh(e));
  }
  return _mm512_reduce_add_ps(total);
}

// out[r] (d = 16 * V) = row r's probabilities' weighted sum of the value rows over `pairs`
// pairs of rows, divided by its total: each loaded value vector feeds R dot products.
template <int R, int V>
FXOPT_AVX512_BF16 void output_tile(const uint16_t* const* probs, int64_t pairs,
                                   const uint32_t* values, const float* totals,
                                   uint16_t* const* out) {
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < V; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t t = 0; t < pairs; ++t) {
    const uint32_t* row = values + t * 16 * V;
    __m512bh vb[V];
    for (int c = 0; c < V; ++c) vb[c] = as_pairs(_mm512_loadu_si512(row + 16 * c));
    for (int r = 0; r < R; ++r) {
      __m512bh p = as_pairs(_mm512_set1_epi32(int(pair_at(probs[r] + 2 * t))));
      for (int c = 0; c < V; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], p, vb[c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m512 inverse = _mm512_set1_ps(1.0f / totals[r]);
    for (int c = 0; c < V; ++c)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[r] + 16 * c),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(acc[r][c], inverse)));
  }
}

// Rows per tile of the weighted sum: at most 16 accumulators (d = 16 * V).
template <int V>
constexpr int kOutputRows = V <= 4 ? 4 : 2;

template <int V>
FXOPT_AVX512_BF16 void outputs_of(int rows, const uint16_t* const* probs, int64_t pairs,
                                  const uint32_t* values, const float* totals,
                                  uint16_t* const* out) {
  int r = 0;
  for (; r + kOutputRows<V> <= rows; r += kOutputRows<V>)
    output_tile<kOutputRows<V>, V>(probs + r, pairs, values, totals + r, out + r);
  for (; r < rows; ++r) output_tile<1, V>(probs + r, pairs, values, totals + r, out + r);
}

using Outputs = void (*)(int, const uint16_t* const*, int64_t, const uint32_t*, const float*,
                         uint16_t* const*);

template <size_t... V>
constexpr std::array<Outputs, sizeof...(V)> outputs_table(std::index_sequence<V...>) {
  return {outputs_of<int(V) + 1>...};
}

// By head size: d / 16 - 1 (supports() allows 16 to 128).
constexpr std::array<Outputs, 8> kOutputs = outputs_table(std::make_index_sequence<8>());

void pack_head(const PrefillAttention& s, const uint16_t* k, const uint16_t* v, Scratch& w) {
  const int64_t d = s.d, pairs = d / 2, padded = (s.keys + 15) / 16 * 16;
  w.keys.assign(size_t(pairs * padded), 0);
  for (int64_t j = 0; j < s.keys; ++j)
    for (int64_t p = 0; p < pairs; ++p) w.keys[p * padded + j] = pair_at(k + j * s.k.row + 2 * p);
  const int64_t value_pairs = (s.keys + 1) / 2;
  w.values.resize(size_t(value_pairs * d));
  for (int64_t t = 0; t < value_pairs; ++t) {
    const uint16_t* first = v + 2 * t * s.v.row;
    const uint16_t* second = 2 * t + 1 < s.keys ? first + s.v.row : nullptr;
    for (int64_t c = 0; c < d; ++c)
      w.values[t * d + c] = uint32_t(first[c]) | (second ? uint32_t(second[c]) << 16 : 0u);
  }
}

// Query rows scored and weighted together: each key and value vector loaded feeds this many.
constexpr int kGroup = 4;

FXOPT_AVX512_BF16 void head(const PrefillAttention& s, int64_t b, int64_t h, const uint16_t* q,
                            const uint16_t* k, const uint16_t* v, const float* mask, uint16_t* out,
                            Scratch& w) {
  const int64_t g = h / (s.heads / s.kv_heads);
  pack_head(s, k + b * s.k.batch + g * s.k.head, v + b * s.v.batch + g * s.v.head, w);
  const int64_t padded = (s.keys + 15) / 16 * 16;
  w.scores.resize(size_t(kGroup * padded));
  w.probs.resize(size_t(kGroup * padded));
  Outputs outputs = kOutputs[size_t(s.d / 16 - 1)];
  for (int64_t first = 0; first < s.rows; first += kGroup) {
    const int rows = int(std::min<int64_t>(kGroup, s.rows - first));
    const uint16_t* qs[kGroup];
    float* scores[kGroup];
    uint16_t *probs[kGroup], *outs[kGroup];
    int64_t visible[kGroup], ends[kGroup], end = 0;
    for (int r = 0; r < rows; ++r) {
      int64_t i = first + r;
      visible[r] = s.causal ? std::min(s.keys, i + s.keys - s.rows + 1) : s.keys;
      ends[r] = (std::max<int64_t>(visible[r], 1) + 15) / 16 * 16;
      end = std::max(end, ends[r]);
      qs[r] = q + b * s.q.batch + h * s.q.head + i * s.q.row;
      scores[r] = w.scores.data() + r * padded;
      probs[r] = w.probs.data() + r * padded;
      outs[r] = out + ((b * s.rows + i) * s.heads + h) * s.d;
    }
    if (rows == kGroup)
      scores_of<kGroup>(qs, s.d / 2, w.keys.data(), padded, end, scores);
    else
      for (int r = 0; r < rows; ++r)
        scores_of<1>(qs + r, s.d / 2, w.keys.data(), padded, end, scores + r);
    float totals[kGroup];
    int live = 0;  // rows with a visible key, moved to the front
    for (int r = 0; r < rows; ++r) {
      int64_t i = first + r;
      const float* mi = mask ? mask + b * s.mask.batch + h * s.mask.head + i * s.mask.row : nullptr;
      float total = row_softmax(scores[r], mi, visible[r], ends[r], s.scale, probs[r]);
      if (total != total) {  // no visible key: what softmax over nothing but -inf gives
        std::fill(outs[r], outs[r] + s.d, uint16_t(0x7fc0));  // bfloat16 NaN
        continue;
      }
      std::fill(probs[r] + ends[r], probs[r] + end, uint16_t(0));  // beyond its own keys
      probs[live] = probs[r], outs[live] = outs[r], totals[live] = total, ++live;
    }
    int64_t visible_max = 0;
    for (int r = 0; r < rows; ++r) visible_max = std::max(visible_max, visible[r]);
    outputs(live, probs, (visible_max + 1) / 2, w.values.data(), totals, outs);
  }
}

}  // namespace

bool prefill_attention_bf16_available() { return has_avx512_bf16(); }

void run(const PrefillAttention& s, const uint16_t* q, const uint16_t* k, const uint16_t* v,
         const float* mask, uint16_t* out, int threads) {
  // split_rows sizes its parts in bytes streamed; a head here is compute, so its cost is counted
  // as the bytes its dot products read: each key and value row once per query row.
  const int64_t work_per_head = s.rows * s.keys * s.d * 2 * int64_t(sizeof(uint16_t));
  split_rows(s.batch * s.heads, work_per_head, threads, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch;
    for (int64_t n = begin; n < end; ++n)
      head(s, n / s.heads, n % s.heads, q, k, v, mask, out, scratch);
  });
}

#else

bool prefill_attention_bf16_available() { return false; }

void run(const PrefillAttention&, const uint16_t*, const uint16_t*, const uint16_t*, const float*,
         uint16_t*, int) {}

#endif

bool prefill_attention_bf16_supports(const PrefillAttention& s) {
  return s.d > 0 && s.d % 16 == 0 && s.d <= 128 && s.kv_heads > 0 && s.heads % s.kv_heads == 0 &&
         s.rows > 0 && s.keys > 0 && s.batch > 0;
}

void prefill_attention_bf16(const PrefillAttention& s, const uint16_t* q, const uint16_t* k,
                            const uint16_t* v, const float* mask, uint16_t* out, int threads) {
  if (!prefill_attention_bf16_available())
    throw std::invalid_argument("prefill_attention_bf16: this CPU has no AVX512-BF16");
  if (!prefill_attention_bf16_supports(s))
    throw std::invalid_argument(
        "prefill_attention_bf16: d must be a multiple of 16 up to 128, heads a multiple of "
        "kv_heads, every size positive");
  run(s, q, k, v, mask, out, threads);
}

}  // namespace fxopt
