/* Contractions: matmul, conv2d and conv_transpose2d against hand-computed
 * cases, a direct convolution written here, and the adjoint identity
 * between conv2d and conv_transpose2d. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/ir.h"
#include "loom/ops.h"

static const loom_dtype_t numeric[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16,
                                       LOOM_I8,  LOOM_I32, LOOM_I64};
static const loom_dtype_t floats[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int64_t numel(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  return n;
}

/* Runs a graph on inputs and checks the output's shape (out_rank dims). */
static loom_tensor_t *run_shape(loom_graph_t *g, int n_in, loom_tensor_t **in,
                                int out_rank, const int64_t *out_shape) {
  loom_tensor_t *y = test_run1(g, n_in, in);
  if (!y) return NULL;
  CHECK(loom_tensor_rank(y) == out_rank);
  for (int i = 0; i < out_rank && i < loom_tensor_rank(y); i++)
    CHECK(loom_tensor_dim(y, i) == out_shape[i]);
  return y;
}

static void destroy_all(loom_tensor_t **t, int n) {
  for (int i = 0; i < n; i++) loom_tensor_destroy(t[i]);
}

/* ---- matmul -------------------------------------------------------------- */

typedef struct mm_case {
  int ra, rb;
  int64_t sa[LOOM_MAX_RANK], sb[LOOM_MAX_RANK];
  int trans_a, trans_b;
} mm_case_t;

