/* Element and byte counts beyond int64. Every shape product is checked:
 * tensor creation, the builders of each op family, the interpreter, the
 * compiler (with and without the C compiler, with symbols given at
 * compile time or read at each run), and the .npy and checkpoint readers.
 * Each refuses with an error that names the op or tensor and the shape;
 * nothing wraps to a wrong count, and nothing crashes (run it under the
 * asan build too). A shape whose nonzero dims overflow is refused even
 * when a zero dim leaves it empty: its strides could not be computed. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tensor.h"
#include "harness.h"
#include "loom/checkpoint.h"
#include "loom/ops.h"

#define P(k) ((int64_t)1 << (k))

/* ---- shape_size against 128-bit arithmetic ------------------------------------ */

/* The truth: the product of the nonzero dims and its bytes in 128 bits
 * (each factor is below 2^63, so a product checked after each step
 * against INT64_MAX never exceeds 2^126). */
static bool size_fits_128(int rank, const int64_t *shape, int64_t es, int64_t *numel,
                          int64_t *bytes) {
  __int128 n = 1;
  bool empty = false;
  for (int i = 0; i < rank; i++) {
    if (shape[i] == 0) empty = true;
    else n *= shape[i];
    if (n > INT64_MAX) return false;
  }
  if (n * es > INT64_MAX) return false;
  *numel = empty ? 0 : (int64_t)n;
  *bytes = empty ? 0 : (int64_t)(n * es);
  return true;
}

/* A dim near the places where products overflow. */
static int64_t edge_dim(void) {
  switch (test_rand_int(0, 5)) {
    case 0: return 0;
    case 1: return test_rand_int(1, 9);
    case 2: return P(test_rand_int(1, 62)) + test_rand_int(-1, 1);
    case 3: return INT64_MAX - test_rand_int(0, 2);
    case 4: return (int64_t)3037000499 + test_rand_int(-1, 1); /* ~sqrt(2^63) */
    default: return test_rand_int(1, P(31));
  }
}

static void shape_size_matches_int128(void) {
  test_seed(15);
  int refused = 0, empty_refused = 0;
  for (int iter = 0; iter < 20000; iter++) {
    int64_t shape[LOOM_MAX_RANK];
    int rank = (int)test_rand_int(0, LOOM_MAX_RANK);
    bool empty = false;
    for (int i = 0; i < rank; i++) {
      shape[i] = edge_dim();
      empty |= shape[i] == 0;
    }
    int64_t es = (int64_t)1 << test_rand_int(0, 3), n1 = -1, b1 = -1, n2 = -1, b2 = -1;
    bool want = size_fits_128(rank, shape, es, &n2, &b2);
    bool got = shape_size(rank, shape, (size_t)es, &n1, &b1);
    CHECK(got == want);
    if (got && want) CHECK(n1 == n2 && b1 == b2);
    refused += !want;
    empty_refused += !want && empty;
  }
  /* The draw reaches both sides, also empty shapes that overflow. */
  CHECK(refused > 1000 && refused < 19000 && empty_refused > 100);
  int64_t neg[] = {2, -1};
  CHECK(!shape_size(2, neg, 4, NULL, NULL));
  int64_t max[] = {INT64_MAX};
  CHECK(shape_size(1, max, 1, NULL, NULL) && !shape_size(1, max, 2, NULL, NULL));
}

/* ---- Tensors ---------------------------------------------------------------------- */

