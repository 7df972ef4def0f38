/* The GNN workload (examples/dynamic/gnn.c) trained through traces: its
 * first loss equals a plain C GCN in double on the same graph; the
 * compiled trace and the interpreted one (compile = 0) give the same
 * losses and parameters over graphs of different sizes; exact, bucket
 * and auto policies give the symbolic policy's losses; and over a longer
 * run with symbolic node and edge counts the step compiles once (a
 * forward and a backward). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dynamic.h"
#include "harness.h"

enum { F = 32, HID = 64, C = 8 };
enum { N_PARAMS = HID * F + HID + C * HID + C };

/* out (n, d) = mean over in-edges of h (n, d). */
static void aggregate(int64_t n, int64_t e, const int64_t *src, const int64_t *dst,
                      const double *deg, const double *h, int d, double *out) {
  memset(out, 0, sizeof *out * (size_t)(n * d));
  for (int64_t k = 0; k < e; k++)
    for (int j = 0; j < d; j++) out[dst[k] * d + j] += h[src[k] * d + j];
  for (int64_t i = 0; i < n; i++)
    for (int j = 0; j < d; j++) out[i * d + j] /= deg[i];
}

/* y (n, o) = x (n, i) W^T + b, W (o, i). */
static void linear(int64_t n, int in, int o, const double *x, const float *w,
                   const float *b, double *y) {
  for (int64_t r = 0; r < n; r++)
    for (int c = 0; c < o; c++) {
      double v = b ? b[c] : 0;
      for (int k = 0; k < in; k++) v += x[r * in + k] * w[c * in + k];
      y[r * o + c] = v;
    }
}

/* The first step's loss by the definition (bench/peers/torch_dynamic.py's
 * Gnn), in double. */
static double reference_loss(void) {
  int64_t n = dyn_randint("gnn.nodes", 0, 200, 1000), e = 5 * n;
  int64_t s1[2] = {HID, F}, s2[2] = {C, HID}, st[2] = {C, F}, sx[2] = {n, F};
  int64_t h = HID, c = C;
  loom_tensor_t *tw1, *tb1, *tw2, *tb2, *tt, *tx;
  CHECK_OK(dyn_values("gnn.w1", 1 / sqrt(F), 2, s1, &tw1));
  CHECK_OK(dyn_values("gnn.b1", 1 / sqrt(F), 1, &h, &tb1));
  CHECK_OK(dyn_values("gnn.w2", 1 / sqrt(HID), 2, s2, &tw2));
  CHECK_OK(dyn_values("gnn.b2", 1 / sqrt(HID), 1, &c, &tb2));
  CHECK_OK(dyn_values("gnn.teacher", 1.0, 2, st, &tt));
  CHECK_OK(dyn_values("gnn.x.0", 1.0, 2, sx, &tx));
  int64_t *src = calloc((size_t)e, sizeof *src), *dst = calloc((size_t)e, sizeof *dst);
  double *deg = calloc((size_t)n, sizeof *deg), *x = calloc((size_t)(n * F), sizeof *x);
  double *a = calloc((size_t)(n * HID), sizeof *a), *b = calloc((size_t)(n * HID), sizeof *b);
  for (int64_t k = 0; k < e; k++) {
    src[k] = k < 4 * n ? dyn_randint("gnn.src.0", k, 0, n - 1) : k - 4 * n;
    dst[k] = k < 4 * n ? dyn_randint("gnn.dst.0", k, 0, n - 1) : k - 4 * n;
    deg[dst[k]] += 1;
  }
  const float *xf = loom_tensor_data(tx);
  for (int64_t i = 0; i < n * F; i++) x[i] = xf[i];
  /* labels: argmax of mean_in(x) T^T */
  aggregate(n, e, src, dst, deg, x, F, a);
  linear(n, F, C, a, loom_tensor_data(tt), NULL, b);
  int *y = calloc((size_t)n, sizeof *y);
  for (int64_t i = 0; i < n; i++) {
    y[i] = 0;
    for (int k = 1; k < C; k++)
      if (b[i * C + k] > b[i * C + y[i]]) y[i] = k;
  }
  /* the model */
  linear(n, F, HID, x, loom_tensor_data(tw1), NULL, b);
  aggregate(n, e, src, dst, deg, b, HID, a);
  const float *b1 = loom_tensor_data(tb1);
  for (int64_t i = 0; i < n * HID; i++) a[i] = fmax(a[i] + b1[i % HID], 0);
  linear(n, HID, C, a, loom_tensor_data(tw2), NULL, b);
  aggregate(n, e, src, dst, deg, b, C, a);
  const float *b2 = loom_tensor_data(tb2);
  double loss = 0;
  for (int64_t i = 0; i < n; i++) {
    double mx = -INFINITY, z = 0, *l = a + i * C;
    for (int k = 0; k < C; k++) mx = fmax(mx, l[k] += b2[k]);
    for (int k = 0; k < C; k++) z += exp(l[k] - mx);
    loss += (log(z) + mx - l[y[i]]) / (double)n;
  }
  loom_tensor_t *all[] = {tw1, tb1, tw2, tb2, tt, tx};
  for (int i = 0; i < 6; i++) loom_tensor_destroy(all[i]);
  free(src), free(dst), free(deg), free(x), free(a), free(b), free(y);
  return loss;
}

