// What the kernels' runtime dispatch shares: the attributes that compile one function for AVX2
// with FMA and F16C, for AVX-512F, or for AVX-512 with byte operations and VNNI or bfloat16 dot
// products (the rest of the build targets the baseline x86-64), and the checks that this CPU
// runs them. Elsewhere the
// FXOPT_AVX* macros are undefined and only the portable loops are built.
//
// The checks honour the instruction-set cap a user sets for oneDNN (`ONEDNN_MAX_CPU_ISA`, or
// `DNNL_MAX_CPU_ISA`; fxopt.optimization.hardware.onednn_isa_cap reads the same), so a process
// capped at AVX2 runs fxopt's kernels as an AVX2-only CPU would: what the Python side assumes
// when it picks them, and how the tests reach the AVX2 and plain paths on a newer CPU.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FXOPT_AVX2 __attribute__((target("avx2,fma,f16c")))
#define FXOPT_AVX512 __attribute__((target("avx512f")))
#define FXOPT_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define FXOPT_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
// Both: a template instantiated for CPUs with and without AVX512-BF16 (run on the latter only
// where it emits no bfloat16 instruction, has_avx512_bf16 deciding which).
#define FXOPT_AVX512_VNNI_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512bf16")))

namespace fxopt {

bool has_avx2();
bool has_avx512();
bool has_avx512_vnni();
bool has_avx512_bf16();

}  // namespace fxopt
#endif
