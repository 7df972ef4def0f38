/* Frozen weights and the matmul paths around them: B packed ahead of time
 * (kern_gemm_pack_b, loom_compile_options_t.freeze_params) against a
 * triple loop and the interpreter; a write to a parameter seen without
 * freezing; folds that keep the last dim (bias gradients) against the
 * interpreter; the gradient of a weight shared by a batch against sums
 * written here. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "backend/cpu/kernels/gemm.h"
#include "backend/cpu/kernels/gemm_impl.h"
#include "loom/ops.h"

/* ---- kern_gemm_pack_b ----------------------------------------------------- */

/* C = A @ op(B) in double, A m x k row-major, B k x n (n x k when tb). */
static void naive(int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                  int tb, double *c) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0;
      for (int64_t q = 0; q < k; q++) s += (double)a[i * k + q] * b[tb ? j * k + q : q * n + j];
      c[i * n + j] = s;
    }
}

static float *rand_floats(int64_t n) {
  float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) p[i] = (float)test_rand_uniform(-1, 1);
  return p;
}

/* The packed product equals the triple loop. isa_after: a micro-kernel
 * forced after packing, whose GEMM must ignore the buffer. */
static void check_packed(int64_t m, int64_t n, int64_t k, int tb, core_pool_t *pool,
                         const char *isa_after) {
  float *a = rand_floats(m * k), *b = rand_floats(k * n), *c = rand_floats(m * n);
  double *want = malloc(sizeof(double) * (size_t)(m * n));
  naive(m, n, k, a, b, tb, want);
  void *packed = aligned_alloc(64, (kern_gemm_packed_bytes(k, n) + 63) / 64 * 64);
  kern_gemm_pack_b(b, tb ? k : n, tb, k, n, packed);
  bool other = isa_after && kern_gemm_force_isa(isa_after) &&
               strcmp(kern_gemm_isa(), isa_after) == 0;
  loom_abi_gemm_t d = {.m = m, .n = n, .k = k, .batch = 1, .a = a, .lda = k, .b = b,
                       .ldb = tb ? k : n, .trans_b = tb, .c = c, .ldc = n, .b_packed = packed};
  kern_gemm_f32(&d, pool);
  for (int64_t i = 0; i < m * n; i++) CHECK_NEAR(c[i], want[i], 1e-4, 1e-4);
  if (!other) {
    /* With the source zeroed, only the packed panels can give C. */
    memset(b, 0, sizeof(float) * (size_t)(k * n));
    kern_gemm_f32(&d, pool);
    for (int64_t i = 0; i < m * n; i++) CHECK_NEAR(c[i], want[i], 1e-4, 1e-4);
  }
  kern_gemm_force_isa(NULL);
  free(a);
  free(b);
  free(c);
  free(want);
  free(packed);
}

/* k over several kc blocks, n not a multiple of any nr, m below and above
 * a row panel; 1 and 2 threads; then a kernel switched after packing. */
static void test_packed_b(void) {
  static const int64_t sizes[][3] = {{1, 1, 1}, {5, 17, 3}, {64, 70, 600}, {13, 129, 257}};
  core_pool_t *pool = NULL;
  CHECK_OK(core_pool_create(2, &pool));
  test_seed(11);
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (int tb = 0; tb < 2; tb++)
      for (int th = 0; th < 2; th++)
        check_packed(sizes[s][0], sizes[s][1], sizes[s][2], tb, th ? pool : NULL, NULL);
  check_packed(9, 33, 300, 1, NULL, "portable");
  check_packed(9, 33, 300, 0, pool, "portable");
  core_pool_destroy(pool);
}

/* ---- freeze_params -------------------------------------------------------- */

typedef struct mlp {
  loom_graph_t *g;
  loom_value_t w1, w2;
  loom_tensor_t *in[2];
} mlp_t;

/* y = relu(x @ W1^T + b1) @ W2 and z = x3 @ W1^T + b1 (a batch of rows
 * run as one GEMM), with random weights. */
