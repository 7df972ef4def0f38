/* The optimizer step of traced training (loom_trace_optimizer_step), for
 * SGD (plain, momentum, Nesterov with weight decay), Adam and AdamW:
 *   - a two-layer model traced in two segments and trained for several
 *     steps ends with the parameters of the same model trained by one
 *     compiled graph step that calls loom_sgd / loom_adam / loom_adamw
 *     (gradients by loom_grad, one shared step counter);
 *   - the first steps equal the closed-form updates, worked by hand;
 *   - against torch.optim's algorithms in doubles, a parameter that gets
 *     no gradient keeps its value and state, a parameter entered late
 *     leaves the others' state alone, and other hyperparameters keep it;
 *   - the learning rate changes per step without compiling again;
 *   - a new model's step does not wait for the old step's compile;
 *   - the state after a step reads as worked by hand, and a state set
 *     (into the same trace, or a new one) is the next step's start;
 *   - bad arguments fail with a message, and the trace stays usable. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cache_dir.h"
#include "core/status.h"
#include "harness.h"
#include "trace/trace_internal.h"
#include "loom/trace.h"
#include "loom/train.h"

enum { B = 3, I = 4, H = 5, O = 2, STEPS = 6 };

static loom_optimizer_t optimizer(loom_optimizer_kind_t kind, double momentum,
                                  int nesterov, double weight_decay) {
  loom_optimizer_t o;
  loom_optimizer_init(&o, kind);
  o.momentum = momentum;
  o.nesterov = nesterov;
  o.weight_decay = weight_decay;
  return o;
}

/* The optimizers under test: SGD plain, with momentum, Nesterov with
 * weight decay; Adam with L2 decay; AdamW with decoupled decay. */
static void configs(loom_optimizer_t *out) {
  out[0] = optimizer(LOOM_OPTIMIZER_SGD, 0, 0, 0);
  out[1] = optimizer(LOOM_OPTIMIZER_SGD, 0.9, 0, 0);
  out[2] = optimizer(LOOM_OPTIMIZER_SGD, 0.8, 1, 0.05);
  out[3] = optimizer(LOOM_OPTIMIZER_ADAM, 0, 0, 0.05);
  out[4] = optimizer(LOOM_OPTIMIZER_ADAMW, 0, 0, 0.1);
  out[3].beta1 = 0.8, out[3].beta2 = 0.99, out[3].eps = 1e-6;
}
#define N_CONFIGS 5

static double lr_at(int step) { return 0.05 * (1 + step % 3); }

static loom_trace_t *new_trace(int compile) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.compile = compile;
  o.spec_workers = 0;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  return t;
}

/* ---- The model --------------------------------------------------------------
 * loss = sum((tanh(x W1 + b1) W2)^2) / 2, x (B, I) new each step. */

typedef struct model {
  loom_tensor_t *p[3]; /* W1 (I, H), b1 (H), W2 (H, O) */
  loom_tensor_t *xs[STEPS];
} model_t;

static const int64_t shapes[3][2] = {{I, H}, {H, 0}, {H, O}};
static const int ranks[3] = {2, 1, 2};

static void model_init(model_t *m, loom_dtype_t dt) {
  test_seed(7);
  for (int i = 0; i < 3; i++) m->p[i] = test_rand_tensor(dt, ranks[i], shapes[i], -0.8, 0.8);
  int64_t xs[2] = {B, I};
  for (int k = 0; k < STEPS; k++) m->xs[k] = test_rand_tensor(dt, 2, xs, -1, 1);
}

static void model_free(model_t *m) {
  for (int i = 0; i < 3; i++) loom_tensor_destroy(m->p[i]);
  for (int k = 0; k < STEPS; k++) loom_tensor_destroy(m->xs[k]);
}

static loom_status_t layer1(loom_graph_t *g, loom_value_t x, const loom_value_t *p,
                            loom_value_t *h) {
  loom_value_t xw, z;
  LOOM_TRY(loom_matmul(g, x, p[0], 0, 0, &xw));
  LOOM_TRY(loom_add(g, xw, p[1], &z));
  return loom_tanh(g, z, h);
}

static loom_status_t layer2_loss(loom_graph_t *g, loom_value_t h, const loom_value_t *p,
                                 loom_dtype_t dt, loom_value_t *loss) {
  loom_value_t y, sq, s, half;
  LOOM_TRY(loom_matmul(g, h, p[2], 0, 0, &y));
  LOOM_TRY(loom_mul(g, y, y, &sq));
  LOOM_TRY(loom_sum(g, sq, 0, NULL, 0, &s));
  LOOM_TRY(loom_full(g, 0, NULL, 0.5, dt, &half));
  return loom_mul(g, s, half, loss);
}

/* Step k traced: two segments (a sync between the layers), backward, the
 * optimizer step. */
static void traced_step(loom_trace_t *t, model_t *m, int k, const loom_optimizer_t *o) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_dtype_t dt = loom_tensor_dtype(m->p[0]);
  loom_value_t p[3], x, h, l;
  for (int i = 0; i < 3; i++) CHECK_OK(loom_trace_param(t, m->p[i], &p[i]));
  CHECK_OK(loom_trace_input(t, m->xs[k], NULL, &x));
  CHECK_OK(layer1(g, x, p, &h));
  CHECK_OK(loom_trace_sync(t));
  CHECK_OK(layer2_loss(g, h, p, dt, &l));
  CHECK_OK(loom_trace_backward(t, l));
  CHECK_OK(loom_trace_optimizer_step(t, o, lr_at(k)));
  CHECK_OK(loom_trace_step_end(t));
}

