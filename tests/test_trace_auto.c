/* Automatic dynamic shapes, the default policy of inputs entered without
 * policies: a dim is a constant until its size changes, then symbolic;
 * sizes 0 and 1 stay constants; dims of one size share a symbol; an op
 * that needs a symbolic dim's size specializes it for its step. Each
 * result is checked against values computed here in plain C. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "loom/loom.h"
#include "loom/ops.h"
#include "loom/trace.h"

#define TRY(call)                      \
  do {                                 \
    loom_status_t try_s_ = (call);     \
    if (try_s_ != LOOM_OK) return try_s_; \
  } while (0)

static loom_trace_t *auto_trace(int auto_after, int limit) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.spec_workers = 0;
  o.input_dims.auto_after = auto_after;
  o.recompile_limit = limit;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  return t;
}

static loom_trace_stats_t stats_of(const loom_trace_t *t) {
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  return s;
}

/* x (n, 4) with x[i][j] = sin(i + 3j + n). */
static loom_tensor_t *make_x(int64_t n, int64_t cols) {
  int64_t shape[2] = {n, cols};
  loom_tensor_t *x = NULL;
  CHECK_OK(loom_tensor_create(LOOM_F32, 2, shape, &x));
  float *p = x ? loom_tensor_data(x) : NULL;
  for (int64_t i = 0; p && i < n * cols; i++)
    p[i] = (float)sin((double)(i / cols) + 3.0 * (double)(i % cols) + (double)n);
  return x;
}

/* The row sums of relu(2x + 1) - tanh(x), by hand. */
static void chain_want(const loom_tensor_t *x, double *want) {
  const float *p = loom_tensor_data(x);
  int64_t n = loom_tensor_dim(x, 0), cols = loom_tensor_dim(x, 1);
  for (int64_t i = 0; i < n; i++) {
    want[i] = 0;
    for (int64_t j = 0; j < cols; j++) {
      double v = p[i * cols + j];
      want[i] += fmax(2 * v + 1, 0) - tanh(v);
    }
  }
}

/* relu(2x + 1) - tanh(x), summed over dim 1. */
static loom_status_t chain(loom_graph_t *g, loom_value_t x, loom_value_t *out) {
  loom_value_t two, one, a, b, r, th, d;
  TRY(loom_full(g, 0, NULL, 2.0, LOOM_F32, &two));
  TRY(loom_full(g, 0, NULL, 1.0, LOOM_F32, &one));
  TRY(loom_mul(g, x, two, &a));
  TRY(loom_add(g, a, one, &b));
  TRY(loom_relu(g, b, &r));
  TRY(loom_tanh(g, x, &th));
  TRY(loom_sub(g, r, th, &d));
  const int64_t axis = 1;
  return loom_sum(g, d, 1, &axis, 0, out);
}

/* One step of chain over x (n, cols), entered without policies, checked. */
static void chain_step(loom_trace_t *t, int64_t n, int64_t cols) {
  loom_tensor_t *x = make_x(n, cols);
  if (!x) return;
  loom_value_t vx, y;
  const loom_tensor_t *got = NULL;
  CHECK_OK(loom_trace_input(t, x, NULL, &vx));
  CHECK_OK(chain(loom_trace_graph(t), vx, &y));
  CHECK_OK(loom_trace_read(t, y, &got));
  double *want = malloc(sizeof *want * (size_t)n);
  chain_want(x, want);
  if (got) CHECK_TENSOR(got, want, n, 1e-5, 1e-5);
  free(want);
  CHECK_OK(loom_trace_step_end(t));
  loom_tensor_destroy(x);
}

/* Fourteen sizes, no policies: one exact compile, then one symbolic
 * executable for every later size, nothing interpreted. */
static void test_default_is_automatic(void) {
  loom_trace_t *t = auto_trace(0, 0);
  for (int64_t n = 2; n <= 15; n++) chain_step(t, n, 4);
  loom_trace_stats_t s = stats_of(t);
  CHECK(s.cache.compiles == 2);
  CHECK(s.misses == 2 && s.hits == 12);
  CHECK(s.interpreted == 0 && s.specialized == 0);
  loom_trace_destroy(t);
}

/* auto_after 3: sizes 2, 3 and 4 compile exactly, the rest share one
 * symbolic executable; a size seen before the switch hits it too. */
static void test_auto_after(void) {
  loom_trace_t *t = auto_trace(3, 0);
  for (int64_t n = 2; n <= 9; n++) chain_step(t, n, 4);
  chain_step(t, 3, 4);
  loom_trace_stats_t s = stats_of(t);
  CHECK(s.cache.compiles == 4);
  CHECK(s.interpreted == 0);
  loom_trace_destroy(t);
}

/* Sizes 0 and 1 stay constants after the switch (broadcasting depends on
 * them): 2 exact; 3 switches (symbolic); 1 is its own key; 4 hits the
 * symbolic one. */
static void test_zero_one_stay_constant(void) {
  loom_trace_t *t = auto_trace(0, 0);
  const int64_t sizes[] = {2, 3, 1, 4, 1, 5};
  for (int i = 0; i < 6; i++) chain_step(t, sizes[i], 4);
  loom_trace_stats_t s = stats_of(t);
  CHECK(s.cache.compiles == 3);
  CHECK(s.hits == 3);
  loom_trace_destroy(t);
}

