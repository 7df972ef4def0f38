/* The TreeLSTM workload (examples/dynamic/treelstm.c) trained through
 * traces, in its two forms: the first loss equals a plain C model in
 * double, walked by recursion as the trees are drawn; the interpreted
 * level form, the compiled level form (node counts symbolic) and the
 * compiled node form (a segment per node) give the same losses and
 * parameters over steps of different trees; the bucket policy gives the
 * same losses, compiled; and over longer runs the compiles stay within the segment
 * kinds (leaf, inner node or height, head: a forward and a backward
 * each). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dynamic.h"
#include "harness.h"

enum { TREES = 8, V = 500, DE = 32, H = 64, C = 5 };
enum { N_PARAMS = V * DE + 3 * H * DE + 3 * H + 5 * H * 2 * H + 5 * H + C * H + C };

typedef struct model {
  loom_tensor_t *emb, *w_leaf, *b_leaf, *u, *b_int, *head, *head_b;
  char split[32];
  int splits, sentiment;
  int64_t words[24];
} model_t;

static const float *f(const loom_tensor_t *t) { return loom_tensor_data(t); }
static double sg(double v) { return 1 / (1 + exp(-v)); }

/* The subtree over leaves lo..lo+n-1 (its split drawn first, preorder):
 * its state (h, c). */
static void node(model_t *m, int lo, int n, double *h, double *c) {
  if (n == 1) {
    const float *x = f(m->emb) + m->words[lo] * DE;
    double g[3 * H];
    for (int r = 0; r < 3 * H; r++) {
      g[r] = f(m->b_leaf)[r];
      for (int k = 0; k < DE; k++) g[r] += f(m->w_leaf)[r * DE + k] * (double)x[k];
    }
    for (int k = 0; k < H; k++) {
      c[k] = sg(g[k]) * tanh(g[2 * H + k]);
      h[k] = sg(g[H + k]) * tanh(c[k]);
    }
    return;
  }
  int s = (int)dyn_randint(m->split, m->splits++, 1, n - 1);
  double hh[2 * H], cl[H], cr[H], g[5 * H];
  node(m, lo, s, hh, cl);
  node(m, lo + s, n - s, hh + H, cr);
  for (int r = 0; r < 5 * H; r++) {
    g[r] = f(m->b_int)[r];
    for (int k = 0; k < 2 * H; k++) g[r] += f(m->u)[r * 2 * H + k] * hh[k];
  }
  for (int k = 0; k < H; k++) {
    c[k] = sg(g[k]) * tanh(g[4 * H + k]) + sg(g[H + k]) * cl[k] + sg(g[2 * H + k]) * cr[k];
    h[k] = sg(g[3 * H + k]) * tanh(c[k]);
  }
}

/* Step 0's loss by the definition (bench/peers/torch_dynamic.py's
 * Treelstm), in double. */
static double reference_loss(void) {
  model_t m;
  int64_t es[2] = {V, DE}, wl[2] = {3 * H, DE}, bl[1] = {3 * H}, us[2] = {5 * H, 2 * H};
  int64_t bi[1] = {5 * H}, hs[2] = {C, H}, hb[1] = {C};
  CHECK_OK(dyn_values("tree.emb", 1.0, 2, es, &m.emb));
  CHECK_OK(dyn_values("tree.w_leaf", 1 / sqrt(DE), 2, wl, &m.w_leaf));
  CHECK_OK(dyn_values("tree.b_leaf", 1 / sqrt(DE), 1, bl, &m.b_leaf));
  CHECK_OK(dyn_values("tree.u", 1 / sqrt(2 * H), 2, us, &m.u));
  CHECK_OK(dyn_values("tree.b_int", 1 / sqrt(2 * H), 1, bi, &m.b_int));
  CHECK_OK(dyn_values("tree.head", 1 / sqrt(H), 2, hs, &m.head));
  CHECK_OK(dyn_values("tree.head_b", 1 / sqrt(H), 1, hb, &m.head_b));
  double loss = 0;
  for (int j = 0; j < TREES; j++) {
    char name[32];
    int leaves = (int)dyn_randint("tree.leaves.0", j, 2, 24), sum = 0;
    dyn_name(name, sizeof name, "tree.word.0.%d", j);
    for (int i = 0; i < leaves; i++) {
      m.words[i] = dyn_randint(name, i, 0, V - 1);
      sum += (int)dyn_randint("tree.sentiment", m.words[i], -1, 1);
    }
    int label = (sum < -2 ? -2 : sum > 2 ? 2 : sum) + 2;
    dyn_name(m.split, sizeof m.split, "tree.split.0.%d", j);
    m.splits = 0;
    double h[H], c[H], logits[C], mx = -INFINITY, z = 0;
    node(&m, 0, leaves, h, c);
    for (int k = 0; k < C; k++) {
      logits[k] = f(m.head_b)[k];
      for (int i = 0; i < H; i++) logits[k] += f(m.head)[k * H + i] * h[i];
      mx = fmax(mx, logits[k]);
    }
    for (int k = 0; k < C; k++) z += exp(logits[k] - mx);
    loss += (log(z) + mx - logits[label]) / TREES;
  }
  loom_tensor_t *all[] = {m.emb, m.w_leaf, m.b_leaf, m.u, m.b_int, m.head, m.head_b};
  for (int i = 0; i < 7; i++) loom_tensor_destroy(all[i]);
  return loss;
}

