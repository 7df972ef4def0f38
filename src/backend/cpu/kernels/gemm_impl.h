/* Inside the fast GEMM: the micro-kernel table and the problem the blocked
 * driver solves. gemm.c drives, gemm_<isa>.c hold the micro-kernels,
 * conv2d.c poses a convolution as a GEMM whose B operand is packed straight
 * from the image (an implicit im2col). */
#ifndef LOOM_KERNELS_GEMM_IMPL_H
#define LOOM_KERNELS_GEMM_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/pool.h"
#include "backend/cpu/abi.h"

/* C[0:mr, 0:nr] (+)= A_panel @ B_panel over kc steps: a holds mr floats per
 * step, b nr floats per step (both packed, 64-byte aligned); c is row-major
 * with rows ldc apart. accumulate: add to C instead of overwriting it. */
typedef void (*gemm_ukernel_fn)(int64_t kc, const float *a, const float *b,
                                float *c, int64_t ldc, int accumulate);

/* C[0:rows, 0:c] (+)= A_panel @ B_panel for a tile of c columns (the
 * kernel's own constant), rows <= mr; panels as gemm_ukernel_fn's. */
typedef void (*gemm_narrow_fn)(int64_t kc, const float *a, const float *b, float *c,
                               int64_t ldc, int accumulate, int64_t rows);

/* The full tile with A's k step p at a + p * astep: a stored A^T read in
 * place, mr floats of its row p, rows astep floats apart. */
typedef void (*gemm_strided_fn)(int64_t kc, const float *a, int64_t astep, const float *b,
                                float *c, int64_t ldc, int accumulate);

/* The tile reading B in place: k step p's nr floats at b + p * bstep, a
 * plain B's row (any alignment); A packed as for gemm_ukernel_fn. */
typedef void (*gemm_strided_b_fn)(int64_t kc, const float *a, const float *b, int64_t bstep,
                                  float *c, int64_t ldc, int accumulate);

enum { GEMM_NARROW = 4 };

/* One micro-kernel and the cache blocking that suits it. */
typedef struct gemm_isa {
  const char *name;
  int (*supported)(void);
  gemm_ukernel_fn kernel;
  int mr, nr;     /* register tile */
  int mc, kc, nc; /* cache blocks: A block mc x kc in L2, B panel kc x nc in L3 */
  /* Optional: packs one full nr-wide panel of a transposed B (nr rows of
   * the stored matrix, ldb apart, kc floats each) with vector transposes;
   * NULL: the portable loop. */
  void (*pack_bt)(const float *b, int64_t ldb, int64_t kc, float *dst);
  /* Optional: packs one full mr-tall panel of a plain A (mr rows, lda
   * apart, kc floats each) with vector transposes; NULL: the portable
   * loop. */
  void (*pack_a)(const float *a, int64_t lda, int64_t kc, float *dst);
  /* Optional: the left half of a tile, mr x nr/2, still reading nr-wide B
   * panels, for a last tile of at most nr/2 columns (7x7 = 49 positions
   * end in a 1-column tile); NULL: edge tiles run the full kernel. */
  gemm_ukernel_fn kernel_half;
  /* Optional: kernel_narrow[c], 0 < c <= GEMM_NARROW, computes a last
   * tile of c columns and `rows` <= mr rows, vectorized over the rows of
   * the mr-tall A panel (a 49-position conv ends in a 1-column tile, which
   * the half-width kernel computes 8 wide). */
  gemm_narrow_fn kernel_narrow[GEMM_NARROW + 1];
  /* Optional: kernel_rows[r], 0 < r < mr, computes r rows of a
   * full-width tile from mr-tall panels, for a last row tile (NULL: the
   * full kernel into a scratch tile). */
  const gemm_ukernel_fn *kernel_rows;
  /* Optional: the full tile reading a transposed A in place, for products
   * whose few columns would use each packed A panel once (NULL: A is
   * always packed). */
  gemm_strided_fn kernel_strided_a;
  /* Optional: kernel_rows_b[r], 0 < r <= mr, computes r rows of a
   * full-width tile reading B in place, for products of few rows, where
   * packing B would copy each float of it to read it once or twice (an
   * RNN cell's batch of 16 against its weights); NULL: B is always
   * packed. */
  const gemm_strided_b_fn *kernel_rows_b;
  int b_in_place_rows; /* the most rows for which kernel_rows_b is used */
} gemm_isa_t;

/* The AVX2 packers of 12-row A panels and 32-wide transposed B panels,
 * which the AVX-512 tile shares (every AVX-512 CPU has AVX2). */
void gemm_pack_a12_avx2(const float *a, int64_t lda, int64_t kc, float *dst);
void gemm_pack_bt32_avx2(const float *b, int64_t ldb, int64_t kc, float *dst);

extern const gemm_isa_t gemm_isa_avx512, gemm_isa_avx2, gemm_isa_avx2_wide,
    gemm_isa_portable;

