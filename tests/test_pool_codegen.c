/* Generated pooling code against the reference kernels (the interpreter):
 * many window configurations in one compiled module, every float dtype,
 * NaN and signed zeros through max pooling, a fused prologue and
 * epilogue, global average pooling, and a non-contiguous input. Max
 * pooling must match exactly; average pooling within float rounding. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "loom/ops.h"

#define MAX_CASES 64

/* One pooling node and its input. */
typedef struct pool_case {
  bool avg;
  loom_pool_params_t p;
  int64_t shape[4];
} pool_case_t;

/* A window that fits the shape rule: pads at most half the kernel, the
 * padded input at least one window. */
static pool_case_t random_case(bool avg) {
  pool_case_t c = {.avg = avg};
  for (int i = 0; i < 2; i++) {
    c.p.kernel[i] = test_rand_int(1, 4);
    c.p.stride[i] = test_rand_int(1, 3);
    c.p.dilation[i] = avg ? 1 : test_rand_int(1, 2);
    c.p.pads[i] = test_rand_int(0, c.p.kernel[i] / 2);
    c.p.pads[i + 2] = test_rand_int(0, c.p.kernel[i] / 2);
    int64_t window = c.p.dilation[i] * (c.p.kernel[i] - 1) + 1;
    int64_t min = window - c.p.pads[i] - c.p.pads[i + 2];
    c.shape[2 + i] = test_rand_int(min > 1 ? min : 1, min + 9);
  }
  c.p.count_include_pad = (int)test_rand_int(0, 1);
  c.shape[0] = test_rand_int(1, 2);
  c.shape[1] = test_rand_int(1, 3);
  return c;
}

static void add_pool(loom_graph_t *g, const pool_case_t *c, loom_value_t x, loom_value_t *y) {
  if (c->avg) CHECK_OK(loom_avg_pool2d(g, x, &c->p, y));
  else CHECK_OK(loom_max_pool2d(g, x, &c->p, y));
}

/* Bit equality, any NaN equal to any NaN. */
static bool same_value(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  return a == b && signbit(a) == signbit(b);
}

static loom_compile_options_t options(int threads) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.num_threads = threads;
  return o;
}

/* Interprets and compiles g, runs both on in, and compares every output:
 * exactly where tol[i] is EXACT, else within tol[i] relative (plus as much
 * absolute). The compiled plan must hold `groups` steps (0: any), none of
 * them a reference kernel. */
#define EXACT (-1.0)
static void check_graph(loom_graph_t *g, int n_in, loom_tensor_t **in, const double *tol,
                        int groups, int threads) {
  int n_out = loom_graph_num_outputs(g);
  loom_tensor_t *want[MAX_CASES] = {0}, *got[MAX_CASES] = {0};
  CHECK_OK(loom_interpret(g, n_in, in, n_out, want));
  loom_compile_options_t o = options(threads);
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  if (!e) return;
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  CHECK_OK(loom_executable_info(e, &info));
  CHECK(!info.interpreted);
  CHECK(info.n_reference == 0);
  if (groups) CHECK(info.n_groups == groups);
  for (int i = 0; i < n_out; i++) CHECK_OK(loom_executable_new_output(e, i, &got[i]));
  CHECK_OK(loom_executable_run(e, n_in, in, n_out, got));
  for (int i = 0; i < n_out && want[i] && got[i]; i++) {
    CHECK(loom_tensor_numel(got[i]) == loom_tensor_numel(want[i]));
    for (int64_t k = 0; k < loom_tensor_numel(want[i]); k++) {
      double a = test_get(got[i], k), b = test_get(want[i], k);
      bool exact = tol[i] == EXACT;
      if (exact ? !same_value(a, b) : !(fabs(a - b) <= tol[i] * (1 + fabs(b)))) {
        CHECK_NEAR(a, b, exact ? 0 : tol[i], 0);
        break;
      }
    }
  }
  for (int i = 0; i < n_out; i++) {
    loom_tensor_destroy(want[i]);
    loom_tensor_destroy(got[i]);
  }
  loom_executable_destroy(e);
}

/* n random configurations of one kind, each with its own input, in one
 * graph (one module, one C compiler run). */
static void random_windows(bool avg, int n, int threads) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_tensor_t *in[MAX_CASES];
  double tol[MAX_CASES] = {0};
  for (int i = 0; i < n; i++) {
    pool_case_t c = random_case(avg);
    loom_value_t x, y;
    char name[16];
    snprintf(name, sizeof name, "x%d", i);
    CHECK_OK(loom_graph_input(g, name, LOOM_F32, 4, c.shape, &x));
    add_pool(g, &c, x, &y);
    CHECK_OK(loom_graph_output(g, y));
    in[i] = test_rand_tensor(LOOM_F32, 4, c.shape, -4, 4);
    tol[i] = avg ? 2e-6 : EXACT;
  }
  check_graph(g, n, in, tol, 0, threads);
  for (int i = 0; i < n; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}

