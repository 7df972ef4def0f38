/* Reductions, argmax/argmin, cumsum and topk against hand-computed values,
 * naive loops written here, and their error paths. */
#include <stdbool.h>

#include "harness.h"

static const loom_dtype_t numeric[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16,
                                       LOOM_I8,  LOOM_I32, LOOM_I64};
static const loom_dtype_t floats[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16};
#define N_NUMERIC 7
#define N_FLOATS 4

typedef loom_status_t (*reduce_fn)(loom_graph_t *g, loom_value_t x, int n_axes,
                                   const int64_t *axes, int keepdim,
                                   loom_value_t *out);

static loom_status_t variance0(loom_graph_t *g, loom_value_t x, int n_axes,
                               const int64_t *axes, int keepdim,
                               loom_value_t *out) {
  return loom_variance(g, x, n_axes, axes, keepdim, 0, out);
}

static loom_status_t variance1(loom_graph_t *g, loom_value_t x, int n_axes,
                               const int64_t *axes, int keepdim,
                               loom_value_t *out) {
  return loom_variance(g, x, n_axes, axes, keepdim, 1, out);
}

/* ---- Helpers --------------------------------------------------------------- */

/* A new graph with one input x of dtype dt and a constant shape. */
static loom_graph_t *graph_x(loom_dtype_t dt, int rank, const int64_t *shape,
                             loom_value_t *x) {
  loom_graph_t *g = NULL;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", dt, rank, shape, x));
  return g;
}

static void check_shape(const loom_tensor_t *t, int rank, const int64_t *shape,
                        int line) {
  test_checks++;
  if (!t) return; /* reported by the run */
  bool same = loom_tensor_rank(t) == rank;
  for (int i = 0; same && i < rank; i++) same = loom_tensor_dim(t, i) == shape[i];
  if (!same) test_fail(__FILE__, line, "output has the wrong shape (rank %d)",
                       loom_tensor_rank(t));
}

/* Outputs y, runs g on xv (of g's input type), destroys g. */
static loom_tensor_t *run_x(loom_graph_t *g, loom_value_t y, loom_dtype_t dt,
                            int rank, const int64_t *shape, const double *xv) {
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in = test_tensor(dt, rank, shape, xv);
  loom_tensor_t *out = test_run1(g, 1, &in);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
  return out;
}

/* The dtype of f's result on dt: sums and products of integers and bool
 * are i64, as in PyTorch. */
static loom_dtype_t result_dtype(reduce_fn f, loom_dtype_t dt) {
  bool widen = f == loom_sum || f == loom_prod;
  return widen && (dt == LOOM_I8 || dt == LOOM_I32 || dt == LOOM_BOOL) ? LOOM_I64 : dt;
}

/* f(x, axes, keepdim) on xv: checks the output's dtype, shape and values. */
static void check_reduce(reduce_fn f, loom_dtype_t dt, int rank,
                         const int64_t *shape, const double *xv, int n_axes,
                         const int64_t *axes, int keepdim, int want_rank,
                         const int64_t *want_shape, const double *want,
                         double rtol, int line) {
  loom_value_t x, y;
  loom_graph_t *g = graph_x(dt, rank, shape, &x);
  loom_status_t s = f(g, x, n_axes, axes, keepdim, &y);
  if (s != LOOM_OK) {
    test_fail(__FILE__, line, "build failed (%s): %s", loom_dtype_name(dt),
              loom_last_error());
    loom_graph_destroy(g);
    return;
  }
  loom_tensor_t *out = run_x(g, y, dt, rank, shape, xv);
  int64_t n = 1;
  for (int i = 0; i < want_rank; i++) n *= want_shape[i];
  check_shape(out, want_rank, want_shape, line);
  if (out && loom_tensor_dtype(out) != result_dtype(f, dt))
    test_fail(__FILE__, line, "output dtype %s", loom_dtype_name(loom_tensor_dtype(out)));
  test_check_tensor(out, want, n, 0, rtol, __FILE__, line);
  loom_tensor_destroy(out);
}

#define CHECK_REDUCE(f, dt, rank, shape, xv, n_axes, axes, keepdim, wrank, \
                     wshape, want, rtol)                                   \
  check_reduce(f, dt, rank, shape, xv, n_axes, axes, keepdim, wrank,       \
               wshape, want, rtol, __LINE__)

/* ---- Sums, means, extremes over several axes combinations ------------------ */

static const int64_t s23[] = {2, 3};
static const double x23[] = {1, 2, 3, 4, 5, 6};
static const int64_t ax0[] = {0}, ax1[] = {1}, axm1[] = {-1}, ax01[] = {0, 1};
static const int64_t s2[] = {2}, s3[] = {3}, s21[] = {2, 1}, s11[] = {1, 1},
                     s13[] = {1, 3};