/* a @ b on the given data; checks the output shape and values. */
static void check_matmul(loom_dtype_t dt, const mm_case_t *m, const double *va,
                         const double *vb, int ry, const int64_t *sy,
                         const double *want) {
  loom_graph_t *g;
  loom_value_t a, b, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "a", dt, m->ra, m->sa, &a));
  CHECK_OK(loom_graph_input(g, "b", dt, m->rb, m->sb, &b));
  CHECK_OK(loom_matmul(g, a, b, m->trans_a, m->trans_b, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in[2] = {test_tensor(dt, m->ra, m->sa, va),
                          test_tensor(dt, m->rb, m->sb, vb)};
  loom_tensor_t *out = run_shape(g, 2, in, ry, sy);
  CHECK_TENSOR(out, want, numel(ry, sy), 0, test_rtol(dt, 1));
  destroy_all(in, 2);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

static const double mat_a[] = {1, 2, 3, 4, 5, 6};      /* (2, 3) */
static const double mat_at[] = {1, 4, 2, 5, 3, 6};     /* its transpose */
static const double mat_b[] = {7, 8, -9, 10, 11, -12}; /* (3, 2) */
static const double mat_bt[] = {7, -9, 11, 8, 10, -12};

/* [[1,2,3],[4,5,6]] @ [[7,8],[-9,10],[11,-12]] = [[22,-8],[49,10]]. */
static void matmul_by_hand_every_dtype(void) {
  mm_case_t m = {2, 2, {2, 3}, {3, 2}, 0, 0};
  int64_t sy[] = {2, 2};
  double want[] = {22, -8, 49, 10};
  for (int d = 0; d < COUNT(numeric); d++)
    check_matmul(numeric[d], &m, mat_a, mat_b, 2, sy, want);
}

/* i8 products wrap on store: 10*13 + 1*0 = 130 -> -126; 100+100 -> -56. */
static void matmul_integer_wraps(void) {
  mm_case_t m = {2, 2, {1, 2}, {2, 2}, 0, 0};
  double va[] = {10, 1}, vb[] = {13, 10, 0, 100};
  int64_t sy[] = {1, 2};
  double want_i8[] = {-126, -56}, want_i32[] = {130, 200};
  check_matmul(LOOM_I8, &m, va, vb, 2, sy, want_i8);
  check_matmul(LOOM_I32, &m, va, vb, 2, sy, want_i32);
}

static void matmul_trans(void) {
  int64_t sy[] = {2, 2};
  double want[] = {22, -8, 49, 10};
  mm_case_t ta = {2, 2, {3, 2}, {3, 2}, 1, 0};
  mm_case_t tb = {2, 2, {2, 3}, {2, 3}, 0, 1};
  mm_case_t both = {2, 2, {3, 2}, {2, 3}, 1, 1};
  for (int d = 0; d < COUNT(numeric); d++) {
    check_matmul(numeric[d], &ta, mat_at, mat_b, 2, sy, want);
    check_matmul(numeric[d], &tb, mat_a, mat_bt, 2, sy, want);
    check_matmul(numeric[d], &both, mat_at, mat_bt, 2, sy, want);
  }
  /* A 1-D operand has no dims to swap: the flag leaves it alone. */
  mm_case_t vec = {1, 2, {3}, {2, 3}, 1, 1};
  double v[] = {1, 1, 1}, want_v[] = {9, 6};
  int64_t sv[] = {2};
  check_matmul(LOOM_F32, &vec, v, mat_bt, 1, sv, want_v);
}

static void matmul_one_dim(void) {
  for (int d = 0; d < COUNT(numeric); d++) {
    loom_dtype_t dt = numeric[d];
    double u[] = {1, 2, 3}, w[] = {4, -5, 6};
    mm_case_t dot = {1, 1, {3}, {3}, 0, 0};
    double want_dot[] = {12};
    check_matmul(dt, &dot, u, w, 0, NULL, want_dot);
    mm_case_t vm = {1, 2, {3}, {3, 2}, 0, 0};
    double want_vm[] = {22, -8};
    int64_t s2[] = {2};
    check_matmul(dt, &vm, u, mat_b, 1, s2, want_vm);
    mm_case_t mv = {2, 1, {2, 3}, {3}, 0, 0};
    double want_mv[] = {12, 27};
    check_matmul(dt, &mv, mat_a, w, 1, s2, want_mv);
  }
  /* A 1-D a against a batch of matrices: (3) @ (2, 3, 2) -> (2, 2). */
  mm_case_t vb = {1, 3, {3}, {2, 3, 2}, 0, 0};
  double u[] = {1, 2, 3}, bb[12];
  for (int i = 0; i < 6; i++) bb[i] = mat_b[i], bb[6 + i] = 2 * mat_b[i];
  double want[] = {22, -8, 44, -16};
  int64_t sy[] = {2, 2};
  check_matmul(LOOM_F64, &vb, u, bb, 2, sy, want);
}

/* The product written out here, with NumPy batch broadcasting. */
static void matmul_direct(const mm_case_t *m, const double *a, const double *b,
                          int ry, const int64_t *sy, double *y) {
  int64_t M = sy[ry - 2], N = sy[ry - 1], K = m->sa[m->ra - 1];
  int br = ry - 2;
  int64_t nb = numel(br, sy);
  for (int64_t bi = 0; bi < nb; bi++) {
    int64_t ia = 0, ib = 0, rest = bi, idx[LOOM_MAX_RANK];
    for (int d = br - 1; d >= 0; d--) idx[d] = rest % sy[d], rest /= sy[d];
    for (int d = 0; d < m->ra - 2; d++) {
      int64_t s = m->sa[d];
      ia = ia * s + (s == 1 ? 0 : idx[d + br - (m->ra - 2)]);
    }
    for (int d = 0; d < m->rb - 2; d++) {
      int64_t s = m->sb[d];
      ib = ib * s + (s == 1 ? 0 : idx[d + br - (m->rb - 2)]);
    }
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double acc = 0;
        for (int64_t k = 0; k < K; k++)
          acc += a[(ia * M + i) * K + k] * b[(ib * K + k) * N + j];
        y[(bi * M + i) * N + j] = acc;
      }
  }
}

static void random_values(double *v, int64_t n) {
  for (int64_t i = 0; i < n; i++) v[i] = (double)test_rand_int(-4, 4);
}

/* (2, 1, 3, 4) @ (5, 4, 2) -> (2, 5, 3, 2), small integers: exact. */
static void matmul_batched_broadcast(void) {
  test_seed(11);
  mm_case_t m = {4, 3, {2, 1, 3, 4}, {5, 4, 2}, 0, 0};
  int64_t sy[] = {2, 5, 3, 2};
  double a[24], b[40], want[60];
  random_values(a, 24);
  random_values(b, 40);
  matmul_direct(&m, a, b, 4, sy, want);
  for (int d = 0; d < COUNT(numeric); d++)
    check_matmul(numeric[d], &m, a, b, 4, sy, want);
  /* Batch dims of 1 on a's side: (1, 3, 4) @ (5, 4, 2) -> (5, 3, 2). */
  mm_case_t m1 = {3, 3, {1, 3, 4}, {5, 4, 2}, 0, 0};
  int64_t s1[] = {5, 3, 2};
  double want1[30];
  matmul_direct(&m1, a, b, 3, s1, want1);
  check_matmul(LOOM_F32, &m1, a, b, 3, s1, want1);
}

/* a given as a transposed view of user memory, in every numeric dtype:
 * the same result as the contiguous a. */
static void matmul_noncontiguous(void) {
  for (int d = 0; d < COUNT(numeric); d++) {
    loom_dtype_t dt = numeric[d];
    loom_graph_t *g;
    loom_value_t a, b, y;
    int64_t sa[] = {2, 3}, sb[] = {3, 2}, stride[] = {1, 2};
    CHECK_OK(loom_graph_create(&g));
    CHECK_OK(loom_graph_input(g, "a", dt, 2, sa, &a));
    CHECK_OK(loom_graph_input(g, "b", dt, 2, sb, &b));
    CHECK_OK(loom_matmul(g, a, b, 0, 0, &y));
    CHECK_OK(loom_graph_output(g, y));
    /* The transpose's memory, stored contiguous as (3, 2). */
    int64_t st[] = {3, 2};
    loom_tensor_t *at = test_tensor(dt, 2, st, mat_at), *view = NULL;
    CHECK_OK(loom_tensor_wrap(dt, 2, sa, stride, loom_tensor_data(at), &view));
    loom_tensor_t *in[2] = {view, test_tensor(dt, 2, sb, mat_b)};
    loom_tensor_t *out = run_shape(g, 2, in, 2, (int64_t[]){2, 2});
    double want[] = {22, -8, 49, 10};
    CHECK_TENSOR(out, want, 4, 0, 0);
    destroy_all(in, 2);
    loom_tensor_destroy(at);
    loom_tensor_destroy(out);
    loom_graph_destroy(g);
  }
}

/* (n, 1, 3, 4) @ (5, 4, 2): the type is (n, 5, 3, 2) before any run. */
static void matmul_symbolic_batch(void) {
  loom_graph_t *g;
  loom_value_t a, b, y;
  loom_dim_t n, dims[LOOM_MAX_RANK];
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_dim_t da[] = {n, 1, 3, 4}, db[] = {5, 4, 2};
  CHECK_OK(loom_graph_input(g, "a", LOOM_F32, 4, da, &a));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F32, 3, db, &b));
  CHECK_OK(loom_matmul(g, a, b, 0, 0, &y));
  int rank = 0;
  CHECK_OK(loom_value_type(g, y, NULL, &rank, dims));
  CHECK(rank == 4 && dims[0] == n && dims[1] == 5 && dims[2] == 3 && dims[3] == 2);
  CHECK_OK(loom_graph_output(g, y));
  test_seed(12);
  mm_case_t m = {4, 3, {2, 1, 3, 4}, {5, 4, 2}, 0, 0};
  int64_t sy[] = {2, 5, 3, 2};
  double va[24], vb[40], want[60];
  random_values(va, 24);
  random_values(vb, 40);
  matmul_direct(&m, va, vb, 4, sy, want);
  loom_tensor_t *in[2] = {test_tensor(LOOM_F32, 4, m.sa, va),
                          test_tensor(LOOM_F32, 3, m.sb, vb)};
  loom_tensor_t *out = run_shape(g, 2, in, 4, sy);
  CHECK_TENSOR(out, want, 60, 0, 0);
  destroy_all(in, 2);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

