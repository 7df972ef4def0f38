/* The attention fast paths: split rewritten into slices, transposes of a
 * matmul's operand folded into its trans flags, and row reductions
 * (softmax, layer_norm, sums, maxima) folded in vector lanes with the
 * call-free exp. Each result is checked against values computed here in
 * double (test_run1 also checks the compiled module against the
 * interpreter). */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "ir/ir.h"
#include "passes/passes.h"

static int count_op(const loom_graph_t *g, ir_op_t op) {
  int n = 0;
  for (int64_t i = 0; i < g->n_nodes; i++) n += g->nodes[i].op == op;
  return n;
}

static const ir_node_t *first_node(const loom_graph_t *g, ir_op_t op) {
  for (int64_t i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == op) return &g->nodes[i];
  return NULL;
}

/* Simplify then DCE, as the pipeline does. */
static loom_graph_t *simplified(const loom_graph_t *g) {
  loom_graph_t *s = NULL, *d = NULL;
  CHECK_OK(pass_simplify(g, &s));
  if (s) CHECK_OK(pass_dce(s, &d));
  loom_graph_destroy(s);
  return d;
}

/* ---- split -> slices --------------------------------------------------------- */

/* x (2, 6) = 0..11 split along axis 1 into 1, 2, 3: piece k is columns
 * [start_k, start_k + size_k). */
static void split_piece(loom_dtype_t dt, int piece) {
  static const int64_t sizes[3] = {1, 2, 3}, starts[3] = {0, 1, 3};
  double xv[12];
  for (int i = 0; i < 12; i++) xv[i] = i;
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, parts[3];
  CHECK_OK(loom_graph_input(g, "x", dt, 2, (loom_dim_t[]){2, 6}, &x));
  CHECK_OK(loom_split(g, x, -1, 3, sizes, parts));
  CHECK_OK(loom_graph_output(g, parts[piece]));
  loom_graph_t *s = simplified(g);
  if (s) {
    CHECK(count_op(s, IR_OP_SPLIT) == 0);
    CHECK(count_op(s, IR_OP_SLICE) == 1);
  }
  loom_tensor_t *in = test_tensor(dt, 2, (int64_t[]){2, 6}, xv);
  loom_tensor_t *y = test_run1(g, 1, &in);
  double want[6];
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < sizes[piece]; c++) want[r * sizes[piece] + c] = xv[r * 6 + starts[piece] + c];
  if (y) CHECK_TENSOR(y, want, 2 * sizes[piece], 0, 0);
  loom_tensor_destroy(y);
  loom_tensor_destroy(in);
  loom_graph_destroy(s);
  loom_graph_destroy(g);
}

static void split_becomes_slices(void) {
  static const loom_dtype_t dts[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16,
                                     LOOM_I8,  LOOM_I32, LOOM_I64};
  for (size_t i = 0; i < sizeof dts / sizeof *dts; i++)
    for (int p = 0; p < 3; p++) split_piece(dts[i], p);
}

/* ---- matmul(transpose) -> trans flags ------------------------------------------ */

/* y = transpose(a, perm_a) @ transpose(b, perm_b) with a (2, 3, 4) and
 * b (2, 5, 3), both swapping the last two dims: y[t] = a[t]^T @ b[t]^T,
 * (2, 4, 5), with no transpose left and both flags set. */
