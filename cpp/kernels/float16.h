// float16: IEEE half-precision values as their 16 bits, for the int4 kernel's group scales and
// minimums (the engine has no half type of its own; C++23's std::float16_t is not yet ours).
// Conversions round to nearest even, as torch's .half() and the F16C instructions do.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace fxopt {

inline float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    float magnitude = std::ldexp(float(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  uint32_t bits = exponent == 31 ? sign | 0x7f800000 | mantissa << 13
                                 : sign | (exponent + 112) << 23 | mantissa << 13;
  return std::bit_cast<float>(bits);
}

inline uint16_t float_to_half(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint16_t sign = uint16_t((x >> 16) & 0x8000);
  uint32_t mantissa = x & 0x7fffff;
  int32_t exponent = int32_t((x >> 23) & 0xff);
  if (exponent == 255) return uint16_t(sign | 0x7c00 | (mantissa ? 0x200 : 0));  // inf, nan
  auto round = [](uint32_t value, int shift) {  // value >> shift, to nearest even
    uint32_t kept = value >> shift, rest = value & ((1u << shift) - 1), half = 1u << (shift - 1);
    return kept + (rest > half || (rest == half && (kept & 1)));
  };
  if (exponent >= 143) return uint16_t(sign | 0x7c00);  // past half's largest exponent
  if (exponent <= 112) {                                // a subnormal half, or zero
    if (exponent < 102) return sign;
    return uint16_t(sign | round(mantissa | 0x800000, 126 - exponent));
  }
  // A carry out of the mantissa moves into the exponent, up to infinity: the encoding's order.
  return uint16_t(sign | round(uint32_t(exponent - 112) << 23 | mantissa, 13));
}

}  // namespace fxopt
