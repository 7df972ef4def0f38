/* Training through traces: an RNN cell traced as one segment replayed 10
 * times per step, then backward: the gradients equal loom_grad on the
 * unrolled static graph (interpreted) and central differences; the same
 * RNN as one in-graph loop (one segment, one backward segment); a host
 * callback's backward; compiled and interpreted traces agree; no backward
 * after the optimizer step (whose updates test_trace_optim.c checks). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "harness.h"
#include "loom/trace.h"
#include "trace/cache.h"

enum { T = 10, B = 2, I = 3, H = 4 };

typedef struct rnn {
  loom_tensor_t *w, *u, *b; /* (I, H), (H, H), (H) */
  loom_tensor_t *xs[T];     /* (batch, I) each */
  int64_t batch;
  const loom_dim_policy_t *policy; /* of the xs (NULL: exact) */
} rnn_t;

static void rnn_init(rnn_t *r, loom_dtype_t dt) {
  r->batch = B;
  r->policy = NULL;
  int64_t ws[2] = {I, H}, us[2] = {H, H}, bs[1] = {H}, xs[2] = {B, I};
  r->w = test_rand_tensor(dt, 2, ws, -0.6, 0.6);
  r->u = test_rand_tensor(dt, 2, us, -0.6, 0.6);
  r->b = test_rand_tensor(dt, 1, bs, -0.3, 0.3);
  for (int t = 0; t < T; t++) r->xs[t] = test_rand_tensor(dt, 2, xs, -1, 1);
}

static void rnn_free(rnn_t *r) {
  loom_tensor_destroy(r->w);
  loom_tensor_destroy(r->u);
  loom_tensor_destroy(r->b);
  for (int t = 0; t < T; t++) loom_tensor_destroy(r->xs[t]);
}

/* h' = tanh(x W + h U + b) */
static loom_status_t cell(loom_graph_t *g, loom_value_t x, loom_value_t h,
                          loom_value_t w, loom_value_t u, loom_value_t b,
                          loom_value_t *out) {
  loom_value_t xw, hu, s, z;
  LOOM_TRY(loom_matmul(g, x, w, 0, 0, &xw));
  LOOM_TRY(loom_matmul(g, h, u, 0, 0, &hu));
  LOOM_TRY(loom_add(g, xw, hu, &s));
  LOOM_TRY(loom_add(g, s, b, &z));
  return loom_tanh(g, z, out);
}

/* loss = sum(h_T^2) / 2 */
static loom_status_t rnn_loss(loom_graph_t *g, loom_value_t h, loom_value_t *loss) {
  loom_value_t sq, s, half;
  loom_dtype_t dt;
  LOOM_TRY(loom_value_type(g, h, &dt, NULL, NULL));
  LOOM_TRY(loom_mul(g, h, h, &sq));
  LOOM_TRY(loom_sum(g, sq, 0, NULL, 0, &s));
  LOOM_TRY(loom_full(g, 0, NULL, 0.5, dt, &half));
  return loom_mul(g, s, half, loss);
}

/* One traced forward with a sync after each cell (a segment per cell
 * invocation); the loss goes to *loss, its value to *lv. */
static void traced_forward(loom_trace_t *t, rnn_t *r, double *loss, loom_value_t *lv) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_dtype_t dt = loom_tensor_dtype(r->w);
  loom_value_t w, u, b, h, l, x[T];
  CHECK_OK(loom_trace_param(t, r->w, &w));
  CHECK_OK(loom_trace_param(t, r->u, &u));
  CHECK_OK(loom_trace_param(t, r->b, &b));
  for (int k = 0; k < T; k++) CHECK_OK(loom_trace_input(t, r->xs[k], r->policy, &x[k]));
  loom_dim_t hs[2]; /* the batch: a size, or the symbol of a symbolic policy */
  CHECK_OK(loom_value_type(g, x[0], NULL, NULL, hs));
  hs[1] = H;
  CHECK_OK(loom_full(g, 2, hs, 0.0, dt, &h));
  for (int k = 0; k < T; k++) {
    CHECK_OK(cell(g, x[k], h, w, u, b, &h));
    CHECK_OK(loom_trace_sync(t));
  }
  CHECK_OK(rnn_loss(g, h, &l));
  CHECK_OK(loom_trace_scalar(t, l, loss));
  *lv = l;
}

