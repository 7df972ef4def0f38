/* Generated code for the index ops (src/backend/cpu/codegen/c_index.c): gather,
 * index_select, embedding, scatter_add and one_hot compiled (fixed and
 * runtime sizes, one and two threads) equal the interpreter and
 * hand-computed results; an index out of range fails the compiled run
 * with the interpreter's message, naming the same entry, and the
 * executable runs again afterwards. */
#include <string.h>

#include "harness.h"
#include "loom/ops.h"
#include "backend/cpu/codegen/codegen.h"
#include "passes/fuse.h"

/* ---- Helpers ------------------------------------------------------------------ */

typedef struct run {
  int threads;
  int dynamic; /* compile with dynamic_symbols */
} run_t;

static loom_value_t input(loom_graph_t *g, const char *name, loom_dtype_t dt, int rank,
                          const loom_dim_t *dims) {
  loom_value_t v = {0};
  CHECK_OK(loom_graph_input(g, name, dt, rank, dims, &v));
  return v;
}

/* The sizes of the graph's symbols for compiles that fix them. */
static int n_syms;
static const char *sym_names[2];
static int64_t sym_values[2];

static void set_symbols(int n, const char *a, int64_t va, const char *b, int64_t vb) {
  n_syms = n;
  sym_names[0] = a, sym_values[0] = va;
  sym_names[1] = b, sym_values[1] = vb;
}

static bool fusion_off; /* compile one kernel per node */

static loom_executable_t *compile(loom_graph_t *g, const run_t *r) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.fusion = !fusion_off;
  o.num_threads = r->threads;
  o.dynamic_symbols = r->dynamic;
  if (!r->dynamic) {
    o.n_symbols = n_syms;
    o.symbol_names = sym_names;
    o.symbol_values = sym_values;
  }
  loom_executable_t *ex = NULL;
  CHECK_OK(loom_compile(g, &o, &ex));
  return ex;
}

/* Runs ex on in; the output, or NULL with the status in *s. */
static loom_tensor_t *run_compiled(loom_executable_t *ex, int n, loom_tensor_t *const *in,
                                   loom_status_t *s) {
  loom_tensor_t *out = NULL;
  *s = loom_executable_new_output_for(ex, n, in, 0, &out);
  if (*s == LOOM_OK) *s = loom_executable_run(ex, n, in, 1, &out);
  if (*s != LOOM_OK) {
    loom_tensor_destroy(out);
    return NULL;
  }
  return out;
}

/* Every step generated: no index op fell back to its reference kernel. */
static void check_generated(loom_executable_t *ex) {
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  CHECK_OK(loom_executable_info(ex, &info));
  CHECK(info.n_reference == 0);
  CHECK(info.n_generated >= 1);
}

/* The interpreter and the compiled graph (each run) both give want. */
static void check_both(loom_graph_t *g, const run_t *r, int n, loom_tensor_t *const *in,
                       const double *want, int64_t count, double rtol) {
  loom_tensor_t *ref = NULL;
  CHECK_OK(loom_interpret(g, n, in, 1, &ref));
  if (ref) CHECK_TENSOR(ref, want, count, rtol, rtol);
  loom_executable_t *ex = compile(g, r);
  if (ex) {
    check_generated(ex);
    loom_status_t s;
    loom_tensor_t *got = run_compiled(ex, n, in, &s);
    CHECK_OK(s);
    if (got) CHECK_TENSOR(got, want, count, rtol, rtol);
    loom_tensor_destroy(got);
  }
  loom_executable_destroy(ex);
  loom_tensor_destroy(ref);
}

static loom_tensor_t *tensor(loom_dtype_t dt, int rank, const int64_t *shape,
                             const double *v) {
  return test_tensor(dt, rank, shape, v);
}

static void destroy_all(int n, loom_tensor_t **t) {
  for (int i = 0; i < n; i++) loom_tensor_destroy(t[i]);
}

static const run_t RUNS[] = {{1, 0}, {2, 0}, {1, 1}, {2, 1}};
enum { N_RUNS = sizeof RUNS / sizeof RUNS[0] };

/* ---- gather, index_select, embedding ------------------------------------------ */

/* gather axis 1 of a 3x4 matrix with a 2x2 index holding negatives:
 * out[i, a, b] = data[i, idx[a, b] mod 4]. */
static void gather_axis1_negative(void) {
  loom_dtype_t idts[2] = {LOOM_I32, LOOM_I64};
  for (int r = 0; r < N_RUNS; r++)
    for (int k = 0; k < 2; k++) {
      loom_graph_t *g;
      CHECK_OK(loom_graph_create(&g));
      loom_dim_t dd[2] = {3, 4}, di[2] = {2, 2};
      loom_value_t x = input(g, "x", LOOM_F32, 2, dd), i = input(g, "i", idts[k], 2, di), y;
      CHECK_OK(loom_gather(g, x, i, 1, &y));
      CHECK_OK(loom_graph_output(g, y));
      double xv[12], iv[4] = {0, -1, 2, -4}, want[12];
      for (int e = 0; e < 12; e++) xv[e] = 10 * (e / 4) + e % 4;
      int64_t sx[2] = {3, 4}, si[2] = {2, 2};
      int cols[4] = {0, 3, 2, 0};
      for (int row = 0; row < 3; row++)
        for (int e = 0; e < 4; e++) want[row * 4 + e] = 10 * row + cols[e];
      loom_tensor_t *in[2] = {tensor(LOOM_F32, 2, sx, xv), tensor(idts[k], 2, si, iv)};
      check_both(g, &RUNS[r], 2, in, want, 12, 0);
      destroy_all(2, in);
      loom_graph_destroy(g);
    }
}

