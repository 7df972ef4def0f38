/* The mixture-of-experts workload (examples/dynamic/moe.c) trained
 * through traces: its first loss equals a plain C model in double on the
 * same batch; the compiled trace (tokens per expert symbolic) and the
 * interpreted one give the same losses and parameters over steps whose
 * eight counts all change; the bucket policy gives the same losses and
 * parameters, its eight counts sharing one bucket; and
 * over a longer run the compiles stay within the segment kinds of a step
 * (routing, experts and head: a forward and a backward each). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dynamic.h"
#include "harness.h"

enum { N = 256, D = 64, E = 8, HID = 128, C = 8 };
enum { N_PARAMS = E * D + E * (HID * D + HID + D * HID + D) + C * D + C };

typedef struct weights {
  loom_tensor_t *router, *w1[E], *b1[E], *w2[E], *b2[E], *head, *head_b, *teacher, *x;
} weights_t;

static const float *f(const loom_tensor_t *t) { return loom_tensor_data(t); }

static void load(weights_t *w) {
  const double bd = 1 / sqrt((double)D), bh = 1 / sqrt((double)HID);
  int64_t rs[2] = {E, D}, w1s[2] = {HID, D}, w2s[2] = {D, HID}, b1s[1] = {HID};
  int64_t b2s[1] = {D}, hs[2] = {C, D}, hbs[1] = {C}, xs[2] = {N, D};
  char name[32];
  CHECK_OK(dyn_values("moe.router", bd, 2, rs, &w->router));
  for (int e = 0; e < E; e++) {
    CHECK_OK(dyn_values(dyn_name(name, sizeof name, "moe.e%d.w1", e), bd, 2, w1s, &w->w1[e]));
    CHECK_OK(dyn_values(dyn_name(name, sizeof name, "moe.e%d.b1", e), bd, 1, b1s, &w->b1[e]));
    CHECK_OK(dyn_values(dyn_name(name, sizeof name, "moe.e%d.w2", e), bh, 2, w2s, &w->w2[e]));
    CHECK_OK(dyn_values(dyn_name(name, sizeof name, "moe.e%d.b2", e), bh, 1, b2s, &w->b2[e]));
  }
  CHECK_OK(dyn_values("moe.head", bd, 2, hs, &w->head));
  CHECK_OK(dyn_values("moe.head_b", bd, 1, hbs, &w->head_b));
  CHECK_OK(dyn_values("moe.teacher", 1.0, 2, hs, &w->teacher));
  CHECK_OK(dyn_values("moe.x.0", 1.0, 2, xs, &w->x));
}

static void unload(weights_t *w) {
  loom_tensor_t *all[] = {w->router, w->head, w->head_b, w->teacher, w->x};
  for (int i = 0; i < 5; i++) loom_tensor_destroy(all[i]);
  for (int e = 0; e < E; e++) {
    loom_tensor_destroy(w->w1[e]);
    loom_tensor_destroy(w->b1[e]);
    loom_tensor_destroy(w->w2[e]);
    loom_tensor_destroy(w->b2[e]);
  }
}

/* y (rows) = W (rows, cols) v + b */
static void affine(const float *W, const float *b, const double *v, int rows,
                   int cols, double *y) {
  for (int r = 0; r < rows; r++) {
    double s = b ? b[r] : 0;
    for (int k = 0; k < cols; k++) s += W[r * cols + k] * v[k];
    y[r] = s;
  }
}

/* The loss of one token by the definition (bench/peers/torch_dynamic.py's
 * Moe), in double. */
static double token_loss(const weights_t *w, const float *xf) {
  double x[D], p[E], z[D], logits[C], teach[C], h[HID], y[D];
  for (int d = 0; d < D; d++) x[d] = xf[d];
  affine(f(w->router), NULL, x, E, D, p);
  double mx = -INFINITY, sum = 0;
  for (int e = 0; e < E; e++) mx = fmax(mx, p[e]);
  for (int e = 0; e < E; e++) sum += p[e] = exp(p[e] - mx);
  int top[2] = {-1, -1};
  for (int k = 0; k < 2; k++)
    for (int e = 0; e < E; e++)
      if (e != top[0] && (top[k] < 0 || p[e] > p[top[k]])) top[k] = e;
  memcpy(z, x, sizeof z);
  for (int k = 0; k < 2; k++) {
    int e = top[k];
    double gate = p[e] / (p[top[0]] + p[top[1]]);
    affine(f(w->w1[e]), f(w->b1[e]), x, HID, D, h);
    for (int j = 0; j < HID; j++) h[j] = fmax(h[j], 0);
    affine(f(w->w2[e]), f(w->b2[e]), h, D, HID, y);
    for (int d = 0; d < D; d++) z[d] += gate * y[d];
  }
  affine(f(w->head), f(w->head_b), z, C, D, logits);
  affine(f(w->teacher), NULL, x, C, D, teach);
  int label = 0;
  for (int c = 1; c < C; c++)
    if (teach[c] > teach[label]) label = c;
  mx = -INFINITY, sum = 0;
  for (int c = 0; c < C; c++) mx = fmax(mx, logits[c]);
  for (int c = 0; c < C; c++) sum += exp(logits[c] - mx);
  return log(sum) + mx - logits[label];
}

