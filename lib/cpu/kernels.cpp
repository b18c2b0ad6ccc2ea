// The CPU backend's kernel tables (kernels.h's CpuKernels): portable, AVX2
// and AVX-512, and the choice of one for this CPU at run time. The kernels
// themselves are in kernels_vec.cpp (elementwise), kernels_attn.cpp
// (attention), kernels_gemm.cpp (f32 weight products) and kernels_dot.cpp
// (dot-product-instruction products).
#include "cpu/kernels_impl.h"

#include <cstdlib>

#include "cpu/kernels_q.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace clade {

using namespace kern;

namespace {

const CpuKernels kPortable = {
    "portable", dot_plain, axpy_plain, scale_plain, to_f32_plain, from_f32_plain, max_plain, exp2_sum_plain, silu_mul_plain, scores_generic<dot_plain>,
    pv_plain, gemm_plain, nullptr, nullptr, nullptr, nullptr, nullptr, qdot_plain, x_quant,
};

#if defined(__x86_64__)
const CpuKernels kAvx2 = {
    "avx2", dot_avx2, axpy_avx2, scale_avx2, to_f32_avx2, from_f32_avx2, max_avx2, exp2_sum_avx2, silu_mul_avx2, scores_avx2,
    pv_avx2, gemm_avx2, nullptr, nullptr, nullptr, nullptr, nullptr, qdot_avx2, x_quant_avx2,
};

const CpuKernels kAvx512 = {
    "avx512", dot_avx2, axpy_avx2, scale_avx512, to_f32_avx2, from_f32_avx2, max_avx2, exp2_sum_avx512, silu_mul_avx512, scores_avx512,
    pv_avx512, gemm_avx512, nullptr, nullptr, nullptr, nullptr, nullptr, qdot_avx2, x_quant_avx2,
};
#endif

}  // namespace

const CpuKernels& cpu_kernels_portable() { return kPortable; }

#if defined(__x86_64__)
// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports
// does not know "f16c" (GCC's does); the OS side (XSAVE of the YMM
// registers) is what "avx2" already checks.
static bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

const CpuKernels& cpu_kernels() {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl") && !std::getenv("CLADE_NO_AVX512");
  // The dot-product paths of many-row products (kernels.h), where the CPU
  // has them; CLADE_NO_DOTGEMM=1 keeps the F32 path (to compare the two).
  static const CpuKernels avx512_dot = [] {
    CpuKernels k = kAvx512;
    if (__builtin_cpu_supports("avx512vnni")) k.qdot = qdot_vnni;
    if (std::getenv("CLADE_NO_DOTGEMM")) return k;
    if (__builtin_cpu_supports("avx512bf16")) {
      k.pack_dot = pack_dot_avx512;
      k.x_bf16 = x_bf16_avx512;
      k.gemm_bf16dot = gemm_bf16dot_avx512;
    }
    if (__builtin_cpu_supports("avx512vnni")) {
      k.pack_dot = pack_dot_avx512;
      k.x_q8 = x_q8_avx512;
      k.gemm_q8dot = gemm_q8dot_avx512;
    }
    return k;
  }();
  if (avx512) return avx512_dot;
  if (avx2) return kAvx2;
#endif
  return kPortable;
}

}  // namespace clade
