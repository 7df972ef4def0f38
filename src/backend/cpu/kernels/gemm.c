/* The blocked GEMM driver (BLIS's loop nest): for each nc-wide column
 * panel of C and each kc-deep slice of k, B[kc x nc] is packed into
 * nr-wide micro-panels that stay in L3; for each mc-tall row block, A[mc x
 * kc] is packed into mr-tall micro-panels that stay in L2; the micro-kernel
 * then sweeps mr x nr tiles of C with a B micro-panel in L1. Work is split
 * into tasks (batch items, and column or row ranges of one item) over the
 * pool; each task runs the whole loop nest with its own packing buffers. */
#include "backend/cpu/kernels/gemm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels/gemm_impl.h"

/* ---- Choosing the micro-kernel --------------------------------------- */

static const gemm_isa_t *const isa_by_preference[] = {
    &gemm_isa_avx512, &gemm_isa_avx2, &gemm_isa_portable};
static const gemm_isa_t *const isa_all[] = {
    &gemm_isa_avx512, &gemm_isa_avx2, &gemm_isa_avx2_wide, &gemm_isa_portable};

static const gemm_isa_t *_Atomic isa_active;

static const gemm_isa_t *isa_best(void) {
  size_t n = sizeof isa_by_preference / sizeof *isa_by_preference;
  for (size_t i = 0; i < n; i++)
    if (isa_by_preference[i]->supported()) return isa_by_preference[i];
  return &gemm_isa_portable;
}

static const gemm_isa_t *isa_current(void) {
  const gemm_isa_t *isa = atomic_load_explicit(&isa_active, memory_order_acquire);
  if (!isa) {
    /* Racing first calls all store the same answer. */
    isa = isa_best();
    atomic_store_explicit(&isa_active, isa, memory_order_release);
  }
  return isa;
}

int kern_gemm_force_isa(const char *name) {
  if (!name) {
    atomic_store(&isa_active, isa_best());
    return 1;
  }
  for (size_t i = 0; i < sizeof isa_all / sizeof *isa_all; i++)
    if (strcmp(isa_all[i]->name, name) == 0) {
      if (!isa_all[i]->supported()) return 0;
      atomic_store(&isa_active, isa_all[i]);
      return 1;
    }
  return 0;
}

const char *kern_gemm_isa(void) { return isa_current()->name; }

/* ---- Packing buffers ------------------------------------------------- */

/* Buffers outlive calls so that the steady state allocates nothing (and
 * touches no fresh pages, which cost ~12 us per 4 KiB here). A task claims
 * a free slot for its duration; slots are never freed, so they stay
 * reachable for leak checkers. */
enum { SLOTS = 64 };

typedef struct slot {
  atomic_int busy;
  float *a, *b;
  size_t a_cap, b_cap; /* floats */
} slot_t;

static slot_t slots[SLOTS];

static int grow(float **buf, size_t *cap, size_t need) {
  if (*cap >= need) return 1;
  free(*buf);
  *cap = 0;
  *buf = aligned_alloc(64, (need * sizeof(float) + 63) / 64 * 64);
  if (!*buf) return 0;
  *cap = need;
  return 1;
}

/* A slot with room for isa's blocks, or NULL (all busy, or no memory). */
static slot_t *slot_claim(const gemm_isa_t *isa) {
  size_t a_need = (size_t)isa->mc * (size_t)isa->kc;
  size_t b_need = (size_t)isa->kc * (size_t)isa->nc;
  for (int i = 0; i < SLOTS; i++) {
    if (atomic_exchange_explicit(&slots[i].busy, 1, memory_order_acquire)) continue;
    slot_t *s = &slots[i];
    if (grow(&s->a, &s->a_cap, a_need) && grow(&s->b, &s->b_cap, b_need)) return s;
    atomic_store_explicit(&s->busy, 0, memory_order_release);
    return NULL;
  }
  return NULL;
}

void kern_gemm_reserve(int tasks) {
  const gemm_isa_t *isa = isa_current();
  size_t a_need = (size_t)isa->mc * (size_t)isa->kc;
  size_t b_need = (size_t)isa->kc * (size_t)isa->nc;
  /* a task claims the first free slot: with at most `tasks` running, one
   * of the first `tasks` slots is always free */
  for (int i = 0; i < tasks && i < SLOTS; i++) {
    slot_t *s = &slots[i];
    if (atomic_exchange_explicit(&s->busy, 1, memory_order_acquire)) continue;
    if (grow(&s->a, &s->a_cap, a_need)) grow(&s->b, &s->b_cap, b_need);
    atomic_store_explicit(&s->busy, 0, memory_order_release);
  }
}

static void slot_release(slot_t *s) {
  if (s) atomic_store_explicit(&s->busy, 0, memory_order_release);
}

/* ---- Packing --------------------------------------------------------- */

/* mr rows, each contiguous along k (the common case: unrolled for the
 * usual tile heights, with no index arithmetic). */
static inline __attribute__((always_inline)) void
pack_a_rows(const float *const *src, int64_t kc, int mr, float *dst) {
  for (int64_t q = 0; q < kc; q++, dst += mr)
    for (int r = 0; r < mr; r++) dst[r] = src[r][q];
}

/* kc steps of one run of `width` floats each, rows ld apart, into a
 * panel: a transposed A's panel (dW = X^T dY) or a plain B's. The width
 * is a constant at each call, so the copy is a few vector moves (a memcpy
 * call per 24 or 64 bytes cost more than the copy). */
static inline __attribute__((always_inline)) void
pack_runs(const float *src, int64_t ld, int64_t kc, int width, float *dst) {
  for (int64_t q = 0; q < kc; q++, dst += width, src += ld)
    for (int r = 0; r < width; r++) dst[r] = src[r];
}

