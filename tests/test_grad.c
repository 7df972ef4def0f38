/* Autodiff: loom_grad and the elementwise gradient rules, checked against
 * central differences in f64 over random shapes with broadcasting (and
 * compiled); fan-out, unreachable values, stop_gradient, integer values,
 * symbolic shapes, second derivatives, and the error paths. */
#include <string.h>

#include "grad_check.h"
#include "grad_check.c"
#include "harness.h"
#include "ir/ir.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef loom_status_t (*unary_fn)(loom_graph_t *, loom_value_t, loom_value_t *);
typedef loom_status_t (*binary_fn)(loom_graph_t *, loom_value_t, loom_value_t,
                                   loom_value_t *);

/* A random shape of rank 0..max_rank with dims 1..3. */
static int rand_shape(int max_rank, int64_t *dims) {
  int rank = (int)test_rand_int(0, max_rank);
  for (int i = 0; i < rank; i++) dims[i] = test_rand_int(1, 3);
  return rank;
}

/* ---- Unary rules -------------------------------------------------------- */

static loom_status_t leaky_relu_(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_leaky_relu(g, x, 0.2, y);
}
static loom_status_t elu_(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_elu(g, x, 0.7, y);
}
static loom_status_t clamp_(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_clamp(g, x, -0.5, 0.7, y);
}
static loom_status_t clamp_low_(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_clamp(g, x, -0.5, INFINITY, y);
}
/* f64 -> f32 -> f64: the gradient casts back (checked with a coarse h). */
static loom_status_t cast_(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  loom_status_t s = loom_cast(g, x, LOOM_F32, y);
  return s == LOOM_OK ? loom_cast(g, *y, LOOM_F64, y) : s;
}

typedef struct unary_case {
  const char *name;
  unary_fn f;
  double lo, hi; /* where the inputs are drawn */
  double h;      /* 0: the checker's default step */
} unary_case_t;

static const unary_case_t unary_cases[] = {
    {"neg", loom_neg, -2, 2, 0},           {"abs", loom_abs, -2, 2, 0},
    {"exp", loom_exp, -2, 2, 0},           {"log", loom_log, 0.3, 3, 0},
    {"log1p", loom_log1p, -0.7, 3, 0},      {"expm1", loom_expm1, -2, 2, 0},
    {"sqrt", loom_sqrt, 0.3, 3, 0},        {"rsqrt", loom_rsqrt, 0.3, 3, 0},
    {"reciprocal", loom_reciprocal, 0.4, 3, 0},
    {"tanh", loom_tanh, -2, 2, 0},         {"sigmoid", loom_sigmoid, -3, 3, 0},
    {"relu", loom_relu, -2, 2, 0},         {"leaky_relu", leaky_relu_, -2, 2, 0},
    {"elu", elu_, -2, 2, 0},               {"gelu", loom_gelu, -3, 3, 0},
    {"gelu_tanh", loom_gelu_tanh, -3, 3, 0}, {"silu", loom_silu, -3, 3, 0},
    {"softplus", loom_softplus, -3, 3, 0}, {"sin", loom_sin, -3, 3, 0},
    {"tan", loom_tan, -1.2, 1.2, 0},       {"asin", loom_asin, -0.8, 0.8, 0},
    {"acos", loom_acos, -0.8, 0.8, 0},     {"atan", loom_atan, -3, 3, 0},
    {"sinh", loom_sinh, -2, 2, 0},         {"cosh", loom_cosh, -2, 2, 0},
    {"asinh", loom_asinh, -3, 3, 0},       {"acosh", loom_acosh, 1.2, 3, 0},
    {"atanh", loom_atanh, -0.8, 0.8, 0},
    {"cos", loom_cos, -3, 3, 0},           {"erf", loom_erf, -2, 2, 0},
    {"identity", loom_identity, -2, 2, 0}, {"clamp", clamp_, -1, 1, 0},
    {"clamp_low", clamp_low_, -1, 1, 0},   {"cast", cast_, -2, 2, 1e-2},
};

static loom_status_t build_unary(loom_graph_t *g, const loom_value_t *x,
                                 void *ctx, loom_value_t *loss) {
  const unary_case_t *u = ctx;
  loom_value_t y;
  loom_status_t s = u->f(g, x[0], &y);
  return s == LOOM_OK ? grad_check_weighted_sum(g, y, loss) : s;
}

