// decode_attention: one query row per head against a KV cache — a decoding step's attention.
//
//   out[h] = sum_t softmax_t(scale * q[h] . k[g][t]) v[g][t]        g = h / (heads / kv_heads)
//
// Why fxopt has its own: at one query, ATen's flash attention for CPU took 120-190 us a layer
// inside a 95M Llama's decoding step (the cache at about 190 tokens, coming from DRAM once the
// weights have streamed through L3), where reading the layer's keys and values alone took 40-50
// us. Here each key row is read once into a dot product (the scores of one head stay in L1),
// each value row once into the weighted sum, the next rows prefetched, heads split over threads.
// Float32 throughout; the sums run in another order than ATen's, so results differ from it in
// the last bits.
//
// Layout: q and out [heads, d] contiguous; k and v hold kv_heads blocks of `length` rows of d
// contiguous floats, rows d apart and blocks `head_stride` floats apart (a cache buffer with room
// beyond `length`). AVX-512F chosen at run time, else AVX2 with FMA, else plain C++.
#pragma once

#include <cstdint>

namespace fxopt {

// heads % kv_heads == 0, length >= 1, d >= 1, head_stride >= length * d.
void decode_attention(const float* q, int64_t heads, int64_t d, const float* k, const float* v,
                      int64_t kv_heads, int64_t length, int64_t head_stride, float scale,
                      float* out, int threads = 1);

}  // namespace fxopt