/* A last panel of rows < mr plain rows (src[r], kc floats each): copied
 * into a full-height block with zero rows, then packed with the ISA's
 * transposes (the element loop it replaces took half of an LSTM's
 * packing, whose batch of 64 rows ends in a 4-row panel). */
enum { SHORT_FLOATS = 12 * 256 }; /* mr x kc of the largest tile */

static __attribute__((noinline)) void pack_a_short(const float *const *src, int64_t rows,
                                                   int64_t kc, const gemm_isa_t *isa,
                                                   float *dst) {
  _Alignas(64) float block[SHORT_FLOATS];
  for (int r = 0; r < isa->mr; r++) {
    if (r < rows) memcpy(block + r * kc, src[r], (size_t)kc * sizeof(float));
    else memset(block + r * kc, 0, (size_t)kc * sizeof(float));
  }
  isa->pack_a(block, kc, kc, dst);
}

/* Full nr-wide panels of a plain B, `panels` of them side by side, eight
 * rows of k at a time across all panels: the eight rows stream in order,
 * where one panel's kc rows, ldb apart, each opened a new page (a 1 MiB
 * slice of a 1024-wide B from memory: 0.42 -> 0.24 ms). A transposed A's
 * panels are the same runs, mr wide. */
static inline __attribute__((always_inline)) void
pack_b_plain(const float *b, int64_t ldb, int64_t kc, int64_t panels, int nr, float *dst) {
  int64_t q = 0;
  for (; q + 8 <= kc; q += 8)
    for (int64_t j = 0; j < panels; j++)
      pack_runs(b + q * ldb + j * nr, ldb, 8, nr, dst + j * nr * kc + q * nr);
  for (int64_t j = 0; j < panels && q < kc; j++)
    pack_runs(b + q * ldb + j * nr, ldb, kc - q, nr, dst + j * nr * kc + q * nr);
}

/* Floats in 4 KiB, the period of the L1's set index. */
enum { ALIAS_FLOATS = 1024 };

/* One mr-tall panel of a transposed A (rows <= mr of its columns, zeros
 * below), from run: k step q's floats at run + q * lda. */
static void pack_a_panel(const gemm_problem_t *p, const gemm_isa_t *isa, const float *run,
                         int64_t rows, int64_t kc, float *dst) {
  int mr = isa->mr;
  if (rows == mr && mr == 6) pack_runs(run, p->lda, kc, 6, dst);
  else if (rows == mr && mr == 12) pack_runs(run, p->lda, kc, 12, dst);
  else
    for (int64_t q = 0; q < kc; q++)
      for (int r = 0; r < mr; r++) dst[q * mr + r] = r < rows ? run[q * p->lda + r] : 0.0f;
}

/* A[ic:ic+mc, pc:pc+kc] into mr-tall panels: panel q holds, for each of kc
 * steps, mr consecutive rows (zeros past mc). The rows of a panel are read
 * side by side, so that the stores are sequential and the loads form mr
 * concurrent streams: A is often read from memory exactly once per call
 * (conv weights), and a row at a time would wait on each line in turn. */
static void pack_a(const gemm_problem_t *p, const gemm_isa_t *isa, const float *a,
                   int64_t ic, int64_t mc, int64_t pc, int64_t kc, float *dst) {
  int mr = isa->mr;
  const float *src[32];
  for (int64_t i0 = 0; i0 < mc; i0 += mr, dst += (int64_t)mr * kc) {
    int64_t rows = mc - i0 < mr ? mc - i0 : mr;
    if (p->trans_a) {
      /* step q of the panel: mr floats of stored row pc + q */
      const float *run = a + pc * p->lda + ic + i0;
      int64_t full = i0 == 0 && p->lda % ALIAS_FLOATS == 0 && (mr == 6 || mr == 12) ? mc / mr : 0;
      if (full) {
        /* Stored rows 4 KiB apart fall in one L1 set, so a panel's kc
         * rows evict each other before the next panel reads them: the
         * full panels all at once, eight stored rows at a time, instead
         * (dW of a 1024-wide layer: 5-8% faster; at 1 and 3 KiB it is
         * 2-6% slower). */
        if (mr == 6) pack_b_plain(run, p->lda, kc, full, 6, dst);
        else pack_b_plain(run, p->lda, kc, full, 12, dst);
        i0 += (full - 1) * mr;
        dst += (full - 1) * mr * kc;
        continue;
      }
      pack_a_panel(p, isa, run, rows, kc, dst);
      continue;
    }
    for (int r = 0; r < rows; r++) src[r] = a + (ic + i0 + r) * p->lda + pc;
    if (rows == mr && isa->pack_a) {
      /* Rows of a few hundred bytes end before the hardware prefetcher
       * has caught on: the next panel's rows are fetched during this one. */
      for (int64_t r = i0 + mr; r < i0 + 2 * mr && r < mc; r++)
        for (int64_t q = 0; q < kc; q += 16) __builtin_prefetch(a + (ic + r) * p->lda + pc + q);
      isa->pack_a(src[0], p->lda, kc, dst);
    } else if (rows == mr && mr == 6) pack_a_rows(src, kc, 6, dst);
    else if (rows == mr && mr == 12) pack_a_rows(src, kc, 12, dst);
    else if (isa->pack_a && kc * mr <= SHORT_FLOATS) pack_a_short(src, rows, kc, isa, dst);
    else
      for (int64_t q = 0; q < kc; q++)
        for (int r = 0; r < mr; r++) dst[q * mr + r] = r < rows ? src[r][q] : 0.0f;
  }
}