static void mlp_build(mlp_t *m) {
  int64_t sx[2] = {5, 37}, sx3[3] = {2, 7, 37}, sw1[2] = {23, 37}, sb1[1] = {23},
          sw2[2] = {23, 19};
  loom_value_t x, x3, b1, h, y, z;
  loom_tensor_t *w1 = test_rand_tensor(LOOM_F32, 2, sw1, -1, 1),
                *bias = test_rand_tensor(LOOM_F32, 1, sb1, -1, 1),
                *w2 = test_rand_tensor(LOOM_F32, 2, sw2, -1, 1);
  CHECK_OK(loom_graph_create(&m->g));
  CHECK_OK(loom_graph_input(m->g, "x", LOOM_F32, 2, sx, &x));
  CHECK_OK(loom_graph_input(m->g, "x3", LOOM_F32, 3, sx3, &x3));
  CHECK_OK(loom_graph_param(m->g, "w1", LOOM_F32, 2, sw1, w1, &m->w1));
  CHECK_OK(loom_graph_param(m->g, "b1", LOOM_F32, 1, sb1, bias, &b1));
  CHECK_OK(loom_graph_param(m->g, "w2", LOOM_F32, 2, sw2, w2, &m->w2));
  CHECK_OK(loom_matmul(m->g, x, m->w1, 0, 1, &h));
  CHECK_OK(loom_add(m->g, h, b1, &h));
  CHECK_OK(loom_relu(m->g, h, &h));
  CHECK_OK(loom_matmul(m->g, h, m->w2, 0, 0, &y));
  CHECK_OK(loom_matmul(m->g, x3, m->w1, 0, 1, &z));
  CHECK_OK(loom_add(m->g, z, b1, &z));
  CHECK_OK(loom_graph_output(m->g, y));
  CHECK_OK(loom_graph_output(m->g, z));
  m->in[0] = test_rand_tensor(LOOM_F32, 2, sx, -1, 1);
  m->in[1] = test_rand_tensor(LOOM_F32, 3, sx3, -1, 1);
  loom_tensor_destroy(w1);
  loom_tensor_destroy(bias);
  loom_tensor_destroy(w2);
}

static void mlp_free(mlp_t *m) {
  loom_tensor_destroy(m->in[0]);
  loom_tensor_destroy(m->in[1]);
  loom_graph_destroy(m->g);
}

static loom_executable_t *compile_with(loom_graph_t *g, int freeze, int threads) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.freeze_params = freeze;
  o.num_threads = threads;
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  return e;
}

/* Runs e and checks its two outputs against want (interpreter results). */
static void check_run(loom_executable_t *e, mlp_t *m, loom_tensor_t *const *want) {
  loom_tensor_t *out[2] = {NULL, NULL};
  for (int i = 0; i < 2 && e; i++) CHECK_OK(loom_executable_new_output(e, i, &out[i]));
  if (e && out[0] && out[1]) CHECK_OK(loom_executable_run(e, 2, m->in, 2, out));
  for (int i = 0; i < 2 && out[i] && want[i]; i++)
    for (int64_t j = 0; j < loom_tensor_numel(want[i]); j++)
      CHECK_NEAR(test_get(out[i], j), test_get(want[i], j), 1e-5, 1e-5);
  loom_tensor_destroy(out[0]);
  loom_tensor_destroy(out[1]);
}

static void interpret(mlp_t *m, loom_tensor_t **want) {
  want[0] = want[1] = NULL;
  CHECK_OK(loom_interpret(m->g, 2, m->in, 2, want));
}

/* Scales a parameter's storage in place, as a user writing new weights. */
static void scale_param(mlp_t *m, loom_value_t p, float s) {
  loom_tensor_t *t;
  CHECK_OK(loom_graph_param_tensor(m->g, p, &t));
  float *d = loom_tensor_data(t);
  for (int64_t i = 0; i < loom_tensor_numel(t); i++) d[i] *= s;
}

/* Frozen, the weights are packed at compile time: the same results as
 * the interpreter, and later writes to the weights are not seen (as
 * documented); unfrozen, the next run sees them. */
static void test_freeze_params(void) {
  test_seed(21);
  for (int threads = 1; threads <= 2; threads++) {
    mlp_t m;
    mlp_build(&m);
    loom_tensor_t *before[2], *after[2];
    interpret(&m, before);
    loom_executable_t *frozen = compile_with(m.g, 1, threads),
                      *live = compile_with(m.g, 0, threads);
    check_run(frozen, &m, before);
    check_run(live, &m, before);
    scale_param(&m, m.w1, -0.5f);
    scale_param(&m, m.w2, 2.0f);
    interpret(&m, after);
    check_run(live, &m, after);
    check_run(frozen, &m, before);
    /* A new frozen executable packs the new weights. */
    loom_executable_t *refrozen = compile_with(m.g, 1, threads);
    check_run(refrozen, &m, after);
    loom_executable_destroy(frozen);
    loom_executable_destroy(live);
    loom_executable_destroy(refrozen);
    for (int i = 0; i < 2; i++) {
      loom_tensor_destroy(before[i]);
      loom_tensor_destroy(after[i]);
    }
    mlp_free(&m);
  }
}