static void max_pool_windows(void) { random_windows(false, 30, 1); }

/* max_pool2d_grad over random windows (pads, strides, dilation) in one
 * module, against the reference: inputs drawn from five values so that
 * windows tie often, with NaNs among them, and a layer large enough to be
 * split over two threads. Ties go to the first input in window order, NaN
 * to the last NaN; an input that several overlapping windows pick sums
 * their gradients in f32, as PyTorch's kernel does, where the reference
 * sums in double and rounds once: within a rounding per window, while a
 * wrong pick would be off by a whole gradient. */
static void max_pool_grad_windows(void) {
  enum { N = 24 };
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_tensor_t *in[2 * N + 2];
  double tol[N + 1];
  for (int i = 0; i <= N; i++) {
    pool_case_t c = random_case(false);
    if (i == N) /* ResNet's stem pooling, on planes split over threads */
      c = (pool_case_t){.p = {.kernel = {3, 3}, .stride = {2, 2}, .pads = {1, 1, 1, 1},
                              .dilation = {1, 1}},
                        .shape = {2, 16, 32, 32}};
    loom_value_t x, y, dy, dx;
    char name[16];
    snprintf(name, sizeof name, "x%d", i);
    CHECK_OK(loom_graph_input(g, name, LOOM_F32, 4, c.shape, &x));
    CHECK_OK(loom_max_pool2d(g, x, &c.p, &y));
    loom_dtype_t dt;
    int rank;
    loom_dim_t ys[4];
    CHECK_OK(loom_value_type(g, y, &dt, &rank, ys));
    snprintf(name, sizeof name, "dy%d", i);
    CHECK_OK(loom_graph_input(g, name, LOOM_F32, 4, ys, &dy));
    CHECK_OK(loom_max_pool2d_grad(g, x, dy, &c.p, &dx));
    CHECK_OK(loom_graph_output(g, dx));
    in[2 * i] = test_rand_tensor(LOOM_F32, 4, c.shape, -2, 2);
    float *xv = loom_tensor_data(in[2 * i]);
    for (int64_t k = 0; k < loom_tensor_numel(in[2 * i]); k++)
      xv[k] = test_rand_int(0, 40) == 0 ? NAN : (float)test_rand_int(-2, 2);
    in[2 * i + 1] = test_rand_tensor(LOOM_F32, 4, ys, -1, 1);
    tol[i] = 1e-6;
  }
  check_graph(g, 2 * N + 2, in, tol, 0, 2);
  for (int i = 0; i < 2 * N + 2; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}
static void avg_pool_windows(void) { random_windows(true, 30, 1); }

/* Planes and rows large enough to be split over two threads. */
static void pool_parallel(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[4] = {2, 16, 57, 45};
  loom_pool_params_t mp = {.kernel = {3, 3}, .stride = {2, 2}, .pads = {1, 1, 1, 1}};
  loom_pool_params_t ap = {.kernel = {3, 2}, .stride = {1, 2}, .pads = {1, 0, 0, 1}};
  loom_value_t x, y1, y2;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, shape, &x));
  CHECK_OK(loom_max_pool2d(g, x, &mp, &y1));
  CHECK_OK(loom_avg_pool2d(g, x, &ap, &y2));
  CHECK_OK(loom_graph_output(g, y1));
  CHECK_OK(loom_graph_output(g, y2));
  loom_tensor_t *in = test_rand_tensor(LOOM_F32, 4, shape, -3, 3);
  check_graph(g, 1, &in, (double[]){EXACT, 2e-6}, 0, 2);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* A row wider than one accumulator block (1024 columns). */
static void pool_wide_rows(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[4] = {1, 2, 3, 2600};
  loom_pool_params_t mp = {.kernel = {2, 3}, .stride = {1, 1}, .pads = {1, 1, 0, 1}};
  loom_pool_params_t ap = {.kernel = {1, 3}, .stride = {1, 1}, .pads = {0, 1, 0, 1}};
  loom_value_t x, y1, y2;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, shape, &x));
  CHECK_OK(loom_max_pool2d(g, x, &mp, &y1));
  CHECK_OK(loom_avg_pool2d(g, x, &ap, &y2));
  CHECK_OK(loom_graph_output(g, y1));
  CHECK_OK(loom_graph_output(g, y2));
  loom_tensor_t *in = test_rand_tensor(LOOM_F32, 4, shape, -3, 3);
  check_graph(g, 1, &in, (double[]){EXACT, 2e-6}, 0, 1);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* f32, f64, f16 and bf16 through both kinds, with padding counted and
 * not, in one module. Half-precision averages may differ from the
 * reference's by one rounding of the result. */
