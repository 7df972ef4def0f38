/* Indexing ops: gather, index_select, scatter_add, embedding, one_hot,
 * checked against hand-computed results. */
#include "harness.h"

static const loom_dtype_t ALL_DTYPES[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16,
                                          LOOM_I8,  LOOM_I32, LOOM_I64, LOOM_BOOL};
static const loom_dtype_t INDEX_DTYPES[] = {LOOM_I8, LOOM_I32, LOOM_I64};

/* Builds the op under test on inputs in[], with integer arguments arg. */
typedef loom_status_t (*build_fn)(loom_graph_t *g, const loom_value_t *in,
                                  const int64_t *arg, loom_value_t *out);

static loom_status_t build_gather(loom_graph_t *g, const loom_value_t *in,
                                  const int64_t *arg, loom_value_t *out) {
  return loom_gather(g, in[0], in[1], arg[0], out);
}
static loom_status_t build_index_select(loom_graph_t *g, const loom_value_t *in,
                                        const int64_t *arg, loom_value_t *out) {
  return loom_index_select(g, in[0], in[1], arg[0], out);
}
static loom_status_t build_scatter_add(loom_graph_t *g, const loom_value_t *in,
                                       const int64_t *arg, loom_value_t *out) {
  return loom_scatter_add(g, in[0], in[1], in[2], arg[0], out);
}
static loom_status_t build_embedding(loom_graph_t *g, const loom_value_t *in,
                                     const int64_t *arg, loom_value_t *out) {
  (void)arg;
  return loom_embedding(g, in[0], in[1], out);
}
static loom_status_t build_one_hot(loom_graph_t *g, const loom_value_t *in,
                                   const int64_t *arg, loom_value_t *out) {
  return loom_one_hot(g, in[0], arg[0], (loom_dtype_t)arg[1], out);
}

/* Builds a graph whose inputs have the tensors' dtypes and shapes, adds
 * the op and runs it; returns the status of the step that failed. */
static loom_status_t run_op(int n, loom_tensor_t *const *in, build_fn build,
                            const int64_t *arg, loom_tensor_t **out) {
  *out = NULL;
  loom_graph_t *g;
  loom_status_t s = loom_graph_create(&g);
  if (s != LOOM_OK) return s;
  loom_value_t v[3], y;
  for (int i = 0; i < n && s == LOOM_OK; i++) {
    int64_t dims[LOOM_MAX_RANK];
    int rank = loom_tensor_rank(in[i]);
    for (int d = 0; d < rank; d++) dims[d] = loom_tensor_dim(in[i], d);
    const char *names[3] = {"x0", "x1", "x2"};
    s = loom_graph_input(g, names[i], loom_tensor_dtype(in[i]), rank, dims, &v[i]);
  }
  if (s == LOOM_OK) s = build(g, v, arg, &y);
  if (s == LOOM_OK) s = loom_graph_output(g, y);
  if (s == LOOM_OK) s = loom_interpret(g, n, in, 1, out);
  loom_graph_destroy(g);
  return s;
}

static void check_shape(const loom_tensor_t *t, int rank, const int64_t *shape) {
  CHECK(t && loom_tensor_rank(t) == rank);
  for (int d = 0; t && d < rank && d < loom_tensor_rank(t); d++)
    CHECK(loom_tensor_dim(t, d) == shape[d]);
}

/* Runs the op, checks the result's dtype, shape and values, and destroys
 * the inputs and the result. */
static void expect(int n, loom_tensor_t **in, build_fn build, const int64_t *arg,
                   loom_dtype_t dtype, int rank, const int64_t *shape,
                   const double *want) {
  loom_tensor_t *out = NULL;
  CHECK_OK(run_op(n, in, build, arg, &out));
  if (out) {
    CHECK(loom_tensor_dtype(out) == dtype);
    check_shape(out, rank, shape);
    CHECK_TENSOR(out, want, loom_tensor_numel(out), 0, test_rtol(dtype, 1));
  }
  loom_tensor_destroy(out);
  for (int i = 0; i < n; i++) loom_tensor_destroy(in[i]);
}

/* The status of running the op; destroys the inputs. */
static loom_status_t attempt(int n, loom_tensor_t **in, build_fn build,
                             const int64_t *arg) {
  loom_tensor_t *out = NULL;
  loom_status_t s = run_op(n, in, build, arg, &out);
  loom_tensor_destroy(out);
  for (int i = 0; i < n; i++) loom_tensor_destroy(in[i]);
  return s;
}

static loom_tensor_t *tensor(loom_dtype_t dtype, int rank, const int64_t *shape,
                             const double *values) {
  return test_tensor(dtype, rank, shape, values);
}

/* ---- gather ---------------------------------------------------------------- */