/* Builds a @ b on inputs of the given types; returns the status. */
static loom_status_t try_matmul(loom_dtype_t da, int ra, const int64_t *sa,
                                loom_dtype_t db, int rb, const int64_t *sb,
                                int trans_a) {
  loom_graph_t *g;
  loom_value_t a, b, y;
  loom_graph_create(&g);
  loom_graph_input(g, "a", da, ra, sa, &a);
  loom_graph_input(g, "b", db, rb, sb, &b);
  loom_status_t s = loom_matmul(g, a, b, trans_a, 0, &y);
  loom_graph_destroy(g);
  return s;
}

static void matmul_errors(void) {
  int64_t s23[] = {2, 3}, s42[] = {4, 2}, s32[] = {3, 2}, s5[] = {5};
  int64_t s234[] = {2, 3, 4}, s542[] = {5, 4, 2};
  CHECK_ERR(try_matmul(LOOM_F32, 2, s23, LOOM_F32, 2, s42, 0), LOOM_ERR_SHAPE, "contracted");
  CHECK_ERR(try_matmul(LOOM_F32, 2, s23, LOOM_F32, 2, s42, 0), LOOM_ERR_SHAPE, "f32[2, 3]");
  CHECK_ERR(try_matmul(LOOM_F32, 2, s23, LOOM_F32, 2, s42, 0), LOOM_ERR_SHAPE, "f32[4, 2]");
  CHECK_ERR(try_matmul(LOOM_F32, 2, s23, LOOM_F32, 2, s32, 1), LOOM_ERR_SHAPE, "contracted");
  CHECK_ERR(try_matmul(LOOM_F32, 1, s5, LOOM_F32, 2, s32, 0), LOOM_ERR_SHAPE, "contracted");
  CHECK_ERR(try_matmul(LOOM_F32, 3, s234, LOOM_F32, 3, s542, 0), LOOM_ERR_SHAPE, "broadcast");
  CHECK_ERR(try_matmul(LOOM_F32, 0, s5, LOOM_F32, 2, s32, 0), LOOM_ERR_SHAPE, "rank");
  CHECK_ERR(try_matmul(LOOM_F32, 2, s23, LOOM_F64, 2, s32, 0), LOOM_ERR_DTYPE, "f64");
  CHECK_ERR(try_matmul(LOOM_I32, 2, s23, LOOM_I64, 2, s32, 0), LOOM_ERR_DTYPE, "cast");
  CHECK_ERR(try_matmul(LOOM_BOOL, 2, s23, LOOM_BOOL, 2, s32, 0), LOOM_ERR_DTYPE, "bool");
  loom_graph_t *g;
  loom_value_t a;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "a", LOOM_F32, 2, s23, &a));
  CHECK_ERR(loom_matmul(g, a, a, 0, 1, NULL), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_matmul(NULL, a, a, 0, 1, &a), LOOM_ERR_INVALID, "null");
  loom_graph_destroy(g);
}

/* ---- Convolutions: helpers ----------------------------------------------- */

typedef struct conv_case {
  int64_t xs[4], ws[4];
  int has_bias;
  loom_conv_params_t p;
} conv_case_t;

static int64_t param_or_one(int64_t v) { return v ? v : 1; }

/* conv2d's output shape, computed here. */
static void conv_out_shape(const conv_case_t *k, int64_t *ys) {
  const loom_conv_params_t *p = &k->p;
  ys[0] = k->xs[0];
  ys[1] = k->ws[0];
  for (int a = 0; a < 2; a++) {
    int64_t s = param_or_one(p->stride[a]), d = param_or_one(p->dilation[a]);
    ys[2 + a] = (k->xs[2 + a] + p->pads[a] + p->pads[a + 2] - d * (k->ws[2 + a] - 1) - 1) / s + 1;
  }
}

/* conv2d written out directly: for every output element, the sum over
 * the channels of its group and the kernel taps that land inside x. */