/* Every unary case (but the coarse ones) in one graph, x[k] into case k:
 * one compilation checks the compiled form of every rule. */
static loom_status_t build_all_unary(loom_graph_t *g, const loom_value_t *x,
                                     void *ctx, loom_value_t *loss) {
  (void)ctx;
  loom_status_t s = LOOM_OK;
  int k = 0;
  for (int c = 0; s == LOOM_OK && c < COUNT(unary_cases); c++) {
    if (unary_cases[c].h > 0) continue;
    loom_value_t l;
    s = build_unary(g, &x[k], (void *)&unary_cases[c], &l);
    if (s == LOOM_OK) s = k == 0 ? (*loss = l, LOOM_OK) : loom_add(g, *loss, l, loss);
    k++;
  }
  return s;
}

static void test_all_unary_compiled(void) {
  test_seed(11);
  loom_tensor_t *x[COUNT(unary_cases)];
  int64_t dims[2] = {2, 3};
  int n = 0;
  for (int c = 0; c < COUNT(unary_cases); c++)
    if (unary_cases[c].h == 0)
      x[n++] = test_rand_tensor(LOOM_F64, 2, dims, unary_cases[c].lo,
                                unary_cases[c].hi);
  grad_check("every unary op", n, x, build_all_unary, NULL, NULL);
  for (int i = 0; i < n; i++) loom_tensor_destroy(x[i]);
}

static void test_unary_rules(void) {
  test_seed(1);
  for (int c = 0; c < COUNT(unary_cases); c++) {
    const unary_case_t *u = &unary_cases[c];
    grad_check_opts_t o;
    grad_check_opts_init(&o);
    if (u->h > 0) {
      o.h = u->h;
      o.atol = 1e-4;
    }
    for (int rep = 0; rep < 2; rep++) {
      int64_t dims[LOOM_MAX_RANK];
      int rank = rep == 0 ? 2 : rand_shape(3, dims);
      if (rep == 0) dims[0] = 2, dims[1] = 3;
      loom_tensor_t *x = test_rand_tensor(LOOM_F64, rank, dims, u->lo, u->hi);
      o.compile = u->h > 0 && rep == 0;
      grad_check(u->name, 1, &x, build_unary, (void *)u, &o);
      loom_tensor_destroy(x);
    }
  }
}

/* ---- Binary rules, with broadcasting ------------------------------------- */

typedef struct binary_case {
  const char *name;
  binary_fn f;
  double a_lo, a_hi, b_lo, b_hi;
} binary_case_t;

static const binary_case_t binary_cases[] = {
    {"add", loom_add, -2, 2, -2, 2},        {"sub", loom_sub, -2, 2, -2, 2},
    {"mul", loom_mul, -2, 2, -2, 2},        {"div", loom_div, -2, 2, 0.5, 2},
    {"pow", loom_pow, 0.5, 2, -1.5, 1.5},   {"maximum", loom_maximum, -2, 2, -2, 2},
    {"minimum", loom_minimum, -2, 2, -2, 2}, {"mod", loom_mod, -3, 3, 0.7, 2},
};

/* Shape pairs: a column and a row, rank differences, scalars. */
typedef struct shape_pair {
  int ra, rb;
  int64_t a[3], b[3];
} shape_pair_t;

static const shape_pair_t shape_pairs[] = {
    {2, 2, {3, 1}, {1, 4}}, {2, 1, {2, 3}, {3}}, {0, 2, {0}, {2, 3}},
    {3, 2, {2, 1, 3}, {4, 1}}, {2, 2, {2, 3}, {2, 3}},
};

static loom_status_t build_binary(loom_graph_t *g, const loom_value_t *x,
                                  void *ctx, loom_value_t *loss) {
  const binary_case_t *b = ctx;
  loom_value_t y;
  loom_status_t s = b->f(g, x[0], x[1], &y);
  return s == LOOM_OK ? grad_check_weighted_sum(g, y, loss) : s;
}

/* Every binary case on a column and a row, in one graph: one
 * compilation checks the compiled form of every rule. */