/* traced_forward, then backward. */
static void traced_step(loom_trace_t *t, rnn_t *r, double *loss,
                        int backward) {
  loom_value_t l;
  traced_forward(t, r, loss, &l);
  if (backward) CHECK_OK(loom_trace_backward(t, l));
}

/* The unrolled static graph: loss and its gradients by loom_grad. */
static void static_grads(rnn_t *r, double *loss, loom_tensor_t **grads) {
  loom_graph_t *g;
  loom_dtype_t dt = loom_tensor_dtype(r->w);
  CHECK_OK(loom_graph_create(&g));
  loom_value_t w, u, b, h, l, xs[T], wrt[3], gr[3];
  int64_t ws[2] = {I, H}, us[2] = {H, H}, bs[1] = {H}, xsh[2] = {r->batch, I},
          hs[2] = {r->batch, H};
  CHECK_OK(loom_graph_input(g, "w", dt, 2, ws, &w));
  CHECK_OK(loom_graph_input(g, "u", dt, 2, us, &u));
  CHECK_OK(loom_graph_input(g, "b", dt, 1, bs, &b));
  for (int k = 0; k < T; k++) CHECK_OK(loom_graph_input(g, NULL, dt, 2, xsh, &xs[k]));
  CHECK_OK(loom_full(g, 2, hs, 0.0, dt, &h));
  for (int k = 0; k < T; k++) CHECK_OK(cell(g, xs[k], h, w, u, b, &h));
  CHECK_OK(rnn_loss(g, h, &l));
  wrt[0] = w, wrt[1] = u, wrt[2] = b;
  CHECK_OK(loom_grad(g, l, 3, wrt, gr));
  CHECK_OK(loom_graph_output(g, l));
  for (int i = 0; i < 3; i++) CHECK_OK(loom_graph_output(g, gr[i]));
  loom_tensor_t *in[3 + T], *out[4];
  in[0] = r->w, in[1] = r->u, in[2] = r->b;
  for (int k = 0; k < T; k++) in[3 + k] = r->xs[k];
  CHECK_OK(loom_interpret(g, 3 + T, in, 4, out));
  *loss = test_get(out[0], 0);
  loom_tensor_destroy(out[0]);
  for (int i = 0; i < 3; i++) grads[i] = out[1 + i];
  loom_graph_destroy(g);
}

static void check_close(const loom_tensor_t *a, const loom_tensor_t *b, double tol) {
  CHECK(loom_tensor_numel(a) == loom_tensor_numel(b));
  for (int64_t i = 0; i < loom_tensor_numel(a); i++)
    CHECK_NEAR(test_get(a, i), test_get(b, i), tol, tol);
}

/* The trace's gradients of r's parameters against want (w, u, b). */
static void check_grads(loom_trace_t *t, const rnn_t *r, loom_tensor_t *const *want) {
  const loom_tensor_t *ps[3] = {r->w, r->u, r->b};
  for (int i = 0; i < 3; i++) {
    const loom_tensor_t *gr = NULL;
    CHECK_OK(loom_trace_grad(t, ps[i], &gr));
    if (gr) check_close(gr, want[i], 1e-9);
  }
}

static loom_trace_t *new_trace(int compile) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.compile = compile;
  o.spec_workers = 0;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  return t;
}