static void tensors_refuse_overflowing_shapes(void) {
  loom_tensor_t *t = NULL;
  int64_t a[] = {P(62), 8, 0}, b[] = {0, 8, P(62)}, c[] = {P(32), P(32)};
  CHECK_ERR(loom_tensor_create(LOOM_F32, 3, a, &t), LOOM_ERR_SHAPE, "(4611686018427387904, 8, 0)");
  CHECK_ERR(loom_tensor_create(LOOM_F32, 3, b, &t), LOOM_ERR_SHAPE, "its nonzero dims");
  CHECK_ERR(loom_tensor_create(LOOM_I8, 2, c, &t), LOOM_ERR_SHAPE, "int64");
  CHECK(t == NULL);
  float one = 1;
  CHECK_ERR(loom_tensor_wrap(LOOM_F32, 3, a, NULL, &one, &t), LOOM_ERR_SHAPE, "int64");
  /* Strides that reach beyond int64 bytes, on a shape that fits. */
  int64_t s2[] = {3, 2}, far[] = {P(62), 1}, bcast[] = {0, 0};
  CHECK_ERR(loom_tensor_wrap(LOOM_F32, 2, s2, far, &one, &t), LOOM_ERR_SHAPE, "strides");
  CHECK(t == NULL);
  /* An empty shape with small dims, and a broadcast view of 2^60
   * elements over one float, are fine. */
  int64_t empty[] = {0, P(40)}, huge[] = {P(40), P(20)};
  CHECK_OK(loom_tensor_create(LOOM_F32, 2, empty, &t));
  CHECK(loom_tensor_numel(t) == 0);
  loom_tensor_destroy(t);
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, huge, bcast, &one, &t));
  CHECK(loom_tensor_numel(t) == P(60));
  loom_tensor_destroy(t);
}

/* ---- Builders ---------------------------------------------------------------------- */

/* One builder of each family whose output overflows though its inputs
 * fit; the message names the op. */
static void builders_check_output_sizes(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t col, row, idx, one, y;
  int64_t sc[] = {P(32), 1}, sr[] = {1, P(32)}, si[] = {1}, s1[] = {1, 1, 1};
  CHECK_OK(loom_graph_input(g, "col", LOOM_F32, 2, sc, &col));
  CHECK_OK(loom_graph_input(g, "row", LOOM_F32, 2, sr, &row));
  CHECK_OK(loom_graph_input(g, "idx", LOOM_I64, 1, si, &idx));
  CHECK_OK(loom_graph_input(g, "one", LOOM_F32, 3, s1, &one));
  CHECK_ERR(loom_add(g, col, row, &y), LOOM_ERR_SHAPE, "add: output 0 would be f32[4294967296, 4294967296]");
  CHECK_ERR(loom_matmul(g, col, row, 0, 0, &y), LOOM_ERR_SHAPE, "matmul:");
  CHECK_ERR(loom_one_hot(g, idx, P(62), LOOM_F32, &y), LOOM_ERR_SHAPE, "one_hot:");
  loom_dim_t big[] = {P(32), P(32)}, empty[] = {0, 8, P(62)};
  CHECK_ERR(loom_expand(g, col, 2, big, &y), LOOM_ERR_SHAPE, "expand:");
  CHECK_ERR(loom_expand(g, one, 3, empty, &y), LOOM_ERR_SHAPE, "its nonzero dims");
  int64_t reps[] = {P(32), P(32)}, pads[] = {0, 0, 0, P(62)};
  CHECK_ERR(loom_tile(g, col, reps, &y), LOOM_ERR_SHAPE, "tile:");
  CHECK_ERR(loom_pad(g, col, pads, LOOM_PAD_CONSTANT, 0, &y), LOOM_ERR_SHAPE, "pad:");
  /* Two halves of 2^62 bytes: the dim itself overflows. */
  loom_value_t b;
  int64_t sb[] = {P(62)};
  CHECK_OK(loom_graph_input(g, "b", LOOM_BOOL, 1, sb, &b));
  loom_value_t xs[] = {b, b};
  CHECK_ERR(loom_concat(g, 2, xs, 0, &y), LOOM_ERR_SHAPE, "concat:");
  /* Inputs and parameters are checked as they are declared. */
  CHECK_ERR(loom_graph_input(g, "w", LOOM_F32, 3, empty, &y), LOOM_ERR_SHAPE, "input 'w'");
  CHECK_ERR(loom_graph_param(g, "p", LOOM_F32, 3, empty, NULL, &y), LOOM_ERR_SHAPE,
            "parameter 'p'");
  CHECK(loom_graph_num_nodes(g) == 0 && loom_graph_num_inputs(g) == 5);
  loom_graph_destroy(g);
}

