/* Stitched paths: a region that repeats after the same segment runs
 * through the hot path's stitched boundary (loom_trace_stats_t.replayed),
 * with the results of the cut's way, which LOOM_STITCH=0 keeps; a region
 * that differs anywhere (an op, an operand, a size) takes the cut's way.
 * Results are checked against plain C and against a trace with stitching
 * off, bit for bit. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "loom/loom.h"
#include "loom/ops.h"
#include "loom/trace.h"

enum { N = 6, T = 12, STEPS = 4 };

static loom_trace_t *make_trace(int stitch) {
  if (stitch) unsetenv("LOOM_STITCH");
  else setenv("LOOM_STITCH", "0", 1);
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.spec_workers = 0;
  o.num_threads = 1;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  unsetenv("LOOM_STITCH");
  return t;
}

static loom_trace_stats_t stats_of(const loom_trace_t *t) {
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  return s;
}

static loom_tensor_t *vec(int64_t n, double seed) {
  loom_tensor_t *x = NULL;
  CHECK_OK(loom_tensor_create(LOOM_F32, 1, &n, &x));
  float *p = x ? loom_tensor_data(x) : NULL;
  for (int64_t i = 0; p && i < n; i++) p[i] = (float)sin(seed + 0.7 * (double)i);
  return x;
}

/* How iteration k of a step combines: 0 tanh(h * w - x), 1 sigmoid in
 * place of tanh (another op), 2 tanh(x - h * w) (the same ops and
 * inputs, wired otherwise), 3 -(-tanh(h * w - x)) (the region goes on
 * past the stitched one's end), 4 h * w - x (it ends before). */
typedef int (*variant_fn)(int step, int k);

static int plain(int step, int k) {
  (void)step, (void)k;
  return 0;
}

/* Every third step differs at one iteration in the op, every other step
 * at another iteration in the wiring. */
static int deviating(int step, int k) {
  if (step % 3 == 2 && k == 5) return 1;
  if (step % 2 == 1 && k == 8) return 2;
  return 0;
}

/* Regions longer and shorter than the stitched one, at other
 * iterations of other steps. */
static int lengths(int step, int k) {
  if (step % 2 == 1 && k == 4) return 3;
  if (step % 3 == 1 && k == 7) return 4;
  return 0;
}

/* tanh for the first half of a step, sigmoid for the second: the path
 * forks after the tanh segment (another tanh, or the first sigmoid). */
static int halves(int step, int k) {
  (void)step;
  return k >= T / 2;
}

/* One step of the recurrence, each h read (a cut per iteration); out
 * gets h after every iteration. */
static void run_step(loom_trace_t *t, int step, variant_fn variant, loom_tensor_t *w,
                     loom_tensor_t *const *xs, loom_tensor_t *h0, float *out) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_value_t vw, h;
  CHECK_OK(loom_trace_param(t, w, &vw));
  CHECK_OK(loom_trace_input(t, h0, NULL, &h));
  for (int k = 0; k < T; k++) {
    loom_value_t x, m, a, next;
    CHECK_OK(loom_trace_input(t, xs[k], NULL, &x));
    CHECK_OK(loom_mul(g, h, vw, &m));
    if (variant(step, k) == 2) CHECK_OK(loom_sub(g, x, m, &a));
    else CHECK_OK(loom_sub(g, m, x, &a));
    if (variant(step, k) == 1) CHECK_OK(loom_sigmoid(g, a, &next));
    else if (variant(step, k) == 4) next = a;
    else CHECK_OK(loom_tanh(g, a, &next));
    if (variant(step, k) == 3) {
      CHECK_OK(loom_neg(g, next, &next));
      CHECK_OK(loom_neg(g, next, &next));
    }
    const loom_tensor_t *real = NULL;
    CHECK_OK(loom_trace_read(t, next, &real));
    if (real) CHECK_OK(loom_tensor_read(real, out + k * N, sizeof(float) * N));
    h = next;
  }
  CHECK_OK(loom_trace_step_end(t));
}

/* The same recurrence in plain C (doubles). */
static void want_step(int step, variant_fn variant, const float *w, loom_tensor_t *const *xs,
                      const float *h0, double *out) {
  double h[N];
  for (int i = 0; i < N; i++) h[i] = h0[i];
  for (int k = 0; k < T; k++) {
    const float *x = loom_tensor_data(xs[k]);
    double next[N];
    for (int i = 0; i < N; i++) {
      double a = h[i] * w[i] - x[i];
      if (variant(step, k) == 2) a = -a;
      next[i] = variant(step, k) == 1 ? 1 / (1 + exp(-a)) : variant(step, k) == 4 ? a : tanh(a);
    }
    memcpy(h, next, sizeof h);
    memcpy(out + k * N, next, sizeof next);
  }
}