/* The independent path: one graph (forward, loom_grad, the optimizer's
 * own builder), compiled; its parameters start as m's. */
typedef struct static_step {
  loom_graph_t *g;
  loom_value_t p[3];
  loom_executable_t *e;
} static_step_t;

static loom_status_t builder(loom_graph_t *g, const loom_optimizer_t *o,
                             const loom_value_t *p, const loom_value_t *grads,
                             loom_value_t lr) {
  switch (o->kind) {
  case LOOM_OPTIMIZER_SGD:
    return loom_sgd(g, 3, p, grads, lr, o->momentum, o->nesterov, o->weight_decay);
  case LOOM_OPTIMIZER_ADAM:
    return loom_adam(g, 3, p, grads, lr, o->beta1, o->beta2, o->eps, o->weight_decay);
  case LOOM_OPTIMIZER_ADAMW:
    return loom_adamw(g, 3, p, grads, lr, o->beta1, o->beta2, o->eps, o->weight_decay);
  }
  return LOOM_ERR_INVALID;
}

static void static_build(static_step_t *s, const model_t *m, const loom_optimizer_t *o) {
  loom_dtype_t dt = loom_tensor_dtype(m->p[0]);
  const char *names[3] = {"w1", "b1", "w2"};
  int64_t xs[2] = {B, I};
  loom_value_t x, lr, h, l, grads[3];
  CHECK_OK(loom_graph_create(&s->g));
  for (int i = 0; i < 3; i++)
    CHECK_OK(loom_graph_param(s->g, names[i], dt, ranks[i], shapes[i], m->p[i], &s->p[i]));
  CHECK_OK(loom_graph_input(s->g, "x", dt, 2, xs, &x));
  CHECK_OK(loom_graph_input(s->g, "lr", LOOM_F64, 0, NULL, &lr));
  CHECK_OK(layer1(s->g, x, s->p, &h));
  CHECK_OK(layer2_loss(s->g, h, s->p, dt, &l));
  CHECK_OK(loom_graph_output(s->g, l));
  CHECK_OK(loom_grad(s->g, l, 3, s->p, grads));
  CHECK_OK(builder(s->g, o, s->p, grads, lr));
  CHECK_OK(loom_compile(s->g, NULL, &s->e));
}

static void static_run(static_step_t *s, model_t *m, int k) {
  double lr = lr_at(k);
  loom_tensor_t *lrt = NULL, *loss = NULL;
  CHECK_OK(loom_tensor_from_data(LOOM_F64, 0, NULL, &lr, sizeof lr, &lrt));
  CHECK_OK(loom_executable_new_output(s->e, 0, &loss));
  loom_tensor_t *in[2] = {m->xs[k], lrt};
  CHECK_OK(loom_executable_run(s->e, 2, in, 1, &loss));
  loom_tensor_destroy(lrt);
  loom_tensor_destroy(loss);
}

/* Frees a trace and the graph step and model it was checked against. */
static void finish(loom_trace_t *t, static_step_t *s, model_t *m) {
  loom_trace_destroy(t);
  loom_executable_destroy(s->e);
  loom_graph_destroy(s->g);
  model_free(m);
}

static void check_same_params(const model_t *m, const static_step_t *s, double tol) {
  for (int i = 0; i < 3; i++) {
    loom_tensor_t *want = NULL;
    CHECK_OK(loom_graph_param_tensor(s->g, s->p[i], &want));
    for (int64_t e = 0; want && e < loom_tensor_numel(want); e++)
      CHECK_NEAR(test_get(m->p[i], e), test_get(want, e), tol, tol);
  }
}

/* STEPS traced steps against STEPS runs of the compiled graph, each
 * compared; after the first step the lr changes compile nothing. */
static void check_against_graph(const loom_optimizer_t *o, loom_dtype_t dt,
                                int compile, double tol) {
  model_t m;
  static_step_t s = {0};
  model_init(&m, dt);
  static_build(&s, &m, o);
  loom_trace_t *t = new_trace(compile);
  loom_stats_t first = LOOM_STATS_INIT, last = LOOM_STATS_INIT;
  for (int k = 0; k < STEPS && s.e; k++) {
    traced_step(t, &m, k, o);
    if (k == 0) CHECK(loom_stats_get(&first) == LOOM_OK);
    static_run(&s, &m, k);
    check_same_params(&m, &s, tol);
  }
  CHECK(loom_stats_get(&last) == LOOM_OK);
  CHECK(last.compiles == first.compiles);
  finish(t, &s, &m);
}

static void test_matches_compiled_graph(void) {
  loom_optimizer_t os[N_CONFIGS];
  configs(os);
  for (int c = 0; c < N_CONFIGS; c++) {
    check_against_graph(&os[c], LOOM_F64, 1, 1e-10);
    check_against_graph(&os[c], LOOM_F32, 1, 2e-5);
  }
  check_against_graph(&os[1], LOOM_F64, 0, 1e-10); /* interpreted trace */
  check_against_graph(&os[4], LOOM_F64, 0, 1e-10);
}

