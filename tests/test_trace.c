/* Traces: every traced program is checked against the interpreter on the
 * same ops built as a static graph: elementwise chains, reads mid-way
 * (values recorded before a cut used after it), nonzero in the middle,
 * host callbacks (and a failing one), branches on scalars (the path
 * signature), shape policies (exact, symbolic, bucket, auto) over many
 * sizes with bounded compiles, the hot path, and the counters. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/cache_dir.h"
#include "core/status.h"
#include "harness.h"
#include "loom/trace.h"
#include "trace/cache.h"

/* A program: builds its outputs from inputs x[0..n) into g, which is a
 * trace's graph or a static graph. */
typedef loom_status_t (*program_fn)(loom_graph_t *g, const loom_value_t *x,
                                    loom_value_t *out, void *ctx);

static loom_status_t scalar(loom_graph_t *g, double v, loom_value_t *out) {
  return loom_full(g, 0, NULL, v, LOOM_F32, out);
}

/* The program's output through the interpreter on a static graph. */
static loom_tensor_t *reference(program_fn f, int n, loom_tensor_t **in,
                                void *ctx) {
  loom_graph_t *g;
  loom_value_t x[8], y;
  loom_tensor_t *out = NULL;
  CHECK_OK(loom_graph_create(&g));
  for (int i = 0; i < n; i++) {
    loom_dim_t dims[LOOM_MAX_RANK];
    for (int a = 0; a < loom_tensor_rank(in[i]); a++) dims[a] = loom_tensor_dim(in[i], a);
    CHECK_OK(loom_graph_input(g, NULL, loom_tensor_dtype(in[i]), loom_tensor_rank(in[i]),
                              dims, &x[i]));
  }
  CHECK_OK(f(g, x, &y, ctx));
  CHECK_OK(loom_graph_output(g, y));
  CHECK_OK(loom_interpret(g, n, in, 1, &out));
  loom_graph_destroy(g);
  return out;
}

/* Elements of a and b equal within tolerance, shapes equal. */
static void check_same(const loom_tensor_t *a, const loom_tensor_t *b) {
  CHECK(a && b);
  if (!a || !b) return;
  CHECK(loom_tensor_rank(a) == loom_tensor_rank(b));
  for (int i = 0; i < loom_tensor_rank(a); i++) CHECK(loom_tensor_dim(a, i) == loom_tensor_dim(b, i));
  int64_t n = loom_tensor_numel(b);
  double *want = malloc(sizeof *want * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) want[i] = test_get(b, i);
  if (loom_tensor_numel(a) == n) CHECK_TENSOR(a, want, n, 1e-5, 1e-5);
  free(want);
}

/* Traces f on inputs in, reads its output, compares with the reference. */
static void trace_and_check(loom_trace_t *t, program_fn f, int n,
                            loom_tensor_t **in, const loom_dim_policy_t *pol,
                            void *ctx) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_value_t x[8], y;
  for (int i = 0; i < n; i++) CHECK_OK(loom_trace_input(t, in[i], pol, &x[i]));
  CHECK_OK(f(g, x, &y, ctx));
  const loom_tensor_t *got = NULL;
  CHECK_OK(loom_trace_read(t, y, &got));
  loom_tensor_t *want = reference(f, n, in, ctx);
  check_same(got, want);
  loom_tensor_destroy(want);
  CHECK_OK(loom_trace_step_end(t));
}

/* trace_and_check of f over x of shape (n) (cols 0) or (n, cols), for
 * n from lo to hi, one step each. */
static void trace_sizes(loom_trace_t *t, program_fn f, int64_t lo, int64_t hi, int64_t cols,
                        const loom_dim_policy_t *pol) {
  for (int64_t n = lo; n <= hi; n++) {
    int64_t shape[2] = {n, cols};
    loom_tensor_t *x = test_rand_tensor(LOOM_F32, cols ? 2 : 1, shape, -2, 2);
    trace_and_check(t, f, 1, &x, pol, NULL);
    loom_tensor_destroy(x);
  }
}

/* Exact policies for every dim (NULL policies are automatic). */
static const loom_dim_policy_t exact_dims[2] = {{.kind = LOOM_DIM_EXACT}, {.kind = LOOM_DIM_EXACT}};

static loom_trace_t *new_trace(int compile) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.compile = compile;
  o.spec_workers = 0;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  return t;
}

/* ---- Programs --------------------------------------------------------------- */

/* relu(x * 2 + 1) - tanh(x) */
static loom_status_t chain(loom_graph_t *g, const loom_value_t *x,
                           loom_value_t *out, void *ctx) {
  (void)ctx;
  loom_value_t two, one, a, b, c, d;
  LOOM_TRY(scalar(g, 2, &two));
  LOOM_TRY(scalar(g, 1, &one));
  LOOM_TRY(loom_mul(g, x[0], two, &a));
  LOOM_TRY(loom_add(g, a, one, &b));
  LOOM_TRY(loom_relu(g, b, &c));
  LOOM_TRY(loom_tanh(g, x[0], &d));
  return loom_sub(g, c, d, out);
}

/* softmax over the last axis, then the sum over it, times x's mean */
static loom_status_t reduce_prog(loom_graph_t *g, const loom_value_t *x,
                                 loom_value_t *out, void *ctx) {
  (void)ctx;
  loom_value_t s, m, r, e;
  int64_t last = -1;
  LOOM_TRY(loom_softmax(g, x[0], -1, &s));
  LOOM_TRY(loom_exp(g, x[0], &e));
  LOOM_TRY(loom_mul(g, s, e, &s));
  LOOM_TRY(loom_sum(g, s, 1, &last, 0, &r));
  LOOM_TRY(loom_mean(g, x[0], 1, &last, 0, &m));
  return loom_add(g, r, m, out);
}

/* ---- Tests ------------------------------------------------------------------- */

static void test_chain(void) {
  loom_trace_t *t = new_trace(1);
  int64_t shape[2] = {3, 5};
  for (int step = 0; step < 3; step++) {
    loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, shape, -2, 2);
    trace_and_check(t, chain, 1, &x, NULL, NULL);
    loom_tensor_destroy(x);
  }
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.segments == 3);
  CHECK(s.misses == 1); /* one compile, then hits */
  CHECK(s.hits == 2);
  CHECK(s.stitched >= 1); /* the step start's successor is followed */
  CHECK(s.recorded_ops == 21);
  CHECK(s.breaks == 3); /* each read */
  CHECK(s.cache.compiles == 1);
  loom_trace_destroy(t);
}

/* Values recorded before a cut and used after it: a is consumed before
 * the read of b (so not kept) and recomputed; b is read and reused. */