/* ---- Symbolic sizes: interpreter, compiler, runtime symbols -------------------------- */

typedef struct sym_case {
  const char *op;             /* named in every message */
  loom_graph_t *g;
  int n_syms;
  const char *sym_names[2];
  int64_t big[2], small[2];   /* symbol values that overflow, and that fit */
  loom_tensor_t *(*inputs)(const int64_t *syms, loom_tensor_t **in); /* fills in[] */
  int n_in;
  double (*truth)(const int64_t *syms); /* the sum at `small` */
} sym_case_t;

static loom_tensor_t *ones(int rank, const int64_t *shape, loom_dtype_t dtype) {
  loom_tensor_t *t = NULL;
  CHECK_OK(loom_tensor_create(dtype, rank, shape, &t));
  int64_t n = loom_tensor_numel(t);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) v[i] = 1;
  loom_tensor_destroy(t);
  t = test_tensor(dtype, rank, shape, v);
  free(v);
  return t;
}

/* sum(expand(x[n], (n, n, n, n))): n = 65536 makes 2^64 elements. */
static loom_tensor_t *hypercube_inputs(const int64_t *syms, loom_tensor_t **in) {
  in[0] = ones(1, &syms[0], LOOM_F32);
  return in[0];
}
static double hypercube_truth(const int64_t *s) { return (double)s[0] * s[0] * s[0] * s[0]; }
static loom_graph_t *hypercube_graph(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_value_t x, e, s;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, &n, &x));
  loom_dim_t four[] = {n, n, n, n};
  CHECK_OK(loom_expand(g, x, 4, four, &e));
  CHECK_OK(loom_sum(g, e, 0, NULL, 0, &s));
  CHECK_OK(loom_graph_output(g, s));
  return g;
}

/* sum(expand(x[1, 1], (n, m))), n and m read from empty inputs (n, 0) and
 * (0, m): n = m = 2^32 is the (2^32, 2^32) expand. */
static loom_tensor_t *square_inputs(const int64_t *syms, loom_tensor_t **in) {
  int64_t s1[] = {1, 1}, sn[] = {syms[0], 0}, sm[] = {0, syms[1]};
  in[0] = ones(2, s1, LOOM_F32);
  CHECK_OK(loom_tensor_create(LOOM_F32, 2, sn, &in[1]));
  CHECK_OK(loom_tensor_create(LOOM_F32, 2, sm, &in[2]));
  return in[0];
}
static double square_truth(const int64_t *s) { return (double)s[0] * s[1]; }
static loom_graph_t *square_graph(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n, m;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_symbol(g, "m", &m));
  loom_value_t x, a, b, e, s;
  int64_t s1[] = {1, 1};
  loom_dim_t sa[] = {n, 0}, sb[] = {0, m}, sq[] = {n, m};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, s1, &x));
  CHECK_OK(loom_graph_input(g, "rows", LOOM_F32, 2, sa, &a));
  CHECK_OK(loom_graph_input(g, "cols", LOOM_F32, 2, sb, &b));
  CHECK_OK(loom_expand(g, x, 2, sq, &e));
  CHECK_OK(loom_sum(g, e, 0, NULL, 0, &s));
  CHECK_OK(loom_graph_output(g, s));
  return g;
}

/* sum(one_hot(idx[n], depth 2^60)): n = 4 makes 2^62 elements of 4
 * bytes; n = 0 is empty and fine. */
static loom_tensor_t *one_hot_inputs(const int64_t *syms, loom_tensor_t **in) {
  CHECK_OK(loom_tensor_create(LOOM_I64, 1, &syms[0], &in[0]));
  return in[0];
}
static double zero_truth(const int64_t *s) {
  (void)s;
  return 0;
}
static loom_graph_t *one_hot_graph(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_value_t x, h, s;
  CHECK_OK(loom_graph_input(g, "idx", LOOM_I64, 1, &n, &x));
  CHECK_OK(loom_one_hot(g, x, P(60), LOOM_F32, &h));
  CHECK_OK(loom_sum(g, h, 0, NULL, 0, &s));
  CHECK_OK(loom_graph_output(g, s));
  return g;
}