/* ---- By hand ------------------------------------------------------------------
 * One f64 parameter p, loss sum(p^2): the gradient is 2p. */

/* One traced step of loss sum(p^2) with o at lr. */
static void square_step(loom_trace_t *t, loom_tensor_t *p, const loom_optimizer_t *o,
                        double lr) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_value_t v, sq, l;
  CHECK_OK(loom_trace_param(t, p, &v));
  CHECK_OK(loom_mul(g, v, v, &sq));
  CHECK_OK(loom_sum(g, sq, 0, NULL, 0, &l));
  CHECK_OK(loom_trace_backward(t, l));
  CHECK_OK(loom_trace_optimizer_step(t, o, lr));
  CHECK_OK(loom_trace_step_end(t));
}

/* Two steps of o from p0; want1 and want2 give each step's closed form
 * of element value x0. */
typedef double (*closed_form_t)(double x0, double lr);

static void check_two_steps(const loom_optimizer_t *o, closed_form_t want1,
                            closed_form_t want2, double lr) {
  enum { N = 5 };
  int64_t n = N;
  const double p0[N] = {1.5, -0.25, 0.75, -2.0, 0.125};
  loom_tensor_t *p = test_tensor(LOOM_F64, 1, &n, p0);
  loom_trace_t *t = new_trace(1);
  square_step(t, p, o, lr);
  for (int i = 0; i < N; i++) CHECK_NEAR(test_get(p, i), want1(p0[i], lr), 1e-12, 1e-12);
  if (want2) {
    square_step(t, p, o, lr);
    for (int i = 0; i < N; i++) CHECK_NEAR(test_get(p, i), want2(p0[i], lr), 1e-12, 1e-12);
  }
  loom_trace_destroy(t);
  loom_tensor_destroy(p);
}

/* SGD: p1 = p0 - lr 2 p0; again: p2 = p1 (1 - 2 lr). */
static double sgd1(double x, double lr) { return x * (1 - 2 * lr); }
static double sgd2(double x, double lr) { return x * (1 - 2 * lr) * (1 - 2 * lr); }
/* Momentum 0.9: b1 = 2 p0, p1 = p0 (1 - 2 lr); b2 = 0.9 b1 + 2 p1,
 * p2 = p1 - lr b2. */
static double mom2(double x, double lr) {
  double p1 = x * (1 - 2 * lr), b2 = 0.9 * 2 * x + 2 * p1;
  return p1 - lr * b2;
}
/* Nesterov 0.5, weight decay 0.1: g = 2.1 p0, b1 = g, d = g + 0.5 b1. */
static double nesterov1(double x, double lr) { return x - lr * 1.5 * 2.1 * x; }
/* Adam's first step: the bias corrections cancel, m / sqrt(v) = g / |g|:
 * p1 = p0 - lr g0 / (|g0| + eps). */
static double adam_first(double x, double g, double lr) {
  return x - lr * g / (fabs(g) + 1e-8);
}
static double adam1(double x, double lr) { return adam_first(x, 2 * x, lr); }
/* A second step with g1 = 2 p1: m2 = 0.1 (0.9 g0 + g1) and
 * v2 = 0.001 (0.999 g0^2 + g1^2), bias-corrected by 1 - 0.9^2 and
 * 1 - 0.999^2. */
static double adam2(double x, double lr) {
  double p1 = adam1(x, lr), g0 = 2 * x, g1 = 2 * p1;
  double mhat = 0.1 * (0.9 * g0 + g1) / (1 - 0.81);
  double vhat = 0.001 * (0.999 * g0 * g0 + g1 * g1) / (1 - 0.998001);
  return p1 - lr * mhat / (sqrt(vhat) + 1e-8);
}
/* Adam with L2 decay 0.5: the gradient is 2.5 p0. */
static double adam_l2_1(double x, double lr) { return adam_first(x, 2.5 * x, lr); }
/* AdamW, weight decay 0.5: p0 (1 - 0.5 lr), then Adam's step from g0. */
static double adamw1(double x, double lr) {
  return adam_first(x, 2 * x, lr) - 0.5 * lr * x;
}

static void test_first_steps_by_hand(void) {
  loom_optimizer_t o = optimizer(LOOM_OPTIMIZER_SGD, 0, 0, 0);
  check_two_steps(&o, sgd1, sgd2, 0.125);
  o = optimizer(LOOM_OPTIMIZER_SGD, 0.9, 0, 0);
  check_two_steps(&o, sgd1, mom2, 0.125);
  o = optimizer(LOOM_OPTIMIZER_SGD, 0.5, 1, 0.1);
  check_two_steps(&o, nesterov1, NULL, 0.125);
  o = optimizer(LOOM_OPTIMIZER_ADAM, 0, 0, 0);
  check_two_steps(&o, adam1, adam2, 0.0625);
  o = optimizer(LOOM_OPTIMIZER_ADAM, 0, 0, 0.5);
  check_two_steps(&o, adam_l2_1, NULL, 0.0625);
  o = optimizer(LOOM_OPTIMIZER_ADAMW, 0, 0, 0.5);
  check_two_steps(&o, adamw1, NULL, 0.0625);
}