static void test_read_midway(void) {
  for (int compile = 0; compile <= 1; compile++) {
    loom_trace_t *t = new_trace(compile);
    loom_graph_t *g = loom_trace_graph(t);
    int64_t shape[1] = {6};
    loom_tensor_t *xt = test_rand_tensor(LOOM_F32, 1, shape, -1, 1);
    for (int step = 0; step < 3; step++) {
      loom_value_t x, a, b, c, three, d;
      CHECK_OK(loom_trace_input(t, xt, NULL, &x));
      CHECK_OK(loom_exp(g, x, &a));
      CHECK_OK(scalar(g, 3, &three));
      CHECK_OK(loom_mul(g, a, three, &b));
      const loom_tensor_t *bt;
      CHECK_OK(loom_trace_read(t, b, &bt));
      CHECK_OK(loom_add(g, a, b, &c));
      CHECK_OK(loom_sub(g, c, x, &d));
      const loom_tensor_t *dt;
      CHECK_OK(loom_trace_read(t, d, &dt));
      double want_b[6], want_d[6];
      for (int i = 0; i < 6; i++) {
        double xv = test_get(xt, i);
        want_b[i] = 3 * exp(xv);
        want_d[i] = exp(xv) + want_b[i] - xv;
      }
      CHECK_TENSOR(bt, want_b, 6, 1e-5, 1e-5);
      CHECK_TENSOR(dt, want_d, 6, 1e-5, 1e-5);
      CHECK_OK(loom_trace_step_end(t));
    }
    loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
    CHECK_OK(loom_trace_get_stats(t, &s));
    CHECK(s.segments == 6);
    CHECK(compile ? s.interpreted == 0 : s.interpreted == 6);
    /* step 1 recomputes exp(x) after the read; step 2 keeps it (new
     * keys for both segments); step 3 hits both */
    if (compile) CHECK(s.misses == 4 && s.hits == 2);
    loom_tensor_destroy(xt);
    loom_trace_destroy(t);
  }
}

/* A value read after the cut that computed it and dropped it (a training
 * step's logits, read when the step ends, after the backward's cut made
 * the loss): the first step recomputes it in a segment of its own; from
 * the second, the earlier cut keeps it and the read runs nothing. */
static void test_read_after_its_cut(void) {
  for (int compile = 0; compile <= 1; compile++) {
    loom_trace_t *t = new_trace(compile);
    loom_graph_t *g = loom_trace_graph(t);
    int64_t shape[1] = {5};
    loom_tensor_t *xt = test_rand_tensor(LOOM_F32, 1, shape, -1, 1);
    for (int step = 0; step < 3; step++) {
      loom_value_t x, a, three, b;
      CHECK_OK(loom_trace_input(t, xt, NULL, &x));
      CHECK_OK(loom_exp(g, x, &a));
      CHECK_OK(scalar(g, 3, &three));
      CHECK_OK(loom_mul(g, a, three, &b));
      const loom_tensor_t *bt, *at;
      CHECK_OK(loom_trace_read(t, b, &bt));
      CHECK_OK(loom_trace_read(t, a, &at));
      double want_a[5], want_b[5];
      for (int i = 0; i < 5; i++) {
        want_a[i] = exp(test_get(xt, i));
        want_b[i] = 3 * want_a[i];
      }
      CHECK_TENSOR(bt, want_b, 5, 1e-5, 1e-5);
      CHECK_TENSOR(at, want_a, 5, 1e-5, 1e-5);
      CHECK_OK(loom_trace_step_end(t));
    }
    loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
    CHECK_OK(loom_trace_get_stats(t, &s));
    CHECK(s.segments == 4); /* 2, then 1 a step */
    if (compile) CHECK(s.misses == 3 && s.hits == 1);
    loom_tensor_destroy(xt);
    loom_trace_destroy(t);
  }
}

/* x -> (x > 0) -> nonzero -> cast * 2 + x's sum: nonzero runs eagerly
 * between two segments. */
static loom_status_t nonzero_prog(loom_graph_t *g, const loom_value_t *x,
                                  loom_value_t *out, void *ctx) {
  (void)ctx;
  loom_value_t zero, pos, idx, f, two, s, y;
  LOOM_TRY(scalar(g, 0, &zero));
  LOOM_TRY(loom_gt(g, x[0], zero, &pos));
  LOOM_TRY(loom_nonzero(g, pos, &idx));
  LOOM_TRY(loom_cast(g, idx, LOOM_F32, &f));
  LOOM_TRY(scalar(g, 2, &two));
  LOOM_TRY(loom_mul(g, f, two, &y));
  LOOM_TRY(loom_sum(g, x[0], 0, NULL, 0, &s));
  return loom_add(g, y, s, out);
}

/* A read repeated in a loop (an RNN reading each cell's state) is one
 * break at one site, counted, though each read names another value. */
static void test_break_in_a_loop(void) {
  loom_trace_t *t = new_trace(1);
  loom_graph_t *g = loom_trace_graph(t);
  int64_t shape[1] = {4};
  loom_tensor_t *xt = test_rand_tensor(LOOM_F32, 1, shape, -1, 1);
  loom_value_t x, h;
  CHECK_OK(loom_trace_input(t, xt, NULL, &x));
  h = x;
  for (int k = 0; k < 5; k++) {
    const loom_tensor_t *real = NULL;
    CHECK_OK(loom_tanh(g, h, &h));
    CHECK_OK(loom_add(g, h, x, &h));
    CHECK_OK(loom_trace_read(t, h, &real));
  }
  CHECK_OK(loom_trace_step_end(t));
  char *report = NULL;
  CHECK_OK(loom_trace_explain(t, &report));
  /* the first cell reads x alone, the next four read h and x */
  CHECK(report && strstr(report, "graph breaks: 5\n"));
  CHECK(report && strstr(report, "(x4)\n"));
  loom_free(report);
  loom_tensor_destroy(xt);
  loom_trace_destroy(t);
}

/* A recurrent state read inside its own cell (c feeds tanh(c) and the
 * next cell) and cut by syncs: after a few steps the cut keeps c, so no
 * cell is recomputed and the keys stop changing. */