static loom_status_t build_all_binary(loom_graph_t *g, const loom_value_t *x,
                                      void *ctx, loom_value_t *loss) {
  (void)ctx;
  loom_status_t s = LOOM_OK;
  for (int c = 0; s == LOOM_OK && c < COUNT(binary_cases); c++) {
    loom_value_t l;
    s = build_binary(g, &x[2 * c], (void *)&binary_cases[c], &l);
    if (s == LOOM_OK) s = c == 0 ? (*loss = l, LOOM_OK) : loom_add(g, *loss, l, loss);
  }
  return s;
}

static void test_all_binary_compiled(void) {
  test_seed(12);
  loom_tensor_t *x[2 * COUNT(binary_cases)];
  int64_t sa[2] = {3, 1}, sb[2] = {1, 4};
  for (int c = 0; c < COUNT(binary_cases); c++) {
    const binary_case_t *b = &binary_cases[c];
    x[2 * c] = test_rand_tensor(LOOM_F64, 2, sa, b->a_lo, b->a_hi);
    x[2 * c + 1] = test_rand_tensor(LOOM_F64, 2, sb, b->b_lo, b->b_hi);
  }
  grad_check("every binary op", 2 * COUNT(binary_cases), x, build_all_binary,
             NULL, NULL);
  for (int i = 0; i < 2 * COUNT(binary_cases); i++) loom_tensor_destroy(x[i]);
}

static void test_binary_rules(void) {
  test_seed(2);
  grad_check_opts_t o;
  grad_check_opts_init(&o);
  for (int c = 0; c < COUNT(binary_cases); c++) {
    const binary_case_t *b = &binary_cases[c];
    for (int p = 0; p < COUNT(shape_pairs); p++) {
      const shape_pair_t *sp = &shape_pairs[p];
      loom_tensor_t *x[2] = {
          test_rand_tensor(LOOM_F64, sp->ra, sp->a, b->a_lo, b->a_hi),
          test_rand_tensor(LOOM_F64, sp->rb, sp->b, b->b_lo, b->b_hi)};
      o.compile = 0;
      grad_check(b->name, 2, x, build_binary, (void *)b, &o);
      /* Swapped operands: the broadcast one first. */
      loom_tensor_t *y[2] = {x[1], x[0]};
      if (b->a_lo == b->b_lo && b->a_hi == b->b_hi)
        grad_check(b->name, 2, y, build_binary, (void *)b, &o);
      loom_tensor_destroy(x[0]);
      loom_tensor_destroy(x[1]);
    }
  }
}

/* maximum/minimum at a tie give g/2 to each operand, so max(x, x) has
 * gradient 1 like x itself. */
static loom_status_t build_max_self(loom_graph_t *g, const loom_value_t *x,
                                    void *ctx, loom_value_t *loss) {
  (void)ctx;
  loom_value_t y;
  loom_status_t s = loom_maximum(g, x[0], x[0], &y);
  return s == LOOM_OK ? loom_sum(g, y, 0, NULL, 0, loss) : s;
}

static void test_extreme_ties(void) {
  double v[4] = {1, -2, 0.5, 3};
  int64_t shape[1] = {4};
  loom_tensor_t *x = test_tensor(LOOM_F64, 1, shape, v);
  grad_check_opts_t o;
  grad_check_opts_init(&o);
  o.compile = 0;
  grad_check("maximum(x, x)", 1, &x, build_max_self, NULL, &o);
  loom_tensor_destroy(x);
  /* By hand: maximum(a, b) with a = b = 1 sends 1/2 to each. */
  loom_graph_t *g;
  loom_value_t a, b, y, loss, grads[2];
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "a", LOOM_F64, 0, NULL, &a));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F64, 0, NULL, &b));
  CHECK_OK(loom_minimum(g, a, b, &y));
  CHECK_OK(loom_sum(g, y, 0, NULL, 0, &loss));
  loom_value_t wrt[2] = {a, b};
  CHECK_OK(loom_grad(g, loss, 2, wrt, grads));
  CHECK_OK(loom_graph_output(g, grads[0]));
  CHECK_OK(loom_graph_output(g, grads[1]));
  double one = 1;
  loom_tensor_t *in[2] = {test_tensor(LOOM_F64, 0, NULL, &one),
                          test_tensor(LOOM_F64, 0, NULL, &one)};
  loom_tensor_t *out[2] = {0};
  CHECK_OK(loom_interpret(g, 2, in, 2, out));
  CHECK_NEAR(test_get(out[0], 0), 0.5, 0, 0);
  CHECK_NEAR(test_get(out[1], 0), 0.5, 0, 0);
  for (int i = 0; i < 2; i++) {
    loom_tensor_destroy(in[i]);
    loom_tensor_destroy(out[i]);
  }
  loom_graph_destroy(g);
}

