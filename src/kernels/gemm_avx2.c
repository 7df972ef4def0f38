/* AVX2 + FMA micro-kernels: 6x16 (12 ymm accumulators, 2 loads and 6
 * broadcasts per 12 FMAs), and 12x32, the AVX-512 tile shape, which lets
 * tests exercise that shape's edges on CPUs without AVX-512. */
#include <immintrin.h>

#include "kernels/gemm_impl.h"

#define UK_TARGET __attribute__((target("avx2,fma")))
#define UK_VEC __m256
#define UK_W 8
#define UK_ZERO() _mm256_setzero_ps()
#define UK_LOAD(p) _mm256_load_ps(p)
#define UK_LOADU(p) _mm256_loadu_ps(p)
#define UK_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define UK_BCAST(p) _mm256_broadcast_ss(p)
#define UK_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define UK_ADD(a, b) _mm256_add_ps((a), (b))

#define UK_NAME ukernel_avx2_6x16
#define UK_MR 6
#define UK_NV 2
#include "kernels/gemm_ukernel.inc"
#undef UK_NAME
#undef UK_MR
#undef UK_NV

#define UK_NAME ukernel_avx2_12x32
#define UK_MR 12
#define UK_NV 4
#include "kernels/gemm_ukernel.inc"

static int avx2_supported(void) {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* Blocks measured on a Zen 3 core (32 KiB L1d, 512 KiB L2): see
 * docs/contractions.md. */
#ifndef AVX2_MC
#define AVX2_MC 144
#define AVX2_KC 256
#define AVX2_NC 4096
#endif
const gemm_isa_t gemm_isa_avx2 = {"avx2", avx2_supported, ukernel_avx2_6x16,
                                  6, 16, AVX2_MC, AVX2_KC, AVX2_NC};
const gemm_isa_t gemm_isa_avx2_wide = {"avx2_wide", avx2_supported,
                                       ukernel_avx2_12x32, 12, 32, 144, 256,
                                       4096};
