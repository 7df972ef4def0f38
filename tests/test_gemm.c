/* The fast f32 GEMM and conv2d (src/backend/cpu/kernels/gemm.h) against naive
 * double-precision loops written here: many shapes (primes, tall and
 * skinny, sizes off the block sizes, k = 0), every transpose, leading
 * dimensions wider than the matrix, broadcast batch strides, 1-3 threads,
 * every micro-kernel this CPU runs, and an epilogue that must see each
 * element exactly once, at the right coordinates, after the sum is done. */
#include <stdlib.h>
#include <string.h>

#include "core/pool.h"
#include "harness.h"
#include "backend/cpu/kernels/gemm.h"
#include "backend/cpu/kernels/gemm_impl.h"

static const char *const isas[] = {"portable", "avx2", "avx2_wide", "avx512"};
enum { N_ISAS = 4, SENTINEL = 12345 };

static float *random_floats(int64_t n) {
  float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) x[i] = (float)test_rand_uniform(-1, 1);
  return x;
}

/* ---- The epilogue that counts ------------------------------------------ */

/* Records each element it sees, checks the tile's address against its
 * coordinates, and maps v to 2v + 1 so that the result shows it ran after
 * the sum (and once). */
typedef struct counter {
  float *c;                /* batch item 0's C */
  int64_t m, n, ldc, stride_c, batch;
  int *seen;               /* batch x m x n */
  _Atomic int bad_address;
} counter_t;

static void count_epilogue(void *ctx, int64_t batch, float *c, int64_t ldc,
                           int64_t row0, int64_t rows, int64_t col0,
                           int64_t cols) {
  counter_t *k = ctx;
  if (batch < 0 || batch >= k->batch || ldc != k->ldc || row0 < 0 ||
      col0 < 0 || row0 + rows > k->m || col0 + cols > k->n ||
      c != k->c + batch * k->stride_c + row0 * ldc + col0) {
    k->bad_address = 1;
    return;
  }
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      k->seen[(batch * k->m + row0 + i) * k->n + col0 + j]++;
      c[i * ldc + j] = 2 * c[i * ldc + j] + 1;
    }
}

/* ---- GEMM ---------------------------------------------------------------- */

typedef struct shape {
  int64_t m, n, k, batch;
  int ta, tb;
  int64_t pad;              /* added to every leading dimension */
  int broadcast_a, broadcast_b;
  int epilogue;
} shape_t;

/* C[b][i][j] in double, from the same strided operands. */
static double ref_at(const loom_abi_gemm_t *d, int64_t b, int64_t i, int64_t j,
                     double *abs_sum) {
  const float *a = d->a + b * d->stride_a, *bm = d->b + b * d->stride_b;
  double s = 0, s_abs = 0;
  for (int64_t p = 0; p < d->k; p++) {
    double x = d->trans_a ? a[p * d->lda + i] : a[i * d->lda + p];
    double y = d->trans_b ? bm[j * d->ldb + p] : bm[p * d->ldb + j];
    s += x * y;
    s_abs += fabs(x * y);
  }
  *abs_sum = s_abs;
  return s;
}

