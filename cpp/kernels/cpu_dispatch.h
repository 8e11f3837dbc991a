// What the kernels' runtime dispatch shares: the attributes that compile one function for
// AVX-512F, or for AVX-512 with byte operations and VNNI dot products (the rest of the build
// targets the baseline x86-64), and the checks that this CPU runs them. Elsewhere FXOPT_AVX512
// is undefined and only the portable loops are built.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FXOPT_AVX512 __attribute__((target("avx512f")))
#define FXOPT_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

namespace fxopt {

inline bool has_avx512() {
  static const bool supported = __builtin_cpu_supports("avx512f");
  return supported;
}

inline bool has_avx512_vnni() {
  static const bool supported = __builtin_cpu_supports("avx512f") &&
                                __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512vnni");
  return supported;
}

}  // namespace fxopt
#endif