static void gather_axis0_2d_indices(void) {
  int64_t ds[] = {3, 2}, is[] = {2, 2}, os[] = {2, 2, 2}, axis = 0;
  double data[] = {1, 2, 3, 4, 5, 6}, ind[] = {0, 1, 1, 2};
  double want[] = {1, 2, 3, 4, 3, 4, 5, 6};
  loom_tensor_t *in[] = {tensor(LOOM_F32, 2, ds, data), tensor(LOOM_I64, 2, is, ind)};
  expect(2, in, build_gather, &axis, LOOM_F32, 3, os, want);
}

static void gather_axis1_2d_indices(void) {
  int64_t ds[] = {3, 3}, is[] = {2, 2}, os[] = {3, 2, 2}, axis = 1;
  double data[] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, ind[] = {0, 2, 1, 1};
  double want[] = {1, 3, 2, 2, 4, 6, 5, 5, 7, 9, 8, 8};
  loom_tensor_t *in[] = {tensor(LOOM_F32, 2, ds, data), tensor(LOOM_I64, 2, is, ind)};
  expect(2, in, build_gather, &axis, LOOM_F32, 3, os, want);
}

static void gather_axis_minus1_2d_indices(void) {
  int64_t ds[] = {2, 2, 3}, is[] = {2, 2}, os[] = {2, 2, 2, 2}, axis = -1;
  double data[12], ind[] = {2, 0, 1, 1};
  for (int i = 0; i < 12; i++) data[i] = i;
  double want[] = {2, 0, 1, 1, 5, 3, 4, 4, 8, 6, 7, 7, 11, 9, 10, 10};
  loom_tensor_t *in[] = {tensor(LOOM_F64, 3, ds, data), tensor(LOOM_I32, 2, is, ind)};
  expect(2, in, build_gather, &axis, LOOM_F64, 4, os, want);
}

static void gather_negative_indices(void) {
  int64_t ds[] = {4}, is[] = {3}, axis = 0;
  double data[] = {10, 20, 30, 40}, ind[] = {-1, -4, 2}, want[] = {40, 10, 30};
  loom_tensor_t *in[] = {tensor(LOOM_I32, 1, ds, data), tensor(LOOM_I64, 1, is, ind)};
  expect(2, in, build_gather, &axis, LOOM_I32, 1, is, want);
  /* Along axis 1 of a matrix, with 2-D negative indices. */
  int64_t ds2[] = {2, 3}, is2[] = {1, 2}, os2[] = {2, 1, 2};
  double data2[] = {1, 2, 3, 4, 5, 6}, ind2[] = {-3, -1}, want2[] = {1, 3, 4, 6};
  int64_t axis1 = 1;
  loom_tensor_t *in2[] = {tensor(LOOM_F32, 2, ds2, data2), tensor(LOOM_I8, 2, is2, ind2)};
  expect(2, in2, build_gather, &axis1, LOOM_F32, 3, os2, want2);
}

/* A scalar index drops the axis (ONNX). */
static void gather_scalar_index(void) {
  int64_t ds[] = {3, 2}, os[] = {2}, none[] = {0}, axis = 0;
  double data[] = {1, 2, 3, 4, 5, 6}, ind[] = {2}, want[] = {5, 6};
  loom_tensor_t *in[] = {tensor(LOOM_F32, 2, ds, data), tensor(LOOM_I64, 0, none, ind)};
  expect(2, in, build_gather, &axis, LOOM_F32, 1, os, want);
}

/* Values with zeros among them, so that bool data is a real test too. */
static const double MIXED[] = {1, 0, 0, 3, -5, 0};

static void want_mixed(loom_dtype_t dtype, const double *pick, double *want) {
  for (int i = 0; i < 6; i++)
    want[i] = dtype == LOOM_BOOL ? pick[i] != 0 : pick[i];
}

static void gather_all_dtypes(void) {
  int64_t ds[] = {3, 2}, is[] = {1, 3}, os[] = {1, 3, 2}, axis = 0;
  double ind[] = {2, 0, 1}, rows[] = {-5, 0, 1, 0, 0, 3}, want[6];
  for (size_t k = 0; k < sizeof ALL_DTYPES / sizeof *ALL_DTYPES; k++) {
    loom_dtype_t dt = ALL_DTYPES[k];
    want_mixed(dt, rows, want);
    loom_tensor_t *in[] = {tensor(dt, 2, ds, MIXED), tensor(LOOM_I64, 2, is, ind)};
    expect(2, in, build_gather, &axis, dt, 3, os, want);
  }
}

static void gather_index_dtypes(void) {
  int64_t ds[] = {5}, is[] = {3}, axis = 0;
  double data[] = {10, 20, 30, 40, 50}, ind[] = {4, -2, 0}, want[] = {50, 40, 10};
  for (size_t k = 0; k < sizeof INDEX_DTYPES / sizeof *INDEX_DTYPES; k++) {
    loom_tensor_t *in[] = {tensor(LOOM_F32, 1, ds, data),
                           tensor(INDEX_DTYPES[k], 1, is, ind)};
    expect(2, in, build_gather, &axis, LOOM_F32, 1, is, want);
  }
}