static void check_rnn(int compile) {
  rnn_t r;
  rnn_init(&r, LOOM_F64);
  loom_tensor_t *want[3];
  double want_loss = 0;
  static_grads(&r, &want_loss, want);
  loom_trace_t *t = new_trace(compile);
  for (int step = 0; step < 3; step++) { /* replays give the same */
    double loss = 0;
    traced_step(t, &r, &loss, 1);
    CHECK_NEAR(loss, want_loss, 1e-10, 1e-10);
    check_grads(t, &r, want);
    CHECK_OK(loom_trace_step_end(t));
  }
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.segments == 3 * (T + 1));
  if (compile) {
    /* forward and backward of: the first cell (with h0), the others, the
     * loss */
    CHECK(s.cache.compiles == 6);
    CHECK(s.interpreted == 0);
  }
  for (int i = 0; i < 3; i++) loom_tensor_destroy(want[i]);
  loom_trace_destroy(t);
  rnn_free(&r);
}

/* The same RNN as one in-graph loop over the stacked sequence: its
 * gradient (the loop's rule) equals the unrolled graph's, and a step is
 * one forward segment and one backward segment. */
static loom_graph_t *rnn_loop_body(loom_dtype_t dt) {
  loom_graph_t *b;
  CHECK_OK(loom_graph_create(&b));
  loom_value_t t, c, h, w, u, bias, xs, x, h1;
  loom_dim_t hd[2] = {B, H}, wd[2] = {I, H}, ud[2] = {H, H}, bd[1] = {H}, xd[3] = {T, B, I};
  CHECK_OK(loom_graph_input(b, "t", LOOM_I64, 0, NULL, &t));
  CHECK_OK(loom_graph_input(b, "cond", LOOM_BOOL, 0, NULL, &c));
  CHECK_OK(loom_graph_input(b, "h", dt, 2, hd, &h));
  CHECK_OK(loom_graph_input(b, "w", dt, 2, wd, &w));
  CHECK_OK(loom_graph_input(b, "u", dt, 2, ud, &u));
  CHECK_OK(loom_graph_input(b, "b", dt, 1, bd, &bias));
  CHECK_OK(loom_graph_input(b, "xs", dt, 3, xd, &xs));
  CHECK_OK(loom_gather(b, xs, t, 0, &x));
  CHECK_OK(cell(b, x, h, w, u, bias, &h1));
  CHECK_OK(loom_graph_output(b, c));
  CHECK_OK(loom_graph_output(b, h1));
  return b;
}

static void check_rnn_loop(int compile) {
  rnn_t r;
  rnn_init(&r, LOOM_F64);
  loom_tensor_t *want[3];
  double want_loss = 0;
  static_grads(&r, &want_loss, want);
  int64_t xd[3] = {T, B, I};
  loom_tensor_t *xs = NULL;
  CHECK_OK(loom_tensor_create(LOOM_F64, 3, xd, &xs));
  for (int k = 0; k < T; k++)
    memcpy((double *)loom_tensor_data(xs) + k * B * I, loom_tensor_data(r.xs[k]),
           sizeof(double) * B * I);
  loom_trace_t *t = new_trace(compile);
  loom_graph_t *g = loom_trace_graph(t);
  for (int step = 0; step < 3; step++) {
    loom_value_t inv[4], h0, trips, h, l;
    CHECK_OK(loom_trace_param(t, r.w, &inv[0]));
    CHECK_OK(loom_trace_param(t, r.u, &inv[1]));
    CHECK_OK(loom_trace_param(t, r.b, &inv[2]));
    CHECK_OK(loom_trace_input(t, xs, NULL, &inv[3]));
    CHECK_OK(loom_full(g, 2, (loom_dim_t[]){B, H}, 0.0, LOOM_F64, &h0));
    CHECK_OK(loom_full(g, 0, NULL, T, LOOM_I64, &trips));
    CHECK_OK(loom_loop(g, trips, LOOM_NO_VALUE, rnn_loop_body(LOOM_F64), 1, &h0, 4, inv, 1, &h));
    CHECK_OK(rnn_loss(g, h, &l));
    double loss = 0;
    CHECK_OK(loom_trace_scalar(t, l, &loss));
    CHECK_NEAR(loss, want_loss, 1e-10, 1e-10);
    CHECK_OK(loom_trace_backward(t, l));
    check_grads(t, &r, want);
    CHECK_OK(loom_trace_step_end(t));
  }
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.segments == 3);
  if (compile) CHECK(s.cache.compiles == 2 && s.interpreted == 0);
  else CHECK(s.interpreted == 6); /* a forward and a backward a step */
  for (int i = 0; i < 3; i++) loom_tensor_destroy(want[i]);
  loom_tensor_destroy(xs);
  loom_trace_destroy(t);
  rnn_free(&r);
}