/* sum/max/min/prod of [[1,2,3],[4,5,6]] in every numeric dtype. */
static void reduce_numeric_axes(void) {
  static const struct {
    reduce_fn f;
    double all, row[2], col[3];
  } cases[] = {
      {loom_sum, 21, {6, 15}, {5, 7, 9}},
      {loom_max, 6, {3, 6}, {4, 5, 6}},
      {loom_min, 1, {1, 4}, {1, 2, 3}},
      {loom_prod, 720, {6, 120}, {4, 10, 18}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int d = 0; d < N_NUMERIC; d++) {
      loom_dtype_t dt = numeric[d];
      double all = cases[c].all;
      double rt = test_rtol(dt, 1);
      CHECK_REDUCE(cases[c].f, dt, 2, s23, x23, 0, NULL, 0, 0, NULL, &all, rt);
      CHECK_REDUCE(cases[c].f, dt, 2, s23, x23, 2, ax01, 1, 2, s11, &all, rt);
      CHECK_REDUCE(cases[c].f, dt, 2, s23, x23, 1, ax1, 0, 1, s2, cases[c].row, rt);
      CHECK_REDUCE(cases[c].f, dt, 2, s23, x23, 1, axm1, 1, 2, s21, cases[c].row, rt);
      CHECK_REDUCE(cases[c].f, dt, 2, s23, x23, 1, ax0, 0, 1, s3, cases[c].col, rt);
      CHECK_REDUCE(cases[c].f, dt, 2, s23, x23, 1, ax0, 1, 2, s13, cases[c].col, rt);
    }
}

/* mean, logsumexp and variance of [[1,2,3],[4,5,6]] in every float dtype. */
static void reduce_float_axes(void) {
  static const struct {
    reduce_fn f;
    double all, row[2], col[3];
  } cases[] = {
      {loom_mean, 3.5, {2, 5}, {2.5, 3.5, 4.5}},
      {loom_logsumexp, 6.456193316018123, {3.40760596444438, 6.407605964444381},
       {4.048587351573742, 5.048587351573742, 6.048587351573742}},
      /* Deviations from 3.5 square to 17.5 in all; rows 2, columns 4.5. */
      {variance0, 17.5 / 6, {2.0 / 3, 2.0 / 3}, {2.25, 2.25, 2.25}},
      {variance1, 17.5 / 5, {1, 1}, {4.5, 4.5, 4.5}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int d = 0; d < N_FLOATS; d++) {
      loom_dtype_t dt = floats[d];
      double rt = test_rtol(dt, 4);
      CHECK_REDUCE(cases[c].f, dt, 2, s23, x23, 0, NULL, 0, 0, NULL, &cases[c].all, rt);
      CHECK_REDUCE(cases[c].f, dt, 2, s23, x23, 2, ax01, 1, 2, s11, &cases[c].all, rt);
      CHECK_REDUCE(cases[c].f, dt, 2, s23, x23, 1, ax1, 0, 1, s2, cases[c].row, rt);
      CHECK_REDUCE(cases[c].f, dt, 2, s23, x23, 1, axm1, 1, 2, s21, cases[c].row, rt);
      CHECK_REDUCE(cases[c].f, dt, 2, s23, x23, 1, ax0, 0, 1, s3, cases[c].col, rt);
    }
}

/* x = 0..7 as (2, 2, 2): axes {0, 2} in any order and sign. */
static void reduce_two_of_three_axes(void) {
  static const int64_t shape[] = {2, 2, 2}, a02[] = {0, 2}, a20[] = {-1, 0};
  static const int64_t a12[] = {1, 2}, s121[] = {1, 2, 1}, s2_[] = {2};
  double x[8], want[] = {10, 18}, want12[] = {6, 22};
  for (int i = 0; i < 8; i++) x[i] = i;
  CHECK_REDUCE(loom_sum, LOOM_F32, 3, shape, x, 2, a02, 0, 1, s2_, want, 0);
  CHECK_REDUCE(loom_sum, LOOM_I32, 3, shape, x, 2, a20, 1, 3, s121, want, 0);
  CHECK_REDUCE(loom_sum, LOOM_I64, 3, shape, x, 2, a12, 0, 1, s2_, want12, 0);
  double wmax[] = {5, 7}, wmin[] = {0, 2};
  CHECK_REDUCE(loom_max, LOOM_F64, 3, shape, x, 2, a02, 0, 1, s2_, wmax, 0);
  CHECK_REDUCE(loom_min, LOOM_I8, 3, shape, x, 2, a20, 0, 1, s2_, wmin, 0);
}

/* A scalar reduces to itself; an empty, non-null axes list reduces
 * nothing (NumPy's axis=()). */
static void reduce_scalar_and_no_axes(void) {
  double v = 4;
  static const int64_t a0[] = {0};
  CHECK_REDUCE(loom_sum, LOOM_F32, 0, NULL, &v, 0, NULL, 0, 0, NULL, &v, 0);
  CHECK_REDUCE(loom_max, LOOM_I32, 0, NULL, &v, 1, a0, 1, 0, NULL, &v, 0);
  CHECK_REDUCE(loom_sum, LOOM_I64, 2, s23, x23, 0, ax0, 0, 2, s23, x23, 0);
}

/* Integer sums and products are i64 (PyTorch's): narrower dtypes do not
 * wrap; i64 wraps, 2^62 + 2^62 to -2^63. */
static void reduce_integer_wrap(void) {
  static const int64_t s2_[] = {2};
  double big[] = {2147483647, 1}, want = 2147483648.0;
  CHECK_REDUCE(loom_sum, LOOM_I32, 1, s2_, big, 0, NULL, 0, 0, NULL, &want, 0);
  double h[] = {100, 100}, wsum = 200, wprod = 10000;
  CHECK_REDUCE(loom_sum, LOOM_I8, 1, s2_, h, 0, NULL, 0, 0, NULL, &wsum, 0);
  CHECK_REDUCE(loom_prod, LOOM_I8, 1, s2_, h, 0, NULL, 0, 0, NULL, &wprod, 0);
  double huge[] = {4611686018427387904.0, 4611686018427387904.0}, wrap = -9223372036854775808.0;
  CHECK_REDUCE(loom_sum, LOOM_I64, 1, s2_, huge, 0, NULL, 0, 0, NULL, &wrap, 0);
}

/* Bools count: sum, prod and cumsum of bool are i64, as in PyTorch; their
 * mean is refused with a hint to cast (PyTorch refuses it too). */
static void reduce_bool(void) {
  static const double b23[] = {1, 0, 1, 1, 1, 0};
  static const double all = 4, rows[] = {2, 2}, cols[] = {2, 1, 1};
  static const double prod_rows[] = {0, 0}, prod_cols[] = {1, 0, 0};
  CHECK_REDUCE(loom_sum, LOOM_BOOL, 2, s23, b23, 0, NULL, 0, 0, NULL, &all, 0);
  CHECK_REDUCE(loom_sum, LOOM_BOOL, 2, s23, b23, 1, ax1, 0, 1, s2, rows, 0);
  CHECK_REDUCE(loom_sum, LOOM_BOOL, 2, s23, b23, 1, ax0, 1, 2, s13, cols, 0);
  CHECK_REDUCE(loom_prod, LOOM_BOOL, 2, s23, b23, 1, ax1, 0, 1, s2, prod_rows, 0);
  CHECK_REDUCE(loom_prod, LOOM_BOOL, 2, s23, b23, 1, ax0, 0, 1, s3, prod_cols, 0);
  /* (x > 2) counted: a comparison fused into the sum. */
  loom_value_t x, two, gt, y;
  loom_graph_t *g = graph_x(LOOM_F32, 2, s23, &x);
  loom_tensor_t *t2 = test_tensor(LOOM_F32, 0, NULL, (double[]){2});
  CHECK_OK(loom_graph_constant(g, t2, &two));
  loom_tensor_destroy(t2);
  CHECK_OK(loom_gt(g, x, two, &gt));
  CHECK_OK(loom_sum(g, gt, 1, ax1, 0, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_executable_t *e = NULL;
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  CHECK_OK(loom_compile(g, NULL, &e));
  if (e) CHECK_OK(loom_executable_info(e, &info));
  CHECK(info.n_generated == 1 && info.n_reference == 0); /* one generated kernel */
  loom_executable_destroy(e);
  loom_tensor_t *in = test_tensor(LOOM_F32, 2, s23, x23);
  loom_tensor_t *out = test_run1(g, 1, &in);
  CHECK(out && loom_tensor_dtype(out) == LOOM_I64);
  CHECK_TENSOR(out, ((double[]){1, 3}), 2, 0, 0);
  loom_tensor_destroy(out);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* max/min propagate NaN; logsumexp is stable at the extremes. */
static void reduce_nan_and_stability(void) {
  static const int64_t s3_[] = {3}, s2_[] = {2};
  double xn[] = {1, NAN, 3}, nan = NAN;
  CHECK_REDUCE(loom_max, LOOM_F32, 1, s3_, xn, 0, NULL, 0, 0, NULL, &nan, 0);
  CHECK_REDUCE(loom_min, LOOM_F64, 1, s3_, xn, 0, NULL, 0, 0, NULL, &nan, 0);
  CHECK_REDUCE(loom_logsumexp, LOOM_F64, 1, s3_, xn, 0, NULL, 0, 0, NULL, &nan, 0);
  double big[] = {1000, 1000}, wbig = 1000 + log(2.0);
  CHECK_REDUCE(loom_logsumexp, LOOM_F64, 1, s2_, big, 0, NULL, 0, 0, NULL, &wbig, 1e-15);
  double small[] = {-1000, -1000}, wsmall = -1000 + log(2.0);
  CHECK_REDUCE(loom_logsumexp, LOOM_F32, 1, s2_, small, 0, NULL, 0, 0, NULL, &wsmall, 2e-7);
  double ninf[] = {-INFINITY, -INFINITY}, wninf = -INFINITY;
  CHECK_REDUCE(loom_logsumexp, LOOM_F32, 1, s2_, ninf, 0, NULL, 0, 0, NULL, &wninf, 0);
  double pinf[] = {INFINITY, 1}, wpinf = INFINITY;
  CHECK_REDUCE(loom_logsumexp, LOOM_BF16, 1, s2_, pinf, 0, NULL, 0, 0, NULL, &wpinf, 0);
}

/* Zero elements: sum 0, prod 1, mean NaN, logsumexp -inf. */
static void reduce_empty(void) {
  static const int64_t s20[] = {2, 0};
  double none = 0;
  double zeros[] = {0, 0}, ones[] = {1, 1}, nans[] = {NAN, NAN};
  double ninf[] = {-INFINITY, -INFINITY};
  CHECK_REDUCE(loom_sum, LOOM_I32, 2, s20, &none, 1, ax1, 0, 1, s2, zeros, 0);
  CHECK_REDUCE(loom_prod, LOOM_F32, 2, s20, &none, 1, ax1, 0, 1, s2, ones, 0);
  CHECK_REDUCE(loom_mean, LOOM_F32, 2, s20, &none, 1, ax1, 0, 1, s2, nans, 0);
  CHECK_REDUCE(loom_logsumexp, LOOM_F64, 2, s20, &none, 1, ax1, 0, 1, s2, ninf, 0);
}

/* Naive loops over a random (3, 4, 5) tensor, reduced over axes {0, 2}. */
static void reduce_random_against_loops(void) {
  static const int64_t shape[] = {3, 4, 5}, axes[] = {0, 2}, s4[] = {4};
  test_seed(7);
  double x[60], sum[4] = {0}, mx[4], sq[4] = {0}, mean[4], var[4];
  for (int i = 0; i < 60; i++) x[i] = test_rand_uniform(-2, 2);
  for (int j = 0; j < 4; j++) mx[j] = -INFINITY;
  for (int a = 0; a < 3; a++)
    for (int j = 0; j < 4; j++)
      for (int b = 0; b < 5; b++) {
        double v = x[(a * 4 + j) * 5 + b];
        sum[j] += v;
        sq[j] += v * v;
        if (v > mx[j]) mx[j] = v;
      }
  for (int j = 0; j < 4; j++) {
    mean[j] = sum[j] / 15;
    var[j] = sq[j] / 15 - mean[j] * mean[j]; /* E[x^2] - E[x]^2 */
  }
  CHECK_REDUCE(loom_sum, LOOM_F64, 3, shape, x, 2, axes, 0, 1, s4, sum, 1e-12);
  CHECK_REDUCE(loom_max, LOOM_F64, 3, shape, x, 2, axes, 0, 1, s4, mx, 0);
  CHECK_REDUCE(loom_mean, LOOM_F64, 3, shape, x, 2, axes, 0, 1, s4, mean, 1e-12);
  CHECK_REDUCE(variance0, LOOM_F64, 3, shape, x, 2, axes, 0, 1, s4, var, 1e-10);
}

/* ---- argmax, argmin --------------------------------------------------------- */

/* arg(x, has_axis, axis, keepdim) on xv: checks i64 output, shape, values. */
static void check_arg(bool want_max, loom_dtype_t dt, int rank,
                      const int64_t *shape, const double *xv, int has_axis,
                      int64_t axis, int keepdim, int want_rank,
                      const int64_t *want_shape, const double *want, int line) {
  loom_value_t x, y;
  loom_graph_t *g = graph_x(dt, rank, shape, &x);
  loom_status_t s = want_max ? loom_argmax(g, x, has_axis, axis, keepdim, &y)
                             : loom_argmin(g, x, has_axis, axis, keepdim, &y);
  if (s != LOOM_OK) {
    test_fail(__FILE__, line, "build failed: %s", loom_last_error());
    loom_graph_destroy(g);
    return;
  }
  loom_tensor_t *out = run_x(g, y, dt, rank, shape, xv);
  int64_t n = 1;
  for (int i = 0; i < want_rank; i++) n *= want_shape[i];
  check_shape(out, want_rank, want_shape, line);
  if (out && loom_tensor_dtype(out) != LOOM_I64)
    test_fail(__FILE__, line, "output is not i64");
  test_check_tensor(out, want, n, 0, 0, __FILE__, line);
  loom_tensor_destroy(out);
}

#define CHECK_ARG(mx, dt, rank, shape, xv, has, axis, keep, wrank, wshape, want) \
  check_arg(mx, dt, rank, shape, xv, has, axis, keep, wrank, wshape, want, __LINE__)

/* [[1,5,5],[7,0,7]]: ties go to the first index. */
static void arg_axes_and_dtypes(void) {
  static const double x[] = {1, 5, 5, 7, 0, 7};
  double max_row[] = {1, 0}, max_col[] = {1, 0, 1}, max_flat = 3;
  double min_row[] = {0, 1}, min_col[] = {0, 1, 0}, min_flat = 4;
  for (int d = 0; d < N_NUMERIC; d++) {
    loom_dtype_t dt = numeric[d];
    CHECK_ARG(true, dt, 2, s23, x, 1, 1, 0, 1, s2, max_row);
    CHECK_ARG(true, dt, 2, s23, x, 1, -1, 1, 2, s21, max_row);
    CHECK_ARG(true, dt, 2, s23, x, 1, 0, 0, 1, s3, max_col);
    CHECK_ARG(true, dt, 2, s23, x, 0, 0, 0, 0, NULL, &max_flat);
    CHECK_ARG(true, dt, 2, s23, x, 0, 0, 1, 2, s11, &max_flat);
    CHECK_ARG(false, dt, 2, s23, x, 1, 1, 0, 1, s2, min_row);
    CHECK_ARG(false, dt, 2, s23, x, 1, -2, 1, 2, s13, min_col);
    CHECK_ARG(false, dt, 2, s23, x, 0, 0, 0, 0, NULL, &min_flat);
  }
}

/* NaN counts as both the maximum and the minimum; the first one wins. */
static void arg_nan_and_scalar(void) {
  static const int64_t s4[] = {4};
  double x[] = {1, NAN, 3, NAN}, one = 1, zero = 0, v = 2;
  CHECK_ARG(true, LOOM_F32, 1, s4, x, 0, 0, 0, 0, NULL, &one);
  CHECK_ARG(false, LOOM_F64, 1, s4, x, 1, 0, 0, 0, NULL, &one);
  CHECK_ARG(true, LOOM_I32, 0, NULL, &v, 0, 0, 0, 0, NULL, &zero);
  CHECK_ARG(false, LOOM_F16, 0, NULL, &v, 1, 0, 1, 0, NULL, &zero);
}

/* ---- cumsum ----------------------------------------------------------------- */

static void check_cumsum(loom_dtype_t dt, int rank, const int64_t *shape,
                         const double *xv, int64_t axis, int exclusive,
                         int reverse, const double *want, int line) {
  loom_value_t x, y;
  loom_graph_t *g = graph_x(dt, rank, shape, &x);
  if (loom_cumsum(g, x, axis, exclusive, reverse, &y) != LOOM_OK) {
    test_fail(__FILE__, line, "build failed: %s", loom_last_error());
    loom_graph_destroy(g);
    return;
  }
  loom_tensor_t *out = run_x(g, y, dt, rank, shape, xv);
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  check_shape(out, rank, shape, line);
  loom_dtype_t want_dt = dt == LOOM_I8 || dt == LOOM_I32 || dt == LOOM_BOOL ? LOOM_I64 : dt;
  if (out && loom_tensor_dtype(out) != want_dt) test_fail(__FILE__, line, "dtype %s", loom_dtype_name(loom_tensor_dtype(out)));
  test_check_tensor(out, want, n, 0, test_rtol(dt, 1), __FILE__, line);
  loom_tensor_destroy(out);
}

#define CHECK_CUMSUM(dt, rank, shape, xv, axis, excl, rev, want) \
  check_cumsum(dt, rank, shape, xv, axis, excl, rev, want, __LINE__)

static void cumsum_modes_and_dtypes(void) {
  static const double rows[] = {1, 3, 6, 4, 9, 15}, cols[] = {1, 2, 3, 5, 7, 9};
  static const double excl[] = {0, 1, 3, 0, 4, 9}, rev[] = {6, 5, 3, 15, 11, 6};
  static const double both[] = {5, 3, 0, 11, 6, 0}, col_rev_excl[] = {4, 5, 6, 0, 0, 0};
  for (int d = 0; d < N_NUMERIC; d++) {
    loom_dtype_t dt = numeric[d];
    CHECK_CUMSUM(dt, 2, s23, x23, 1, 0, 0, rows);
    CHECK_CUMSUM(dt, 2, s23, x23, -1, 0, 0, rows);
    CHECK_CUMSUM(dt, 2, s23, x23, 0, 0, 0, cols);
    CHECK_CUMSUM(dt, 2, s23, x23, 1, 1, 0, excl);
    CHECK_CUMSUM(dt, 2, s23, x23, 1, 0, 1, rev);
    CHECK_CUMSUM(dt, 2, s23, x23, 1, 1, 1, both);
    CHECK_CUMSUM(dt, 2, s23, x23, -2, 1, 1, col_rev_excl);
  }
  static const int64_t s2_[] = {2}, s4_[] = {4};
  double h[] = {100, 100}, wide[] = {100, 200}, v = 3, zero = 0;
  CHECK_CUMSUM(LOOM_I8, 1, s2_, h, 0, 0, 0, wide); /* i64, no wrap */
  double b[] = {1, 0, 1, 1}, counts[] = {1, 1, 2, 3};
  CHECK_CUMSUM(LOOM_BOOL, 1, s4_, b, 0, 0, 0, counts);
  CHECK_CUMSUM(LOOM_F32, 0, NULL, &v, 0, 0, 0, &v);
  CHECK_CUMSUM(LOOM_I64, 0, NULL, &v, 0, 1, 0, &zero);
}

/* ---- topk ------------------------------------------------------------------- */

/* Runs topk; returns values and indices (caller destroys). */
static void run_topk(loom_dtype_t dt, int rank, const int64_t *shape,
                     const double *xv, int64_t k, int64_t axis, int largest,
                     loom_tensor_t **vals, loom_tensor_t **idx, int line) {
  loom_value_t x, v, i;
  loom_graph_t *g = graph_x(dt, rank, shape, &x);
  *vals = *idx = NULL;
  if (loom_topk(g, x, k, axis, largest, &v, &i) != LOOM_OK) {
    test_fail(__FILE__, line, "build failed: %s", loom_last_error());
    loom_graph_destroy(g);
    return;
  }
  CHECK_OK(loom_graph_output(g, v));
  CHECK_OK(loom_graph_output(g, i));
  loom_tensor_t *in = test_tensor(dt, rank, shape, xv), *outs[2] = {NULL, NULL};
  loom_status_t s = loom_interpret(g, 1, &in, 2, outs);
  if (s != LOOM_OK) test_fail(__FILE__, line, "run failed: %s", loom_last_error());
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
  *vals = outs[0];
  *idx = outs[1];
}

static void check_topk(loom_dtype_t dt, int rank, const int64_t *shape,
                       const double *xv, int64_t k, int64_t axis, int largest,
                       const int64_t *want_shape, const double *want_v,
                       const double *want_i, int line) {
  loom_tensor_t *v, *i;
  run_topk(dt, rank, shape, xv, k, axis, largest, &v, &i, line);
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= want_shape[d];
  check_shape(v, rank, want_shape, line);
  check_shape(i, rank, want_shape, line);
  if (v && loom_tensor_dtype(v) != dt) test_fail(__FILE__, line, "values dtype");
  if (i && loom_tensor_dtype(i) != LOOM_I64) test_fail(__FILE__, line, "indices dtype");
  test_check_tensor(v, want_v, n, 0, 0, __FILE__, line);
  test_check_tensor(i, want_i, n, 0, 0, __FILE__, line);
  loom_tensor_destroy(v);
  loom_tensor_destroy(i);
}

#define CHECK_TOPK(dt, rank, shape, xv, k, axis, largest, wshape, wv, wi) \
  check_topk(dt, rank, shape, xv, k, axis, largest, wshape, wv, wi, __LINE__)

/* [[3,1,4,1],[5,9,2,6]]: equal values keep their order (1 at 1, then 3). */
static void topk_modes_and_dtypes(void) {
  static const int64_t s24[] = {2, 4}, s22[] = {2, 2}, s23_[] = {2, 3};
  static const int64_t s14[] = {1, 4}, s20[] = {2, 0};
  static const double x[] = {3, 1, 4, 1, 5, 9, 2, 6};
  static const double v2[] = {4, 3, 9, 6}, i2[] = {2, 0, 1, 3};
  static const double v3[] = {1, 1, 3, 2, 5, 6}, i3[] = {1, 3, 0, 2, 0, 3};
  static const double v1[] = {5, 9, 4, 6}, i1[] = {1, 1, 0, 1};
  static const double v4[] = {4, 3, 1, 1, 9, 6, 5, 2}, i4[] = {2, 0, 1, 3, 1, 3, 0, 2};
  for (int d = 0; d < N_NUMERIC; d++) {
    loom_dtype_t dt = numeric[d];
    CHECK_TOPK(dt, 2, s24, x, 2, -1, 1, s22, v2, i2);
    CHECK_TOPK(dt, 2, s24, x, 3, 1, 0, s23_, v3, i3);
    CHECK_TOPK(dt, 2, s24, x, 1, 0, 1, s14, v1, i1);
    CHECK_TOPK(dt, 2, s24, x, 4, -1, 1, s24, v4, i4);
    CHECK_TOPK(dt, 2, s24, x, 0, -1, 1, s20, NULL, NULL);
  }
  /* k above 8 sorts the whole line (smaller k selects): the same order */
  static const int64_t s12[] = {12}, s10[] = {10};
  static const double y[] = {5, 1, 5, 3, 9, 0, 9, 2, 7, 7, 4, 1};
  static const double v10[] = {9, 9, 7, 7, 5, 5, 4, 3, 2, 1};
  static const double i10[] = {4, 6, 8, 9, 0, 2, 10, 3, 7, 1};
  CHECK_TOPK(LOOM_F32, 1, s12, y, 10, 0, 1, s10, v10, i10);
}

/* NaN sorts above everything; large i64 values keep their exact order. */
static void topk_nan_and_big_ints(void) {
  static const int64_t s3_[] = {3}, s2_[] = {2};
  double x[] = {1, NAN, 3}, vl[] = {NAN, 3}, il[] = {1, 2}, vs[] = {1, 3}, is[] = {0, 2};
  CHECK_TOPK(LOOM_F32, 1, s3_, x, 2, 0, 1, s2_, vl, il);
  CHECK_TOPK(LOOM_F64, 1, s3_, x, 2, 0, 0, s2_, vs, is);
  /* 2^62 + 1 and 2^62 are one double apart only in int64. */
  int64_t big[] = {((int64_t)1 << 62), ((int64_t)1 << 62) + 1}, shape[] = {2};
  loom_tensor_t *t = NULL;
  CHECK_OK(loom_tensor_from_data(LOOM_I64, 1, shape, big, sizeof big, &t));
  loom_value_t in, v, i;
  loom_graph_t *g = graph_x(LOOM_I64, 1, shape, &in);
  CHECK_OK(loom_topk(g, in, 1, 0, 1, &v, &i));
  CHECK_OK(loom_graph_output(g, i));
  loom_tensor_t *out = test_run1(g, 1, &t);
  double want = 1;
  CHECK_TENSOR(out, &want, 1, 0, 0);
  loom_tensor_destroy(out);
  loom_tensor_destroy(t);
  loom_graph_destroy(g);
}

/* ---- Non-contiguous input ----------------------------------------------------- */

/* A transposed view of [[1,4],[2,5],[3,6]] reads as [[1,2,3],[4,5,6]]. */
static void non_contiguous_input(void) {
  float data[] = {1, 4, 2, 5, 3, 6};
  int64_t shape[] = {2, 3}, strides[] = {1, 2};
  loom_tensor_t *view = NULL;
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, shape, strides, data, &view));
  loom_graph_t *g;
  loom_value_t x, s, m, a, c, tv, ti;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, shape, &x));
  CHECK_OK(loom_sum(g, x, 1, ax1, 0, &s));
  CHECK_OK(loom_max(g, x, 1, ax0, 0, &m));
  CHECK_OK(loom_argmin(g, x, 1, 0, 0, &a));
  CHECK_OK(loom_cumsum(g, x, 1, 0, 0, &c));
  CHECK_OK(loom_topk(g, x, 2, 1, 1, &tv, &ti));
  loom_value_t outs_v[] = {s, m, a, c, tv, ti};
  for (int i = 0; i < 6; i++) CHECK_OK(loom_graph_output(g, outs_v[i]));
  loom_tensor_t *outs[6] = {0};
  CHECK_OK(loom_interpret(g, 1, &view, 6, outs));
  double ws[] = {6, 15}, wm[] = {4, 5, 6}, wa[] = {0, 0, 0};
  double wc[] = {1, 3, 6, 4, 9, 15}, wtv[] = {3, 2, 6, 5}, wti[] = {2, 1, 2, 1};
  CHECK_TENSOR(outs[0], ws, 2, 0, 0);
  CHECK_TENSOR(outs[1], wm, 3, 0, 0);
  CHECK_TENSOR(outs[2], wa, 3, 0, 0);
  CHECK_TENSOR(outs[3], wc, 6, 0, 0);
  CHECK_TENSOR(outs[4], wtv, 4, 0, 0);
  CHECK_TENSOR(outs[5], wti, 4, 0, 0);
  for (int i = 0; i < 6; i++) loom_tensor_destroy(outs[i]);
  loom_tensor_destroy(view);
  loom_graph_destroy(g);
}

/* ---- Symbolic shapes ----------------------------------------------------------- */

static void check_dims(loom_graph_t *g, loom_value_t v, int rank,
                       const loom_dim_t *dims, int line) {
  int r = -1;
  loom_dim_t got[LOOM_MAX_RANK];
  loom_status_t s = loom_value_type(g, v, NULL, &r, got);
  test_checks++;
  bool same = s == LOOM_OK && r == rank;
  for (int i = 0; same && i < rank; i++) same = got[i] == dims[i];
  if (!same) test_fail(__FILE__, line, "inferred type differs (rank %d)", r);
}

/* x: (n, 3). Reduced dims vanish or become 1; n survives elsewhere. */
static void symbolic_shapes(void) {
  loom_graph_t *g;
  loom_dim_t n;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_dim_t dims[] = {n, 3};
  loom_value_t x, s1, s1k, s0, am, cs, tv, ti;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, dims, &x));
  CHECK_OK(loom_sum(g, x, 1, ax1, 0, &s1));
  CHECK_OK(loom_logsumexp(g, x, 1, axm1, 1, &s1k));
  CHECK_OK(loom_mean(g, x, 1, ax0, 0, &s0));
  CHECK_OK(loom_argmax(g, x, 1, 0, 1, &am));
  CHECK_OK(loom_cumsum(g, x, 0, 0, 0, &cs));
  CHECK_OK(loom_topk(g, x, 2, 0, 1, &tv, &ti));
  loom_dim_t d_n[] = {n}, d_n1[] = {n, 1}, d_3[] = {3}, d_13[] = {1, 3},
             d_23[] = {2, 3};
  check_dims(g, s1, 1, d_n, __LINE__);
  check_dims(g, s1k, 2, d_n1, __LINE__);
  check_dims(g, s0, 1, d_3, __LINE__);
  check_dims(g, am, 2, d_13, __LINE__);
  check_dims(g, cs, 2, dims, __LINE__);
  check_dims(g, tv, 2, d_23, __LINE__);
  check_dims(g, ti, 2, d_23, __LINE__);
  loom_value_t outs_v[] = {s1, s0, am, cs, tv};
  for (int i = 0; i < 5; i++) CHECK_OK(loom_graph_output(g, outs_v[i]));
  int64_t shape[] = {2, 3};
  loom_tensor_t *in = test_tensor(LOOM_F32, 2, shape, x23), *outs[5] = {0};
  CHECK_OK(loom_interpret(g, 1, &in, 5, outs));
  double w1[] = {6, 15}, w0[] = {2.5, 3.5, 4.5}, wam[] = {1, 1, 1};
  double wcs[] = {1, 2, 3, 5, 7, 9}, wtv[] = {4, 5, 6, 1, 2, 3};
  CHECK_TENSOR(outs[0], w1, 2, 0, 0);
  CHECK_TENSOR(outs[1], w0, 3, 0, 0);
  CHECK_TENSOR(outs[2], wam, 3, 0, 0);
  CHECK_TENSOR(outs[3], wcs, 6, 0, 0);
  CHECK_TENSOR(outs[4], wtv, 6, 0, 0);
  for (int i = 0; i < 5; i++) loom_tensor_destroy(outs[i]);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* Extremes of a symbolic dim that turns out 0, and a k larger than a
 * symbolic axis, fail at run time. */