/* A transposed view of data and a strided index give what their
 * contiguous copies give. */
static void gather_non_contiguous(void) {
  float mem[] = {1, 2, 3, 4, 5, 6}; /* (3, 2) row-major; viewed as (2, 3) */
  int64_t imem[] = {2, 99, 0, 99};
  int64_t vs[] = {2, 3}, vst[] = {1, 2}, is[] = {2}, ist[] = {2}, os[] = {2, 2};
  int64_t axis = 1;
  double want[] = {5, 1, 6, 2};
  loom_tensor_t *in[2];
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, vs, vst, mem, &in[0]));
  CHECK_OK(loom_tensor_wrap(LOOM_I64, 1, is, ist, imem, &in[1]));
  expect(2, in, build_gather, &axis, LOOM_F32, 2, os, want);
  double logical[] = {1, 3, 5, 2, 4, 6}, ind[] = {2, 0};
  loom_tensor_t *in2[] = {tensor(LOOM_F32, 2, vs, logical), tensor(LOOM_I64, 1, is, ind)};
  expect(2, in2, build_gather, &axis, LOOM_F32, 2, os, want);
}

/* ---- index_select ------------------------------------------------------------ */

static void index_select_axes(void) {
  int64_t ds[] = {3, 4}, is[] = {3}, os[] = {3, 3}, axis = 1;
  double data[12], ind[] = {3, 0, 3};
  for (int i = 0; i < 12; i++) data[i] = i;
  double want1[] = {3, 0, 3, 7, 4, 7, 11, 8, 11};
  loom_tensor_t *in[] = {tensor(LOOM_F32, 2, ds, data), tensor(LOOM_I32, 1, is, ind)};
  expect(2, in, build_index_select, &axis, LOOM_F32, 2, os, want1);
  int64_t os0[] = {3, 4}, axis0 = 0;
  double ind0[] = {2, 2, 0}, want0[] = {8, 9, 10, 11, 8, 9, 10, 11, 0, 1, 2, 3};
  loom_tensor_t *in0[] = {tensor(LOOM_I64, 2, ds, data), tensor(LOOM_I8, 1, is, ind0)};
  expect(2, in0, build_index_select, &axis0, LOOM_I64, 2, os0, want0);
}

static void index_select_all_dtypes(void) {
  int64_t ds[] = {3, 2}, is[] = {3}, axis = 0;
  double ind[] = {2, 0, 1}, rows[] = {-5, 0, 1, 0, 0, 3}, want[6];
  for (size_t k = 0; k < sizeof ALL_DTYPES / sizeof *ALL_DTYPES; k++) {
    loom_dtype_t dt = ALL_DTYPES[k];
    want_mixed(dt, rows, want);
    loom_tensor_t *in[] = {tensor(dt, 2, ds, MIXED), tensor(LOOM_I64, 1, is, ind)};
    int64_t os[] = {3, 2};
    expect(2, in, build_index_select, &axis, dt, 2, os, want);
  }
}

/* ---- scatter_add ------------------------------------------------------------- */

/* The example of torch.Tensor.scatter_add_'s documentation. */
static void scatter_add_axis0(void) {
  int64_t ss[] = {3, 5}, is[] = {2, 5}, axis = 0;
  double self[15] = {0}, ones[10], ind[] = {0, 1, 2, 0, 0, 0, 1, 2, 2, 2};
  for (int i = 0; i < 10; i++) ones[i] = 1;
  double want[] = {2, 0, 0, 1, 1, 0, 2, 0, 0, 0, 0, 0, 2, 1, 1};
  loom_tensor_t *in[] = {tensor(LOOM_F32, 2, ss, self), tensor(LOOM_I64, 2, is, ind),
                         tensor(LOOM_F32, 2, is, ones)};
  expect(3, in, build_scatter_add, &axis, LOOM_F32, 2, ss, want);
}

/* Along axis 1, with an index smaller than src and a repeated target. */
static const double SA_SELF[] = {1, 2, 3, 4, 5, 6};
static const double SA_INDEX[] = {0, 0, 2, 1};
static const double SA_SRC[] = {10, 20, 30, 40, 50, 60};
static const double SA_WANT[] = {31, 2, 3, 4, 55, 46};

static void scatter_add_repeated_all_dtypes(void) {
  int64_t ss[] = {2, 3}, is[] = {2, 2};
  for (size_t k = 0; k < 7; k++) {
    loom_dtype_t dt = ALL_DTYPES[k];
    for (int64_t axis = -1; axis <= 1; axis += 2) {
      loom_tensor_t *in[] = {tensor(dt, 2, ss, SA_SELF),
                             tensor(INDEX_DTYPES[k % 3], 2, is, SA_INDEX),
                             tensor(dt, 2, ss, SA_SRC)};
      expect(3, in, build_scatter_add, &axis, dt, 2, ss, SA_WANT);
    }
  }
}

