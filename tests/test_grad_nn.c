/* Gradient rules of matmul, convolutions, pooling and normalization
 * (src/passes/grad_nn.c), checked against central finite differences in
 * f64; and the ops those rules add (conv2d_weight_grad, max_pool2d_grad,
 * avg_pool2d_grad), checked on hand-computed cases and against the
 * adjoint identity <op(x), dy> = <x, op's gradient(dy)> of linear maps. */
#include <stdlib.h>
#include <string.h>

#include "grad_check.h"
#include "harness.h"
#include "loom/ops.h"

#include "grad_check.c"

static const loom_dtype_t FLOATS[4] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16};

/* One case's parameters, read by its builder. */
typedef struct nn_case {
  int ta, tb;
  loom_conv_params_t conv;
  int64_t kernel[2];
  loom_pool_params_t pool;
  int has_scale, has_bias;
  int64_t axis;
  double eps;
  int training;
} nn_case_t;

typedef loom_status_t (*build_fn)(loom_graph_t *g, const loom_value_t *x,
                                  const nn_case_t *p, loom_value_t *y);

static loom_tensor_t *rand_f64(int rank, const int64_t *shape, double lo, double hi) {
  return test_rand_tensor(LOOM_F64, rank, shape, lo, hi);
}

static void destroy_all(int n, loom_tensor_t **t) {
  for (int i = 0; i < n; i++) loom_tensor_destroy(t[i]);
}

/* ---- Finite-difference checks of the rules -------------------------------- */

typedef struct fd_ctx {
  build_fn build;
  const nn_case_t *p;
} fd_ctx_t;

static loom_status_t fd_build(loom_graph_t *g, const loom_value_t *x, void *ctx,
                              loom_value_t *loss) {
  const fd_ctx_t *c = ctx;
  loom_value_t y;
  loom_status_t s = c->build(g, x, c->p, &y);
  return s == LOOM_OK ? grad_check_weighted_sum(g, y, loss) : s;
}

/* Checks the gradients of every input; the tensors are destroyed. Only
 * `compile` cases also compile the gradient graph (a C compiler run). */
static void fd_check(const char *what, int n, loom_tensor_t **x, build_fn build,
                     const nn_case_t *p, int compile) {
  fd_ctx_t ctx = {build, p};
  grad_check_opts_t o;
  grad_check_opts_init(&o);
  o.compile = compile;
  grad_check(what, n, x, fd_build, &ctx, &o);
  destroy_all(n, x);
}

/* ---- matmul ---------------------------------------------------------------- */

static loom_status_t build_matmul(loom_graph_t *g, const loom_value_t *x,
                                  const nn_case_t *p, loom_value_t *y) {
  return loom_matmul(g, x[0], x[1], p->ta, p->tb, y);
}

/* Shapes as stored (a transposed operand stored with its last dims
 * swapped): plain, transposed, batch broadcasting both ways, 1-D
 * operands. */
