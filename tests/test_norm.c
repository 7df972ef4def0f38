/* Pooling, softmax and normalization against hand-computed windows,
 * closed forms and statistics, in every float dtype. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static const loom_dtype_t FLOATS[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16};
#define N_FLOATS 4

/* A result computed in double and rounded once to dtype. */
static double tol(loom_dtype_t dt) { return test_rtol(dt, 2) + 1e-12; }

/* ---- Helpers ------------------------------------------------------------- */

/* Builds the op under test on x; arg carries its parameters. */
typedef loom_status_t (*build_fn)(loom_graph_t *g, loom_value_t x,
                                  const void *arg, loom_value_t *y);

/* Runs build on the tensor x (any layout); NULL on failure. */
static loom_tensor_t *run_on(loom_tensor_t *x, build_fn build, const void *arg) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t dims[LOOM_MAX_RANK];
  for (int i = 0; i < loom_tensor_rank(x); i++) dims[i] = loom_tensor_dim(x, i);
  loom_value_t xv, y;
  CHECK_OK(loom_graph_input(g, "x", loom_tensor_dtype(x), loom_tensor_rank(x), dims, &xv));
  loom_tensor_t *out = NULL;
  loom_status_t s = build(g, xv, arg, &y);
  CHECK_OK(s);
  if (s == LOOM_OK) {
    CHECK_OK(loom_graph_output(g, y));
    out = test_run1(g, 1, &x);
  }
  loom_graph_destroy(g);
  return out;
}

/* Runs build on values (row-major, shape) converted to dtype. */
static loom_tensor_t *run_values(loom_dtype_t dt, int rank, const int64_t *shape,
                                 const double *values, build_fn build,
                                 const void *arg) {
  loom_tensor_t *x = test_tensor(dt, rank, shape, values);
  loom_tensor_t *out = run_on(x, build, arg);
  loom_tensor_destroy(x);
  return out;
}

static void check_shape(const loom_tensor_t *t, int rank, const int64_t *shape) {
  CHECK(t != NULL);
  if (!t) return;
  CHECK(loom_tensor_rank(t) == rank);
  for (int i = 0; i < rank; i++) CHECK(loom_tensor_dim(t, i) == shape[i]);
}

/* Runs build on values in every float dtype; checks out_shape and want. */
static void check_all_dtypes(int rank, const int64_t *shape, const double *values,
                             build_fn build, const void *arg, int out_rank,
                             const int64_t *out_shape, const double *want) {
  int64_t n = 1;
  for (int i = 0; i < out_rank; i++) n *= out_shape[i];
  for (int k = 0; k < N_FLOATS; k++) {
    loom_tensor_t *y = run_values(FLOATS[k], rank, shape, values, build, arg);
    check_shape(y, out_rank, out_shape);
    if (y) CHECK(loom_tensor_dtype(y) == FLOATS[k]);
    CHECK_TENSOR(y, want, n, tol(FLOATS[k]), tol(FLOATS[k]));
    loom_tensor_destroy(y);
  }
}

/* values as an f32 tensor whose last two dims are stored transposed. */
static loom_tensor_t *transposed_view(int rank, const int64_t *shape,
                                      const double *values, float **storage) {
  int64_t h = shape[rank - 2], w = shape[rank - 1], n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  float *buf = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    int64_t plane = i / (h * w), r = i / w % h, col = i % w;
    buf[(plane * w + col) * h + r] = (float)values[i];
  }
  int64_t strides[LOOM_MAX_RANK];
  strides[rank - 1] = h;
  strides[rank - 2] = 1;
  int64_t step = h * w;
  for (int i = rank - 3; i >= 0; i--) {
    strides[i] = step;
    step *= shape[i];
  }
  loom_tensor_t *t = NULL;
  CHECK_OK(loom_tensor_wrap(LOOM_F32, rank, shape, strides, buf, &t));
  *storage = buf;
  return t;
}

/* The op on a non-contiguous view gives the contiguous result. */
static void check_noncontig(int rank, const int64_t *shape, const double *values,
                            build_fn build, const void *arg) {
  float *buf;
  loom_tensor_t *view = transposed_view(rank, shape, values, &buf);
  loom_tensor_t *got = run_on(view, build, arg);
  loom_tensor_t *want = run_values(LOOM_F32, rank, shape, values, build, arg);
  CHECK(got && want);
  if (got && want) {
    int64_t n = loom_tensor_numel(want);
    double *w = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) w[i] = test_get(want, i);
    CHECK_TENSOR(got, w, n, 0, 0);
    free(w);
  }
  loom_tensor_destroy(got);
  loom_tensor_destroy(want);
  loom_tensor_destroy(view);
  free(buf);
}

static loom_status_t build_max_pool(loom_graph_t *g, loom_value_t x,
                                    const void *arg, loom_value_t *y) {
  return loom_max_pool2d(g, x, arg, y);
}
static loom_status_t build_avg_pool(loom_graph_t *g, loom_value_t x,
                                    const void *arg, loom_value_t *y) {
  return loom_avg_pool2d(g, x, arg, y);
}
static loom_status_t build_global_pool(loom_graph_t *g, loom_value_t x,
                                       const void *arg, loom_value_t *y) {
  (void)arg;
  return loom_global_avg_pool(g, x, y);
}
static loom_status_t build_softmax(loom_graph_t *g, loom_value_t x,
                                   const void *arg, loom_value_t *y) {
  return loom_softmax(g, x, *(const int64_t *)arg, y);
}
static loom_status_t build_log_softmax(loom_graph_t *g, loom_value_t x,
                                       const void *arg, loom_value_t *y) {
  return loom_log_softmax(g, x, *(const int64_t *)arg, y);
}

/* layer_norm / rms_norm with constant scale and bias (NULL: absent). */
typedef struct norm_arg {
  int64_t axis;
  double eps;
  const double *scale;  /* may be NULL */
  const double *bias;   /* may be NULL */
  int param_rank;
  int64_t param_shape[LOOM_MAX_RANK];
} norm_arg_t;