/* ---- where and dropout ---------------------------------------------------- */

static loom_status_t build_where(loom_graph_t *g, const loom_value_t *x,
                                 void *ctx, loom_value_t *loss) {
  (void)ctx;
  loom_value_t y;
  loom_status_t s = loom_where(g, x[0], x[1], x[2], &y);
  return s == LOOM_OK ? grad_check_weighted_sum(g, y, loss) : s;
}

static void test_where(void) {
  test_seed(3);
  int64_t sc[2] = {3, 4}, sa[2] = {3, 1}, sb[2] = {1, 4};
  loom_tensor_t *x[3] = {test_rand_tensor(LOOM_BOOL, 2, sc, 0, 1),
                         test_rand_tensor(LOOM_F64, 2, sa, -2, 2),
                         test_rand_tensor(LOOM_F64, 2, sb, -2, 2)};
  grad_check("where", 3, x, build_where, NULL, NULL);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(x[i]);
}

static loom_status_t build_dropout(loom_graph_t *g, const loom_value_t *x,
                                   void *ctx, loom_value_t *loss) {
  (void)ctx;
  loom_value_t y, mask;
  loom_status_t s = loom_dropout(g, x[0], x[1], x[2], 0.3, &y, &mask);
  return s == LOOM_OK ? grad_check_weighted_sum(g, y, loss) : s;
}

/* The gradient uses the forward pass's mask: the seed and offset are
 * fixed inputs, so finite differences see the same mask. */
static void test_dropout(void) {
  test_seed(4);
  int64_t shape[2] = {4, 5};
  double seed = 7, offset = 3;
  loom_tensor_t *x[3] = {test_rand_tensor(LOOM_F64, 2, shape, -2, 2),
                         test_tensor(LOOM_I64, 0, NULL, &seed),
                         test_tensor(LOOM_I64, 0, NULL, &offset)};
  grad_check("dropout", 3, x, build_dropout, NULL, NULL);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(x[i]);
}

/* ---- Graph structure ------------------------------------------------------- */

/* x used three times: sum(x * sin(x) + x). */
static loom_status_t build_fan_out(loom_graph_t *g, const loom_value_t *x,
                                   void *ctx, loom_value_t *loss) {
  (void)ctx;
  loom_value_t s, y;
  CHECK_OK(loom_sin(g, x[0], &s));
  CHECK_OK(loom_mul(g, x[0], s, &y));
  CHECK_OK(loom_add(g, y, x[0], &y));
  return grad_check_weighted_sum(g, y, loss);
}

static void test_fan_out(void) {
  test_seed(5);
  int64_t shape[2] = {2, 3};
  loom_tensor_t *x = test_rand_tensor(LOOM_F64, 2, shape, -2, 2);
  grad_check("fan-out", 1, &x, build_fan_out, NULL, NULL);
  loom_tensor_destroy(x);
}

/* Runs g (inputs in) and returns output k's elements via out tensors. */
static void run_all(loom_graph_t *g, int n_in, loom_tensor_t *const *in,
                    int n_out, loom_tensor_t **out) {
  CHECK_OK(loom_interpret(g, n_in, in, n_out, out));
}

/* loss = sum(x * stop_gradient(x)): d/dx = x, not 2x. A value the loss
 * does not use (z, a parameter) and an integer value get zeros of their
 * types; the loss itself gets 1. */