/* B[pc:pc+kc, jc:jc+nc] of a plain matrix into nr-wide panels. A
 * transposed B (a linear layer's weight) is read nr rows side by side, like
 * pack_a's rows. */
void gemm_pack_b_matrix(const gemm_problem_t *p, int64_t item, int64_t pc,
                          int64_t kc, int64_t jc, int64_t nc, int nr,
                          float *dst) {
  const float *b = p->b + gemm_offset(p->sb, p->groups, item);
  const gemm_isa_t *isa = isa_current();
  if (!p->trans_b && (nr == 16 || nr == 32)) {
    /* The full panels; the loop below packs the last, partial one. */
    int64_t full = nc / nr, j0 = full * nr;
    if (nr == 16) pack_b_plain(b + pc * p->ldb + jc, p->ldb, kc, full, 16, dst);
    else pack_b_plain(b + pc * p->ldb + jc, p->ldb, kc, full, 32, dst);
    jc += j0;
    nc -= j0;
    dst += j0 * kc;
  }
  for (int64_t j0 = 0; j0 < nc; j0 += nr, dst += (int64_t)nr * kc) {
    int64_t cols = nc - j0 < nr ? nc - j0 : nr;
    if (p->trans_b && cols == nr && isa->pack_bt && isa->nr == nr) {
      isa->pack_bt(b + (jc + j0) * p->ldb + pc, p->ldb, kc, dst);
    } else if (p->trans_b) {
      const float *src[32];
      for (int64_t c = 0; c < cols; c++) src[c] = b + (jc + j0 + c) * p->ldb + pc;
      float *out = dst;
      for (int64_t q = 0; q < kc; q++, out += nr)
        for (int64_t c = 0; c < cols; c++) out[c] = src[c][q];
    } else {
      for (int64_t q = 0; q < kc; q++)
        memcpy(dst + q * nr, b + (pc + q) * p->ldb + jc + j0,
               (size_t)cols * sizeof(float));
    }
    if (cols < nr)
      for (int64_t q = 0; q < kc; q++)
        memset(dst + q * nr + cols, 0, (size_t)(nr - cols) * sizeof(float));
  }
}

/* ---- The loop nest of one task ---------------------------------------- */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Block sizes and buffers of one task. */
typedef struct blocking {
  const gemm_isa_t *isa;
  int64_t mc, kc, nc;
  float *abuf, *bbuf;
} blocking_t;

/* Bias, then the epilogue, on a finished block of item t: rows [row0,
 * row0 + rows) and columns [col0, col0 + cols) of the item's C. */
static void finish(const gemm_problem_t *p, int64_t t, float *c, int64_t row0,
                   int64_t rows, int64_t col0, int64_t cols) {
  int64_t g = t % p->groups;
  float *tile = c + row0 * p->ldc + col0;
  if (p->bias)
    for (int64_t i = 0; i < rows; i++) {
      float bv = p->bias[g * p->m + row0 + i];
      for (int64_t j = 0; j < cols; j++) tile[i * p->ldc + j] += bv;
    }
  if (p->epilogue && p->epilogue_items)
    p->epilogue(p->epilogue_ctx, t, tile, p->ldc, row0, rows, col0, cols);
  else if (p->epilogue)
    p->epilogue(p->epilogue_ctx, t / p->groups, tile, p->ldc, g * p->m + row0,
                rows, col0, cols);
}

/* An edge tile no dedicated kernel covers, computed full-size into a
 * scratch tile and copied out. Out of line: its 4 KiB frame would
 * otherwise be set up on every call of tile(), edge or not. */
static __attribute__((noinline)) void tile_scratch(const gemm_isa_t *isa, int64_t kc,
                                                   const float *ap, const float *bp, float *c,
                                                   int64_t ldc, int64_t rows, int64_t cols,
                                                   int accumulate) {
  _Alignas(64) float scratch[32 * 32];
  if (cols <= isa->nr / 2 && isa->kernel_half) isa->kernel_half(kc, ap, bp, scratch, isa->nr, 0);
  else isa->kernel(kc, ap, bp, scratch, isa->nr, 0);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      float v = scratch[i * isa->nr + j];
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + v : v;
    }
}

/* One mr x nr tile; edge tiles run a kernel of their shape, else go
 * through a full-size scratch tile. A full-height tile exactly half wide
 * runs the half-width kernel in place, and one a few columns wider runs
 * it and a narrow one (a 7x7 layer's 49 positions end in 17 columns: 16
 * + 1 instead of 32). */
static inline void tile(const gemm_isa_t *isa, int64_t kc, const float *ap, const float *bp,
                        float *c, int64_t ldc, int64_t rows, int64_t cols, int accumulate) {
  int half = isa->nr / 2;
  if (rows == isa->mr && cols == isa->nr) isa->kernel(kc, ap, bp, c, ldc, accumulate);
  else if (cols == isa->nr && isa->kernel_rows)
    isa->kernel_rows[rows](kc, ap, bp, c, ldc, accumulate);
  else if (cols <= GEMM_NARROW && isa->kernel_narrow[cols])
    isa->kernel_narrow[cols](kc, ap, bp, c, ldc, accumulate, rows);
  else if (rows == isa->mr && cols == half && isa->kernel_half)
    isa->kernel_half(kc, ap, bp, c, ldc, accumulate);
  else if (rows == isa->mr && cols > half && cols - half <= GEMM_NARROW && isa->kernel_half &&
           isa->kernel_narrow[cols - half]) {
    isa->kernel_half(kc, ap, bp, c, ldc, accumulate);
    isa->kernel_narrow[cols - half](kc, ap, bp + half, c + half, ldc, accumulate, rows);
  } else tile_scratch(isa, kc, ap, bp, c, ldc, rows, cols, accumulate);
}