/* A constant of x's dtype holding v with the norm's parameter shape. */
static loom_value_t norm_param(loom_graph_t *g, loom_value_t x,
                               const norm_arg_t *a, const double *v) {
  loom_dtype_t dt;
  CHECK_OK(loom_value_type(g, x, &dt, NULL, NULL));
  loom_tensor_t *t = test_tensor(dt, a->param_rank, a->param_shape, v);
  loom_value_t c = {-1};
  CHECK_OK(loom_graph_constant(g, t, &c));
  loom_tensor_destroy(t);
  return c;
}

static loom_status_t build_layer_norm(loom_graph_t *g, loom_value_t x,
                                      const void *arg, loom_value_t *y) {
  const norm_arg_t *a = arg;
  loom_value_t s = {-1}, b = {-1};
  if (a->scale) s = norm_param(g, x, a, a->scale);
  if (a->bias) b = norm_param(g, x, a, a->bias);
  return loom_layer_norm(g, x, a->scale != NULL, s, a->bias != NULL, b, a->axis,
                         a->eps, y);
}
static loom_status_t build_rms_norm(loom_graph_t *g, loom_value_t x,
                                    const void *arg, loom_value_t *y) {
  const norm_arg_t *a = arg;
  loom_value_t s = {-1};
  if (a->scale) s = norm_param(g, x, a, a->scale);
  return loom_rms_norm(g, x, a->scale != NULL, s, a->axis, a->eps, y);
}

/* ---- Pooling ------------------------------------------------------------- */

/* A 4x4 plane with its maximum in a different corner of each 2x2 block. */
static const double PLANE4[16] = {1, 5, 2, 0, 3, -1, 4, 6, 7, 8, -2, 9, -3, 0, 1, 2};
static const int64_t SHAPE4[4] = {1, 1, 4, 4};

static void max_pool2d_windows(void) {
  loom_pool_params_t p = {.kernel = {2, 2}};
  int64_t out22[4] = {1, 1, 2, 2};
  check_all_dtypes(4, SHAPE4, PLANE4, build_max_pool, &p, 4, out22,
                   (double[]){5, 6, 8, 9});
  /* Taps two apart: rows oh, oh+2 and columns ow, ow+2. */
  loom_pool_params_t dil = {.kernel = {2, 2}, .stride = {1, 1}, .dilation = {2, 2}};
  check_all_dtypes(4, SHAPE4, PLANE4, build_max_pool, &dil, 4, out22,
                   (double[]){7, 9, 4, 6});
  /* A 1x2 kernel on rows 0 and 2. */
  loom_pool_params_t rect = {.kernel = {1, 2}, .stride = {2, 1}};
  check_all_dtypes(4, SHAPE4, PLANE4, build_max_pool, &rect, 4, (int64_t[]){1, 1, 2, 3},
                   (double[]){5, 5, 2, 8, 8, 9});
}

/* Padding counts as -inf: an all-negative plane never yields 0. */
static void max_pool2d_padding(void) {
  double x[9] = {-1, -2, -3, -4, -5, -6, -7, -8, -9};
  loom_pool_params_t p = {.kernel = {2, 2}, .stride = {1, 1}, .pads = {1, 1, 0, 0}};
  check_all_dtypes(4, (int64_t[]){1, 1, 3, 3}, x, build_max_pool, &p, 4,
                   (int64_t[]){1, 1, 3, 3}, (double[]){-1, -1, -2, -1, -1, -2, -4, -4, -5});
  /* 3x3 windows, stride 2, padding 1 on every side. */
  loom_pool_params_t p3 = {.kernel = {3, 3}, .stride = {2, 2}, .pads = {1, 1, 1, 1}};
  check_all_dtypes(4, SHAPE4, PLANE4, build_max_pool, &p3, 4, (int64_t[]){1, 1, 2, 2},
                   (double[]){5, 6, 8, 9});
}

/* Each of six planes pools on its own. */
static void max_pool2d_planes(void) {
  double x[24];
  for (int i = 0; i < 24; i++) x[i] = i % 4 == 2 ? 100 + i : i;
  loom_pool_params_t p = {.kernel = {2, 2}};
  double want[6];
  for (int i = 0; i < 6; i++) want[i] = 100 + 4 * i + 2;
  check_all_dtypes(4, (int64_t[]){2, 3, 2, 2}, x, build_max_pool, &p, 4,
                   (int64_t[]){2, 3, 1, 1}, want);
}

static void avg_pool2d_windows(void) {
  double x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  int64_t shape[4] = {1, 1, 3, 3}, out22[4] = {1, 1, 2, 2};
  /* Windows {1}, {2,3}, {4,7}, {5,6,8,9} of a 2x2 kernel, stride 2, pad 1. */
  loom_pool_params_t excl = {.kernel = {2, 2}, .pads = {1, 1, 1, 1}};
  check_all_dtypes(4, shape, x, build_avg_pool, &excl, 4, out22,
                   (double[]){1, 2.5, 5.5, 7});
  loom_pool_params_t incl = excl;
  incl.count_include_pad = 1;
  check_all_dtypes(4, shape, x, build_avg_pool, &incl, 4, out22,
                   (double[]){0.25, 1.25, 2.75, 7});
  loom_pool_params_t whole = {.kernel = {3, 3}};
  check_all_dtypes(4, shape, x, build_avg_pool, &whole, 4, (int64_t[]){1, 1, 1, 1},
                   (double[]){5});
  loom_pool_params_t rows = {.kernel = {1, 3}};
  check_all_dtypes(4, shape, x, build_avg_pool, &rows, 4, (int64_t[]){1, 1, 3, 1},
                   (double[]){2, 5, 8});
}

static void global_avg_pool_means(void) {
  double x[24];
  for (int i = 0; i < 24; i++) x[i] = i;
  check_all_dtypes(4, (int64_t[]){2, 2, 2, 3}, x, build_global_pool, NULL, 4,
                   (int64_t[]){2, 2, 1, 1}, (double[]){2.5, 8.5, 14.5, 20.5});
  check_all_dtypes(3, (int64_t[]){1, 2, 3}, (double[]){1, 2, 3, 4, 5, 9},
                   build_global_pool, NULL, 3, (int64_t[]){1, 2, 1}, (double[]){2, 6});
  check_all_dtypes(5, (int64_t[]){1, 1, 2, 2, 2}, x, build_global_pool, NULL, 5,
                   (int64_t[]){1, 1, 1, 1, 1}, (double[]){3.5});
}