static void matmul_transposes_fold(void) {
  double av[24], bv[30], want[40];
  for (int i = 0; i < 24; i++) av[i] = (i % 7) - 3;
  for (int i = 0; i < 30; i++) bv[i] = (i % 5) * 0.5 - 1;
  for (int t = 0; t < 2; t++)
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 5; j++) {
        double s = 0;
        for (int k = 0; k < 3; k++) s += av[t * 12 + k * 4 + i] * bv[t * 15 + j * 3 + k];
        want[t * 20 + i * 5 + j] = s;
      }
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t a, b, at, bt, y;
  CHECK_OK(loom_graph_input(g, "a", LOOM_F32, 3, (loom_dim_t[]){2, 3, 4}, &a));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F32, 3, (loom_dim_t[]){2, 5, 3}, &b));
  CHECK_OK(loom_transpose(g, a, (int64_t[]){0, 2, 1}, &at));
  CHECK_OK(loom_transpose(g, b, (int64_t[]){0, -1, -2}, &bt));
  CHECK_OK(loom_matmul(g, at, bt, 0, 0, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_graph_t *s = simplified(g);
  if (s) {
    CHECK(count_op(s, IR_OP_TRANSPOSE) == 0);
    const ir_node_t *m = first_node(s, IR_OP_MATMUL);
    CHECK(m && ir_attr_int(m->attrs, "trans_a", 0) == 1 &&
          ir_attr_int(m->attrs, "trans_b", 0) == 1);
  }
  loom_tensor_t *in[2] = {test_tensor(LOOM_F32, 3, (int64_t[]){2, 3, 4}, av),
                          test_tensor(LOOM_F32, 3, (int64_t[]){2, 5, 3}, bv)};
  loom_tensor_t *out = test_run1(g, 2, in);
  if (out) CHECK_TENSOR(out, want, 40, 1e-5, 1e-6);
  loom_tensor_destroy(out);
  for (int i = 0; i < 2; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(s);
  loom_graph_destroy(g);
}

/* A transpose that also moves a batch dim, and one of an already
 * transposed operand (the flag flips back to 0), both of (2, 2, 2). */
static void matmul_transpose_kept_or_flipped(void) {
  double av[8] = {1, 2, 3, 4, 5, 6, 7, 8}, want[8];
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t a, at, y;
  CHECK_OK(loom_graph_input(g, "a", LOOM_F32, 3, (loom_dim_t[]){2, 2, 2}, &a));
  CHECK_OK(loom_transpose(g, a, (int64_t[]){1, 0, 2}, &at));
  CHECK_OK(loom_matmul(g, at, a, 0, 1, &y)); /* at[t] @ a[t]^T */
  CHECK_OK(loom_graph_output(g, y));
  /* at[t][i][k] = a[i][t][k]; y[t][i][j] = sum_k at[t][i][k] * a[t][j][k]. */
  for (int t = 0; t < 2; t++)
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++)
        want[t * 4 + i * 2 + j] = av[i * 4 + t * 2] * av[t * 4 + j * 2] +
                                  av[i * 4 + t * 2 + 1] * av[t * 4 + j * 2 + 1];
  loom_graph_t *s = simplified(g);
  if (s) CHECK(count_op(s, IR_OP_TRANSPOSE) == 1);
  loom_tensor_t *in = test_tensor(LOOM_F32, 3, (int64_t[]){2, 2, 2}, av);
  loom_tensor_t *out = test_run1(g, 1, &in);
  if (out) CHECK_TENSOR(out, want, 8, 0, 1e-6);
  loom_tensor_destroy(out);
  loom_graph_destroy(s);
  loom_graph_destroy(g);

  /* transpose(b) with trans_b = 1 is b itself: x @ b. */
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, b, bt;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){2, 2}, &x));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F32, 2, (loom_dim_t[]){2, 2}, &b));
  CHECK_OK(loom_transpose(g, b, NULL, &bt));
  CHECK_OK(loom_matmul(g, x, bt, 0, 1, &y));
  CHECK_OK(loom_graph_output(g, y));
  s = simplified(g);
  if (s) {
    const ir_node_t *m = first_node(s, IR_OP_MATMUL);
    CHECK(count_op(s, IR_OP_TRANSPOSE) == 0 && m && ir_attr_int(m->attrs, "trans_b", 1) == 0);
  }
  loom_tensor_t *in2[2] = {test_tensor(LOOM_F32, 2, (int64_t[]){2, 2}, av),
                           test_tensor(LOOM_F32, 2, (int64_t[]){2, 2}, av + 4)};
  double want2[4] = {1 * 5 + 2 * 7, 1 * 6 + 2 * 8, 3 * 5 + 4 * 7, 3 * 6 + 4 * 8};
  out = test_run1(g, 2, in2);
  if (out) CHECK_TENSOR(out, want2, 4, 0, 1e-6);
  loom_tensor_destroy(out);
  for (int i = 0; i < 2; i++) loom_tensor_destroy(in2[i]);
  loom_tensor_destroy(in);
  loom_graph_destroy(s);
  loom_graph_destroy(g);
}