static void scatter_add_non_contiguous(void) {
  float self_mem[] = {1, 4, 2, 5, 3, 6}; /* transposed view of SA_SELF */
  int64_t ss[] = {2, 3}, sst[] = {1, 2}, is[] = {2, 2}, axis = 1;
  loom_tensor_t *in[3];
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, ss, sst, self_mem, &in[0]));
  in[1] = tensor(LOOM_I32, 2, is, SA_INDEX);
  in[2] = tensor(LOOM_F32, 2, ss, SA_SRC);
  expect(3, in, build_scatter_add, &axis, LOOM_F32, 2, ss, SA_WANT);
}

/* Integers wrap like repeated adds in the dtype; floats are summed
 * exactly and rounded once. */
static void scatter_add_rounding(void) {
  int64_t one[] = {1}, two[] = {2}, axis = 0;
  double self_i[] = {100}, src_i[] = {100, 100}, ind[] = {0, 0}, want_i[] = {44};
  loom_tensor_t *in[] = {tensor(LOOM_I8, 1, one, self_i), tensor(LOOM_I64, 1, two, ind),
                         tensor(LOOM_I8, 1, two, src_i)};
  expect(3, in, build_scatter_add, &axis, LOOM_I8, 1, one, want_i);
  /* 2048 + 1 + 1 = 2050 is a half; adding 1 at a time would stay at 2048. */
  double self_h[] = {2048}, src_h[] = {1, 1}, want_h[] = {2050};
  loom_tensor_t *in2[] = {tensor(LOOM_F16, 1, one, self_h), tensor(LOOM_I64, 1, two, ind),
                          tensor(LOOM_F16, 1, two, src_h)};
  expect(3, in2, build_scatter_add, &axis, LOOM_F16, 1, one, want_h);
}

/* ---- embedding ----------------------------------------------------------------- */

static void embedding_rows(void) {
  int64_t ws[] = {4, 3}, is[] = {2, 2}, os[] = {2, 2, 3}, none = 0;
  double w[12], ind[] = {1, 3, 0, 1};
  for (int i = 0; i < 12; i++) w[i] = i;
  double want[] = {3, 4, 5, 9, 10, 11, 0, 1, 2, 3, 4, 5};
  for (size_t k = 0; k < sizeof INDEX_DTYPES / sizeof *INDEX_DTYPES; k++) {
    loom_tensor_t *in[] = {tensor(LOOM_F32, 2, ws, w), tensor(INDEX_DTYPES[k], 2, is, ind)};
    expect(2, in, build_embedding, &none, LOOM_F32, 3, os, want);
  }
}

static void embedding_all_dtypes(void) {
  int64_t ws[] = {3, 2}, is[] = {3}, os[] = {3, 2}, none = 0;
  double ind[] = {2, 0, 1}, rows[] = {-5, 0, 1, 0, 0, 3}, want[6];
  for (size_t k = 0; k < sizeof ALL_DTYPES / sizeof *ALL_DTYPES; k++) {
    loom_dtype_t dt = ALL_DTYPES[k];
    want_mixed(dt, rows, want);
    loom_tensor_t *in[] = {tensor(dt, 2, ws, MIXED), tensor(LOOM_I32, 1, is, ind)};
    expect(2, in, build_embedding, &none, dt, 2, os, want);
  }
}

static void embedding_non_contiguous(void) {
  double mem[] = {0, 2, 4, 1, 3, 5}; /* (2, 3) viewed transposed as (3, 2) */
  int64_t ws[] = {3, 2}, wst[] = {1, 3}, is[] = {2}, os[] = {2, 2}, none = 0;
  double ind[] = {2, 1}, want[] = {4, 5, 2, 3};
  loom_tensor_t *in[2];
  CHECK_OK(loom_tensor_wrap(LOOM_F64, 2, ws, wst, mem, &in[0]));
  in[1] = tensor(LOOM_I64, 1, is, ind);
  expect(2, in, build_embedding, &none, LOOM_F64, 2, os, want);
}

/* ---- one_hot ------------------------------------------------------------------- */

static void one_hot_dtypes(void) {
  int64_t is[] = {4}, os[] = {4, 3};
  double ind[] = {0, 2, 1, 2};
  double want[] = {1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1};
  for (size_t k = 0; k < sizeof ALL_DTYPES / sizeof *ALL_DTYPES; k++) {
    int64_t arg[] = {3, ALL_DTYPES[k]};
    loom_tensor_t *in[] = {tensor(INDEX_DTYPES[k % 3], 1, is, ind)};
    expect(1, in, build_one_hot, arg, ALL_DTYPES[k], 2, os, want);
  }
  int64_t is2[] = {2, 1}, os2[] = {2, 1, 2}, arg2[] = {2, LOOM_I64};
  double ind2[] = {1, 0}, want2[] = {0, 1, 1, 0};
  loom_tensor_t *in2[] = {tensor(LOOM_I8, 2, is2, ind2)};
  expect(1, in2, build_one_hot, arg2, LOOM_I64, 3, os2, want2);
}