static void conv2d_direct(const conv_case_t *k, const double *x, const double *w,
                          const double *bias, double *y) {
  const int64_t *xs = k->xs, *ws = k->ws;
  int64_t ys[4], groups = param_or_one(k->p.groups);
  conv_out_shape(k, ys);
  int64_t sh = param_or_one(k->p.stride[0]), sw = param_or_one(k->p.stride[1]);
  int64_t dh = param_or_one(k->p.dilation[0]), dw = param_or_one(k->p.dilation[1]);
  int64_t per_group = ws[0] / groups;
  for (int64_t n = 0; n < ys[0]; n++)
    for (int64_t o = 0; o < ys[1]; o++)
      for (int64_t oh = 0; oh < ys[2]; oh++)
        for (int64_t ow = 0; ow < ys[3]; ow++) {
          double acc = bias ? bias[o] : 0;
          for (int64_t ci = 0; ci < ws[1]; ci++)
            for (int64_t i = 0; i < ws[2]; i++)
              for (int64_t j = 0; j < ws[3]; j++) {
                int64_t c = (o / per_group) * ws[1] + ci;
                int64_t ih = oh * sh - k->p.pads[0] + i * dh;
                int64_t iw = ow * sw - k->p.pads[1] + j * dw;
                if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3]) continue;
                acc += x[((n * xs[1] + c) * xs[2] + ih) * xs[3] + iw] *
                       w[((o * ws[1] + ci) * ws[2] + i) * ws[3] + j];
              }
          y[((n * ys[1] + o) * ys[2] + oh) * ys[3] + ow] = acc;
        }
}

/* A graph of one convolution (conv2d or transposed) on inputs x, w and
 * optionally bias of dtype dt and the given shapes. */
static loom_graph_t *conv_graph(bool transpose, loom_dtype_t dt,
                                const int64_t *xs, const int64_t *ws,
                                int64_t bias_len, const loom_conv_params_t *p) {
  loom_graph_t *g;
  loom_value_t x, w, b = {0}, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", dt, 4, xs, &x));
  CHECK_OK(loom_graph_input(g, "w", dt, 4, ws, &w));
  if (bias_len) CHECK_OK(loom_graph_input(g, "bias", dt, 1, &bias_len, &b));
  if (transpose) CHECK_OK(loom_conv_transpose2d(g, x, w, bias_len > 0, b, p, &y));
  else CHECK_OK(loom_conv2d(g, x, w, bias_len > 0, b, p, &y));
  CHECK_OK(loom_graph_output(g, y));
  return g;
}