static void test_rnn_loop_compiled(void) { check_rnn_loop(1); }
static void test_rnn_loop_interpreted(void) { check_rnn_loop(0); }

/* A training forward's miss queues its backward for the cache's worker:
 * drained before loom_trace_backward, the backward is a hit, compiled
 * ahead (a speculative compile), with the same gradients. */
static void test_backward_compiled_ahead(void) {
  rnn_t r;
  rnn_init(&r, LOOM_F64);
  loom_tensor_t *want[3];
  double want_loss = 0;
  static_grads(&r, &want_loss, want);
  loom_cache_t *c = NULL;
  CHECK_OK(loom_cache_create(0, 1, &c));
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.cache = c;
  o.tiered = 0; /* each forward miss compiles before it runs: 3 misses */
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  double loss = 0;
  loom_value_t l;
  traced_forward(t, &r, &loss, &l);
  rt_cache_drain(c); /* the backwards queued by the forward's misses */
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  int64_t misses = s.misses;
  /* the backwards of the first cell (with h0), of the others, of the loss */
  CHECK(s.misses == 3 && s.cache.spec_compiles == 3);
  CHECK_OK(loom_trace_backward(t, l));
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.misses == misses && s.cache.compiles == 6); /* every backward a hit */
  check_grads(t, &r, want);
  CHECK_OK(loom_trace_step_end(t));
  loom_trace_destroy(t);
  loom_cache_destroy(c);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(want[i]);
  rnn_free(&r);
}

/* Past the recompile limit the backward is not compiled ahead either: a
 * training segment over five exact sizes with a limit of 2 compiles two
 * forwards and two backwards (the backwards compiled ahead count against
 * their site's limit), and the gradients stay right:
 * d sum(tanh(x w)) / d w = x^T (1 - tanh(x w)^2). */
static void test_ahead_within_limit(void) {
  loom_cache_t *c = NULL;
  CHECK_OK(loom_cache_create(0, 1, &c));
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.cache = c;
  o.recompile_limit = 2;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  loom_graph_t *g = loom_trace_graph(t);
  loom_tensor_t *w = test_rand_tensor(LOOM_F64, 2, (int64_t[]){3, 2}, -1, 1);
  for (int64_t n = 2; n <= 6; n++) {
    loom_tensor_t *x = test_rand_tensor(LOOM_F64, 2, (int64_t[]){n, 3}, -1, 1);
    loom_value_t xv, wv, y, h, l;
    CHECK_OK(loom_trace_input(t, x, NULL, &xv));
    CHECK_OK(loom_trace_param(t, w, &wv));
    CHECK_OK(loom_matmul(g, xv, wv, 0, 0, &y));
    CHECK_OK(loom_tanh(g, y, &h));
    CHECK_OK(loom_sum(g, h, 0, NULL, 0, &l));
    double loss;
    CHECK_OK(loom_trace_scalar(t, l, &loss));
    rt_cache_drain(c);
    CHECK_OK(loom_trace_backward(t, l));
    const loom_tensor_t *gw = NULL;
    CHECK_OK(loom_trace_grad(t, w, &gw));
    for (int i = 0; gw && i < 3; i++)
      for (int j = 0; j < 2; j++) {
        double want = 0;
        for (int64_t r = 0; r < n; r++) {
          double z = 0;
          for (int k = 0; k < 3; k++) z += test_get(x, r * 3 + k) * test_get(w, k * 2 + j);
          want += test_get(x, r * 3 + i) * (1 - tanh(z) * tanh(z));
        }
        CHECK_NEAR(test_get(gw, i * 2 + j), want, 1e-12, 1e-10);
      }
    CHECK_OK(loom_trace_step_end(t));
    loom_tensor_destroy(x);
  }
  rt_cache_drain(c);
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.cache.compiles == 4);
  loom_trace_destroy(t);
  loom_cache_destroy(c);
  loom_tensor_destroy(w);
}