static void symbolic_run_time_errors(void) {
  static const struct {
    int op; /* 0 max, 1 argmin, 2 topk */
    int64_t rows;
    const char *word;
  } cases[] = {{0, 0, "no maximum"}, {1, 0, "no minimum"}, {2, 1, "larger"}};
  for (int c = 0; c < 3; c++) {
    loom_graph_t *g;
    loom_dim_t n;
    CHECK_OK(loom_graph_create(&g));
    CHECK_OK(loom_dim_symbol(g, "n", &n));
    loom_dim_t dims[] = {n, 3};
    loom_value_t x, y, idx;
    CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, dims, &x));
    if (cases[c].op == 0) CHECK_OK(loom_max(g, x, 1, ax0, 0, &y));
    if (cases[c].op == 1) CHECK_OK(loom_argmin(g, x, 0, 0, 0, &y));
    if (cases[c].op == 2) CHECK_OK(loom_topk(g, x, 2, 0, 1, &y, &idx));
    CHECK_OK(loom_graph_output(g, y));
    int64_t shape[] = {cases[c].rows, 3};
    double zeros[3] = {0};
    loom_tensor_t *in = test_tensor(LOOM_F32, 2, shape, zeros), *out = NULL;
    CHECK_ERR(loom_interpret(g, 1, &in, 1, &out), LOOM_ERR_VALUE, cases[c].word);
    CHECK(out == NULL);
    loom_tensor_destroy(in);
    loom_graph_destroy(g);
  }
}