/* Forces a micro-kernel by name ("avx512", "avx2", "avx2_wide": the
 * AVX-512 tile shape run with AVX2, for tests on CPUs without AVX-512,
 * "portable"); NULL goes back to the best one. Returns 0 when the CPU
 * lacks it (nothing changes). Not thread-safe: for tests and benchmarks. */
int kern_gemm_force_isa(const char *name);

typedef struct gemm_problem gemm_problem_t;

/* Packs B[pc:pc+kc, jc:jc+nc] of batch item `item` into nr-wide panels,
 * zero-padded to a multiple of nr columns. */
typedef void (*gemm_pack_b_fn)(const gemm_problem_t *p, int64_t item,
                               int64_t pc, int64_t kc, int64_t jc, int64_t nc,
                               int nr, float *dst);

/* Batch item t addresses its operands as base + (t / groups) * outer +
 * (t % groups) * inner, so that a grouped convolution runs its images and
 * groups as one batch; a plain GEMM has groups = 1. */
typedef struct gemm_stride {
  int64_t outer, inner;
} gemm_stride_t;

struct gemm_problem {
  int64_t m, n, k, batch, groups;
  const float *a;
  int64_t lda;
  gemm_stride_t sa;
  int trans_a;
  const float *b; /* read by pack_b */
  int64_t ldb;
  gemm_stride_t sb;
  int trans_b;
  gemm_pack_b_fn pack_b;
  const void *b_ctx; /* pack_b's own data (conv geometry) */
  float *c;
  int64_t ldc;
  gemm_stride_t sc;
  /* B's panels packed ahead, or NULL: item t's at b_packed + its sb
   * offset (sb zero: one B for every item), each kc-deep block pc of k at
   * pc * b_npad, the panel of column jc at jc * kc within it. */
  const float *b_packed;
  int64_t b_npad, b_kc;  /* b_packed: columns padded to nr, k blocking */
  /* A's panels packed ahead (gemm_pack_a_ahead), one set per group (item t
   * reads set t % groups), or NULL: block pc of a set starts at pc * a_mpad,
   * row tile i0's panel at i0 * kc within it. */
  const float *a_packed;
  int64_t a_mpad, a_kc, a_set; /* rows padded to mr, k blocking, floats a set */
  const float *bias; /* per row, offset by (t % groups) * m; may be NULL */
  loom_abi_epilogue_t epilogue;
  void *epilogue_ctx;
  /* The epilogue sees item t and its rows (a batched matmul), not image
   * t / groups and channel (t % groups) * m + row (a grouped conv). */
  bool epilogue_items;
};

/* The pack_b of a plain (possibly transposed) matrix at b, rows ldb apart. */
void gemm_pack_b_matrix(const gemm_problem_t *p, int64_t item, int64_t pc,
                        int64_t kc, int64_t jc, int64_t nc, int nr,
                        float *dst);

/* How the driver blocks a B of k x n that its producer writes packed
 * (Winograd's input transform): nr-wide panels, kc-deep blocks of k,
 * columns padded to npad. Point b and b_packed at it and take
 * gemm_pack_b_packed as pack_b, which serves the blockings that differ
 * (a task without scratch packs in smaller blocks). */
typedef struct gemm_b_layout {
  int64_t nr, kc, npad;
} gemm_b_layout_t;
gemm_b_layout_t gemm_b_layout(int64_t k, int64_t n);
void gemm_pack_b_packed(const gemm_problem_t *p, int64_t item, int64_t pc, int64_t kc,
                        int64_t jc, int64_t nc, int nr, float *dst);

/* A (m x k row-major, rows lda apart; `groups` matrices `stride` floats
 * apart) packed once into the panels the driver would pack, for
 * gemm_use_packed_a: a 64-byte head (micro-kernel, m, k, groups, kc),
 * then per group, per kc-deep block of k, mr-tall panels of every row;
 * the groups split over pool (NULL: the calling thread).
 * gemm_packed_a_bytes sizes the buffer (64-byte aligned). */
size_t gemm_packed_a_bytes(int64_t m, int64_t k, int64_t groups);
void gemm_pack_a_ahead(const float *a, int64_t lda, int64_t stride, int64_t m, int64_t k,
                       int64_t groups, void *dst, core_pool_t *pool);

/* Points p at the A panels of `packed` (gemm_pack_a_ahead) when they were
 * packed for p's shape and groups and the micro-kernel in use, and A is
 * the same matrix for every image (sa.outer == 0); else leaves p as it
 * is, so that the driver packs A itself. */
void gemm_use_packed_a(gemm_problem_t *p, const void *packed);

/* Solves p over the pool (NULL: this thread). */
void gemm_run(const gemm_problem_t *p, core_pool_t *pool);

static inline int64_t gemm_offset(gemm_stride_t s, int64_t groups, int64_t t) {
  return (t / groups) * s.outer + (t % groups) * s.inner;
}

#endif