/* steps steps of form under policy; the losses and the final parameters
 * into losses and params (either may be NULL). */
static dyn_result_t run(int form, loom_dim_policy_kind_t policy, int compile,
                        int steps, double *losses, float *params) {
  dyn_config_t c = {.threads = 1, .policy = policy, .compile = compile, .wait_compiles = 1,
                    .form = form, .losses = losses, .params = params,
                    .params_cap = params ? N_PARAMS : 0};
  dyn_result_t r;
  memset(&r, 0, sizeof r);
  CHECK_OK(dyn_treelstm_run(&c, 0, steps, &r));
  if (params) CHECK(r.n_params == N_PARAMS);
  return r;
}

enum { STEPS = 3, LONG = 30, NODE = 0, LEVEL = 1 };

/* The interpreted level form: the truth of the compiled runs. */
static double interp_losses[STEPS];
static float *interp_params;

static void test_interpreted(void) {
  interp_params = calloc(N_PARAMS, sizeof *interp_params);
  dyn_result_t r = run(LEVEL, LOOM_DIM_EXACT, 0, STEPS, interp_losses, interp_params);
  CHECK_NEAR(interp_losses[0], reference_loss(), 0, 1e-5);
  CHECK(r.stats.interpreted >= r.stats.segments);
}

static void check_same(const double *losses, const float *params, int steps) {
  for (int k = 0; k < steps; k++) CHECK_NEAR(losses[k], interp_losses[k], 0, 1e-4);
  if (params) CHECK_FLOATS(params, interp_params, N_PARAMS, 1e-5, 1e-4);
}

/* Level form, symbolic counts: the interpreted losses and parameters,
 * then LONG steps of new trees compile leaf, height and head once. */
static void test_level(void) {
  double losses[LONG];
  float *params = calloc(N_PARAMS, sizeof *params);
  dyn_result_t r = run(LEVEL, LOOM_DIM_SYMBOLIC, 1, STEPS, losses, params);
  check_same(losses, params, STEPS);
  CHECK(r.stats.interpreted == 0);
  r = run(LEVEL, LOOM_DIM_SYMBOLIC, 1, LONG, losses, NULL);
  CHECK(r.stats.cache.compiles <= 6);
  CHECK(r.stats.misses <= 3);
  CHECK(r.stats.interpreted == 0);
  CHECK(r.last_loss < r.first_loss);
  free(params);
}

/* Node form: one segment per node, whatever the tree; the same model. */
static void test_node(void) {
  double losses[STEPS];
  float *params = calloc(N_PARAMS, sizeof *params);
  dyn_result_t r = run(NODE, LOOM_DIM_EXACT, 1, STEPS, losses, params);
  check_same(losses, params, STEPS);
  CHECK(r.stats.cache.compiles <= 6);
  CHECK(r.stats.misses <= 3);
  CHECK(r.stats.interpreted == 0);
  /* a segment per node of the 8 trees: at least 3 per tree */
  CHECK(r.stats.hits >= STEPS * TREES * 3);
  free(params);
}

/* Bucketed counts (the level form pads each height to a power of two)
 * train the same model, every segment compiled: at most a forward and a
 * backward per bucket, within the sites' recompile limit. */
static void test_bucket(void) {
  double losses[2];
  dyn_result_t r = run(LEVEL, LOOM_DIM_BUCKET, 1, 2, losses, NULL);
  check_same(losses, NULL, 2);
  CHECK(r.stats.interpreted == 0);
  /* head, leaves (16 to 256), heights (1 to 128) */
  CHECK(r.stats.cache.compiles <= 2 * (1 + 5 + 8));
}

/* Written without tuning (no policies declared, the trace's defaults),
 * in both forms: nothing runs in the fallback, and the compiles stay
 * bounded (the level form's sites see each level's sizes exact until
 * their inputs turn symbolic: outside the recompile budget). */
static void test_untuned(void) {
  dyn_result_t r = run(1, LOOM_DIM_AUTO, 1, 20, NULL, NULL);
  CHECK(r.stats.interpreted == 0);
  CHECK(r.stats.cache.compiles <= 26);
  r = run(0, LOOM_DIM_AUTO, 1, 5, NULL, NULL);
  CHECK(r.stats.interpreted == 0);
  CHECK(r.stats.cache.compiles <= 6);
}

int main(void) {
  TEST_RUN(test_interpreted);
  TEST_RUN(test_level);
  TEST_RUN(test_node);
  TEST_RUN(test_bucket);
  TEST_RUN(test_untuned);
  free(interp_params);
  return test_summary();
}
