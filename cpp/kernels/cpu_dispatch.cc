#include "kernels/cpu_dispatch.h"

#ifdef FXOPT_AVX512
#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string>
#include <string_view>

namespace fxopt {
namespace {

// oneDNN's levels, lowest first, as its cap names them (hardware.ONEDNN_ISAS).
constexpr std::array<std::string_view, 15> kLevels = {"SSE41",
                                                      "AVX",
                                                      "AVX2",
                                                      "AVX2_VNNI",
                                                      "AVX2_VNNI_2",
                                                      "AVX512_CORE",
                                                      "AVX512_CORE_VNNI",
                                                      "AVX512_CORE_BF16",
                                                      "AVX10_1_512",
                                                      "AVX512_CORE_FP16",
                                                      "AVX10_1_512_AMX",
                                                      "AVX512_CORE_AMX",
                                                      "AVX10_1_512_AMX_FP16",
                                                      "AVX512_CORE_AMX_FP16",
                                                      "ALL"};

size_t level(std::string_view name) {
  return size_t(std::find(kLevels.begin(), kLevels.end(), name) - kLevels.begin());
}

// The capped level's index; the last (ALL) when no cap or an unknown one is set.
size_t cap() {
  static const size_t capped = [] {
    for (const char* variable : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
      const char* value = std::getenv(variable);
      if (!value) continue;
      std::string name(value);
      name.erase(std::remove_if(name.begin(), name.end(), ::isspace), name.end());
      std::transform(name.begin(), name.end(), name.begin(), ::toupper);
      if (level(name) < kLevels.size()) return level(name);
    }
    return kLevels.size() - 1;
  }();
  return capped;
}

}  // namespace

bool has_avx2() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                                __builtin_cpu_supports("f16c") && cap() >= level("AVX2");
  return supported;
}

bool has_avx512() {
  static const bool supported = __builtin_cpu_supports("avx512f") && cap() >= level("AVX512_CORE");
  return supported;
}

bool has_avx512_vnni() {
  static const bool supported =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
      cap() >= level("AVX512_CORE_VNNI");
  return supported;
}

bool has_avx512_bf16() {
  static const bool supported =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16") &&
      cap() >= level("AVX512_CORE_BF16");
  return supported;
}

}  // namespace fxopt
#endif