/* A parameter that the graph assigns is state, never frozen: y = x @ W,
 * then W <- W * 0.5, so each run's y is half the last one. */
static void test_assigned_param_not_frozen(void) {
  int64_t sx[2] = {3, 6}, sw[2] = {6, 5};
  loom_graph_t *g;
  loom_value_t x, w, y, half, w2;
  loom_tensor_t *w0 = test_rand_tensor(LOOM_F32, 2, sw, -1, 1);
  loom_tensor_t *h = test_tensor(LOOM_F32, 0, NULL, (double[]){0.5});
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, sx, &x));
  CHECK_OK(loom_graph_param(g, "w", LOOM_F32, 2, sw, w0, &w));
  CHECK_OK(loom_graph_constant(g, h, &half));
  CHECK_OK(loom_matmul(g, x, w, 0, 0, &y));
  CHECK_OK(loom_mul(g, w, half, &w2));
  CHECK_OK(loom_assign(g, w, w2));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in = test_rand_tensor(LOOM_F32, 2, sx, -1, 1), *y1 = NULL, *y2 = NULL;
  loom_executable_t *e = compile_with(g, 1, 1);
  if (e) {
    CHECK_OK(loom_executable_new_output(e, 0, &y1));
    CHECK_OK(loom_executable_new_output(e, 0, &y2));
    CHECK_OK(loom_executable_run(e, 1, &in, 1, &y1));
    CHECK_OK(loom_executable_run(e, 1, &in, 1, &y2));
    for (int64_t i = 0; i < 15; i++) CHECK_NEAR(test_get(y2, i), 0.5 * test_get(y1, i), 1e-6, 1e-6);
  }
  loom_executable_destroy(e);
  loom_tensor_destroy(y1);
  loom_tensor_destroy(y2);
  loom_tensor_destroy(in);
  loom_tensor_destroy(w0);
  loom_tensor_destroy(h);
  loom_graph_destroy(g);
}

/* ---- Folds that keep the last dim ------------------------------------------ */

typedef loom_status_t (*fold_fn)(loom_graph_t *, loom_value_t, int, const int64_t *, int,
                                 loom_value_t *);

/* op(x, axes) compiled (as generated code, no reference step) against the
 * interpreter, and against a sum written here for loom_sum. */