static void test_matmul_grad(void) {
  static const struct {
    int ra, rb;
    int64_t a[4], b[4];
    int ta, tb;
  } cases[] = {
      {2, 2, {3, 4}, {4, 2}, 0, 0},
      {2, 2, {4, 3}, {4, 2}, 1, 0},
      {2, 2, {3, 4}, {2, 4}, 0, 1},
      {2, 2, {4, 3}, {2, 4}, 1, 1},
      {4, 3, {2, 1, 3, 4}, {3, 4, 2}, 0, 0},
      {3, 4, {1, 4, 3}, {2, 3, 2, 4}, 1, 1},
      {3, 2, {2, 3, 4}, {4, 2}, 0, 0},
      {1, 2, {4}, {3, 4}, 0, 1},
      {1, 3, {4}, {2, 4, 3}, 0, 0},
      {3, 1, {2, 4, 3}, {4}, 1, 0},
      {1, 1, {4}, {4}, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    nn_case_t p = {.ta = cases[i].ta, .tb = cases[i].tb};
    loom_tensor_t *x[2] = {rand_f64(cases[i].ra, cases[i].a, -1, 1),
                           rand_f64(cases[i].rb, cases[i].b, -1, 1)};
    char what[64];
    snprintf(what, sizeof what, "matmul case %zu", i);
    fd_check(what, 2, x, build_matmul, &p, i == 4);
  }
}

/* ---- Convolutions ------------------------------------------------------------ */

static loom_status_t build_conv2d(loom_graph_t *g, const loom_value_t *x,
                                  const nn_case_t *p, loom_value_t *y) {
  return loom_conv2d(g, x[0], x[1], p->has_bias, p->has_bias ? x[2] : x[0], &p->conv, y);
}

static loom_status_t build_conv_transpose2d(loom_graph_t *g, const loom_value_t *x,
                                            const nn_case_t *p, loom_value_t *y) {
  return loom_conv_transpose2d(g, x[0], x[1], p->has_bias, p->has_bias ? x[2] : x[0],
                               &p->conv, y);
}

typedef struct conv_geom {
  int64_t n, cg, og, groups, h, w, kh, kw, stride[2], pads[4], dil[2], out_pad[2];
} conv_geom_t;

static nn_case_t conv_case(const conv_geom_t *c, int has_bias) {
  nn_case_t p = {.has_bias = has_bias};
  memcpy(p.conv.stride, c->stride, sizeof c->stride);
  memcpy(p.conv.pads, c->pads, sizeof c->pads);
  memcpy(p.conv.dilation, c->dil, sizeof c->dil);
  memcpy(p.conv.output_padding, c->out_pad, sizeof c->out_pad);
  p.conv.groups = c->groups;
  p.kernel[0] = c->kh;
  p.kernel[1] = c->kw;
  return p;
}

/* Strides that leave rows no window reaches (so that the input gradient
 * needs output_padding), padding, dilation, groups. */
static const conv_geom_t CONVS[] = {
    {2, 2, 3, 1, 5, 4, 3, 2, {1, 1}, {0, 0, 0, 0}, {1, 1}, {0, 0}},
    {1, 2, 2, 1, 6, 7, 3, 3, {2, 2}, {1, 0, 0, 1}, {1, 1}, {0, 0}},
    {1, 1, 2, 2, 7, 6, 2, 3, {2, 3}, {0, 1, 1, 0}, {2, 1}, {1, 0}},
    {2, 2, 1, 3, 5, 5, 2, 2, {1, 2}, {1, 1, 1, 1}, {2, 2}, {0, 1}},
    {1, 1, 1, 1, 4, 4, 2, 2, {1, 1}, {0, 0, 0, 0}, {2, 2}, {1, 1}},
};

static void test_conv2d_grad(void) {
  for (size_t i = 0; i < sizeof CONVS / sizeof CONVS[0]; i++) {
    const conv_geom_t *c = &CONVS[i];
    nn_case_t p = conv_case(c, (int)(i % 2 == 0));
    int64_t xs[4] = {c->n, c->cg * c->groups, c->h, c->w};
    int64_t ws[4] = {c->og * c->groups, c->cg, c->kh, c->kw}, bs[1] = {ws[0]};
    loom_tensor_t *x[3] = {rand_f64(4, xs, -1, 1), rand_f64(4, ws, -1, 1),
                           rand_f64(1, bs, -1, 1)};
    char what[64];
    snprintf(what, sizeof what, "conv2d case %zu", i);
    fd_check(what, 2 + p.has_bias, x, build_conv2d, &p, i == 1);
    if (!p.has_bias) loom_tensor_destroy(x[2]);
  }
}

/* The last case has output_padding 1 with stride 1 (dilation 2): conv2d
 * maps the gradient one row past x's end. */
static void test_conv_transpose2d_grad(void) {
  for (size_t i = 0; i < sizeof CONVS / sizeof CONVS[0]; i++) {
    const conv_geom_t *c = &CONVS[i];
    nn_case_t p = conv_case(c, (int)(i % 2 == 1));
    int64_t xs[4] = {c->n, c->cg * c->groups, c->h - 2, c->w - 1};
    int64_t ws[4] = {c->cg * c->groups, c->og, c->kh, c->kw}, bs[1] = {c->og * c->groups};
    loom_tensor_t *x[3] = {rand_f64(4, xs, -1, 1), rand_f64(4, ws, -1, 1),
                           rand_f64(1, bs, -1, 1)};
    char what[64];
    snprintf(what, sizeof what, "conv_transpose2d case %zu", i);
    fd_check(what, 2 + p.has_bias, x, build_conv_transpose2d, &p, i == 3);
    if (!p.has_bias) loom_tensor_destroy(x[2]);
  }
}

/* ---- Pooling ------------------------------------------------------------------ */

static loom_status_t build_max_pool(loom_graph_t *g, const loom_value_t *x,
                                    const nn_case_t *p, loom_value_t *y) {
  return loom_max_pool2d(g, x[0], &p->pool, y);
}

static loom_status_t build_avg_pool(loom_graph_t *g, const loom_value_t *x,
                                    const nn_case_t *p, loom_value_t *y) {
  return loom_avg_pool2d(g, x[0], &p->pool, y);
}

static loom_status_t build_global_pool(loom_graph_t *g, const loom_value_t *x,
                                       const nn_case_t *p, loom_value_t *y) {
  (void)p;
  return loom_global_avg_pool(g, x[0], y);
}

static const loom_pool_params_t POOLS[] = {
    {{2, 2}, {0, 0}, {0, 0, 0, 0}, {0, 0}, 0},
    {{3, 3}, {2, 1}, {1, 1, 1, 0}, {1, 1}, 0},
    {{3, 2}, {1, 2}, {1, 0, 0, 1}, {2, 1}, 1},
    {{2, 3}, {2, 2}, {0, 1, 1, 1}, {1, 2}, 1},
};

/* Random values have no ties, where max pooling has no derivative. */
static void test_pool_grads(void) {
  int64_t xs[4] = {2, 2, 6, 5};
  for (size_t i = 0; i < sizeof POOLS / sizeof POOLS[0]; i++) {
    nn_case_t p = {.pool = POOLS[i]};
    char what[64];
    snprintf(what, sizeof what, "max_pool2d case %zu", i);
    loom_tensor_t *x[1] = {rand_f64(4, xs, -1, 1)};
    fd_check(what, 1, x, build_max_pool, &p, i == 1);
    p.pool.dilation[0] = p.pool.dilation[1] = 0;
    snprintf(what, sizeof what, "avg_pool2d case %zu", i);
    x[0] = rand_f64(4, xs, -1, 1);
    fd_check(what, 1, x, build_avg_pool, &p, i == 2);
  }
  nn_case_t none = {0};
  int64_t s3[3] = {2, 3, 4}, s5[5] = {1, 2, 2, 3, 2};
  loom_tensor_t *x[1] = {rand_f64(4, xs, -1, 1)};
  fd_check("global_avg_pool 4-D", 1, x, build_global_pool, &none, 1);
  x[0] = rand_f64(3, s3, -1, 1);
  fd_check("global_avg_pool 3-D", 1, x, build_global_pool, &none, 0);
  x[0] = rand_f64(5, s5, -1, 1);
  fd_check("global_avg_pool 5-D", 1, x, build_global_pool, &none, 0);
}

/* ---- Normalization -------------------------------------------------------------- */

static loom_status_t build_layer_norm(loom_graph_t *g, const loom_value_t *x,
                                      const nn_case_t *p, loom_value_t *y) {
  return loom_layer_norm(g, x[0], p->has_scale, x[1], p->has_bias,
                         x[p->has_scale ? 2 : 1], p->axis, p->eps, y);
}

static loom_status_t build_rms_norm(loom_graph_t *g, const loom_value_t *x,
                                    const nn_case_t *p, loom_value_t *y) {
  return loom_rms_norm(g, x[0], p->has_scale, x[1], p->axis, p->eps, y);
}

static loom_status_t build_batch_norm(loom_graph_t *g, const loom_value_t *x,
                                      const nn_case_t *p, loom_value_t *y) {
  loom_value_t mean, var;
  return loom_batch_norm(g, x[0], x[1], x[2], x[3], x[4], p->eps, 0.1, p->training,
                         y, &mean, &var);
}

/* x (2, 3, 4), normalized over the last dim or the last two, with and
 * without scale and bias. */
static void test_layer_norm_grads(void) {
  int64_t xs[3] = {2, 3, 4};
  for (int i = 0; i < 6; i++) {
    nn_case_t p = {.axis = i % 2 ? -2 : -1, .eps = 1e-5, .has_scale = i / 2 >= 1,
                   .has_bias = i / 2 == 2};
    int lead = p.axis == -1 ? 2 : 1;
    loom_tensor_t *x[3] = {rand_f64(3, xs, -1, 1), NULL, NULL};
    int n = 1;
    if (p.has_scale) x[n++] = rand_f64(3 - lead, xs + lead, 0.5, 1.5);
    if (p.has_bias) x[n++] = rand_f64(3 - lead, xs + lead, -1, 1);
    char what[64];
    snprintf(what, sizeof what, "layer_norm axis %lld scale %d bias %d",
             (long long)p.axis, p.has_scale, p.has_bias);
    fd_check(what, n, x, build_layer_norm, &p, i == 5);
    x[0] = rand_f64(3, xs, -1, 1);
    if (p.has_scale) x[1] = rand_f64(3 - lead, xs + lead, 0.5, 1.5);
    p.eps = 1e-6;
    snprintf(what, sizeof what, "rms_norm axis %lld scale %d", (long long)p.axis,
             p.has_scale);
    fd_check(what, 1 + p.has_scale, x, build_rms_norm, &p, i == 4);
  }
}

/* Training (batch statistics) and inference (running statistics, whose
 * gradients are checked too), on 4-D and 2-D x. */
static void test_batch_norm_grads(void) {
  static const struct {
    int rank;
    int64_t shape[4];
  } xs[2] = {{4, {2, 3, 2, 3}}, {2, {5, 3}}};
  for (int i = 0; i < 4; i++) {
    nn_case_t p = {.eps = 1e-3, .training = i % 2};
    int64_t c[1] = {3};
    loom_tensor_t *x[5] = {rand_f64(xs[i / 2].rank, xs[i / 2].shape, -1, 1),
                           rand_f64(1, c, 0.5, 1.5), rand_f64(1, c, -1, 1),
                           rand_f64(1, c, -0.5, 0.5), rand_f64(1, c, 0.5, 1.5)};
    char what[64];
    snprintf(what, sizeof what, "batch_norm rank %d training %d", xs[i / 2].rank,
             p.training);
    fd_check(what, 5, x, build_batch_norm, &p, i == 1);
  }
}

/* ---- The new ops --------------------------------------------------------------- */

/* Runs y = build(inputs) through the interpreter (and the compiler). */
static loom_tensor_t *run_op(int n, loom_tensor_t *const *in, build_fn build,
                             const nn_case_t *p) {
  loom_graph_t *g = NULL;
  loom_value_t x[5], y;
  CHECK_OK(loom_graph_create(&g));
  for (int i = 0; i < n; i++) {
    int64_t dims[LOOM_MAX_RANK];
    for (int d = 0; d < loom_tensor_rank(in[i]); d++) dims[d] = loom_tensor_dim(in[i], d);
    char name[4] = {'x', (char)('0' + i), 0};
    CHECK_OK(loom_graph_input(g, name, loom_tensor_dtype(in[i]), loom_tensor_rank(in[i]),
                              dims, &x[i]));
  }
  loom_tensor_t *out = NULL;
  loom_status_t s = build(g, x, p, &y);
  CHECK_OK(s);
  if (s == LOOM_OK) {
    CHECK_OK(loom_graph_output(g, y));
    out = test_run1(g, n, in);
  }
  loom_graph_destroy(g);
  return out;
}

static double dot(const loom_tensor_t *a, const loom_tensor_t *b) {
  double s = 0;
  for (int64_t i = 0; i < loom_tensor_numel(a); i++) s += test_get(a, i) * test_get(b, i);
  return s;
}

static loom_status_t build_weight_grad(loom_graph_t *g, const loom_value_t *x,
                                       const nn_case_t *p, loom_value_t *y) {
  return loom_conv2d_weight_grad(g, x[0], x[1], p->kernel, &p->conv, y);
}

/* The weight's gradient is the adjoint of w -> conv2d(x, w):
 * <conv2d(x, w), dy> = <w, conv2d_weight_grad(x, dy)>, in every float
 * dtype. */
static void test_weight_grad_adjoint(void) {
  for (size_t i = 0; i < sizeof CONVS / sizeof CONVS[0]; i++)
    for (int t = 0; t < 4; t++) {
      const conv_geom_t *c = &CONVS[i];
      nn_case_t p = conv_case(c, 0);
      loom_dtype_t dt = FLOATS[t];
      int64_t xs[4] = {c->n, c->cg * c->groups, c->h, c->w};
      int64_t ws[4] = {c->og * c->groups, c->cg, c->kh, c->kw};
      loom_tensor_t *x = test_rand_tensor(dt, 4, xs, -1, 1);
      loom_tensor_t *w = test_rand_tensor(dt, 4, ws, -1, 1);
      loom_tensor_t *xw[2] = {x, w};
      loom_tensor_t *y = run_op(2, xw, build_conv2d, &p);
      if (!y) break;
      int64_t ys[4];
      for (int d = 0; d < 4; d++) ys[d] = loom_tensor_dim(y, d);
      loom_tensor_t *dy = test_rand_tensor(dt, 4, ys, -1, 1);
      loom_tensor_t *xdy[2] = {x, dy};
      loom_tensor_t *dw = run_op(2, xdy, build_weight_grad, &p);
      if (dw) {
        CHECK(loom_tensor_dtype(dw) == dt && loom_tensor_rank(dw) == 4);
        for (int d = 0; d < 4; d++) CHECK(loom_tensor_dim(dw, d) == ws[d]);
        /* Both sides sum the same products; f16 rounds each output. */
        double want = dot(y, dy), scale = sqrt((double)loom_tensor_numel(y));
        CHECK_NEAR(dot(w, dw), want, 20 * test_rtol(dt, 1) * scale, 0);
      }
      loom_tensor_t *all[5] = {x, w, y, dy, dw};
      destroy_all(5, all);
    }
}

/* Hand-computed: a 2x2 kernel over a 2x2 input with one output position
 * gets the input itself; a 1x1 kernel with stride 2 sums the corners. */
static void test_weight_grad_hand(void) {
  for (int t = 0; t < 4; t++) {
    int64_t s1[4] = {1, 1, 2, 2}, d1[4] = {1, 1, 1, 1};
    double xv[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, ones[4] = {1, 1, 1, 1};
    loom_tensor_t *in[2] = {test_tensor(FLOATS[t], 4, s1, xv),
                            test_tensor(FLOATS[t], 4, d1, ones)};
    nn_case_t p = {.kernel = {2, 2}};
    loom_tensor_t *dw = run_op(2, in, build_weight_grad, &p);
    if (dw) CHECK_TENSOR(dw, xv, 4, 0, 0);
    loom_tensor_destroy(dw);
    destroy_all(2, in);
    int64_t s2[4] = {1, 1, 3, 3}, d2[4] = {1, 1, 2, 2};
    in[0] = test_tensor(FLOATS[t], 4, s2, xv);
    in[1] = test_tensor(FLOATS[t], 4, d2, ones);
    p = (nn_case_t){.kernel = {1, 1}, .conv = {.stride = {2, 2}}};
    dw = run_op(2, in, build_weight_grad, &p);
    double want[1] = {1 + 3 + 7 + 9};
    if (dw) CHECK_TENSOR(dw, want, 1, 0, 0);
    loom_tensor_destroy(dw);
    destroy_all(2, in);
  }
}

/* A transposed view of x (wrapped user memory with swapped strides) gives
 * the same weight gradient as the contiguous x. */
static void test_weight_grad_noncontiguous(void) {
  int64_t xs[4] = {1, 2, 4, 3}, ds[4] = {1, 2, 3, 2};
  double mem[24], dyv[12];
  for (int i = 0; i < 24; i++) mem[i] = (double)((i * 5) % 7) - 3;
  for (int i = 0; i < 12; i++) dyv[i] = (double)(i % 5) - 2;
  /* mem holds x as (1, 2, W=3, H=4); the view reads it as (1, 2, 4, 3). */
  double contig[24];
  for (int c = 0; c < 2; c++)
    for (int h = 0; h < 4; h++)
      for (int w = 0; w < 3; w++) contig[(c * 4 + h) * 3 + w] = mem[(c * 3 + w) * 4 + h];
  int64_t strides[4] = {24, 12, 1, 4};
  loom_tensor_t *view = NULL;
  CHECK_OK(loom_tensor_wrap(LOOM_F64, 4, xs, strides, mem, &view));
  loom_tensor_t *x = test_tensor(LOOM_F64, 4, xs, contig);
  loom_tensor_t *dy = test_tensor(LOOM_F64, 4, ds, dyv);
  nn_case_t p = {.kernel = {2, 2}};
  loom_tensor_t *a_in[2] = {view, dy}, *b_in[2] = {x, dy};
  loom_tensor_t *a = run_op(2, a_in, build_weight_grad, &p);
  loom_tensor_t *b = run_op(2, b_in, build_weight_grad, &p);
  if (a && b) {
    double want[16];
    for (int i = 0; i < 16; i++) want[i] = test_get(b, i);
    CHECK_TENSOR(a, want, 16, 0, 0);
  }
  loom_tensor_t *all[5] = {view, x, dy, a, b};
  destroy_all(5, all);
}

static loom_status_t build_max_pool_grad(loom_graph_t *g, const loom_value_t *x,
                                         const nn_case_t *p, loom_value_t *y) {
  return loom_max_pool2d_grad(g, x[0], x[1], &p->pool, y);
}

static loom_status_t build_avg_pool_grad(loom_graph_t *g, const loom_value_t *x,
                                         const nn_case_t *p, loom_value_t *y) {
  return loom_avg_pool2d_grad(g, x[0], x[1], &p->pool, y);
}

/* Overlapping windows that share a tied maximum: the first maximum of
 * each window gets its dy, and the two add up. A padded window with
 * stride 2 finds the same centre element from every window. */
static void test_max_pool_grad_hand(void) {
  for (int t = 0; t < 4; t++) {
    int64_t xs[4] = {1, 1, 2, 3}, ds[4] = {1, 1, 1, 2};
    double xv[6] = {1, 5, 5, 2, 0, 3}, dyv[2] = {1, 10};
    double want[6] = {0, 11, 0, 0, 0, 0};
    loom_tensor_t *in[2] = {test_tensor(FLOATS[t], 4, xs, xv),
                            test_tensor(FLOATS[t], 4, ds, dyv)};
    nn_case_t p = {.pool = {.kernel = {2, 2}, .stride = {1, 1}}};
    loom_tensor_t *dx = run_op(2, in, build_max_pool_grad, &p);
    if (dx) CHECK_TENSOR(dx, want, 6, 0, 0);
    loom_tensor_destroy(dx);
    destroy_all(2, in);
    int64_t xs2[4] = {1, 1, 3, 3}, ds2[4] = {1, 1, 2, 2};
    double xv2[9] = {1, 2, 3, 4, 9, 6, 7, 8, 5}, dyv2[4] = {1, 2, 3, 4};
    double want2[9] = {0, 0, 0, 0, 10, 0, 0, 0, 0};
    in[0] = test_tensor(FLOATS[t], 4, xs2, xv2);
    in[1] = test_tensor(FLOATS[t], 4, ds2, dyv2);
    p = (nn_case_t){.pool = {.kernel = {3, 3}, .stride = {2, 2}, .pads = {1, 1, 1, 1}}};
    dx = run_op(2, in, build_max_pool_grad, &p);
    if (dx) CHECK_TENSOR(dx, want2, 9, 0, 0);
    loom_tensor_destroy(dx);
    destroy_all(2, in);
  }
}

/* A 2x2 input padded by 1 under 2x2 windows of stride 1: each element
 * lies in a corner window (1 element), two edge windows (2) and the
 * centre one (4): 1 + 1/2 + 1/2 + 1/4 of a dy of ones, or 4 * 1/4 when
 * the padding counts. */
static void test_avg_pool_grad_hand(void) {
  for (int t = 0; t < 4; t++)
    for (int inc = 0; inc < 2; inc++) {
      int64_t xs[4] = {1, 1, 2, 2}, ds[4] = {1, 1, 3, 3};
      double xv[4] = {1, 2, 3, 4}, ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
      double v = inc ? 1.0 : 2.25, want[4] = {v, v, v, v};
      loom_tensor_t *in[2] = {test_tensor(FLOATS[t], 4, xs, xv),
                              test_tensor(FLOATS[t], 4, ds, ones)};
      nn_case_t p = {.pool = {.kernel = {2, 2}, .stride = {1, 1}, .pads = {1, 1, 1, 1},
                              .count_include_pad = inc}};
      loom_tensor_t *dx = run_op(2, in, build_avg_pool_grad, &p);
      if (dx) CHECK_TENSOR(dx, want, 4, 0, 0);
      loom_tensor_destroy(dx);
      destroy_all(2, in);
    }
}

/* avg_pool2d is linear: <avg_pool2d(x), dy> = <x, avg_pool2d_grad(x, dy)>. */
static void test_avg_pool_grad_adjoint(void) {
  int64_t xs[4] = {2, 2, 6, 5};
  for (size_t i = 0; i < sizeof POOLS / sizeof POOLS[0]; i++) {
    nn_case_t p = {.pool = POOLS[i]};
    p.pool.dilation[0] = p.pool.dilation[1] = 0;
    loom_tensor_t *x = rand_f64(4, xs, -1, 1);
    loom_tensor_t *y = run_op(1, &x, build_avg_pool, &p);
    if (!y) {
      loom_tensor_destroy(x);
      continue;
    }
    int64_t ys[4];
    for (int d = 0; d < 4; d++) ys[d] = loom_tensor_dim(y, d);
    loom_tensor_t *dy = rand_f64(4, ys, -1, 1), *in[2] = {x, dy};
    loom_tensor_t *dx = run_op(2, in, build_avg_pool_grad, &p);
    if (dx) CHECK_NEAR(dot(x, dx), dot(y, dy), 1e-12, 1e-12);
    loom_tensor_t *all[4] = {x, y, dy, dx};
    destroy_all(4, all);
  }
}

/* ---- Errors ----------------------------------------------------------------------- */

static loom_value_t input(loom_graph_t *g, loom_dtype_t dt, int rank,
                          const int64_t *shape) {
  loom_value_t v = {-1};
  CHECK_OK(loom_graph_input(g, NULL, dt, rank, shape, &v));
  return v;
}

static void test_errors(void) {
  loom_graph_t *g = NULL;
  CHECK_OK(loom_graph_create(&g));
  int64_t s4[4] = {1, 4, 5, 5}, d4[4] = {1, 2, 4, 4}, s3[3] = {4, 5, 5};
  loom_value_t x = input(g, LOOM_F32, 4, s4), dy = input(g, LOOM_F32, 4, d4), y;
  loom_value_t x3 = input(g, LOOM_F32, 3, s3), x64 = input(g, LOOM_F64, 4, s4);
  loom_value_t xi = input(g, LOOM_I32, 4, s4);
  int64_t k2[2] = {2, 2}, k0[2] = {0, 2}, k4[2] = {4, 4};
  loom_conv_params_t cp = {0}, g3 = {.groups = 3};
  CHECK_ERR(loom_conv2d_weight_grad(g, x, dy, NULL, &cp, &y), LOOM_ERR_INVALID, "kernel");
  CHECK_ERR(loom_conv2d_weight_grad(g, x3, dy, k2, &cp, &y), LOOM_ERR_SHAPE, "rank 4");
  CHECK_ERR(loom_conv2d_weight_grad(g, x64, dy, k2, &cp, &y), LOOM_ERR_DTYPE, "cast");
  CHECK_ERR(loom_conv2d_weight_grad(g, xi, dy, k2, &cp, &y), LOOM_ERR_DTYPE, "i32");
  CHECK_ERR(loom_conv2d_weight_grad(g, x, dy, k0, &cp, &y), LOOM_ERR_INVALID, "kernel");
  CHECK_ERR(loom_conv2d_weight_grad(g, x, dy, k4, &cp, &y), LOOM_ERR_SHAPE, "gives 2 positions");
  /* Fewer positions than the convolution gives: only as many as an
   * output_padding below the stride or the dilation removes. x (5) at
   * kernel 2, stride 2: 2 positions, none fewer; at dilation 3 (span 4)
   * with 2 rows of padding below (output_padding up to 2): 2, or 1
   * (floor(2 / 2) fewer). */
  int64_t d1[4] = {1, 2, 1, 2}, d0[4] = {1, 2, 0, 2};
  loom_value_t dy1 = input(g, LOOM_F32, 4, d1), dy0 = input(g, LOOM_F32, 4, d0);
  loom_conv_params_t s2 = {.stride = {2, 2}},
                     s2d3 = {.stride = {2, 2}, .pads = {0, 0, 2, 0}, .dilation = {3, 1}};
  CHECK_ERR(loom_conv2d_weight_grad(g, x, dy1, k2, &s2, &y), LOOM_ERR_SHAPE, "dy dim 2 is 1");
  CHECK_OK(loom_conv2d_weight_grad(g, x, dy1, k2, &s2d3, &y));
  CHECK_ERR(loom_conv2d_weight_grad(g, x, dy0, k2, &s2d3, &y), LOOM_ERR_SHAPE, "dy dim 2 is 0");
  CHECK_ERR(loom_conv2d_weight_grad(g, x, dy, k2, &g3, &y), LOOM_ERR_SHAPE, "groups");
  CHECK_ERR(loom_conv2d_weight_grad(g, x, x3, k2, &cp, &y), LOOM_ERR_SHAPE, "rank 4");
  CHECK_OK(loom_conv2d_weight_grad(g, x, dy, k2, &cp, &y));
  loom_pool_params_t pp = {.kernel = {2, 2}}, dil = {.kernel = {2, 2}, .dilation = {2, 2}};
  int64_t p2[4] = {1, 4, 2, 2}, p3[4] = {1, 4, 3, 2};
  loom_value_t dp = input(g, LOOM_F32, 4, p2), bad = input(g, LOOM_F32, 4, p3);
  CHECK_ERR(loom_max_pool2d_grad(g, x, bad, &pp, &y), LOOM_ERR_SHAPE, "pooled shape");
  CHECK_ERR(loom_avg_pool2d_grad(g, x, bad, &pp, &y), LOOM_ERR_SHAPE, "pooled shape");
  CHECK_ERR(loom_max_pool2d_grad(g, x3, dp, &pp, &y), LOOM_ERR_SHAPE, "rank 4");
  CHECK_ERR(loom_max_pool2d_grad(g, x64, dp, &pp, &y), LOOM_ERR_DTYPE, "cast");
  CHECK_ERR(loom_max_pool2d_grad(g, x, dp, NULL, &y), LOOM_ERR_INVALID, "p");
  CHECK_ERR(loom_avg_pool2d_grad(g, x, dp, &dil, &y), LOOM_ERR_INVALID, "dilation");
  CHECK_ERR(loom_max_pool2d_grad(NULL, x, dp, &pp, &y), LOOM_ERR_INVALID, "");
  CHECK_OK(loom_max_pool2d_grad(g, x, dp, &pp, &y));
  CHECK_OK(loom_avg_pool2d_grad(g, x, dp, &pp, &y));
  loom_graph_destroy(g);
}

/* With symbolic dims, each rule gives every input a gradient of exactly
 * the input's type (a symbolic batch everywhere; a symbolic height for a
 * stride-1 convolution and the normalizations). */
static loom_status_t build_sym(loom_graph_t *g, const loom_value_t *x, int which,
                               loom_value_t *y) {
  loom_conv_params_t cp = {.pads = {1, 0, 0, 1}};
  loom_pool_params_t pp = {.kernel = {2, 2}, .stride = {1, 1}};
  switch (which) {
    case 0: return loom_matmul(g, x[0], x[1], 0, 1, y);
    case 1: return loom_conv2d(g, x[0], x[2], 0, x[0], &cp, y);
    case 2: return loom_layer_norm(g, x[0], 0, x[0], 0, x[0], -2, 1e-5, y);
    case 3: return loom_max_pool2d(g, x[0], &pp, y);
    default: return loom_global_avg_pool(g, x[0], y);
  }
}

static void check_same_type(loom_graph_t *g, loom_value_t a, loom_value_t b) {
  loom_dtype_t da, db;
  int ra, rb;
  loom_dim_t sa[LOOM_MAX_RANK], sb[LOOM_MAX_RANK];
  CHECK_OK(loom_value_type(g, a, &da, &ra, sa));
  CHECK_OK(loom_value_type(g, b, &db, &rb, sb));
  CHECK(da == db && ra == rb);
  for (int d = 0; d < ra && ra == rb; d++) CHECK(sa[d] == sb[d]);
}

static void test_symbolic_shapes(void) {
  for (int which = 0; which < 5; which++) {
    loom_graph_t *g = NULL;
    CHECK_OK(loom_graph_create(&g));
    loom_dim_t n, h;
    CHECK_OK(loom_dim_symbol(g, "n", &n));
    CHECK_OK(loom_dim_symbol(g, "h", &h));
    int64_t xs[4] = {n, 2, h, 5}, ws[4] = {3, 5}, ks[4] = {3, 2, 2, 3};
    loom_value_t x[3] = {input(g, LOOM_F64, 4, xs), input(g, LOOM_F64, 2, ws),
                         input(g, LOOM_F64, 4, ks)};
    loom_value_t y, loss, gx[3];
    CHECK_OK(build_sym(g, x, which, &y));
    CHECK_OK(loom_sum(g, y, 0, NULL, 0, &loss));
    int n_wrt = which == 0 ? 2 : 1;
    loom_value_t wrt[2] = {x[0], which == 0 ? x[1] : x[2]};
    if (which == 1) n_wrt = 2;
    CHECK_OK(loom_grad(g, loss, n_wrt, wrt, gx));
    for (int i = 0; i < n_wrt; i++) check_same_type(g, gx[i], wrt[i]);
    loom_graph_destroy(g);
  }
}

/* No gradient flows from batch_norm's updated running statistics (state,
 * as PyTorch's buffers): a loss of the running mean alone has a zero
 * gradient with respect to x, and adding it to a loss of y changes
 * nothing. */
static void test_batch_norm_running_stats_no_gradient(void) {
  loom_graph_t *g = NULL;
  CHECK_OK(loom_graph_create(&g));
  int64_t s[2] = {4, 3}, c[1] = {3};
  loom_value_t v[5] = {input(g, LOOM_F64, 2, s), input(g, LOOM_F64, 1, c),
                       input(g, LOOM_F64, 1, c), input(g, LOOM_F64, 1, c),
                       input(g, LOOM_F64, 1, c)};
  loom_value_t y, mean, var, ly, lm, both, g_y, g_both;
  CHECK_OK(loom_batch_norm(g, v[0], v[1], v[2], v[3], v[4], 1e-5, 0.1, 1, &y, &mean, &var));
  CHECK_OK(loom_sum(g, y, 0, NULL, 0, &ly));
  CHECK_OK(loom_sum(g, mean, 0, NULL, 0, &lm));
  CHECK_OK(loom_add(g, ly, lm, &both));
  CHECK_OK(loom_grad(g, ly, 1, v, &g_y));
  CHECK_OK(loom_grad(g, both, 1, v, &g_both));
  CHECK_OK(loom_graph_output(g, g_y));
  CHECK_OK(loom_graph_output(g, g_both));
  loom_tensor_t *in[5], *out[2];
  for (int i = 0; i < 5; i++) {
    loom_dtype_t dt;
    int rank;
    int64_t dims[2];
    CHECK_OK(loom_value_type(g, v[i], &dt, &rank, dims));
    CHECK_OK(loom_tensor_create(LOOM_F64, rank, dims, &in[i]));
    double *d = loom_tensor_data(in[i]);
    for (int64_t k = 0; k < loom_tensor_numel(in[i]); k++) d[k] = 0.5 + 0.25 * (double)((k * 7 + i) % 5);
  }
  CHECK_OK(loom_interpret(g, 5, in, 2, out));
  const double *a = loom_tensor_data(out[0]), *b = loom_tensor_data(out[1]);
  for (int k = 0; k < 12; k++) CHECK(a[k] == b[k]);
  for (int i = 0; i < 5; i++) loom_tensor_destroy(in[i]);
  for (int i = 0; i < 2; i++) loom_tensor_destroy(out[i]);
  loom_graph_destroy(g);
}

int main(void) {
  test_seed(44);
  TEST_RUN(test_weight_grad_hand);
  TEST_RUN(test_weight_grad_adjoint);
  TEST_RUN(test_weight_grad_noncontiguous);
  TEST_RUN(test_max_pool_grad_hand);
  TEST_RUN(test_avg_pool_grad_hand);
  TEST_RUN(test_avg_pool_grad_adjoint);
  TEST_RUN(test_errors);
  TEST_RUN(test_matmul_grad);
  TEST_RUN(test_conv2d_grad);
  TEST_RUN(test_conv_transpose2d_grad);
  TEST_RUN(test_pool_grads);
  TEST_RUN(test_layer_norm_grads);
  TEST_RUN(test_batch_norm_grads);
  TEST_RUN(test_batch_norm_running_stats_no_gradient);
  TEST_RUN(test_symbolic_shapes);
  return test_summary();
}