/* A flat gather whose index rows are runs of consecutive positions (one
 * copy each), mixed with rows that are not: the generated row path and
 * entry path agree with data[idx]. Large enough to split over threads. */
static void gather_rows_of_runs(void) {
  enum { ROWS = 700, LEN = 64, SIZE = 300 * 64 };
  for (int r = 0; r < N_RUNS; r++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_dim_t n;
    CHECK_OK(loom_dim_symbol(g, "n", &n));
    loom_dim_t dd[1] = {SIZE}, di[2] = {n, LEN};
    loom_value_t x = input(g, "x", LOOM_F32, 1, dd), i = input(g, "i", LOOM_I64, 2, di), y;
    CHECK_OK(loom_gather(g, x, i, 0, &y));
    CHECK_OK(loom_graph_output(g, y));
    int64_t sx[1] = {SIZE}, si[2] = {ROWS, LEN};
    loom_tensor_t *in[2];
    in[0] = test_rand_tensor(LOOM_F32, 1, sx, -1, 1);
    CHECK_OK(loom_tensor_create(LOOM_I64, 2, si, &in[1]));
    int64_t *iv = loom_tensor_data(in[1]);
    const float *xv = loom_tensor_data(in[0]);
    static double want[ROWS * LEN];
    for (int a = 0; a < ROWS; a++)
      for (int b = 0; b < LEN; b++) {
        int64_t row = test_rand_int(0, SIZE / LEN - 1), v;
        /* every third row scrambled, a few entries negative */
        v = a % 3 ? row * LEN + b : test_rand_int(-SIZE, SIZE - 1);
        iv[a * LEN + b] = v;
        want[a * LEN + b] = xv[v < 0 ? v + SIZE : v];
      }
    set_symbols(1, "n", ROWS, NULL, 0);
    check_both(g, &RUNS[r], 2, in, want, ROWS * LEN, 0);
    set_symbols(0, NULL, 0, NULL, 0);
    destroy_all(2, in);
    loom_graph_destroy(g);
  }
}

/* index_select of rows over runtime sizes, run at two sizes by one
 * executable: rows of any dtype copied whole. */
static void index_select_runtime_sizes(void) {
  loom_dtype_t dts[3] = {LOOM_F64, LOOM_F16, LOOM_I8};
  for (int k = 0; k < 3; k++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_dim_t n, e;
    CHECK_OK(loom_dim_symbol(g, "n", &n));
    CHECK_OK(loom_dim_symbol(g, "e", &e));
    loom_dim_t dd[2] = {n, 5}, di[1] = {e};
    loom_value_t x = input(g, "x", dts[k], 2, dd), i = input(g, "i", LOOM_I64, 1, di), y;
    CHECK_OK(loom_index_select(g, x, i, 0, &y));
    CHECK_OK(loom_graph_output(g, y));
    run_t dyn = {2, 1};
    loom_executable_t *ex = compile(g, &dyn);
    for (int size = 3; ex && size <= 9; size += 6) {
      int64_t sx[2] = {size, 5}, si[1] = {2 * size};
      double xv[45], iv[18], want[90];
      for (int a = 0; a < 5 * size; a++) xv[a] = a % 50 - 20;
      for (int a = 0; a < 2 * size; a++) {
        iv[a] = (a * 7) % size - (a % 2 ? size : 0); /* half of them negative */
        int64_t row = (int64_t)iv[a] < 0 ? (int64_t)iv[a] + size : (int64_t)iv[a];
        for (int c = 0; c < 5; c++) want[a * 5 + c] = xv[row * 5 + c];
      }
      loom_tensor_t *in[2] = {tensor(dts[k], 2, sx, xv), tensor(LOOM_I64, 1, si, iv)};
      loom_status_t s;
      loom_tensor_t *got = run_compiled(ex, 2, in, &s), *ref = NULL;
      CHECK_OK(s);
      CHECK_OK(loom_interpret(g, 2, in, 1, &ref));
      if (got) CHECK_TENSOR(got, want, 10 * size, 0, 0);
      if (ref) CHECK_TENSOR(ref, want, 10 * size, 0, 0);
      loom_tensor_destroy(got);
      loom_tensor_destroy(ref);
      destroy_all(2, in);
    }
    if (ex) check_generated(ex);
    loom_executable_destroy(ex);
    loom_graph_destroy(g);
  }
}

/* embedding picks rows of the weight by i8 indices. */
static void embedding_rows(void) {
  for (int r = 0; r < N_RUNS; r++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_dim_t dw[2] = {4, 3}, di[2] = {2, 2};
    loom_value_t w = input(g, "w", LOOM_BF16, 2, dw), i = input(g, "i", LOOM_I8, 2, di), y;
    CHECK_OK(loom_embedding(g, w, i, &y));
    CHECK_OK(loom_graph_output(g, y));
    double wv[12], iv[4] = {3, 0, 3, 1}, want[12];
    for (int a = 0; a < 12; a++) wv[a] = a - 4;
    for (int a = 0; a < 4; a++)
      for (int c = 0; c < 3; c++) want[a * 3 + c] = wv[(int)iv[a] * 3 + c];
    int64_t sw[2] = {4, 3}, si[2] = {2, 2};
    loom_tensor_t *in[2] = {tensor(LOOM_BF16, 2, sw, wv), tensor(LOOM_I8, 2, si, iv)};
    check_both(g, &RUNS[r], 2, in, want, 12, 0);
    destroy_all(2, in);
    loom_graph_destroy(g);
  }
}