/* ---- Softmax ------------------------------------------------------------- */

static void softmax_hand(void) {
  double e1 = exp(1), e2 = exp(2), e3 = exp(3), s = e1 + e2 + e3;
  double x[6] = {1, 2, 3, 0, 0, 0};
  int64_t shape[2] = {2, 3}, last = -1, first = 0;
  check_all_dtypes(2, shape, x, build_softmax, &last, 2, shape,
                   (double[]){e1 / s, e2 / s, e3 / s, 1.0 / 3, 1.0 / 3, 1.0 / 3});
  check_all_dtypes(2, shape, x, build_softmax, &first, 2, shape,
                   (double[]){e1 / (e1 + 1), e2 / (e2 + 1), e3 / (e3 + 1),
                              1 / (e1 + 1), 1 / (e2 + 1), 1 / (e3 + 1)});
  /* e^1000 overflows a double; the max-shift must keep it finite. */
  double e4 = exp(4);
  check_all_dtypes(2, (int64_t[]){1, 2}, (double[]){1000, 1004}, build_softmax, &last,
                   2, (int64_t[]){1, 2}, (double[]){1 / (1 + e4), e4 / (1 + e4)});
}

static void softmax_rows_sum_to_one(void) {
  test_seed(11);
  int64_t shape[3] = {3, 5, 4}, axis = 1;
  for (int k = 0; k < N_FLOATS; k++) {
    loom_tensor_t *x = test_rand_tensor(FLOATS[k], 3, shape, -6, 6);
    loom_tensor_t *y = run_on(x, build_softmax, &axis);
    check_shape(y, 3, shape);
    for (int o = 0; y && o < 3; o++)
      for (int i = 0; i < 4; i++) {
        double sum = 0;
        for (int j = 0; j < 5; j++) sum += test_get(y, (o * 5 + j) * 4 + i);
        CHECK_NEAR(sum, 1.0, 5 * tol(FLOATS[k]), 0);
      }
    loom_tensor_destroy(x);
    loom_tensor_destroy(y);
  }
}

/* Rows of -inf have no maximum to shift by: NaN, like PyTorch. */
static void softmax_all_neg_inf(void) {
  int64_t shape[2] = {2, 2}, last = -1;
  double x[4] = {-INFINITY, -INFINITY, 0, -INFINITY};
  check_all_dtypes(2, shape, x, build_softmax, &last, 2, shape,
                   (double[]){NAN, NAN, 1, 0});
  check_all_dtypes(2, shape, x, build_log_softmax, &last, 2, shape,
                   (double[]){NAN, NAN, 0, -INFINITY});
}

static void log_softmax_hand(void) {
  double lse = log(exp(1) + exp(2) + exp(3));
  double x[6] = {1, 2, 3, 0, 0, 0};
  int64_t shape[2] = {2, 3}, last = -1, first = -2;
  check_all_dtypes(2, shape, x, build_log_softmax, &last, 2, shape,
                   (double[]){1 - lse, 2 - lse, 3 - lse, -log(3), -log(3), -log(3)});
  double c1 = log(exp(1) + 1);
  check_all_dtypes(2, (int64_t[]){2, 1}, (double[]){1, 0}, build_log_softmax, &first,
                   2, (int64_t[]){2, 1}, (double[]){1 - c1, -c1});
  double l4 = log1p(exp(4));
  check_all_dtypes(2, (int64_t[]){1, 2}, (double[]){1000, 1004}, build_log_softmax,
                   &last, 2, (int64_t[]){1, 2}, (double[]){-l4, 4 - l4});
  /* log_softmax is the log of softmax. */
  check_all_dtypes(1, (int64_t[]){3}, x, build_log_softmax, &last, 1, (int64_t[]){3},
                   (double[]){log(exp(1) / exp(lse)), log(exp(2) / exp(lse)),
                              log(exp(3) / exp(lse))});
}

/* ---- Layer and RMS normalization ----------------------------------------- */

static void layer_norm_statistics(void) {
  test_seed(5);
  int64_t shape[2] = {3, 16};
  norm_arg_t arg = {.axis = -1, .eps = 1e-5};
  for (int k = 0; k < N_FLOATS; k++) {
    loom_tensor_t *x = test_rand_tensor(FLOATS[k], 2, shape, -5, 7);
    loom_tensor_t *y = run_on(x, build_layer_norm, &arg);
    check_shape(y, 2, shape);
    for (int r = 0; y && r < 3; r++) {
      double mean = 0, var = 0;
      for (int j = 0; j < 16; j++) mean += test_get(y, r * 16 + j) / 16;
      for (int j = 0; j < 16; j++) var += pow(test_get(y, r * 16 + j) - mean, 2) / 16;
      CHECK_NEAR(mean, 0, 4 * tol(FLOATS[k]), 0);
      CHECK_NEAR(var, 1, 1e-4 + 4 * tol(FLOATS[k]), 0);
    }
    loom_tensor_destroy(x);
    loom_tensor_destroy(y);
  }
}

/* (x - mean) / sqrt(var + eps) * scale + bias for rows of 4. */
static void layer_norm_expect(const double *x, int rows, double eps,
                              const double *scale, const double *bias, double *want) {
  for (int r = 0; r < rows; r++) {
    const double *v = x + 4 * r;
    double mean = (v[0] + v[1] + v[2] + v[3]) / 4, var = 0;
    for (int j = 0; j < 4; j++) var += (v[j] - mean) * (v[j] - mean) / 4;
    for (int j = 0; j < 4; j++)
      want[4 * r + j] = (v[j] - mean) / sqrt(var + eps) * (scale ? scale[j] : 1) +
                        (bias ? bias[j] : 0);
  }
}