static void test_recurrent_state(void) {
  loom_trace_t *t = new_trace(1);
  loom_graph_t *g = loom_trace_graph(t);
  int64_t shape[1] = {4};
  loom_tensor_t *xt = test_rand_tensor(LOOM_F32, 1, shape, -1, 1);
  double c_ref[4] = {0}, h_ref[4] = {0};
  int64_t misses_at[40];
  for (int step = 0; step < 2; step++) {
    loom_value_t x, c, h = {-1};
    CHECK_OK(loom_trace_input(t, xt, NULL, &x));
    c = x;
    for (int i = 0; i < 4; i++) c_ref[i] = test_get(xt, i);
    for (int k = 0; k < 20; k++) {
      CHECK_OK(loom_add(g, c, x, &c));
      CHECK_OK(loom_tanh(g, c, &c));
      CHECK_OK(loom_mul(g, c, c, &h));
      CHECK_OK(loom_trace_sync(t));
      for (int i = 0; i < 4; i++) {
        c_ref[i] = tanh(c_ref[i] + test_get(xt, i));
        h_ref[i] = c_ref[i] * c_ref[i];
      }
      loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
      CHECK_OK(loom_trace_get_stats(t, &s));
      misses_at[20 * step + k] = s.misses;
    }
    const loom_tensor_t *ht = NULL;
    CHECK_OK(loom_trace_read(t, h, &ht));
    for (int i = 0; i < 4; i++) CHECK_NEAR(test_get(ht, i), h_ref[i], 1e-5, 1e-5);
    CHECK_OK(loom_trace_step_end(t));
  }
  /* learning settles within a few cells; then hits only (the next step's
   * first cell, now keeping c, is one more key) */
  CHECK(misses_at[19] == misses_at[8]);
  CHECK(misses_at[39] == misses_at[20]);
  CHECK(misses_at[39] <= 6);
  loom_tensor_destroy(xt);
  loom_trace_destroy(t);
}

static void test_nonzero(void) {
  loom_trace_t *t = new_trace(1);
  int64_t shape[1] = {9};
  for (int step = 0; step < 4; step++) {
    loom_tensor_t *x = test_rand_tensor(LOOM_F32, 1, shape, -1, 1);
    trace_and_check(t, nonzero_prog, 1, &x, NULL, NULL);
    loom_tensor_destroy(x);
  }
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.eager_ops == 4);
  CHECK(s.segments == 8); /* before and after nonzero */
  char *report = NULL;
  CHECK_OK(loom_trace_explain(t, &report));
  CHECK(report && strstr(report, "nonzero: output shape depends on data (x4)"));
  loom_free(report);
  loom_trace_destroy(t);
  /* The count as a symbolic size (data_dims): one executable after the
   * eager op whatever the count. */
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.spec_workers = 0;
  o.data_dims.kind = LOOM_DIM_SYMBOLIC;
  CHECK_OK(loom_trace_create(&o, &t));
  for (int step = 0; step < 5; step++) {
    loom_tensor_t *x = test_rand_tensor(LOOM_F32, 1, shape, -1, 1);
    trace_and_check(t, nonzero_prog, 1, &x, NULL, NULL);
    loom_tensor_destroy(x);
  }
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.cache.compiles == 2 && s.interpreted == 0);
  loom_trace_destroy(t);
}

/* A host callback: y = x^2 (backward 2 x dy), and one that fails. */
static loom_status_t square_fwd(void *user, int n_in, const loom_tensor_t *const *in,
                                int n_out, loom_tensor_t *const *out) {
  (void)user;
  (void)n_in;
  (void)n_out;
  const float *x = loom_tensor_data(in[0]);
  float *y = loom_tensor_data(out[0]);
  for (int64_t i = 0; i < loom_tensor_numel(in[0]); i++) y[i] = x[i] * x[i];
  return LOOM_OK;
}

static loom_status_t failing_fwd(void *user, int n_in, const loom_tensor_t *const *in,
                                 int n_out, loom_tensor_t *const *out) {
  (void)user;
  (void)n_in;
  (void)in;
  (void)n_out;
  (void)out;
  return loom_set_error(LOOM_ERR_VALUE, "element %d is negative", 3);
}

static void test_callback(void) {
  loom_trace_t *t = new_trace(1);
  loom_graph_t *g = loom_trace_graph(t);
  loom_host_op_t sq = {.name = "square", .forward = square_fwd};
  loom_host_op_t bad = {.name = "broken", .forward = failing_fwd};
  int64_t shape[1] = {5};
  loom_tensor_t *xt = test_rand_tensor(LOOM_F32, 1, shape, -2, 2);
  loom_dtype_t dt = LOOM_F32;
  int rank = 1;
  const int64_t *shapes[1] = {shape};
  for (int step = 0; step < 2; step++) {
    loom_value_t x, a, y, one, z;
    CHECK_OK(loom_trace_input(t, xt, NULL, &x));
    CHECK_OK(scalar(g, 1, &one));
    CHECK_OK(loom_add(g, x, one, &a));
    CHECK_OK(loom_trace_call(t, &sq, 1, &a, 1, &dt, &rank, shapes, &y));
    CHECK_OK(loom_sub(g, y, x, &z));
    const loom_tensor_t *zt;
    CHECK_OK(loom_trace_read(t, z, &zt));
    double want[5];
    for (int i = 0; i < 5; i++) {
      double v = test_get(xt, i);
      want[i] = (v + 1) * (v + 1) - v;
    }
    CHECK_TENSOR(zt, want, 5, 1e-5, 1e-5);
    CHECK_OK(loom_trace_step_end(t));
  }
  /* A failing callback stops with its status; the step then ends and
   * the trace works again. */
  loom_value_t x, y, z, w;
  CHECK_OK(loom_trace_input(t, xt, NULL, &x));
  CHECK_OK(loom_neg(g, x, &z));
  CHECK_ERR(loom_trace_call(t, &bad, 1, &z, 1, &dt, &rank, shapes, &y),
            LOOM_ERR_VALUE, "broken");
  /* The callback's own message (set through the public loom_set_error). */
  CHECK(strstr(loom_last_error(), "element 3 is negative") != NULL);
  CHECK_OK(loom_trace_step_end(t));
  CHECK_OK(loom_trace_input(t, xt, NULL, &x));
  CHECK_OK(loom_neg(g, x, &w));
  const loom_tensor_t *wt;
  CHECK_OK(loom_trace_read(t, w, &wt));
  CHECK_NEAR(test_get(wt, 2), -test_get(xt, 2), 1e-6, 0);
  CHECK_OK(loom_trace_step_end(t));
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.callbacks == 3);
  loom_tensor_destroy(xt);
  loom_trace_destroy(t);
}

/* Branches on a scalar: two paths compile two entries, repeats only hit. */
static void branch_step(loom_trace_t *t, loom_tensor_t *xt) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_value_t x, s, k, y;
  CHECK_OK(loom_trace_input(t, xt, NULL, &x));
  CHECK_OK(loom_sum(g, x, 0, NULL, 0, &s));
  loom_value_t zero, positive;
  CHECK_OK(scalar(g, 0, &zero));
  CHECK_OK(loom_gt(g, s, zero, &positive));
  int taken = -1;
  CHECK_OK(loom_trace_cond(t, positive, &taken));
  double v = 0;
  for (int i = 0; i < 4; i++) v += test_get(xt, i);
  CHECK(taken == (v > 0));
  CHECK_OK(scalar(g, taken ? 2 : -3, &k));
  CHECK_OK(loom_mul(g, x, k, &y));
  const loom_tensor_t *yt;
  CHECK_OK(loom_trace_read(t, y, &yt));
  CHECK_NEAR(test_get(yt, 1), test_get(xt, 1) * (taken ? 2 : -3), 1e-5, 1e-5);
  CHECK_OK(loom_trace_step_end(t));
}