/* Runs one convolution on given values; checks shape and values. */
static void check_conv(bool transpose, loom_dtype_t dt, const conv_case_t *k,
                       const double *x, const double *w, const double *bias,
                       const int64_t *ys, const double *want, double rtol) {
  int64_t nb = transpose ? k->ws[1] * param_or_one(k->p.groups) : k->ws[0];
  loom_graph_t *g = conv_graph(transpose, dt, k->xs, k->ws, k->has_bias ? nb : 0, &k->p);
  loom_tensor_t *in[3] = {test_tensor(dt, 4, k->xs, x), test_tensor(dt, 4, k->ws, w),
                          k->has_bias ? test_tensor(dt, 1, &nb, bias) : NULL};
  loom_tensor_t *out = run_shape(g, k->has_bias ? 3 : 2, in, 4, ys);
  CHECK_TENSOR(out, want, numel(4, ys), 1e-12, rtol);
  destroy_all(in, 3);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

/* ---- conv2d -------------------------------------------------------------- */

/* x = 1..9 (3x3), w = [[1,2],[3,4]]: each output is a 2x2 window dotted
 * with w, e.g. 1*1 + 2*2 + 4*3 + 5*4 = 37. */
static void conv2d_by_hand(void) {
  conv_case_t k = {{1, 1, 3, 3}, {1, 1, 2, 2}, 0, {.groups = 1}};
  double x[] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[] = {1, 2, 3, 4};
  int64_t ys[] = {1, 1, 2, 2};
  double want[] = {37, 47, 67, 77};
  for (int d = 0; d < COUNT(floats); d++)
    check_conv(false, floats[d], &k, x, w, NULL, ys, want, 0);
}

/* stride 2, pads (top 1, left 0, bottom 0, right 1), dilation 2, groups 2,
 * bias (10, -10); x channel c holds 16c + 4r + col + 1. Ho = (4+1-2-1)//2+1
 * = 2, Wo = (4+1-2-1)//2+1 = 2. Output row 0 reads x row 1 only (tap 1),
 * row 1 reads rows 1 and 3; column 0 reads columns 0 and 2, column 1
 * column 2 only. E.g. y[0,0,0] = 3*x[1,0] + 4*x[1,2] + 10 = 15+28+10. */
static void conv2d_by_hand_all_params(void) {
  conv_case_t k = {{1, 2, 4, 4}, {2, 1, 2, 2}, 1,
                   {.stride = {2, 2}, .pads = {1, 0, 0, 1}, .dilation = {2, 2}, .groups = 2}};
  double x[32], w[] = {1, 2, 3, 4, 1, -1, -1, 2}, bias[] = {10, -10};
  for (int i = 0; i < 32; i++) x[i] = i + 1;
  int64_t ys[] = {1, 2, 2, 2};
  double want[] = {53, 31, 128, 62, 15, -33, 21, -18};
  for (int d = 0; d < COUNT(floats); d++)
    check_conv(false, floats[d], &k, x, w, bias, ys, want, 0);
  double direct[8];
  conv2d_direct(&k, x, w, bias, direct);
  for (int i = 0; i < 8; i++) CHECK_NEAR(direct[i], want[i], 0, 0);
}

static const conv_case_t random_cases[] = {
    {{2, 3, 6, 5}, {4, 3, 3, 3}, 1, {.groups = 1}},
    {{1, 4, 7, 6}, {6, 2, 3, 2}, 1, {.stride = {2, 3}, .pads = {1, 0, 2, 1}, .dilation = {2, 1}, .groups = 2}},
    {{2, 6, 5, 5}, {6, 1, 2, 3}, 0, {.stride = {1, 2}, .pads = {0, 2, 1, 0}, .dilation = {1, 2}, .groups = 6}},
    {{1, 2, 4, 9}, {3, 2, 1, 4}, 1, {.stride = {3, 1}, .pads = {2, 1, 2, 1}, .groups = 1}},
};

/* A tensor of random values in dt, and the values it holds as doubles. */
static loom_tensor_t *rand_tensor(loom_dtype_t dt, int rank, const int64_t *shape,
                                  double *values) {
  loom_tensor_t *t = test_rand_tensor(dt, rank, shape, -1, 1);
  for (int64_t i = 0; i < numel(rank, shape); i++) values[i] = test_get(t, i);
  return t;
}

/* The kernel against conv2d_direct on random data, every float dtype; the
 * sums are exact up to the one rounding of the output to the dtype. */
static void conv2d_matches_direct(void) {
  test_seed(21);
  for (int c = 0; c < COUNT(random_cases); c++)
    for (int d = 0; d < COUNT(floats); d++) {
      const conv_case_t *k = &random_cases[c];
      loom_dtype_t dt = floats[d];
      int64_t ys[4], nb = k->ws[0];
      conv_out_shape(k, ys);
      double *x = malloc(sizeof(double) * (size_t)numel(4, k->xs));
      double *w = malloc(sizeof(double) * (size_t)numel(4, k->ws));
      double *want = malloc(sizeof(double) * (size_t)numel(4, ys)), bias[8];
      loom_tensor_t *in[3] = {rand_tensor(dt, 4, k->xs, x), rand_tensor(dt, 4, k->ws, w),
                              rand_tensor(dt, 1, &nb, bias)};
      conv2d_direct(k, x, w, k->has_bias ? bias : NULL, want);
      loom_graph_t *g = conv_graph(false, dt, k->xs, k->ws, k->has_bias ? nb : 0, &k->p);
      loom_tensor_t *out = run_shape(g, k->has_bias ? 3 : 2, in, 4, ys);
      CHECK_TENSOR(out, want, numel(4, ys), 1e-12, test_rtol(dt, 2));
      destroy_all(in, 3);
      loom_tensor_destroy(out);
      loom_graph_destroy(g);
      free(x), free(w), free(want);
    }
}

/* x given in NHWC memory through NCHW strides, every float dtype: the same
 * result as the contiguous x. */
static void conv2d_noncontiguous(void) {
  test_seed(22);
  const conv_case_t *k = &random_cases[1];
  for (int d = 0; d < COUNT(floats); d++) {
    loom_dtype_t dt = floats[d];
    const int64_t *xs = k->xs;
    int64_t nhwc[] = {xs[0], xs[2], xs[3], xs[1]}, ys[4], nb = k->ws[0];
    int64_t strides[] = {xs[1] * xs[2] * xs[3], 1, xs[3] * xs[1], xs[1]};
    conv_out_shape(k, ys);
    double xv[168], w[72], bias[8];
    loom_tensor_t *xt = rand_tensor(dt, 4, nhwc, xv), *view = NULL;
    CHECK_OK(loom_tensor_wrap(dt, 4, xs, strides, loom_tensor_data(xt), &view));
    loom_tensor_t *contig = NULL;
    double xc[168];
    for (int64_t i = 0; i < numel(4, xs); i++) xc[i] = test_get(view, i);
    contig = test_tensor(dt, 4, xs, xc);
    loom_tensor_t *wt = rand_tensor(dt, 4, k->ws, w), *bt = rand_tensor(dt, 1, &nb, bias);
    loom_graph_t *g = conv_graph(false, dt, xs, k->ws, nb, &k->p);
    loom_tensor_t *a = run_shape(g, 3, (loom_tensor_t *[]){view, wt, bt}, 4, ys);
    loom_tensor_t *b = run_shape(g, 3, (loom_tensor_t *[]){contig, wt, bt}, 4, ys);
    double want[72];
    int64_t n = numel(4, ys);
    for (int64_t i = 0; i < n && b; i++) want[i] = test_get(b, i);
    CHECK_TENSOR(a, want, n, 0, 0);
    loom_tensor_t *all[] = {xt, view, contig, wt, bt, a, b};
    destroy_all(all, 7);
    loom_graph_destroy(g);
  }
}

/* x (n, 2, h, 5): N and H symbolic; runs with two different sizes. */
static void conv2d_symbolic(void) {
  loom_graph_t *g;
  loom_value_t x, w, y;
  loom_dim_t n, h, dims[4];
  loom_conv_params_t p = {.stride = {2, 2}, .pads = {1, 1, 1, 1}};
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_symbol(g, "h", &h));
  loom_dim_t xd[] = {n, 2, h, 5}, wd[] = {4, 2, 3, 3};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 4, xd, &x));
  CHECK_OK(loom_graph_input(g, "w", LOOM_F64, 4, wd, &w));
  CHECK_OK(loom_conv2d(g, x, w, 0, x, &p, &y));
  CHECK_OK(loom_value_type(g, y, NULL, NULL, dims));
  CHECK(dims[0] == n && dims[1] == 4 && dims[2] < 0 && dims[3] == 3);
  CHECK_OK(loom_graph_output(g, y));
  test_seed(23);
  for (int64_t hv = 8; hv <= 9; hv++) {
    conv_case_t k = {{3, 2, hv, 5}, {4, 2, 3, 3}, 0, p};
    int64_t ys[4];
    conv_out_shape(&k, ys);
    CHECK(ys[2] == (hv == 8 ? 4 : 5));
    double xv[270], wv[72], want[180];
    loom_tensor_t *in[2] = {rand_tensor(LOOM_F64, 4, k.xs, xv),
                            rand_tensor(LOOM_F64, 4, k.ws, wv)};
    conv2d_direct(&k, xv, wv, NULL, want);
    loom_tensor_t *out = run_shape(g, 2, in, 4, ys);
    CHECK_TENSOR(out, want, numel(4, ys), 1e-12, 1e-12);
    destroy_all(in, 2);
    loom_tensor_destroy(out);
  }
  loom_graph_destroy(g);
}