/* ---- Against torch.optim's algorithms ---------------------------------------- */

enum { NP = 6 };

/* One parameter's state in doubles. */
typedef struct ref {
  double p[NP], buf[NP], m[NP], v[NP];
  int64_t steps; /* steps it took */
} ref_t;

/* torch.optim's SGD (dampening 0), Adam and AdamW, as documented, one
 * step with the gradient 2p of loss sum(p^2). */
static void ref_step(const loom_optimizer_t *o, ref_t *r, double lr) {
  r->steps++;
  double wd = o->weight_decay, t = (double)r->steps;
  for (int i = 0; i < NP; i++) {
    double g = 2 * r->p[i];
    if (o->kind == LOOM_OPTIMIZER_SGD) {
      g += wd * r->p[i];
      if (o->momentum != 0) {
        r->buf[i] = r->steps == 1 ? g : o->momentum * r->buf[i] + g;
        g = o->nesterov ? g + o->momentum * r->buf[i] : r->buf[i];
      }
      r->p[i] -= lr * g;
      continue;
    }
    if (o->kind == LOOM_OPTIMIZER_ADAM) g += wd * r->p[i];
    else r->p[i] *= 1 - lr * wd;
    r->m[i] = o->beta1 * r->m[i] + (1 - o->beta1) * g;
    r->v[i] = o->beta2 * r->v[i] + (1 - o->beta2) * g * g;
    double mhat = r->m[i] / (1 - pow(o->beta1, t));
    double vhat = r->v[i] / (1 - pow(o->beta2, t));
    r->p[i] -= lr * mhat / (sqrt(vhat) + o->eps);
  }
}

/* Five steps over parameters a and b (loss sum(a^2) [+ sum(b^2)]):
 *   0: a only, b not yet entered;
 *   1: b entered and used (a new parameter: a's state carries over);
 *   2: b entered, unused (no gradient: skipped);
 *   3: b not entered (skipped), the weight decay doubled (a rebuild that
 *      keeps the state);
 *   4: both. */
static void check_skips(const loom_optimizer_t *o0) {
  int64_t shape[1] = {NP};
  loom_tensor_t *ps[2] = {test_rand_tensor(LOOM_F64, 1, shape, -1, 1),
                          test_rand_tensor(LOOM_F64, 1, shape, -1, 1)};
  ref_t ref[2];
  memset(ref, 0, sizeof ref);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < NP; i++) ref[k].p[i] = test_get(ps[k], i);
  loom_trace_t *t = new_trace(1);
  loom_graph_t *g = loom_trace_graph(t);
  const int enters_b[5] = {0, 1, 1, 0, 1}, uses_b[5] = {0, 1, 0, 0, 1};
  loom_optimizer_t o = *o0;
  for (int step = 0; step < 5; step++) {
    double lr = lr_at(step);
    if (step == 3) o.weight_decay = 2 * o.weight_decay + 0.01;
    loom_value_t a, b, sa, sb, l, lb;
    CHECK_OK(loom_trace_param(t, ps[0], &a));
    CHECK_OK(loom_mul(g, a, a, &sa));
    CHECK_OK(loom_sum(g, sa, 0, NULL, 0, &l));
    if (enters_b[step]) CHECK_OK(loom_trace_param(t, ps[1], &b));
    if (uses_b[step]) {
      CHECK_OK(loom_mul(g, b, b, &sb));
      CHECK_OK(loom_sum(g, sb, 0, NULL, 0, &lb));
      CHECK_OK(loom_add(g, l, lb, &l));
    }
    CHECK_OK(loom_trace_backward(t, l));
    CHECK_OK(loom_trace_optimizer_step(t, &o, lr));
    CHECK_OK(loom_trace_step_end(t));
    ref_step(&o, &ref[0], lr);
    if (uses_b[step]) ref_step(&o, &ref[1], lr);
    for (int k = 0; k < 2; k++)
      for (int i = 0; i < NP; i++) CHECK_NEAR(test_get(ps[k], i), ref[k].p[i], 1e-12, 1e-10);
  }
  loom_trace_destroy(t);
  loom_tensor_destroy(ps[0]);
  loom_tensor_destroy(ps[1]);
}

static void test_skips_and_state_against_reference(void) {
  loom_optimizer_t os[N_CONFIGS];
  configs(os);
  for (int c = 0; c < N_CONFIGS; c++) check_skips(&os[c]);
}

/* loom_trace_adamw is loom_trace_optimizer_step with AdamW: the same
 * parameters after three steps. */