static void test_zeros_and_stop_gradient(void) {
  loom_graph_t *g;
  loom_value_t x, z, k, p, sx, y, loss, grads[5];
  int64_t shape[2] = {2, 2};
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 2, shape, &x));
  CHECK_OK(loom_graph_input(g, "z", LOOM_F32, 1, shape, &z));
  CHECK_OK(loom_graph_input(g, "k", LOOM_I32, 1, shape, &k));
  CHECK_OK(loom_graph_param(g, "p", LOOM_F64, 2, shape, NULL, &p));
  CHECK_OK(loom_stop_gradient(g, x, &sx));
  CHECK_OK(loom_mul(g, x, sx, &y));
  CHECK_OK(loom_sum(g, y, 0, NULL, 0, &loss));
  loom_value_t wrt[5] = {x, z, k, p, loss};
  /* x reaches the loss through the product, not through stop_gradient; z,
   * k (an integer) and p do not reach it; the loss reaches itself */
  int reached[5];
  CHECK_OK(loom_grad_reaches(g, loss, 5, wrt, reached));
  CHECK(reached[0] && !reached[1] && !reached[2] && !reached[3] && reached[4]);
  CHECK(loom_grad_reaches(g, x, 1, wrt, reached) == LOOM_ERR_SHAPE); /* not a scalar */
  CHECK_OK(loom_grad(g, loss, 5, wrt, grads));
  for (int i = 0; i < 5; i++) CHECK_OK(loom_graph_output(g, grads[i]));
  for (int i = 0; i < 5; i++) {
    loom_dtype_t dt, want_dt;
    int rank, want_rank;
    loom_dim_t dims[LOOM_MAX_RANK], want_dims[LOOM_MAX_RANK];
    CHECK_OK(loom_value_type(g, grads[i], &dt, &rank, dims));
    CHECK_OK(loom_value_type(g, wrt[i], &want_dt, &want_rank, want_dims));
    CHECK(dt == want_dt && rank == want_rank);
    CHECK(!memcmp(dims, want_dims, sizeof(loom_dim_t) * (size_t)rank));
  }
  double xv[4] = {1, -2, 3, 0.5}, zv[2] = {4, 5}, kv[2] = {1, 2};
  int64_t two[1] = {2};
  loom_tensor_t *in[3] = {test_tensor(LOOM_F64, 2, shape, xv),
                          test_tensor(LOOM_F32, 1, two, zv),
                          test_tensor(LOOM_I32, 1, two, kv)};
  loom_tensor_t *out[5] = {0};
  run_all(g, 3, in, 5, out);
  double zeros[4] = {0}, one = 1;
  CHECK_TENSOR(out[0], xv, 4, 0, 0);
  CHECK_TENSOR(out[1], zeros, 2, 0, 0);
  CHECK_TENSOR(out[2], zeros, 2, 0, 0);
  CHECK_TENSOR(out[3], zeros, 4, 0, 0);
  CHECK_TENSOR(out[4], &one, 1, 0, 0);
  for (int i = 0; i < 5; i++) loom_tensor_destroy(out[i]);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}

/* Reach as PyTorch's graph has it: a rounding passes (its gradient is
 * zeros, not none), an argmax or an integer cast ends the path. */
static void test_reaches_through_roundings_only(void) {
  loom_graph_t *g;
  loom_value_t a, b, c, fa, ib, fb, am, fam, s1, s2, t, s3, loss;
  int64_t shape[1] = {3};
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "a", LOOM_F32, 1, shape, &a));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F32, 1, shape, &b));
  CHECK_OK(loom_graph_input(g, "c", LOOM_F32, 1, shape, &c));
  CHECK_OK(loom_floor(g, a, &fa));
  CHECK_OK(loom_cast(g, b, LOOM_I32, &ib));
  CHECK_OK(loom_cast(g, ib, LOOM_F32, &fb));
  CHECK_OK(loom_argmax(g, c, 0, 0, 0, &am));
  CHECK_OK(loom_cast(g, am, LOOM_F32, &fam));
  CHECK_OK(loom_sum(g, fa, 0, NULL, 0, &s1));
  CHECK_OK(loom_sum(g, fb, 0, NULL, 0, &s2));
  CHECK_OK(loom_add(g, s1, s2, &t));
  CHECK_OK(loom_add(g, t, fam, &s3));
  CHECK_OK(loom_mul(g, s3, s3, &loss));
  loom_value_t wrt[3] = {a, b, c};
  int reached[3];
  CHECK_OK(loom_grad_reaches(g, loss, 3, wrt, reached));
  CHECK(reached[0] && !reached[1] && !reached[2]);
  loom_graph_destroy(g);
}

/* A node's value as wrt: d sum(tanh(h)) / dh with h = 2x is 1 - tanh(h)^2,
 * and the gradient stops there (x is not asked for). */