/* ---- symbolic shapes ------------------------------------------------------------ */

static void check_type(loom_graph_t *g, loom_value_t v, loom_dtype_t dtype, int rank,
                       const loom_dim_t *dims) {
  loom_dtype_t dt;
  int r = -1;
  loom_dim_t got[LOOM_MAX_RANK];
  CHECK_OK(loom_value_type(g, v, &dt, &r, got));
  CHECK(dt == dtype && r == rank);
  for (int d = 0; d < rank && d < r; d++) CHECK(got[d] == dims[d]);
}

static void symbolic_gather_embedding(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n, b, s;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_symbol(g, "b", &b));
  CHECK_OK(loom_dim_symbol(g, "s", &s));
  loom_dim_t ds[] = {5, 4}, is[] = {n, 2}, bs[] = {b, 5}, three[] = {3}, es[] = {b, s};
  loom_value_t data, ind, bdata, ind3, tok, y0, y1, y2, y3, y4;
  CHECK_OK(loom_graph_input(g, "data", LOOM_F32, 2, ds, &data));
  CHECK_OK(loom_graph_input(g, "ind", LOOM_I64, 2, is, &ind));
  CHECK_OK(loom_graph_input(g, "bdata", LOOM_F32, 2, bs, &bdata));
  CHECK_OK(loom_graph_input(g, "ind3", LOOM_I32, 1, three, &ind3));
  CHECK_OK(loom_graph_input(g, "tok", LOOM_I32, 2, es, &tok));
  CHECK_OK(loom_gather(g, data, ind, 0, &y0));
  CHECK_OK(loom_gather(g, bdata, ind3, 1, &y1));
  CHECK_OK(loom_embedding(g, data, tok, &y2));
  CHECK_OK(loom_one_hot(g, ind, 7, LOOM_F32, &y3));
  CHECK_OK(loom_scatter_add(g, bdata, tok, bdata, 1, &y4));
  loom_dim_t w0[] = {n, 2, 4}, w1[] = {b, 3}, w2[] = {b, s, 4}, w3[] = {n, 2, 7};
  check_type(g, y0, LOOM_F32, 3, w0);
  check_type(g, y1, LOOM_F32, 2, w1);
  check_type(g, y2, LOOM_F32, 3, w2);
  check_type(g, y3, LOOM_F32, 3, w3);
  check_type(g, y4, LOOM_F32, 2, bs);
  loom_graph_destroy(g);
}

/* The symbol binds at run time: out[i][j][k] = data[ind[i][j]][k] = 4*ind + k. */
static void symbolic_gather_runs(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_dim_t ds[] = {5, 4}, is[] = {n, 2};
  loom_value_t data, ind, y;
  CHECK_OK(loom_graph_input(g, "data", LOOM_F32, 2, ds, &data));
  CHECK_OK(loom_graph_input(g, "ind", LOOM_I64, 2, is, &ind));
  CHECK_OK(loom_gather(g, data, ind, 0, &y));
  CHECK_OK(loom_graph_output(g, y));
  int64_t dshape[] = {5, 4}, ishape[] = {3, 2}, oshape[] = {3, 2, 4};
  double dv[20], iv[] = {0, 4, 1, 3, 2, 2}, want[24];
  for (int i = 0; i < 20; i++) dv[i] = i;
  for (int i = 0; i < 24; i++) want[i] = 4 * iv[i / 4] + i % 4;
  loom_tensor_t *in[] = {tensor(LOOM_F32, 2, dshape, dv), tensor(LOOM_I64, 2, ishape, iv)};
  loom_tensor_t *out = test_run1(g, 2, in);
  check_shape(out, 3, oshape);
  CHECK_TENSOR(out, want, 24, 0, 0);
  loom_tensor_destroy(out);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(g);
}