/* The epilogue runs on spans of this many columns of a row block: an
 * epilogue that streams other arrays (AdamW's weights and moments) reads
 * each of their rows a span at a time, and the prefetchers only pick up
 * speed on long runs. One nr-wide strip (64 bytes a row) made the MLP's
 * training step 2x slower than 256 columns (1 KiB), and 2048 columns
 * are faster again, with the span's C in L3 rather than L2 by then: the
 * training steps, 256 -> 2048 columns, alternated in one process, MLP
 * 1.18x at 1 thread, ResNet-18 1.02-1.03x, Transformer and ViT 1.01-1.02x
 * at 2 threads (a ResNet-18 512-channel weight gradient's AdamW epilogue
 * streams 28 MB). */
enum { FINISH_COLS = 2048 };
/* With a bias (a convolution's), the block is finished in spans of 256
 * columns: the bias is a pass over C of its own before the epilogue, and
 * an epilogue of a convolution (an activation, a residual) reads little
 * else, so the span should stay in L2 between the kernel, the bias and
 * the epilogue (96 rows x 2048 columns is 768 KB). MobileNetV2's 96 x
 * 12544 x 16 expansion with its clamp, 1 thread, fastest step: 0.51-0.54
 * -> 0.38-0.41 ms. */
enum { FINISH_COLS_BIAS = 256 };

/* The block of C one macro-kernel call computes: item t's rows [ic, ic +
 * mc) and columns [jc, jc + nc), over kc steps of k. accumulate: add to C;
 * last: the final kc block, after which C's spans are finished. */
typedef struct cblock {
  int64_t t, ic, mc, jc, nc, pc, kc;
  int accumulate, last;
} cblock_t;

/* The row tiles of column panel jr (cols wide) of block b, with B read in
 * place at bdirect (its k step p at bdirect + p * ldb; A packed). */
static void b_in_place_tiles(const gemm_problem_t *p, const blocking_t *bk,
                             const float *ablock, const float *bdirect, float *c,
                             const cblock_t *b, int64_t jr) {
  const gemm_isa_t *isa = bk->isa;
  for (int64_t ir = 0; ir < b->mc; ir += isa->mr) {
    int64_t rows = b->mc - ir < isa->mr ? b->mc - ir : isa->mr;
    float *ct = c + (b->ic + ir) * p->ldc + b->jc + jr;
    isa->kernel_rows_b[rows](b->kc, ablock + ir * b->kc, bdirect + jr, p->ldb, ct, p->ldc,
                             b->accumulate);
  }
}

/* The row tiles of column panel jr (cols wide) of block b, with B packed
 * at bp: A packed (ablock), or, with adirect, read in place from a stored
 * A^T (its k step p at adirect + p * lda) by the full tiles, edge tiles
 * packing their panel first. */
static void packed_b_tiles(const gemm_problem_t *p, const blocking_t *bk, const float *ablock,
                           const float *adirect, const float *bp, float *c, const cblock_t *b,
                           int64_t jr, int64_t cols) {
  const gemm_isa_t *isa = bk->isa;
  for (int64_t ir = 0; ir < b->mc; ir += isa->mr) {
    int64_t rows = b->mc - ir < isa->mr ? b->mc - ir : isa->mr;
    float *ct = c + (b->ic + ir) * p->ldc + b->jc + jr;
    if (!adirect) {
      tile(isa, b->kc, ablock + ir * b->kc, bp, ct, p->ldc, rows, cols, b->accumulate);
    } else if (rows == isa->mr && cols == isa->nr) {
      isa->kernel_strided_a(b->kc, adirect + ir, p->lda, bp, ct, p->ldc, b->accumulate);
    } else {
      pack_a_panel(p, isa, adirect + ir, rows, b->kc, bk->abuf);
      tile(isa, b->kc, bk->abuf, bp, ct, p->ldc, rows, cols, b->accumulate);
    }
  }
}

/* C block (+)= A block @ B panel; with `last`, finished spans of columns
 * are handed to finish() while in cache. A as packed_b_tiles takes it. B
 * is packed (bpanel), or, with bdirect, read in place from a plain B (its
 * k step p at bdirect + p * ldb; A then packed): full column panels read
 * it there, a last narrower one packs its panel into the B buffer. */
static void macro_kernel(const gemm_problem_t *p, const blocking_t *bk, const float *ablock,
                         const float *adirect, const float *bpanel, const float *bdirect,
                         float *c, const cblock_t *b) {
  const gemm_isa_t *isa = bk->isa;
  int epilogue = b->last && (p->bias || p->epilogue);
  int64_t span = p->bias ? FINISH_COLS_BIAS : FINISH_COLS;
  int64_t done = 0; /* columns finished so far */
  for (int64_t jr = 0; jr < b->nc; jr += isa->nr) {
    int64_t cols = b->nc - jr < isa->nr ? b->nc - jr : isa->nr;
    if (bdirect && cols == isa->nr) {
      b_in_place_tiles(p, bk, ablock, bdirect, c, b, jr);
    } else if (bdirect) {
      p->pack_b(p, b->t, b->pc, b->kc, b->jc + jr, cols, isa->nr, bk->bbuf);
      packed_b_tiles(p, bk, ablock, NULL, bk->bbuf, c, b, jr, cols);
    } else {
      packed_b_tiles(p, bk, ablock, adirect, bpanel + jr * b->kc, c, b, jr, cols);
    }
    if (epilogue && (jr + cols - done >= span || jr + cols == b->nc)) {
      finish(p, b->t, c, b->ic, b->mc, b->jc + done, jr + cols - done);
      done = jr + cols;
    }
  }
}

