/* Layout ops: reshape, transpose, expand, squeeze, unsqueeze, slice,
 * concat, split, pad, flip and tile, against hand-computed results. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static const loom_dtype_t all_dtypes[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16,
                                          LOOM_I8,  LOOM_I32, LOOM_I64, LOOM_BOOL};
#define N_DTYPES (int)(sizeof all_dtypes / sizeof all_dtypes[0])

static const double arange[] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23};

/* want[] as it reads back from dtype (bool holds 0 or 1). */
static void check_values(const loom_tensor_t *t, loom_dtype_t dtype,
                         const double *want, int n, int line) {
  double conv[64];
  for (int i = 0; i < n; i++) conv[i] = dtype == LOOM_BOOL ? want[i] != 0 : want[i];
  int before = test_failures;
  CHECK_TENSOR(t, conv, n, 0, 0);
  if (test_failures != before) printf("  (checked at line %d, dtype %s)\n", line,
                                      loom_dtype_name(dtype));
}
#define CHECK_VALUES(t, dtype, want, n) check_values((t), (dtype), (want), (n), __LINE__)

static void check_shape(const loom_tensor_t *t, int rank, const int64_t *dims) {
  CHECK(t && loom_tensor_rank(t) == rank);
  for (int i = 0; t && i < rank; i++) CHECK(loom_tensor_dim(t, i) == dims[i]);
}

/* A graph with one input "x" of dtype and shape. */
static loom_graph_t *graph1(loom_dtype_t dtype, int rank, const int64_t *shape,
                            loom_value_t *x) {
  loom_graph_t *g = NULL;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", dtype, rank, shape, x));
  return g;
}

/* Marks y as the output and runs g on one input. */
static loom_tensor_t *run(loom_graph_t *g, loom_value_t y, loom_tensor_t *in) {
  CHECK_OK(loom_graph_output(g, y));
  return test_run1(g, 1, &in);
}

/* ---- Every op in every dtype, on x = arange(6) as (2, 3) ------------------ */

typedef loom_status_t (*build_fn)(loom_graph_t *g, loom_value_t x, loom_value_t *y);

static loom_status_t b_reshape(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_reshape(g, x, 2, (loom_dim_t[]){3, -1}, y);
}
static loom_status_t b_transpose(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_transpose(g, x, (int64_t[]){1, 0}, y);
}
static loom_status_t b_transpose_default(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_transpose(g, x, NULL, y);
}
static loom_status_t b_expand(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_expand(g, x, 3, (loom_dim_t[]){2, 2, 3}, y);
}
static loom_status_t b_unsqueeze(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_unsqueeze(g, x, 1, (int64_t[]){0}, y);
}
static loom_status_t b_slice(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_slice(g, x, 2, (int64_t[]){0, 1}, (int64_t[]){2, 3}, NULL, NULL, y);
}
static loom_status_t b_concat0(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_concat(g, 2, (loom_value_t[]){x, x}, 0, y);
}
static loom_status_t b_concat1(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_concat(g, 2, (loom_value_t[]){x, x}, -1, y);
}
static loom_status_t b_pad_constant(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_pad(g, x, (int64_t[]){0, 1, 0, 0}, LOOM_PAD_CONSTANT, 7, y);
}
static loom_status_t b_pad_reflect(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_pad(g, x, (int64_t[]){0, 1, 0, 1}, LOOM_PAD_REFLECT, 0, y);
}
static loom_status_t b_pad_edge(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_pad(g, x, (int64_t[]){1, 0, 0, 1}, LOOM_PAD_EDGE, 0, y);
}
static loom_status_t b_flip(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_flip(g, x, 1, (int64_t[]){1}, y);
}
static loom_status_t b_tile(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_tile(g, x, (int64_t[]){1, 2}, y);
}

typedef struct op_case {
  const char *name;
  build_fn build;
  int rank;
  int64_t dims[3];
  int n;
  double want[24];
} op_case_t;

static const op_case_t op_cases[] = {
    {"reshape", b_reshape, 2, {3, 2}, 6, {0, 1, 2, 3, 4, 5}},
    {"transpose", b_transpose, 2, {3, 2}, 6, {0, 3, 1, 4, 2, 5}},
    {"transpose default", b_transpose_default, 2, {3, 2}, 6, {0, 3, 1, 4, 2, 5}},
    {"expand", b_expand, 3, {2, 2, 3}, 12, {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}},
    {"unsqueeze", b_unsqueeze, 3, {1, 2, 3}, 6, {0, 1, 2, 3, 4, 5}},
    {"slice", b_slice, 2, {2, 2}, 4, {1, 2, 4, 5}},
    {"concat 0", b_concat0, 2, {4, 3}, 12, {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}},
    {"concat -1", b_concat1, 2, {2, 6}, 12, {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}},
    {"pad constant", b_pad_constant, 2, {2, 4}, 8, {7, 0, 1, 2, 7, 3, 4, 5}},
    {"pad reflect", b_pad_reflect, 2, {2, 5}, 10, {1, 0, 1, 2, 1, 4, 3, 4, 5, 4}},
    {"pad edge", b_pad_edge, 2, {3, 4}, 12, {0, 1, 2, 2, 0, 1, 2, 2, 3, 4, 5, 5}},
    {"flip", b_flip, 2, {2, 3}, 6, {2, 1, 0, 5, 4, 3}},
    {"tile", b_tile, 2, {2, 6}, 12, {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}},
};

