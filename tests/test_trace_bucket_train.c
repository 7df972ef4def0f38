/* Bucketed training segments: a segment that needs gradients and has a
 * LOOM_DIM_BUCKET dim compiles one forward and one backward per bucket,
 * with the padding masked in both halves (the backward's sums over the
 * padded axis included), and its gradients equal those of the
 * interpreter at exact sizes for every size. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/cache_dir.h"
#include "harness.h"
#include "loom/trace.h"
#include "trace/cache.h"

enum { F = 5, D = 6, H = 4, CELLS = 4 };

/* Buckets 8, 16, 48: sizes 3..40 fall in three of them. */
static loom_dim_policy_t bucket_policy(const char *name) {
  loom_dim_policy_t p = {.kind = LOOM_DIM_BUCKET, .name = name, .n_buckets = 3,
                         .buckets = {8, 16, 48}};
  return p;
}

/* compile 2: tiered (a miss interprets while a worker of cache
 * compiles). */
static loom_trace_t *new_trace(int compile, loom_cache_t *cache) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.compile = compile;
  o.spec_workers = 0; /* no speculation: the compile count is exact */
  o.tiered = compile == 2;
  o.cache = cache;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  return t;
}

/* Each parameter's gradient in a (the bucketed trace) equals b's. */
static void check_grads(loom_trace_t *a, loom_trace_t *b, int n,
                        loom_tensor_t *const *params, int64_t size) {
  for (int i = 0; i < n; i++) {
    const loom_tensor_t *ga = NULL, *gb = NULL;
    CHECK_OK(loom_trace_grad(a, params[i], &ga));
    CHECK_OK(loom_trace_grad(b, params[i], &gb));
    if (!ga || !gb) continue;
    CHECK(loom_tensor_numel(ga) == loom_tensor_numel(gb));
    double largest = 0;
    for (int64_t e = 0; e < loom_tensor_numel(gb); e++)
      largest = fmax(largest, fabs(test_get(gb, e)));
    CHECK(largest > 0); /* the comparison says something */
    for (int64_t e = 0; e < loom_tensor_numel(ga); e++) {
      double x = test_get(ga, e), y = test_get(gb, e);
      if (fabs(x - y) > 1e-9 + 1e-9 * fabs(y)) {
        test_fail(__FILE__, __LINE__, "size %lld: gradient %d element %lld: "
                  "%.12g, exact %.12g", (long long)size, i, (long long)e, x, y);
        return;
      }
    }
  }
}

/* ---- Attention over tokens ------------------------------------------------ */

typedef struct attn {
  loom_tensor_t *p[4]; /* w0 (F, D), wq, wk, wv (D, D) */
} attn_t;

/* h = tanh(x W0), cut by a read (its gradient crosses the cut padded and
 * comes back sliced); then p = softmax(q k^T) over tokens, o = p v + 0.1
 * (a full over the token dim: an attribute over the bucket),
 * loss = mean(o^2). */
static void attn_step(loom_trace_t *t, attn_t *m, loom_tensor_t *x,
                      const loom_dim_policy_t *pol, double *loss) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_value_t w[4], xv, xw, h, q, k, v, s, p, o, c, o2, sq, l;
  for (int i = 0; i < 4; i++) CHECK_OK(loom_trace_param(t, m->p[i], &w[i]));
  CHECK_OK(loom_trace_input(t, x, pol, &xv));
  CHECK_OK(loom_matmul(g, xv, w[0], 0, 0, &xw));
  CHECK_OK(loom_tanh(g, xw, &h));
  const loom_tensor_t *real = NULL;
  CHECK_OK(loom_trace_read(t, h, &real));
  CHECK_OK(loom_matmul(g, h, w[1], 0, 0, &q));
  CHECK_OK(loom_matmul(g, h, w[2], 0, 0, &k));
  CHECK_OK(loom_matmul(g, h, w[3], 0, 0, &v));
  CHECK_OK(loom_matmul(g, q, k, 0, 1, &s));
  CHECK_OK(loom_softmax(g, s, -1, &p));
  CHECK_OK(loom_matmul(g, p, v, 0, 0, &o));
  loom_dim_t dims[2];
  CHECK_OK(loom_value_type(g, o, NULL, NULL, dims));
  CHECK_OK(loom_full(g, 2, dims, 0.1, LOOM_F64, &c));
  CHECK_OK(loom_add(g, o, c, &o2));
  CHECK_OK(loom_mul(g, o2, o2, &sq));
  CHECK_OK(loom_mean(g, sq, 0, NULL, 0, &l));
  CHECK_OK(loom_trace_scalar(t, l, loss));
  CHECK_OK(loom_trace_backward(t, l));
}