/* ---- conv_transpose2d ---------------------------------------------------- */

/* x = [[1,2],[3,4]] scatters x[i][j] * w into the window at (i, j):
 * y[1][1] = 1*4 + 2*3 + 3*2 + 4*1 = 20; the entries sum to 10 * 10. */
static void conv_transpose2d_by_hand(void) {
  conv_case_t k = {{1, 1, 2, 2}, {1, 1, 2, 2}, 0, {.groups = 1}};
  double x[] = {1, 2, 3, 4}, w[] = {1, 2, 3, 4};
  int64_t ys[] = {1, 1, 3, 3};
  double want[] = {1, 4, 4, 6, 20, 16, 9, 24, 16};
  for (int d = 0; d < COUNT(floats); d++)
    check_conv(true, floats[d], &k, x, w, NULL, ys, want, 0);
}

/* stride 2, pads (top 1, others 0), output_padding (1, 0), groups 2,
 * bias (0.5, -1). Without padding each input pixel owns a 2x2 block of a
 * 4x4 output; the top pad drops row 0 and the output padding adds an
 * untouched last row (bias only). Ho = (2-1)*2 - 1 + 1 + 1 + 1 = 4. */
static void conv_transpose2d_by_hand_all_params(void) {
  conv_case_t k = {{1, 2, 2, 2}, {2, 1, 2, 2}, 1,
                   {.stride = {2, 2}, .pads = {1, 0, 0, 0}, .output_padding = {1, 0}, .groups = 2}};
  double x[] = {1, 2, 3, 4, -1, 0, 2, 1}, w[] = {1, 2, 3, 4, 0, 1, 1, 0};
  double bias[] = {0.5, -1};
  int64_t ys[] = {1, 2, 4, 4};
  double want[] = {3.5, 4.5, 6.5, 8.5, 3.5, 6.5, 4.5, 8.5,
                   9.5, 12.5, 12.5, 16.5, 0.5, 0.5, 0.5, 0.5,
                   -2, -1, -1, -1, -1, 1, -1, 0,
                   1, -1, 0, -1, -1, -1, -1, -1};
  for (int d = 0; d < COUNT(floats); d++)
    check_conv(true, floats[d], &k, x, w, bias, ys, want, 0);
}

static double dot(const loom_tensor_t *a, const loom_tensor_t *b) {
  double s = 0;
  for (int64_t i = 0; i < loom_tensor_numel(a); i++) s += test_get(a, i) * test_get(b, i);
  return s;
}

/* Runs one convolution without bias on tensors x and w. */
static loom_tensor_t *run_conv(bool transpose, loom_dtype_t dt, const int64_t *xs,
                               loom_tensor_t *x, const int64_t *ws, loom_tensor_t *w,
                               const loom_conv_params_t *p) {
  loom_graph_t *g = conv_graph(transpose, dt, xs, ws, 0, p);
  loom_tensor_t *y = test_run1(g, 2, (loom_tensor_t *[]){x, w});
  loom_graph_destroy(g);
  return y;
}

/* <conv2d(x, w), y> == <x, conv_transpose2d(y, w)>: the transposed
 * convolution is the adjoint of conv2d, with output_padding making up the
 * rows and columns that conv2d's stride skipped. */