/* ---- scatter_add --------------------------------------------------------------- */

/* scatter_add axis 0 into a 3x2 self, duplicates included, in every
 * generated dtype: out[idx[j, c], c] += src[j, c]. */
static void scatter_add_duplicates(void) {
  loom_dtype_t dts[4] = {LOOM_F32, LOOM_F64, LOOM_I32, LOOM_I64};
  for (int r = 0; r < N_RUNS; r++)
    for (int k = 0; k < 4; k++) {
      loom_graph_t *g;
      CHECK_OK(loom_graph_create(&g));
      loom_dim_t ds[2] = {3, 2}, di[2] = {4, 2};
      loom_value_t s = input(g, "s", dts[k], 2, ds), i = input(g, "i", LOOM_I64, 2, di),
                   x = input(g, "x", dts[k], 2, di), y;
      CHECK_OK(loom_scatter_add(g, s, i, x, 0, &y));
      CHECK_OK(loom_graph_output(g, y));
      double sv[6] = {1, 2, 3, 4, 5, 6}, iv[8] = {2, 0, 2, 2, 0, 2, 2, 1};
      double xv[8] = {10, 20, 30, 40, 50, 60, 70, 80};
      /* column 0: rows 2,2,0,2 get 10,30,50,70; column 1: rows 0,2,2,1
       * get 20,40,60,80 */
      double want[6] = {1 + 50, 2 + 20, 3, 4 + 80, 5 + 10 + 30 + 70, 6 + 40 + 60};
      int64_t ss[2] = {3, 2}, si[2] = {4, 2};
      loom_tensor_t *in[3] = {tensor(dts[k], 2, ss, sv), tensor(LOOM_I64, 2, si, iv),
                              tensor(dts[k], 2, si, xv)};
      check_both(g, &RUNS[r], 3, in, want, 6, 0);
      destroy_all(3, in);
      loom_graph_destroy(g);
    }
}

/* The GNN's aggregation, large enough for two threads to split columns:
 * scatter_add axis 1 of (1, e, 64) into (1, n, 64), index rows naming
 * one row (a vector add) or several (entry by entry), i32 indices;
 * against sums in double. */
static void scatter_add_split_columns(void) {
  enum { N = 300, E = 1500, D = 64 };
  for (int r = 0; r < N_RUNS; r++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_dim_t n, e;
    CHECK_OK(loom_dim_symbol(g, "n", &n));
    CHECK_OK(loom_dim_symbol(g, "e", &e));
    loom_dim_t ds[3] = {1, n, D}, di[3] = {1, e, D};
    loom_value_t s = input(g, "s", LOOM_F32, 3, ds), i = input(g, "i", LOOM_I32, 3, di),
                 x = input(g, "x", LOOM_F32, 3, di), y;
    CHECK_OK(loom_scatter_add(g, s, i, x, -2, &y));
    CHECK_OK(loom_graph_output(g, y));
    int64_t ss[3] = {1, N, D}, si[3] = {1, E, D};
    loom_tensor_t *in[3] = {test_rand_tensor(LOOM_F32, 3, ss, -1, 1), NULL,
                            test_rand_tensor(LOOM_F32, 3, si, -1, 1)};
    CHECK_OK(loom_tensor_create(LOOM_I32, 3, si, &in[1]));
    int32_t *iv = loom_tensor_data(in[1]);
    const float *sv = loom_tensor_data(in[0]), *xv = loom_tensor_data(in[2]);
    static double want[N * D];
    for (int a = 0; a < N * D; a++) want[a] = sv[a];
    for (int j = 0; j < E; j++) {
      int32_t row = (int32_t)test_rand_int(0, N - 1);
      for (int c = 0; c < D; c++) {
        iv[j * D + c] = j % 5 ? row : (int32_t)test_rand_int(0, N - 1);
        want[iv[j * D + c] * D + c] += xv[j * D + c];
      }
    }
    set_symbols(2, "n", N, "e", E);
    check_both(g, &RUNS[r], 3, in, want, N * D, 1e-5);
    set_symbols(0, NULL, 0, NULL, 0);
    destroy_all(3, in);
    loom_graph_destroy(g);
  }
}

static void check_error(loom_graph_t *g, const run_t *r, int n, loom_tensor_t *const *bad,
                        const char *text, loom_tensor_t *const *good, const double *want,
                        int64_t count);

/* ---- Index prologues ------------------------------------------------------------ */

/* Whether fusion puts the producer of index operand v in the group of
 * the node that reads it: the index is computed in place, never stored. */
static bool index_fused(loom_graph_t *g, loom_value_t v) {
  fuse_plan_t p;
  fuse_options_t o = {.enabled = true};
  if (fuse_plan_build(g, &o, &cg_fuse_caps, &p) != LOOM_OK) return false;
  const ir_value_t *val = &g->values[v.id];
  bool fused = false;
  for (int i = 0; i < p.n_groups; i++) {
    const fuse_group_t *grp = &p.groups[i];
    bool has_producer = false;
    for (int k = 0; k < grp->n_nodes; k++) has_producer |= grp->nodes[k] == val->node;
    fused |= has_producer && grp->kind == FUSE_LAYOUT && grp->n_nodes > 1;
  }
  fuse_plan_free(&p);
  return fused;
}

/* The GNN's aggregation: scatter_add(self, dst[:, None] + zeros(1, D),
 * src) over runtime sizes, with duplicate targets; the (e, D) index is
 * computed by the scatter's group. */