static void pool_dtypes(void) {
  static const loom_dtype_t dtypes[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16};
  static const double rounding[] = {2e-6, 1e-12, 1e-3, 8e-3};
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[4] = {2, 3, 7, 6};
  loom_pool_params_t mp = {.kernel = {3, 3}, .stride = {2, 1}, .pads = {1, 1, 0, 1},
                           .dilation = {1, 2}};
  loom_pool_params_t a0 = {.kernel = {2, 3}, .stride = {2, 2}, .pads = {1, 1, 1, 0}};
  loom_pool_params_t a1 = a0;
  a1.count_include_pad = 1;
  loom_tensor_t *in[4];
  double tol[12];
  for (int d = 0; d < 4; d++) {
    loom_value_t x, y[3];
    char name[16];
    snprintf(name, sizeof name, "x%d", d);
    CHECK_OK(loom_graph_input(g, name, dtypes[d], 4, shape, &x));
    CHECK_OK(loom_max_pool2d(g, x, &mp, &y[0]));
    CHECK_OK(loom_avg_pool2d(g, x, &a0, &y[1]));
    CHECK_OK(loom_avg_pool2d(g, x, &a1, &y[2]));
    for (int i = 0; i < 3; i++) CHECK_OK(loom_graph_output(g, y[i]));
    in[d] = test_rand_tensor(dtypes[d], 4, shape, -2, 2);
    tol[3 * d] = EXACT;
    tol[3 * d + 1] = tol[3 * d + 2] = rounding[d];
  }
  check_graph(g, 4, in, tol, 12, 1);
  for (int d = 0; d < 4; d++) loom_tensor_destroy(in[d]);
  loom_graph_destroy(g);
}

/* NaN wins a max window; between -0 and +0 the first in window order
 * stays, as in the reference kernel. Hand-checked on a 1x1x2x4 input. */
static void max_pool_nan_and_zeros(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[4] = {1, 1, 2, 4};
  loom_pool_params_t p = {.kernel = {2, 2}};
  loom_value_t x, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, shape, &x));
  CHECK_OK(loom_max_pool2d(g, x, &p, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in = test_tensor(LOOM_F32, 4, shape,
                                  (double[]){1, NAN, -0.0, 0.0, 5, 2, 0.0, -0.0});
  check_graph(g, 1, &in, (double[]){EXACT}, 1, 1);
  loom_compile_options_t o = options(1);
  loom_executable_t *e = NULL;
  loom_tensor_t *out = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  CHECK_OK(loom_executable_new_output(e, 0, &out));
  CHECK_OK(loom_executable_run(e, 1, &in, 1, &out));
  CHECK(isnan(test_get(out, 0)));
  CHECK(test_get(out, 1) == 0 && signbit(test_get(out, 1)));
  loom_tensor_destroy(out);
  loom_executable_destroy(e);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* relu before the pool and scale + per-channel bias after it become one
 * kernel; the values match the interpreter. */
static void pool_fused_prologue_epilogue(void) {
  for (int avg = 0; avg < 2; avg++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    int64_t shape[4] = {2, 3, 9, 8}, bshape[3] = {3, 1, 1};
    loom_pool_params_t p = {.kernel = {3, 3}, .stride = {2, 2}, .pads = {1, 1, 1, 1}};
    loom_tensor_t *half = test_tensor(LOOM_F32, 0, NULL, (double[]){0.5});
    loom_tensor_t *bias = test_tensor(LOOM_F32, 3, bshape, (double[]){1, -2, 3});
    loom_value_t x, r, y, h, b, s, z;
    CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, shape, &x));
    CHECK_OK(loom_graph_constant(g, half, &h));
    CHECK_OK(loom_graph_constant(g, bias, &b));
    CHECK_OK(loom_relu(g, x, &r));
    if (avg) CHECK_OK(loom_avg_pool2d(g, r, &p, &y));
    else CHECK_OK(loom_max_pool2d(g, r, &p, &y));
    CHECK_OK(loom_mul(g, y, h, &s));
    CHECK_OK(loom_add(g, s, b, &z));
    CHECK_OK(loom_graph_output(g, z));
    loom_tensor_t *in = test_rand_tensor(LOOM_F32, 4, shape, -2, 2);
    check_graph(g, 1, &in, (double[]){avg ? 2e-6 : EXACT}, 1, 1);
    loom_tensor_destroy(in);
    loom_tensor_destroy(half);
    loom_tensor_destroy(bias);
    loom_graph_destroy(g);
  }
}

/* A prologue value that is also a graph output, and a long prologue over
 * overlapping windows, stay in their own kernels; results still match. */