/* steps steps (no warm-up) under policy; the final parameters into params. */
static dyn_result_t run(loom_dim_policy_kind_t policy, int compile, int steps,
                        float *params) {
  dyn_config_t c = {.threads = 1, .policy = policy, .compile = compile, .wait_compiles = 1,
                    .params = params, .params_cap = params ? N_PARAMS : 0};
  dyn_result_t r;
  memset(&r, 0, sizeof r);
  CHECK_OK(dyn_gnn_run(&c, 0, steps, &r));
  if (params) CHECK(r.n_params == N_PARAMS);
  return r;
}

/* Compiled (symbolic N and E) against interpreted, three steps on three
 * graphs; the first loss against the plain C model. */
static void test_compiled_vs_interpreted(void) {
  float *pc = calloc(N_PARAMS, sizeof *pc), *pi = calloc(N_PARAMS, sizeof *pi);
  dyn_result_t c = run(LOOM_DIM_SYMBOLIC, 1, 3, pc);
  dyn_result_t i = run(LOOM_DIM_SYMBOLIC, 0, 3, pi);
  CHECK_NEAR(c.first_loss, reference_loss(), 0, 1e-5);
  CHECK_NEAR(c.first_loss, i.first_loss, 0, 1e-4);
  CHECK_NEAR(c.last_loss, i.last_loss, 0, 1e-4);
  CHECK_FLOATS(pc, pi, N_PARAMS, 1e-5, 1e-4);
  CHECK(i.stats.segments > 0 && i.stats.interpreted >= i.stats.segments);
  CHECK(c.stats.interpreted == 0);
  free(pc);
  free(pi);
}

/* Every policy trains the same model: the losses of symbolic. */
static void test_policies(void) {
  dyn_result_t sym = run(LOOM_DIM_SYMBOLIC, 1, 2, NULL);
  const loom_dim_policy_kind_t others[] = {LOOM_DIM_EXACT, LOOM_DIM_BUCKET, LOOM_DIM_AUTO};
  for (int k = 0; k < 3; k++) {
    dyn_result_t r = run(others[k], 1, 2, NULL);
    CHECK_NEAR(r.first_loss, sym.first_loss, 0, 1e-4);
    CHECK_NEAR(r.last_loss, sym.last_loss, 0, 1e-4);
  }
}

/* 30 steps on 30 graphs: one forward and one backward compiled. */
static void test_compiles_bounded(void) {
  dyn_result_t r = run(LOOM_DIM_SYMBOLIC, 1, 30, NULL);
  CHECK(r.stats.cache.compiles <= 2);
  CHECK(r.stats.misses <= 2);
  CHECK(r.stats.interpreted == 0);
  CHECK(r.stats.hits >= 29);
  CHECK(r.last_loss < r.first_loss);
}

/* Written without tuning (no policies declared, the trace's defaults):
 * nothing runs in the fallback, and the compiles stay bounded. */
static void test_untuned(void) {
  dyn_result_t r = run(LOOM_DIM_AUTO, 1, 10, NULL);
  CHECK(r.stats.interpreted == 0);
  CHECK(r.stats.cache.compiles <= 4);
}

int main(void) {
  TEST_RUN(test_compiled_vs_interpreted);
  TEST_RUN(test_policies);
  TEST_RUN(test_compiles_bounded);
  TEST_RUN(test_untuned);
  return test_summary();
}