static void test_rnn_compiled(void) { check_rnn(1); }
static void test_rnn_interpreted(void) { check_rnn(0); }


/* A symbolic batch (the initial state's size is the batch symbol): one
 * forward and one backward executable per segment for every batch size,
 * gradients equal to the static graph's at each. */
static void test_rnn_symbolic_batch(void) {
  loom_trace_t *t = new_trace(1);
  loom_dim_policy_t pol[2] = {{.kind = LOOM_DIM_SYMBOLIC, .name = "batch"},
                              {.kind = LOOM_DIM_EXACT}};
  int64_t batches[3] = {2, 5, 3};
  for (int i = 0; i < 3; i++) {
    rnn_t r;
    rnn_init(&r, LOOM_F64);
    int64_t xs[2] = {batches[i], I};
    for (int k = 0; k < T; k++) {
      loom_tensor_destroy(r.xs[k]);
      r.xs[k] = test_rand_tensor(LOOM_F64, 2, xs, -1, 1);
    }
    r.batch = batches[i];
    r.policy = pol;
    loom_tensor_t *want[3];
    double want_loss = 0, loss = 0;
    static_grads(&r, &want_loss, want);
    traced_step(t, &r, &loss, 1);
    CHECK_NEAR(loss, want_loss, 1e-10, 1e-10);
    loom_tensor_t *ps[3] = {r.w, r.u, r.b};
    for (int p = 0; p < 3; p++) {
      const loom_tensor_t *gr = NULL;
      CHECK_OK(loom_trace_grad(t, ps[p], &gr));
      if (gr) check_close(gr, want[p], 1e-9);
      loom_tensor_destroy(want[p]);
    }
    CHECK_OK(loom_trace_step_end(t));
    rnn_free(&r);
  }
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.cache.compiles == 6);
  CHECK(s.interpreted == 0);
  loom_trace_destroy(t);
}

/* Central differences of the traced loss against the traced gradient,
 * for a few elements of each parameter. */
static void test_rnn_finite_differences(void) {
  rnn_t r;
  rnn_init(&r, LOOM_F64);
  loom_trace_t *t = new_trace(1);
  double loss = 0;
  traced_step(t, &r, &loss, 1);
  loom_tensor_t *ps[3] = {r.w, r.u, r.b};
  loom_tensor_t *grads[3];
  for (int i = 0; i < 3; i++) {
    const loom_tensor_t *gr = NULL;
    CHECK_OK(loom_trace_grad(t, ps[i], &gr));
    grads[i] = NULL;
    int64_t n = loom_tensor_numel(gr);
    CHECK_OK(loom_tensor_from_data(LOOM_F64, 1, &n, loom_tensor_data(gr),
                                   (size_t)n * sizeof(double), &grads[i]));
  }
  CHECK_OK(loom_trace_step_end(t));
  const double h = 1e-6;
  for (int i = 0; i < 3; i++) {
    double *p = loom_tensor_data(ps[i]);
    for (int64_t e = 0; e < loom_tensor_numel(ps[i]); e += 3) {
      double keep = p[e], up = 0, down = 0;
      p[e] = keep + h;
      traced_step(t, &r, &up, 0);
      CHECK_OK(loom_trace_step_end(t));
      p[e] = keep - h;
      traced_step(t, &r, &down, 0);
      CHECK_OK(loom_trace_step_end(t));
      p[e] = keep;
      CHECK_NEAR(test_get(grads[i], e), (up - down) / (2 * h), 1e-6, 1e-5);
    }
    loom_tensor_destroy(grads[i]);
  }
  loom_trace_destroy(t);
  rnn_free(&r);
}