/* Runs one shape and checks every element, the padding and the epilogue. */
static void check_gemm(const shape_t *s, core_pool_t *pool) {
  int64_t rows_a = s->ta ? s->k : s->m, cols_a = s->ta ? s->m : s->k;
  int64_t rows_b = s->tb ? s->n : s->k, cols_b = s->tb ? s->k : s->n;
  int64_t lda = cols_a + s->pad, ldb = cols_b + s->pad, ldc = s->n + s->pad;
  int64_t sa = s->broadcast_a ? 0 : rows_a * lda, sb = s->broadcast_b ? 0 : rows_b * ldb;
  int64_t sc = s->m * ldc;
  float *a = random_floats(rows_a * lda * (s->broadcast_a ? 1 : s->batch));
  float *b = random_floats(rows_b * ldb * (s->broadcast_b ? 1 : s->batch));
  int64_t c_len = sc * s->batch;
  float *c = malloc((size_t)(c_len > 0 ? c_len : 1) * sizeof(float));
  for (int64_t i = 0; i < c_len; i++) c[i] = SENTINEL;
  counter_t k = {c, s->m, s->n, ldc, sc, s->batch,
                 calloc((size_t)(s->batch * s->m * s->n + 1), sizeof(int)), 0};
  loom_abi_gemm_t d = {.m = s->m, .n = s->n, .k = s->k, .batch = s->batch,
                       .a = a, .lda = lda, .stride_a = sa, .trans_a = s->ta,
                       .b = b, .ldb = ldb, .stride_b = sb, .trans_b = s->tb,
                       .c = c, .ldc = ldc, .stride_c = sc,
                       .epilogue = s->epilogue ? count_epilogue : NULL, .epilogue_ctx = &k};
  kern_gemm_f32(&d, pool);
  int wrong = 0, padding = 0, counts = 0;
  for (int64_t bi = 0; bi < s->batch; bi++)
    for (int64_t i = 0; i < s->m; i++) {
      for (int64_t j = 0; j < s->n; j++) {
        double abs_sum, want = ref_at(&d, bi, i, j, &abs_sum);
        if (s->epilogue) want = 2 * want + 1;
        double got = c[bi * sc + i * ldc + j];
        /* Any order of k float sums errs by at most ~k ulps of sum |xy|. */
        double tol = 2e-7 * (double)(s->k > 0 ? s->k : 1) * abs_sum + 1e-6;
        wrong += fabs(got - want) > tol * (s->epilogue ? 2 : 1);
        counts += s->epilogue && k.seen[(bi * s->m + i) * s->n + j] != 1;
      }
      for (int64_t j = s->n; j < ldc; j++) padding += c[bi * sc + i * ldc + j] != SENTINEL;
    }
  if (wrong || padding || counts || k.bad_address)
    test_fail(__FILE__, __LINE__,
              "gemm %s m=%lld n=%lld k=%lld batch=%lld ta=%d tb=%d pad=%lld "
              "bcast=%d%d threads=%d: %d wrong, %d padding, %d counts, bad "
              "address %d",
              kern_gemm_isa(), (long long)s->m, (long long)s->n, (long long)s->k,
              (long long)s->batch, s->ta, s->tb, (long long)s->pad,
              s->broadcast_a, s->broadcast_b, core_pool_threads(pool), wrong,
              padding, counts, (int)k.bad_address);
  test_checks++;
  free(a);
  free(b);
  free(c);
  free(k.seen);
}

static const shape_t gemm_shapes[] = {
    {1, 1, 1, 1, 0, 0, 0, 0, 0, 1},        {37, 53, 29, 1, 0, 0, 0, 0, 0, 1},
    {1000, 3, 7, 1, 0, 0, 1, 0, 0, 1},     {3, 700, 5, 1, 0, 0, 0, 0, 0, 1},
    {7, 19, 600, 1, 0, 0, 0, 0, 0, 1},     {301, 45, 270, 1, 0, 0, 3, 0, 0, 1},
    {5, 4100, 3, 1, 0, 0, 0, 0, 0, 1},     {13, 17, 0, 2, 0, 0, 2, 0, 0, 1},
    {64, 64, 64, 1, 0, 0, 0, 0, 0, 0},     {23, 31, 41, 3, 0, 0, 1, 0, 1, 1},
    {23, 31, 41, 3, 0, 0, 0, 1, 0, 1},     {9, 70, 33, 5, 0, 0, 0, 1, 1, 1},
    {200, 97, 300, 2, 0, 0, 5, 0, 0, 1},   {64, 80, 196, 1, 0, 0, 0, 0, 0, 1},
    {20, 1000, 300, 1, 0, 0, 1, 0, 0, 1}, /* one row block: B in L2-sized column blocks */
    {300, 40, 1100, 1, 0, 0, 2, 0, 0, 1}, /* tall, few columns, long k: split by k */
    {40, 150, 1100, 1, 0, 0, 0, 0, 0, 1}, /* wide but five column tiles, long k: split by k */
    {1000, 40, 300, 1, 0, 0, 24, 0, 0, 1}, /* rows 4 KiB apart: a transposed A by rows */
};

/* A too big for each column part to read (over 8 MB, more rows than
 * columns, ten column tiles): split by k at two threads. Sampled entries
 * against the double sum (every entry of a product this long would make
 * the check the test's cost), the epilogue seen once an element. */
