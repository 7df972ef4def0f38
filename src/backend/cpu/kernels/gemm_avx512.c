/* AVX-512 micro-kernel: 12x32, 24 zmm accumulators, 2 loads and 12
 * broadcasts (folded into the FMAs) per 24 FMAs. The same template as the
 * AVX2 kernels; its tile shape is tested there as "avx2_wide". */
#include <immintrin.h>

#include "backend/cpu/kernels/gemm_impl.h"
#include "core/isa.h"

#define UK_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define UK_VEC __m512
#define UK_W 16
#define UK_ZERO() _mm512_setzero_ps()
#define UK_LOAD(p) _mm512_load_ps(p)
#define UK_LOADU(p) _mm512_loadu_ps(p)
#define UK_STOREU(p, v) _mm512_storeu_ps((p), (v))
#define UK_BCAST(p) _mm512_set1_ps(*(p))
#define UK_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define UK_ADD(a, b) _mm512_add_ps((a), (b))

#define UK_NAME ukernel_avx512_12x32
#define UK_HALF_NAME ukernel_avx512_12x16
#define UK_MR 12
#define UK_NV 2
#include "backend/cpu/kernels/gemm_ukernel.inc"
#undef UK_NAME
#undef UK_HALF_NAME
#undef UK_MR

#define UK_ASTEP 12
#define UK_SHORT_NAME(r) ukernel_avx512_##r##x32
#include "backend/cpu/kernels/gemm_short_rows.inc"
static const gemm_ukernel_fn avx512_short_rows[] = UK_SHORT_TABLE;

/* A last tile of NC <= 4 columns: the panel's 12 rows are the vector (12
 * of 16 lanes), one accumulator per column and chain; CH chains over k
 * cover the FMA latency. B is read from 32-wide panels, so that a 17- to
 * 20-column tile (a 7x7 layer's 49 positions end in 17) runs as the
 * 16-wide half and this. */
#define NARROW(NC, CH)                                                               \
  UK_TARGET static void ukernel_avx512_12x##NC(int64_t kc, const float *restrict a,  \
                                               const float *restrict b,             \
                                               float *restrict c, int64_t ldc,      \
                                               int accumulate, int64_t rows) {      \
    const __mmask16 twelve = 0x0FFF;                                                 \
    __m512 acc[CH][NC];                                                              \
    for (int h = 0; h < CH; h++)                                                     \
      for (int j = 0; j < NC; j++) acc[h][j] = _mm512_setzero_ps();                  \
    int64_t p = 0;                                                                   \
    for (; p + CH <= kc; p += CH)                                                    \
      for (int h = 0; h < CH; h++) {                                                 \
        __m512 av = _mm512_maskz_loadu_ps(twelve, a + (p + h) * 12);                 \
        for (int j = 0; j < NC; j++)                                                 \
          acc[h][j] = _mm512_fmadd_ps(av, _mm512_set1_ps(b[(p + h) * 32 + j]), acc[h][j]); \
      }                                                                              \
    for (; p < kc; p++) {                                                            \
      __m512 av = _mm512_maskz_loadu_ps(twelve, a + p * 12);                         \
      for (int j = 0; j < NC; j++)                                                   \
        acc[0][j] = _mm512_fmadd_ps(av, _mm512_set1_ps(b[p * 32 + j]), acc[0][j]);   \
    }                                                                                \
    for (int j = 0; j < NC; j++) {                                                   \
      __m512 sum = acc[0][j];                                                        \
      for (int h = 1; h < CH; h++) sum = _mm512_add_ps(sum, acc[h][j]);              \
      float col[16];                                                                 \
      _mm512_storeu_ps(col, sum);                                                    \
      for (int64_t i = 0; i < rows; i++)                                             \
        c[i * ldc + j] = accumulate ? c[i * ldc + j] + col[i] : col[i];              \
    }                                                                                \
  }
NARROW(1, 4)
NARROW(2, 4)
NARROW(3, 2)
NARROW(4, 2)
#undef NARROW

static int avx512_supported(void) {
  return core_isa_allows(CORE_ISA_AVX512) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
}

/* Zen 5 has 48 KiB L1d and 1 MiB L2 per core: the B micro-panel (kc x 32)
 * stays in L1 at kc = 256 and the A block (mc x kc) in L2. */
const gemm_isa_t gemm_isa_avx512 = {.name = "avx512", .supported = avx512_supported,
                                    .kernel = ukernel_avx512_12x32, .mr = 12, .nr = 32,
                                    .mc = 192, .kc = 256, .nc = 4096,
                                    .pack_bt = gemm_pack_bt32_avx2,
                                    .pack_a = gemm_pack_a12_avx2,
                                    .kernel_half = ukernel_avx512_12x16,
                                    .kernel_narrow = {NULL, ukernel_avx512_12x1, ukernel_avx512_12x2,
                                                      ukernel_avx512_12x3, ukernel_avx512_12x4},
                                    .kernel_rows = avx512_short_rows};
