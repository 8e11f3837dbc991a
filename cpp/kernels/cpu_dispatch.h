// What the kernels' runtime dispatch shares: the attribute that compiles one function for
// AVX-512F (the rest of the build targets the baseline x86-64), and the check that this CPU runs
// it. Elsewhere FXOPT_AVX512 is undefined and only the portable loops are built.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FXOPT_AVX512 __attribute__((target("avx512f")))

namespace fxopt {

inline bool has_avx512() {
  static const bool supported = __builtin_cpu_supports("avx512f");
  return supported;
}

}  // namespace fxopt
#endif
