// bfloat16: brain floating-point values as their 16 bits (the upper half of a float32), for
// kernels that read or write torch's bfloat16 tensors. Rounding to bfloat16 is to nearest even
// and keeps NaN a quiet NaN, as torch's .bfloat16() does.
#pragma once

#include <bit>
#include <cstdint>

namespace fxopt {

inline float bfloat16_to_float(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

inline uint16_t float_to_bfloat16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffff) > 0x7f800000) return uint16_t((bits >> 16) | 0x40);  // NaN stays NaN
  return uint16_t((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

}  // namespace fxopt