static void test_adamw_wrapper(void) {
  int64_t n = NP;
  loom_tensor_t *a = test_rand_tensor(LOOM_F32, 1, &n, -1, 1);
  loom_tensor_t *b = test_rand_tensor(LOOM_F32, 1, &n, 0, 0);
  CHECK_OK(loom_tensor_write(b, loom_tensor_data(a), sizeof(float) * NP));
  loom_trace_t *ta = new_trace(1), *tb = new_trace(1);
  loom_optimizer_t o = optimizer(LOOM_OPTIMIZER_ADAMW, 0, 0, 0.02);
  o.beta1 = 0.85;
  for (int k = 0; k < 3; k++) {
    loom_graph_t *g = loom_trace_graph(ta);
    loom_value_t v, sq, l;
    CHECK_OK(loom_trace_param(ta, a, &v));
    CHECK_OK(loom_mul(g, v, v, &sq));
    CHECK_OK(loom_sum(g, sq, 0, NULL, 0, &l));
    CHECK_OK(loom_trace_backward(ta, l));
    CHECK_OK(loom_trace_adamw(ta, lr_at(k), 0.85, 0.999, 1e-8, 0.02));
    CHECK_OK(loom_trace_step_end(ta));
    square_step(tb, b, &o, lr_at(k));
  }
  CHECK(!memcmp(loom_tensor_data(a), loom_tensor_data(b), sizeof(float) * NP));
  loom_trace_destroy(ta);
  loom_trace_destroy(tb);
  loom_tensor_destroy(a);
  loom_tensor_destroy(b);
}

/* A tiered trace (the default: a cache with a worker) runs its first
 * optimizer steps in the fallback while the step compiles beside it, then
 * the compiled step, with the state (moments, the step counter) carried
 * over: the parameters follow the compiled graph's step by step
 * throughout. Step 0 starts the compile and runs in the fallback; the
 * test waits for the compile after step 1, so that the swap falls at
 * step 1 or 2, as the compile (a module this process or the disk cache
 * has, or the C compiler on a loaded machine) ends before step 1 or not. */
static void test_tiered_swap(void) {
  loom_optimizer_t os[N_CONFIGS];
  configs(os);
  for (int c = 1; c < N_CONFIGS; c += 3) { /* momentum SGD, AdamW */
    model_t m;
    static_step_t s = {0};
    model_init(&m, LOOM_F64);
    static_build(&s, &m, &os[c]);
    loom_trace_options_t o;
    loom_trace_options_init(&o);
    loom_trace_t *t = NULL;
    CHECK_OK(loom_trace_create(&o, &t));
    for (int k = 0; k < STEPS && s.e; k++) {
      traced_step(t, &m, k, &os[c]);
      bool compiled = tr_optim_compiled(t, k == 1);
      CHECK(k == 0 ? !compiled : k >= 2 ? compiled : true);
      static_run(&s, &m, k);
      check_same_params(&m, &s, 1e-10);
    }
    finish(t, &s, &m);
  }
}

/* A new model (its parameters in place of the old ones) while the old
 * step still compiles: the new model's steps neither wait for that
 * compile nor differ from the compiled graph's. The C compiler here (a
 * script) holds every compile until the test opens its gate and leaves a
 * mark when it gives up waiting (after 30 s): a step that waited for
 * the old compile would return only after the mark. Its own cache
 * directory and weight decay, so that no module of another run is found
 * without the compiler. */
static void test_replaced_step_does_not_wait(void) {
  loom_optimizer_t os[N_CONFIGS];
  configs(os);
  loom_optimizer_t opt = os[4];
  opt.weight_decay = 0.0625;
  model_t old, m;
  static_step_t s = {0};
  model_init(&old, LOOM_F64);
  model_init(&m, LOOM_F64);
  static_build(&s, &m, &opt);
  char dir[] = "/tmp/loom-test-optim-XXXXXX", cc[PATH_MAX], gate[PATH_MAX], late[PATH_MAX];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(cc, sizeof cc, "%s/held-cc", dir);
  snprintf(gate, sizeof gate, "%s/gate", dir);
  snprintf(late, sizeof late, "%s/late", dir);
  FILE *f = fopen(cc, "w");
  CHECK(f != NULL);
  if (f) {
    fprintf(f, "#!/bin/sh\n[ \"$1\" = --version ] && exec cc \"$@\"\ni=0\n"
               "while [ ! -e %s ]; do\n  i=$((i + 1))\n"
               "  if [ $i -gt 300 ]; then touch %s; break; fi\n  sleep 0.1\ndone\n"
               "exec cc \"$@\"\n", gate, late);
    fclose(f);
  }
  CHECK(chmod(cc, 0700) == 0);
  char *was = getenv("LOOM_CACHE_DIR") ? strdup(getenv("LOOM_CACHE_DIR")) : NULL;
  setenv("LOOM_CACHE_DIR", dir, 1);
  setenv("LOOM_CC", cc, 1);
  loom_cache_t *c = NULL;
  CHECK_OK(loom_cache_create(0, 1, &c));
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.cache = c;
  o.tiered = 1;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  traced_step(t, &old, 0, &opt); /* starts the step's compile, held */
  for (int i = 0; i < 3; i++) CHECK_OK(loom_trace_param_forget(t, old.p[i]));
  for (int k = 0; k < 2 && s.e; k++) {
    traced_step(t, &m, k, &opt);
    static_run(&s, &m, k);
    check_same_params(&m, &s, 1e-10);
  }
  CHECK(access(late, F_OK) != 0);
  f = fopen(gate, "w");
  CHECK(f != NULL);
  if (f) fclose(f);
  finish(t, &s, &m);
  loom_cache_destroy(c);
  model_free(&old);
  unsetenv("LOOM_CC");
  if (was) setenv("LOOM_CACHE_DIR", was, 1);
  else unsetenv("LOOM_CACHE_DIR");
  free(was);
  core_remove_tree(dir);
}