static void gemm_big_a_splits_k(void) {
  core_pool_t *pool;
  CHECK_OK(core_pool_create(2, &pool));
  int64_t m = 530, n = 300, k = 4000;
  float *a = random_floats(m * k), *b = random_floats(k * n), *c = malloc(sizeof(float) * m * n);
  counter_t cnt = {c, m, n, n, m * n, 1, calloc((size_t)(m * n), sizeof(int)), 0};
  loom_abi_gemm_t d = {.m = m, .n = n, .k = k, .batch = 1, .a = a, .lda = k, .b = b, .ldb = n,
                       .c = c, .ldc = n, .epilogue = count_epilogue, .epilogue_ctx = &cnt};
  kern_gemm_f32(&d, pool);
  int wrong = 0, counts = 0;
  for (int64_t e = 0; e < m * n; e++) counts += cnt.seen[e] != 1;
  test_seed(5);
  for (int t = 0; t < 400; t++) {
    int64_t i = test_rand_int(0, m - 1), j = test_rand_int(0, n - 1);
    double abs_sum, want = 2 * ref_at(&d, 0, i, j, &abs_sum) + 1;
    wrong += fabs(c[i * n + j] - want) > 1e-5 * (2 * abs_sum + 1);
  }
  CHECK(wrong == 0 && counts == 0 && !cnt.bad_address);
  free(a), free(b), free(c), free(cnt.seen);
  core_pool_destroy(pool);
}

/* Every shape with each transpose combination, on pools of 1-3 threads. */
static void gemm_shapes_transposes_threads(void) {
  for (int threads = 1; threads <= 3; threads++) {
    core_pool_t *pool = NULL;
    if (threads > 1) CHECK_OK(core_pool_create(threads, &pool));
    for (size_t i = 0; i < sizeof gemm_shapes / sizeof *gemm_shapes; i++)
      for (int t = 0; t < 4; t++) {
        shape_t s = gemm_shapes[i];
        s.ta = t & 1;
        s.tb = t >> 1;
        check_gemm(&s, pool);
      }
    core_pool_destroy(pool);
  }
}

/* The same checks through every micro-kernel this CPU can run. */
static void gemm_every_isa(void) {
  core_pool_t *pool;
  CHECK_OK(core_pool_create(2, &pool));
  for (int i = 0; i < N_ISAS; i++) {
    if (!kern_gemm_force_isa(isas[i])) continue;
    CHECK(strcmp(kern_gemm_isa(), isas[i]) == 0);
    for (size_t j = 0; j < sizeof gemm_shapes / sizeof *gemm_shapes; j++) {
      shape_t s = gemm_shapes[j];
      s.ta = (int)(j & 1);
      s.tb = (int)((j >> 1) & 1);
      check_gemm(&s, j % 2 ? pool : NULL);
    }
  }
  CHECK(kern_gemm_force_isa(NULL));
  CHECK(!kern_gemm_force_isa("no such isa"));
  core_pool_destroy(pool);
}

/* A last tile of every width 1..nr-1 (at most nr/2 runs the half-width
 * kernel), under ragged rows, k of one step, of odd and even length, and
 * over two kc blocks (the second accumulates), for every micro-kernel. */
static void gemm_edge_widths(void) {
  const gemm_isa_t *all[] = {&gemm_isa_portable, &gemm_isa_avx2, &gemm_isa_avx2_wide,
                             &gemm_isa_avx512};
  static const int64_t ks[] = {1, 2, 7, 301};
  for (int i = 0; i < N_ISAS; i++) {
    if (!kern_gemm_force_isa(all[i]->name)) continue;
    for (int w = 1; w < all[i]->nr; w++)
      for (size_t q = 0; q < sizeof ks / sizeof *ks; q++) {
        shape_t s = {2 * all[i]->mr + 1, all[i]->nr + w, ks[q], 1, 0, 0, 1, 0, 0, 1};
        check_gemm(&s, NULL);
      }
  }
  kern_gemm_force_isa(NULL);
}

/* A last row tile of every height 1..mr-1 (the short ones run a kernel
 * of their own), full and half width, k of one step, odd, and over two kc
 * blocks (the second accumulates), both transposes of A and of B (a plain
 * B of so few rows is read in place, a transposed one packed), for every
 * micro-kernel. */
static void gemm_edge_heights(void) {
  const gemm_isa_t *all[] = {&gemm_isa_portable, &gemm_isa_avx2, &gemm_isa_avx2_wide,
                             &gemm_isa_avx512};
  static const int64_t ks[] = {1, 7, 301};
  for (int i = 0; i < N_ISAS; i++) {
    if (!kern_gemm_force_isa(all[i]->name)) continue;
    for (int h = 1; h < all[i]->mr; h++)
      for (size_t q = 0; q < sizeof ks / sizeof *ks; q++)
        for (int t = 0; t < 4; t++) {
          shape_t s = {2 * all[i]->mr + h, 2 * all[i]->nr + 3, ks[q], 1, t & 1, t >> 1, 1,
                       0, 0, 1};
          check_gemm(&s, NULL);
        }
  }
  kern_gemm_force_isa(NULL);
}