/* Index dims against a symbolic self are checked when the graph runs. */
static void symbolic_scatter_add_checked_at_run(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_dim_t ss[] = {n, 3}, is[] = {2, 3};
  loom_value_t self, ind, src, y;
  CHECK_OK(loom_graph_input(g, "self", LOOM_F32, 2, ss, &self));
  CHECK_OK(loom_graph_input(g, "ind", LOOM_I64, 2, is, &ind));
  CHECK_OK(loom_graph_input(g, "src", LOOM_F32, 2, is, &src));
  CHECK_OK(loom_scatter_add(g, self, ind, src, 1, &y));
  CHECK_OK(loom_graph_output(g, y));
  int64_t s1[] = {1, 3}, s2[] = {2, 3};
  double zeros[6] = {0}, iv[] = {0, 0, 0, 2, 2, 2}, sv[] = {1, 2, 3, 4, 5, 6};
  double want[] = {6, 0, 0, 0, 0, 15};
  loom_tensor_t *small = tensor(LOOM_F32, 2, s1, zeros), *fit = tensor(LOOM_F32, 2, s2, zeros);
  loom_tensor_t *it = tensor(LOOM_I64, 2, s2, iv), *st = tensor(LOOM_F32, 2, s2, sv);
  loom_tensor_t *out = NULL, *bad[] = {small, it, st}, *good[] = {fit, it, st};
  CHECK_ERR(loom_interpret(g, 3, bad, 1, &out), LOOM_ERR_SHAPE, "exceeds dim 0 of self (1)");
  CHECK(out == NULL);
  CHECK_OK(loom_interpret(g, 3, good, 1, &out));
  CHECK_TENSOR(out, want, 6, 0, 0);
  loom_tensor_destroy(out);
  loom_tensor_destroy(small);
  loom_tensor_destroy(fit);
  loom_tensor_destroy(it);
  loom_tensor_destroy(st);
  loom_graph_destroy(g);
}

/* ---- errors ---------------------------------------------------------------------- */

static void gather_errors(void) {
  int64_t ds[] = {4}, is[] = {2}, axis0 = 0, axis1 = 1, none[] = {0};
  double data[] = {1, 2, 3, 4}, ind[] = {0, 1}, big[] = {0, 4}, neg[] = {-5, 0};
  loom_tensor_t *f[] = {tensor(LOOM_F32, 1, ds, data), tensor(LOOM_F32, 1, is, ind)};
  CHECK_ERR(attempt(2, f, build_gather, &axis0), LOOM_ERR_DTYPE, "indices");
  loom_tensor_t *b[] = {tensor(LOOM_F32, 1, ds, data), tensor(LOOM_BOOL, 1, is, ind)};
  CHECK_ERR(attempt(2, b, build_gather, &axis0), LOOM_ERR_DTYPE, "bool");
  loom_tensor_t *hi[] = {tensor(LOOM_F32, 1, ds, data), tensor(LOOM_I64, 1, is, big)};
  CHECK_ERR(attempt(2, hi, build_gather, &axis0), LOOM_ERR_VALUE, "gather: index 4");
  loom_tensor_t *lo[] = {tensor(LOOM_F32, 1, ds, data), tensor(LOOM_I32, 1, is, neg)};
  CHECK_ERR(attempt(2, lo, build_gather, &axis0), LOOM_ERR_VALUE, "size 4");
  loom_tensor_t *ax[] = {tensor(LOOM_F32, 1, ds, data), tensor(LOOM_I64, 1, is, ind)};
  CHECK_ERR(attempt(2, ax, build_gather, &axis1), LOOM_ERR_AXIS, "axis 1");
  loom_tensor_t *sc[] = {tensor(LOOM_F32, 0, none, data), tensor(LOOM_I64, 1, is, ind)};
  CHECK_ERR(attempt(2, sc, build_gather, &axis0), LOOM_ERR_SHAPE, "rank");
  /* Out of range even where the result is empty. */
  int64_t es[] = {4, 0};
  loom_tensor_t *em[] = {tensor(LOOM_F32, 2, es, data), tensor(LOOM_I64, 1, is, big)};
  CHECK_ERR(attempt(2, em, build_gather, &axis0), LOOM_ERR_VALUE, "out of range");
  /* A result of rank 9. */
  int64_t r5[] = {1, 1, 1, 1, 1};
  loom_tensor_t *rk[] = {tensor(LOOM_F32, 5, r5, data), tensor(LOOM_I64, 5, r5, ind)};
  CHECK_ERR(attempt(2, rk, build_gather, &axis0), LOOM_ERR_SHAPE, "rank 9");
}

static void index_select_errors(void) {
  int64_t ds[] = {4}, is[] = {2}, is2[] = {1, 2}, axis = 0, axis_bad = -2;
  double data[] = {1, 2, 3, 4}, ind[] = {0, 1}, big[] = {9, 0};
  loom_tensor_t *two[] = {tensor(LOOM_F32, 1, ds, data), tensor(LOOM_I64, 2, is2, ind)};
  CHECK_ERR(attempt(2, two, build_index_select, &axis), LOOM_ERR_SHAPE, "1-D");
  loom_tensor_t *f[] = {tensor(LOOM_F32, 1, ds, data), tensor(LOOM_F64, 1, is, ind)};
  CHECK_ERR(attempt(2, f, build_index_select, &axis), LOOM_ERR_DTYPE, "index");
  loom_tensor_t *ax[] = {tensor(LOOM_F32, 1, ds, data), tensor(LOOM_I64, 1, is, ind)};
  CHECK_ERR(attempt(2, ax, build_index_select, &axis_bad), LOOM_ERR_AXIS, "out of range");
  loom_tensor_t *hi[] = {tensor(LOOM_F32, 1, ds, data), tensor(LOOM_I64, 1, is, big)};
  CHECK_ERR(attempt(2, hi, build_index_select, &axis), LOOM_ERR_VALUE, "index_select: index 9");
}