/* ---- Errors ------------------------------------------------------------------ */

/* A fold whose prologue reads its values many times over: y = y + y forty
 * times (2^40 paths from x to the sum) and forty levels of tanh(y) +
 * sigmoid(y). The reduction emitter once costed every path (2^40 steps
 * for the first); compiled, both match the interpreter, and the first its
 * hand value, sum(x) * 2^40. */
static void prologue_with_shared_values(void) {
  int64_t shape[] = {2, 4}, axis[] = {-1};
  double xv[] = {1, 2, 3, 4, -1, 0.5, 0.25, 2};
  loom_value_t x, y, t, sg;
  loom_graph_t *g = graph_x(LOOM_F32, 2, shape, &x);
  y = x;
  for (int i = 0; i < 40; i++) CHECK_OK(loom_add(g, y, y, &y));
  CHECK_OK(loom_sum(g, y, 1, axis, 0, &y));
  loom_tensor_t *out = run_x(g, y, LOOM_F32, 2, shape, xv);
  double p40 = 1099511627776.0; /* 2^40 */
  if (out) CHECK_TENSOR(out, ((double[]){10 * p40, 1.75 * p40}), 2, 0, 0);
  loom_tensor_destroy(out);
  g = graph_x(LOOM_F32, 2, shape, &x);
  y = x;
  for (int i = 0; i < 40; i++) {
    CHECK_OK(loom_tanh(g, y, &t));
    CHECK_OK(loom_sigmoid(g, y, &sg));
    CHECK_OK(loom_add(g, t, sg, &y));
  }
  CHECK_OK(loom_max(g, y, 1, axis, 1, &t));
  CHECK_OK(loom_sub(g, y, t, &y));
  CHECK_OK(loom_exp(g, y, &y));
  CHECK_OK(loom_sum(g, y, 1, axis, 0, &y));
  loom_tensor_destroy(run_x(g, y, LOOM_F32, 2, shape, xv));
}