static void test_branches(void) {
  loom_trace_t *t = new_trace(1);
  int64_t shape[1] = {4};
  double pos[4] = {1, 2, 3, 4}, neg[4] = {-1, -2, 0.5, -4};
  loom_tensor_t *p = test_tensor(LOOM_F32, 1, shape, pos);
  loom_tensor_t *n = test_tensor(LOOM_F32, 1, shape, neg);
  branch_step(t, p);
  branch_step(t, n);
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  int64_t misses = s.misses;
  CHECK(misses == 3); /* the sum, and the product after each branch */
  for (int i = 0; i < 10; i++) branch_step(t, i % 3 ? p : n);
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.misses == misses);
  CHECK(s.cache.compiles == 3);
  CHECK(s.hits == 2 * 12 - 3);
  loom_tensor_destroy(p);
  loom_tensor_destroy(n);
  loom_trace_destroy(t);
}

/* Shape policies over sizes 3..40: results equal the interpreter's;
 * compiles stay within the buckets (or one for symbolic). */
static int64_t policy_compiles(loom_dim_policy_kind_t kind, int n_buckets,
                               int64_t *interpreted) {
  loom_trace_t *t = new_trace(1);
  loom_dim_policy_t pol[2];
  memset(pol, 0, sizeof pol);
  pol[0].kind = LOOM_DIM_EXACT;
  pol[1].kind = kind;
  pol[1].name = "n";
  pol[1].n_buckets = n_buckets;
  for (int i = 0; i < n_buckets; i++) pol[1].buckets[i] = 8 << i;
  for (int64_t n = 3; n <= 40; n += 1 + (kind == LOOM_DIM_EXACT) * 6) {
    int64_t shape[2] = {2, n};
    loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, shape, -1, 1);
    trace_and_check(t, reduce_prog, 1, &x, pol, NULL);
    loom_tensor_destroy(x);
  }
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  loom_trace_destroy(t);
  *interpreted = s.interpreted;
  return s.cache.compiles;
}

static void test_policies(void) {
  int64_t interp = -1;
  CHECK(policy_compiles(LOOM_DIM_EXACT, 0, &interp) == 6);
  CHECK(interp == 0);
  int64_t bucketed = policy_compiles(LOOM_DIM_BUCKET, 4, &interp); /* 8, 16, 32, 64 */
  CHECK(bucketed >= 1 && bucketed <= 4);
  CHECK(interp == 0);
  int64_t pow2 = policy_compiles(LOOM_DIM_BUCKET, 0, &interp); /* 4, 8, 16, 32, 64 */
  CHECK(pow2 >= 1 && pow2 <= 5);
  CHECK(interp == 0);
  /* one executable for every size: the dim is a runtime argument */
  CHECK(policy_compiles(LOOM_DIM_SYMBOLIC, 0, &interp) == 1);
  CHECK(interp == 0);
}


/* A reshape whose size is an expression of a symbolic dim (n*4 and back):
 * still one executable for every n. */
static loom_status_t reshape_prog(loom_graph_t *g, const loom_value_t *x,
                                  loom_value_t *out, void *ctx) {
  (void)ctx;
  loom_dim_t dims[2], flat, back[2];
  LOOM_TRY(loom_value_type(g, x[0], NULL, NULL, dims));
  LOOM_TRY(loom_dim_mul(g, dims[0], dims[1], &flat));
  loom_value_t f, s, r;
  LOOM_TRY(loom_reshape(g, x[0], 1, &flat, &f));
  LOOM_TRY(loom_softmax(g, f, 0, &s));
  back[0] = dims[0], back[1] = dims[1];
  LOOM_TRY(loom_reshape(g, s, 2, back, &r));
  int64_t axis = 1;
  return loom_sum(g, r, 1, &axis, 0, out);
}

static void test_symbolic_attrs(void) {
  loom_trace_t *t = new_trace(1);
  loom_dim_policy_t pol[2] = {{.kind = LOOM_DIM_SYMBOLIC, .name = "n"}, {.kind = LOOM_DIM_EXACT}};
  trace_sizes(t, reshape_prog, 2, 9, 4, pol);
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.cache.compiles == 1);
  CHECK(s.interpreted == 0);
  loom_trace_destroy(t);
}

/* Exact sizes carried in attributes (a reshape to n*4 with n exact) are
 * keyed, but they do not make a site of their own: past the recompile
 * limit the site's new sizes run in the fallback, with the same results
 * (before, each size was a new site, and 14 sizes compiled 14 times). */
static void test_exact_attr_sizes_share_a_site(void) {
  loom_trace_t *t = new_trace(1);
  trace_sizes(t, reshape_prog, 2, 15, 4, exact_dims);
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.cache.compiles == 8); /* the default limit */
  CHECK(s.interpreted == 6 && s.recompiles == 13);
  loom_trace_destroy(t);
}

/* A bucketed dim merged by a reshape (and a softmax over the merged
 * axis): the padding cannot be masked, so the site keys that dim
 * symbolic from then on: one executable for every size, not one per
 * size, and the same results. */
static void test_unpadded_bucket(void) {
  loom_trace_t *t = new_trace(1);
  loom_dim_policy_t pol[2] = {{.kind = LOOM_DIM_BUCKET, .name = "n"}, {.kind = LOOM_DIM_EXACT}};
  trace_sizes(t, reshape_prog, 2, 9, 4, pol);
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.cache.compiles == 1 && s.cache.failed_compiles == 1); /* the first bucket's */
  CHECK(s.interpreted == 0 && s.misses == 2);
  loom_trace_destroy(t);
}

/* LOOM_DIM_AUTO: exact for the first auto_after sizes, then one
 * symbolic executable for all the others. */
static void test_auto(void) {
  loom_trace_t *t = new_trace(1);
  loom_dim_policy_t pol[2];
  memset(pol, 0, sizeof pol);
  pol[1].kind = LOOM_DIM_AUTO;
  pol[1].auto_after = 3;
  for (int64_t n = 3; n <= 12; n++) {
    int64_t shape[2] = {2, n};
    loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, shape, -1, 1);
    trace_and_check(t, chain, 1, &x, pol, NULL);
    loom_tensor_destroy(x);
  }
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.misses == 4); /* sizes 3, 4, 5 exact, then symbolic */
  CHECK(s.hits == 6);
  loom_trace_destroy(t);
}

/* LOOM_DIM_AUTO by default (auto_after 0) turns symbolic the first time
 * its size changes: one exact compile, one symbolic, then hits. */