static void layer_norm_hand(void) {
  /* Row 0: mean 2.5, variance 1.25; row 1: mean 1, variance 5. */
  double x[8] = {1, 2, 3, 4, -2, 0, 2, 4};
  double scale[4] = {1, 2, 0.5, -1}, bias[4] = {0, 1, -1, 0.5};
  int64_t shape[2] = {2, 4};
  double want[8];
  norm_arg_t full = {.axis = 1, .eps = 0.75, .scale = scale,
                     .bias = bias, .param_rank = 1, .param_shape = {4}};
  layer_norm_expect(x, 2, 0.75, scale, bias, want);
  CHECK_NEAR(want[0], -1.5 / sqrt(2), 1e-15, 0); /* the formula, by hand */
  check_all_dtypes(2, shape, x, build_layer_norm, &full, 2, shape, want);
  norm_arg_t scale_only = full;
  scale_only.bias = NULL;
  layer_norm_expect(x, 2, 0.75, scale, NULL, want);
  check_all_dtypes(2, shape, x, build_layer_norm, &scale_only, 2, shape, want);
  /* axis 0 of a (2, 2, 2) tensor: the whole tensor is one group. */
  norm_arg_t all = {.axis = 0, .eps = 0, .scale = (double[]){1, 1, 1, 1, 2, 2, 2, 2},
                    .param_rank = 3, .param_shape = {2, 2, 2}};
  double y[8] = {1, 2, 3, 4, 5, 6, 7, 8}, w3[8];
  double sd = sqrt(5.25); /* variance of 1..8 */
  for (int i = 0; i < 8; i++) w3[i] = (y[i] - 4.5) / sd * (i < 4 ? 1 : 2);
  check_all_dtypes(3, (int64_t[]){2, 2, 2}, y, build_layer_norm, &all, 3,
                   (int64_t[]){2, 2, 2}, w3);
}

static void rms_norm_hand(void) {
  /* mean(x^2) = (1 + 4 + 9 + 16) / 4 = 7.5 */
  double x[4] = {1, 2, 3, 4}, scale[4] = {1, 1, 2, 0.5};
  int64_t shape[2] = {1, 4};
  double r = sqrt(7.5 + 1e-6);
  norm_arg_t with = {.axis = -1, .eps = 1e-6, .scale = scale,
                     .param_rank = 1, .param_shape = {4}};
  check_all_dtypes(2, shape, x, build_rms_norm, &with, 2, shape,
                   (double[]){1 / r, 2 / r, 6 / r, 2 / r});
  /* eps 1: sqrt(7.5 + 1) over two dims. */
  norm_arg_t plain = {.axis = 0, .eps = 1};
  double q = sqrt(8.5);
  check_all_dtypes(2, (int64_t[]){2, 2}, x, build_rms_norm, &plain, 2, (int64_t[]){2, 2},
                   (double[]){1 / q, 2 / q, 3 / q, 4 / q});
}

/* ---- Batch normalization ------------------------------------------------- */

typedef struct bn_case {
  double eps, momentum;
  int training;
} bn_case_t;

/* x (2, 2, 2): channel 0 holds {1, 2, 5, 6}, channel 1 {3, 4, 7, 8}. */
static const double BN_X[8] = {1, 2, 3, 4, 5, 6, 7, 8};
static const double BN_SCALE[2] = {2, 1}, BN_BIAS[2] = {0.5, -1};
static const double BN_MEAN[2] = {1, 2}, BN_VAR[2] = {4, 0.25};

/* Runs batch_norm on the BN_ data in dtype; outs receives y, mean, var. */
static loom_status_t run_batch_norm(loom_dtype_t dt, const bn_case_t *bc, int rank,
                                    const loom_dim_t *dims, loom_tensor_t *x,
                                    loom_tensor_t **outs) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t in[5], y, m, v;
  const double *params[4] = {BN_SCALE, BN_BIAS, BN_MEAN, BN_VAR};
  const char *names[5] = {"x", "scale", "bias", "mean", "var"};
  loom_tensor_t *t[5] = {x};
  CHECK_OK(loom_graph_input(g, names[0], dt, rank, dims, &in[0]));
  for (int i = 1; i < 5; i++) {
    t[i] = test_tensor(dt, 1, (int64_t[]){2}, params[i - 1]);
    CHECK_OK(loom_graph_input(g, names[i], dt, 1, (loom_dim_t[]){2}, &in[i]));
  }
  CHECK_OK(loom_batch_norm(g, in[0], in[1], in[2], in[3], in[4], bc->eps,
                           bc->momentum, bc->training, &y, &m, &v));
  CHECK_OK(loom_graph_output(g, y));
  CHECK_OK(loom_graph_output(g, m));
  CHECK_OK(loom_graph_output(g, v));
  loom_status_t s = loom_interpret(g, 5, t, 3, outs);
  for (int i = 1; i < 5; i++) loom_tensor_destroy(t[i]);
  loom_graph_destroy(g);
  return s;
}

static void check_batch_norm(const bn_case_t *bc, const double *want_y,
                             const double *want_mean, const double *want_var) {
  for (int k = 0; k < N_FLOATS; k++) {
    loom_tensor_t *outs[3] = {0};
    loom_tensor_t *x = test_tensor(FLOATS[k], 3, (int64_t[]){2, 2, 2}, BN_X);
    CHECK_OK(run_batch_norm(FLOATS[k], bc, 3, (loom_dim_t[]){2, 2, 2}, x, outs));
    double t = tol(FLOATS[k]);
    CHECK_TENSOR(outs[0], want_y, 8, t, t);
    CHECK_TENSOR(outs[1], want_mean, 2, t, t);
    CHECK_TENSOR(outs[2], want_var, 2, t, t);
    for (int i = 0; i < 3; i++) loom_tensor_destroy(outs[i]);
    loom_tensor_destroy(x);
  }
}