/* Whether the A blocks of columns [n0, n1) are read in place rather than
 * packed: a transposed A, whose stored rows hold each panel's k steps as
 * runs of mr floats, for at most four column panels, where packing would
 * copy every float of A to read it at most four times (a ResNet-18 layer4
 * input gradient, W^T of 4608 x 512 against 32 positions, spent a third of
 * its time packing W; at 16 panels reading in place was 3% slower). */
static int reads_a_in_place(const gemm_problem_t *p, const gemm_isa_t *isa, int64_t n0,
                            int64_t n1) {
  return p->trans_a && isa->kernel_strided_a && !p->a_packed && n1 - n0 <= 4 * isa->nr;
}

/* Whether a plain B is read in place rather than packed: for products of
 * few rows (gemm_isa_t.b_in_place_rows), where packing copies every float
 * of B to read it a few times (an RNN cell's batch of 16 rows against its
 * weights spent a quarter of its time packing them). */
static int reads_b_in_place(const gemm_problem_t *p, const gemm_isa_t *isa, int64_t rows) {
  return !p->trans_b && p->pack_b == gemm_pack_b_matrix && isa->kernel_rows_b &&
         rows <= isa->b_in_place_rows;
}

/* k = 0: the product is zeros. */
static void zero_block(const gemm_problem_t *p, int64_t t, float *c,
                       int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  for (int64_t i = m0; i < m1; i++)
    memset(c + i * p->ldc + n0, 0, (size_t)(n1 - n0) * sizeof(float));
  if (p->bias || p->epilogue) finish(p, t, c, m0, m1 - m0, n0, n1 - n0);
}

/* Rows [m0, m1) and columns [n0, n1) of item t's C, summed over k in
 * [k0, k1) (the whole of k but for a split-K part). */
static void gemm_block(const gemm_problem_t *p, const blocking_t *bk, int64_t t,
                       int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t k0,
                       int64_t k1) {
  const float *a = p->a + gemm_offset(p->sa, p->groups, t);
  float *c = p->c + gemm_offset(p->sc, p->groups, t);
  if (p->k == 0) {
    zero_block(p, t, c, m0, m1, n0, n1);
    return;
  }
  const gemm_isa_t *isa = bk->isa;
  int b_in_place = reads_b_in_place(p, isa, m1 - m0);
  for (int64_t jc = n0; jc < n1; jc += bk->nc) {
    int64_t nc = n1 - jc < bk->nc ? n1 - jc : bk->nc;
    for (int64_t pc = k0; pc < k1; pc += bk->kc) {
      int64_t kc = k1 - pc < bk->kc ? k1 - pc : bk->kc;
      /* Prepacked A panels: block pc at pc * mpad, row ic's at ic * kc
       * (ic is a multiple of mr). */
      const float *aset = NULL;
      if (p->a_packed && p->a_kc == bk->kc)
        aset = p->a_packed + (t % p->groups) * p->a_set + pc * p->a_mpad;
      int direct = !aset && reads_a_in_place(p, isa, jc, jc + nc);
      /* Prepacked panels (item t's at its sb offset) of block pc start at
       * pc * npad, column jc's at jc * kc within it (jc is a multiple of
       * nr). Where A is read in place, B is packed. */
      const float *bpanel = bk->bbuf, *bdirect = NULL;
      if (p->b_packed && p->b_kc == bk->kc)
        bpanel = p->b_packed + gemm_offset(p->sb, p->groups, t) + pc * p->b_npad + jc * kc;
      else if (b_in_place && !direct)
        bdirect = p->b + gemm_offset(p->sb, p->groups, t) + pc * p->ldb + jc;
      else p->pack_b(p, t, pc, kc, jc, nc, isa->nr, bk->bbuf);
      for (int64_t ic = m0; ic < m1; ic += bk->mc) {
        cblock_t b = {t, ic, m1 - ic < bk->mc ? m1 - ic : bk->mc, jc, nc, pc, kc, pc > k0,
                      pc + kc >= p->k};
        const float *ablock = bk->abuf;
        if (aset) ablock = aset + ic * kc;
        else if (!direct) pack_a(p, isa, a, ic, b.mc, pc, kc, bk->abuf);
        macro_kernel(p, bk, ablock, direct ? a + pc * p->lda + ic : NULL, bpanel, bdirect, c,
                     &b);
      }
    }
  }
}

/* ---- Tasks over the pool ---------------------------------------------- */

/* Task i is part (i % parts) of item (i / parts); a part is a range of
 * `step` columns (split_n) or rows. */
enum { MAX_SPLIT_K = 4 };
/* A sum this short leaves a fused epilogue most of a tile's time. */
enum { EPILOGUE_BOUND_K = 128 };

typedef struct job {
  const gemm_problem_t *p;
  const gemm_isa_t *isa;
  int64_t parts, step;
  int split_n;
  /* split K: part i sums k blocks [i * blocks / parts, (i + 1) * blocks /
   * parts) of kc into pk[i]'s C (part 0 into C itself, the others into
   * scratch), without bias or epilogue */
  int split_k;
  int64_t kc, kblocks;
  gemm_problem_t pk[MAX_SPLIT_K];
} job_t;

/* Without a free slot (memory exhausted, or more than SLOTS threads), a
 * task still runs, with minimal blocks in buffers on the stack. */
enum { TINY_KC = 64 };