/* Two inputs whose dims change together: once symbolic, dims of one size
 * in a step are one symbol (duck sizing), so x + y needs no
 * specialization and one executable serves every size. */
static void test_duck_sizing(void) {
  loom_trace_t *t = auto_trace(0, 0);
  for (int64_t n = 2; n <= 8; n++) {
    loom_tensor_t *x = make_x(n, 3), *y = make_x(n, 3);
    loom_value_t vx, vy, sum;
    const loom_tensor_t *got = NULL;
    CHECK_OK(loom_trace_input(t, x, NULL, &vx));
    CHECK_OK(loom_trace_input(t, y, NULL, &vy));
    CHECK_OK(loom_add(loom_trace_graph(t), vx, vy, &sum));
    CHECK_OK(loom_trace_read(t, sum, &got));
    double want[8 * 3];
    const float *px = loom_tensor_data(x);
    for (int64_t i = 0; i < n * 3; i++) want[i] = 2.0 * px[i];
    if (got) CHECK_TENSOR(got, want, n * 3, 1e-6, 1e-6);
    CHECK_OK(loom_trace_step_end(t));
    loom_tensor_destroy(x);
    loom_tensor_destroy(y);
  }
  loom_trace_stats_t s = stats_of(t);
  CHECK(s.cache.compiles == 2);
  CHECK(s.specialized == 0);
  loom_trace_destroy(t);
}

/* reshape(x, {n * 4}) with n read from the step (a constant to the
 * trace): once n is symbolic the reshape cannot prove the counts equal,
 * so it specializes n for the step (LOOM_LOG=recompiles says so), and the
 * results stay right; past the recompile limit the site runs the
 * fallback. Written with x's symbolic dims (loom_value_type), the same
 * program compiles once after the switch. */
static loom_status_t flatten(loom_trace_t *t, loom_value_t x, int symbolic,
                             loom_value_t *out) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_dim_t flat;
  if (symbolic) {
    loom_dim_t dims[2];
    TRY(loom_value_type(g, x, NULL, NULL, dims));
    TRY(loom_dim_mul(g, dims[0], dims[1], &flat));
  } else {
    int rank;
    int64_t shape[LOOM_MAX_RANK];
    TRY(loom_trace_shape(t, x, &rank, shape));
    flat = shape[0] * shape[1];
  }
  loom_value_t f;
  TRY(loom_reshape(g, x, 1, &flat, &f));
  return loom_softmax(g, f, 0, out);
}

static int flatten_sizes(int symbolic, int64_t hi, loom_trace_stats_t *out) {
  loom_trace_t *t = auto_trace(0, 3);
  for (int64_t n = 2; n <= hi; n++) {
    loom_tensor_t *x = make_x(n, 4);
    loom_value_t vx, y;
    const loom_tensor_t *got = NULL;
    CHECK_OK(loom_trace_input(t, x, NULL, &vx));
    CHECK_OK(flatten(t, vx, symbolic, &y));
    CHECK_OK(loom_trace_read(t, y, &got));
    const float *p = loom_tensor_data(x);
    double total = 0, want[16 * 4];
    for (int64_t i = 0; i < n * 4; i++) total += exp(p[i]);
    for (int64_t i = 0; i < n * 4; i++) want[i] = exp(p[i]) / total;
    if (got) CHECK_TENSOR(got, want, n * 4, 1e-6, 1e-5);
    CHECK_OK(loom_trace_step_end(t));
    loom_tensor_destroy(x);
  }
  *out = stats_of(t);
  loom_trace_destroy(t);
  return 0;
}

static void test_specialization(void) {
  loom_trace_stats_t s;
  test_capture_begin("recompiles");
  flatten_sizes(0, 9, &s);
  char *log = test_capture_end();
  CHECK(s.specialized == 7); /* sizes 3 to 9 */
  /* sizes 2, 3 and 4 up to the limit of 3; 5 to 9 in the fallback */
  CHECK(s.cache.compiles == 3 && s.interpreted == 5);
  CHECK(log && strstr(log, "symbolic from now on") && strstr(log, "specialized to size 3") &&
        strstr(log, "reshape"));
  free(log);
  flatten_sizes(1, 9, &s);
  CHECK(s.specialized == 0 && s.cache.compiles == 2 && s.interpreted == 0);
}

/* An explicit LOOM_DIM_EXACT policy, and input_dims = LOOM_DIM_EXACT for a
 * whole trace, still key every size. */
static void test_exact_still_exact(void) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.spec_workers = 0;
  o.input_dims.kind = LOOM_DIM_EXACT;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  for (int64_t n = 2; n <= 5; n++) chain_step(t, n, 4);
  CHECK(stats_of(t).cache.compiles == 4);
  loom_trace_destroy(t);
  o.input_dims.name = "n";
  CHECK_ERR(loom_trace_create(&o, &t), LOOM_ERR_INVALID, "input_dims.name");
  o.input_dims = (loom_dim_policy_t){.kind = LOOM_DIM_AUTO, .auto_after = 17};
  CHECK_ERR(loom_trace_create(&o, &t), LOOM_ERR_INVALID, "auto_after");
}

int main(void) {
  TEST_RUN(test_default_is_automatic);
  TEST_RUN(test_auto_after);
  TEST_RUN(test_zero_one_stay_constant);
  TEST_RUN(test_duck_sizing);
  TEST_RUN(test_specialization);
  TEST_RUN(test_exact_still_exact);
  return test_summary();
}