/* A transposed and read in place by the full tiles (products of at most
 * one column panel a part): full and ragged row tiles, full and narrow
 * columns (packed per panel), k of one step, odd, over two and three kc
 * blocks (the later ones accumulate), padded rows, with and without an
 * epilogue, split by rows and by columns over two threads, for every
 * micro-kernel. */
static void gemm_transposed_a_in_place(void) {
  const gemm_isa_t *all[] = {&gemm_isa_portable, &gemm_isa_avx2, &gemm_isa_avx2_wide,
                             &gemm_isa_avx512};
  static const int64_t ks[] = {1, 7, 301, 600};
  core_pool_t *pool;
  CHECK_OK(core_pool_create(2, &pool));
  for (int i = 0; i < N_ISAS; i++) {
    if (!kern_gemm_force_isa(all[i]->name)) continue;
    int64_t mr = all[i]->mr, nr = all[i]->nr;
    const int64_t ms[] = {3 * mr, 3 * mr + 5, mr};
    const int64_t ns[] = {nr, nr - 3, 1, 2 * nr};
    for (size_t q = 0; q < sizeof ks / sizeof *ks; q++)
      for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t b = 0; b < sizeof ns / sizeof *ns; b++) {
          shape_t s = {ms[a], ns[b], ks[q], 1, 1, (int)(b & 1), (int64_t)(a + q) % 2 * 3,
                       0, 0, (int)((a + b + q) % 2)};
          check_gemm(&s, NULL);
          check_gemm(&s, pool);
        }
  }
  kern_gemm_force_isa(NULL);
  core_pool_destroy(pool);
}

/* A plain B read in place (products of at most b_in_place_rows rows),
 * and packed one row past that: row counts that end in every kind of row
 * tile, full column tiles and a last narrower one (packed per panel),
 * k of one step, odd, over two kc blocks (the second accumulates), rows of
 * B unaligned (padded leading dimensions), one B for a batch of A, with
 * and without an epilogue, on one thread and split over two, for every
 * micro-kernel. */
static void gemm_plain_b_in_place(void) {
  const gemm_isa_t *all[] = {&gemm_isa_portable, &gemm_isa_avx2, &gemm_isa_avx2_wide,
                             &gemm_isa_avx512};
  core_pool_t *pool;
  CHECK_OK(core_pool_create(2, &pool));
  for (int i = 0; i < N_ISAS; i++) {
    if (!kern_gemm_force_isa(all[i]->name)) continue;
    int64_t mr = all[i]->mr, nr = all[i]->nr, most = all[i]->b_in_place_rows;
    const int64_t ms[] = {1, mr - 1, mr + 1, 2 * mr + 3, most, most + 1};
    const int64_t ns[] = {nr, 3 * nr, 2 * nr + 5, nr - 3};
    const int64_t ks[] = {1, 7, 301};
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
      for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
        for (size_t q = 0; q < sizeof ks / sizeof *ks; q++) {
          if (ms[a] > 2 * mr + 3 && q != 1) continue; /* the long ones once */
          int odd = (int)((a + b + q) % 2);
          shape_t s = {ms[a], ns[b], ks[q], odd ? 3 : 1, 0, 0, odd * 3, 0, odd, !odd};
          check_gemm(&s, NULL);
          check_gemm(&s, pool);
        }
  }
  kern_gemm_force_isa(NULL);
  core_pool_destroy(pool);
}

/* B packed ahead over several column blocks (one row block cuts n into
 * L2-sized blocks) and k blocks: the same bits as packing per call, and
 * the double loop's values. */
static void gemm_packed_b_column_blocks(void) {
  int64_t m = 9, n = 700, k = 300;
  float *a = random_floats(m * k), *b = random_floats(k * n);
  float *c1 = calloc((size_t)(m * n), sizeof(float)), *c2 = calloc((size_t)(m * n), sizeof(float));
  void *packed = aligned_alloc(64, (kern_gemm_packed_bytes(k, n) + 63) / 64 * 64);
  kern_gemm_pack_b(b, n, 0, k, n, packed);
  loom_abi_gemm_t d = {.m = m, .n = n, .k = k, .batch = 1, .a = a, .lda = k,
                       .b = b, .ldb = n, .c = c1, .ldc = n};
  kern_gemm_f32(&d, NULL);
  d.c = c2;
  d.b_packed = packed;
  kern_gemm_f32(&d, NULL);
  CHECK(memcmp(c1, c2, (size_t)(m * n) * sizeof(float)) == 0);
  int wrong = 0;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double abs_sum, want = ref_at(&d, 0, i, j, &abs_sum);
      wrong += fabs(c2[i * n + j] - want) > 2e-7 * (double)k * abs_sum + 1e-6;
    }
  CHECK(wrong == 0);
  free(a);
  free(b);
  free(c1);
  free(c2);
  free(packed);
}

