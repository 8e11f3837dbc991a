// prefill_attention_bf16: attention over a whole prompt (or an encoder's input) in bfloat16.
//
//   out[b, i, h] = sum_j softmax_j(scale * q[b, h, i] . k[b, g, j] + mask[b, h, i, j]) v[b, g, j]
//                                                             g = h / (heads / kv_heads)
//
// Why fxopt has its own: in a bfloat16 graph (the `fast` preset on a CPU with AVX512-BF16) ATen's
// flash attention for CPU took 560 us a layer of the real MiniLM at 128 tokens (12 heads of 32),
// a third of what the layer's six Linears took, while OpenVINO's fused attention took 274 us.
// Here the dot products are AVX512-BF16's (`vdpbf16ps`: pairs of bfloat16 products summed into
// float32), keys and values are repacked once per head into the pair layout those take, and each
// query row's scores stay in L1: scores and softmax in float32, the probabilities rounded to
// bfloat16 for the weighted sum of values (as oneDNN's and OpenVINO's bfloat16 attention do).
//
// Layout: q [batch, heads, rows, d], k and v [batch, kv_heads, keys, d], each with its own
// element strides for batch, head and row (d contiguous), so the views a model makes with
// view + transpose need no copy; out is written [batch, rows, heads, d] contiguous (what the
// model's transpose back and reshape read without a copy). `mask`, if any, is added to the
// scores: float32 with strides for batch, head and row (keys contiguous; 0 broadcasts).
// `causal` masks key j of row i when j > i + keys - rows.
#pragma once

#include <cstdint>

namespace fxopt {

struct AttentionStrides {
  int64_t batch = 0, head = 0, row = 0;
};

struct PrefillAttention {
  int64_t batch = 1, heads = 1, kv_heads = 1, rows = 1, keys = 1, d = 32;
  AttentionStrides q, k, v, mask;
  float scale = 1.0f;
  bool causal = false;
};

// Whether this CPU runs the kernel (AVX512-BF16, honouring a oneDNN ISA cap).
bool prefill_attention_bf16_available();

// The shapes it takes: d a multiple of 16 up to 128, heads a multiple of kv_heads.
bool prefill_attention_bf16_supports(const PrefillAttention& shape);

// bfloat16 values as uint16_t bit patterns. Throws std::invalid_argument unless available()
// and supports(shape).
void prefill_attention_bf16(const PrefillAttention& shape, const uint16_t* q, const uint16_t* k,
                            const uint16_t* v, const float* mask, uint16_t* out, int threads = 1);

// prefill_attention_f32 (prefill_attention_f32.cc): the same in float32, for graphs that stay
// float32 (`default`, and every preset on a CPU without native bfloat16), with AVX2's FMA. Why:
// ATen's float32 flash attention for CPU took 439 us a layer of the real MiniLM (12 heads of 32
// over 128 tokens) on a Zen 4 core, against about 215 us of products at the core's peak, and
// converted the model's boolean mask again at every layer. The same layouts; scores, softmax and
// the weighted sum in float32 (e^x within 2e-7, kernels/avx2_exp.h).
bool prefill_attention_f32_available();

// The shapes it takes: d a multiple of 8 up to 256, heads a multiple of kv_heads.
bool prefill_attention_f32_supports(const PrefillAttention& shape);

// Throws std::invalid_argument unless available() and supports(shape).
void prefill_attention_f32(const PrefillAttention& shape, const float* q, const float* k,
                           const float* v, const float* mask, float* out, int threads = 1);

}  // namespace fxopt