/* A host callback y = x^2 with its backward 2 x dy, inside a traced
 * program: loss = sum(cb(x W)); d loss / d W = x^T (2 x W). */
static loom_status_t square_fwd(void *user, int n_in, const loom_tensor_t *const *in,
                                int n_out, loom_tensor_t *const *out) {
  (void)user, (void)n_in, (void)n_out;
  const double *x = loom_tensor_data(in[0]);
  double *y = loom_tensor_data(out[0]);
  for (int64_t i = 0; i < loom_tensor_numel(in[0]); i++) y[i] = x[i] * x[i];
  return LOOM_OK;
}

static loom_status_t square_bwd(void *user, int n_in, const loom_tensor_t *const *in,
                                int n_out, loom_tensor_t *const *out) {
  (void)user, (void)n_in, (void)n_out;
  const double *x = loom_tensor_data(in[0]), *dy = loom_tensor_data(in[1]);
  double *dx = loom_tensor_data(out[0]);
  for (int64_t i = 0; i < loom_tensor_numel(in[0]); i++) dx[i] = 2 * x[i] * dy[i];
  return LOOM_OK;
}

static void test_callback_backward(void) {
  int64_t xs[2] = {B, I}, ws[2] = {I, H}, ys[2] = {B, H};
  loom_tensor_t *x = test_rand_tensor(LOOM_F64, 2, xs, -1, 1);
  loom_tensor_t *w = test_rand_tensor(LOOM_F64, 2, ws, -1, 1);
  loom_trace_t *t = new_trace(1);
  loom_graph_t *g = loom_trace_graph(t);
  loom_host_op_t sq = {.name = "square", .forward = square_fwd, .backward = square_bwd};
  loom_value_t xv, wv, a, y, l;
  CHECK_OK(loom_trace_input(t, x, NULL, &xv));
  CHECK_OK(loom_trace_param(t, w, &wv));
  CHECK_OK(loom_matmul(g, xv, wv, 0, 0, &a));
  loom_dtype_t dt = LOOM_F64;
  int rank = 2;
  const int64_t *shapes[1] = {ys};
  CHECK_OK(loom_trace_call(t, &sq, 1, &a, 1, &dt, &rank, shapes, &y));
  CHECK_OK(loom_sum(g, y, 0, NULL, 0, &l));
  CHECK_OK(loom_trace_backward(t, l));
  const loom_tensor_t *gw = NULL;
  CHECK_OK(loom_trace_grad(t, w, &gw));
  /* dW[i][j] = sum_b x[b][i] * 2 * (x W)[b][j] */
  const double *xd = loom_tensor_data(x), *wd = loom_tensor_data(w);
  for (int i = 0; i < I; i++)
    for (int j = 0; j < H; j++) {
      double want = 0;
      for (int bb = 0; bb < B; bb++) {
        double aw = 0;
        for (int k = 0; k < I; k++) aw += xd[bb * I + k] * wd[k * H + j];
        want += xd[bb * I + i] * 2 * aw;
      }
      CHECK_NEAR(test_get(gw, i * H + j), want, 1e-10, 1e-10);
    }
  CHECK_OK(loom_trace_step_end(t));
  loom_trace_destroy(t);
  loom_tensor_destroy(x);
  loom_tensor_destroy(w);
}

/* A forward's saved inputs are kept as views of their storage (the
 * weights an RNN cell reads are not copied per cell), compiled or
 * interpreted: a backward after the optimizer step changed them is
 * refused, as PyTorch refuses a backward through tensors modified in
 * place; a backward before it, and the next step, are unaffected. */