static void batch_norm_inference(void) {
  /* eps 0: channel 0 is (x - 1) / 2 * 2 + 0.5, channel 1 (x - 2) / 0.5 - 1. */
  bn_case_t bc = {.eps = 0, .momentum = 0.1, .training = 0};
  check_batch_norm(&bc, (double[]){0.5, 1.5, 1, 3, 4.5, 5.5, 9, 11}, BN_MEAN, BN_VAR);
  /* eps 12 makes the variances 16 and 12.25. */
  bn_case_t eps = {.eps = 12, .momentum = 0.5, .training = 0};
  check_batch_norm(&eps, (double[]){0.5, 1, 1 / 3.5 - 1, 2 / 3.5 - 1, 2.5, 3,
                                    5 / 3.5 - 1, 6 / 3.5 - 1},
                   BN_MEAN, BN_VAR);
}

static void batch_norm_training(void) {
  /* Both channels: mean 3.5 and 5.5, deviations +-1.5, +-2.5, biased
   * variance 17/4, unbiased 17/3. */
  bn_case_t bc = {.eps = 1e-5, .momentum = 0.1, .training = 1};
  double sd = sqrt(4.25 + 1e-5), y[8];
  for (int i = 0; i < 8; i++) {
    int ch = i / 2 % 2;
    y[i] = ch == 0 ? (BN_X[i] - 3.5) / sd * 2 + 0.5 : (BN_X[i] - 5.5) / sd - 1;
  }
  double mean[2] = {0.9 * 1 + 0.1 * 3.5, 0.9 * 2 + 0.1 * 5.5};
  double var[2] = {0.9 * 4 + 0.1 * 17 / 3, 0.9 * 0.25 + 0.1 * 17 / 3};
  check_batch_norm(&bc, y, mean, var);
  CHECK_NEAR(mean[1], 2.35, 1e-15, 0);
}

/* ---- Layouts and symbolic shapes ----------------------------------------- */

static void noncontiguous_inputs(void) {
  int64_t shape[4] = {1, 2, 3, 4};
  double x[24];
  for (int i = 0; i < 24; i++) x[i] = (i * 7) % 11 - 5;
  loom_pool_params_t maxp = {.kernel = {2, 2}, .stride = {1, 2}, .pads = {1, 0, 0, 1}};
  loom_pool_params_t avgp = {.kernel = {2, 3}, .stride = {1, 1}, .pads = {1, 1, 1, 1}};
  int64_t last = -1, mid = 2;
  norm_arg_t ln = {.axis = -2, .eps = 1e-5};
  check_noncontig(4, shape, x, build_max_pool, &maxp);
  check_noncontig(4, shape, x, build_avg_pool, &avgp);
  check_noncontig(4, shape, x, build_global_pool, NULL);
  check_noncontig(4, shape, x, build_softmax, &last);
  check_noncontig(4, shape, x, build_log_softmax, &mid);
  check_noncontig(4, shape, x, build_layer_norm, &ln);
  check_noncontig(4, shape, x, build_rms_norm, &ln);
  /* And one answer known by hand: the transposed 4x4 plane. */
  float *buf;
  loom_tensor_t *view = transposed_view(4, SHAPE4, PLANE4, &buf);
  loom_pool_params_t p = {.kernel = {2, 2}};
  loom_tensor_t *y = run_on(view, build_max_pool, &p);
  CHECK_TENSOR(y, ((double[]){5, 6, 8, 9}), 4, 0, 0);
  loom_tensor_destroy(y);
  loom_tensor_destroy(view);
  free(buf);
}

static void noncontiguous_batch_norm(void) {
  /* BN_X stored with its last two dims transposed. */
  float *buf;
  loom_tensor_t *view = transposed_view(3, (int64_t[]){2, 2, 2}, BN_X, &buf);
  loom_tensor_t *outs[3] = {0};
  bn_case_t bc = {.eps = 0, .momentum = 0.1, .training = 0};
  CHECK_OK(run_batch_norm(LOOM_F32, &bc, 3, (loom_dim_t[]){2, 2, 2}, view, outs));
  CHECK_TENSOR(outs[0], ((double[]){0.5, 1.5, 1, 3, 4.5, 5.5, 9, 11}), 8, 0, 0);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(outs[i]);
  loom_tensor_destroy(view);
  free(buf);
}

static void check_dims(loom_graph_t *g, loom_value_t v, int rank,
                       const loom_dim_t *want) {
  int r = -1;
  loom_dim_t dims[LOOM_MAX_RANK];
  CHECK_OK(loom_value_type(g, v, NULL, &r, dims));
  CHECK(r == rank);
  for (int i = 0; i < rank && i < r; i++) CHECK(dims[i] == want[i]);
}

/* Output dims follow a symbolic batch, and the graph runs at any batch. */
static void symbolic_batch(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_value_t x, mp, ap, gp, sm, ln;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, (loom_dim_t[]){n, 2, 4, 4}, &x));
  loom_pool_params_t p = {.kernel = {2, 2}};
  CHECK_OK(loom_max_pool2d(g, x, &p, &mp));
  CHECK_OK(loom_avg_pool2d(g, x, &p, &ap));
  CHECK_OK(loom_global_avg_pool(g, x, &gp));
  CHECK_OK(loom_softmax(g, x, 1, &sm));
  CHECK_OK(loom_layer_norm(g, x, 0, x, 0, x, 1, 1e-5, &ln));
  check_dims(g, mp, 4, (loom_dim_t[]){n, 2, 2, 2});
  check_dims(g, ap, 4, (loom_dim_t[]){n, 2, 2, 2});
  check_dims(g, gp, 4, (loom_dim_t[]){n, 2, 1, 1});
  check_dims(g, sm, 4, (loom_dim_t[]){n, 2, 4, 4});
  check_dims(g, ln, 4, (loom_dim_t[]){n, 2, 4, 4});
  CHECK_OK(loom_graph_output(g, gp));
  /* Each plane p of a 3-batch holds p everywhere. */
  double v[96];
  for (int i = 0; i < 96; i++) v[i] = i / 16;
  loom_tensor_t *in = test_tensor(LOOM_F32, 4, (int64_t[]){3, 2, 4, 4}, v);
  loom_tensor_t *out = test_run1(g, 1, &in);
  check_shape(out, 4, (int64_t[]){3, 2, 1, 1});
  CHECK_TENSOR(out, ((double[]){0, 1, 2, 3, 4, 5}), 6, 0, 0);
  loom_tensor_destroy(in);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