static void check_fold(fold_fn op, loom_dtype_t dt, int rank, const int64_t *shape,
                       int n_axes, const int64_t *axes, int keepdim, int threads) {
  loom_graph_t *g;
  loom_value_t x, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", dt, rank, shape, &x));
  CHECK_OK(op(g, x, n_axes, axes, keepdim, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in = test_rand_tensor(dt, rank, shape, op == loom_prod ? 0.5 : -4,
                                       op == loom_prod ? 1.5 : 4);
  loom_tensor_t *want = NULL, *got = NULL;
  CHECK_OK(loom_interpret(g, 1, &in, 1, &want));
  loom_executable_t *e = compile_with(g, 0, threads);
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  if (e && want) {
    CHECK_OK(loom_executable_info(e, &info));
    CHECK(info.n_reference == 0 && !info.interpreted);
    CHECK_OK(loom_executable_new_output(e, 0, &got));
    CHECK_OK(loom_executable_run(e, 1, &in, 1, &got));
    double rtol = test_rtol(dt, 8);
    for (int64_t i = 0; i < loom_tensor_numel(want); i++)
      CHECK_NEAR(test_get(got, i), test_get(want, i), rtol, rtol);
  }
  /* The sum by hand: each output element over the elements that map to it. */
  if (op == loom_sum && want) {
    int64_t n = loom_tensor_numel(in), m = loom_tensor_numel(want);
    double *sums = calloc((size_t)m, sizeof(double));
    bool red[LOOM_MAX_RANK] = {false};
    for (int i = 0; i < n_axes; i++) red[axes[i] < 0 ? axes[i] + rank : axes[i]] = true;
    for (int64_t i = 0; i < n; i++) {
      int64_t rest = i, o = 0, step = 1;
      for (int d = rank - 1; d >= 0; d--) {
        if (!red[d]) o += rest % shape[d] * step, step *= shape[d];
        rest /= shape[d];
      }
      sums[o] += test_get(in, i);
    }
    double rtol = test_rtol(dt, 8);
    for (int64_t i = 0; i < m; i++) CHECK_NEAR(test_get(want, i), sums[i], rtol, rtol);
    free(sums);
  }
  loom_executable_destroy(e);
  loom_tensor_destroy(in);
  loom_tensor_destroy(want);
  loom_tensor_destroy(got);
  loom_graph_destroy(g);
}

static void test_folds_keep_last_dim(void) {
  int64_t s3[3] = {6, 5, 7}, big[2] = {300, 200}, s4[4] = {2, 3, 1, 9};
  int64_t a0[1] = {0}, a01[2] = {0, 1}, a1[1] = {1}, a02[2] = {0, 2};
  test_seed(31);
  check_fold(loom_sum, LOOM_F32, 3, s3, 1, a0, 0, 1);
  check_fold(loom_sum, LOOM_F32, 3, s3, 2, a01, 1, 1);
  check_fold(loom_sum, LOOM_F32, 3, s3, 1, a1, 0, 1);
  check_fold(loom_mean, LOOM_F32, 3, s3, 1, a0, 1, 1);
  check_fold(loom_max, LOOM_F32, 3, s3, 2, a01, 0, 1);
  check_fold(loom_min, LOOM_F32, 3, s3, 1, a1, 1, 1);
  check_fold(loom_prod, LOOM_F32, 3, s3, 1, a0, 0, 1);
  check_fold(loom_sum, LOOM_F64, 3, s3, 2, a01, 0, 1);
  check_fold(loom_sum, LOOM_I32, 3, s3, 1, a0, 0, 1);
  check_fold(loom_sum, LOOM_F16, 3, s3, 1, a1, 0, 1);
  /* A size-1 dim between the folded ones; axes 0 and 2 around a kept one. */
  check_fold(loom_sum, LOOM_F32, 4, s4, 2, a02, 0, 1);
  check_fold(loom_sum, LOOM_F32, 4, s4, 2, a01, 0, 1);
  /* Large enough to split over two threads by column blocks. */
  check_fold(loom_sum, LOOM_F32, 2, big, 1, a0, 0, 2);
  check_fold(loom_mean, LOOM_F32, 2, big, 1, a0, 1, 2);
}

/* ---- The gradient of a weight shared by a batch ---------------------------- */

/* loss = sum((x @ op(W)) * r) over x (2, 3, 5): dW = sum over (b, m) of
 * x[b, m, :]^T r[b, m, :] (transposed for W stored (n, k)), which the
 * gradient computes as one (6 x 5)^T @ (6 x 4) product. */
static void check_shared_weight_grad(int tb) {
  int64_t sx[3] = {2, 3, 5}, sr[3] = {2, 3, 4}, sw[2] = {tb ? 4 : 5, tb ? 5 : 4};
  loom_graph_t *g;
  loom_value_t x, r, w, y, p, loss, dw;
  loom_tensor_t *w0 = test_rand_tensor(LOOM_F32, 2, sw, -1, 1);
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 3, sx, &x));
  CHECK_OK(loom_graph_input(g, "r", LOOM_F32, 3, sr, &r));
  CHECK_OK(loom_graph_param(g, "w", LOOM_F32, 2, sw, w0, &w));
  CHECK_OK(loom_matmul(g, x, w, 0, tb, &y));
  CHECK_OK(loom_mul(g, y, r, &p));
  CHECK_OK(loom_sum(g, p, 3, (int64_t[]){0, 1, 2}, 0, &loss));
  CHECK_OK(loom_grad(g, loss, 1, &w, &dw));
  CHECK_OK(loom_graph_output(g, dw));
  loom_tensor_t *in[2] = {test_rand_tensor(LOOM_F32, 3, sx, -1, 1),
                          test_rand_tensor(LOOM_F32, 3, sr, -1, 1)};
  double want[20] = {0};
  for (int64_t row = 0; row < 6; row++)
    for (int64_t k = 0; k < 5; k++)
      for (int64_t n = 0; n < 4; n++)
        want[tb ? n * 5 + k : k * 4 + n] +=
            test_get(in[0], row * 5 + k) * test_get(in[1], row * 4 + n);
  loom_tensor_t *got = test_run1(g, 2, in); /* also compiled, checked alike */
  if (got) CHECK_TENSOR(got, want, 20, 1e-5, 1e-5);
  loom_tensor_destroy(got);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_tensor_destroy(w0);
  loom_graph_destroy(g);
}

static void test_shared_weight_grad(void) {
  test_seed(41);
  check_shared_weight_grad(0);
  check_shared_weight_grad(1);
}

int main(void) {
  TEST_RUN(test_packed_b);
  TEST_RUN(test_freeze_params);
  TEST_RUN(test_assigned_param_not_frozen);
  TEST_RUN(test_folds_keep_last_dim);
  TEST_RUN(test_shared_weight_grad);
  return test_summary();
}