static void run_case(const op_case_t *oc, loom_dtype_t dtype) {
  int64_t shape[] = {2, 3};
  loom_value_t x, y;
  loom_graph_t *g = graph1(dtype, 2, shape, &x);
  CHECK_OK(oc->build(g, x, &y));
  loom_tensor_t *in = test_tensor(dtype, 2, shape, arange);
  loom_tensor_t *out = run(g, y, in);
  int before = test_failures;
  check_shape(out, oc->rank, oc->dims);
  CHECK_VALUES(out, dtype, oc->want, oc->n);
  if (test_failures != before) printf("  (case %s)\n", oc->name);
  loom_tensor_destroy(in);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

static void every_op_every_dtype(void) {
  for (int d = 0; d < N_DTYPES; d++)
    for (size_t i = 0; i < sizeof op_cases / sizeof op_cases[0]; i++)
      run_case(&op_cases[i], all_dtypes[d]);
}

/* Split has two outputs: x (2, 4) cut along dim 1 into 1 and 3 columns. */
static void split_every_dtype(void) {
  for (int d = 0; d < N_DTYPES; d++) {
    loom_dtype_t dt = all_dtypes[d];
    int64_t shape[] = {2, 4};
    loom_value_t x, ys[2];
    loom_graph_t *g = graph1(dt, 2, shape, &x);
    CHECK_OK(loom_split(g, x, -1, 2, (int64_t[]){1, 3}, ys));
    CHECK_OK(loom_graph_output(g, ys[0]));
    CHECK_OK(loom_graph_output(g, ys[1]));
    loom_tensor_t *in = test_tensor(dt, 2, shape, arange), *out[2] = {0};
    CHECK_OK(loom_interpret(g, 1, &in, 2, out));
    check_shape(out[0], 2, (int64_t[]){2, 1});
    check_shape(out[1], 2, (int64_t[]){2, 3});
    CHECK_VALUES(out[0], dt, ((double[]){0, 4}), 2);
    CHECK_VALUES(out[1], dt, ((double[]){1, 2, 3, 5, 6, 7}), 6);
    loom_tensor_destroy(in);
    loom_tensor_destroy(out[0]);
    loom_tensor_destroy(out[1]);
    loom_graph_destroy(g);
  }
}

/* ---- reshape ------------------------------------------------------------------ */

static void reshape_infers_minus_one(void) {
  int64_t shape[] = {2, 3, 4};
  loom_value_t x, y;
  loom_graph_t *g = graph1(LOOM_I32, 3, shape, &x);
  CHECK_OK(loom_reshape(g, x, 2, (loom_dim_t[]){4, -1}, &y));
  int rank = 0;
  loom_dim_t dims[LOOM_MAX_RANK];
  CHECK_OK(loom_value_type(g, y, NULL, &rank, dims));
  CHECK(rank == 2 && dims[0] == 4 && dims[1] == 6);
  loom_tensor_t *in = test_tensor(LOOM_I32, 3, shape, arange);
  loom_tensor_t *out = run(g, y, in);
  check_shape(out, 2, (int64_t[]){4, 6});
  CHECK_VALUES(out, LOOM_I32, arange, 24);
  loom_tensor_destroy(in);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

/* x (n, 6): -1 becomes n*2 or n*3; shapes naming n check symbolically. */
static void reshape_symbolic(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n, n2, n3, dims[LOOM_MAX_RANK];
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_mul(g, n, 2, &n2));
  CHECK_OK(loom_dim_mul(g, n, 3, &n3));
  loom_value_t x, y, z, w;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){n, 6}, &x));
  CHECK_OK(loom_reshape(g, x, 2, (loom_dim_t[]){-1, 3}, &y));
  int rank = 0;
  CHECK_OK(loom_value_type(g, y, NULL, &rank, dims));
  CHECK(rank == 2 && dims[0] == n2 && dims[1] == 3);
  CHECK_OK(loom_reshape(g, x, 2, (loom_dim_t[]){2, -1}, &w));
  CHECK_OK(loom_value_type(g, w, NULL, &rank, dims));
  CHECK(rank == 2 && dims[0] == 2 && dims[1] == n3);
  CHECK_OK(loom_reshape(g, y, 3, (loom_dim_t[]){n, 2, 3}, &z));
  CHECK_OK(loom_value_type(g, z, NULL, &rank, dims));
  CHECK(rank == 3 && dims[0] == n && dims[1] == 2 && dims[2] == 3);
  CHECK_ERR(loom_reshape(g, x, 2, (loom_dim_t[]){n, 4}, &w), LOOM_ERR_SHAPE, "6*n elements");
  CHECK_ERR(loom_reshape(g, x, 3, (loom_dim_t[]){-1, n, 4}, &w), LOOM_ERR_SHAPE,
            "divisible");
  CHECK_ERR(loom_reshape(g, x, 2, (loom_dim_t[]){n, n}, &w), LOOM_ERR_SHAPE, "prove");
  loom_tensor_t *in = test_tensor(LOOM_F32, 2, (int64_t[]){2, 6}, arange);
  loom_tensor_t *out = run(g, z, in);
  check_shape(out, 3, (int64_t[]){2, 2, 3});
  CHECK_VALUES(out, LOOM_F32, arange, 12);
  loom_tensor_destroy(in);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