static void free_inputs(loom_tensor_t **in, int n) {
  for (int i = 0; i < n; i++) loom_tensor_destroy(in[i]);
}

static void interpreter_refuses(const sym_case_t *c) {
  loom_tensor_t *in[3] = {0}, *out = NULL;
  c->inputs(c->big, in);
  CHECK_ERR(loom_interpret(c->g, c->n_in, in, 1, &out), LOOM_ERR_SHAPE, c->op);
  CHECK_ERR(loom_interpret(c->g, c->n_in, in, 1, &out), LOOM_ERR_SHAPE, "int64");
  CHECK(out == NULL);
  free_inputs(in, c->n_in);
}

/* Symbols given at compile time: loom_compile refuses. */
static void compiler_refuses(const sym_case_t *c, int use_cc) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.use_cc = use_cc;
  o.n_symbols = c->n_syms;
  o.symbol_names = c->sym_names;
  o.symbol_values = c->big;
  loom_executable_t *e = NULL;
  CHECK_ERR(loom_compile(c->g, &o, &e), LOOM_ERR_SHAPE, c->op);
  CHECK(e == NULL);
}

/* Runtime symbols: the run at the big sizes fails naming the symbols,
 * and the executable still runs right at small sizes after it. */
static void runtime_symbols_refuse(const sym_case_t *c, int use_cc) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.use_cc = use_cc;
  o.dynamic_symbols = 1;
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(c->g, &o, &e));
  if (!e) return;
  loom_tensor_t *in[3] = {0}, *out = NULL;
  int64_t scalar_shape[1];
  CHECK_OK(loom_tensor_create(LOOM_F32, 0, scalar_shape, &out));
  c->inputs(c->big, in);
  char want[64];
  snprintf(want, sizeof want, "%s = %lld", c->sym_names[0], (long long)c->big[0]);
  CHECK_ERR(loom_executable_run(e, c->n_in, in, 1, &out), LOOM_ERR_SHAPE, want);
  CHECK_ERR(loom_executable_run(e, c->n_in, in, 1, &out), LOOM_ERR_SHAPE, c->op);
  free_inputs(in, c->n_in);
  c->inputs(c->small, in);
  CHECK_OK(loom_executable_run(e, c->n_in, in, 1, &out));
  CHECK_NEAR(test_get(out, 0), c->truth(c->small), 0, 0);
  free_inputs(in, c->n_in);
  loom_tensor_destroy(out);
  loom_executable_destroy(e);
}

static void run_case(sym_case_t *c) {
  interpreter_refuses(c);
  for (int cc = 1; cc >= 0; cc--) {
    compiler_refuses(c, cc);
    runtime_symbols_refuse(c, cc);
  }
  loom_graph_destroy(c->g);
}

static void expand_hypercube_of_65536(void) {
  sym_case_t c = {"expand", hypercube_graph(), 1, {"n"}, {65536}, {5},
                  hypercube_inputs, 1, hypercube_truth};
  run_case(&c);
}

static void expand_square_of_2_32(void) {
  sym_case_t c = {"expand", square_graph(), 2, {"n", "m"}, {P(32), P(32)}, {3, 7},
                  square_inputs, 3, square_truth};
  run_case(&c);
}

static void one_hot_of_2_60_rows(void) {
  sym_case_t c = {"one_hot", one_hot_graph(), 1, {"n"}, {4}, {0},
                  one_hot_inputs, 1, zero_truth};
  run_case(&c);
}

