#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/avx2_exp.h"
#include "kernels/avx2_sum.h"
#include "kernels/cpu_dispatch.h"
#include "kernels/prefill_attention.h"
#include "kernels/row_split.h"

namespace fxopt {

#ifdef FXOPT_AVX2
namespace {

// Per thread: a head's keys transposed, and a group of rows' scores (then probabilities).
struct Scratch {
  std::vector<float> keys;    // [d][keys rounded up to 8]: column j is key j
  std::vector<float> scores;  // [kGroup][keys rounded up to 8]
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

FXOPT_AVX2 __m256i lanes_below(int64_t n) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::clamp<int64_t>(n, 0, 8))), index);
}

// Scores of R query rows against the key blocks [block, block + 8 * B): each loaded block of keys
// feeds R products and each broadcast query element B.
template <int R, int B>
FXOPT_AVX2 void score_tile(const float* const* q, int64_t d, const float* keys, int64_t padded,
                           int64_t block, float* const* scores) {
  __m256 acc[R][B];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) acc[r][b] = _mm256_setzero_ps();
  for (int64_t p = 0; p < d; ++p) {
    const float* k = keys + p * padded + block;
    __m256 kb[B];
    for (int b = 0; b < B; ++b) kb[b] = _mm256_loadu_ps(k + 8 * b);
    for (int r = 0; r < R; ++r) {
      __m256 qp = _mm256_broadcast_ss(q[r] + p);
      for (int b = 0; b < B; ++b) acc[r][b] = _mm256_fmadd_ps(qp, kb[b], acc[r][b]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) _mm256_storeu_ps(scores[r] + block + 8 * b, acc[r][b]);
}

template <int R>
FXOPT_AVX2 void scores_of(const float* const* q, int64_t d, const float* keys, int64_t padded,
                          int64_t end, float* const* scores) {
  int64_t block = 0;
  for (; block + 16 <= end; block += 16) score_tile<R, 2>(q, d, keys, padded, block, scores);
  for (; block < end; block += 8) score_tile<R, 1>(q, d, keys, padded, block, scores);
}

// scale * scores + mask over the `visible` keys, -inf beyond, then e^(x - max) in place up to
// `end`; returns the sum of the exponentials, or NaN where no key is visible (what softmax over
// nothing but -inf gives). Without a mask, every key visible and a positive scale, the largest
// score is found unscaled and scaled inside the exponential's FMA: one pass that only reads
// (softmax was 28% of a MiniLM layer's attention with two passes that each wrote).
FXOPT_AVX2 float row_softmax(float* scores, const float* mask, int64_t visible, int64_t end,
                             float scale) {
  const bool plain = !mask && visible == end && scale > 0.0f;
  __m256 top = _mm256_set1_ps(kNegInf);
  for (int64_t j = 0; j < end; j += 8) {
    __m256 x = _mm256_loadu_ps(scores + j);
    if (!plain) {
      __m256 live = _mm256_castsi256_ps(lanes_below(visible - j));
      x = _mm256_mul_ps(x, _mm256_set1_ps(scale));
      if (mask) x = _mm256_add_ps(x, _mm256_maskload_ps(mask + j, _mm256_castps_si256(live)));
      x = _mm256_blendv_ps(_mm256_set1_ps(kNegInf), x, live);
      _mm256_storeu_ps(scores + j, x);
    }
    top = _mm256_max_ps(top, x);
  }
  float peak = max_lanes(top);
  if (peak == kNegInf) return std::numeric_limits<float>::quiet_NaN();
  // e^(scale * x - scale * peak), or e^(x - peak) where x is already scaled.
  const __m256 factor = _mm256_set1_ps(plain ? scale : 1.0f);
  const __m256 shift = _mm256_set1_ps(plain ? -scale * peak : -peak);
  __m256 total = _mm256_setzero_ps();
  for (int64_t j = 0; j < end; j += 8) {
    __m256 e = exp_avx2(_mm256_fmadd_ps(_mm256_loadu_ps(scores + j), factor, shift));
    total = _mm256_add_ps(total, e);
    _mm256_storeu_ps(scores + j, e);
  }
  return sum_lanes(total);
}

// out[r][column, column + 8 * C) = row r's probabilities' weighted sum of the value rows
// [0, keys), divided by its total: each loaded value vector feeds R products.
template <int R, int C>
FXOPT_AVX2 void output_tile(const float* const* probs, int64_t keys, const float* v, int64_t v_row,
                            int64_t column, const float* totals, float* const* out) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int64_t j = 0; j < keys; ++j) {
    const float* row = v + j * v_row + column;
    __m256 vb[C];
    for (int c = 0; c < C; ++c) vb[c] = _mm256_loadu_ps(row + 8 * c);
    for (int r = 0; r < R; ++r) {
      __m256 p = _mm256_broadcast_ss(probs[r] + j);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(p, vb[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m256 inverse = _mm256_set1_ps(1.0f / totals[r]);
    for (int c = 0; c < C; ++c)
      _mm256_storeu_ps(out[r] + column + 8 * c, _mm256_mul_ps(acc[r][c], inverse));
  }
}

template <int R>
FXOPT_AVX2 void outputs_of(const float* const* probs, int64_t keys, const float* v, int64_t v_row,
                           int64_t d, const float* totals, float* const* out) {
  int64_t column = 0;
  for (; column + 16 <= d; column += 16)
    output_tile<R, 2>(probs, keys, v, v_row, column, totals, out);
  for (; column < d; column += 8) output_tile<R, 1>(probs, keys, v, v_row, column, totals, out);
}

// Query rows scored and weighted together: each key and value vector loaded feeds this many.
constexpr int kGroup = 6;

FXOPT_AVX2 void head(const PrefillAttention& s, int64_t b, int64_t h, const float* q,
                     const float* k, const float* v, const float* mask, float* out, Scratch& w) {
  const int64_t g = h / (s.heads / s.kv_heads), d = s.d;
  const int64_t padded = (s.keys + 7) / 8 * 8;
  const float* kh = k + b * s.k.batch + g * s.k.head;
  const float* vh = v + b * s.v.batch + g * s.v.head;
  w.keys.assign(size_t(d * padded), 0.0f);
  for (int64_t j = 0; j < s.keys; ++j)
    for (int64_t p = 0; p < d; ++p) w.keys[p * padded + j] = kh[j * s.k.row + p];
  w.scores.resize(size_t(kGroup * padded));
  for (int64_t first = 0; first < s.rows; first += kGroup) {
    const int rows = int(std::min<int64_t>(kGroup, s.rows - first));
    const float* qs[kGroup];
    float *scores[kGroup], *outs[kGroup];
    int64_t visible[kGroup], ends[kGroup], end = 0, visible_max = 0;
    for (int r = 0; r < rows; ++r) {
      int64_t i = first + r;
      visible[r] = s.causal ? std::min(s.keys, i + s.keys - s.rows + 1) : s.keys;
      ends[r] = (std::max<int64_t>(visible[r], 1) + 7) / 8 * 8;
      end = std::max(end, ends[r]);
      visible_max = std::max(visible_max, visible[r]);
      qs[r] = q + b * s.q.batch + h * s.q.head + i * s.q.row;
      scores[r] = w.scores.data() + r * padded;
      outs[r] = out + ((b * s.rows + i) * s.heads + h) * d;
    }
    if (rows == kGroup)
      scores_of<kGroup>(qs, d, w.keys.data(), padded, end, scores);
    else
      for (int r = 0; r < rows; ++r)
        scores_of<1>(qs + r, d, w.keys.data(), padded, end, scores + r);
    const float* probs[kGroup];
    float totals[kGroup];
    float* live_outs[kGroup];
    int live = 0;  // rows with a visible key, moved to the front
    for (int r = 0; r < rows; ++r) {
      int64_t i = first + r;
      const float* mi = mask ? mask + b * s.mask.batch + h * s.mask.head + i * s.mask.row : nullptr;
      float total = row_softmax(scores[r], mi, visible[r], ends[r], s.scale);
      if (total != total) {  // no visible key: what softmax over nothing but -inf gives
        std::fill(outs[r], outs[r] + d, std::numeric_limits<float>::quiet_NaN());
        continue;
      }
      std::fill(scores[r] + ends[r], scores[r] + end, 0.0f);  // beyond its own keys
      probs[live] = scores[r], live_outs[live] = outs[r], totals[live] = total, ++live;
    }
    int r = 0;
    for (; r + kGroup <= live; r += kGroup)
      outputs_of<kGroup>(probs + r, visible_max, vh, s.v.row, d, totals + r, live_outs + r);
    for (; r < live; ++r)
      outputs_of<1>(probs + r, visible_max, vh, s.v.row, d, totals + r, live_outs + r);
  }
}

void run(const PrefillAttention& s, const float* q, const float* k, const float* v,
         const float* mask, float* out, int threads) {
  // As prefill_attention_bf16 splits its heads: a head's cost counted as the bytes its products
  // read, each key and value row once per query row.
  const int64_t work_per_head = s.rows * s.keys * s.d * 2 * int64_t(sizeof(float));
  split_rows(s.batch * s.heads, work_per_head, threads, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch;
    for (int64_t n = begin; n < end; ++n)
      head(s, n / s.heads, n % s.heads, q, k, v, mask, out, scratch);
  });
}

}  // namespace

bool prefill_attention_f32_available() { return has_avx2(); }

#else

bool prefill_attention_f32_available() { return false; }

namespace {
void run(const PrefillAttention&, const float*, const float*, const float*, const float*, float*,
         int) {}
}  // namespace

#endif

bool prefill_attention_f32_supports(const PrefillAttention& s) {
  return s.d > 0 && s.d % 8 == 0 && s.d <= 256 && s.kv_heads > 0 && s.heads % s.kv_heads == 0 &&
         s.rows > 0 && s.keys > 0 && s.batch > 0;
}

void prefill_attention_f32(const PrefillAttention& s, const float* q, const float* k,
                           const float* v, const float* mask, float* out, int threads) {
  if (!prefill_attention_f32_available())
    throw std::invalid_argument("prefill_attention_f32: this CPU has no AVX2 with FMA");
  if (!prefill_attention_f32_supports(s))
    throw std::invalid_argument(
        "prefill_attention_f32: d must be a multiple of 8 up to 256, heads a multiple of "
        "kv_heads, every size positive");
  run(s, q, k, v, mask, out, threads);
}

}  // namespace fxopt
