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
#define UK_STRIDED_NAME ukernel_avx512_12x32_strided
#define UK_STRIDED_B_NAME ukernel_avx512_12x32_b
#define UK_HALF_NAME ukernel_avx512_12x16
#define UK_MR 12
#define UK_NV 2
#include "backend/cpu/kernels/gemm_ukernel.inc"
#undef UK_NAME
#undef UK_STRIDED_NAME
#undef UK_STRIDED_B_NAME
#undef UK_HALF_NAME
#undef UK_MR

#define UK_ASTEP 12
#define UK_SHORT_NAME(r) ukernel_avx512_##r##x32
#define UK_SHORT_B_NAME(r) ukernel_avx512_##r##x32_b
#include "backend/cpu/kernels/gemm_short_rows.inc"
static const gemm_ukernel_fn avx512_short_rows[] = UK_SHORT_TABLE;
static const gemm_strided_b_fn avx512_rows_b[] = UK_SHORT_B_TABLE(ukernel_avx512_12x32_b);

/* The last tiles of 1 to 4 columns, 12 of 16 lanes; also a 17- to
 * 20-column tile (a 7x7 layer's 49 positions end in 17) after the
 * 16-wide half. */
#define NARROW_NAME(nc) ukernel_avx512_12x##nc
#define NARROW_MR 12
#define NARROW_NR 32
#define NARROW_LOAD_A(p) _mm512_maskz_loadu_ps(0x0FFF, (p))
#include "backend/cpu/kernels/gemm_narrow.inc"
#undef NARROW_NAME
#undef NARROW_MR
#undef NARROW_NR
#undef NARROW_LOAD_A

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
                                    .kernel_rows = avx512_short_rows,
                                    .kernel_strided_a = ukernel_avx512_12x32_strided,
                                    /* bench_gemm step m,512,128,0,0 at 16-192
                                     * rows: 1.1-1.5x packed; at 384 even */
                                    .kernel_rows_b = avx512_rows_b, .b_in_place_rows = 192};
