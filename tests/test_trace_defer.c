/* Deferred weight gradients (src/trace/grad_defer.c): an RNN cell traced
 * as one segment per time step returns its weights' gradients as the
 * operands of their products, summed over the steps in one product. The
 * gradients equal loom_grad's on the unrolled static graph (interpreted
 * with the reference kernels), in f64 and f32, compiled and interpreted,
 * for
 *   a long sequence, whose rows pass the point where a product is taken
 *     before the walk ends;
 *   a weight computed by an earlier segment (W2 = 2 W, a gradient that a
 *     backward segment reads, so its parts are summed before it runs);
 *   a weight whose product reaches no gradient (x V feeds only an argmax
 *     that is read): its gradient is zero;
 * and the statistics count the parts and the products; every allocation
 * failing in turn gives LOOM_ERR_NOMEM or a result. With two threads
 * the products are taken on a thread of their own (ThreadSanitizer runs
 * this test). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "loom/trace.h"

enum { N = 300, B = 2, I = 3, H = 4, C = 3 };

typedef struct model {
  loom_dtype_t dt;
  loom_tensor_t *w, *u, *v; /* (I, H), (H, H), (I, C) */
  loom_tensor_t *xs[N];     /* (I, B): transposed in the program */
} model_t;

static void model_init(model_t *m, loom_dtype_t dt) {
  m->dt = dt;
  m->w = test_rand_tensor(dt, 2, (int64_t[]){I, H}, -0.5, 0.5);
  m->u = test_rand_tensor(dt, 2, (int64_t[]){H, H}, -0.5, 0.5);
  m->v = test_rand_tensor(dt, 2, (int64_t[]){I, C}, -1, 1);
  for (int k = 0; k < N; k++) m->xs[k] = test_rand_tensor(dt, 2, (int64_t[]){I, B}, -1, 1);
}

static void model_free(model_t *m) {
  loom_tensor_destroy(m->w);
  loom_tensor_destroy(m->u);
  loom_tensor_destroy(m->v);
  for (int k = 0; k < N; k++) loom_tensor_destroy(m->xs[k]);
}

/* The program, into g: W2 = 2 W; h = tanh(x_k^T W2 + h U) over the steps,
 * argmax(x_k^T V) beside each; loss = sum(h^2). With t, a trace: W2 is read
 * (a segment of its own) and each step is synced (a segment per cell). */
static void program(loom_trace_t *t, loom_graph_t *g, const loom_value_t *p,
                    const loom_value_t *x, loom_dtype_t dt, loom_value_t *loss) {
  loom_value_t two, w2, h, sq;
  CHECK_OK(loom_full(g, 0, NULL, 2.0, dt, &two));
  CHECK_OK(loom_mul(g, p[0], two, &w2));
  const loom_tensor_t *real;
  if (t) CHECK_OK(loom_trace_read(t, w2, &real));
  CHECK_OK(loom_full(g, 2, (int64_t[]){B, H}, 0.0, dt, &h));
  for (int k = 0; k < N; k++) {
    loom_value_t xt, xw, hu, s, xv, top;
    /* x_k^T: the deferred product's second operand is then a transpose's
     * output, recomputed or saved by the backward */
    CHECK_OK(loom_transpose(g, x[k], (int64_t[]){1, 0}, &xt));
    CHECK_OK(loom_matmul(g, xt, w2, 0, 0, &xw));
    CHECK_OK(loom_matmul(g, h, p[1], 0, 0, &hu));
    CHECK_OK(loom_add(g, xw, hu, &s));
    CHECK_OK(loom_tanh(g, s, &h));
    CHECK_OK(loom_matmul(g, xt, p[2], 0, 0, &xv));
    CHECK_OK(loom_argmax(g, xv, 1, 1, 0, &top));
    if (t) CHECK_OK(loom_trace_read(t, top, &real));
    if (t) CHECK_OK(loom_trace_sync(t));
  }
  CHECK_OK(loom_mul(g, h, h, &sq));
  CHECK_OK(loom_sum(g, sq, 0, NULL, 0, loss));
}

/* The loss's gradients by loom_grad on the static graph, interpreted. */
static void static_grads(const model_t *m, loom_tensor_t **grads) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t p[3], x[N], loss, gr[3];
  CHECK_OK(loom_graph_input(g, "w", m->dt, 2, (int64_t[]){I, H}, &p[0]));
  CHECK_OK(loom_graph_input(g, "u", m->dt, 2, (int64_t[]){H, H}, &p[1]));
  CHECK_OK(loom_graph_input(g, "v", m->dt, 2, (int64_t[]){I, C}, &p[2]));
  for (int k = 0; k < N; k++) CHECK_OK(loom_graph_input(g, NULL, m->dt, 2, (int64_t[]){I, B}, &x[k]));
  program(NULL, g, p, x, m->dt, &loss);
  CHECK_OK(loom_grad(g, loss, 3, p, gr));
  for (int i = 0; i < 3; i++) CHECK_OK(loom_graph_output(g, gr[i]));
  loom_tensor_t *in[3 + N] = {m->w, m->u, m->v};
  for (int k = 0; k < N; k++) in[3 + k] = m->xs[k];
  CHECK_OK(loom_interpret(g, 3 + N, in, 3, grads));
  loom_graph_destroy(g);
}