/* A trace that interprets builds each training segment's forward and
 * backward from one partition: the forward's eager entry keeps the
 * backward half (two segments: two halves), the backward's eager entry
 * takes it; the parameters still follow the compiled graph. */
static int halves_kept(const loom_trace_t *t) {
  int n = 0;
  for (int i = 0; i < TR_HALVES; i++) n += t->run.half[i] != NULL;
  return n;
}

static void test_fallback_halves(void) {
  loom_optimizer_t os[N_CONFIGS];
  configs(os);
  model_t m;
  static_step_t s = {0};
  model_init(&m, LOOM_F64);
  static_build(&s, &m, &os[4]);
  loom_trace_t *t = new_trace(0);
  loom_graph_t *g = loom_trace_graph(t);
  for (int k = 0; k < 3 && s.e; k++) {
    loom_value_t p[3], x, h, l;
    for (int i = 0; i < 3; i++) CHECK_OK(loom_trace_param(t, m.p[i], &p[i]));
    CHECK_OK(loom_trace_input(t, m.xs[k], NULL, &x));
    CHECK_OK(layer1(g, x, p, &h));
    CHECK_OK(loom_trace_sync(t));
    CHECK_OK(layer2_loss(g, h, p, LOOM_F64, &l));
    double loss;
    CHECK_OK(loom_trace_scalar(t, l, &loss));
    CHECK(halves_kept(t) == (k == 0 ? 2 : 0)); /* later steps find the entries built */
    CHECK_OK(loom_trace_backward(t, l));
    CHECK(halves_kept(t) == 0);
    CHECK_OK(loom_trace_optimizer_step(t, &os[4], lr_at(k)));
    CHECK_OK(loom_trace_step_end(t));
    static_run(&s, &m, k);
    check_same_params(&m, &s, 1e-10);
  }
  finish(t, &s, &m);
}

/* ---- Forgetting parameters -----------------------------------------------------
 * Adam over a and b (loss sum(a^2) + sum(b^2)); a is forgotten and
 * entered again after b: b's second step must be Adam's second from its
 * own state (b moved from index 1 to 0 of the optimizer step), and a's
 * Adam's first (its state went when it was forgotten). */

static void squares_step(loom_trace_t *t, loom_tensor_t *const *ps, int n,
                         const loom_optimizer_t *o, double lr) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_value_t total = {-1};
  for (int i = 0; i < n; i++) {
    loom_value_t v, sq, l;
    CHECK_OK(loom_trace_param(t, ps[i], &v));
    CHECK_OK(loom_mul(g, v, v, &sq));
    CHECK_OK(loom_sum(g, sq, 0, NULL, 0, &l));
    if (total.id < 0) total = l;
    else CHECK_OK(loom_add(g, total, l, &total));
  }
  CHECK_OK(loom_trace_backward(t, total));
  CHECK_OK(loom_trace_optimizer_step(t, o, lr));
  CHECK_OK(loom_trace_step_end(t));
}

static void check_forget(int compile) {
  enum { N = 5 };
  int64_t n = N;
  const double a0[N] = {3.0, -1.0, 0.5, 2.0, -0.75}, b0[N] = {1.5, -0.25, 0.75, -2.0, 0.125};
  loom_tensor_t *a = test_tensor(LOOM_F64, 1, &n, a0), *b = test_tensor(LOOM_F64, 1, &n, b0);
  loom_trace_t *t = new_trace(compile);
  loom_optimizer_t o = optimizer(LOOM_OPTIMIZER_ADAM, 0, 0, 0);
  double lr = 0.0625, a1[N];
  loom_tensor_t *ab[2] = {a, b}, *ba[2] = {b, a};
  squares_step(t, ab, 2, &o, lr);
  for (int i = 0; i < N; i++) a1[i] = test_get(a, i);
  /* a gradient asked for between steps (zeros) does not hold the parameter */
  const loom_tensor_t *grad;
  CHECK_OK(loom_trace_grad(t, a, &grad));
  CHECK(test_get(grad, 0) == 0.0);
  CHECK_OK(loom_trace_param_forget(t, a));
  CHECK_ERR(loom_trace_param_forget(t, a), LOOM_ERR_INVALID, "not a parameter");
  squares_step(t, ba, 2, &o, lr);
  for (int i = 0; i < N; i++) {
    CHECK_NEAR(test_get(b, i), adam2(b0[i], lr), 1e-12, 1e-12);
    CHECK_NEAR(test_get(a, i), adam1(a1[i], lr), 1e-12, 1e-12);
  }
  for (int i = 0; i < N; i++) a1[i] = test_get(a, i);
  CHECK_OK(loom_trace_param_forget(t, a));
  squares_step(t, &b, 1, &o, lr); /* b alone, a left as it was */
  for (int i = 0; i < N; i++) CHECK(test_get(a, i) == a1[i]);
  /* not while the step uses it */
  loom_value_t v;
  CHECK_OK(loom_trace_param(t, a, &v));
  CHECK_ERR(loom_trace_param_forget(t, a), LOOM_ERR_INVALID, "current step");
  CHECK_OK(loom_trace_step_end(t));
  CHECK_ERR(loom_trace_param_forget(NULL, a), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_trace_param_forget(t, NULL), LOOM_ERR_INVALID, "null");
  loom_trace_destroy(t);
  loom_tensor_destroy(a);
  loom_tensor_destroy(b);
}