/* gemm_pack_b_packed (a B written in the driver's panels, packed again
 * for a task's other blocking) gives what gemm_pack_b_matrix packs from
 * the plain matrix, for every micro-kernel's nr, blocks of k and columns
 * that straddle the layout's, and a part-filled last panel. */
static void gemm_repacks_packed_b(void) {
  int64_t k = 300, n = 77;
  float *b = random_floats(k * n);
  for (int i = 0; i < N_ISAS; i++) {
    if (!kern_gemm_force_isa(isas[i])) continue;
    gemm_b_layout_t l = gemm_b_layout(k, n);
    float *laid = calloc((size_t)(k * l.npad), sizeof(float));
    gemm_problem_t plain = {.n = n, .k = k, .batch = 1, .groups = 1, .b = b, .ldb = n};
    for (int64_t pc = 0; pc < k; pc += l.kc)
      gemm_pack_b_matrix(&plain, 0, pc, k - pc < l.kc ? k - pc : l.kc, 0, n, (int)l.nr,
                         laid + pc * l.npad);
    gemm_problem_t p = {.n = n, .k = k, .batch = 1, .groups = 1, .b = laid,
                        .b_npad = l.npad, .b_kc = l.kc};
    static const int64_t blocks[][4] = {{0, 64, 0, 77}, {40, 100, 13, 50}, {250, 50, 64, 13}};
    for (int j = 0; j < 3; j++) {
      int64_t pc = blocks[j][0], kc = blocks[j][1], jc = blocks[j][2], nc = blocks[j][3];
      size_t size = (size_t)((nc + l.nr - 1) / l.nr * l.nr * kc);
      float *want = malloc(size * sizeof(float)), *got = malloc(size * sizeof(float));
      gemm_pack_b_matrix(&plain, 0, pc, kc, jc, nc, (int)l.nr, want);
      gemm_pack_b_packed(&p, 0, pc, kc, jc, nc, (int)l.nr, got);
      CHECK(memcmp(want, got, size * sizeof(float)) == 0);
      free(want);
      free(got);
    }
    free(laid);
  }
  CHECK(kern_gemm_force_isa(NULL));
  free(b);
}

/* Items in two levels, as attention reads its heads in place: q and k
 * are (seq x d) blocks of one (batch, seq, 3 x heads x d) QKV array,
 * item (b, h) at b's rows and h's columns; scores = q k^T into a
 * contiguous (batch, heads, seq, seq), then scores v. Checked against
 * loops over the QKV array itself, with the epilogue's coordinates. */