static void errors_axes(void) {
  loom_value_t x, y, v, i;
  loom_graph_t *g = graph_x(LOOM_F32, 2, s23, &x);
  static const int64_t a2[] = {2}, am3[] = {-3}, dup[] = {1, -1}, dup0[] = {0, 0};
  CHECK_ERR(loom_sum(g, x, 1, a2, 0, &y), LOOM_ERR_AXIS, "out of range");
  CHECK_ERR(loom_mean(g, x, 1, am3, 0, &y), LOOM_ERR_AXIS, "axis -3");
  CHECK_ERR(loom_max(g, x, 2, dup, 0, &y), LOOM_ERR_INVALID, "twice");
  CHECK_ERR(loom_variance(g, x, 2, dup0, 0, 0, &y), LOOM_ERR_INVALID, "twice");
  CHECK_ERR(loom_argmax(g, x, 1, 2, 0, &y), LOOM_ERR_AXIS, "argmax");
  CHECK_ERR(loom_argmin(g, x, 1, -3, 0, &y), LOOM_ERR_AXIS, "argmin");
  CHECK_ERR(loom_cumsum(g, x, 2, 0, 0, &y), LOOM_ERR_AXIS, "cumsum");
  CHECK_ERR(loom_topk(g, x, 1, 5, 1, &v, &i), LOOM_ERR_AXIS, "topk");
  CHECK(loom_graph_num_nodes(g) == 0);
  loom_graph_destroy(g);
}