static void test_auto_default(void) {
  loom_trace_t *t = new_trace(1);
  loom_dim_policy_t pol[2];
  memset(pol, 0, sizeof pol);
  pol[1].kind = LOOM_DIM_AUTO;
  for (int64_t n = 3; n <= 12; n++) {
    int64_t shape[2] = {2, n};
    loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, shape, -1, 1);
    trace_and_check(t, chain, 1, &x, pol, NULL);
    loom_tensor_destroy(x);
  }
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.misses == 2); /* size 3 exact, then symbolic */
  CHECK(s.hits == 8);
  CHECK(s.interpreted == 0);
  loom_trace_destroy(t);
}

/* A shared cache: a second trace hits what the first compiled. */
static void test_shared_cache(void) {
  loom_cache_t *c = NULL;
  CHECK_OK(loom_cache_create(0, 0, &c));
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.cache = c;
  loom_trace_t *a = NULL, *b = NULL;
  CHECK_OK(loom_trace_create(&o, &a));
  CHECK_OK(loom_trace_create(&o, &b));
  int64_t shape[2] = {2, 3};
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, shape, -1, 1);
  trace_and_check(a, chain, 1, &x, NULL, NULL);
  trace_and_check(b, chain, 1, &x, NULL, NULL);
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(b, &s));
  CHECK(s.hits == 1 && s.misses == 0 && s.cache.compiles == 1);
  loom_tensor_destroy(x);
  loom_trace_destroy(a);
  loom_trace_destroy(b);
  loom_cache_destroy(c);
}


/* A tiered trace over a cache of its own with one compile worker. */
static loom_trace_t *tiered_trace(loom_cache_t **c) {
  CHECK_OK(loom_cache_create(0, 1, c));
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.cache = *c;
  o.tiered = 1;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  return t;
}

/* A module cache directory of one test's own, so that no module or
 * journal of another run is found: made and set as LOOM_CACHE_DIR by
 * private_cache_begin, removed and the variable restored by _end. */
typedef struct private_cache {
  char dir[64];
  char *was;
} private_cache_t;

static void private_cache_begin(private_cache_t *p) {
  const char *was = getenv("LOOM_CACHE_DIR");
  p->was = was ? strdup(was) : NULL;
  snprintf(p->dir, sizeof p->dir, "/tmp/loom-test-trace-XXXXXX");
  CHECK(mkdtemp(p->dir) != NULL);
  setenv("LOOM_CACHE_DIR", p->dir, 1);
}

static void private_cache_end(private_cache_t *p) {
  if (p->was) setenv("LOOM_CACHE_DIR", p->was, 1);
  else unsetenv("LOOM_CACHE_DIR");
  free(p->was);
  core_remove_tree(p->dir);
}

/* Tiered: a miss runs in the interpreter while a worker compiles; once
 * the compile is done, the same segment hits. Results never differ. */
static void test_tiered(void) {
  loom_cache_t *c = NULL;
  loom_trace_t *t = tiered_trace(&c);
  int64_t shape[2] = {3, 7};
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, shape, -1, 1);
  trace_and_check(t, chain, 1, &x, NULL, NULL);
  rt_cache_drain(c);
  for (int i = 0; i < 3; i++) trace_and_check(t, chain, 1, &x, NULL, NULL);
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.interpreted <= 1);
  CHECK(s.hits >= 3);
  CHECK(s.cache.compiles == 1);
  loom_tensor_destroy(x);
  loom_trace_destroy(t);
  loom_cache_destroy(c);
}

/* Tiered, a new key at a site whose key changed before runs in the
 * fallback the first time it is seen and compiles the second time (an
 * exact size that never comes back costs no compile); the first key of a
 * site compiles at once. A module cache of its own: a key compiled
 * before (its journal) would be waited for instead. */
static void test_second_sighting(void) {
  private_cache_t dir;
  private_cache_begin(&dir);
  loom_cache_t *c = NULL;
  CHECK_OK(loom_cache_create(0, 1, &c));
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.cache = c;
  o.input_dims.kind = LOOM_DIM_EXACT;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  const int64_t rows[] = {3, 5, 5, 5, 9};
  const int64_t compiles[] = {1, 1, 2, 2, 2}; /* after each run, the worker done */
  for (int i = 0; i < 5; i++) {
    int64_t shape[2] = {rows[i], 7};
    loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, shape, -1, 1);
    trace_and_check(t, chain, 1, &x, NULL, NULL);
    rt_cache_drain(c);
    loom_trace_stats_t st = LOOM_TRACE_STATS_INIT;
    CHECK_OK(loom_trace_get_stats(t, &st));
    CHECK(st.cache.compiles == compiles[i]);
    loom_tensor_destroy(x);
  }
  loom_trace_stats_t st = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &st));
  CHECK(st.hits >= 1); /* the fourth 5-row run */
  loom_trace_destroy(t);
  loom_cache_destroy(c);
  private_cache_end(&dir);
}

/* A key missed again while its compile runs is a miss, not a recompile:
 * the C compiler here (a script) sleeps first, so that the runs after
 * the first find the compile still going. A cache directory of its own,
 * so that no module or journal of another run is found. */
static void test_pending_misses_are_no_recompiles(void) {
  private_cache_t dir;
  private_cache_begin(&dir);
  char cc[PATH_MAX];
  snprintf(cc, sizeof cc, "%s/slow-cc", dir.dir);
  FILE *f = fopen(cc, "w");
  CHECK(f != NULL);
  if (f) fputs("#!/bin/sh\nsleep 1\nexec cc \"$@\"\n", f), fclose(f);
  CHECK(chmod(cc, 0700) == 0);
  setenv("LOOM_CC", cc, 1);
  loom_cache_t *c = NULL;
  loom_trace_t *t = tiered_trace(&c);
  int64_t shape[2] = {4, 6};
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, shape, -1, 1);
  for (int i = 0; i < 4; i++) trace_and_check(t, chain, 1, &x, NULL, NULL);
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.misses == 4 && s.interpreted == 4); /* the compile takes a second */
  CHECK(s.recompiles == 0);
  rt_cache_drain(c);
  trace_and_check(t, chain, 1, &x, NULL, NULL);
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.hits == 1 && s.recompiles == 0 && s.cache.compiles == 1);
  loom_tensor_destroy(x);
  loom_trace_destroy(t);
  loom_cache_destroy(c);
  unsetenv("LOOM_CC");
  private_cache_end(&dir);
}

/* Speculation: after a bucketed miss the next buckets up and down are
 * compiled by a worker, so the first size in either hits; a declared
 * profile compiles every bucket of its range ahead of time. */