static void gemm_grouped_items(void) {
  enum { B = 3, H = 4, S = 37, D = 16, W = 3 * H * D };
  float *qkv = random_floats(B * S * W), *scores = calloc(B * H * S * S, sizeof(float));
  float *out = calloc(B * H * S * D, sizeof(float));
  for (int threads = 1; threads <= 2; threads++) {
    core_pool_t *pool = NULL;
    if (threads > 1) CHECK(core_pool_create(threads, &pool) == LOOM_OK);
    counter_t k = {scores, S, S, S, S * S, B * H, calloc(B * H * S * S, sizeof(int)), 0};
    loom_abi_gemm_t qk = {.m = S, .n = S, .k = D, .batch = B * H, .groups = H,
                          .a = qkv, .lda = W, .stride_a = S * W, .inner_a = D,
                          .b = qkv + H * D, .ldb = W, .stride_b = S * W, .inner_b = D,
                          .trans_b = 1, .c = scores, .ldc = S, .stride_c = H * S * S,
                          .inner_c = S * S, .epilogue = count_epilogue, .epilogue_ctx = &k};
    kern_gemm_f32(&qk, pool);
    loom_abi_gemm_t pv = {.m = S, .n = D, .k = S, .batch = B * H, .groups = H,
                          .a = scores, .lda = S, .stride_a = H * S * S, .inner_a = S * S,
                          .b = qkv + 2 * H * D, .ldb = W, .stride_b = S * W, .inner_b = D,
                          .c = out, .ldc = D, .stride_c = H * S * D, .inner_c = S * D};
    kern_gemm_f32(&pv, pool);
    int wrong = 0, counts = 0;
    for (int b = 0; b < B; b++)
      for (int h = 0; h < H; h++)
        for (int i = 0; i < S; i++) {
          const float *q = qkv + (b * S + i) * W + h * D;
          for (int j = 0; j < S; j++) {
            const float *kr = qkv + (b * S + j) * W + H * D + h * D;
            double want = 0;
            for (int p = 0; p < D; p++) want += (double)q[p] * kr[p];
            wrong += fabs(scores[((b * H + h) * S + i) * S + j] - (2 * want + 1)) > 1e-4;
            counts += k.seen[((b * H + h) * S + i) * S + j] != 1;
          }
          for (int p = 0; p < D; p++) {
            double want = 0;
            for (int j = 0; j < S; j++)
              want += (double)scores[((b * H + h) * S + i) * S + j] *
                      qkv[(b * S + j) * W + 2 * H * D + h * D + p];
            wrong += fabs(out[((b * H + h) * S + i) * D + p] - want) > 1e-3 * (1 + fabs(want));
          }
        }
    CHECK(wrong == 0 && counts == 0 && !k.bad_address);
    free(k.seen);
    core_pool_destroy(pool);
  }
  free(qkv);
  free(scores);
  free(out);
}

/* Repeated calls give identical results: no state leaks between calls. */
static void gemm_repeatable(void) {
  int64_t m = 50, n = 60, k = 70;
  float *a = random_floats(m * k), *b = random_floats(k * n);
  float *c1 = calloc((size_t)(m * n), sizeof(float)), *c2 = calloc((size_t)(m * n), sizeof(float));
  loom_abi_gemm_t d = {.m = m, .n = n, .k = k, .batch = 1, .a = a, .lda = k,
                       .b = b, .ldb = n, .c = c1, .ldc = n};
  kern_gemm_f32(&d, NULL);
  d.c = c2;
  for (int r = 0; r < 3; r++) kern_gemm_f32(&d, NULL);
  CHECK(memcmp(c1, c2, (size_t)(m * n) * sizeof(float)) == 0);
  free(a);
  free(b);
  free(c1);
  free(c2);
}

/* ---- conv2d -------------------------------------------------------------- */

typedef struct conv_case {
  int64_t n, c, h, w, o, kh, kw, sy, sx, pt, pl, pb, pr, dy, dx, groups;
  int bias, epilogue;
} conv_case_t;

static double conv_ref(const loom_abi_conv2d_t *d, int64_t img, int64_t o,
                       int64_t oy, int64_t ox, double *abs_sum) {
  int64_t cg = d->c / d->groups, g = o / (d->o / d->groups);
  double s = d->bias ? d->bias[o] : 0;
  *abs_sum = fabs(s);
  for (int64_t ci = 0; ci < cg; ci++)
    for (int64_t ky = 0; ky < d->kh; ky++)
      for (int64_t kx = 0; kx < d->kw; kx++) {
        int64_t iy = oy * d->stride[0] - d->pads[0] + ky * d->dilation[0];
        int64_t ix = ox * d->stride[1] - d->pads[1] + kx * d->dilation[1];
        if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w) continue;
        double xy = (double)d->x[((img * d->c + g * cg + ci) * d->h + iy) * d->w + ix] *
                    d->weight[((o * cg + ci) * d->kh + ky) * d->kw + kx];
        s += xy;
        *abs_sum += fabs(xy);
      }
  return s;
}