/* Runs STEPS steps with stitching on or off; out: every step's states. */
static loom_trace_stats_t run_all(int stitch, variant_fn variant, float *out) {
  loom_trace_t *t = make_trace(stitch);
  loom_tensor_t *w = vec(N, 0.3), *h0 = vec(N, 1.1), *xs[T];
  for (int k = 0; k < T; k++) xs[k] = vec(N, 2.0 + k);
  for (int step = 0; step < STEPS; step++) {
    run_step(t, step, variant, w, xs, h0, out + step * T * N);
    double want[T * N];
    want_step(step, variant, loom_tensor_data(w), xs, loom_tensor_data(h0), want);
    for (int i = 0; i < T * N; i++) CHECK_NEAR(out[step * T * N + i], want[i], 1e-5, 1e-5);
  }
  loom_trace_stats_t s = stats_of(t);
  if (stitch) {
    char *text = NULL;
    CHECK_OK(loom_trace_explain(t, &text));
    CHECK(text && strstr(text, "stitched boundaries: ") && strstr(text, " -> site "));
    free(text);
  }
  for (int k = 0; k < T; k++) loom_tensor_destroy(xs[k]);
  loom_tensor_destroy(w);
  loom_tensor_destroy(h0);
  loom_trace_destroy(t);
  return s;
}

/* A repeating region replays; the results are the cut's way's, bit for
 * bit. */
static void test_replay_matches(void) {
  static float on[STEPS * T * N], off[STEPS * T * N];
  loom_trace_stats_t s = run_all(1, plain, on);
  loom_trace_stats_t u = run_all(0, plain, off);
  CHECK(!memcmp(on, off, sizeof on));
  /* the first step finds the path; later ones replay all but the step's
   * first cut (its link is from the step start) */
  CHECK(s.replayed >= (STEPS - 1) * (T - 2));
  CHECK(u.replayed == 0);
  CHECK(s.segments == u.segments && s.interpreted == 0);
}

/* Regions that differ from the stitched one (another op, another operand
 * with the same ops) take the cut's way: right results, fewer replays. */
static void test_deviation(void) {
  variant_fn variants[] = {deviating, lengths};
  for (int i = 0; i < 2; i++) {
    static float on[STEPS * T * N], off[STEPS * T * N];
    loom_trace_stats_t s = run_all(1, variants[i], on);
    loom_trace_stats_t u = run_all(0, variants[i], off);
    CHECK(!memcmp(on, off, sizeof on));
    CHECK(s.replayed > 0 && s.replayed < s.hits && u.replayed == 0);
  }
}

/* A path that forks after a segment (a TreeLSTM's last leaf before its
 * first inner node) keeps both ways stitched: once learned, every cut of
 * a step replays, with the right results. */
static void test_fork(void) {
  loom_trace_t *t = make_trace(1);
  loom_tensor_t *w = vec(N, 0.3), *h0 = vec(N, 1.1), *xs[T];
  for (int k = 0; k < T; k++) xs[k] = vec(N, 2.0 + k);
  int64_t before = 0;
  for (int step = 0; step < 5; step++) {
    if (step == 3) before = stats_of(t).replayed;
    float out[T * N];
    double want[T * N];
    run_step(t, step, halves, w, xs, h0, out);
    want_step(step, halves, loom_tensor_data(w), xs, loom_tensor_data(h0), want);
    for (int i = 0; i < T * N; i++) CHECK_NEAR(out[i], want[i], 1e-5, 1e-5);
  }
  CHECK(stats_of(t).replayed - before == 2 * T);
  for (int k = 0; k < T; k++) loom_tensor_destroy(xs[k]);
  loom_tensor_destroy(w);
  loom_tensor_destroy(h0);
  loom_trace_destroy(t);
}

/* A size the stitched key did not cover (exact dims) takes the cut's way
 * and compiles, as it would without stitching. */