static void prologue_scatter_broadcast_add(void) {
  enum { N = 50, E = 700, D = 64 };
  for (int r = 0; r < N_RUNS; r++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_dim_t n, e;
    CHECK_OK(loom_dim_symbol(g, "n", &n));
    CHECK_OK(loom_dim_symbol(g, "e", &e));
    loom_dim_t ds[2] = {n, D}, dd[1] = {e}, dx[2] = {e, D}, row[2] = {1, D};
    const int64_t axis1[1] = {1};
    loom_value_t s = input(g, "s", LOOM_F32, 2, ds), dst = input(g, "dst", LOOM_I64, 1, dd),
                 x = input(g, "x", LOOM_F32, 2, dx), zi, d1, ind, y;
    CHECK_OK(loom_full(g, 2, row, 0.0, LOOM_I64, &zi));
    CHECK_OK(loom_unsqueeze(g, dst, 1, axis1, &d1));
    CHECK_OK(loom_add(g, d1, zi, &ind));
    CHECK_OK(loom_scatter_add(g, s, ind, x, 0, &y));
    CHECK_OK(loom_graph_output(g, y));
    CHECK(index_fused(g, ind));
    int64_t ss[2] = {N, D}, sd[1] = {E}, sx[2] = {E, D};
    loom_tensor_t *in[3] = {test_rand_tensor(LOOM_F32, 2, ss, -1, 1), NULL,
                            test_rand_tensor(LOOM_F32, 2, sx, -1, 1)};
    CHECK_OK(loom_tensor_create(LOOM_I64, 1, sd, &in[1]));
    int64_t *dv = loom_tensor_data(in[1]);
    const float *sv = loom_tensor_data(in[0]), *xv = loom_tensor_data(in[2]);
    static double want[N * D];
    for (int a = 0; a < N * D; a++) want[a] = sv[a];
    for (int j = 0; j < E; j++) {
      dv[j] = test_rand_int(0, N - 1);
      for (int c = 0; c < D; c++) want[dv[j] * D + c] += xv[j * D + c];
    }
    set_symbols(2, "n", N, "e", E);
    check_both(g, &RUNS[r], 3, in, want, N * D, 1e-5);
    /* an edge past the last node: the compiled prologue reports the
     * entry of the (e, D) index the interpreter names */
    dv[300] = N;
    check_error(g, &RUNS[r], 3, in, "scatter_add: index 50 (at position 19200) is out "
                "of range for a dim of size 50", NULL, NULL, 0);
    set_symbols(0, NULL, 0, NULL, 0);
    destroy_all(3, in);
    loom_graph_destroy(g);
  }
}

/* Message passing, out[dst[e]] += h[src[e]]: scatter_add(self,
 * dst[:, None] + zeros(1, D), index_select(h, src)), the rows of h
 * picked in the scatter's group (src indices may be negative). With both
 * indices bad, the error names index_select's, as the interpreter, which
 * runs it first, does. */
static void prologue_message_passing(void) {
  enum { N = 60, E = 900, D = 48 };
  for (int r = 0; r < N_RUNS; r++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_dim_t n, e;
    CHECK_OK(loom_dim_symbol(g, "n", &n));
    CHECK_OK(loom_dim_symbol(g, "e", &e));
    loom_dim_t ds[2] = {n, D}, dd[1] = {e}, row[2] = {1, D};
    const int64_t axis1[1] = {1};
    loom_value_t s = input(g, "s", LOOM_F32, 2, ds), h = input(g, "h", LOOM_F32, 2, ds),
                 src = input(g, "src", LOOM_I32, 1, dd), dst = input(g, "dst", LOOM_I64, 1, dd),
                 zi, d1, ind, x, y;
    CHECK_OK(loom_full(g, 2, row, 0.0, LOOM_I64, &zi));
    CHECK_OK(loom_unsqueeze(g, dst, 1, axis1, &d1));
    CHECK_OK(loom_add(g, d1, zi, &ind));
    CHECK_OK(loom_index_select(g, h, src, 0, &x));
    CHECK_OK(loom_scatter_add(g, s, ind, x, 0, &y));
    CHECK_OK(loom_graph_output(g, y));
    CHECK(index_fused(g, ind));
    CHECK(index_fused(g, x));
    int64_t ss[2] = {N, D}, sd[1] = {E};
    loom_tensor_t *in[4] = {test_rand_tensor(LOOM_F32, 2, ss, -1, 1),
                            test_rand_tensor(LOOM_F32, 2, ss, -1, 1), NULL, NULL};
    CHECK_OK(loom_tensor_create(LOOM_I32, 1, sd, &in[2]));
    CHECK_OK(loom_tensor_create(LOOM_I64, 1, sd, &in[3]));
    int32_t *sv = loom_tensor_data(in[2]);
    int64_t *dv = loom_tensor_data(in[3]);
    const float *self = loom_tensor_data(in[0]), *hv = loom_tensor_data(in[1]);
    static double want[N * D];
    for (int a = 0; a < N * D; a++) want[a] = self[a];
    for (int j = 0; j < E; j++) {
      sv[j] = (int32_t)test_rand_int(-N, N - 1);
      dv[j] = test_rand_int(0, N - 1);
      int64_t from = sv[j] < 0 ? sv[j] + N : sv[j];
      for (int c = 0; c < D; c++) want[dv[j] * D + c] += hv[from * D + c];
    }
    set_symbols(2, "n", N, "e", E);
    check_both(g, &RUNS[r], 4, in, want, N * D, 1e-5);
    dv[10] = -1;
    check_error(g, &RUNS[r], 4, in, "scatter_add: index -1 (at position 480)", NULL, NULL, 0);
    sv[700] = N;
    check_error(g, &RUNS[r], 4, in, "index_select: index 60 (at position 700)", NULL, NULL, 0);
    set_symbols(0, NULL, 0, NULL, 0);
    destroy_all(4, in);
    loom_graph_destroy(g);
  }
}