static void test_speculation(void) {
  for (int profile = 0; profile <= 2; profile++) { /* 2: no profile, sizes shrink */
    loom_cache_t *c = NULL;
    CHECK_OK(loom_cache_create(0, 1, &c));
    loom_trace_options_t o;
    loom_trace_options_init(&o);
    o.cache = c;
    loom_trace_t *t = NULL;
    CHECK_OK(loom_trace_create(&o, &t));
    loom_dim_policy_t pol[2];
    memset(pol, 0, sizeof pol);
    pol[1].kind = LOOM_DIM_BUCKET; /* powers of two */
    if (profile == 1) pol[1].profile_min = 1, pol[1].profile_opt = 16, pol[1].profile_max = 64;
    int64_t grow[] = {5, 12, 30, 60}, shrink[] = {30, 12}, *sizes = profile == 2 ? shrink : grow;
    for (int i = 0; i < (profile == 1 ? 4 : 2); i++) {
      int64_t shape[2] = {2, sizes[i]};
      loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, shape, -1, 1);
      trace_and_check(t, reduce_prog, 1, &x, pol, NULL);
      rt_cache_drain(c);
      loom_tensor_destroy(x);
    }
    loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
    CHECK_OK(loom_trace_get_stats(t, &s));
    CHECK(s.misses == 1); /* the next bucket up (8 -> 16), or down (32 -> 16) */
    CHECK(s.cache.spec_compiles >= (profile == 1 ? 3 : 1));
    loom_trace_destroy(t);
    loom_cache_destroy(c);
  }
}


/* ---- Failures at every allocation ------------------------------------------ */

/* A whole traced program (interpreted): reads mid-way, nonzero, a
 * callback, training and AdamW, over two steps. Any failure is returned;
 * the trace is destroyed whatever happened. */
static loom_status_t scenario(loom_tensor_t *xt, loom_tensor_t *wt) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.compile = 0;
  o.spec_workers = 0;
  loom_trace_t *t = NULL;
  LOOM_TRY(loom_trace_create(&o, &t));
  loom_graph_t *g = loom_trace_graph(t);
  loom_host_op_t sq = {.name = "square", .forward = square_fwd};
  loom_dtype_t dt = LOOM_F32;
  int rank = 1;
  int64_t shape[1] = {loom_tensor_dim(xt, 0)};
  const int64_t *shapes[1] = {shape};
  loom_status_t s = LOOM_OK;
  for (int step = 0; step < 2 && s == LOOM_OK; step++) {
    loom_value_t x, w, a, b, c, y, l;
    const loom_tensor_t *out;
    s = loom_trace_input(t, xt, NULL, &x);
    if (s == LOOM_OK) s = loom_trace_param(t, wt, &w);
    if (s == LOOM_OK) s = loom_mul(g, x, w, &a);
    if (s == LOOM_OK) s = loom_trace_read(t, a, &out);
    if (s == LOOM_OK) s = nonzero_prog(g, &a, &b, NULL);
    if (s == LOOM_OK) s = loom_trace_call(t, &sq, 1, &x, 1, &dt, &rank, shapes, &y);
    if (s == LOOM_OK) s = loom_mul(g, a, y, &c);
    if (s == LOOM_OK) s = loom_sum(g, c, 0, NULL, 0, &l);
    if (s == LOOM_OK) s = loom_trace_read(t, b, &out);
    if (s == LOOM_OK) s = loom_trace_backward(t, l);
    if (s == LOOM_OK) s = loom_trace_adamw(t, 0.01, 0.9, 0.999, 1e-8, 0);
    loom_status_t e = loom_trace_step_end(t);
    if (s == LOOM_OK) s = e;
  }
  loom_trace_destroy(t);
  return s;
}

typedef struct scenario_args {
  loom_tensor_t *x, *w;
} scenario_args_t;

static loom_status_t run_scenario(void *ctx) {
  scenario_args_t *a = ctx;
  return scenario(a->x, a->w);
}

static void test_allocation_failures(void) {
  int64_t shape[1] = {5};
  scenario_args_t a = {test_rand_tensor(LOOM_F32, 1, shape, -1, 1),
                       test_rand_tensor(LOOM_F32, 1, shape, -1, 1)};
  test_each_allocation_failing(run_scenario, &a, 10, 5000);
  loom_tensor_destroy(a.x);
  loom_tensor_destroy(a.w);
}


/* Traces on several threads share one cache: each runs the same programs
 * at a few sizes and compares its results with the interpreter's (without
 * the harness, whose counters are not thread-safe). */
static int thread_step(loom_trace_t *t, program_fn f, loom_tensor_t *x) {
  loom_graph_t *g = NULL, *tg = loom_trace_graph(t);
  loom_value_t xv, y, sy;
  const loom_tensor_t *got = NULL;
  loom_tensor_t *want = NULL;
  int bad = loom_trace_input(t, x, NULL, &xv) != LOOM_OK ||
            f(tg, &xv, &y, NULL) != LOOM_OK || loom_trace_read(t, y, &got) != LOOM_OK;
  int64_t shape[2] = {loom_tensor_dim(x, 0), loom_tensor_dim(x, 1)};
  bad |= loom_graph_create(&g) != LOOM_OK ||
         loom_graph_input(g, "x", LOOM_F32, 2, shape, &xv) != LOOM_OK ||
         f(g, &xv, &sy, NULL) != LOOM_OK || loom_graph_output(g, sy) != LOOM_OK ||
         loom_interpret(g, 1, &x, 1, &want) != LOOM_OK;
  for (int64_t i = 0; !bad && i < loom_tensor_numel(want); i++) {
    double a = 0, b = 0;
    loom_tensor_get_f64(got, i, &a);
    loom_tensor_get_f64(want, i, &b);
    bad |= fabs(a - b) > 1e-5 * (1 + fabs(b));
  }
  loom_tensor_destroy(want);
  loom_graph_destroy(g);
  bad |= loom_trace_step_end(t) != LOOM_OK;
  return bad;
}

/* Runs that the threads' traces found by their hot path. */
static _Atomic int64_t threads_stitched;

static void *thread_body(void *arg) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.cache = arg;
  o.num_threads = 1;
  o.tiered = 0;                       /* counts below: every miss compiles */
  o.input_dims.kind = LOOM_DIM_EXACT; /* every size its own key */
  loom_trace_t *t = NULL;
  if (loom_trace_create(&o, &t) != LOOM_OK) return (void *)1;
  int bad = 0;
  for (int i = 0; i < 12; i++) {
    int64_t shape[2] = {2, 3 + i % 3};
    loom_tensor_t *x = NULL;
    bad |= loom_tensor_from_data(LOOM_F32, 2, shape, (const float[]){0.5f, -1, 2, 0.25f, -0.75f, 1.5f, 3, -2, 1, 0.1f},
                                 sizeof(float) * (size_t)(2 * shape[1]), &x) != LOOM_OK;
    if (x) bad |= thread_step(t, i % 2 ? chain : reduce_prog, x);
    loom_tensor_destroy(x);
  }
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  bad |= loom_trace_get_stats(t, &s) != LOOM_OK;
  atomic_fetch_add(&threads_stitched, s.stitched);
  loom_trace_destroy(t);
  return bad ? (void *)1 : NULL;
}