static void conv_transpose2d_adjoint(void) {
  test_seed(31);
  for (int c = 0; c < COUNT(random_cases); c++)
    for (int d = 0; d < 2; d++) {
      loom_dtype_t dt = d ? LOOM_F32 : LOOM_F64;
      conv_case_t k = random_cases[c];
      int64_t ys[4];
      conv_out_shape(&k, ys);
      for (int a = 0; a < 2; a++) {
        int64_t s = param_or_one(k.p.stride[a]), dl = param_or_one(k.p.dilation[a]);
        int64_t covered = (ys[2 + a] - 1) * s - k.p.pads[a] - k.p.pads[a + 2] +
                          dl * (k.ws[2 + a] - 1) + 1;
        k.p.output_padding[a] = k.xs[2 + a] - covered;
        CHECK(k.p.output_padding[a] >= 0 && k.p.output_padding[a] < s);
      }
      loom_tensor_t *x = test_rand_tensor(dt, 4, k.xs, -1, 1);
      loom_tensor_t *w = test_rand_tensor(dt, 4, k.ws, -1, 1);
      loom_tensor_t *y = test_rand_tensor(dt, 4, ys, -1, 1);
      loom_tensor_t *cx = run_conv(false, dt, k.xs, x, k.ws, w, &k.p);
      loom_tensor_t *ty = run_conv(true, dt, ys, y, k.ws, w, &k.p);
      CHECK(ty && loom_tensor_numel(ty) == numel(4, k.xs));
      if (cx && ty) {
        double lhs = dot(cx, y), rhs = dot(x, ty);
        CHECK_NEAR(lhs, rhs, dt == LOOM_F64 ? 1e-10 : 1e-4, dt == LOOM_F64 ? 1e-12 : 1e-5);
      }
      loom_tensor_t *all[] = {x, w, y, cx, ty};
      destroy_all(all, 5);
    }
}

/* N symbolic: conv_transpose2d keeps it in the output type. */
static void conv_transpose2d_symbolic(void) {
  loom_graph_t *g;
  loom_value_t x, w, y;
  loom_dim_t n, dims[4];
  loom_conv_params_t p = {.stride = {2, 1}, .output_padding = {1, 0}};
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_dim_t xd[] = {n, 2, 3, 3}, wd[] = {2, 3, 2, 2};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, xd, &x));
  CHECK_OK(loom_graph_input(g, "w", LOOM_F32, 4, wd, &w));
  CHECK_OK(loom_conv_transpose2d(g, x, w, 0, x, &p, &y));
  CHECK_OK(loom_value_type(g, y, NULL, NULL, dims));
  /* (3-1)*2 + 1 + 1 + 1 = 7 rows, (3-1) + 1 + 1 = 4 columns. */
  CHECK(dims[0] == n && dims[1] == 3 && dims[2] == 7 && dims[3] == 4);
  loom_graph_destroy(g);
}

/* ---- Convolution errors -------------------------------------------------- */

typedef struct conv_err {
  loom_dtype_t xt, wt, bt;
  int xr, wr, br;
  int64_t xs[4], ws[4], bs[2];
  loom_conv_params_t p;
} conv_err_t;

static loom_status_t try_conv(bool transpose, const conv_err_t *e) {
  loom_graph_t *g;
  loom_value_t x, w, b = {0}, y;
  loom_graph_create(&g);
  loom_graph_input(g, "x", e->xt, e->xr, e->xs, &x);
  loom_graph_input(g, "w", e->wt, e->wr, e->ws, &w);
  if (e->br) loom_graph_input(g, "bias", e->bt, e->br, e->bs, &b);
  loom_status_t s = transpose ? loom_conv_transpose2d(g, x, w, e->br > 0, b, &e->p, &y)
                              : loom_conv2d(g, x, w, e->br > 0, b, &e->p, &y);
  loom_graph_destroy(g);
  return s;
}

/* A valid conv2d: x (1, 4, 5, 5), w (6, 2, 3, 3), groups 2, bias (6). */
static conv_err_t good_conv(void) {
  return (conv_err_t){LOOM_F32, LOOM_F32, LOOM_F32, 4, 4, 1,
                      {1, 4, 5, 5}, {6, 2, 3, 3}, {6}, {.groups = 2}};
}

static void conv2d_errors(void) {
  conv_err_t e = good_conv();
  CHECK_OK(try_conv(false, &e));
  e.xs[1] = 6;
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_SHAPE, "channels");
  e = good_conv(), e.p.groups = 4; /* 4 channels = 2 per group * 4, but 6 outputs */
  e.ws[1] = 1;
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_SHAPE, "multiple of groups");
  e = good_conv(), e.p.groups = 3;
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_SHAPE, "channels");
  e = good_conv(), e.xr = 3;
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_SHAPE, "rank 4");
  e = good_conv(), e.wr = 2;
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_SHAPE, "rank 4");
  e = good_conv(), e.br = 2, e.bs[0] = 6;
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_SHAPE, "bias");
  e = good_conv(), e.bs[0] = 5;
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_SHAPE, "bias");
  e = good_conv(), e.xt = e.wt = e.bt = LOOM_I32;
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_DTYPE, "i32");
  e = good_conv(), e.wt = LOOM_F64;
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_DTYPE, "f64");
  e = good_conv(), e.bt = LOOM_F16;
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_DTYPE, "f16");
  e = good_conv(), e.p.stride[1] = -1;
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_INVALID, "stride");
  e = good_conv(), e.p.dilation[0] = -2;
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_INVALID, "dilation");
  e = good_conv(), e.p.pads[3] = -1;
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_INVALID, "pads");
  e = good_conv(), e.p.groups = -1;
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_INVALID, "groups");
  e = good_conv(), e.p.pads[0] = INT64_MAX;
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_INVALID, "pads");
  e = good_conv(), e.p.stride[0] = INT64_MAX;
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_INVALID, "stride");
  e = good_conv(), e.p.dilation[0] = 3; /* reach 7 > 5 */
  CHECK_ERR(try_conv(false, &e), LOOM_ERR_SHAPE, "too small");
  e = good_conv();
  loom_graph_t *g;
  loom_value_t x;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, e.xs, &x));
  CHECK_ERR(loom_conv2d(g, x, x, 0, x, NULL, NULL), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_conv_transpose2d(NULL, x, x, 0, x, NULL, &x), LOOM_ERR_INVALID, "null");
  loom_graph_destroy(g);
}