static void test_wrt_node_value(void) {
  loom_graph_t *g;
  loom_value_t x, two, h, y, loss, dh;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[1] = {3};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 1, shape, &x));
  CHECK_OK(loom_full(g, 0, NULL, 2.0, LOOM_F64, &two));
  CHECK_OK(loom_mul(g, x, two, &h));
  CHECK_OK(loom_tanh(g, h, &y));
  CHECK_OK(loom_sum(g, y, 0, NULL, 0, &loss));
  int before = loom_graph_num_nodes(g);
  CHECK_OK(loom_grad(g, loss, 1, &h, &dh));
  CHECK(loom_graph_num_nodes(g) - before < 10);
  CHECK_OK(loom_graph_output(g, dh));
  double xv[3] = {-0.5, 0.1, 0.7}, want[3];
  for (int i = 0; i < 3; i++) want[i] = 1 - tanh(2 * xv[i]) * tanh(2 * xv[i]);
  loom_tensor_t *in = test_tensor(LOOM_F64, 1, shape, xv);
  loom_tensor_t *out = test_run1(g, 1, &in);
  if (out) CHECK_TENSOR(out, want, 3, 1e-15, 1e-14);
  loom_tensor_destroy(out);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* Symbolic dims: a (n) + b (2, n); d/da sums over the 2 and stays (n). */
static void test_symbolic_unbroadcast(void) {
  loom_graph_t *g;
  loom_value_t a, b, y, loss, grads[2];
  loom_dim_t n;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_dim_t da[1] = {n}, db[2] = {2, n};
  CHECK_OK(loom_graph_input(g, "a", LOOM_F64, 1, da, &a));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F64, 2, db, &b));
  CHECK_OK(loom_mul(g, a, b, &y));
  CHECK_OK(loom_sum(g, y, 0, NULL, 0, &loss));
  loom_value_t wrt[2] = {a, b};
  CHECK_OK(loom_grad(g, loss, 2, wrt, grads));
  int rank;
  loom_dtype_t dt;
  loom_dim_t dims[LOOM_MAX_RANK];
  CHECK_OK(loom_value_type(g, grads[0], &dt, &rank, dims));
  CHECK(rank == 1 && dims[0] == n);
  CHECK_OK(loom_graph_output(g, grads[0]));
  double av[3] = {1, 2, 3}, bv[6] = {1, 2, 3, 4, 5, 6}, want[3] = {5, 7, 9};
  int64_t sa[1] = {3}, sb[2] = {2, 3};
  loom_tensor_t *in[2] = {test_tensor(LOOM_F64, 1, sa, av),
                          test_tensor(LOOM_F64, 2, sb, bv)};
  loom_tensor_t *out = test_run1(g, 2, in);
  if (out) CHECK_TENSOR(out, want, 3, 0, 0);
  loom_tensor_destroy(out);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(g);
}

/* A non-contiguous input (a transposed view) gives the same gradient. */
static void test_strided_input(void) {
  double data[6] = {0.1, -0.4, 0.9, 1.3, -1.1, 0.2};
  int64_t shape[2] = {3, 2}, strides[2] = {1, 3};
  loom_tensor_t *view, *copy;
  CHECK_OK(loom_tensor_wrap(LOOM_F64, 2, shape, strides, data, &view));
  double t[6] = {0.1, 1.3, -0.4, -1.1, 0.9, 0.2};
  copy = test_tensor(LOOM_F64, 2, shape, t);
  const unary_case_t *u = NULL;
  for (int c = 0; c < COUNT(unary_cases) && !u; c++)
    if (!strcmp(unary_cases[c].name, "tanh")) u = &unary_cases[c];
  grad_check_opts_t o;
  grad_check_opts_init(&o);
  o.compile = 0;
  grad_check("tanh (strided)", 1, &view, build_unary, (void *)u, &o);
  grad_check("tanh (contiguous)", 1, &copy, build_unary, (void *)u, &o);
  loom_tensor_destroy(view);
  loom_tensor_destroy(copy);
}

/* ---- Second derivatives ---------------------------------------------------- */

/* The loss is a weighted sum of d sum(f(x)) / dx, so checking its
 * gradient checks f''. */