/* Lists the shared cache's keys while the traces run, until told to
 * stop; counts lists that are not whole (a key of another shape, a
 * stitched count above its hits). */
typedef struct key_watch {
  loom_cache_t *c;
  atomic_bool stop;
  int lists, bad;
} key_watch_t;

static void *watch_keys(void *arg) {
  key_watch_t *w = arg;
  while (!atomic_load(&w->stop)) {
    loom_cache_keys_t *keys = NULL;
    int64_t n = 0;
    w->bad += loom_cache_list_keys(w->c, &keys, &n) != LOOM_OK || n > 6;
    for (int64_t i = 0; i < n; i++) {
      loom_cache_key_info_t k = LOOM_CACHE_KEY_INFO_INIT;
      loom_cache_key_input_t in = LOOM_CACHE_KEY_INPUT_INIT;
      w->bad += loom_cache_keys_get(keys, i, &k) != LOOM_OK ||
                loom_cache_keys_input(keys, i, 0, &in) != LOOM_OK;
      w->bad += k.n_inputs != 1 || k.stitched > k.hits || in.rank != 2 || in.dims[0] != 2 ||
                in.dims[1] < 3 || in.dims[1] > 5 || in.kinds[1] != LOOM_KEY_EXACT;
    }
    loom_cache_keys_destroy(keys);
    w->lists++;
  }
  return NULL;
}

static void test_threads(void) {
  loom_cache_t *c = NULL;
  CHECK_OK(loom_cache_create(0, 1, &c));
  atomic_store(&threads_stitched, 0);
  key_watch_t watch = {.c = c};
  pthread_t th[3], watcher;
  CHECK(pthread_create(&watcher, NULL, watch_keys, &watch) == 0);
  for (int i = 0; i < 3; i++) CHECK(pthread_create(&th[i], NULL, thread_body, c) == 0);
  for (int i = 0; i < 3; i++) {
    void *r = NULL;
    CHECK(pthread_join(th[i], &r) == 0 && r == NULL);
  }
  atomic_store(&watch.stop, true);
  pthread_join(watcher, NULL);
  CHECK(watch.bad == 0 && watch.lists > 0);
  loom_cache_stats_t s = LOOM_CACHE_STATS_INIT;
  CHECK_OK(loom_cache_get_stats(c, &s));
  CHECK(s.compiles == 6); /* two programs at three sizes, compiled once */
  /* The keys' counts add up to the cache's lookups and the traces'
   * stitched runs. */
  loom_cache_keys_t *keys = NULL;
  int64_t n = 0, hits = 0, stitched = 0, misses = 0;
  CHECK_OK(loom_cache_list_keys(c, &keys, &n));
  for (int64_t i = 0; i < n; i++) {
    loom_cache_key_info_t k = LOOM_CACHE_KEY_INFO_INIT;
    CHECK_OK(loom_cache_keys_get(keys, i, &k));
    hits += k.hits, stitched += k.stitched, misses += k.misses;
  }
  loom_cache_keys_destroy(keys);
  CHECK(n == 6 && misses == s.misses && hits - stitched == s.hits);
  CHECK(stitched == atomic_load(&threads_stitched));
  loom_cache_destroy(c);
}


/* Fallback: without a C compiler every segment fails to compile and runs
 * in the interpreter, with the same results; the failure is cached, and
 * so is the graph the interpreter runs (an eager entry beside it). */
static void test_compile_failure(void) {
  setenv("LOOM_CC", "/nonexistent/loom-test-cc", 1);
  loom_trace_t *t = new_trace(1);
  int64_t shape[2] = {2, 5};
  for (int step = 0; step < 3; step++) {
    loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, shape, -2, 2);
    trace_and_check(t, chain, 1, &x, NULL, NULL);
    loom_tensor_destroy(x);
  }
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.interpreted == 3);
  CHECK(s.cache.failed_compiles == 1);
  CHECK(s.cache.entries == 2);
  char *text = NULL;
  CHECK_OK(loom_trace_explain(t, &text));
  CHECK(text && strstr(text, " eager ") && strstr(text, " failed "));
  free(text);
  loom_trace_destroy(t);
  unsetenv("LOOM_CC");
}

/* Past its recompile limit a site runs in the interpreter (with one
 * warning), with the same results. */
static void test_recompile_limit(void) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.spec_workers = 0;
  o.recompile_limit = 2;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  trace_sizes(t, chain, 2, 5, 0, exact_dims);
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.cache.compiles == 2);
  CHECK(s.interpreted == 2);
  CHECK(s.recompiles == 3);
  CHECK(s.cache.entries == 4); /* two compiled, two eager */
  loom_trace_destroy(t);
}

/* LOOM_RECOMPILE_UNLIMITED: every size compiles, none is interpreted;
 * below it the option is refused. */
static void test_recompile_unlimited(void) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.spec_workers = 0;
  o.recompile_limit = LOOM_RECOMPILE_UNLIMITED;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  trace_sizes(t, chain, 2, 11, 0, exact_dims);
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.cache.compiles == 10);
  CHECK(s.interpreted == 0);
  loom_trace_destroy(t);
  o.recompile_limit = -2;
  CHECK_ERR(loom_trace_create(&o, &t), LOOM_ERR_INVALID, "recompile_limit");
}

/* A read that fails (an index out of range) leaves the step usable: a
 * value that does not depend on the failure reads, one that does fails
 * again with the same error. */
static void test_failed_read_keeps_the_step(void) {
  loom_trace_t *t = new_trace(0);
  loom_graph_t *g = loom_trace_graph(t);
  int64_t shape[1] = {4}, ishape[1] = {2};
  loom_tensor_t *xt = test_rand_tensor(LOOM_F32, 1, shape, -1, 1);
  int64_t bad_index[2] = {1, 9};
  loom_tensor_t *it = NULL;
  CHECK_OK(loom_tensor_from_data(LOOM_I64, 1, ishape, bad_index, sizeof bad_index, &it));
  loom_value_t x, idx, picked, sq, doubled;
  CHECK_OK(loom_trace_input(t, xt, NULL, &x));
  CHECK_OK(loom_trace_input(t, it, NULL, &idx));
  CHECK_OK(loom_gather(g, x, idx, 0, &picked));
  CHECK_OK(loom_mul(g, picked, picked, &sq));
  loom_value_t two;
  CHECK_OK(scalar(g, 2, &two));
  CHECK_OK(loom_mul(g, x, two, &doubled));
  const loom_tensor_t *out;
  CHECK_ERR(loom_trace_read(t, sq, &out), LOOM_ERR_VALUE, "out of range");
  CHECK_OK(loom_trace_read(t, doubled, &out));
  for (int i = 0; i < 4; i++) CHECK_NEAR(test_get(out, i), 2 * test_get(xt, i), 1e-6, 0);
  CHECK_ERR(loom_trace_read(t, picked, &out), LOOM_ERR_VALUE, "out of range");
  CHECK_OK(loom_trace_step_end(t));
  loom_tensor_destroy(xt);
  loom_tensor_destroy(it);
  loom_trace_destroy(t);
}