static void run_task(const job_t *j, const blocking_t *bk, int64_t i) {
  const gemm_problem_t *p = j->p;
  if (j->split_k) {
    int64_t b0 = i * j->kblocks / j->parts, b1 = (i + 1) * j->kblocks / j->parts;
    int64_t k1 = b1 * j->kc < p->k ? b1 * j->kc : p->k;
    gemm_block(&j->pk[i], bk, 0, 0, p->m, 0, p->n, b0 * j->kc, k1);
    return;
  }
  int64_t t = i / j->parts, part = i % j->parts;
  int64_t lo = part * j->step, hi = lo + j->step;
  if (j->split_n)
    gemm_block(p, bk, t, 0, p->m, lo, hi < p->n ? hi : p->n, 0, p->k);
  else
    gemm_block(p, bk, t, lo, hi < p->m ? hi : p->m, 0, p->n, 0, p->k);
}

/* Blocks of at most `most` (a multiple of unit) that cut total evenly: k =
 * 784 runs as 4 x 196 rather than 3 x 256 + 16, whose thin last slice
 * would pay a full pass over C for little work. */
static int64_t balanced(int64_t total, int64_t most, int64_t unit) {
  if (total <= 0) return most;
  int64_t blocks = ceil_div(total, most);
  return ceil_div(ceil_div(total, blocks), unit) * unit;
}

/* The columns of B packed at once. With one row block, each B
 * micro-panel feeds only mc / mr tiles, so streaming it from L3 costs
 * more than packing blocks of at most L2_B_BYTES, which stay in L2; A is
 * then read once per block, one pass over mc x kc per nc x mc x kc FMAs.
 * (ResNet-18's 56x56 and 28x28 layers: up to 25% faster; see
 * docs/contractions.md.) */
enum { L2_B_BYTES = 256 << 10 };

static int64_t panel_columns(const gemm_isa_t *isa, int64_t m, int64_t mc, int64_t kc) {
  if (m > mc) return isa->nc;
  int64_t nc = L2_B_BYTES / (kc * (int64_t)sizeof(float)) / isa->nr * isa->nr;
  return nc < isa->nr ? isa->nr : nc > isa->nc ? isa->nc : nc;
}

static void job_body(void *ctx, int64_t begin, int64_t end) {
  const job_t *j = ctx;
  const gemm_isa_t *isa = j->isa;
  slot_t *s = slot_claim(isa);
  if (s) {
    blocking_t bk = {isa, balanced(j->p->m, isa->mc, isa->mr),
                     balanced(j->p->k, isa->kc, 1), isa->nc, s->a, s->b};
    bk.nc = panel_columns(isa, j->p->m, bk.mc, bk.kc);
    for (int64_t i = begin; i < end; i++) run_task(j, &bk, i);
    slot_release(s);
    return;
  }
  _Alignas(64) float abuf[32 * TINY_KC], bbuf[TINY_KC * 32];
  blocking_t bk = {isa, isa->mr, TINY_KC, isa->nr, abuf, bbuf};
  for (int64_t i = begin; i < end; i++) run_task(j, &bk, i);
}

/* ---- Split K ------------------------------------------------------------ */

/* A C with few columns and many rows (a 7x7 conv layer: 49 positions, 512
 * channels, k = 4608) cut by rows makes every part pack all of B, there
 * an im2col as long as the product; cut by k, each part packs only its
 * slice of A and B and sums into a C of its own, then the partial Cs are
 * added and the bias and epilogue applied. The partial Cs live in one
 * buffer that outlives calls, claimed for a call (another GEMM running
 * meanwhile takes the row split). */
static atomic_int split_busy;
static float *split_buf;
static size_t split_cap;

static float *split_claim(size_t floats) {
  if (atomic_exchange_explicit(&split_busy, 1, memory_order_acquire)) return NULL;
  if (grow(&split_buf, &split_cap, floats)) return split_buf;
  atomic_store_explicit(&split_busy, 0, memory_order_release);
  return NULL;
}

static void split_release(void) { atomic_store_explicit(&split_busy, 0, memory_order_release); }

/* Whether p splits by k over `threads`, and into how many parts: a single
 * item whose k has at least two kc blocks a part and whose column tiles
 * are too few to share (they split unevenly), or whose A is too big for
 * every column part to read: a tall A beyond SPLIT_K_A_BYTES comes from
 * memory once a part, where split by k each part reads its own slice of
 * it once. FCN-ResNet50's head (2048 -> 512, 3x3, at 16x16: A 37.7 MB,
 * eight column parts) took 29.7 ms at 2 threads against 26.3 at one. */
enum { SPLIT_K_A_BYTES = 8 << 20 };
static int split_k_parts(const gemm_problem_t *p, const gemm_isa_t *isa, int threads,
                         int64_t kc) {
  int64_t col_tiles = (p->n + isa->nr - 1) / isa->nr, blocks = (p->k + kc - 1) / kc;
  int parts = threads < MAX_SPLIT_K ? threads : MAX_SPLIT_K;
  bool big_a = p->n < p->m && (double)p->m * (double)p->k * sizeof(float) > SPLIT_K_A_BYTES;
  if (p->batch != 1 || (col_tiles >= 4 * threads && !big_a) || blocks < 2 * parts)
    return 0;
  return parts;
}

/* C += the other parts' sums over rows [r0, r1), then bias and epilogue. */
static void split_reduce(void *ctx, int64_t r0, int64_t r1) {
  const job_t *j = ctx;
  const gemm_problem_t *p = j->p;
  for (int64_t r = r0; r < r1; r++) {
    float *c = p->c + r * p->ldc;
    for (int i = 1; i < j->parts; i++) {
      const float *s = j->pk[i].c + r * j->pk[i].ldc;
      for (int64_t q = 0; q < p->n; q++) c[q] += s[q];
    }
  }
  if (p->bias || p->epilogue) finish(p, 0, p->c, r0, r1 - r0, 0, p->n);
}

/* Runs p split by k when that suits it; false: nothing done. */
static int run_split_k(const gemm_problem_t *p, const gemm_isa_t *isa, int threads,
                       core_pool_t *pool);