/* Pooled spatial dims become expressions of symbolic H and W. */
static void symbolic_spatial(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t h, w;
  CHECK_OK(loom_dim_symbol(g, "h", &h));
  CHECK_OK(loom_dim_symbol(g, "w", &w));
  loom_value_t x, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 4, (loom_dim_t[]){1, 1, h, w}, &x));
  loom_pool_params_t p = {.kernel = {3, 3}, .stride = {2, 2}, .pads = {1, 1, 1, 1}};
  CHECK_OK(loom_max_pool2d(g, x, &p, &y));
  CHECK_OK(loom_graph_output(g, y));
  /* floor((5 + 2 - 3) / 2) + 1 = 3 rows, floor((7 + 2 - 3) / 2) + 1 = 4 columns */
  double v[35];
  for (int i = 0; i < 35; i++) v[i] = i;
  loom_tensor_t *in = test_tensor(LOOM_F64, 4, (int64_t[]){1, 1, 5, 7}, v);
  loom_tensor_t *out = test_run1(g, 1, &in);
  check_shape(out, 4, (int64_t[]){1, 1, 3, 4});
  /* Window maxima sit at the bottom-right in-bounds tap. */
  CHECK_TENSOR(out, ((double[]){8, 10, 12, 13, 22, 24, 26, 27, 29, 31, 33, 34}), 12, 0, 0);
  loom_tensor_destroy(in);
  loom_tensor_destroy(out);
  /* A 1x7 input binds h = 1: 3 padded rows hold one window, 2 would not. */
  in = test_tensor(LOOM_F64, 4, (int64_t[]){1, 1, 1, 7}, v);
  out = test_run1(g, 1, &in);
  check_shape(out, 4, (int64_t[]){1, 1, 1, 4});
  CHECK_TENSOR(out, ((double[]){1, 3, 5, 6}), 4, 0, 0);
  loom_tensor_destroy(in);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

/* Too small a symbolic input fails at run time, naming the op. */
static void symbolic_too_small(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t h;
  CHECK_OK(loom_dim_symbol(g, "h", &h));
  loom_value_t x, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, (loom_dim_t[]){1, 1, h, 4}, &x));
  loom_pool_params_t p = {.kernel = {3, 3}};
  CHECK_OK(loom_avg_pool2d(g, x, &p, &y));
  CHECK_OK(loom_graph_output(g, y));
  /* (1 - 3) // 3 + 1 = 0 rows, which would hide the mistake. */
  loom_tensor_t *in = test_tensor(LOOM_F32, 4, (int64_t[]){1, 1, 1, 4},
                                  (double[]){1, 2, 3, 4});
  loom_tensor_t *out = NULL;
  CHECK_ERR(loom_interpret(g, 1, &in, 1, &out), LOOM_ERR_SHAPE,
            "avg_pool2d: input dim 2 is 1");
  CHECK(out == NULL);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

static void symbolic_batch_norm(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_value_t x, c[4], y, m, v;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, (loom_dim_t[]){n, 3, 2, 2}, &x));
  const char *names[4] = {"scale", "bias", "mean", "var"};
  for (int i = 0; i < 4; i++)
    CHECK_OK(loom_graph_input(g, names[i], LOOM_F32, 1, (loom_dim_t[]){3}, &c[i]));
  CHECK_OK(loom_batch_norm(g, x, c[0], c[1], c[2], c[3], 1e-5, 0.1, 1, &y, &m, &v));
  check_dims(g, y, 4, (loom_dim_t[]){n, 3, 2, 2});
  check_dims(g, m, 1, (loom_dim_t[]){3});
  check_dims(g, v, 1, (loom_dim_t[]){3});
  loom_graph_destroy(g);
}

/* ---- Errors -------------------------------------------------------------- */

/* A graph with one input of dtype and shape. */
static loom_graph_t *graph_with(loom_dtype_t dt, int rank, const loom_dim_t *dims,
                                loom_value_t *x) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", dt, rank, dims, x));
  return g;
}