static double reference_loss(void) {
  weights_t w;
  load(&w);
  double loss = 0;
  for (int i = 0; i < N; i++) loss += token_loss(&w, f(w.x) + i * D) / N;
  unload(&w);
  return loss;
}

/* steps steps (no warm-up) under policy; the losses into losses, the final
 * parameters into params (either may be NULL). */
static dyn_result_t run(loom_dim_policy_kind_t policy, int compile, int steps,
                        double *losses, float *params) {
  dyn_config_t c = {.threads = 1, .policy = policy, .compile = compile, .wait_compiles = 1,
                    .losses = losses, .params = params,
                    .params_cap = params ? N_PARAMS : 0};
  dyn_result_t r;
  memset(&r, 0, sizeof r);
  CHECK_OK(dyn_moe_run(&c, 0, steps, &r));
  if (params) CHECK(r.n_params == N_PARAMS);
  return r;
}

enum { STEPS = 3, LONG = 12 };

/* The interpreted trace (exact sizes): the truth of the compiled ones. */
static double interp_losses[STEPS];
static float *interp_params;

/* Interpreted: the first loss against the plain C model. */
static void test_interpreted(void) {
  interp_params = calloc(N_PARAMS, sizeof *interp_params);
  dyn_result_t r = run(LOOM_DIM_EXACT, 0, STEPS, interp_losses, interp_params);
  CHECK_NEAR(interp_losses[0], reference_loss(), 0, 1e-5);
  CHECK(r.stats.interpreted >= r.stats.segments && r.stats.eager_ops == STEPS * E);
}

/* Symbolic counts: the interpreted losses and parameters over the first
 * steps, then LONG steps of new counts compile each segment kind once. */
static void test_symbolic(void) {
  double losses[LONG];
  float *params = calloc(N_PARAMS, sizeof *params);
  dyn_result_t r = run(LOOM_DIM_SYMBOLIC, 1, STEPS, losses, params);
  for (int k = 0; k < STEPS; k++) CHECK_NEAR(losses[k], interp_losses[k], 0, 1e-4);
  CHECK_FLOATS(params, interp_params, N_PARAMS, 1e-5, 1e-4);
  CHECK(r.stats.interpreted == 0);
  r = run(LOOM_DIM_SYMBOLIC, 1, LONG, losses, NULL);
  CHECK(r.stats.cache.compiles <= 4);
  CHECK(r.stats.misses <= 2);
  CHECK(r.stats.interpreted == 0);
  CHECK(r.stats.hits >= 2 * LONG - 2);
  CHECK(r.last_loss < r.first_loss);
  free(params);
}

/* Bucketed counts train the same model, and the eight experts' counts
 * share one bucket (the largest of theirs), so that the experts'
 * segment is keyed by one bucket, not by eight: without that, ten steps
 * compiled 32 segments. */
static void test_bucket(void) {
  double losses[STEPS];
  float *params = calloc(N_PARAMS, sizeof *params);
  dyn_result_t r = run(LOOM_DIM_BUCKET, 1, STEPS, losses, params);
  for (int k = 0; k < STEPS; k++) CHECK_NEAR(losses[k], interp_losses[k], 0, 1e-4);
  CHECK_FLOATS(params, interp_params, N_PARAMS, 1e-5, 1e-4);
  CHECK(r.stats.interpreted == 0);
  /* routing and experts, forward and backward, at one or two buckets */
  CHECK(r.stats.cache.compiles - r.stats.cache.spec_compiles <= 6);
  free(params);
}

/* Written without tuning (no policies declared, the trace's defaults):
 * nothing runs in the fallback, and the compiles stay bounded. */
static void test_untuned(void) {
  dyn_result_t r = run(LOOM_DIM_AUTO, 1, 10, NULL, NULL);
  CHECK(r.stats.interpreted == 0);
  CHECK(r.stats.cache.compiles <= 8);
}

int main(void) {
  TEST_RUN(test_interpreted);
  TEST_RUN(test_symbolic);
  TEST_RUN(test_bucket);
  TEST_RUN(test_untuned);
  free(interp_params);
  return test_summary();
}
