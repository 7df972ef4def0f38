/* Gradients where the function has a kink or a tie: the value Loom picks
 * there is PyTorch's (docs/training.md has the table). Each case is
 * computed by hand at the tie points, run through the interpreter and
 * compiled (test_run1 compares the two). */
#include <math.h>

#include "harness.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Builds y from the graph's inputs x[0..n-1]. */
typedef loom_status_t (*build_fn)(loom_graph_t *g, const loom_value_t *x, loom_value_t *y);

/* d sum(y) / d x[k] for inputs holding `values` (each of n_el elements,
 * of dtype dt), checked against want. */
static void check_grad(const char *what, build_fn build, int n, loom_dtype_t dt, int rank,
                       const int64_t *shape, const double *const *values, int k,
                       const double *want) {
  loom_graph_t *g;
  loom_value_t x[4], y, loss, dx;
  loom_tensor_t *in[4];
  CHECK_OK(loom_graph_create(&g));
  for (int i = 0; i < n; i++) {
    char name[8] = {(char)('a' + i), 0};
    CHECK_OK(loom_graph_input(g, name, dt, rank, shape, &x[i]));
    in[i] = test_tensor(dt, rank, shape, values[i]);
  }
  CHECK_OK(build(g, x, &y));
  CHECK_OK(loom_sum(g, y, 0, NULL, 0, &loss));
  CHECK_OK(loom_grad(g, loss, 1, &x[k], &dx));
  CHECK_OK(loom_graph_output(g, dx));
  loom_tensor_t *got = test_run1(g, n, in);
  int64_t numel = 1;
  for (int d = 0; d < rank; d++) numel *= shape[d];
  if (got) {
    int before = test_failures;
    CHECK_TENSOR(got, want, numel, 0, 1e-6);
    if (test_failures != before) printf("  in %s, gradient of input %d\n", what, k);
  }
  loom_tensor_destroy(got);
  for (int i = 0; i < n; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}

/* One input of 1-D shape {n}. */
static void check_unary(const char *what, build_fn build, int n, const double *x,
                        const double *want) {
  int64_t shape[1] = {n};
  check_grad(what, build, 1, LOOM_F64, 1, shape, &x, 0, want);
}

/* ---- Elementwise kinks ------------------------------------------------------ */

static loom_status_t clamp_(loom_graph_t *g, const loom_value_t *x, loom_value_t *y) {
  return loom_clamp(g, x[0], -0.5, 0.75, y);
}
static loom_status_t clamp_low_(loom_graph_t *g, const loom_value_t *x, loom_value_t *y) {
  return loom_clamp(g, x[0], -0.5, INFINITY, y);
}
static loom_status_t clamp_high_(loom_graph_t *g, const loom_value_t *x, loom_value_t *y) {
  return loom_clamp(g, x[0], -INFINITY, 0.75, y);
}
static loom_status_t clamp_crossed_(loom_graph_t *g, const loom_value_t *x, loom_value_t *y) {
  return loom_clamp(g, x[0], 1, 0, y);
}

/* torch.clamp(x, -0.5, 0.75).sum().backward() gives [1, 1, 1, 0, 0] for
 * the x: the bounds themselves pass the gradient. A NaN gets 0;
 * with min > max every x is clamped and gets 0. */
static void test_clamp_bounds(void) {
  const double x[6] = {-0.5, 0.75, 0.1, -1, 1, NAN};
  check_unary("clamp(-0.5, 0.75)", clamp_, 6, x, (double[]){1, 1, 1, 0, 0, 0});
  check_unary("clamp(-0.5, inf)", clamp_low_, 6, x, (double[]){1, 1, 1, 0, 1, 0});
  check_unary("clamp(-inf, 0.75)", clamp_high_, 6, x, (double[]){1, 1, 1, 1, 0, 0});
  const double c[3] = {0, 0.5, 1};
  check_unary("clamp(1, 0)", clamp_crossed_, 3, c, (double[]){0, 0, 0});
}

static loom_status_t relu_(loom_graph_t *g, const loom_value_t *x, loom_value_t *y) {
  return loom_relu(g, x[0], y);
}
static loom_status_t leaky_relu_(loom_graph_t *g, const loom_value_t *x, loom_value_t *y) {
  return loom_leaky_relu(g, x[0], 0.2, y);
}
static loom_status_t elu_(loom_graph_t *g, const loom_value_t *x, loom_value_t *y) {
  return loom_elu(g, x[0], 0.7, y);
}
static loom_status_t abs_(loom_graph_t *g, const loom_value_t *x, loom_value_t *y) {
  return loom_abs(g, x[0], y);
}

/* At x = 0: relu 0, leaky_relu alpha and elu alpha (the x <= 0 side, as
 * PyTorch's x > 0 test), abs 0 (sign(0)). -0 is 0. */
static void test_activations_at_zero(void) {
  const double x[4] = {0, -0.0, 1.5, -2};
  check_unary("relu", relu_, 4, x, (double[]){0, 0, 1, 0});
  check_unary("leaky_relu", leaky_relu_, 4, x, (double[]){0.2, 0.2, 1, 0.2});
  check_unary("elu", elu_, 4, x, (double[]){0.7, 0.7, 1, 0.7 * exp(-2)});
  check_unary("abs", abs_, 4, x, (double[]){0, 0, 1, -1});
}

static loom_status_t maximum_(loom_graph_t *g, const loom_value_t *x, loom_value_t *y) {
  return loom_maximum(g, x[0], x[1], y);
}
static loom_status_t minimum_(loom_graph_t *g, const loom_value_t *x, loom_value_t *y) {
  return loom_minimum(g, x[0], x[1], y);
}

/* torch.maximum / minimum: g/2 to each at a tie, g to the chosen one, and
 * g to both when one is NaN (neither lost a comparison). */
static void test_maximum_minimum_ties(void) {
  const double a[4] = {1, 2, 3, NAN}, b[4] = {1, 0, 5, 1};
  const double *ab[2] = {a, b};
  int64_t shape[1] = {4};
  check_grad("maximum", maximum_, 2, LOOM_F64, 1, shape, ab, 0, (double[]){0.5, 1, 0, 1});
  check_grad("maximum", maximum_, 2, LOOM_F64, 1, shape, ab, 1, (double[]){0.5, 0, 1, 1});
  check_grad("minimum", minimum_, 2, LOOM_F64, 1, shape, ab, 0, (double[]){0.5, 0, 1, 1});
  check_grad("minimum", minimum_, 2, LOOM_F64, 1, shape, ab, 1, (double[]){0.5, 1, 0, 1});
}

static loom_status_t pow_(loom_graph_t *g, const loom_value_t *x, loom_value_t *y) {
  return loom_pow(g, x[0], x[1], y);
}

/* At a = 0 the formulas b a^(b-1) and a^b log a are 0 * inf; PyTorch
 * defines da = 0 where b = 0 and db = 0 where a = 0, b >= 0. */
static void test_pow_at_zero(void) {
  const double a[4] = {0, 0, 2, 0}, b[4] = {0, 2, 0, 0.5};
  const double *ab[2] = {a, b};
  int64_t shape[1] = {4};
  check_grad("pow", pow_, 2, LOOM_F64, 1, shape, ab, 0, (double[]){0, 0, 0, INFINITY});
  check_grad("pow", pow_, 2, LOOM_F64, 1, shape, ab, 1, (double[]){0, 0, log(2), 0});
}

/* ---- Reductions and pooling ---------------------------------------------------- */

static loom_status_t max_rows_(loom_graph_t *g, const loom_value_t *x, loom_value_t *y) {
  const int64_t axis = 1;
  return loom_max(g, x[0], 1, &axis, 0, y);
}
static loom_status_t min_all_(loom_graph_t *g, const loom_value_t *x, loom_value_t *y) {
  return loom_min(g, x[0], 0, NULL, 0, y);
}

/* max / min over axes are torch.amax / amin: tied extremes share the
 * gradient evenly. */
static void test_reduction_ties(void) {
  const double x[6] = {3, 1, 3, 2, 2, 2};
  const double *px = x;
  int64_t shape[2] = {2, 3};
  const double t = 1.0 / 3;
  check_grad("max(axis 1)", max_rows_, 1, LOOM_F64, 2, shape, &px, 0,
             (double[]){0.5, 0, 0.5, t, t, t});
  const double y[6] = {2, 5, 2, 3, 2, 9};
  const double *py = y;
  check_grad("min()", min_all_, 1, LOOM_F64, 2, shape, &py, 0, (double[]){t, 0, t, 0, t, 0});
}

static loom_status_t pool_2x2_(loom_graph_t *g, const loom_value_t *x, loom_value_t *y) {
  loom_pool_params_t p = {.kernel = {2, 2}};
  return loom_max_pool2d(g, x[0], &p, y);
}
static loom_status_t pool_1x2_(loom_graph_t *g, const loom_value_t *x, loom_value_t *y) {
  loom_pool_params_t p = {.kernel = {1, 2}, .stride = {1, 1}};
  return loom_max_pool2d(g, x[0], &p, y);
}

/* max_pool2d sends each window's gradient to one element, as PyTorch's
 * argmax: the first of tied maxima (row by row), the last NaN. In f32, so
 * that the compiled max_pool2d_grad kernel runs too. */
static void test_max_pool_ties(void) {
  /* Windows [[5, 5], [1, 5]] and [[NaN, 0], [NaN, 2]]. */
  const double x[8] = {5, 5, NAN, 0, 1, 5, NAN, 2};
  const double *px = x;
  int64_t shape[4] = {1, 1, 2, 4};
  check_grad("max_pool2d 2x2", pool_2x2_, 1, LOOM_F32, 4, shape, &px, 0,
             (double[]){1, 0, 0, 0, 0, 0, 1, 0});
  /* Overlapping windows over a flat row: [2, 2] picks 0, then 1. */
  const double row[3] = {2, 2, 2};
  const double *pr = row;
  int64_t rs[4] = {1, 1, 1, 3};
  check_grad("max_pool2d 1x2 stride 1", pool_1x2_, 1, LOOM_F32, 4, rs, &pr, 0,
             (double[]){1, 1, 0});
}

/* ---- Losses built from ops with kinks ------------------------------------------- */

static loom_status_t bce_(loom_graph_t *g, const loom_value_t *x, loom_value_t *y) {
  return loom_bce_with_logits(g, x[0], x[1], LOOM_REDUCTION_NONE, y);
}

/* d/dx of BCE with logits is sigmoid(x) - t everywhere, x = 0 included
 * (sigmoid(0) = 1/2), though the stable form has max(x, 0) and |x|. */
static void test_bce_at_zero(void) {
  const double x[3] = {0, 0, 2}, t[3] = {0.25, 1, 0};
  const double *xt[2] = {x, t};
  int64_t shape[1] = {3};
  check_grad("bce_with_logits", bce_, 2, LOOM_F64, 1, shape, xt, 0,
             (double[]){0.25, -0.5, 1 / (1 + exp(-2))});
}

int main(void) {
  TEST_RUN(test_clamp_bounds);
  TEST_RUN(test_activations_at_zero);
  TEST_RUN(test_maximum_minimum_ties);
  TEST_RUN(test_pow_at_zero);
  TEST_RUN(test_reduction_ties);
  TEST_RUN(test_max_pool_ties);
  TEST_RUN(test_bce_at_zero);
  return test_summary();
}