/* ---- Row reductions in lanes ------------------------------------------------- */

enum { ROWS = 4, COLS = 37 }; /* 37: four blocks of 8 lanes and a tail */

/* Row r's values: a smooth spread, row 2 holding a NaN, row 3 -inf. */
static void softmax_input(double *x) {
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS; c++) x[r * COLS + c] = sin(r * 1.3 + c * 0.77) * (3 + r);
  x[2 * COLS + 33] = NAN;
  x[3 * COLS + 5] = -INFINITY;
}

static void softmax_want(const double *x, double *want) {
  for (int r = 0; r < ROWS; r++) {
    const double *row = x + r * COLS;
    double m = -INFINITY, s = 0;
    bool nan = false;
    for (int c = 0; c < COLS; c++) {
      nan |= isnan(row[c]);
      m = row[c] > m ? row[c] : m;
    }
    for (int c = 0; c < COLS; c++) s += exp(row[c] - m);
    for (int c = 0; c < COLS; c++) want[r * COLS + c] = nan ? NAN : exp(row[c] - m) / s;
  }
}

static void check_softmax(loom_dtype_t dt, loom_tensor_t *in, const double *want) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, y;
  CHECK_OK(loom_graph_input(g, "x", dt, 2, (loom_dim_t[]){ROWS, COLS}, &x));
  CHECK_OK(loom_softmax(g, x, -1, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *out = test_run1(g, 1, &in);
  if (out)
    for (int i = 0; i < ROWS * COLS; i++) {
      double got = test_get(out, i);
      if (isnan(want[i])) CHECK(isnan(got));
      else CHECK_NEAR(got, want[i], 1e-7, test_rtol(dt, 1));
    }
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

static void softmax_rows(void) {
  double x[ROWS * COLS], want[ROWS * COLS];
  softmax_input(x);
  softmax_want(x, want);
  static const loom_dtype_t dts[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16};
  for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
    /* Half precision rounds the input: the truth is of the rounded values. */
    loom_tensor_t *in = test_tensor(dts[i], 2, (int64_t[]){ROWS, COLS}, x);
    double xr[ROWS * COLS], wr[ROWS * COLS];
    for (int k = 0; k < ROWS * COLS; k++) xr[k] = test_get(in, k);
    softmax_want(xr, wr);
    check_softmax(dts[i], in, wr);
    loom_tensor_destroy(in);
  }
  /* A transposed view of column-major storage gives the same rows. */
  float colmajor[ROWS * COLS];
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS; c++) colmajor[c * ROWS + r] = (float)x[r * COLS + c];
  loom_tensor_t *view;
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, (int64_t[]){ROWS, COLS},
                            (int64_t[]){1, ROWS}, colmajor, &view));
  double xf[ROWS * COLS], wf[ROWS * COLS];
  for (int k = 0; k < ROWS * COLS; k++) xf[k] = (float)x[k];
  softmax_want(xf, wf);
  if (view) check_softmax(LOOM_F32, view, wf);
  loom_tensor_destroy(view);
}

/* The call-free exp: within 2 float ulp of exp from -103 to 88.7,
 * subnormals to within their spacing, and inf, -inf, NaN, overflow and
 * underflow exactly. */