static void check_backward_after_adamw(int compile) {
  rnn_t r;
  rnn_init(&r, LOOM_F32);
  loom_trace_t *t = new_trace(compile);
  double loss = 0;
  loom_value_t l;
  traced_forward(t, &r, &loss, &l);
  CHECK_OK(loom_trace_adamw(t, 0.01, 0.9, 0.999, 1e-8, 0.0));
  CHECK_ERR(loom_trace_backward(t, l), LOOM_ERR_INVALID, "optimizer step (loom_trace_optimizer_step) has updated");
  CHECK_OK(loom_trace_step_end(t));
  traced_step(t, &r, &loss, 1);
  CHECK_OK(loom_trace_adamw(t, 0.01, 0.9, 0.999, 1e-8, 0.0));
  CHECK_OK(loom_trace_step_end(t));
  loom_trace_destroy(t);
  rnn_free(&r);
}

static void test_backward_after_adamw(void) { check_backward_after_adamw(1); }
static void test_backward_after_adamw_interpreted(void) { check_backward_after_adamw(0); }

/* A strided (transposed) input that the backward needs (saved by the
 * forward, which may keep it as a view of what the trace binds): the
 * input stays as it was, and the gradient of w in sum((x^T w)^2)
 * equals the one from a contiguous x and the one by hand. */
static void test_strided_saved_input(void) {
  int64_t xs[2] = {I, B}, ws[2] = {I, H};
  loom_tensor_t *x = test_rand_tensor(LOOM_F64, 2, xs, -1, 1);
  loom_tensor_t *w = test_rand_tensor(LOOM_F64, 2, ws, -1, 1);
  int64_t ts[2] = {B, I}, strides[2] = {1, B};
  loom_tensor_t *xt_view, *xt_copy = test_rand_tensor(LOOM_F64, 2, ts, 0, 0);
  CHECK_OK(loom_tensor_wrap(LOOM_F64, 2, ts, strides, loom_tensor_data(x), &xt_view));
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < I; i++)
      ((double *)loom_tensor_data(xt_copy))[b * I + i] =
          ((const double *)loom_tensor_data(x))[i * B + b];
  double grads[2][I * H], x0[I * B];
  memcpy(x0, loom_tensor_data(x), sizeof x0);
  loom_tensor_t *inputs[2] = {xt_view, xt_copy};
  for (int k = 0; k < 2; k++) {
    loom_trace_t *t = new_trace(1);
    loom_graph_t *g = loom_trace_graph(t);
    loom_value_t xv, wv, y, sq, l;
    CHECK_OK(loom_trace_input(t, inputs[k], NULL, &xv));
    CHECK_OK(loom_trace_param(t, w, &wv));
    CHECK_OK(loom_matmul(g, xv, wv, 0, 0, &y));
    CHECK_OK(loom_mul(g, y, y, &sq));
    CHECK_OK(loom_sum(g, sq, 0, NULL, 0, &l));
    CHECK_OK(loom_trace_backward(t, l));
    const loom_tensor_t *gr = NULL;
    CHECK_OK(loom_trace_grad(t, w, &gr));
    for (int64_t i = 0; gr && i < I * H; i++) grads[k][i] = test_get(gr, i);
    CHECK_OK(loom_trace_step_end(t));
    loom_trace_destroy(t);
  }
  /* d/dw sum((x w)^2) = 2 x^T (x w), by hand from the contiguous copy */
  const double *xd = loom_tensor_data(xt_copy), *wd = loom_tensor_data(w);
  for (int64_t i = 0; i < I; i++)
    for (int64_t h = 0; h < H; h++) {
      double want = 0;
      for (int64_t b = 0; b < B; b++) {
        double y = 0;
        for (int64_t j = 0; j < I; j++) y += xd[b * I + j] * wd[j * H + h];
        want += 2 * xd[b * I + i] * y;
      }
      CHECK_NEAR(grads[0][i * H + h], want, 1e-12, 1e-12);
      CHECK_NEAR(grads[1][i * H + h], want, 1e-12, 1e-12);
    }
  CHECK(!memcmp(x0, loom_tensor_data(x), sizeof x0)); /* the input is unchanged */
  loom_tensor_destroy(xt_view);
  loom_tensor_destroy(xt_copy);
  loom_tensor_destroy(x);
  loom_tensor_destroy(w);
}