static void reshape_errors(void) {
  int64_t shape[] = {2, 3};
  loom_value_t x, y;
  loom_graph_t *g = graph1(LOOM_F32, 2, shape, &x);
  CHECK_ERR(loom_reshape(g, x, 2, (loom_dim_t[]){4, 2}, &y), LOOM_ERR_SHAPE, "elements");
  CHECK_ERR(loom_reshape(g, x, 2, (loom_dim_t[]){-1, -1}, &y), LOOM_ERR_INVALID,
            "more than one -1");
  CHECK_ERR(loom_reshape(g, x, 2, (loom_dim_t[]){-3, -2}, &y), LOOM_ERR_INVALID, "neither");
  CHECK_ERR(loom_reshape(g, x, 2, (loom_dim_t[]){0, -1}, &y), LOOM_ERR_SHAPE, "multiply to 0");
  CHECK_ERR(loom_reshape(g, x, 2, (loom_dim_t[]){4, -1}, &y), LOOM_ERR_SHAPE, "divisible");
  loom_dim_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 2, 3};
  CHECK_ERR(loom_reshape(g, x, 9, nine, &y), LOOM_ERR_SHAPE, "rank 9");
  CHECK_ERR(loom_reshape(g, x, 2, NULL, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_reshape(NULL, x, 2, (loom_dim_t[]){3, 2}, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_reshape(g, x, 2, (loom_dim_t[]){3, 2}, NULL), LOOM_ERR_INVALID, "null");
  CHECK(loom_graph_num_nodes(g) == 0);
  loom_graph_destroy(g);
}

/* ---- transpose ---------------------------------------------------------------- */

/* y[i][j][k] = x[j][k][i] for perm (2, 0, 1), also written (-1, 0, 1). */
static void transpose_3d(void) {
  int64_t shape[] = {2, 3, 4};
  double want[24];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 3; k++) want[i * 6 + j * 3 + k] = j * 12 + k * 4 + i;
  const int64_t perms[2][3] = {{2, 0, 1}, {-1, 0, 1}};
  for (int p = 0; p < 2; p++) {
    loom_value_t x, y;
    loom_graph_t *g = graph1(LOOM_I64, 3, shape, &x);
    CHECK_OK(loom_transpose(g, x, perms[p], &y));
    loom_tensor_t *in = test_tensor(LOOM_I64, 3, shape, arange);
    loom_tensor_t *out = run(g, y, in);
    check_shape(out, 3, (int64_t[]){4, 2, 3});
    CHECK_VALUES(out, LOOM_I64, want, 24);
    loom_tensor_destroy(in);
    loom_tensor_destroy(out);
    loom_graph_destroy(g);
  }
}

/* v (2, 3) is a transposed view of b (3, 2): v[i][j] = b[j][i] = 2j + i. */
static float view_data[6] = {0, 1, 2, 3, 4, 5};
static const double view_values[6] = {0, 2, 4, 1, 3, 5};

static loom_tensor_t *transposed_view(void) {
  loom_tensor_t *v = NULL;
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, (int64_t[]){2, 3}, (int64_t[]){1, 2},
                            view_data, &v));
  return v;
}

/* Runs build on the view and on a contiguous copy of its values; both
 * must give want. */
static void check_view_vs_contiguous(build_fn build, int rank, const int64_t *dims,
                                     const double *want, int n) {
  loom_tensor_t *ins[2] = {transposed_view(),
                           test_tensor(LOOM_F32, 2, (int64_t[]){2, 3}, view_values)};
  for (int k = 0; k < 2; k++) {
    loom_value_t x, y;
    loom_graph_t *g = graph1(LOOM_F32, 2, (int64_t[]){2, 3}, &x);
    CHECK_OK(build(g, x, &y));
    loom_tensor_t *out = run(g, y, ins[k]);
    check_shape(out, rank, dims);
    CHECK_VALUES(out, LOOM_F32, want, n);
    loom_tensor_destroy(out);
    loom_tensor_destroy(ins[k]);
    loom_graph_destroy(g);
  }
}

static loom_status_t b_slice_reverse_cols(loom_graph_t *g, loom_value_t x,
                                          loom_value_t *y) {
  return loom_slice(g, x, 1, (int64_t[]){2}, (int64_t[]){INT64_MIN}, (int64_t[]){1},
                    (int64_t[]){-1}, y);
}

static void noncontiguous_input(void) {
  /* transpose(v) is b itself. */
  check_view_vs_contiguous(b_transpose, 2, (int64_t[]){3, 2}, arange, 6);
  check_view_vs_contiguous(b_slice_reverse_cols, 2, (int64_t[]){2, 3},
                           (double[]){4, 2, 0, 5, 3, 1}, 6);
  check_view_vs_contiguous(b_slice, 2, (int64_t[]){2, 2}, (double[]){2, 4, 3, 5}, 4);
}