/* Below this many multiply-adds, waking other threads costs more than it
 * saves. */
enum { PARALLEL_MIN_FMAS = 1 << 16 };

void gemm_run(const gemm_problem_t *p, core_pool_t *pool) {
  if (p->m <= 0 || p->n <= 0 || p->batch <= 0) return;
  const gemm_isa_t *isa = isa_current();
  int threads = core_pool_threads(pool);
  double fmas = (double)p->m * (double)p->n * (double)(p->k > 0 ? p->k : 1) *
                (double)p->batch;
  if (fmas < PARALLEL_MIN_FMAS) threads = 1;
  if (threads > 1 && run_split_k(p, isa, threads, pool)) return;
  job_t j = {.p = p, .isa = isa, .parts = 1, .step = p->n, .split_n = 1};
  /* Items share threads evenly: else split each item along its longer
   * side. Each part packs the whole of the other operand, so cutting the
   * longer side duplicates the smaller packing: columns for wide C (each
   * part packs only its own B, all of A), rows for tall C (conv layers
   * with many channels and few positions, whose weights are the big
   * operand). */
  if (threads > 1 && p->batch % threads != 0 && p->batch < 4 * threads) {
    int64_t col_tiles = ceil_div(p->n, isa->nr), row_tiles = ceil_div(p->m, isa->mr);
    /* With A packed ahead (frozen conv weights), column parts share
     * nothing: a tall C whose rows would each pack all of B (a 14x14
     * layer's im2col, packed twice) splits into a few column parts per
     * thread instead, which the pool balances (its 13 tiles would go 7 +
     * 6, a quarter tile in the 6). */
    int a_ready = p->a_packed && p->a_kc == balanced(p->k, isa->kc, 1);
    if (a_ready && p->n < p->m && col_tiles >= 4 * threads) {
      j.split_n = 1;
      j.step = ceil_div(col_tiles, 4 * threads) * isa->nr;
    } else {
      /* An epilogue that outweighs a short sum (an optimizer update
       * fused into a weight gradient, k = the batch) streams its arrays
       * faster in one contiguous block of rows a thread than in half of
       * every row: the MLP's 512 x 784 AdamW step went 0.36 -> 0.26-0.33
       * ms at 2 threads. Not with A packed ahead (a frozen conv weight,
       * whose epilogue is a bias and an activation): rows would pack all
       * of B twice, columns share nothing (MobileNetV2's 96 x 12544 x 16
       * layer at 2 threads: 0.48 -> 0.31 ms). */
      bool epilogue_bound = p->epilogue && p->k <= EPILOGUE_BOUND_K && !a_ready;
      j.split_n = (p->n >= p->m && !epilogue_bound) || row_tiles < threads;
      int64_t tiles = j.split_n ? col_tiles : row_tiles;
      j.step = ceil_div(tiles, threads) * (j.split_n ? isa->nr : isa->mr);
    }
    j.parts = ceil_div(j.split_n ? p->n : p->m, j.step);
  }
  int64_t tasks = p->batch * j.parts;
  if (threads == 1) job_body(&j, 0, tasks);
  else core_pool_for(pool, tasks, 1, job_body, &j);
}

static int run_split_k(const gemm_problem_t *p, const gemm_isa_t *isa, int threads,
                       core_pool_t *pool) {
  int64_t kc = balanced(p->k, isa->kc, 1);
  int parts = p->k > 0 ? split_k_parts(p, isa, threads, kc) : 0;
  if (!parts) return 0;
  float *scratch = split_claim((size_t)(parts - 1) * (size_t)(p->m * p->n));
  if (!scratch) return 0;
  job_t j = {.p = p, .isa = isa, .parts = parts, .split_k = 1, .kc = kc,
             .kblocks = (p->k + kc - 1) / kc};
  for (int i = 0; i < parts; i++) {
    j.pk[i] = *p;
    j.pk[i].bias = NULL;
    j.pk[i].epilogue = NULL;
    if (i > 0) {
      j.pk[i].c = scratch + (size_t)(i - 1) * (size_t)(p->m * p->n);
      j.pk[i].ldc = p->n;
    }
  }
  core_pool_for(pool, parts, 1, job_body, &j);
  core_pool_for(pool, p->m, 16, split_reduce, &j);
  split_release();
  return 1;
}

/* ---- B packed ahead of time ----------------------------------------- */

/* What a packed B was packed for; its panels follow, 64-byte aligned:
 * for each kc-deep block of k, all columns in nr-wide panels. */
typedef struct packed_head {
  const gemm_isa_t *isa;
  int64_t k, n, kc, npad;
} packed_head_t;

enum { PACKED_HEAD_BYTES = 64 };
_Static_assert(sizeof(packed_head_t) <= PACKED_HEAD_BYTES, "packed head");

size_t kern_gemm_packed_bytes(int64_t k, int64_t n) {
  const gemm_isa_t *isa = isa_current();
  int64_t npad = ceil_div(n, isa->nr) * isa->nr;
  return PACKED_HEAD_BYTES + (size_t)(k * npad) * sizeof(float);
}

void kern_gemm_pack_b(const float *b, int64_t ldb, int trans_b, int64_t k, int64_t n,
                      void *dst) {
  const gemm_isa_t *isa = isa_current();
  packed_head_t *h = dst;
  *h = (packed_head_t){isa, k, n, balanced(k, isa->kc, 1), ceil_div(n, isa->nr) * isa->nr};
  float *data = (float *)((char *)dst + PACKED_HEAD_BYTES);
  gemm_problem_t p = {.m = 0, .n = n, .k = k, .batch = 1, .groups = 1, .b = b,
                      .ldb = ldb, .trans_b = trans_b};
  for (int64_t pc = 0; pc < k; pc += h->kc) {
    int64_t kc = k - pc < h->kc ? k - pc : h->kc;
    gemm_pack_b_matrix(&p, 0, pc, kc, 0, n, isa->nr, data + pc * h->npad);
  }
}