static void errors_dtypes(void) {
  loom_value_t b, n, y, v, i;
  loom_graph_t *g = graph_x(LOOM_BOOL, 2, s23, &b);
  CHECK_OK(loom_graph_input(g, "n", LOOM_I32, 2, s23, &n));
  CHECK_ERR(loom_max(g, b, 0, NULL, 0, &y), LOOM_ERR_DTYPE, "bool");
  CHECK_ERR(loom_argmax(g, b, 0, 0, 0, &y), LOOM_ERR_DTYPE, "bool");
  CHECK_ERR(loom_topk(g, b, 1, -1, 1, &v, &i), LOOM_ERR_DTYPE, "bool");
  CHECK_ERR(loom_mean(g, n, 0, NULL, 0, &y), LOOM_ERR_DTYPE, "i32");
  CHECK_ERR(loom_mean(g, b, 0, NULL, 0, &y), LOOM_ERR_DTYPE, "cast it to a float dtype");
  CHECK_ERR(loom_logsumexp(g, n, 0, NULL, 0, &y), LOOM_ERR_DTYPE, "i32");
  CHECK_ERR(loom_variance(g, n, 0, NULL, 0, 0, &y), LOOM_ERR_DTYPE, "i32");
  loom_graph_destroy(g);
}

static void errors_shapes_and_values(void) {
  static const int64_t s20[] = {2, 0};
  loom_value_t x, e, s, y, v, i;
  loom_graph_t *g = graph_x(LOOM_F32, 2, s23, &x);
  CHECK_OK(loom_graph_input(g, "e", LOOM_F32, 2, s20, &e));
  CHECK_OK(loom_graph_input(g, "s", LOOM_F32, 0, NULL, &s));
  CHECK_ERR(loom_topk(g, x, 4, -1, 1, &v, &i), LOOM_ERR_SHAPE, "larger");
  CHECK_ERR(loom_topk(g, x, -1, -1, 1, &v, &i), LOOM_ERR_INVALID, "negative");
  CHECK_ERR(loom_topk(g, s, 1, -1, 1, &v, &i), LOOM_ERR_SHAPE, "rank");
  CHECK_ERR(loom_topk(g, x, 1, -1, 2, &v, &i), LOOM_ERR_INVALID, "largest");
  CHECK_ERR(loom_max(g, e, 1, ax1, 0, &y), LOOM_ERR_SHAPE, "size 0");
  CHECK_ERR(loom_min(g, e, 0, NULL, 0, &y), LOOM_ERR_SHAPE, "minimum");
  CHECK_ERR(loom_argmax(g, e, 0, 0, 0, &y), LOOM_ERR_SHAPE, "size 0");
  CHECK_ERR(loom_sum(g, x, 0, NULL, 2, &y), LOOM_ERR_INVALID, "keepdim");
  CHECK_ERR(loom_cumsum(g, x, 0, 3, 0, &y), LOOM_ERR_INVALID, "exclusive");
  CHECK_ERR(loom_cumsum(g, x, 0, 0, -1, &y), LOOM_ERR_INVALID, "reverse");
  CHECK_ERR(loom_variance(g, x, 0, NULL, 0, -1, &y), LOOM_ERR_INVALID, "correction");
  loom_graph_destroy(g);
}