/* The fused graph gives the bits of the graph compiled one kernel per
 * node (each product rounded as the mul's kernel rounds it, each sum in
 * index order). */
static void check_same_bits(loom_graph_t *g, const run_t *r, int n, loom_tensor_t *const *in) {
  loom_tensor_t *got[2] = {NULL, NULL};
  for (int fusion = 0; fusion <= 1; fusion++) {
    fusion_off = !fusion;
    loom_executable_t *ex = compile(g, r);
    fusion_off = false;
    loom_status_t s = LOOM_ERR_INVALID;
    got[fusion] = ex ? run_compiled(ex, n, in, &s) : NULL;
    CHECK_OK(s);
    loom_executable_destroy(ex);
  }
  if (got[0] && got[1])
    CHECK(!memcmp(loom_tensor_data(got[0]), loom_tensor_data(got[1]),
                  (size_t)loom_tensor_numel(got[0]) * sizeof(float)));
  destroy_all(2, got);
}

/* The values of a weighted aggregation's graph. */
typedef struct messages {
  loom_value_t ind, x, m, y;
} messages_t;

enum { ROWS_TIMES_W, W_TIMES_ROWS, ROWS_SQUARED };

/* y = scatter_add(s, dst[:, None] + zeros(1, d), m) over inputs s, h
 * (n, d), src, dst (e) and w (e, w_cols), where x = h[src] (a 1-D gather
 * or index_select) and m = x * w, w * x or x * x (form); y an output. */
static messages_t scaled_messages(loom_graph_t *g, loom_dim_t n, loom_dim_t e, loom_dim_t d,
                                  loom_dim_t w_cols, bool gather, int form) {
  loom_dim_t ds[2] = {n, d}, dd[1] = {e}, row[2] = {1, d}, dw[2] = {e, w_cols};
  const int64_t axis1[1] = {1};
  loom_value_t s = input(g, "s", LOOM_F32, 2, ds), h = input(g, "h", LOOM_F32, 2, ds),
               src = input(g, "src", LOOM_I64, 1, dd), dst = input(g, "dst", LOOM_I64, 1, dd),
               w = input(g, "w", LOOM_F32, 2, dw), zi, d1;
  messages_t v;
  CHECK_OK(loom_full(g, 2, row, 0.0, LOOM_I64, &zi));
  CHECK_OK(loom_unsqueeze(g, dst, 1, axis1, &d1));
  CHECK_OK(loom_add(g, d1, zi, &v.ind));
  if (gather) CHECK_OK(loom_gather(g, h, src, 0, &v.x));
  else CHECK_OK(loom_index_select(g, h, src, 0, &v.x));
  if (form == ROWS_SQUARED) CHECK_OK(loom_mul(g, v.x, v.x, &v.m));
  else if (form == W_TIMES_ROWS) CHECK_OK(loom_mul(g, w, v.x, &v.m));
  else CHECK_OK(loom_mul(g, v.x, w, &v.m));
  CHECK_OK(loom_scatter_add(g, s, v.ind, v.m, 0, &v.y));
  CHECK_OK(loom_graph_output(g, v.y));
  return v;
}

/* Inputs for scaled_messages: s, h and w uniform in [-1, 1], src in
 * [src_lo, n), dst in [0, n). */
static void scaled_messages_inputs(int64_t n, int64_t e, int64_t d, int64_t w_cols,
                                   int64_t src_lo, loom_tensor_t **in) {
  int64_t ss[2] = {n, d}, sd[1] = {e}, sw[2] = {e, w_cols};
  in[0] = test_rand_tensor(LOOM_F32, 2, ss, -1, 1);
  in[1] = test_rand_tensor(LOOM_F32, 2, ss, -1, 1);
  in[4] = test_rand_tensor(LOOM_F32, 2, sw, -1, 1);
  CHECK_OK(loom_tensor_create(LOOM_I64, 1, sd, &in[2]));
  CHECK_OK(loom_tensor_create(LOOM_I64, 1, sd, &in[3]));
  int64_t *sv = loom_tensor_data(in[2]), *dv = loom_tensor_data(in[3]);
  for (int64_t j = 0; j < e; j++) {
    sv[j] = test_rand_int(src_lo, n - 1);
    dv[j] = test_rand_int(0, n - 1);
  }
}

/* Weighted message passing, out[dst[e]] += h[src[e]] * w[e] (a GCN's
 * normalized aggregation): the rows of h picked (a 1-D gather, as
 * Python's h[src], or index_select) and scaled by a (e, 1) or (e, D)
 * weight in the scatter's group, the (e, D) messages never stored; the
 * mul's operands either way round. A mul of the rows by themselves is
 * no scale and stays a group of its own. */