static void test_new_size(void) {
  loom_trace_t *t = make_trace(1);
  loom_dim_policy_t exact = {.kind = LOOM_DIM_EXACT};
  for (int step = 0; step < 6; step++) {
    int64_t n = step < 3 ? 4 : 5;
    loom_tensor_t *x = vec(n, step);
    loom_graph_t *g = loom_trace_graph(t);
    loom_value_t v, y;
    CHECK_OK(loom_trace_input(t, x, &exact, &v));
    for (int k = 0; k < 3; k++) {
      CHECK_OK(loom_tanh(g, v, &y));
      const loom_tensor_t *real = NULL;
      CHECK_OK(loom_trace_read(t, y, &real));
      const float *px = loom_tensor_data(x), *py = real ? loom_tensor_data(real) : NULL;
      double want = px[n - 1];
      for (int j = 0; j <= k; j++) want = tanh(want);
      if (py) CHECK_NEAR(py[n - 1], want, 1e-6, 1e-6);
      v = y;
    }
    CHECK_OK(loom_trace_step_end(t));
    loom_tensor_destroy(x);
  }
  loom_trace_stats_t s = stats_of(t);
  CHECK(s.cache.compiles == 2 && s.replayed > 0 && s.interpreted == 0);
  loom_trace_destroy(t);
}

/* Training through replayed segments: the gradients equal those of the
 * cut's way, bit for bit. The first `frozen` steps enter w as an input
 * (a frozen weight, no backward): the regions stitched then keep no
 * backward, and must not replay once gradients flow to w. */
static void train(int stitch, int frozen, float *grad) {
  loom_trace_t *t = make_trace(stitch);
  loom_tensor_t *w = vec(N, 0.3), *h0 = vec(N, 1.1), *xs[T];
  for (int k = 0; k < T; k++) xs[k] = vec(N, 2.0 + k);
  for (int step = 0; step < STEPS; step++) {
    loom_graph_t *g = loom_trace_graph(t);
    loom_value_t vw, h, loss;
    if (step < frozen) CHECK_OK(loom_trace_input(t, w, NULL, &vw));
    else CHECK_OK(loom_trace_param(t, w, &vw));
    CHECK_OK(loom_trace_input(t, h0, NULL, &h));
    for (int k = 0; k < T; k++) {
      loom_value_t x, m, a;
      CHECK_OK(loom_trace_input(t, xs[k], NULL, &x));
      CHECK_OK(loom_mul(g, h, vw, &m));
      CHECK_OK(loom_add(g, m, x, &a));
      CHECK_OK(loom_tanh(g, a, &h));
      const loom_tensor_t *real = NULL;
      CHECK_OK(loom_trace_read(t, h, &real));
    }
    const int64_t axis = 0;
    CHECK_OK(loom_sum(g, h, 1, &axis, 0, &loss));
    if (step < frozen) {
      memset(grad + step * N, 0, sizeof(float) * N);
      CHECK_OK(loom_trace_step_end(t));
      continue;
    }
    CHECK_OK(loom_trace_backward(t, loss));
    const loom_tensor_t *gw = NULL;
    CHECK_OK(loom_trace_grad(t, w, &gw));
    if (gw) CHECK_OK(loom_tensor_read(gw, grad + step * N, sizeof(float) * N));
    CHECK_OK(loom_trace_step_end(t));
  }
  if (stitch) CHECK(stats_of(t).replayed > 0);
  for (int k = 0; k < T; k++) loom_tensor_destroy(xs[k]);
  loom_tensor_destroy(w);
  loom_tensor_destroy(h0);
  loom_trace_destroy(t);
}

static void test_training(void) {
  float on[STEPS * N], off[STEPS * N];
  train(1, 0, on);
  train(0, 0, off);
  CHECK(!memcmp(on, off, sizeof on));
}

/* A weight frozen for two steps, then trained: its gradient is the cut's
 * way's, not the zeros of a region replayed without a backward. */
static void test_unfrozen_weight(void) {
  float on[STEPS * N], off[STEPS * N];
  train(1, 2, on);
  train(0, 2, off);
  CHECK(!memcmp(on, off, sizeof on));
  bool nonzero = false;
  for (int i = 2 * N; i < STEPS * N; i++) nonzero |= off[i] != 0;
  CHECK(nonzero);
}

int main(void) {
  TEST_RUN(test_replay_matches);
  TEST_RUN(test_deviation);
  TEST_RUN(test_new_size);
  TEST_RUN(test_fork);
  TEST_RUN(test_training);
  TEST_RUN(test_unfrozen_weight);
  return test_summary();
}
