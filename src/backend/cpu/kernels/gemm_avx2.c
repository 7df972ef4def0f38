/* AVX2 + FMA micro-kernels: 6x16 (12 ymm accumulators, 2 loads and 6
 * broadcasts per 12 FMAs), and 12x32, the AVX-512 tile shape, which lets
 * tests exercise that shape's edges on CPUs without AVX-512; each with
 * its half-width edge kernel (6x8, 12x16). */
#include <immintrin.h>

#include "backend/cpu/kernels/gemm_impl.h"
#include "core/isa.h"

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
#define UK_STRIDED_NAME ukernel_avx2_6x16_strided
#define UK_STRIDED_B_NAME ukernel_avx2_6x16_b
#define UK_HALF_NAME ukernel_avx2_6x8
#define UK_MR 6
#define UK_NV 2
#include "backend/cpu/kernels/gemm_ukernel.inc"
#undef UK_NAME
#undef UK_STRIDED_NAME
#undef UK_STRIDED_B_NAME
#undef UK_HALF_NAME
#undef UK_MR
#undef UK_NV

/* Short last row tiles of the 6-row panels. */
#define UK_NV 2
#define UK_ASTEP 6
#define UK_SHORT_NAME(r) ukernel_avx2_##r##x16
#define UK_SHORT_B_NAME(r) ukernel_avx2_##r##x16_b
#include "backend/cpu/kernels/gemm_short_rows.inc"
static const gemm_ukernel_fn avx2_short_rows[] = UK_SHORT_TABLE;
static const gemm_strided_b_fn avx2_rows_b[] = UK_SHORT_B_TABLE(ukernel_avx2_6x16_b);
#undef UK_SHORT_TABLE
#undef UK_SHORT_B_TABLE
#undef UK_SHORT_NAME
#undef UK_SHORT_B_NAME
#undef UK_ASTEP
#undef UK_NV

#define UK_NAME ukernel_avx2_12x32
#define UK_STRIDED_NAME ukernel_avx2_12x32_strided
#define UK_STRIDED_B_NAME ukernel_avx2_12x32_b
#define UK_HALF_NAME ukernel_avx2_12x16
#define UK_MR 12
#define UK_NV 4
#include "backend/cpu/kernels/gemm_ukernel.inc"
#undef UK_NAME
#undef UK_STRIDED_NAME
#undef UK_STRIDED_B_NAME
#undef UK_HALF_NAME
#undef UK_MR

/* The AVX-512 tile's short rows, for tests. */
#define UK_ASTEP 12
#define UK_SHORT_NAME(r) ukernel_avx2_##r##x32
#define UK_SHORT_B_NAME(r) ukernel_avx2_##r##x32_b
#include "backend/cpu/kernels/gemm_short_rows.inc"
static const gemm_ukernel_fn avx2_wide_short_rows[] = UK_SHORT_TABLE;
static const gemm_strided_b_fn avx2_wide_rows_b[] = UK_SHORT_B_TABLE(ukernel_avx2_12x32_b);
#undef UK_SHORT_TABLE
#undef UK_SHORT_B_TABLE
#undef UK_SHORT_NAME
#undef UK_SHORT_B_NAME
#undef UK_ASTEP
#undef UK_NV

/* The 6x16 shape's last tiles of 1 to 4 columns: 6 of 8 lanes. */
#define NARROW_NAME(nc) ukernel_avx2_6x##nc
#define NARROW_MR 6
#define NARROW_NR 16
#define NARROW_LOAD_A(p) _mm256_maskload_ps((p), _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0))
#include "backend/cpu/kernels/gemm_narrow.inc"
#undef NARROW_NAME
#undef NARROW_MR
#undef NARROW_NR
#undef NARROW_LOAD_A

/* Eight rows of eight floats, transposed in registers: out[j] holds
 * element j of every row. */
UK_TARGET static inline __attribute__((always_inline)) void transpose8(const __m256 r[8], __m256 out[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; h++) { /* rows 0-3, then 4-7 */
    __m256 *v = t + 4 * h, *w = u + 4 * h;
    w[0] = _mm256_shuffle_ps(v[0], v[2], 0x44);
    w[1] = _mm256_shuffle_ps(v[0], v[2], 0xEE);
    w[2] = _mm256_shuffle_ps(v[1], v[3], 0x44);
    w[3] = _mm256_shuffle_ps(v[1], v[3], 0xEE);
  }
  for (int j = 0; j < 4; j++) {
    out[j] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x20);
    out[j + 4] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x31);
  }
}

/* Eight steps (q..q+7) of `rows` <= 8 stored rows, ld apart, transposed:
 * out[j] holds step j of every row. Past `rows`, the last row is read
 * again (its lanes are not stored), so that nothing outside the rows is
 * touched. */
UK_TARGET static inline __attribute__((always_inline)) void
load_steps(const float *a, int64_t ld, int rows, int64_t q, __m256 out[8]) {
  __m256 r[8];
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(a + (i < rows ? i : rows - 1) * ld + q);
  transpose8(r, out);
}

/* One full `width`-wide panel of a transposed B: `width` stored rows, kc
 * floats each, become kc steps of `width` floats, eight steps per 8 x 8
 * transpose of each eight rows (the scalar loop would move one float per
 * load). */