static void check(loom_dtype_t dt, int compile, int threads) {
  model_t m;
  model_init(&m, dt);
  loom_tensor_t *want[3];
  static_grads(&m, want);
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.compile = compile;
  o.spec_workers = 0;
  o.num_threads = threads;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  double tol = dt == LOOM_F64 ? 1e-10 : 2e-4;
  for (int step = 0; step < 2; step++) {
    loom_graph_t *g = loom_trace_graph(t);
    loom_value_t p[3], x[N], loss;
    CHECK_OK(loom_trace_param(t, m.w, &p[0]));
    CHECK_OK(loom_trace_param(t, m.u, &p[1]));
    CHECK_OK(loom_trace_param(t, m.v, &p[2]));
    for (int k = 0; k < N; k++) CHECK_OK(loom_trace_input(t, m.xs[k], NULL, &x[k]));
    program(t, g, p, x, dt, &loss);
    CHECK_OK(loom_trace_backward(t, loss));
    const loom_tensor_t *ps[3] = {m.w, m.u, m.v};
    for (int i = 0; i < 3; i++) {
      const loom_tensor_t *gr = NULL;
      CHECK_OK(loom_trace_grad(t, ps[i], &gr));
      CHECK(loom_tensor_numel(gr) == loom_tensor_numel(want[i]));
      for (int64_t e = 0; e < loom_tensor_numel(gr); e++)
        CHECK_NEAR(test_get(gr, e), test_get(want[i], e), tol, tol);
    }
    CHECK_OK(loom_trace_step_end(t));
  }
  /* Per cell and step, three parts: x^T dY for W2 and h^T dY for U, of
   * B rows each, whose 2 N rows are summed in two products (the first
   * when they reach 512; W2's before the segment that made it runs its
   * backward), and V's, a zero row each, summed in one. */
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.deferred_grads == 2 * 3 * N);
  CHECK(s.deferred_products == 2 * (2 + 2 + 1));
  char *text = NULL;
  CHECK_OK(loom_trace_explain(t, &text));
  CHECK(strstr(text, "weight gradients: 1800 parts deferred, summed in 10 products"));
  loom_free(text);
  loom_trace_destroy(t);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(want[i]);
  model_free(&m);
}

/* Two threads: the products are taken on the trace's thread for them
 * while the walk goes on; one: on the walk's. */
static void test_f64_compiled(void) { check(LOOM_F64, 1, 2); }
static void test_f64_interpreted(void) { check(LOOM_F64, 0, 2); }
static void test_f64_one_thread(void) { check(LOOM_F64, 1, 1); }
static void test_f32_compiled(void) { check(LOOM_F32, 1, 2); }

/* One step of an RNN of `cells` cells over rows-row inputs (weights
 * w (I, H), u (H, H)) and its backward in a fresh interpreted trace of
 * two threads; the status of the first call that failed. */
static loom_status_t small_step(loom_tensor_t *w, loom_tensor_t *u, loom_tensor_t *x, int cells) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.compile = 0;
  o.num_threads = 2;
  loom_trace_t *t = NULL;
  loom_status_t s = loom_trace_create(&o, &t);
  if (s != LOOM_OK) return s;
  loom_graph_t *g = loom_trace_graph(t);
  loom_value_t wv, uv, xv, h, l;
  s = loom_trace_param(t, w, &wv);
  if (s == LOOM_OK) s = loom_trace_param(t, u, &uv);
  if (s == LOOM_OK) s = loom_trace_input(t, x, NULL, &xv);
  if (s == LOOM_OK) s = loom_tanh(g, xv, &h);
  for (int k = 0; k < cells && s == LOOM_OK; k++) {
    loom_value_t xw, hu, z;
    s = loom_matmul(g, xv, wv, 0, 0, &xw);
    if (s == LOOM_OK) s = loom_matmul(g, h, uv, 0, 0, &hu);
    if (s == LOOM_OK) s = loom_add(g, xw, hu, &z);
    if (s == LOOM_OK) s = loom_tanh(g, z, &h);
    if (s == LOOM_OK) s = loom_trace_sync(t);
  }
  if (s == LOOM_OK) s = loom_sum(g, h, 0, NULL, 0, &l);
  if (s == LOOM_OK) s = loom_trace_backward(t, l);
  const loom_tensor_t *gw = NULL;
  if (s == LOOM_OK) s = loom_trace_grad(t, w, &gw);
  loom_status_t e = loom_trace_step_end(t);
  if (s == LOOM_OK) s = e;
  loom_trace_destroy(t);
  return s;
}

typedef struct small_args {
  loom_tensor_t *w, *u, *x;
} small_args_t;

static loom_status_t run_small(void *ctx) {
  small_args_t *a = ctx;
  return small_step(a->w, a->u, a->x, 20);
}

/* Every allocation of a step whose deferred rows reach the thread that
 * takes products (20 cells of 32 rows), failed in turn: each run fails
 * with LOOM_ERR_NOMEM or succeeds, never otherwise. */
static void test_allocation_failures(void) {
  small_args_t a = {test_rand_tensor(LOOM_F32, 2, (int64_t[]){H, H}, -0.5, 0.5),
                    test_rand_tensor(LOOM_F32, 2, (int64_t[]){H, H}, -0.5, 0.5),
                    test_rand_tensor(LOOM_F32, 2, (int64_t[]){32, H}, -1, 1)};
  test_each_allocation_failing(run_small, &a, 10, 20000);
  loom_tensor_destroy(a.w);
  loom_tensor_destroy(a.u);
  loom_tensor_destroy(a.x);
}

int main(void) {
  TEST_RUN(test_f64_compiled);
  TEST_RUN(test_f64_interpreted);
  TEST_RUN(test_f64_one_thread);
  TEST_RUN(test_f32_compiled);
  TEST_RUN(test_allocation_failures);
  return test_summary();
}