static void scatter_add_errors(void) {
  int64_t ss[] = {2, 3}, is[] = {2, 2}, r1[] = {6}, big[] = {3, 2}, wide[] = {2, 4};
  int64_t axis = 1, axis0 = 0, axis_bad = 2;
  double v[12] = {0}, ind[] = {0, 0, 2, 1}, high[] = {0, 3, 0, 0}, neg[] = {0, -1, 0, 0};
  loom_tensor_t *rank[] = {tensor(LOOM_F32, 2, ss, v), tensor(LOOM_I64, 1, r1, v),
                           tensor(LOOM_F32, 2, ss, v)};
  CHECK_ERR(attempt(3, rank, build_scatter_add, &axis), LOOM_ERR_SHAPE, "same rank");
  loom_tensor_t *dt[] = {tensor(LOOM_F32, 2, ss, v), tensor(LOOM_I64, 2, is, ind),
                         tensor(LOOM_F64, 2, ss, v)};
  CHECK_ERR(attempt(3, dt, build_scatter_add, &axis), LOOM_ERR_DTYPE, "src");
  loom_tensor_t *fi[] = {tensor(LOOM_F32, 2, ss, v), tensor(LOOM_F32, 2, is, ind),
                         tensor(LOOM_F32, 2, ss, v)};
  CHECK_ERR(attempt(3, fi, build_scatter_add, &axis), LOOM_ERR_DTYPE, "index");
  loom_tensor_t *bo[] = {tensor(LOOM_BOOL, 2, ss, v), tensor(LOOM_I64, 2, is, ind),
                         tensor(LOOM_BOOL, 2, ss, v)};
  CHECK_ERR(attempt(3, bo, build_scatter_add, &axis), LOOM_ERR_DTYPE, "bool");
  loom_tensor_t *ax[] = {tensor(LOOM_F32, 2, ss, v), tensor(LOOM_I64, 2, is, ind),
                         tensor(LOOM_F32, 2, ss, v)};
  CHECK_ERR(attempt(3, ax, build_scatter_add, &axis_bad), LOOM_ERR_AXIS, "axis 2");
  /* index larger than src, then larger than self off the axis. */
  loom_tensor_t *gs[] = {tensor(LOOM_F32, 2, ss, v), tensor(LOOM_I64, 2, wide, v),
                         tensor(LOOM_F32, 2, ss, v)};
  CHECK_ERR(attempt(3, gs, build_scatter_add, &axis0), LOOM_ERR_SHAPE, "of src");
  loom_tensor_t *gself[] = {tensor(LOOM_F32, 2, ss, v), tensor(LOOM_I64, 2, big, v),
                            tensor(LOOM_F32, 2, big, v)};
  CHECK_ERR(attempt(3, gself, build_scatter_add, &axis), LOOM_ERR_SHAPE, "of self");
  /* Along the axis, index may be longer than self. */
  loom_tensor_t *ok[] = {tensor(LOOM_F32, 2, ss, v), tensor(LOOM_I64, 2, big, v),
                         tensor(LOOM_F32, 2, big, v)};
  CHECK_OK(attempt(3, ok, build_scatter_add, &axis0));
  loom_tensor_t *hi[] = {tensor(LOOM_F32, 2, ss, v), tensor(LOOM_I64, 2, is, high),
                         tensor(LOOM_F32, 2, ss, v)};
  CHECK_ERR(attempt(3, hi, build_scatter_add, &axis), LOOM_ERR_VALUE, "scatter_add: index 3");
  loom_tensor_t *ng[] = {tensor(LOOM_F32, 2, ss, v), tensor(LOOM_I32, 2, is, neg),
                         tensor(LOOM_F32, 2, ss, v)};
  CHECK_ERR(attempt(3, ng, build_scatter_add, &axis), LOOM_ERR_VALUE, "index -1");
}

static void embedding_errors(void) {
  int64_t ws[] = {3, 2}, w1[] = {6}, is[] = {2}, r8[] = {1, 1, 1, 1, 1, 1, 1, 1}, none = 0;
  double w[6] = {0}, ind[] = {0, 1}, big[] = {3, 0}, neg[] = {-1, 0};
  loom_tensor_t *r[] = {tensor(LOOM_F32, 1, w1, w), tensor(LOOM_I64, 1, is, ind)};
  CHECK_ERR(attempt(2, r, build_embedding, &none), LOOM_ERR_SHAPE, "2-D");
  loom_tensor_t *f[] = {tensor(LOOM_F32, 2, ws, w), tensor(LOOM_F16, 1, is, ind)};
  CHECK_ERR(attempt(2, f, build_embedding, &none), LOOM_ERR_DTYPE, "indices");
  loom_tensor_t *hi[] = {tensor(LOOM_F32, 2, ws, w), tensor(LOOM_I64, 1, is, big)};
  CHECK_ERR(attempt(2, hi, build_embedding, &none), LOOM_ERR_VALUE, "size 3");
  loom_tensor_t *ng[] = {tensor(LOOM_F32, 2, ws, w), tensor(LOOM_I8, 1, is, neg)};
  CHECK_ERR(attempt(2, ng, build_embedding, &none), LOOM_ERR_VALUE, "index -1");
  loom_tensor_t *rk[] = {tensor(LOOM_F32, 2, ws, w), tensor(LOOM_I64, 8, r8, ind)};
  CHECK_ERR(attempt(2, rk, build_embedding, &none), LOOM_ERR_SHAPE, "rank 9");
}