/* ---- A packed ahead of time (conv2d's frozen weights) ----------------- */

typedef struct packed_a_head {
  const gemm_isa_t *isa;
  int64_t m, k, groups, kc, mpad;
} packed_a_head_t;

_Static_assert(sizeof(packed_a_head_t) <= PACKED_HEAD_BYTES, "packed A head");

size_t gemm_packed_a_bytes(int64_t m, int64_t k, int64_t groups) {
  const gemm_isa_t *isa = isa_current();
  int64_t mpad = ceil_div(m, isa->mr) * isa->mr;
  return PACKED_HEAD_BYTES + (size_t)(groups * k * mpad) * sizeof(float);
}

typedef struct pack_ahead {
  const gemm_isa_t *isa;
  const packed_a_head_t *h;
  const float *a;
  int64_t lda, stride;
  float *data;
} pack_ahead_t;

static void pack_ahead_groups(void *ctx, int64_t g0, int64_t g1) {
  const pack_ahead_t *j = ctx;
  const packed_a_head_t *h = j->h;
  gemm_problem_t p = {.m = h->m, .k = h->k, .lda = j->lda};
  for (int64_t g = g0; g < g1; g++)
    for (int64_t pc = 0; pc < h->k; pc += h->kc) {
      int64_t kc = h->k - pc < h->kc ? h->k - pc : h->kc;
      pack_a(&p, j->isa, j->a + g * j->stride, 0, h->m, pc, kc,
             j->data + (g * h->k + pc) * h->mpad);
    }
}

void gemm_pack_a_ahead(const float *a, int64_t lda, int64_t stride, int64_t m, int64_t k,
                       int64_t groups, void *dst, core_pool_t *pool) {
  const gemm_isa_t *isa = isa_current();
  packed_a_head_t *h = dst;
  *h = (packed_a_head_t){isa, m, k, groups, balanced(k, isa->kc, 1),
                         ceil_div(m, isa->mr) * isa->mr};
  pack_ahead_t j = {isa, h, a, lda, stride, (float *)((char *)dst + PACKED_HEAD_BYTES)};
  core_pool_for(pool, groups, 1, pack_ahead_groups, &j);
}

gemm_b_layout_t gemm_b_layout(int64_t k, int64_t n) {
  const gemm_isa_t *isa = isa_current();
  return (gemm_b_layout_t){isa->nr, balanced(k, isa->kc, 1), ceil_div(n, isa->nr) * isa->nr};
}

void gemm_pack_b_packed(const gemm_problem_t *p, int64_t item, int64_t pc, int64_t kc,
                        int64_t jc, int64_t nc, int nr, float *dst) {
  const float *b = p->b + gemm_offset(p->sb, p->groups, item);
  for (int64_t j = 0; j < ceil_div(nc, nr) * nr; j++) {
    int64_t col = jc + j;
    float *out = dst + j / nr * nr * kc + j % nr;
    for (int64_t q = 0; q < kc; q++) {
      int64_t row = pc + q, block = row / p->b_kc * p->b_kc;
      int64_t depth = p->k - block < p->b_kc ? p->k - block : p->b_kc;
      out[q * nr] = j < nc ? b[block * p->b_npad + col / nr * nr * depth +
                               (row - block) * nr + col % nr]
                           : 0.0f;
    }
  }
}

void gemm_use_packed_a(gemm_problem_t *p, const void *packed) {
  const packed_a_head_t *h = packed;
  if (!h || h->isa != isa_current() || h->m != p->m || h->k != p->k ||
      h->groups != p->groups || p->trans_a || (p->batch > p->groups && p->sa.outer != 0))
    return;
  p->a_packed = (const float *)((const char *)h + PACKED_HEAD_BYTES);
  p->a_mpad = h->mpad;
  p->a_kc = h->kc;
  p->a_set = h->k * h->mpad;
}

/* Points p at d's prepacked B when it was packed for this call's shape
 * and the micro-kernel in use (a test may switch kernels after packing). */
static void use_packed(gemm_problem_t *p, const loom_abi_gemm_t *d) {
  const packed_head_t *h = d->b_packed;
  if (!h || h->isa != isa_current() || h->k != d->k || h->n != d->n ||
      (d->batch > 1 && (d->stride_b != 0 || (d->groups > 1 && d->inner_b != 0))))
    return;
  p->b_packed = (const float *)((const char *)h + PACKED_HEAD_BYTES);
  p->b_npad = h->npad;
  p->b_kc = h->kc;
}

void kern_gemm_f32(const loom_abi_gemm_t *d, core_pool_t *pool) {
  gemm_problem_t p = {
      .m = d->m, .n = d->n, .k = d->k, .batch = d->batch,
      .groups = d->groups > 1 ? d->groups : 1,
      .a = d->a, .lda = d->lda, .sa = {d->stride_a, d->inner_a}, .trans_a = d->trans_a,
      .b = d->b, .ldb = d->ldb, .sb = {d->stride_b, d->inner_b}, .trans_b = d->trans_b,
      .pack_b = gemm_pack_b_matrix,
      .c = d->c, .ldc = d->ldc, .sc = {d->stride_c, d->inner_c},
      .epilogue = d->epilogue, .epilogue_ctx = d->epilogue_ctx, .epilogue_items = true};
  use_packed(&p, d);
  gemm_run(&p, pool);
}