/* Eager entries (the fallback's graphs) of c keyed with a symbolic dim:
 * bucketed segments that ran in the fallback at their real sizes. */
static int eager_symbolic_keys(const loom_cache_t *c) {
  loom_cache_keys_t *keys = NULL;
  int64_t n = 0;
  int found = 0;
  CHECK_OK(loom_cache_list_keys(c, &keys, &n));
  for (int64_t i = 0; i < n; i++) {
    loom_cache_key_info_t k = LOOM_CACHE_KEY_INFO_INIT;
    CHECK_OK(loom_cache_keys_get(keys, i, &k));
    for (int j = 0; k.state == LOOM_KEY_EAGER && j < k.n_inputs; j++) {
      loom_cache_key_input_t in = LOOM_CACHE_KEY_INPUT_INIT;
      CHECK_OK(loom_cache_keys_input(keys, i, j, &in));
      for (int d = 0; d < in.rank; d++) found += in.kinds[d] == LOOM_KEY_ANY;
    }
  }
  loom_cache_keys_destroy(keys);
  return found;
}

/* compile 1: every size of 3..40. compile 2: tiered, a few sizes twice;
 * the first pass interprets the forwards (unpadded) and their backwards
 * while the worker compiles the forwards, the second (after the worker
 * is done) runs the compiled bucketed forwards and interprets their
 * bucketed backwards while those compile. */
static void check_attention(int compile) {
  attn_t m;
  int64_t s0[2] = {F, D}, s1[2] = {D, D};
  m.p[0] = test_rand_tensor(LOOM_F64, 2, s0, -0.7, 0.7);
  for (int i = 1; i < 4; i++) m.p[i] = test_rand_tensor(LOOM_F64, 2, s1, -0.7, 0.7);
  loom_cache_t *cache = NULL;
  /* tiered: a module cache of its own, so that no key was compiled
   * before (the journal of compiled keys would have its misses wait) */
  char dir[] = "/tmp/loom-test-bucket-XXXXXX", *was = getenv("LOOM_CACHE_DIR");
  was = was ? strdup(was) : NULL;
  if (compile == 2) {
    CHECK(mkdtemp(dir) != NULL);
    setenv("LOOM_CACHE_DIR", dir, 1);
    CHECK_OK(loom_cache_create(0, 1, &cache));
  }
  loom_trace_t *bucketed = new_trace(compile, cache), *exact = new_trace(0, NULL);
  loom_dim_policy_t pol[2] = {bucket_policy("T"), {.kind = LOOM_DIM_EXACT}};
  for (int64_t i = 0, n = 3; n <= 40; i++, n += compile == 2 ? 9 : 1) {
    if (compile == 2 && n > 30 && i < 5) { /* the second pass */
      rt_cache_drain(cache);
      n = 3;
    }
    int64_t xs[2] = {n, F};
    loom_tensor_t *x = test_rand_tensor(LOOM_F64, 2, xs, -1, 1);
    double got = 0, want = 0;
    attn_step(bucketed, &m, x, pol, &got);
    attn_step(exact, &m, x, NULL, &want);
    CHECK_NEAR(got, want, 1e-12, 1e-10);
    check_grads(bucketed, exact, 4, m.p, n);
    CHECK_OK(loom_trace_step_end(bucketed));
    CHECK_OK(loom_trace_step_end(exact));
    loom_tensor_destroy(x);
  }
  loom_trace_stats_t st = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(bucketed, &st));
  /* two segments, three buckets, a forward and a backward each; tiered,
   * the forwards that ran in the fallback meanwhile ran at their real
   * sizes (bucketed dims symbolic, not padded) and their backwards there
   * too, compiling no key the policy did not ask for */
  CHECK(st.cache.compiles <= 2 * 3 * 2);
  if (compile == 2) {
    CHECK(st.interpreted > 0);
    CHECK(eager_symbolic_keys(cache) > 0);
  }
  CHECK(st.cache.failed_compiles == 0);
  if (compile == 1) CHECK(st.interpreted == 0);
  loom_trace_destroy(bucketed);
  loom_trace_destroy(exact);
  loom_cache_destroy(cache);
  if (compile == 2) {
    if (was) setenv("LOOM_CACHE_DIR", was, 1);
    else unsetenv("LOOM_CACHE_DIR");
    core_remove_tree(dir);
  }
  free(was);
  for (int i = 0; i < 4; i++) loom_tensor_destroy(m.p[i]);
}