static void check_conv(const conv_case_t *q, core_pool_t *pool) {
  int64_t ho = (q->h + q->pt + q->pb - q->dy * (q->kh - 1) - 1) / q->sy + 1;
  int64_t wo = (q->w + q->pl + q->pr - q->dx * (q->kw - 1) - 1) / q->sx + 1;
  int64_t cg = q->c / q->groups, positions = ho * wo;
  float *x = random_floats(q->n * q->c * q->h * q->w);
  float *w = random_floats(q->o * cg * q->kh * q->kw);
  float *bias = q->bias ? random_floats(q->o) : NULL;
  float *y = malloc((size_t)(q->n * q->o * positions) * sizeof(float));
  for (int64_t i = 0; i < q->n * q->o * positions; i++) y[i] = SENTINEL;
  counter_t k = {y, q->o, positions, positions, q->o * positions, q->n,
                 calloc((size_t)(q->n * q->o * positions), sizeof(int)), 0};
  loom_abi_conv2d_t d = {q->n, q->c, q->h, q->w, q->o, q->kh, q->kw, ho, wo,
                         {q->sy, q->sx}, {q->pt, q->pl, q->pb, q->pr},
                         {q->dy, q->dx}, q->groups, x, w, bias, y,
                         q->epilogue ? count_epilogue : NULL, &k, NULL};
  kern_conv2d_f32(&d, KERN_CONV_DEFAULT, pool);
  int wrong = 0, counts = 0;
  for (int64_t img = 0; img < q->n; img++)
    for (int64_t o = 0; o < q->o; o++)
      for (int64_t p = 0; p < positions; p++) {
        double abs_sum, want = conv_ref(&d, img, o, p / wo, p % wo, &abs_sum);
        if (q->epilogue) want = 2 * want + 1;
        double got = y[(img * q->o + o) * positions + p];
        double tol = 2e-7 * (double)(cg * q->kh * q->kw + 1) * abs_sum + 1e-6;
        wrong += fabs(got - want) > tol * (q->epilogue ? 2 : 1);
        counts += q->epilogue && k.seen[(img * q->o + o) * positions + p] != 1;
      }
  if (wrong || counts || k.bad_address)
    test_fail(__FILE__, __LINE__,
              "conv2d n=%lld c=%lld %lldx%lld o=%lld k=%lldx%lld groups=%lld: "
              "%d wrong, %d counts, bad address %d",
              (long long)q->n, (long long)q->c, (long long)q->h, (long long)q->w,
              (long long)q->o, (long long)q->kh, (long long)q->kw,
              (long long)q->groups, wrong, counts, (int)k.bad_address);
  test_checks++;
  free(x);
  free(w);
  free(bias);
  free(y);
  free(k.seen);
}

/* n c h w o kh kw sy sx pt pl pb pr dy dx groups bias epilogue */
static const conv_case_t conv_cases[] = {
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},   /* same padding */
    {1, 2, 9, 11, 5, 3, 2, 2, 3, 0, 1, 2, 0, 1, 1, 1, 0, 1},  /* strides, uneven pads */
    {2, 3, 10, 10, 4, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1, 1, 0}, /* dilation */
    {2, 4, 6, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1},   /* groups */
    {1, 3, 8, 8, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 3, 1, 1},   /* depthwise */
    {3, 8, 5, 7, 20, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1},  /* pointwise */
    {2, 8, 6, 6, 5, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, 0, 1},   /* strided 1x1 */
    {1, 16, 20, 20, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, /* many positions */
    {2, 1, 12, 12, 6, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0}, /* LeNet-like */
    {1, 64, 5, 5, 96, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, /* tall: split by rows */
    {1, 160, 5, 5, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, /* k = 1440: split by k */
    {1, 1, 70, 70, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1}, /* past one column panel */
};

static void conv2d_configurations(void) {
  for (int threads = 1; threads <= 3; threads++) {
    core_pool_t *pool = NULL;
    if (threads > 1) CHECK_OK(core_pool_create(threads, &pool));
    for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++)
      check_conv(&conv_cases[i], pool);
    core_pool_destroy(pool);
  }
}


/* ---- conv2d's weight gradient ------------------------------------------ */

/* dW[o, ci, ky, kx] = sum over images and output positions of dY times the
 * input tap it multiplied, straight from conv2d's definition. */
static double wgrad_ref(const loom_abi_conv2d_t *d, int64_t o, int64_t ci, int64_t ky,
                        int64_t kx, double *abs_sum) {
  int64_t cg = d->c / d->groups, g = o / (d->o / d->groups);
  double s = 0;
  *abs_sum = 0;
  for (int64_t img = 0; img < d->n; img++)
    for (int64_t oy = 0; oy < d->ho; oy++)
      for (int64_t ox = 0; ox < d->wo; ox++) {
        int64_t iy = oy * d->stride[0] - d->pads[0] + ky * d->dilation[0];
        int64_t ix = ox * d->stride[1] - d->pads[1] + kx * d->dilation[1];
        if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w) continue;
        double xy = (double)d->x[((img * d->c + g * cg + ci) * d->h + iy) * d->w + ix] *
                    d->y[((img * d->o + o) * d->ho + oy) * d->wo + ox];
        s += xy;
        *abs_sum += fabs(xy);
      }
  return s;
}