static void errors_arguments(void) {
  loom_value_t x, y, v;
  loom_graph_t *g = graph_x(LOOM_F32, 2, s23, &x);
  int64_t many[17] = {0};
  CHECK_ERR(loom_sum(NULL, x, 0, NULL, 0, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_sum(g, x, 0, NULL, 0, NULL), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_variance(g, x, 0, NULL, 0, 0, NULL), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_argmax(NULL, x, 0, 0, 0, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_argmin(g, x, 0, 0, 0, NULL), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_cumsum(g, x, 0, 0, 0, NULL), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_topk(NULL, x, 1, 0, 1, &v, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_topk(g, x, 1, 0, 1, &v, NULL), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_mean(g, x, 2, NULL, 0, &y), LOOM_ERR_INVALID, "axes");
  CHECK_ERR(loom_mean(g, x, -1, ax0, 0, &y), LOOM_ERR_INVALID, "n_axes");
  CHECK_ERR(loom_sum(g, x, 17, many, 0, &y), LOOM_ERR_INVALID, "entries");
  loom_value_t bad = {12345};
  CHECK_ERR(loom_sum(g, bad, 0, NULL, 0, &y), LOOM_ERR_INVALID, "input 0");
  CHECK(loom_graph_num_nodes(g) == 0);
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(reduce_numeric_axes);
  TEST_RUN(reduce_float_axes);
  TEST_RUN(reduce_two_of_three_axes);
  TEST_RUN(reduce_scalar_and_no_axes);
  TEST_RUN(reduce_integer_wrap);
  TEST_RUN(reduce_bool);
  TEST_RUN(reduce_nan_and_stability);
  TEST_RUN(reduce_empty);
  TEST_RUN(reduce_random_against_loops);
  TEST_RUN(arg_axes_and_dtypes);
  TEST_RUN(arg_nan_and_scalar);
  TEST_RUN(cumsum_modes_and_dtypes);
  TEST_RUN(topk_modes_and_dtypes);
  TEST_RUN(topk_nan_and_big_ints);
  TEST_RUN(non_contiguous_input);
  TEST_RUN(symbolic_shapes);
  TEST_RUN(symbolic_run_time_errors);
  TEST_RUN(prologue_with_shared_values);
  TEST_RUN(errors_axes);
  TEST_RUN(errors_dtypes);
  TEST_RUN(errors_shapes_and_values);
  TEST_RUN(errors_arguments);
  return test_summary();
}