/* A valid conv_transpose2d: x (1, 4, 3, 3), w (4, 3, 2, 2), groups 2:
 * 6 output channels, bias (6). */
static conv_err_t good_convt(void) {
  return (conv_err_t){LOOM_F32, LOOM_F32, LOOM_F32, 4, 4, 1,
                      {1, 4, 3, 3}, {4, 3, 2, 2}, {6}, {.groups = 2}};
}

static void conv_transpose2d_errors(void) {
  conv_err_t e = good_convt();
  CHECK_OK(try_conv(true, &e));
  e.ws[0] = 2;
  CHECK_ERR(try_conv(true, &e), LOOM_ERR_SHAPE, "channels");
  e = good_convt(), e.p.groups = 3, e.xs[1] = e.ws[0] = 5;
  CHECK_ERR(try_conv(true, &e), LOOM_ERR_SHAPE, "multiple of groups");
  e = good_convt(), e.bs[0] = 3;
  CHECK_ERR(try_conv(true, &e), LOOM_ERR_SHAPE, "bias");
  e = good_convt(), e.xr = 5;
  CHECK_ERR(try_conv(true, &e), LOOM_ERR_SHAPE, "rank 4");
  e = good_convt(), e.xt = e.wt = e.bt = LOOM_I64;
  CHECK_ERR(try_conv(true, &e), LOOM_ERR_DTYPE, "i64");
  e = good_convt(), e.wt = LOOM_BF16;
  CHECK_ERR(try_conv(true, &e), LOOM_ERR_DTYPE, "bf16");
  e = good_convt(), e.p.output_padding[0] = 1; /* stride 1, dilation 1 */
  CHECK_ERR(try_conv(true, &e), LOOM_ERR_INVALID, "output_padding");
  e = good_convt(), e.p.output_padding[1] = 1, e.p.dilation[1] = 2;
  CHECK_OK(try_conv(true, &e));
  e = good_convt(), e.p.output_padding[1] = -1;
  CHECK_ERR(try_conv(true, &e), LOOM_ERR_INVALID, "output_padding");
  e = good_convt(), e.p.pads[0] = e.p.pads[2] = 2; /* 3 + 1 - 4 = 0 rows */
  CHECK_ERR(try_conv(true, &e), LOOM_ERR_SHAPE, "too small");
  e = good_convt(), e.p.stride[0] = -3;
  CHECK_ERR(try_conv(true, &e), LOOM_ERR_INVALID, "stride");
}

/* Attribute values the public builders cannot produce, through the IR:
 * the shape rules still reject them. */
static void bad_attributes_through_ir(void) {
  loom_graph_t *g;
  loom_value_t x, w;
  int64_t xs[] = {1, 1, 4, 4}, ws[] = {1, 1, 2, 2}, three[] = {1, 1, 1};
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, xs, &x));
  CHECK_OK(loom_graph_input(g, "w", LOOM_F32, 4, ws, &w));
  int32_t in[2] = {x.id, w.id};
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "stride", 3, three);
  CHECK_ERR(ir_add_node(g, IR_OP_CONV2D, 2, in, &a, NULL, 0), LOOM_ERR_INVALID, "2 entries");
  a = (ir_attrs_t){0};
  ir_attrs_ints(&a, "pads", 3, three);
  CHECK_ERR(ir_add_node(g, IR_OP_CONV_TRANSPOSE2D, 2, in, &a, NULL, 0), LOOM_ERR_INVALID, "4 entries");
  a = (ir_attrs_t){0};
  ir_attrs_int(&a, "trans_a", 2);
  CHECK_ERR(ir_add_node(g, IR_OP_MATMUL, 2, in, &a, NULL, 0), LOOM_ERR_INVALID, "0 or 1");
  CHECK_OK(ir_add_node(g, IR_OP_CONV2D, 2, in, NULL, NULL, 0));
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(matmul_by_hand_every_dtype);
  TEST_RUN(matmul_integer_wraps);
  TEST_RUN(matmul_trans);
  TEST_RUN(matmul_one_dim);
  TEST_RUN(matmul_batched_broadcast);
  TEST_RUN(matmul_noncontiguous);
  TEST_RUN(matmul_symbolic_batch);
  TEST_RUN(matmul_errors);
  TEST_RUN(conv2d_by_hand);
  TEST_RUN(conv2d_by_hand_all_params);
  TEST_RUN(conv2d_matches_direct);
  TEST_RUN(conv2d_noncontiguous);
  TEST_RUN(conv2d_symbolic);
  TEST_RUN(conv_transpose2d_by_hand);
  TEST_RUN(conv_transpose2d_by_hand_all_params);
  TEST_RUN(conv_transpose2d_adjoint);
  TEST_RUN(conv_transpose2d_symbolic);
  TEST_RUN(conv2d_errors);
  TEST_RUN(conv_transpose2d_errors);
  TEST_RUN(bad_attributes_through_ir);
  return test_summary();
}