static void test_attention_sizes(void) { check_attention(1); }
static void test_attention_tiered(void) { check_attention(2); }

/* ---- An RNN over a bucketed batch ------------------------------------------ */

/* h0 = zeros (batch, H) (a full over the bucket), h' = tanh(x_k W + h U)
 * with a sync after each cell, loss = mean(h^2): the weights' gradients
 * sum over the batch. */
static void rnn_step(loom_trace_t *t, loom_tensor_t *const *params,
                     loom_tensor_t *const *xs, const loom_dim_policy_t *pol,
                     double *loss) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_value_t w, u, h, l, sq;
  CHECK_OK(loom_trace_param(t, params[0], &w));
  CHECK_OK(loom_trace_param(t, params[1], &u));
  for (int k = 0; k < CELLS; k++) {
    loom_value_t x, xw, hu, z;
    CHECK_OK(loom_trace_input(t, xs[k], pol, &x));
    if (k == 0) {
      loom_dim_t dims[2];
      CHECK_OK(loom_value_type(g, x, NULL, NULL, dims));
      dims[1] = H;
      CHECK_OK(loom_full(g, 2, dims, 0.0, LOOM_F64, &h));
    }
    CHECK_OK(loom_matmul(g, x, w, 0, 0, &xw));
    CHECK_OK(loom_matmul(g, h, u, 0, 0, &hu));
    CHECK_OK(loom_add(g, xw, hu, &z));
    CHECK_OK(loom_tanh(g, z, &h));
    CHECK_OK(loom_trace_sync(t));
  }
  CHECK_OK(loom_mul(g, h, h, &sq));
  CHECK_OK(loom_mean(g, sq, 0, NULL, 0, &l));
  CHECK_OK(loom_trace_scalar(t, l, loss));
  CHECK_OK(loom_trace_backward(t, l));
}

static void test_rnn_batch_sizes(void) {
  int64_t ws[2] = {F, H}, us[2] = {H, H};
  loom_tensor_t *params[2] = {test_rand_tensor(LOOM_F64, 2, ws, -0.6, 0.6),
                              test_rand_tensor(LOOM_F64, 2, us, -0.6, 0.6)};
  loom_trace_t *bucketed = new_trace(1, NULL), *exact = new_trace(0, NULL);
  loom_dim_policy_t pol[2] = {bucket_policy("N"), {.kind = LOOM_DIM_EXACT}};
  const int64_t sizes[] = {3, 8, 9, 17, 40, 5};
  for (int i = 0; i < (int)(sizeof sizes / sizeof *sizes); i++) {
    int64_t xs_shape[2] = {sizes[i], F};
    loom_tensor_t *xs[CELLS];
    for (int k = 0; k < CELLS; k++) xs[k] = test_rand_tensor(LOOM_F64, 2, xs_shape, -1, 1);
    double got = 0, want = 0;
    rnn_step(bucketed, params, xs, pol, &got);
    rnn_step(exact, params, xs, NULL, &want);
    CHECK_NEAR(got, want, 1e-12, 1e-10);
    check_grads(bucketed, exact, 2, params, sizes[i]);
    CHECK_OK(loom_trace_step_end(bucketed));
    CHECK_OK(loom_trace_step_end(exact));
    for (int k = 0; k < CELLS; k++) loom_tensor_destroy(xs[k]);
  }
  loom_trace_stats_t st = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(bucketed, &st));
  /* the first cell, the others, the loss: three buckets, two halves */
  CHECK(st.cache.compiles <= 3 * 3 * 2);
  CHECK(st.interpreted == 0);
  loom_trace_destroy(bucketed);
  loom_trace_destroy(exact);
  for (int i = 0; i < 2; i++) loom_tensor_destroy(params[i]);
}