static void pool_errors(void) {
  loom_value_t x, y, x3, xi;
  loom_graph_t *g = graph_with(LOOM_F32, 4, (loom_dim_t[]){1, 1, 4, 4}, &x);
  CHECK_OK(loom_graph_input(g, "x3", LOOM_F32, 3, (loom_dim_t[]){1, 4, 4}, &x3));
  CHECK_OK(loom_graph_input(g, "xi", LOOM_I32, 4, (loom_dim_t[]){1, 1, 4, 4}, &xi));
  loom_pool_params_t big = {.kernel = {5, 5}};
  CHECK_ERR(loom_max_pool2d(g, x, &big, &y), LOOM_ERR_SHAPE, "larger than the padded input");
  CHECK_ERR(loom_avg_pool2d(g, x, &big, &y), LOOM_ERR_SHAPE, "avg_pool2d");
  loom_pool_params_t dilated = {.kernel = {2, 2}, .dilation = {4, 1}};
  CHECK_ERR(loom_max_pool2d(g, x, &dilated, &y), LOOM_ERR_SHAPE, "dilation 4");
  loom_pool_params_t ok = {.kernel = {2, 2}};
  CHECK_ERR(loom_max_pool2d(g, x3, &ok, &y), LOOM_ERR_SHAPE, "rank 4");
  CHECK_ERR(loom_max_pool2d(g, xi, &ok, &y), LOOM_ERR_DTYPE, "i32");
  CHECK_ERR(loom_avg_pool2d(g, xi, &ok, &y), LOOM_ERR_DTYPE, "avg_pool2d");
  loom_pool_params_t wide_pad = {.kernel = {2, 2}, .pads = {0, 0, 0, 2}};
  CHECK_ERR(loom_max_pool2d(g, x, &wide_pad, &y), LOOM_ERR_INVALID, "half the kernel");
  loom_pool_params_t no_kernel = {.kernel = {0, 2}};
  CHECK_ERR(loom_max_pool2d(g, x, &no_kernel, &y), LOOM_ERR_INVALID, "kernel");
  loom_pool_params_t neg_stride = {.kernel = {2, 2}, .stride = {-1, 1}};
  CHECK_ERR(loom_avg_pool2d(g, x, &neg_stride, &y), LOOM_ERR_INVALID, "stride");
  loom_pool_params_t neg_pad = {.kernel = {2, 2}, .pads = {-1, 0, 0, 0}};
  CHECK_ERR(loom_avg_pool2d(g, x, &neg_pad, &y), LOOM_ERR_INVALID, "pads");
  CHECK_ERR(loom_avg_pool2d(g, x, &dilated, &y), LOOM_ERR_INVALID, "dilation");
  loom_pool_params_t bad_count = {.kernel = {2, 2}, .count_include_pad = 3};
  CHECK_ERR(loom_avg_pool2d(g, x, &bad_count, &y), LOOM_ERR_INVALID, "count_include_pad");
  CHECK_ERR(loom_max_pool2d(g, x, NULL, &y), LOOM_ERR_INVALID, "p");
  CHECK_ERR(loom_max_pool2d(NULL, x, &ok, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_avg_pool2d(g, x, &ok, NULL), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_global_avg_pool(g, xi, &y), LOOM_ERR_DTYPE, "global_avg_pool");
  CHECK_ERR(loom_global_avg_pool(NULL, x, &y), LOOM_ERR_INVALID, "null");
  loom_value_t x2;
  CHECK_OK(loom_graph_input(g, "x2", LOOM_F32, 2, (loom_dim_t[]){4, 4}, &x2));
  CHECK_ERR(loom_global_avg_pool(g, x2, &y), LOOM_ERR_SHAPE, "rank >= 3");
  CHECK(loom_graph_num_nodes(g) == 0);
  loom_graph_destroy(g);
}

static void softmax_errors(void) {
  loom_value_t x, xi, y;
  loom_graph_t *g = graph_with(LOOM_F32, 2, (loom_dim_t[]){2, 3}, &x);
  CHECK_OK(loom_graph_input(g, "xi", LOOM_I64, 2, (loom_dim_t[]){2, 3}, &xi));
  CHECK_ERR(loom_softmax(g, x, 2, &y), LOOM_ERR_AXIS, "axis 2");
  CHECK_ERR(loom_log_softmax(g, x, -3, &y), LOOM_ERR_AXIS, "log_softmax");
  CHECK_ERR(loom_softmax(g, xi, -1, &y), LOOM_ERR_DTYPE, "i64");
  CHECK_ERR(loom_log_softmax(g, xi, -1, &y), LOOM_ERR_DTYPE, "log_softmax");
  CHECK_ERR(loom_softmax(NULL, x, -1, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_log_softmax(g, x, -1, NULL), LOOM_ERR_INVALID, "null");
  loom_graph_destroy(g);
}

/* A bias without a scale: the builder supplies a scale of ones. */
static void layer_norm_bias_only(void) {
  loom_graph_t *g;
  loom_value_t x, b, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 2, (loom_dim_t[]){1, 4}, &x));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F64, 1, (loom_dim_t[]){4}, &b));
  CHECK_OK(loom_layer_norm(g, x, 0, x, 1, b, -1, 0.0, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in[2] = {test_tensor(LOOM_F64, 2, (int64_t[]){1, 4}, (double[]){1, 2, 3, 4}),
                          test_tensor(LOOM_F64, 1, (int64_t[]){4}, (double[]){1, 1, 1, 1})};
  loom_tensor_t *out = test_run1(g, 2, in);
  /* mean 2.5, variance 1.25: (x - 2.5) / sqrt(1.25) + 1 */
  double r = sqrt(1.25);
  double want[] = {1 - 1.5 / r, 1 - 0.5 / r, 1 + 0.5 / r, 1 + 1.5 / r};
  CHECK_TENSOR(out, want, 4, 1e-12, 1e-12);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

static void norm_errors(void) {
  loom_value_t x, xi, s3, s4, s4d, s24, y;
  loom_graph_t *g = graph_with(LOOM_F32, 2, (loom_dim_t[]){2, 4}, &x);
  CHECK_OK(loom_graph_input(g, "xi", LOOM_I8, 2, (loom_dim_t[]){2, 4}, &xi));
  CHECK_OK(loom_graph_input(g, "s3", LOOM_F32, 1, (loom_dim_t[]){3}, &s3));
  CHECK_OK(loom_graph_input(g, "s4", LOOM_F32, 1, (loom_dim_t[]){4}, &s4));
  CHECK_OK(loom_graph_input(g, "s4d", LOOM_F64, 1, (loom_dim_t[]){4}, &s4d));
  CHECK_OK(loom_graph_input(g, "s24", LOOM_F32, 2, (loom_dim_t[]){2, 4}, &s24));
  CHECK_ERR(loom_layer_norm(g, x, 1, s3, 0, s3, -1, 1e-5, &y), LOOM_ERR_SHAPE, "scale");
  CHECK_ERR(loom_layer_norm(g, x, 1, s4, 1, s3, -1, 1e-5, &y), LOOM_ERR_SHAPE, "bias");
  CHECK_ERR(loom_layer_norm(g, x, 1, s24, 0, s4, -1, 1e-5, &y), LOOM_ERR_SHAPE, "scale");
  CHECK_ERR(loom_layer_norm(g, x, 1, s4, 0, s4, 0, 1e-5, &y), LOOM_ERR_SHAPE, "axis 0");
  CHECK_ERR(loom_layer_norm(g, x, 1, s4d, 0, s4, -1, 1e-5, &y), LOOM_ERR_DTYPE, "f64");
  CHECK_ERR(loom_layer_norm(g, x, 0, x, 0, x, 2, 1e-5, &y), LOOM_ERR_AXIS, "axis 2");
  CHECK_ERR(loom_layer_norm(g, x, 0, x, 0, x, -1, -1, &y), LOOM_ERR_INVALID, "eps");
  CHECK_ERR(loom_layer_norm(g, xi, 0, x, 0, x, -1, 1e-5, &y), LOOM_ERR_DTYPE, "i8");
  CHECK_ERR(loom_layer_norm(NULL, x, 0, x, 0, x, -1, 1e-5, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_rms_norm(g, x, 1, s3, -1, 1e-6, &y), LOOM_ERR_SHAPE, "scale");
  CHECK_ERR(loom_rms_norm(g, x, 1, s4d, -1, 1e-6, &y), LOOM_ERR_DTYPE, "rms_norm");
  CHECK_ERR(loom_rms_norm(g, x, 0, x, -3, 1e-6, &y), LOOM_ERR_AXIS, "rms_norm");
  CHECK_ERR(loom_rms_norm(g, xi, 0, x, -1, 1e-6, &y), LOOM_ERR_DTYPE, "i8");
  CHECK_ERR(loom_rms_norm(g, x, 0, x, -1, NAN, &y), LOOM_ERR_INVALID, "eps");
  CHECK_ERR(loom_rms_norm(g, x, 0, x, -1, 1e-6, NULL), LOOM_ERR_INVALID, "null");
  CHECK(loom_graph_num_nodes(g) == 0);
  loom_graph_destroy(g);
}

static void batch_norm_errors(void) {
  loom_value_t x, x1, xi, c2, c3, d2, y, m, v;
  loom_graph_t *g = graph_with(LOOM_F32, 3, (loom_dim_t[]){2, 2, 2}, &x);
  CHECK_OK(loom_graph_input(g, "x1", LOOM_F32, 1, (loom_dim_t[]){2}, &x1));
  CHECK_OK(loom_graph_input(g, "xi", LOOM_I32, 3, (loom_dim_t[]){2, 2, 2}, &xi));
  CHECK_OK(loom_graph_input(g, "c2", LOOM_F32, 1, (loom_dim_t[]){2}, &c2));
  CHECK_OK(loom_graph_input(g, "c3", LOOM_F32, 1, (loom_dim_t[]){3}, &c3));
  CHECK_OK(loom_graph_input(g, "d2", LOOM_F64, 1, (loom_dim_t[]){2}, &d2));
  CHECK_ERR(loom_batch_norm(g, x1, c2, c2, c2, c2, 1e-5, 0.1, 0, &y, &m, &v),
            LOOM_ERR_SHAPE, "rank >= 2");
  CHECK_ERR(loom_batch_norm(g, x, c2, c2, c2, c3, 1e-5, 0.1, 0, &y, &m, &v),
            LOOM_ERR_SHAPE, "running var");
  CHECK_ERR(loom_batch_norm(g, x, c3, c2, c2, c2, 1e-5, 0.1, 0, &y, &m, &v),
            LOOM_ERR_SHAPE, "scale");
  CHECK_ERR(loom_batch_norm(g, x, c2, d2, c2, c2, 1e-5, 0.1, 0, &y, &m, &v),
            LOOM_ERR_DTYPE, "f64");
  CHECK_ERR(loom_batch_norm(g, xi, c2, c2, c2, c2, 1e-5, 0.1, 0, &y, &m, &v),
            LOOM_ERR_DTYPE, "i32");
  CHECK_ERR(loom_batch_norm(g, x, c2, c2, c2, c2, 1e-5, 0.1, 2, &y, &m, &v),
            LOOM_ERR_INVALID, "training");
  CHECK_ERR(loom_batch_norm(g, x, c2, c2, c2, c2, -1e-5, 0.1, 0, &y, &m, &v),
            LOOM_ERR_INVALID, "eps");
  CHECK_ERR(loom_batch_norm(g, x, c2, c2, c2, c2, 1e-5, 0.1, 0, &y, NULL, &v),
            LOOM_ERR_INVALID, "new_mean");
  CHECK_ERR(loom_batch_norm(NULL, x, c2, c2, c2, c2, 1e-5, 0.1, 0, &y, &m, &v),
            LOOM_ERR_INVALID, "null");
  CHECK(loom_graph_num_nodes(g) == 0);
  loom_graph_destroy(g);
  /* Training on one value per channel has no unbiased variance. */
  loom_tensor_t *x11 = test_tensor(LOOM_F32, 2, (int64_t[]){1, 2}, (double[]){1, 2});
  loom_tensor_t *outs[3] = {0};
  bn_case_t bc = {.eps = 1e-5, .momentum = 0.1, .training = 1};
  CHECK_ERR(run_batch_norm(LOOM_F32, &bc, 2, (loom_dim_t[]){1, 2}, x11, outs),
            LOOM_ERR_VALUE, "more than 1 value per channel");
  CHECK(outs[0] == NULL);
  loom_tensor_destroy(x11);
}

int main(void) {
  TEST_RUN(max_pool2d_windows);
  TEST_RUN(max_pool2d_padding);
  TEST_RUN(max_pool2d_planes);
  TEST_RUN(avg_pool2d_windows);
  TEST_RUN(global_avg_pool_means);
  TEST_RUN(softmax_hand);
  TEST_RUN(softmax_rows_sum_to_one);
  TEST_RUN(softmax_all_neg_inf);
  TEST_RUN(log_softmax_hand);
  TEST_RUN(layer_norm_statistics);
  TEST_RUN(layer_norm_hand);
  TEST_RUN(rms_norm_hand);
  TEST_RUN(batch_norm_inference);
  TEST_RUN(batch_norm_training);
  TEST_RUN(noncontiguous_inputs);
  TEST_RUN(noncontiguous_batch_norm);
  TEST_RUN(symbolic_batch);
  TEST_RUN(symbolic_spatial);
  TEST_RUN(symbolic_too_small);
  TEST_RUN(symbolic_batch_norm);
  TEST_RUN(pool_errors);
  TEST_RUN(softmax_errors);
  TEST_RUN(layer_norm_bias_only);
  TEST_RUN(norm_errors);
  TEST_RUN(batch_norm_errors);
  return test_summary();
}