/* An output that itself overflows: no tensor can be made for it. */
static void overflowing_output_has_no_tensor(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_value_t x, e;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, &n, &x));
  loom_dim_t four[] = {n, n, n, n};
  CHECK_OK(loom_expand(g, x, 4, four, &e));
  CHECK_OK(loom_graph_output(g, e));
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.dynamic_symbols = 1;
  loom_executable_t *ex = NULL;
  CHECK_OK(loom_compile(g, &o, &ex));
  int64_t n0 = 65536;
  loom_tensor_t *in = ones(1, &n0, LOOM_F32), *out = NULL;
  if (ex) CHECK_ERR(loom_executable_new_output_for(ex, 1, &in, 0, &out), LOOM_ERR_SHAPE, "int64");
  CHECK(out == NULL);
  loom_tensor_destroy(in);
  loom_executable_destroy(ex);
  loom_graph_destroy(g);
}

/* A buffer that fits in int64 but not in an arena (2^52 bytes): a clear
 * out-of-memory error naming the value before anything is allocated, at
 * compile time or when a run reads the sizes; after it, the executable
 * runs right at small sizes. */
static loom_graph_t *wide_graph(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_value_t x, r, e, v, s, t;
  int64_t s1[] = {1};
  loom_dim_t sr[] = {n, 0}, wide[] = {P(14), n};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, s1, &x));
  CHECK_OK(loom_graph_input(g, "rows", LOOM_F32, 2, sr, &r));
  CHECK_OK(loom_expand(g, x, 2, wide, &e));
  CHECK_OK(loom_exp(g, e, &v));
  /* Two reductions over different axes read v, so it is stored. */
  int64_t ax0 = 0, ax1 = 1;
  CHECK_OK(loom_sum(g, v, 1, &ax0, 0, &s));
  CHECK_OK(loom_max(g, v, 1, &ax1, 0, &t));
  CHECK_OK(loom_graph_output(g, s));
  CHECK_OK(loom_graph_output(g, t));
  return g;
}

static void wide_inputs(int64_t n, float x, loom_tensor_t **in) {
  int64_t s1[] = {1}, sr[] = {n, 0};
  in[0] = test_tensor(LOOM_F32, 1, s1, (double[]){x});
  CHECK_OK(loom_tensor_create(LOOM_F32, 2, sr, &in[1]));
}

/* Runs the wide graph at n = 3 against hand-computed sums and maxima. */
static void wide_runs_right(loom_executable_t *e) {
  loom_tensor_t *in[2], *out[2] = {NULL, NULL};
  wide_inputs(3, 0.5f, in);
  for (int i = 0; i < 2; i++) CHECK_OK(loom_executable_new_output_for(e, 2, in, i, &out[i]));
  CHECK_OK(loom_executable_run(e, 2, in, 2, out));
  double v = exp(0.5);
  if (out[0] && out[1]) {
    CHECK(loom_tensor_numel(out[0]) == 3 && loom_tensor_numel(out[1]) == P(14));
    CHECK_NEAR(test_get(out[0], 2), v * P(14), 0, 1e-5);
    CHECK_NEAR(test_get(out[1], P(14) - 1), v, 0, 1e-6);
  }
  free_inputs(in, 2);
  free_inputs(out, 2);
}

static void buffer_beyond_the_arena(void) {
  loom_graph_t *g = wide_graph();
  const char *names[] = {"n"};
  int64_t values[] = {P(37)}; /* v: 2^14 * 2^37 floats, 2^53 bytes */
  for (int cc = 1; cc >= 0; cc--) {
    loom_compile_options_t o;
    loom_compile_options_init(&o);
    o.use_cc = cc;
    o.n_symbols = 1;
    o.symbol_names = names;
    o.symbol_values = values;
    loom_executable_t *e = NULL;
    CHECK_ERR(loom_compile(g, &o, &e), LOOM_ERR_NOMEM, "more than an arena holds");
    CHECK(e == NULL);
    o.n_symbols = 0;
    o.dynamic_symbols = 1;
    CHECK_OK(loom_compile(g, &o, &e));
    if (!e) continue;
    /* The sizes are read (and refused) before the outputs are looked at:
     * no output of 2^37 floats is needed to see the error. */
    loom_tensor_t *in[2], *out[2];
    wide_inputs(P(37), 0.5f, in);
    int64_t s1[] = {1};
    for (int i = 0; i < 2; i++) CHECK_OK(loom_tensor_create(LOOM_F32, 1, s1, &out[i]));
    CHECK_ERR(loom_executable_run(e, 2, in, 2, out), LOOM_ERR_NOMEM, "n = 137438953472");
    CHECK_ERR(loom_executable_run(e, 2, in, 2, out), LOOM_ERR_NOMEM, "made by exp");
    free_inputs(in, 2);
    free_inputs(out, 2);
    wide_runs_right(e);
    loom_executable_destroy(e);
  }
  loom_graph_destroy(g);
}