static void prologue_scaled_messages(void) {
  enum { N = 40, E = 600, D = 32 };
  for (int variant = 0; variant < 4; variant++)
    for (int r = 0; r < N_RUNS; r++) {
      bool gather = variant == 0 || variant == 3, per_row = variant != 1,
           swapped = variant == 2, square = variant == 3;
      loom_graph_t *g;
      CHECK_OK(loom_graph_create(&g));
      loom_dim_t n, e;
      CHECK_OK(loom_dim_symbol(g, "n", &n));
      CHECK_OK(loom_dim_symbol(g, "e", &e));
      messages_t v = scaled_messages(g, n, e, D, per_row ? 1 : D, gather,
                                     square ? ROWS_SQUARED : swapped ? W_TIMES_ROWS : ROWS_TIMES_W);
      CHECK(index_fused(g, v.ind));
      CHECK(index_fused(g, v.m) == !square);
      CHECK(index_fused(g, v.x) == !square);
      loom_tensor_t *in[5];
      scaled_messages_inputs(N, E, D, per_row ? 1 : D, -N, in);
      int64_t *sv = loom_tensor_data(in[2]), *dv = loom_tensor_data(in[3]);
      const float *self = loom_tensor_data(in[0]), *hv = loom_tensor_data(in[1]),
                  *wv = loom_tensor_data(in[4]);
      static double want[N * D];
      for (int a = 0; a < N * D; a++) want[a] = self[a];
      for (int j = 0; j < E; j++) {
        int64_t from = sv[j] < 0 ? sv[j] + N : sv[j];
        for (int c = 0; c < D; c++) {
          double v = hv[from * D + c];
          want[dv[j] * D + c] += square ? v * v : v * wv[per_row ? j : j * D + c];
        }
      }
      set_symbols(2, "n", N, "e", E);
      check_both(g, &RUNS[r], 5, in, want, N * D, 1e-5);
      check_same_bits(g, &RUNS[r], 5, in);
      sv[500] = N;
      check_error(g, &RUNS[r], 5, in, gather ? "gather: index 40 (at position 500)"
                                             : "index_select: index 40 (at position 500)",
                  NULL, NULL, 0);
      set_symbols(0, NULL, 0, NULL, 0);
      destroy_all(5, in);
      loom_graph_destroy(g);
    }
}

/* Rows that are also a graph output keep their buffer: neither they nor
 * their scale fold into the scatter, and both outputs are right. */
static void scaled_messages_kept_rows(void) {
  enum { N = 6, E = 10, D = 4 };
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  messages_t v = scaled_messages(g, N, E, D, 1, true, ROWS_TIMES_W);
  CHECK_OK(loom_graph_output(g, v.x));
  CHECK(!index_fused(g, v.m));
  CHECK(!index_fused(g, v.x));
  loom_tensor_t *in[5];
  scaled_messages_inputs(N, E, D, 1, 0, in);
  loom_tensor_t *ref[2] = {NULL, NULL}, *got[2] = {NULL, NULL};
  CHECK_OK(loom_interpret(g, 5, in, 2, ref));
  loom_executable_t *ex = compile(g, &RUNS[0]);
  for (int k = 0; ex && k < 2; k++) CHECK_OK(loom_executable_new_output_for(ex, 5, in, k, &got[k]));
  if (ex && got[0] && got[1]) CHECK_OK(loom_executable_run(ex, 5, in, 2, got));
  for (int k = 0; k < 2 && ref[k] && got[k]; k++)
    for (int64_t i = 0; i < loom_tensor_numel(ref[k]); i++)
      CHECK_NEAR(test_get(got[k], i), test_get(ref[k], i), 1e-6, 1e-6);
  loom_executable_destroy(ex);
  destroy_all(2, ref);
  destroy_all(2, got);
  destroy_all(5, in);
  loom_graph_destroy(g);
}

/* The backward's gather of flat positions dst[:, None] * D + arange(D)
 * from a flat (n * D) gradient, and its scatter_add through an expand of
 * the edge list to (1, e, D): both indices computed in place. */
static void prologue_gather_and_expand(void) {
  enum { N = 40, E = 600, D = 64 };
  for (int r = 0; r < 2; r++) { /* fixed sizes (expand's shape is constant) */
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_dim_t dd[1] = {E}, dg[1] = {N * D}, one[2] = {1, 1}, e3[3] = {1, E, 1};
    loom_dim_t full3[3] = {1, E, D}, self3[3] = {1, N, D};
    const int64_t axis1[1] = {1};
    loom_value_t dst = input(g, "dst", LOOM_I64, 1, dd), grad = input(g, "g", LOOM_F32, 1, dg);
    loom_value_t k, ar, d1, scaled, pos, picked, r3, ind, zeros, picked3, y;
    CHECK_OK(loom_full(g, 2, one, D, LOOM_I64, &k));
    CHECK_OK(loom_arange(g, 0, D, 1, LOOM_I64, &ar));
    CHECK_OK(loom_unsqueeze(g, dst, 1, axis1, &d1));
    CHECK_OK(loom_mul(g, d1, k, &scaled));
    CHECK_OK(loom_add(g, scaled, ar, &pos));
    CHECK_OK(loom_gather(g, grad, pos, 0, &picked)); /* (E, D) */
    CHECK_OK(loom_reshape(g, dst, 3, e3, &r3));
    CHECK_OK(loom_expand(g, r3, 3, full3, &ind));
    CHECK_OK(loom_full(g, 3, self3, 0.0, LOOM_F32, &zeros));
    CHECK_OK(loom_reshape(g, picked, 3, full3, &picked3));
    CHECK_OK(loom_scatter_add(g, zeros, ind, picked3, 1, &y));
    CHECK_OK(loom_graph_output(g, y));
    CHECK(index_fused(g, pos));
    CHECK(index_fused(g, ind));
    int64_t sd[1] = {E}, sg[1] = {N * D};
    loom_tensor_t *in[2] = {NULL, test_rand_tensor(LOOM_F32, 1, sg, -1, 1)};
    CHECK_OK(loom_tensor_create(LOOM_I64, 1, sd, &in[0]));
    int64_t *dv = loom_tensor_data(in[0]);
    const float *gv = loom_tensor_data(in[1]);
    static double want[N * D];
    memset(want, 0, sizeof want);
    for (int j = 0; j < E; j++) {
      dv[j] = test_rand_int(0, N - 1);
      for (int c = 0; c < D; c++) want[dv[j] * D + c] += gv[dv[j] * D + c];
    }
    check_both(g, &RUNS[r], 2, in, want, N * D, 1e-5);
    destroy_all(2, in);
    loom_graph_destroy(g);
  }
}