/* An op over a symbolic dim is checked at this step's size when it is
 * recorded: a conv whose window is larger than the image, a reflect pad
 * wider than its dim, fail at the call, naming the sizes, and leave
 * nothing behind: the step's other values read, and a later step whose
 * sizes fit runs the same ops. */
static void test_sizes_checked_when_recorded(void) {
  loom_trace_t *t = new_trace(0);
  loom_graph_t *g = loom_trace_graph(t);
  loom_dim_policy_t sym = {.kind = LOOM_DIM_SYMBOLIC, .name = "h"};
  loom_tensor_t *w = test_rand_tensor(LOOM_F32, 4, (int64_t[]){2, 1, 3, 3}, -1, 1);
  for (int64_t size = 6; size >= 2; size -= 4) {
    loom_tensor_t *xt = test_rand_tensor(LOOM_F32, 4, (int64_t[]){1, 1, size, size}, -1, 1);
    loom_value_t x, wv, y, p, two, doubled;
    CHECK_OK(loom_trace_input(t, xt, (loom_dim_policy_t[]){{0}, {0}, sym, sym}, &x));
    CHECK_OK(loom_graph_constant(g, w, &wv));
    const int64_t pads[8] = {0, 0, 0, 3, 0, 0, 0, 3};
    if (size == 2) {
      CHECK_ERR(loom_conv2d(g, x, wv, 0, wv, &(loom_conv_params_t){0}, &y), LOOM_ERR_SHAPE,
                "too small");
      CHECK_ERR(loom_pad(g, x, pads, LOOM_PAD_REFLECT, 0, &p), LOOM_ERR_SHAPE, "size 2");
    }
    CHECK_OK(scalar(g, 2, &two));
    CHECK_OK(loom_mul(g, x, two, &doubled));
    const loom_tensor_t *out;
    if (size == 6) {
      CHECK_OK(loom_conv2d(g, x, wv, 0, wv, &(loom_conv_params_t){0}, &y));
      CHECK_OK(loom_pad(g, x, pads, LOOM_PAD_REFLECT, 0, &p));
      CHECK_OK(loom_trace_read(t, y, &out));
      CHECK(loom_tensor_dim(out, 2) == size - 2);
      CHECK_OK(loom_trace_read(t, p, &out));
      CHECK(loom_tensor_dim(out, 3) == size + 6);
    }
    CHECK_OK(loom_trace_read(t, doubled, &out));
    for (int i = 0; i < size * size; i++)
      CHECK_NEAR(test_get(out, i), 2 * test_get(xt, i), 1e-6, 0);
    CHECK_OK(loom_trace_step_end(t));
    loom_tensor_destroy(xt);
  }
  loom_tensor_destroy(w);
  loom_trace_destroy(t);
}

static void test_errors(void) {
  loom_trace_t *t = new_trace(0);
  loom_value_t v = {12345};
  const loom_tensor_t *out;
  CHECK_ERR(loom_trace_read(t, v, &out), LOOM_ERR_INVALID, "not a value");
  CHECK_ERR(loom_trace_input(t, NULL, NULL, &v), LOOM_ERR_INVALID, "null");
  loom_dim_policy_t pol = {.kind = LOOM_DIM_BUCKET, .n_buckets = 2, .buckets = {8, 4}};
  int64_t shape[1] = {3};
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 1, shape, -1, 1);
  CHECK_ERR(loom_trace_input(t, x, &pol, &v), LOOM_ERR_INVALID, "ascending");
  /* two inputs sharing a symbol must agree on its size */
  loom_dim_policy_t sym = {.kind = LOOM_DIM_SYMBOLIC, .name = "n"};
  int64_t shape4[1] = {4};
  loom_tensor_t *y = test_rand_tensor(LOOM_F32, 1, shape4, -1, 1);
  CHECK_OK(loom_trace_input(t, x, &sym, &v));
  CHECK_ERR(loom_trace_input(t, y, &sym, &v), LOOM_ERR_SHAPE, "'n'");
  CHECK_ERR(loom_trace_backward(t, v), LOOM_ERR_SHAPE, "scalar");
  /* An op the trace refuses leaves nothing behind: the step then ends, and
   * the next reads what it records. */
  loom_value_t p, twice;
  const loom_tensor_t *got;
  CHECK_OK(loom_trace_param(t, x, &p));
  CHECK_ERR(loom_assign(loom_trace_graph(t), p, v), LOOM_ERR_UNSUPPORTED, "persistent state");
  CHECK_OK(loom_trace_step_end(t));
  CHECK_OK(loom_trace_input(t, x, NULL, &v));
  CHECK_OK(loom_add(loom_trace_graph(t), v, v, &twice));
  CHECK_OK(loom_trace_read(t, twice, &got));
  CHECK_NEAR(test_get(got, 1), 2 * test_get(x, 1), 0, 0);
  CHECK_ERR(loom_trace_wait_compiles_for(t, NAN), LOOM_ERR_INVALID, "NaN");
  CHECK_ERR(loom_trace_wait_compiles_for(NULL, 1), LOOM_ERR_INVALID, "null");
  CHECK_OK(loom_trace_wait_compiles_for(t, 0));
  loom_tensor_destroy(x);
  loom_tensor_destroy(y);
  loom_trace_destroy(t);
}

int main(void) {
  test_seed(5);
  TEST_RUN(test_chain);
  TEST_RUN(test_read_midway);
  TEST_RUN(test_read_after_its_cut);
  TEST_RUN(test_break_in_a_loop);
  TEST_RUN(test_recurrent_state);
  TEST_RUN(test_nonzero);
  TEST_RUN(test_callback);
  TEST_RUN(test_branches);
  TEST_RUN(test_policies);
  TEST_RUN(test_symbolic_attrs);
  TEST_RUN(test_unpadded_bucket);
  TEST_RUN(test_exact_attr_sizes_share_a_site);
  TEST_RUN(test_auto);
  TEST_RUN(test_shared_cache);
  TEST_RUN(test_tiered);
  TEST_RUN(test_pending_misses_are_no_recompiles);
  TEST_RUN(test_second_sighting);
  TEST_RUN(test_speculation);
  TEST_RUN(test_threads);
  TEST_RUN(test_compile_failure);
  TEST_RUN(test_recompile_limit);
  TEST_RUN(test_recompile_unlimited);
  TEST_RUN(test_auto_default);
  TEST_RUN(test_errors);
  TEST_RUN(test_failed_read_keeps_the_step);
  TEST_RUN(test_sizes_checked_when_recorded);
  TEST_RUN(test_allocation_failures);
  return test_summary();
}