static void test_forget(void) {
  check_forget(1);
  check_forget(0);
}

/* ---- State, read and set ------------------------------------------------------
 * loss sum(p^2) again: the state after the first step is known by hand,
 * and a state set is the one the next step starts from. */

static const double state_p0[5] = {1.5, -0.25, 0.75, -2.0, 0.125};

/* Each element of t near want(p0[i]). */
static void check_state(const loom_tensor_t *t, double (*want)(double), double atol) {
  CHECK(t != NULL);
  for (int i = 0; t && i < 5; i++) CHECK_NEAR(test_get(t, i), want(state_p0[i]), atol, 1e-12);
}

static double twice(double x) { return 2 * x; }
static double adam_m1(double x) { return 0.1 * 2 * x; }          /* (1 - beta1) g0 */
static double adam_v1(double x) { return 0.001 * 4 * x * x; }    /* (1 - beta2) g0^2 */

/* SGD's buffer after one step is the gradient 2 p0; set to zeros, the
 * second step is plain SGD's (sgd2). */
static void check_sgd_state(void) {
  int64_t n = 5;
  loom_tensor_t *p = test_tensor(LOOM_F64, 1, &n, state_p0), *zeros;
  CHECK_OK(loom_tensor_create(LOOM_F64, 1, &n, &zeros));
  loom_trace_t *t = new_trace(1);
  loom_optimizer_t o = optimizer(LOOM_OPTIMIZER_SGD, 0.9, 0, 0);
  square_step(t, p, &o, 0.125);
  const loom_tensor_t *buf, *none;
  CHECK_OK(loom_trace_optimizer_state(t, p, "momentum", &buf));
  check_state(buf, twice, 1e-12);
  CHECK_OK(loom_trace_optimizer_state(t, p, "m", &none));
  CHECK(none == NULL);
  CHECK_OK(loom_trace_optimizer_state_set(t, p, "momentum", zeros));
  CHECK_OK(loom_trace_optimizer_state(t, p, "momentum", &buf));
  CHECK(buf && test_get(buf, 0) == 0);
  square_step(t, p, &o, 0.125);
  for (int i = 0; i < 5; i++) CHECK_NEAR(test_get(p, i), sgd2(state_p0[i], 0.125), 1e-12, 1e-12);
  loom_trace_destroy(t);
  loom_tensor_destroy(zeros);
  loom_tensor_destroy(p);
}

/* Adam's moments and count after one step; copied into a new trace with
 * a copy of the parameter, its next step is the first trace's second
 * (adam2). */
static void check_adam_state(void) {
  int64_t n = 5;
  loom_tensor_t *p = test_tensor(LOOM_F64, 1, &n, state_p0);
  loom_trace_t *t = new_trace(1), *fresh = new_trace(1);
  loom_optimizer_t o = optimizer(LOOM_OPTIMIZER_ADAM, 0, 0, 0);
  square_step(t, p, &o, 0.0625);
  const loom_tensor_t *m, *v, *step;
  CHECK_OK(loom_trace_optimizer_state(t, p, "m", &m));
  CHECK_OK(loom_trace_optimizer_state(t, p, "v", &v));
  CHECK_OK(loom_trace_optimizer_state(t, p, "step", &step));
  check_state(m, adam_m1, 1e-12);
  check_state(v, adam_v1, 1e-12);
  CHECK(step && loom_tensor_dtype(step) == LOOM_I64 && test_get(step, 0) == 1);
  loom_tensor_t *q;
  CHECK_OK(loom_tensor_copy(p, &q));
  loom_value_t qv;
  CHECK_OK(loom_trace_param(fresh, q, &qv));
  const loom_tensor_t *before;
  CHECK_OK(loom_trace_optimizer_state(fresh, q, "m", &before));
  CHECK(before == NULL); /* no step made it yet */
  CHECK_OK(loom_trace_optimizer_state_set(fresh, q, "m", m));
  CHECK_OK(loom_trace_optimizer_state_set(fresh, q, "v", v));
  CHECK_OK(loom_trace_optimizer_state_set(fresh, q, "step", step));
  square_step(fresh, q, &o, 0.0625);
  for (int i = 0; i < 5; i++) CHECK_NEAR(test_get(q, i), adam2(state_p0[i], 0.0625), 1e-12, 1e-12);
  CHECK_OK(loom_trace_optimizer_state(fresh, q, "step", &step));
  CHECK(step && test_get(step, 0) == 2);
  loom_trace_destroy(fresh);
  loom_trace_destroy(t);
  loom_tensor_destroy(q);
  loom_tensor_destroy(p);
}

