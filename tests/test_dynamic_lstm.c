/* The LSTM workload (examples/dynamic/lstm.c) trained through traces:
 * its first loss equals a plain C LSTM in double on the same batch; the
 * compiled trace and the interpreted one (compile = 0) give the same
 * losses and parameters over steps of different lengths; exact, bucket
 * and auto policies give the symbolic policy's losses; and over a longer
 * run the compiles stay within the segment kinds of a step (first cell,
 * cell, head: a forward and a backward each). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dynamic.h"
#include "harness.h"

enum { B = 16, F = 32, H = 128, C = 4 };
enum { N_PARAMS = 4 * H * F + 4 * H * H + 4 * H + C * H + C };

static double sigm(double v) { return 1 / (1 + exp(-v)); }

/* The loss of batch k by the definition (bench/peers/torch_dynamic.py's
 * Lstm) with the initial weights, in double. */
static double reference_loss(int k) {
  const double bound = 1 / sqrt((double)H);
  char name[32];
  int64_t T = dyn_randint("lstm.len", k, 5, 200);
  int64_t s_ih[2] = {4 * H, F}, s_hh[2] = {4 * H, H}, s_b[1] = {4 * H};
  int64_t s_out[2] = {C, H}, s_bout[1] = {C}, s_x[3] = {T, B, F};
  loom_tensor_t *w_ih, *w_hh, *b, *w_out, *b_out, *xt;
  CHECK_OK(dyn_values("lstm.w_ih", bound, 2, s_ih, &w_ih));
  CHECK_OK(dyn_values("lstm.w_hh", bound, 2, s_hh, &w_hh));
  CHECK_OK(dyn_values("lstm.b", bound, 1, s_b, &b));
  CHECK_OK(dyn_values("lstm.w_out", bound, 2, s_out, &w_out));
  CHECK_OK(dyn_values("lstm.b_out", bound, 1, s_bout, &b_out));
  CHECK_OK(dyn_values(dyn_name(name, sizeof name, "lstm.x.%d", k), 1.0, 3, s_x, &xt));
  const float *wi = loom_tensor_data(w_ih), *wh = loom_tensor_data(w_hh);
  const float *bb = loom_tensor_data(b), *wo = loom_tensor_data(w_out);
  const float *bo = loom_tensor_data(b_out), *x = loom_tensor_data(xt);
  double loss = 0;
  for (int n = 0; n < B; n++) {
    double h[H] = {0}, c[H] = {0}, g[4 * H], label_sum[C] = {0};
    for (int64_t t = 0; t < T; t++) {
      const float *xv = x + (t * B + n) * F;
      for (int c4 = 0; c4 < C; c4++) label_sum[c4] += xv[c4];
      for (int r = 0; r < 4 * H; r++) {
        double v = bb[r];
        for (int k = 0; k < F; k++) v += wi[r * F + k] * (double)xv[k];
        for (int k = 0; k < H; k++) v += wh[r * H + k] * h[k];
        g[r] = v;
      }
      for (int k = 0; k < H; k++) {
        c[k] = sigm(g[H + k]) * c[k] + sigm(g[k]) * tanh(g[2 * H + k]);
        h[k] = sigm(g[3 * H + k]) * tanh(c[k]);
      }
    }
    int y = 0;
    for (int c4 = 1; c4 < C; c4++)
      if (label_sum[c4] > label_sum[y]) y = c4;
    double logit[C], mx = -INFINITY, z = 0;
    for (int c4 = 0; c4 < C; c4++) {
      logit[c4] = bo[c4];
      for (int k = 0; k < H; k++) logit[c4] += wo[c4 * H + k] * h[k];
      mx = fmax(mx, logit[c4]);
    }
    for (int c4 = 0; c4 < C; c4++) z += exp(logit[c4] - mx);
    loss += (log(z) + mx - logit[y]) / B;
  }
  loom_tensor_t *all[] = {w_ih, w_hh, b, w_out, b_out, xt};
  for (int i = 0; i < 6; i++) loom_tensor_destroy(all[i]);
  return loss;
}

/* Batches from 132 on have short sequences (T = 22, 5, 5, 75, 112, 85,
 * 188, 47, 22, 28, ...): the interpreter and the sanitizers stay quick. */
enum { FIRST = 132 };

/* steps steps (no warm-up) from batch FIRST under policy; the final
 * parameters into params. */
static dyn_result_t run(loom_dim_policy_kind_t policy, int compile, int steps,
                        float *params) {
  dyn_config_t c = {.threads = 1, .policy = policy, .compile = compile, .wait_compiles = 1,
                    .params = params, .params_cap = params ? N_PARAMS : 0,
                    .first_batch = FIRST};
  dyn_result_t r;
  memset(&r, 0, sizeof r);
  CHECK_OK(dyn_lstm_run(&c, 0, steps, &r));
  if (params) CHECK(r.n_params == N_PARAMS);
  return r;
}

/* Compiled (symbolic T) against interpreted, two steps of two lengths
 * (22 and 5); the first loss against the plain C model. */
static void test_compiled_vs_interpreted(void) {
  float *pc = calloc(N_PARAMS, sizeof *pc), *pi = calloc(N_PARAMS, sizeof *pi);
  dyn_result_t c = run(LOOM_DIM_SYMBOLIC, 1, 2, pc);
  dyn_result_t i = run(LOOM_DIM_SYMBOLIC, 0, 2, pi);
  CHECK_NEAR(c.first_loss, reference_loss(FIRST), 0, 1e-5);
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

/* 10 steps of 8 lengths (the recompile limit of a site): symbolic T
 * compiles each segment kind once. */
static void test_compiles_bounded(void) {
  dyn_result_t r = run(LOOM_DIM_SYMBOLIC, 1, 10, NULL);
  CHECK(r.stats.cache.compiles <= 6);
  CHECK(r.stats.misses <= 3);
  CHECK(r.stats.interpreted == 0);
  CHECK(r.stats.hits > 500); /* 589 cells */
}

/* Written without tuning (no policies declared, the trace's defaults
 * but for tiered, so that every miss compiles): nothing runs in the
 * fallback, and the compiles stay bounded. Tiered as well (the default):
 * the first misses run in the fallback while workers compile, the same
 * losses come out, and the compiles stay bounded. */
static void test_untuned(void) {
  dyn_result_t r = run(LOOM_DIM_AUTO, 1, 10, NULL);
  CHECK(r.stats.interpreted == 0);
  CHECK(r.stats.cache.compiles <= 12);
  dyn_config_t c = {.threads = 1, .policy = LOOM_DIM_AUTO, .compile = 1, .first_batch = FIRST};
  dyn_result_t t;
  memset(&t, 0, sizeof t);
  CHECK_OK(dyn_lstm_run(&c, 0, 10, &t));
  CHECK_NEAR(t.first_loss, r.first_loss, 0, 1e-4);
  CHECK_NEAR(t.last_loss, r.last_loss, 0, 1e-4);
  CHECK(t.stats.cache.compiles <= 12);
}

int main(void) {
  TEST_RUN(test_compiled_vs_interpreted);
  TEST_RUN(test_policies);
  TEST_RUN(test_compiles_bounded);
  TEST_RUN(test_untuned);
  return test_summary();
}