static loom_status_t build_second(loom_graph_t *g, const loom_value_t *x,
                                  void *ctx, loom_value_t *loss) {
  const unary_case_t *u = ctx;
  loom_value_t y, l1, dx;
  loom_status_t s = u->f(g, x[0], &y);
  if (s == LOOM_OK) s = loom_sum(g, y, 0, NULL, 0, &l1);
  if (s == LOOM_OK) s = loom_grad(g, l1, 1, x, &dx);
  return s == LOOM_OK ? grad_check_weighted_sum(g, dx, loss) : s;
}

static void test_second_derivative(void) {
  test_seed(6);
  static const char *const names[] = {"tanh", "sigmoid", "gelu", "silu",
                                      "rsqrt", "erf", "softplus", "sin"};
  int64_t shape[1] = {5};
  for (int k = 0; k < COUNT(names); k++)
    for (int c = 0; c < COUNT(unary_cases); c++) {
      const unary_case_t *u = &unary_cases[c];
      if (strcmp(u->name, names[k])) continue;
      loom_tensor_t *x = test_rand_tensor(LOOM_F64, 1, shape, u->lo, u->hi);
      grad_check_opts_t o;
      grad_check_opts_init(&o);
      o.compile = k == 0;
      grad_check(u->name, 1, &x, build_second, (void *)u, &o);
      loom_tensor_destroy(x);
    }
  /* By hand: d^2 tanh(x) / dx^2 = -2 tanh(x) (1 - tanh(x)^2). */
  loom_graph_t *g;
  loom_value_t x, y, l1, dx, l2, ddx;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 1, shape, &x));
  CHECK_OK(loom_tanh(g, x, &y));
  CHECK_OK(loom_sum(g, y, 0, NULL, 0, &l1));
  CHECK_OK(loom_grad(g, l1, 1, &x, &dx));
  CHECK_OK(loom_sum(g, dx, 0, NULL, 0, &l2));
  CHECK_OK(loom_grad(g, l2, 1, &x, &ddx));
  CHECK_OK(loom_graph_output(g, ddx));
  double xv[5] = {-1.5, -0.3, 0, 0.4, 2}, want[5];
  for (int i = 0; i < 5; i++) {
    double t = tanh(xv[i]);
    want[i] = -2 * t * (1 - t * t);
  }
  loom_tensor_t *in = test_tensor(LOOM_F64, 1, shape, xv);
  loom_tensor_t *out = test_run1(g, 1, &in);
  if (out) CHECK_TENSOR(out, want, 5, 1e-15, 1e-13);
  loom_tensor_destroy(out);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* ---- Dtypes ------------------------------------------------------------------ */

/* f32, f16 and bf16 gradients of x*x + exp(x) match 2x + e^x. */
static void test_float_dtypes(void) {
  static const loom_dtype_t dts[] = {LOOM_F32, LOOM_F16, LOOM_BF16};
  double xv[4] = {-1, -0.25, 0.5, 1.5}, want[4];
  for (int i = 0; i < 4; i++) want[i] = 2 * xv[i] + exp(xv[i]);
  int64_t shape[1] = {4};
  for (int d = 0; d < COUNT(dts); d++) {
    loom_graph_t *g;
    loom_value_t x, sq, e, y, loss, dx;
    CHECK_OK(loom_graph_create(&g));
    CHECK_OK(loom_graph_input(g, "x", dts[d], 1, shape, &x));
    CHECK_OK(loom_mul(g, x, x, &sq));
    CHECK_OK(loom_exp(g, x, &e));
    CHECK_OK(loom_add(g, sq, e, &y));
    CHECK_OK(loom_sum(g, y, 0, NULL, 0, &loss));
    CHECK_OK(loom_grad(g, loss, 1, &x, &dx));
    CHECK_OK(loom_graph_output(g, dx));
    loom_tensor_t *in = test_tensor(dts[d], 1, shape, xv);
    loom_tensor_t *out = test_run1(g, 1, &in);
    if (out) CHECK_TENSOR(out, want, 4, 0, test_rtol(dts[d], 4));
    loom_tensor_destroy(out);
    loom_tensor_destroy(in);
    loom_graph_destroy(g);
  }
}

/* ---- Errors -------------------------------------------------------------------- */