static void check_state_errors(void) {
  int64_t n = 5, two = 2;
  loom_tensor_t *p = test_tensor(LOOM_F64, 1, &n, state_p0), *other, *f32, *short_one;
  CHECK_OK(loom_tensor_create(LOOM_F64, 1, &n, &other));
  CHECK_OK(loom_tensor_create(LOOM_F32, 1, &n, &f32));
  CHECK_OK(loom_tensor_create(LOOM_F64, 1, &two, &short_one));
  loom_trace_t *t = new_trace(0);
  loom_value_t v;
  const loom_tensor_t *out;
  CHECK_OK(loom_trace_param(t, p, &v));
  CHECK_ERR(loom_trace_optimizer_state(t, p, "moment", &out), LOOM_ERR_INVALID, "moment");
  CHECK_ERR(loom_trace_optimizer_state(t, other, "m", &out), LOOM_ERR_INVALID, "not a parameter");
  CHECK_ERR(loom_trace_optimizer_state_set(t, p, "m", f32), LOOM_ERR_DTYPE, "f64");
  CHECK_ERR(loom_trace_optimizer_state_set(t, p, "v", short_one), LOOM_ERR_SHAPE, "shape");
  CHECK_ERR(loom_trace_optimizer_state_set(t, p, "step", other), LOOM_ERR_DTYPE, "i64");
  CHECK_ERR(loom_trace_optimizer_state_set(NULL, p, "m", other), LOOM_ERR_INVALID, "null");
  /* a state the optimizer does not keep is dropped at its step */
  CHECK_OK(loom_trace_optimizer_state_set(t, p, "momentum", other));
  CHECK_OK(loom_trace_step_end(t));
  loom_optimizer_t o = optimizer(LOOM_OPTIMIZER_ADAM, 0, 0, 0);
  square_step(t, p, &o, 0.0625);
  CHECK_OK(loom_trace_optimizer_state(t, p, "momentum", &out));
  CHECK(out == NULL);
  for (int i = 0; i < 5; i++) CHECK_NEAR(test_get(p, i), adam1(state_p0[i], 0.0625), 1e-12, 1e-12);
  loom_trace_destroy(t);
  loom_tensor_destroy(short_one);
  loom_tensor_destroy(f32);
  loom_tensor_destroy(other);
  loom_tensor_destroy(p);
}

static void test_state_read_and_set(void) {
  check_sgd_state();
  check_adam_state();
  check_state_errors();
}

/* ---- Errors ------------------------------------------------------------------- */

static void test_errors(void) {
  int64_t n = 3;
  loom_tensor_t *p = test_rand_tensor(LOOM_F32, 1, &n, -1, 1);
  loom_trace_t *t = new_trace(1);
  loom_optimizer_t o = optimizer(LOOM_OPTIMIZER_SGD, 0, 0, 0);
  CHECK_ERR(loom_trace_optimizer_step(t, &o, 0.1), LOOM_ERR_INVALID, "no parameters");
  CHECK_ERR(loom_trace_optimizer_step(NULL, &o, 0.1), LOOM_ERR_INVALID, "null");
  loom_graph_t *g = loom_trace_graph(t);
  loom_value_t v, sq, l;
  CHECK_OK(loom_trace_param(t, p, &v));
  CHECK_OK(loom_mul(g, v, v, &sq));
  CHECK_OK(loom_sum(g, sq, 0, NULL, 0, &l));
  CHECK_OK(loom_trace_backward(t, l));
  CHECK_ERR(loom_trace_optimizer_step(t, NULL, 0.1), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_trace_optimizer_step(t, &o, -0.1), LOOM_ERR_INVALID, "lr");
  CHECK_ERR(loom_trace_optimizer_step(t, &o, NAN), LOOM_ERR_INVALID, "lr");
  o.nesterov = 1;
  CHECK_ERR(loom_trace_optimizer_step(t, &o, 0.1), LOOM_ERR_INVALID, "nesterov");
  o = optimizer(LOOM_OPTIMIZER_ADAM, 0, 0, 0);
  o.beta1 = 1;
  CHECK_ERR(loom_trace_optimizer_step(t, &o, 0.1), LOOM_ERR_INVALID,
            "loom_trace_optimizer_step: beta1");
  o.beta1 = 0.9;
  o.kind = (loom_optimizer_kind_t)7;
  CHECK_ERR(loom_trace_optimizer_step(t, &o, 0.1), LOOM_ERR_INVALID, "kind 7");
  CHECK_ERR(loom_trace_adamw(t, 0.1, 0.9, 0.999, -1, 0), LOOM_ERR_INVALID, "eps");
  /* nothing changed, and a good step still runs */
  double before = test_get(p, 0);
  o = optimizer(LOOM_OPTIMIZER_SGD, 0, 0, 0);
  CHECK_OK(loom_trace_optimizer_step(t, &o, 0.25));
  CHECK_NEAR(test_get(p, 0), before * 0.5, 1e-7, 1e-6);
  CHECK_OK(loom_trace_step_end(t));
  loom_trace_destroy(t);
  loom_tensor_destroy(p);
}

int main(void) {
  test_seed(3);
  TEST_RUN(test_matches_compiled_graph);
  TEST_RUN(test_first_steps_by_hand);
  TEST_RUN(test_skips_and_state_against_reference);
  TEST_RUN(test_adamw_wrapper);
  TEST_RUN(test_tiered_swap);
  TEST_RUN(test_replaced_step_does_not_wait);
  TEST_RUN(test_fallback_halves);
  TEST_RUN(test_forget);
  TEST_RUN(test_state_read_and_set);
  TEST_RUN(test_errors);
  return test_summary();
}