UK_TARGET static inline __attribute__((always_inline)) void
pack_bt_avx2(const float *b, int64_t ldb, int64_t kc, int width, float *dst) {
  int64_t q = 0;
  for (; q + 8 <= kc; q += 8, dst += 8 * width)
    for (int part = 0; part < width / 8; part++) {
      __m256 o[8];
      load_steps(b + part * 8 * ldb, ldb, 8, q, o);
      for (int j = 0; j < 8; j++) _mm256_store_ps(dst + j * width + part * 8, o[j]);
    }
  for (; q < kc; q++, dst += width)
    for (int c = 0; c < width; c++) dst[c] = b[c * ldb + q];
}

UK_TARGET static void pack_bt_avx2_16(const float *b, int64_t ldb, int64_t kc, float *dst) {
  pack_bt_avx2(b, ldb, kc, 16, dst);
}

UK_TARGET void gemm_pack_bt32_avx2(const float *b, int64_t ldb, int64_t kc, float *dst) {
  pack_bt_avx2(b, ldb, kc, 32, dst);
}

/* One full 6-row panel of a plain A: 6 stored rows, kc floats each, become
 * kc steps of 6 floats, eight steps per 8x8 transpose. Each step's 8-float
 * store runs 2 floats into the next step's place, which the next store
 * overwrites; the eighth stores exactly 6. */
UK_TARGET static void pack_a_avx2_6(const float *a, int64_t lda, int64_t kc, float *dst) {
  int64_t q = 0;
  for (; q + 8 <= kc; q += 8, dst += 8 * 6) {
    __m256 o[8];
    load_steps(a, lda, 6, q, o);
    for (int j = 0; j < 7; j++) _mm256_storeu_ps(dst + j * 6, o[j]);
    _mm_storeu_ps(dst + 42, _mm256_castps256_ps128(o[7]));
    _mm_storel_pi((__m64 *)(dst + 46), _mm256_extractf128_ps(o[7], 1));
  }
  for (; q < kc; q++, dst += 6)
    for (int r = 0; r < 6; r++) dst[r] = a[r * lda + q];
}

/* The same for 12 rows: rows 0-7 and 8-11 transposed apart. */
UK_TARGET void gemm_pack_a12_avx2(const float *a, int64_t lda, int64_t kc, float *dst) {
  int64_t q = 0;
  for (; q + 8 <= kc; q += 8, dst += 8 * 12) {
    __m256 lo[8], hi[8];
    load_steps(a, lda, 8, q, lo);
    load_steps(a + 8 * lda, lda, 4, q, hi);
    for (int j = 0; j < 8; j++) {
      _mm256_storeu_ps(dst + j * 12, lo[j]);
      _mm_storeu_ps(dst + j * 12 + 8, _mm256_castps256_ps128(hi[j]));
    }
  }
  for (; q < kc; q++, dst += 12)
    for (int r = 0; r < 12; r++) dst[r] = a[r * lda + q];
}

static int avx2_supported(void) {
  return core_isa_allows(CORE_ISA_AVX2) && __builtin_cpu_supports("avx2") &&
         __builtin_cpu_supports("fma");
}

/* Blocks measured on a Zen 3 core (32 KiB L1d, 512 KiB L2): see
 * docs/contractions.md. */
#ifndef AVX2_MC
#define AVX2_MC 144
#define AVX2_KC 256
#define AVX2_NC 4096
#endif
const gemm_isa_t gemm_isa_avx2 = {.name = "avx2", .supported = avx2_supported,
                                  .kernel = ukernel_avx2_6x16, .mr = 6, .nr = 16,
                                  .mc = AVX2_MC, .kc = AVX2_KC, .nc = AVX2_NC,
                                  .pack_bt = pack_bt_avx2_16, .pack_a = pack_a_avx2_6,
                                  .kernel_half = ukernel_avx2_6x8,
                                  .kernel_narrow = {NULL, ukernel_avx2_6x1, ukernel_avx2_6x2,
                                                    ukernel_avx2_6x3, ukernel_avx2_6x4},
                                  .kernel_rows = avx2_short_rows,
                                  .kernel_strided_a = ukernel_avx2_6x16_strided,
                                  /* bench_gemm step m,512,k,0,0: 1.1-1.2x
                                   * packed at 16-36 rows; at 48 rows with
                                   * rows 4 KiB apart (n = 1024), 0.9x */
                                  .kernel_rows_b = avx2_rows_b, .b_in_place_rows = 36};
const gemm_isa_t gemm_isa_avx2_wide = {.name = "avx2_wide", .supported = avx2_supported,
                                       .kernel = ukernel_avx2_12x32, .mr = 12, .nr = 32,
                                       .mc = 144, .kc = 256, .nc = 4096,
                                       .pack_bt = gemm_pack_bt32_avx2,
                                       .pack_a = gemm_pack_a12_avx2,
                                       .kernel_half = ukernel_avx2_12x16,
                                       .kernel_rows = avx2_wide_short_rows,
                                       .kernel_strided_a = ukernel_avx2_12x32_strided,
                                       .kernel_rows_b = avx2_wide_rows_b,
                                       .b_in_place_rows = 48};