/* The GNN's bias gradient: a sum over a runtime number of rows that
 * keeps the columns (keepdim), a generated column fold, at two sizes. */
static void column_sum_runtime_rows(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_dim_t dx[2] = {n, 64};
  const int64_t axis0[1] = {0};
  loom_value_t x = input(g, "x", LOOM_F32, 2, dx), y;
  CHECK_OK(loom_sum(g, x, 1, axis0, 1, &y));
  CHECK_OK(loom_graph_output(g, y));
  run_t dyn = {1, 1};
  loom_executable_t *ex = compile(g, &dyn);
  for (int rows = 3; ex && rows <= 700; rows += 697) {
    int64_t sx[2] = {rows, 64};
    loom_tensor_t *in[1] = {test_rand_tensor(LOOM_F32, 2, sx, -1, 1)};
    const float *xv = loom_tensor_data(in[0]);
    double want[64] = {0};
    for (int a = 0; a < rows * 64; a++) want[a % 64] += xv[a];
    loom_status_t s;
    loom_tensor_t *got = run_compiled(ex, 1, in, &s);
    CHECK_OK(s);
    if (got) CHECK_TENSOR(got, want, 64, 1e-4, 1e-5);
    loom_tensor_destroy(got);
    destroy_all(1, in);
  }
  if (ex) check_generated(ex);
  loom_executable_destroy(ex);
  loom_graph_destroy(g);
}

/* ---- one_hot --------------------------------------------------------------------- */

static void one_hot_dtypes(void) {
  loom_dtype_t dts[3] = {LOOM_F32, LOOM_I64, LOOM_BOOL};
  for (int r = 0; r < N_RUNS; r++)
    for (int k = 0; k < 3; k++) {
      loom_graph_t *g;
      CHECK_OK(loom_graph_create(&g));
      loom_dim_t di[1] = {5};
      loom_value_t i = input(g, "i", LOOM_I32, 1, di), y;
      CHECK_OK(loom_one_hot(g, i, 4, dts[k], &y));
      CHECK_OK(loom_graph_output(g, y));
      double iv[5] = {3, 0, 0, 2, 1}, want[20] = {0};
      for (int a = 0; a < 5; a++) want[a * 4 + (int)iv[a]] = 1;
      int64_t si[1] = {5};
      loom_tensor_t *in[1] = {tensor(LOOM_I32, 1, si, iv)};
      check_both(g, &RUNS[r], 1, in, want, 20, 0);
      destroy_all(1, in);
      loom_graph_destroy(g);
    }
}

/* ---- Errors ----------------------------------------------------------------------- */

/* Compiled and interpreted runs of g on in fail alike, with `text` in
 * the message; then the executable runs `good` (when not NULL) correctly
 * (want[0..count)). */
static void check_error(loom_graph_t *g, const run_t *r, int n, loom_tensor_t *const *bad,
                        const char *text, loom_tensor_t *const *good, const double *want,
                        int64_t count) {
  loom_tensor_t *out = NULL;
  CHECK_ERR(loom_interpret(g, n, bad, 1, &out), LOOM_ERR_VALUE, text);
  loom_executable_t *ex = compile(g, r);
  if (!ex) return;
  check_generated(ex);
  loom_status_t s;
  loom_tensor_t *got = run_compiled(ex, n, bad, &s);
  CHECK(got == NULL);
  CHECK_ERR(s, LOOM_ERR_VALUE, text);
  if (good) {
    got = run_compiled(ex, n, good, &s);
    CHECK_OK(s);
    if (got) CHECK_TENSOR(got, want, count, 0, 0);
    loom_tensor_destroy(got);
  }
  loom_executable_destroy(ex);
}

/* gather and index_select: past the end, and below -size. */
static void take_out_of_range(void) {
  for (int r = 0; r < N_RUNS; r++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_dim_t dd[2] = {4, 2}, di[1] = {3};
    loom_value_t x = input(g, "x", LOOM_F32, 2, dd), i = input(g, "i", LOOM_I64, 1, di), y;
    CHECK_OK(loom_index_select(g, x, i, 0, &y));
    CHECK_OK(loom_graph_output(g, y));
    double xv[8] = {0, 1, 2, 3, 4, 5, 6, 7}, hi[3] = {1, 4, 0}, lo[3] = {-5, 0, 0};
    double ok[3] = {3, -4, 1}, want[6] = {6, 7, 0, 1, 2, 3};
    int64_t sx[2] = {4, 2}, si[1] = {3};
    loom_tensor_t *x_t = tensor(LOOM_F32, 2, sx, xv);
    loom_tensor_t *bad[2] = {x_t, tensor(LOOM_I64, 1, si, hi)};
    loom_tensor_t *bad2[2] = {x_t, tensor(LOOM_I64, 1, si, lo)};
    loom_tensor_t *good[2] = {x_t, tensor(LOOM_I64, 1, si, ok)};
    check_error(g, &RUNS[r], 2, bad, "index_select: index 4 (at position 1) is out of "
                "range for a dim of size 4", good, want, 6);
    check_error(g, &RUNS[r], 2, bad2, "index -5 (at position 0)", good, want, 6);
    loom_tensor_destroy(bad[1]);
    loom_tensor_destroy(bad2[1]);
    loom_tensor_destroy(good[1]);
    loom_tensor_destroy(x_t);
    loom_graph_destroy(g);
  }
}