/* ---- A bucketed and a symbolic dim in one segment ----------------------------- */

/* loss = mean(tanh(x W)^2) + mean(tanh(y W)^2) * mean(tanh(x W)), x
 * (n, F) with n bucketed, y (m, F) with m symbolic: one segment whose
 * graph has both a runtime symbol and a bucket. */
static void mixed_step(loom_trace_t *t, loom_tensor_t *w, loom_tensor_t *x,
                       loom_tensor_t *y, int policies, double *loss) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_dim_policy_t px[2] = {bucket_policy("n"), {.kind = LOOM_DIM_EXACT}};
  loom_dim_policy_t py[2] = {{.kind = LOOM_DIM_SYMBOLIC, .name = "m"},
                             {.kind = LOOM_DIM_EXACT}};
  loom_value_t wv, xv, yv, a, b, ta, tb, sa, sb, ma, mb, mt, p, l;
  CHECK_OK(loom_trace_param(t, w, &wv));
  CHECK_OK(loom_trace_input(t, x, policies ? px : NULL, &xv));
  CHECK_OK(loom_trace_input(t, y, policies ? py : NULL, &yv));
  CHECK_OK(loom_matmul(g, xv, wv, 0, 0, &a));
  CHECK_OK(loom_matmul(g, yv, wv, 0, 0, &b));
  CHECK_OK(loom_tanh(g, a, &ta));
  CHECK_OK(loom_tanh(g, b, &tb));
  CHECK_OK(loom_mul(g, ta, ta, &sa));
  CHECK_OK(loom_mul(g, tb, tb, &sb));
  CHECK_OK(loom_mean(g, sa, 0, NULL, 0, &ma));
  CHECK_OK(loom_mean(g, sb, 0, NULL, 0, &mb));
  CHECK_OK(loom_mean(g, ta, 0, NULL, 0, &mt));
  CHECK_OK(loom_mul(g, mb, mt, &p));
  CHECK_OK(loom_add(g, ma, p, &l));
  CHECK_OK(loom_trace_scalar(t, l, loss));
  CHECK_OK(loom_trace_backward(t, l));
}

static void test_bucket_and_symbolic(void) {
  int64_t ws[2] = {F, H};
  loom_tensor_t *w = test_rand_tensor(LOOM_F64, 2, ws, -0.6, 0.6);
  loom_trace_t *mixed = new_trace(1, NULL), *exact = new_trace(0, NULL);
  const int64_t ns[] = {3, 7, 12, 5}, ms[] = {2, 9, 4, 6};
  for (int i = 0; i < 4; i++) {
    int64_t xs[2] = {ns[i], F}, ys[2] = {ms[i], F};
    loom_tensor_t *x = test_rand_tensor(LOOM_F64, 2, xs, -1, 1);
    loom_tensor_t *y = test_rand_tensor(LOOM_F64, 2, ys, -1, 1);
    double got = 0, want = 0;
    mixed_step(mixed, w, x, y, 1, &got);
    mixed_step(exact, w, x, y, 0, &want);
    CHECK_NEAR(got, want, 1e-12, 1e-10);
    check_grads(mixed, exact, 1, &w, ns[i]);
    CHECK_OK(loom_trace_step_end(mixed));
    CHECK_OK(loom_trace_step_end(exact));
    loom_tensor_destroy(x);
    loom_tensor_destroy(y);
  }
  loom_trace_stats_t st = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(mixed, &st));
  CHECK(st.cache.compiles <= 2 * 2); /* buckets 8 and 16, two halves */
  CHECK(st.interpreted == 0);
  loom_trace_destroy(mixed);
  loom_trace_destroy(exact);
  loom_tensor_destroy(w);
}

int main(void) {
  test_seed(71);
  TEST_RUN(test_attention_sizes);
  TEST_RUN(test_attention_tiered);
  TEST_RUN(test_rnn_batch_sizes);
  TEST_RUN(test_bucket_and_symbolic);
  return test_summary();
}