/* An op that has no gradient rule, found by name at run time (the pooling
 * gradients, whose own gradients nobody needs), or -1 when all have one. */
static int op_without_rule(void) {
  static const char *const names[] = {"avg_pool2d_grad", "max_pool2d_grad"};
  for (int i = 0; i < IR_OP_COUNT; i++)
    for (int k = 0; k < COUNT(names); k++)
      if (!strcmp(ir_ops[i].name, names[k]) && !ir_ops[i].has_grad &&
          !ir_ops[i].not_differentiable)
        return i;
  return -1;
}

static void test_errors(void) {
  loom_graph_t *g;
  loom_value_t x, k, y, loss, grads[1], bad = {9999};
  int64_t shape[4] = {1, 1, 2, 2}, pooled[4] = {1, 1, 1, 1};
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 4, shape, &x));
  CHECK_OK(loom_graph_input(g, "k", LOOM_I64, 0, NULL, &k));
  CHECK_OK(loom_tanh(g, x, &y));
  CHECK_ERR(loom_grad(g, y, 1, &x, grads), LOOM_ERR_SHAPE, "scalar");
  CHECK_ERR(loom_grad(g, k, 1, &x, grads), LOOM_ERR_DTYPE, "float");
  CHECK_ERR(loom_grad(NULL, y, 1, &x, grads), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_grad(g, bad, 1, &x, grads), LOOM_ERR_INVALID, "loss");
  CHECK_OK(loom_sum(g, y, 0, NULL, 0, &loss));
  CHECK_ERR(loom_grad(g, loss, 1, &bad, grads), LOOM_ERR_INVALID, "wrt[0]");
  CHECK_ERR(loom_grad(g, loss, 1, NULL, grads), LOOM_ERR_INVALID, "wrt");
  CHECK_ERR(loom_grad(g, loss, 1, &x, NULL), LOOM_ERR_INVALID, "grads");
  CHECK_ERR(loom_grad(g, loss, -1, &x, grads), LOOM_ERR_INVALID, "n is -1");
  int op = op_without_rule();
  if (op >= 0) {
    /* On the path from x to the loss: an error naming the op. */
    loom_value_t dy, sy, z, l2;
    int64_t kernel[2] = {2, 2};
    ir_attrs_t a = {0};
    ir_attrs_ints(&a, "kernel", 2, kernel);
    CHECK_OK(loom_graph_input(g, "dy", LOOM_F64, 4, pooled, &dy));
    int32_t in[2] = {y.id, dy.id};
    CHECK_OK(ir_add_node(g, (ir_op_t)op, 2, in, &a, &z.id, 1));
    CHECK_OK(loom_sum(g, z, 0, NULL, 0, &l2));
    CHECK_ERR(loom_grad(g, l2, 1, &x, grads), LOOM_ERR_UNSUPPORTED,
              ir_ops[op].name);
    CHECK_ERR(loom_grad(g, l2, 1, &x, grads), LOOM_ERR_UNSUPPORTED,
              "has no gradient rule");
    /* Off the path (x is behind a stop_gradient): no error, zeros. */
    CHECK_OK(loom_stop_gradient(g, y, &sy));
    in[0] = sy.id;
    CHECK_OK(ir_add_node(g, (ir_op_t)op, 2, in, &a, &z.id, 1));
    CHECK_OK(loom_sum(g, z, 0, NULL, 0, &l2));
    CHECK_OK(loom_grad(g, l2, 1, &x, grads));
  } else {
    printf("note: every candidate op has a gradient rule; skipped\n");
  }
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(test_unary_rules);
  TEST_RUN(test_all_unary_compiled);
  TEST_RUN(test_binary_rules);
  TEST_RUN(test_all_binary_compiled);
  TEST_RUN(test_extreme_ties);
  TEST_RUN(test_where);
  TEST_RUN(test_dropout);
  TEST_RUN(test_fan_out);
  TEST_RUN(test_zeros_and_stop_gradient);
  TEST_RUN(test_reaches_through_roundings_only);
  TEST_RUN(test_wrt_node_value);
  TEST_RUN(test_symbolic_unbroadcast);
  TEST_RUN(test_strided_input);
  TEST_RUN(test_second_derivative);
  TEST_RUN(test_float_dtypes);
  TEST_RUN(test_errors);
  return test_summary();
}