/* scatter_add rejects negative indices and indices past self's dim; with
 * many bad entries over two threads, the message names the first. */
static void scatter_add_out_of_range(void) {
  enum { N = 40, E = 800, D = 64 };
  for (int r = 0; r < N_RUNS; r++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_dim_t ds[2] = {N, D}, di[2] = {E, D};
    loom_value_t s = input(g, "s", LOOM_F32, 2, ds), i = input(g, "i", LOOM_I64, 2, di),
                 x = input(g, "x", LOOM_F32, 2, di), y;
    CHECK_OK(loom_scatter_add(g, s, i, x, 0, &y));
    CHECK_OK(loom_graph_output(g, y));
    int64_t ss[2] = {N, D}, si[2] = {E, D};
    loom_tensor_t *zeros, *ones, *bad_i, *good_i;
    CHECK_OK(loom_tensor_create(LOOM_F32, 2, ss, &zeros));
    CHECK_OK(loom_tensor_create(LOOM_F32, 2, si, &ones));
    CHECK_OK(loom_tensor_create(LOOM_I64, 2, si, &bad_i));
    CHECK_OK(loom_tensor_create(LOOM_I64, 2, si, &good_i));
    float *o = loom_tensor_data(ones);
    int64_t *bi = loom_tensor_data(bad_i), *gi = loom_tensor_data(good_i);
    static double want[N * D];
    memset(want, 0, sizeof want);
    for (int a = 0; a < E * D; a++) {
      o[a] = 1;
      gi[a] = bi[a] = (a / D) % N;
      want[gi[a] * D + a % D] += 1;
    }
    /* bad entries late in the second half of the columns, and one first
     * in row 500, column 3 */
    for (int j = 600; j < E; j++) bi[j * D + 50] = N + j;
    bi[500 * D + 3] = -2;
    loom_tensor_t *bad[3] = {zeros, bad_i, ones}, *good[3] = {zeros, good_i, ones};
    check_error(g, &RUNS[r], 3, bad, "scatter_add: index -2 (at position 32003) is out "
                "of range for a dim of size 40", good, want, N * D);
    loom_tensor_t *all[4] = {zeros, ones, bad_i, good_i};
    destroy_all(4, all);
    loom_graph_destroy(g);
  }
}

/* one_hot and embedding reject negative indices. */
static void one_hot_embedding_negative(void) {
  for (int r = 0; r < N_RUNS; r++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_dim_t di[1] = {3};
    loom_value_t i = input(g, "i", LOOM_I64, 1, di), y;
    CHECK_OK(loom_one_hot(g, i, 2, LOOM_F32, &y));
    CHECK_OK(loom_graph_output(g, y));
    double bad_v[3] = {1, 0, -1}, good_v[3] = {1, 0, 1}, want[6] = {0, 1, 1, 0, 0, 1};
    int64_t si[1] = {3};
    loom_tensor_t *bad[1] = {tensor(LOOM_I64, 1, si, bad_v)};
    loom_tensor_t *good[1] = {tensor(LOOM_I64, 1, si, good_v)};
    check_error(g, &RUNS[r], 1, bad, "one_hot: index -1 (at position 2)", good, want, 6);
    destroy_all(1, bad);
    destroy_all(1, good);
    loom_graph_destroy(g);

    CHECK_OK(loom_graph_create(&g));
    loom_dim_t dw[2] = {2, 2};
    loom_value_t w = input(g, "w", LOOM_F32, 2, dw), j = input(g, "i", LOOM_I64, 1, di);
    CHECK_OK(loom_embedding(g, w, j, &y));
    CHECK_OK(loom_graph_output(g, y));
    double wv[4] = {1, 2, 3, 4}, want_e[6] = {3, 4, 1, 2, 3, 4};
    int64_t sw[2] = {2, 2};
    loom_tensor_t *wt = tensor(LOOM_F32, 2, sw, wv);
    loom_tensor_t *bad_e[2] = {wt, tensor(LOOM_I64, 1, si, bad_v)};
    loom_tensor_t *good_e[2] = {wt, tensor(LOOM_I64, 1, si, good_v)};
    check_error(g, &RUNS[r], 2, bad_e, "embedding: index -1 (at position 2)", good_e,
                want_e, 6);
    loom_tensor_destroy(bad_e[1]);
    loom_tensor_destroy(good_e[1]);
    loom_tensor_destroy(wt);
    loom_graph_destroy(g);
  }
}

int main(void) {
  test_seed(7);
  TEST_RUN(gather_axis1_negative);
  TEST_RUN(gather_rows_of_runs);
  TEST_RUN(index_select_runtime_sizes);
  TEST_RUN(embedding_rows);
  TEST_RUN(scatter_add_duplicates);
  TEST_RUN(scatter_add_split_columns);
  TEST_RUN(prologue_scatter_broadcast_add);
  TEST_RUN(prologue_message_passing);
  TEST_RUN(prologue_scaled_messages);
  TEST_RUN(scaled_messages_kept_rows);
  TEST_RUN(prologue_gather_and_expand);
  TEST_RUN(column_sum_runtime_rows);
  TEST_RUN(one_hot_dtypes);
  TEST_RUN(take_out_of_range);
  TEST_RUN(scatter_add_out_of_range);
  TEST_RUN(one_hot_embedding_negative);
  return test_summary();
}