static void pool_prologue_not_fused(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[4] = {1, 2, 8, 8};
  loom_pool_params_t p = {.kernel = {3, 3}, .stride = {1, 1}, .pads = {1, 1, 1, 1}};
  loom_value_t x, r, y, e1, e2, e3, e4, e5, y2;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, shape, &x));
  CHECK_OK(loom_relu(g, x, &r));
  CHECK_OK(loom_max_pool2d(g, r, &p, &y));
  CHECK_OK(loom_exp(g, x, &e1));
  CHECK_OK(loom_tanh(g, e1, &e2));
  CHECK_OK(loom_sin(g, e2, &e3));
  CHECK_OK(loom_neg(g, e3, &e4));
  CHECK_OK(loom_abs(g, e4, &e5));
  CHECK_OK(loom_avg_pool2d(g, e5, &p, &y2));
  CHECK_OK(loom_graph_output(g, y));
  CHECK_OK(loom_graph_output(g, r));
  CHECK_OK(loom_graph_output(g, y2));
  loom_tensor_t *in = test_rand_tensor(LOOM_F32, 4, shape, -2, 2);
  check_graph(g, 1, &in, (double[]){EXACT, EXACT, 2e-6}, 4, 1);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* global_avg_pool compiles to a row reduction (no reference step):
 * means of 1..n per plane, checked by hand, and against the interpreter. */
static void global_avg_pool_generated(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[4] = {2, 3, 4, 5};
  loom_value_t x, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, shape, &x));
  CHECK_OK(loom_global_avg_pool(g, x, &y));
  CHECK_OK(loom_graph_output(g, y));
  double v[120];
  for (int i = 0; i < 120; i++) v[i] = i % 20 + 1 + 100 * (i / 20);
  loom_tensor_t *in = test_tensor(LOOM_F32, 4, shape, v);
  check_graph(g, 1, &in, (double[]){1e-6}, 1, 1);
  loom_compile_options_t o = options(1);
  loom_executable_t *e = NULL;
  loom_tensor_t *out = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  CHECK_OK(loom_executable_new_output(e, 0, &out));
  CHECK_OK(loom_executable_run(e, 1, &in, 1, &out));
  for (int plane = 0; plane < 6; plane++) CHECK_NEAR(test_get(out, plane), 10.5 + 100 * plane, 1e-5, 0);
  loom_tensor_destroy(out);
  loom_executable_destroy(e);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* A transposed view (stored N, C, W, H) gives what its contiguous copy
 * gives. */
static void pool_noncontiguous_input(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[4] = {1, 2, 5, 7};
  loom_pool_params_t p = {.kernel = {3, 2}, .stride = {2, 1}, .pads = {1, 0, 1, 1}};
  loom_value_t x, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, shape, &x));
  CHECK_OK(loom_max_pool2d(g, x, &p, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *dense = test_rand_tensor(LOOM_F32, 4, shape, -1, 1);
  float stored[70]; /* (1, 2, 7, 5) */
  for (int c = 0; c < 2; c++)
    for (int h = 0; h < 5; h++)
      for (int w = 0; w < 7; w++) stored[(c * 7 + w) * 5 + h] = (float)test_get(dense, (c * 5 + h) * 7 + w);
  loom_tensor_t *view = NULL;
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 4, shape, (int64_t[]){70, 35, 1, 5}, stored, &view));
  loom_compile_options_t o = options(1);
  loom_executable_t *e = NULL;
  loom_tensor_t *a = NULL, *b = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  CHECK_OK(loom_executable_new_output(e, 0, &a));
  CHECK_OK(loom_executable_new_output(e, 0, &b));
  CHECK_OK(loom_executable_run(e, 1, &dense, 1, &a));
  CHECK_OK(loom_executable_run(e, 1, &view, 1, &b));
  for (int64_t i = 0; i < loom_tensor_numel(a); i++) CHECK(test_get(a, i) == test_get(b, i));
  loom_tensor_destroy(a);
  loom_tensor_destroy(b);
  loom_tensor_destroy(view);
  loom_tensor_destroy(dense);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

int main(void) {
  test_seed(7);
  TEST_RUN(max_pool_windows);
  TEST_RUN(max_pool_grad_windows);
  TEST_RUN(avg_pool_windows);
  TEST_RUN(pool_parallel);
  TEST_RUN(pool_wide_rows);
  TEST_RUN(pool_dtypes);
  TEST_RUN(max_pool_nan_and_zeros);
  TEST_RUN(pool_fused_prologue_epilogue);
  TEST_RUN(pool_prologue_not_fused);
  TEST_RUN(global_avg_pool_generated);
  TEST_RUN(pool_noncontiguous_input);
  return test_summary();
}