/* Three backwards in one step over w = (1, 2, 3) and v: sum(10 w), then
 * sum(w * w) (v not reached), then sum(v * w). loom_trace_grad sums
 * them; loom_trace_grad_last gives each call's part alone (NULL where
 * the call did not reach the parameter), by hand. */
static void test_grad_last(void) {
  int64_t n = 3;
  loom_tensor_t *w = test_tensor(LOOM_F64, 1, &n, (double[]){1, 2, 3});
  loom_tensor_t *v = test_tensor(LOOM_F64, 1, &n, (double[]){0.5, -1, 2});
  loom_trace_t *t = new_trace(1);
  loom_graph_t *g = loom_trace_graph(t);
  loom_value_t wv, vv, ten, a, b, l[3];
  CHECK_OK(loom_trace_param(t, w, &wv));
  CHECK_OK(loom_trace_param(t, v, &vv));
  CHECK_OK(loom_full(g, 0, NULL, 10, LOOM_F64, &ten));
  CHECK_OK(loom_mul(g, wv, ten, &a));
  CHECK_OK(loom_sum(g, a, 0, NULL, 0, &l[0]));
  CHECK_OK(loom_mul(g, wv, wv, &b));
  CHECK_OK(loom_sum(g, b, 0, NULL, 0, &l[1]));
  CHECK_OK(loom_mul(g, vv, wv, &a));
  CHECK_OK(loom_sum(g, a, 0, NULL, 0, &l[2]));
  const double want_w[3][3] = {{10, 10, 10}, {2, 4, 6}, {0.5, -1, 2}};
  const double want_v[3][3] = {{0, 0, 0}, {0, 0, 0}, {1, 2, 3}};
  double sum_w[3] = {0}, sum_v[3] = {0};
  for (int k = 0; k < 3; k++) {
    CHECK_OK(loom_trace_backward(t, l[k]));
    const loom_tensor_t *gw, *gv, *aw, *av;
    CHECK_OK(loom_trace_grad_last(t, w, &gw));
    CHECK_OK(loom_trace_grad_last(t, v, &gv));
    CHECK_OK(loom_trace_grad(t, w, &aw));
    CHECK_OK(loom_trace_grad(t, v, &av));
    CHECK(gw && (k == 2) == (gv != NULL)); /* v is reached by the third alone */
    for (int i = 0; i < 3 && gw; i++) {
      sum_w[i] += want_w[k][i];
      sum_v[i] += want_v[k][i];
      CHECK(test_get(gw, i) == want_w[k][i] && (!gv || test_get(gv, i) == want_v[k][i]));
      CHECK(test_get(aw, i) == sum_w[i] && test_get(av, i) == sum_v[i]);
    }
  }
  const loom_tensor_t *gr;
  CHECK(loom_trace_grad_last(t, NULL, &gr) == LOOM_ERR_INVALID);
  loom_tensor_t *stranger = test_tensor(LOOM_F64, 1, &n, (double[]){0, 0, 0});
  CHECK(loom_trace_grad_last(t, stranger, &gr) == LOOM_ERR_INVALID);
  CHECK_OK(loom_trace_step_end(t));
  loom_trace_destroy(t);
  loom_tensor_destroy(stranger);
  loom_tensor_destroy(w);
  loom_tensor_destroy(v);
}

int main(void) {
  test_seed(55);
  TEST_RUN(test_backward_after_adamw);
  TEST_RUN(test_backward_after_adamw_interpreted);
  TEST_RUN(test_strided_saved_input);
  TEST_RUN(test_rnn_compiled);
  TEST_RUN(test_rnn_interpreted);
  TEST_RUN(test_rnn_loop_compiled);
  TEST_RUN(test_backward_compiled_ahead);
  TEST_RUN(test_ahead_within_limit);
  TEST_RUN(test_rnn_loop_interpreted);
  TEST_RUN(test_rnn_symbolic_batch);
  TEST_RUN(test_rnn_finite_differences);
  TEST_RUN(test_callback_backward);
  TEST_RUN(test_grad_last);
  return test_summary();
}
