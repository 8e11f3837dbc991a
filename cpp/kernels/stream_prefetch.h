// What the weight-only kernels share about streaming their weights: while one block of B rows
// is multiplied, the rows of the block kPrefetchBlocksAhead blocks on are prefetched into L2.
// At one token a model's weights come from DRAM once per step (they outgrow L3 on the CPUs
// measured), and how far ahead, and into which level, decides the speed there. Measured on a Zen
// 4 core (32 MB L3, 240 MB of int8 weights streamed, B = 4): prefetching the next block into L1
// (T0) streamed 9-13 GB/s, the block 4 on into L2 (T1) 18-23 GB/s (768x32000: 2.50 -> 1.34 ms);
// 2 to 8 blocks on were level, 1 block on 14 GB/s. Weights resident in L3: 27-28 GB/s either way.
// On an Intel Xeon (300 MB L3) every variant streamed 9.7-10.3 GB/s.
#pragma once

#include <cstdint>

namespace fxopt {

inline constexpr int64_t kPrefetchBlocksAhead = 4;

// The first byte of the block to prefetch while block `j0` (of `block` rows of `row_bytes`) is
// multiplied, or nullptr past the last block before `j_end`.
template <typename T>
const T* block_to_prefetch(const T* rows, int64_t j0, int64_t block, int64_t j_end,
                           int64_t row_bytes) {
  int64_t ahead = j0 + kPrefetchBlocksAhead * block;
  return ahead + block <= j_end ? rows + ahead * row_bytes : nullptr;
}

}  // namespace fxopt