static void exp_accuracy(void) {
  enum { N = 4096, SPECIAL = 6 };
  static double x[N + SPECIAL];
  for (int i = 0; i < N; i++) x[i] = -110.0 + 200.0 * i / (N - 1);
  double special[SPECIAL] = {INFINITY, -INFINITY, NAN, 0.0, 100.0, -200.0};
  memcpy(x + N, special, sizeof special);
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t in_v, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, (loom_dim_t[]){N + SPECIAL}, &in_v));
  CHECK_OK(loom_exp(g, in_v, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in = test_tensor(LOOM_F32, 1, (int64_t[]){N + SPECIAL}, x);
  loom_tensor_t *out = test_run1(g, 1, &in);
  for (int i = 0; out && i < N + SPECIAL; i++) {
    double want = exp((double)(float)x[i]), got = test_get(out, i);
    if (isnan(want)) CHECK(isnan(got));
    else if (isinf(want) || want > 3.4028234663852886e38) CHECK(isinf(got) && got > 0);
    else if (want < 1.1754943508222875e-38) CHECK_NEAR(got, want, 1.5e-45, 0);
    else CHECK_NEAR(got, want, 0, 2.4e-7);
  }
  loom_tensor_destroy(out);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* layer_norm over rows of 100 (lanes and a tail), no scale or bias. */
static void layer_norm_rows(void) {
  enum { R = 3, C = 100 };
  double x[R * C], want[R * C];
  for (int i = 0; i < R * C; i++) x[i] = cos(i * 0.37) * 4 + (i / C);
  for (int r = 0; r < R; r++) {
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += x[r * C + c] / C;
    for (int c = 0; c < C; c++) v += (x[r * C + c] - m) * (x[r * C + c] - m) / C;
    for (int c = 0; c < C; c++) want[r * C + c] = (x[r * C + c] - m) / sqrt(v + 1e-5);
  }
  static const loom_dtype_t dts[] = {LOOM_F32, LOOM_F64};
  for (size_t d = 0; d < 2; d++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_value_t xv, y;
    CHECK_OK(loom_graph_input(g, "x", dts[d], 2, (loom_dim_t[]){R, C}, &xv));
    CHECK_OK(loom_layer_norm(g, xv, 0, xv, 0, xv, -1, 1e-5, &y)); /* no scale, bias */
    CHECK_OK(loom_graph_output(g, y));
    loom_tensor_t *in = test_tensor(dts[d], 2, (int64_t[]){R, C}, x);
    loom_tensor_t *out = test_run1(g, 1, &in);
    if (out) CHECK_TENSOR(out, want, R * C, 1e-5, test_rtol(dts[d], 10));
    loom_tensor_destroy(out);
    loom_tensor_destroy(in);
    loom_graph_destroy(g);
  }
}

/* Integer sums wrap and maxima are exact in any order: rows of 45. */
static void integer_rows(void) {
  enum { R = 2, C = 45 };
  double x[R * C], sums[R], maxs[R];
  for (int i = 0; i < R * C; i++) x[i] = (double)((i * 37) % 101 - 50);
  for (int r = 0; r < R; r++) {
    sums[r] = 0;
    maxs[r] = -1e9;
    for (int c = 0; c < C; c++) {
      sums[r] += x[r * C + c];
      maxs[r] = fmax(maxs[r], x[r * C + c]);
    }
  }
  static const loom_dtype_t dts[] = {LOOM_I32, LOOM_I64};
  for (size_t d = 0; d < 2; d++)
    for (int op = 0; op < 2; op++) {
      loom_graph_t *g;
      CHECK_OK(loom_graph_create(&g));
      loom_value_t xv, y;
      CHECK_OK(loom_graph_input(g, "x", dts[d], 2, (loom_dim_t[]){R, C}, &xv));
      if (op == 0) CHECK_OK(loom_sum(g, xv, 1, (int64_t[]){1}, 0, &y));
      else CHECK_OK(loom_max(g, xv, 1, (int64_t[]){1}, 0, &y));
      CHECK_OK(loom_graph_output(g, y));
      loom_tensor_t *in = test_tensor(dts[d], 2, (int64_t[]){R, C}, x);
      loom_tensor_t *out = test_run1(g, 1, &in);
      if (out) CHECK_TENSOR(out, op == 0 ? sums : maxs, R, 0, 0);
      loom_tensor_destroy(out);
      loom_tensor_destroy(in);
      loom_graph_destroy(g);
    }
}

int main(void) {
  TEST_RUN(split_becomes_slices);
  TEST_RUN(matmul_transposes_fold);
  TEST_RUN(matmul_transpose_kept_or_flipped);
  TEST_RUN(softmax_rows);
  TEST_RUN(exp_accuracy);
  TEST_RUN(layer_norm_rows);
  TEST_RUN(integer_rows);
  return test_summary();
}