static void one_hot_errors(void) {
  int64_t is[] = {2};
  double ind[] = {0, 1}, big[] = {0, 3}, neg[] = {-1, 0};
  int64_t zero[] = {0, LOOM_I64}, negd[] = {-3, LOOM_I64}, three[] = {3, LOOM_F32};
  int64_t bad_dt[] = {3, 99};
  loom_tensor_t *a[] = {tensor(LOOM_I64, 1, is, ind)};
  CHECK_ERR(attempt(1, a, build_one_hot, zero), LOOM_ERR_INVALID, "depth");
  loom_tensor_t *b[] = {tensor(LOOM_I64, 1, is, ind)};
  CHECK_ERR(attempt(1, b, build_one_hot, negd), LOOM_ERR_INVALID, "depth");
  loom_tensor_t *c[] = {tensor(LOOM_I64, 1, is, ind)};
  CHECK_ERR(attempt(1, c, build_one_hot, bad_dt), LOOM_ERR_DTYPE, "99");
  loom_tensor_t *d[] = {tensor(LOOM_F32, 1, is, ind)};
  CHECK_ERR(attempt(1, d, build_one_hot, three), LOOM_ERR_DTYPE, "one_hot");
  loom_tensor_t *e[] = {tensor(LOOM_I32, 1, is, big)};
  CHECK_ERR(attempt(1, e, build_one_hot, three), LOOM_ERR_VALUE, "one_hot: index 3");
  loom_tensor_t *f[] = {tensor(LOOM_I64, 1, is, neg)};
  CHECK_ERR(attempt(1, f, build_one_hot, three), LOOM_ERR_VALUE, "index -1");
}

/* Null graphs and null results are refused, not dereferenced. */
static void null_arguments(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t s[] = {3, 2}, i[] = {2};
  loom_value_t x, ind, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, s, &x));
  CHECK_OK(loom_graph_input(g, "ind", LOOM_I64, 1, i, &ind));
  CHECK_ERR(loom_gather(NULL, x, ind, 0, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_gather(g, x, ind, 0, NULL), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_index_select(NULL, x, ind, 0, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_index_select(g, x, ind, 0, NULL), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_scatter_add(NULL, x, ind, x, 0, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_scatter_add(g, x, ind, x, 0, NULL), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_embedding(NULL, x, ind, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_embedding(g, x, ind, NULL), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_one_hot(NULL, ind, 3, LOOM_I64, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_one_hot(g, ind, 3, LOOM_I64, NULL), LOOM_ERR_INVALID, "null");
  loom_value_t bogus = {12345};
  CHECK_ERR(loom_gather(g, x, bogus, 0, &y), LOOM_ERR_INVALID, "gather");
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(gather_axis0_2d_indices);
  TEST_RUN(gather_axis1_2d_indices);
  TEST_RUN(gather_axis_minus1_2d_indices);
  TEST_RUN(gather_negative_indices);
  TEST_RUN(gather_scalar_index);
  TEST_RUN(gather_all_dtypes);
  TEST_RUN(gather_index_dtypes);
  TEST_RUN(gather_non_contiguous);
  TEST_RUN(index_select_axes);
  TEST_RUN(index_select_all_dtypes);
  TEST_RUN(scatter_add_axis0);
  TEST_RUN(scatter_add_repeated_all_dtypes);
  TEST_RUN(scatter_add_non_contiguous);
  TEST_RUN(scatter_add_rounding);
  TEST_RUN(embedding_rows);
  TEST_RUN(embedding_all_dtypes);
  TEST_RUN(embedding_non_contiguous);
  TEST_RUN(one_hot_dtypes);
  TEST_RUN(symbolic_gather_embedding);
  TEST_RUN(symbolic_gather_runs);
  TEST_RUN(symbolic_scatter_add_checked_at_run);
  TEST_RUN(gather_errors);
  TEST_RUN(index_select_errors);
  TEST_RUN(scatter_add_errors);
  TEST_RUN(embedding_errors);
  TEST_RUN(one_hot_errors);
  TEST_RUN(null_arguments);
  return test_summary();
}