/* ---- Files ------------------------------------------------------------------------- */

static char dir[64];

static void write_file(const char *path, const void *bytes, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  CHECK(fd >= 0);
  CHECK(write(fd, bytes, n) == (ssize_t)n);
  close(fd);
}

/* A 128-byte .npy (version 1.0) with the given dict and no data. */
static void write_npy(const char *path, const char *dict) {
  char b[128];
  memset(b, ' ', sizeof b);
  memcpy(b, "\x93NUMPY\x01\x00\x76\x00", 10);
  memcpy(b + 10, dict, strlen(dict));
  b[127] = '\n';
  write_file(path, b, sizeof b);
}

static void npy_shapes_that_overflow(void) {
  char path[128];
  snprintf(path, sizeof path, "%s/empty.npy", dir);
  static const char *dicts[] = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 8, 0), }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 8, 4611686018427387904), }",
      "{'descr': '|b1', 'fortran_order': False, 'shape': (3037000500, 3037000500), }",
  };
  for (int i = 0; i < 3; i++) {
    write_npy(path, dicts[i]);
    loom_tensor_t *t = NULL;
    CHECK_ERR(loom_tensor_load_npy(path, &t), LOOM_ERR_FORMAT, "more bytes than int64");
    CHECK_ERR(loom_tensor_load_npy(path, &t), LOOM_ERR_FORMAT, path);
    CHECK(t == NULL);
  }
  /* Empty with small dims loads. */
  write_npy(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 8, 0), }");
  loom_tensor_t *t = NULL;
  CHECK_OK(loom_tensor_load_npy(path, &t));
  CHECK(loom_tensor_numel(t) == 0 && loom_tensor_dim(t, 0) == P(40));
  loom_tensor_destroy(t);
  unlink(path);
}

static void checkpoint_shapes_that_overflow(void) {
  char path[128];
  snprintf(path, sizeof path, "%s/empty.safetensors", dir);
  const char *json = "{\"e\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,8,0],"
                     "\"data_offsets\":[0,0]}}";
  size_t len = strlen(json);
  unsigned char b[256];
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(len >> (8 * i));
  memcpy(b + 8, json, len);
  write_file(path, b, 8 + len);
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_checkpoint_options_t o = {.size = sizeof o, .allow_missing = 1, .allow_unexpected = 1};
  CHECK_ERR(loom_checkpoint_load_ex(g, path, &o), LOOM_ERR_FORMAT, "more bytes than int64");
  CHECK_ERR(loom_checkpoint_load_ex(g, path, &o), LOOM_ERR_FORMAT, "tensor 'e'");
  loom_graph_destroy(g);
  unlink(path);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/loom_overflow_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  TEST_RUN(shape_size_matches_int128);
  TEST_RUN(tensors_refuse_overflowing_shapes);
  TEST_RUN(builders_check_output_sizes);
  TEST_RUN(expand_hypercube_of_65536);
  TEST_RUN(expand_square_of_2_32);
  TEST_RUN(one_hot_of_2_60_rows);
  TEST_RUN(overflowing_output_has_no_tensor);
  TEST_RUN(buffer_beyond_the_arena);
  TEST_RUN(npy_shapes_that_overflow);
  TEST_RUN(checkpoint_shapes_that_overflow);
  rmdir(dir);
  return test_summary();
}