static void check_wgrad(const conv_case_t *q, core_pool_t *pool) {
  int64_t ho = (q->h + q->pt + q->pb - q->dy * (q->kh - 1) - 1) / q->sy + 1;
  int64_t wo = (q->w + q->pl + q->pr - q->dx * (q->kw - 1) - 1) / q->sx + 1;
  int64_t cg = q->c / q->groups, numel = q->o * cg * q->kh * q->kw;
  float *x = random_floats(q->n * q->c * q->h * q->w);
  float *dy = random_floats(q->n * q->o * ho * wo);
  float *dw = malloc((size_t)numel * sizeof(float));
  for (int64_t i = 0; i < numel; i++) dw[i] = SENTINEL;
  loom_abi_conv2d_t d = {q->n, q->c, q->h, q->w, q->o, q->kh, q->kw, ho, wo,
                         {q->sy, q->sx}, {q->pt, q->pl, q->pb, q->pr},
                         {q->dy, q->dx}, q->groups, x, dw, NULL, dy, NULL, NULL, NULL};
  kern_conv2d_weight_grad_f32(&d, pool);
  int wrong = 0;
  for (int64_t i = 0; i < numel; i++) {
    int64_t kx = i % q->kw, ky = i / q->kw % q->kh, ci = i / (q->kw * q->kh) % cg;
    double abs_sum, want = wgrad_ref(&d, i / (cg * q->kh * q->kw), ci, ky, kx, &abs_sum);
    double tol = 2e-7 * (double)(q->n * ho * wo + 1) * abs_sum + 1e-6;
    wrong += !(fabs(dw[i] - want) <= tol);
  }
  if (wrong)
    test_fail(__FILE__, __LINE__,
              "conv2d weight grad n=%lld c=%lld %lldx%lld o=%lld k=%lldx%lld groups=%lld: "
              "%d wrong", (long long)q->n, (long long)q->c, (long long)q->h, (long long)q->w,
              (long long)q->o, (long long)q->kh, (long long)q->kw, (long long)q->groups, wrong);
  test_checks++;
  free(x);
  free(dy);
  free(dw);
}

/* B is packed in tiles of taps by positions (conv2d.c): 360 taps fill
 * panels and part of one, 3 images of 100 positions cross the tiles and
 * the k blocks mid-image; a stem's 147 taps over 2048 positions split by
 * k at 2 and 3 threads. */
static const conv_case_t wgrad_cases[] = {
    {3, 40, 10, 10, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0},
    {2, 3, 20, 20, 16, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 1, 0, 0}, /* a stem */
    {8, 3, 32, 32, 16, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 1, 0, 0}, /* a stem split by k */
};

/* Every case at 1 and 3 threads, with every GEMM micro-kernel the CPU
 * runs (their B panels are 16 or 32 wide, packed with or without vector
 * transposes). */
static void conv2d_weight_grad_configurations(void) {
  for (int threads = 1; threads <= 3; threads += 2) {
    core_pool_t *pool = NULL;
    if (threads > 1) CHECK_OK(core_pool_create(threads, &pool));
    for (int i = 0; i < N_ISAS; i++) {
      if (!kern_gemm_force_isa(isas[i])) continue;
      for (size_t j = 0; j < sizeof conv_cases / sizeof *conv_cases; j++)
        check_wgrad(&conv_cases[j], pool);
      for (size_t j = 0; j < sizeof wgrad_cases / sizeof *wgrad_cases; j++)
        check_wgrad(&wgrad_cases[j], pool);
    }
    CHECK(kern_gemm_force_isa(NULL));
    core_pool_destroy(pool);
  }
}

int main(void) {
  test_seed(7);
  TEST_RUN(gemm_shapes_transposes_threads);
  TEST_RUN(gemm_big_a_splits_k);
  TEST_RUN(gemm_every_isa);
  TEST_RUN(gemm_edge_widths);
  TEST_RUN(gemm_edge_heights);
  TEST_RUN(gemm_transposed_a_in_place);
  TEST_RUN(gemm_plain_b_in_place);
  TEST_RUN(gemm_packed_b_column_blocks);
  TEST_RUN(gemm_repacks_packed_b);
  TEST_RUN(gemm_grouped_items);
  TEST_RUN(gemm_repeatable);
  TEST_RUN(conv2d_configurations);
  TEST_RUN(conv2d_weight_grad_configurations);
  return test_summary();
}