static void transpose_errors(void) {
  int64_t shape[] = {2, 3};
  loom_value_t x, y;
  loom_graph_t *g = graph1(LOOM_F32, 2, shape, &x);
  CHECK_ERR(loom_transpose(g, x, (int64_t[]){0, 0}, &y), LOOM_ERR_INVALID, "permutation");
  CHECK_ERR(loom_transpose(g, x, (int64_t[]){0, 2}, &y), LOOM_ERR_AXIS, "out of range");
  CHECK_ERR(loom_transpose(g, x, (int64_t[]){-3, 0}, &y), LOOM_ERR_AXIS, "out of range");
  CHECK_ERR(loom_transpose(NULL, x, (int64_t[]){1, 0}, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_transpose(g, (loom_value_t){99}, (int64_t[]){1, 0}, &y),
            LOOM_ERR_INVALID, "not a value");
  CHECK_ERR(loom_transpose(g, x, (int64_t[]){1, 0}, NULL), LOOM_ERR_INVALID, "null");
  loom_graph_destroy(g);
}

/* ---- expand, squeeze, unsqueeze ----------------------------------------------- */

/* (3, 1) to (2, 3, 4): y[i][j][k] = x[j]. */
static void expand_broadcasts(void) {
  int64_t shape[] = {3, 1};
  double want[24];
  for (int i = 0; i < 24; i++) want[i] = 1 + (i / 4) % 3;
  loom_value_t x, y;
  loom_graph_t *g = graph1(LOOM_I32, 2, shape, &x);
  CHECK_OK(loom_expand(g, x, 3, (loom_dim_t[]){2, 3, 4}, &y));
  loom_tensor_t *in = test_tensor(LOOM_I32, 2, shape, (double[]){1, 2, 3});
  loom_tensor_t *out = run(g, y, in);
  check_shape(out, 3, (int64_t[]){2, 3, 4});
  CHECK_VALUES(out, LOOM_I32, want, 24);
  CHECK_ERR(loom_expand(g, x, 2, (loom_dim_t[]){4, 4}, &y), LOOM_ERR_SHAPE, "broadcast");
  CHECK_ERR(loom_expand(g, x, 1, (loom_dim_t[]){3}, &y), LOOM_ERR_SHAPE, "lower rank");
  CHECK_ERR(loom_expand(g, x, 2, (loom_dim_t[]){3, -1}, &y), LOOM_ERR_INVALID, "neither");
  loom_dim_t n, dims[LOOM_MAX_RANK];
  int rank = 0;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_expand(g, x, 3, (loom_dim_t[]){n, 3, 5}, &y));
  CHECK_OK(loom_value_type(g, y, NULL, &rank, dims));
  CHECK(rank == 3 && dims[0] == n && dims[1] == 3 && dims[2] == 5);
  loom_tensor_destroy(in);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

static void squeeze_unsqueeze(void) {
  int64_t shape[] = {1, 3, 1};
  double v[] = {-1, 2, -3};
  loom_value_t x, y, z, w;
  loom_graph_t *g = graph1(LOOM_I8, 3, shape, &x);
  CHECK_OK(loom_squeeze(g, x, 0, NULL, &y));
  CHECK_OK(loom_squeeze(g, x, 1, (int64_t[]){-1}, &w));
  CHECK_OK(loom_unsqueeze(g, y, 2, (int64_t[]){0, -1}, &z));
  int rank = 0;
  loom_dim_t dims[LOOM_MAX_RANK];
  CHECK_OK(loom_value_type(g, y, NULL, &rank, dims));
  CHECK(rank == 1 && dims[0] == 3);
  CHECK_OK(loom_value_type(g, w, NULL, &rank, dims));
  CHECK(rank == 2 && dims[0] == 1 && dims[1] == 3);
  CHECK_OK(loom_value_type(g, z, NULL, &rank, dims));
  CHECK(rank == 3 && dims[0] == 1 && dims[1] == 3 && dims[2] == 1);
  CHECK_ERR(loom_squeeze(g, x, 1, (int64_t[]){1}, &y), LOOM_ERR_SHAPE, "not 1");
  CHECK_ERR(loom_squeeze(g, x, 2, (int64_t[]){0, -3}, &y), LOOM_ERR_INVALID, "twice");
  CHECK_ERR(loom_squeeze(g, x, 1, (int64_t[]){3}, &y), LOOM_ERR_AXIS, "out of range");
  CHECK_ERR(loom_unsqueeze(g, x, 2, (int64_t[]){1, 1}, &y), LOOM_ERR_INVALID, "twice");
  CHECK_ERR(loom_unsqueeze(g, x, 1, (int64_t[]){4}, &y), LOOM_ERR_AXIS, "out of range");
  loom_tensor_t *in = test_tensor(LOOM_I8, 3, shape, v);
  loom_tensor_t *out = run(g, y, in);
  check_shape(out, 1, (int64_t[]){3});
  CHECK_VALUES(out, LOOM_I8, v, 3);
  loom_tensor_destroy(in);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

/* ---- slice ---------------------------------------------------------------------- */

/* x = arange(6) sliced [start:end:step] must give want (n entries). */
static void check_slice1d(int64_t start, int64_t end, int64_t step,
                          const double *want, int n, int line) {
  loom_value_t x, y;
  loom_graph_t *g = graph1(LOOM_I32, 1, (int64_t[]){6}, &x);
  CHECK_OK(loom_slice(g, x, 1, &start, &end, NULL, &step, &y));
  loom_tensor_t *in = test_tensor(LOOM_I32, 1, (int64_t[]){6}, arange);
  loom_tensor_t *out = run(g, y, in);
  int before = test_failures;
  check_shape(out, 1, (int64_t[]){n});
  CHECK_VALUES(out, LOOM_I32, want, n);
  if (test_failures != before) printf("  (slice at line %d)\n", line);
  loom_tensor_destroy(in);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}
#define CHECK_SLICE(s, e, st, n, ...) \
  check_slice1d((s), (e), (st), (double[]){__VA_ARGS__}, (n), __LINE__)

static void slice_steps_and_clamping(void) {
  CHECK_SLICE(INT64_MAX, INT64_MIN, -1, 6, 5, 4, 3, 2, 1, 0); /* x[::-1] */
  CHECK_SLICE(3, 0, -2, 2, 3, 1);
  CHECK_SLICE(-1, -100, -2, 3, 5, 3, 1);
  CHECK_SLICE(100, 2, -1, 3, 5, 4, 3);
  CHECK_SLICE(-2, -7, -1, 5, 4, 3, 2, 1, 0);
  CHECK_SLICE(-100, 100, 1, 6, 0, 1, 2, 3, 4, 5);
  CHECK_SLICE(1, -1, 3, 2, 1, 4);
  CHECK_SLICE(2, INT64_MAX, INT64_MAX, 1, 2);
  CHECK_SLICE(5, 0, INT64_MIN, 1, 5);
  CHECK_SLICE(4, 1, 1, 0, 0);
  CHECK_SLICE(1, 4, -1, 0, 0);
  CHECK_SLICE(-100, -100, -1, 0, 0); /* a start before the front takes nothing */
  CHECK_SLICE(-7, INT64_MIN, -2, 0, 0);
}

/* x (3, 4): rows 1..2 and even columns, with axes listed in either order. */
static void slice_2d(void) {
  int64_t shape[] = {3, 4};
  const int64_t starts[2][2] = {{1, 0}, {0, 1}}, ends[2][2] = {{3, INT64_MAX}, {INT64_MAX, 3}};
  const int64_t axes[2][2] = {{0, 1}, {-1, 0}}, steps[2][2] = {{1, 2}, {2, 1}};
  for (int k = 0; k < 2; k++) {
    loom_value_t x, y;
    loom_graph_t *g = graph1(LOOM_F64, 2, shape, &x);
    CHECK_OK(loom_slice(g, x, 2, starts[k], ends[k], axes[k], steps[k], &y));
    loom_tensor_t *in = test_tensor(LOOM_F64, 2, shape, arange);
    loom_tensor_t *out = run(g, y, in);
    check_shape(out, 2, (int64_t[]){2, 2});
    CHECK_VALUES(out, LOOM_F64, ((double[]){4, 6, 8, 10}), 4);
    loom_tensor_destroy(in);
    loom_tensor_destroy(out);
    loom_graph_destroy(g);
  }
}

/* x (n, 4): constant axes slice freely; n survives only whole-axis slices. */
static void slice_symbolic(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n, dims[LOOM_MAX_RANK];
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_value_t x, y, z;
  int rank = 0;
  CHECK_OK(loom_graph_input(g, "x", LOOM_BF16, 2, (loom_dim_t[]){n, 4}, &x));
  CHECK_OK(loom_slice(g, x, 2, (int64_t[]){0, 1}, (int64_t[]){INT64_MAX, 3}, NULL,
                      NULL, &y));
  CHECK_OK(loom_value_type(g, y, NULL, &rank, dims));
  CHECK(rank == 2 && dims[0] == n && dims[1] == 2);
  CHECK_OK(loom_slice(g, y, 1, (int64_t[]){-1}, (int64_t[]){INT64_MIN}, (int64_t[]){0},
                      (int64_t[]){-1}, &z));
  CHECK_OK(loom_value_type(g, z, NULL, &rank, dims));
  CHECK(rank == 2 && dims[0] == n && dims[1] == 2);
  /* x[1:] keeps n as n - 1; a backward slice short of the whole axis
   * has no such count */
  loom_value_t w;
  char text[32];
  CHECK_OK(loom_slice(g, x, 1, (int64_t[]){1}, (int64_t[]){INT64_MAX}, NULL, NULL, &w));
  CHECK_OK(loom_value_type(g, w, NULL, &rank, dims));
  CHECK_OK(loom_dim_format(g, dims[0], text, sizeof text));
  CHECK(rank == 2 && !strcmp(text, "n-1") && dims[1] == 4);
  CHECK_ERR(loom_slice(g, x, 1, (int64_t[]){1}, (int64_t[]){INT64_MIN}, NULL, (int64_t[]){-1},
                       &w),
            LOOM_ERR_SHAPE, "symbolic");
  loom_tensor_t *in = test_tensor(LOOM_BF16, 2, (int64_t[]){3, 4}, arange);
  loom_tensor_t *out = run(g, z, in);
  check_shape(out, 2, (int64_t[]){3, 2});
  CHECK_VALUES(out, LOOM_BF16, ((double[]){9, 10, 5, 6, 1, 2}), 6);
  loom_tensor_destroy(in);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

static void slice_errors(void) {
  loom_value_t x, y;
  loom_graph_t *g = graph1(LOOM_F16, 2, (int64_t[]){3, 4}, &x);
  int64_t s[] = {0, 0}, e[] = {2, 2};
  CHECK_ERR(loom_slice(g, x, 2, s, e, NULL, (int64_t[]){1, 0}, &y), LOOM_ERR_INVALID,
            "step");
  CHECK_ERR(loom_slice(g, x, 2, s, e, (int64_t[]){1, -1}, NULL, &y), LOOM_ERR_INVALID,
            "twice");
  CHECK_ERR(loom_slice(g, x, 1, s, e, (int64_t[]){2}, NULL, &y), LOOM_ERR_AXIS,
            "out of range");
  CHECK_ERR(loom_slice(g, x, 3, (int64_t[]){0, 0, 0}, (int64_t[]){1, 1, 1}, NULL, NULL, &y),
            LOOM_ERR_AXIS, "out of range");
  CHECK_ERR(loom_slice(g, x, 1, NULL, e, NULL, NULL, &y), LOOM_ERR_INVALID, "null");
  loom_graph_destroy(g);
}

/* ---- concat and split ------------------------------------------------------------ */

/* (n, 2) and (m, 2) join into (n+m, 2). */
static void concat_symbolic(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n, m, nm, dims[LOOM_MAX_RANK];
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_symbol(g, "m", &m));
  CHECK_OK(loom_dim_add(g, n, m, &nm));
  loom_value_t xs[2], y;
  CHECK_OK(loom_graph_input(g, "a", LOOM_I64, 2, (loom_dim_t[]){n, 2}, &xs[0]));
  CHECK_OK(loom_graph_input(g, "b", LOOM_I64, 2, (loom_dim_t[]){m, 2}, &xs[1]));
  CHECK_OK(loom_concat(g, 2, xs, 0, &y));
  int rank = 0;
  CHECK_OK(loom_value_type(g, y, NULL, &rank, dims));
  CHECK(rank == 2 && dims[0] == nm && dims[1] == 2);
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in[2] = {test_tensor(LOOM_I64, 2, (int64_t[]){1, 2}, (double[]){-1, -2}),
                          test_tensor(LOOM_I64, 2, (int64_t[]){2, 2}, arange)};
  loom_tensor_t *out = test_run1(g, 2, in);
  check_shape(out, 2, (int64_t[]){3, 2});
  CHECK_VALUES(out, LOOM_I64, ((double[]){-1, -2, 0, 1, 2, 3}), 6);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

/* Three inputs of different lengths along the middle axis. */
static void concat_three(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t xs[3], y;
  int64_t len[3] = {1, 0, 2};
  const char *names[3] = {"x0", "x1", "x2"};
  for (int i = 0; i < 3; i++)
    CHECK_OK(loom_graph_input(g, names[i], LOOM_F32, 3, (int64_t[]){2, len[i], 1}, &xs[i]));
  CHECK_OK(loom_concat(g, 3, xs, 1, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in[3];
  for (int i = 0; i < 3; i++)
    in[i] = test_tensor(LOOM_F32, 3, (int64_t[]){2, len[i], 1}, arange + 10 * i);
  loom_tensor_t *out = test_run1(g, 3, in);
  check_shape(out, 3, (int64_t[]){2, 3, 1});
  CHECK_VALUES(out, LOOM_F32, ((double[]){0, 20, 21, 1, 22, 23}), 6);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(in[i]);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

static void concat_errors(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t a, b, c, d, s, y;
  CHECK_OK(loom_graph_input(g, "a", LOOM_F32, 2, (int64_t[]){2, 3}, &a));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F64, 2, (int64_t[]){2, 3}, &b));
  CHECK_OK(loom_graph_input(g, "c", LOOM_F32, 1, (int64_t[]){3}, &c));
  CHECK_OK(loom_graph_input(g, "d", LOOM_F32, 2, (int64_t[]){3, 3}, &d));
  CHECK_OK(loom_graph_input(g, "s", LOOM_F32, 0, NULL, &s));
  CHECK_ERR(loom_concat(g, 2, (loom_value_t[]){a, b}, 0, &y), LOOM_ERR_DTYPE, "cast");
  CHECK_ERR(loom_concat(g, 2, (loom_value_t[]){a, c}, 0, &y), LOOM_ERR_SHAPE, "rank");
  CHECK_ERR(loom_concat(g, 2, (loom_value_t[]){a, d}, 1, &y), LOOM_ERR_SHAPE, "differs");
  CHECK_ERR(loom_concat(g, 2, (loom_value_t[]){a, a}, 2, &y), LOOM_ERR_AXIS, "out of range");
  CHECK_ERR(loom_concat(g, 2, (loom_value_t[]){s, s}, 0, &y), LOOM_ERR_AXIS, "scalar");
  CHECK_ERR(loom_concat(g, 0, (loom_value_t[]){a}, 0, &y), LOOM_ERR_INVALID, "at least");
  CHECK_ERR(loom_concat(g, 2, NULL, 0, &y), LOOM_ERR_INVALID, "null");
  CHECK_OK(loom_concat(g, 2, (loom_value_t[]){a, d}, 0, &y));
  loom_graph_destroy(g);
}

static void split_errors(void) {
  loom_value_t x, ys[3];
  loom_graph_t *g = graph1(LOOM_F32, 2, (int64_t[]){2, 4}, &x);
  CHECK_ERR(loom_split(g, x, 1, 2, (int64_t[]){1, 2}, ys), LOOM_ERR_SHAPE, "sum");
  CHECK_ERR(loom_split(g, x, 1, 2, (int64_t[]){5, -1}, ys), LOOM_ERR_INVALID, "negative");
  CHECK_ERR(loom_split(g, x, 2, 2, (int64_t[]){1, 1}, ys), LOOM_ERR_AXIS, "out of range");
  CHECK_ERR(loom_split(g, x, 0, 0, NULL, ys), LOOM_ERR_INVALID, "at least one");
  CHECK_ERR(loom_split(g, x, 0, 2, (int64_t[]){1, 1}, NULL), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_split(NULL, x, 0, 2, (int64_t[]){1, 1}, ys), LOOM_ERR_INVALID, "null");
  CHECK_OK(loom_split(g, x, 0, 3, (int64_t[]){1, 0, 1}, ys));
  loom_graph_destroy(g);
}

/* ---- pad, flip, tile -------------------------------------------------------------- */

/* NumPy: pad([1, 2, 3, 4], (2, 3), mode) for each mode. */
static void pad_modes_1d(void) {
  static const struct {
    loom_pad_mode_t mode;
    double want[9];
  } cases[] = {
      {LOOM_PAD_CONSTANT, {-1, -1, 1, 2, 3, 4, -1, -1, -1}},
      {LOOM_PAD_REFLECT, {3, 2, 1, 2, 3, 4, 3, 2, 1}},
      {LOOM_PAD_EDGE, {1, 1, 1, 2, 3, 4, 4, 4, 4}},
  };
  for (int k = 0; k < 3; k++) {
    loom_value_t x, y;
    loom_graph_t *g = graph1(LOOM_I64, 1, (int64_t[]){4}, &x);
    CHECK_OK(loom_pad(g, x, (int64_t[]){2, 3}, cases[k].mode, -1, &y));
    loom_tensor_t *in = test_tensor(LOOM_I64, 1, (int64_t[]){4}, arange + 1);
    loom_tensor_t *out = run(g, y, in);
    check_shape(out, 1, (int64_t[]){9});
    CHECK_VALUES(out, LOOM_I64, cases[k].want, 9);
    loom_tensor_destroy(in);
    loom_tensor_destroy(out);
    loom_graph_destroy(g);
  }
}

/* Negative pads crop, as PyTorch's F.pad: [1, 2, 3, 4] with pads (-1, 2),
 * (2, -1), (-1, -2) in each mode, computed by hand; crops come after the
 * pads, so (-4, 3) on [1, 2, 3] keeps two of the padded entries. */
static void pad_crops_1d(void) {
  static const struct {
    loom_pad_mode_t mode;
    int64_t n, begin, end;
    double want[6];
  } cases[] = {
      {LOOM_PAD_CONSTANT, 4, -1, 2, {2, 3, 4, -1, -1}},
      {LOOM_PAD_REFLECT, 4, -1, 2, {2, 3, 4, 3, 2}},
      {LOOM_PAD_EDGE, 4, -1, 2, {2, 3, 4, 4, 4}},
      {LOOM_PAD_CONSTANT, 4, 2, -1, {-1, -1, 1, 2, 3}},
      {LOOM_PAD_REFLECT, 4, 2, -1, {3, 2, 1, 2, 3}},
      {LOOM_PAD_EDGE, 4, 2, -1, {1, 1, 1, 2, 3}},
      {LOOM_PAD_CONSTANT, 4, -1, -2, {2}},
      {LOOM_PAD_REFLECT, 4, -1, -2, {2}},
      {LOOM_PAD_EDGE, 4, -2, -2, {0}},
      {LOOM_PAD_CONSTANT, 3, -4, 3, {-1, -1}},
      {LOOM_PAD_EDGE, 3, -4, 3, {3, 3}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    loom_value_t x, y;
    int64_t n = cases[k].n, out = n + cases[k].begin + cases[k].end;
    loom_graph_t *g = graph1(LOOM_F32, 1, &n, &x);
    CHECK_OK(loom_pad(g, x, (int64_t[]){cases[k].begin, cases[k].end}, cases[k].mode, -1, &y));
    loom_tensor_t *in = test_tensor(LOOM_F32, 1, &n, arange + 1);
    loom_tensor_t *got = run(g, y, in);
    check_shape(got, 1, &out);
    CHECK_VALUES(got, LOOM_F32, cases[k].want, out);
    loom_tensor_destroy(in);
    loom_tensor_destroy(got);
    loom_graph_destroy(g);
  }
}

/* (3, 4) = 0..11 with pads (-1, 1) on dim 0 and (0, -2) on dim 1: the
 * first row cropped, a column of 9 before and two cut after, in every
 * dtype (generated code copies elements as bits). */
static void pad_crops_2d(void) {
  static const double want[] = {9, 4, 5, 9, 8, 9, 9, 9, 9};
  for (int k = 0; k < N_DTYPES; k++) {
    loom_dtype_t dt = all_dtypes[k];
    if (dt == LOOM_BOOL || dt == LOOM_I8) continue; /* 9 and 11 do not fit or stay */
    loom_value_t x, y;
    loom_graph_t *g = graph1(dt, 2, (int64_t[]){3, 4}, &x);
    CHECK_OK(loom_pad(g, x, (int64_t[]){-1, 1, 1, -2}, LOOM_PAD_CONSTANT, 9, &y));
    loom_tensor_t *in = test_tensor(dt, 2, (int64_t[]){3, 4}, arange);
    loom_tensor_t *got = run(g, y, in);
    check_shape(got, 2, (int64_t[]){3, 3});
    CHECK_VALUES(got, dt, want, 9);
    loom_tensor_destroy(in);
    loom_tensor_destroy(got);
    loom_graph_destroy(g);
  }
}

static void pad_errors(void) {
  loom_value_t x, y;
  loom_graph_t *g = graph1(LOOM_F32, 2, (int64_t[]){2, 4}, &x);
  CHECK_ERR(loom_pad(g, x, (int64_t[]){0, 4, 0, 0}, LOOM_PAD_REFLECT, 0, &y),
            LOOM_ERR_SHAPE, "too large");
  CHECK_ERR(loom_pad(g, x, (int64_t[]){2, 0, 0, 0}, LOOM_PAD_REFLECT, 0, &y),
            LOOM_ERR_SHAPE, "too large");
  CHECK_ERR(loom_pad(g, x, (int64_t[]){0, -3, 0, -2}, LOOM_PAD_CONSTANT, 0, &y),
            LOOM_ERR_SHAPE, "crop more than the 4 elements of dim 1");
  CHECK_ERR(loom_pad(g, x, (int64_t[]){-3, 0, 0, 0}, LOOM_PAD_EDGE, 0, &y),
            LOOM_ERR_SHAPE, "crop more than the 2 elements of dim 0");
  CHECK_ERR(loom_pad(g, x, (int64_t[]){0, -1, 0, 4}, LOOM_PAD_REFLECT, 0, &y),
            LOOM_ERR_SHAPE, "too large");
  CHECK_OK(loom_pad(g, x, (int64_t[]){-1, -2, -1, -2}, LOOM_PAD_REFLECT, 0, &y));
  CHECK_ERR(loom_pad(g, x, (int64_t[]){0, 0, 0, 0}, (loom_pad_mode_t)5, 0, &y),
            LOOM_ERR_INVALID, "mode");
  CHECK_ERR(loom_pad(g, x, NULL, LOOM_PAD_CONSTANT, 0, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_pad(NULL, x, (int64_t[]){0, 0, 0, 0}, LOOM_PAD_CONSTANT, 0, &y),
            LOOM_ERR_INVALID, "null");
  loom_value_t e;
  CHECK_OK(loom_graph_input(g, "e", LOOM_F32, 1, (int64_t[]){0}, &e));
  CHECK_ERR(loom_pad(g, e, (int64_t[]){1, 0}, LOOM_PAD_EDGE, 0, &y), LOOM_ERR_SHAPE, "edge");
  CHECK_OK(loom_pad(g, e, (int64_t[]){1, 2}, LOOM_PAD_CONSTANT, 0, &y));
  loom_graph_destroy(g);
}

/* A symbolic size is checked when the run knows it. */
static void pad_reflect_symbolic(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n, n2, dims[LOOM_MAX_RANK];
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_add(g, n, 2, &n2));
  loom_value_t x, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, &n, &x));
  CHECK_OK(loom_pad(g, x, (int64_t[]){2, 0}, LOOM_PAD_REFLECT, 0, &y));
  int rank = 0;
  CHECK_OK(loom_value_type(g, y, NULL, &rank, dims));
  CHECK(rank == 1 && dims[0] == n2);
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in = test_tensor(LOOM_F32, 1, (int64_t[]){3}, arange);
  loom_tensor_t *out = test_run1(g, 1, &in);
  CHECK_VALUES(out, LOOM_F32, ((double[]){2, 1, 0, 1, 2}), 5);
  loom_tensor_t *small = test_tensor(LOOM_F32, 1, (int64_t[]){2}, arange), *none = NULL;
  CHECK_ERR(loom_interpret(g, 1, &small, 1, &none), LOOM_ERR_VALUE, "too large");
  CHECK(none == NULL);
  loom_tensor_destroy(in);
  loom_tensor_destroy(out);
  loom_tensor_destroy(small);
  loom_graph_destroy(g);
}

static void flip_and_tile(void) {
  int64_t shape[] = {2, 3};
  loom_value_t x, f, t, t0;
  loom_graph_t *g = graph1(LOOM_I32, 2, shape, &x);
  CHECK_OK(loom_flip(g, x, 2, (int64_t[]){0, -1}, &f));
  CHECK_OK(loom_tile(g, x, (int64_t[]){2, 1}, &t));
  CHECK_OK(loom_tile(g, x, (int64_t[]){0, 3}, &t0));
  CHECK_ERR(loom_flip(g, x, 2, (int64_t[]){1, -1}, &f), LOOM_ERR_INVALID, "twice");
  CHECK_ERR(loom_flip(g, x, 1, (int64_t[]){2}, &f), LOOM_ERR_AXIS, "out of range");
  CHECK_ERR(loom_flip(g, x, 1, NULL, &f), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_tile(g, x, (int64_t[]){1, -2}, &t), LOOM_ERR_INVALID, "non-negative");
  CHECK_ERR(loom_tile(g, x, NULL, &t), LOOM_ERR_INVALID, "null");
  CHECK_OK(loom_graph_output(g, f));
  CHECK_OK(loom_graph_output(g, t));
  CHECK_OK(loom_graph_output(g, t0));
  loom_tensor_t *in = test_tensor(LOOM_I32, 2, shape, arange), *out[3] = {0};
  CHECK_OK(loom_interpret(g, 1, &in, 3, out));
  CHECK_VALUES(out[0], LOOM_I32, ((double[]){5, 4, 3, 2, 1, 0}), 6);
  check_shape(out[1], 2, (int64_t[]){4, 3});
  CHECK_VALUES(out[1], LOOM_I32, ((double[]){0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}), 12);
  check_shape(out[2], 2, (int64_t[]){0, 9});
  for (int i = 0; i < 3; i++) loom_tensor_destroy(out[i]);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(every_op_every_dtype);
  TEST_RUN(split_every_dtype);
  TEST_RUN(reshape_infers_minus_one);
  TEST_RUN(reshape_symbolic);
  TEST_RUN(reshape_errors);
  TEST_RUN(transpose_3d);
  TEST_RUN(noncontiguous_input);
  TEST_RUN(transpose_errors);
  TEST_RUN(expand_broadcasts);
  TEST_RUN(squeeze_unsqueeze);
  TEST_RUN(slice_steps_and_clamping);
  TEST_RUN(slice_2d);
  TEST_RUN(slice_symbolic);
  TEST_RUN(slice_errors);
  TEST_RUN(concat_symbolic);
  TEST_RUN(concat_three);
  TEST_RUN(concat_errors);
  TEST_RUN(split_errors);
  TEST_RUN(pad_modes_1d);
  TEST_RUN(pad_crops_1d);
  TEST_RUN(pad_crops_2d);
  TEST_RUN(pad_errors);
  TEST_RUN(pad_reflect_symbolic);
  TEST_RUN(flip_and_tile);
  return test_summary();
}
