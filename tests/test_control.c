/* Structured control flow: if and loop through the interpreter and
 * compiled, against values computed here by hand; shape errors; and
 * ownership of subgraphs (ASan finds what leaks). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "grad_check.h"
#include "harness.h"
#include "ir/ir.h"
#include "loom/loom.h"

#include "grad_check.c"

/* ---- Helpers ------------------------------------------------------------- */

static loom_tensor_t *scalar(loom_dtype_t dtype, double v) {
  return test_tensor(dtype, 0, NULL, &v);
}

static loom_value_t input(loom_graph_t *g, const char *name, loom_dtype_t dtype, int rank,
                          const loom_dim_t *dims) {
  loom_value_t v = {-1};
  CHECK_OK(loom_graph_input(g, name, dtype, rank, dims, &v));
  return v;
}

static loom_value_t constant(loom_graph_t *g, loom_dtype_t dtype, double v) {
  loom_tensor_t *t = scalar(dtype, v);
  loom_value_t c = {-1};
  CHECK_OK(loom_graph_constant(g, t, &c));
  loom_tensor_destroy(t);
  return c;
}

static loom_graph_t *new_graph(void) {
  loom_graph_t *g = NULL;
  CHECK_OK(loom_graph_create(&g));
  return g;
}

/* A branch f32[n] -> f32[n]: x+x (twice), -x, or x*x. */
enum { TWICE, NEGATE, SQUARE };
static loom_graph_t *branch(int kind, int rank, const loom_dim_t *dims) {
  loom_graph_t *b = new_graph();
  loom_value_t x = input(b, "x", LOOM_F32, rank, dims), y;
  if (kind == TWICE) CHECK_OK(loom_add(b, x, x, &y));
  else if (kind == NEGATE) CHECK_OK(loom_neg(b, x, &y));
  else CHECK_OK(loom_mul(b, x, x, &y));
  CHECK_OK(loom_graph_output(b, y));
  return b;
}

/* A branch f32[n] -> f32[n] over its own symbol "n". */
static loom_graph_t *sym_branch(int kind) {
  loom_graph_t *b = new_graph();
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(b, "n", &n));
  loom_value_t x = input(b, "x", LOOM_F32, 1, &n), y;
  if (kind == TWICE) CHECK_OK(loom_add(b, x, x, &y));
  else CHECK_OK(loom_neg(b, x, &y));
  CHECK_OK(loom_graph_output(b, y));
  return b;
}

/* Runs g in the interpreter and, when `compile`, compiled (passes and
 * fusion on); checks both agree and returns the interpreter's outputs. */
static void run_both(loom_graph_t *g, int n_in, loom_tensor_t *const *in, int n_out,
                     loom_tensor_t **out, int compile) {
  CHECK_OK(loom_interpret(g, n_in, in, n_out, out));
  if (!compile) return;
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, NULL, &e));
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  if (e) CHECK_OK(loom_executable_info(e, &info));
  char *text = NULL;
  /* Compiled, not sent to the interpreter: the node is a control step. */
  CHECK(e && !info.interpreted);
  if (e) CHECK_OK(loom_executable_explain(e, &text));
  CHECK(text && strstr(text, " control "));
  loom_free(text);
  loom_tensor_t *ys[4] = {0};
  for (int k = 0; e && k < n_out; k++) CHECK_OK(loom_executable_new_output(e, k, &ys[k]));
  if (e) CHECK_OK(loom_executable_run(e, n_in, in, n_out, ys));
  for (int k = 0; e && k < n_out; k++) {
    if (!out[k] || !ys[k]) continue;
    int64_t n = loom_tensor_numel(out[k]);
    CHECK(loom_tensor_numel(ys[k]) == n);
    for (int64_t i = 0; i < n && i < loom_tensor_numel(ys[k]); i++)
      CHECK_NEAR(test_get(ys[k], i), test_get(out[k], i), 1e-6, 1e-5);
  }
  for (int k = 0; k < n_out; k++) loom_tensor_destroy(ys[k]);
  loom_executable_destroy(e);
}

static void destroy_all(loom_tensor_t **t, int n) {
  for (int i = 0; i < n; i++) loom_tensor_destroy(t[i]);
}

/* ---- if ------------------------------------------------------------------ */

/* cond ? 2x : -x over both outcomes, bool and integer conditions. */
static void if_both_outcomes(void) {
  loom_dtype_t cond_types[] = {LOOM_BOOL, LOOM_I32, LOOM_I8};
  for (int t = 0; t < 3; t++) {
    loom_graph_t *g = new_graph();
    loom_dim_t d3[1] = {3};
    loom_value_t c = input(g, "c", cond_types[t], 0, NULL), x = input(g, "x", LOOM_F32, 1, d3);
    loom_value_t y;
    CHECK_OK(loom_if(g, c, branch(TWICE, 1, d3), branch(NEGATE, 1, d3), 1, &x, 1, &y));
    CHECK_OK(loom_graph_output(g, y));
    double xs[3] = {1.5, -2, 4};
    loom_tensor_t *xt = test_tensor(LOOM_F32, 1, (int64_t[]){3}, xs);
    for (int taken = 0; taken < 2; taken++) {
      /* An integer condition is true when non-zero (here 7). */
      loom_tensor_t *in[2] = {scalar(cond_types[t], taken ? (t ? 7 : 1) : 0), xt}, *out = NULL;
      run_both(g, 2, in, 1, &out, t == 0);
      double want[3];
      for (int i = 0; i < 3; i++) want[i] = taken ? 2 * xs[i] : -xs[i];
      if (out) CHECK_TENSOR(out, want, 3, 0, 0);
      loom_tensor_destroy(out);
      loom_tensor_destroy(in[0]);
    }
    loom_tensor_destroy(xt);
    loom_graph_destroy(g);
  }
}

/* Branches with two inputs and two outputs, over symbolic dims shared
 * by name with the outer graph. */
static void if_two_outputs_symbolic(void) {
  loom_graph_t *g = new_graph(), *branches[2];
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_value_t c = input(g, "c", LOOM_BOOL, 0, NULL);
  loom_value_t ab[2] = {input(g, "a", LOOM_F32, 1, &n), input(g, "b", LOOM_F32, 1, &n)};
  for (int k = 0; k < 2; k++) {
    loom_graph_t *b = branches[k] = new_graph();
    loom_dim_t bn;
    CHECK_OK(loom_dim_symbol(b, "n", &bn));
    loom_value_t x = input(b, "a", LOOM_F32, 1, &bn), y = input(b, "b", LOOM_F32, 1, &bn), s, p;
    /* then: (a+b, a*b); else: (a*b, a+b) */
    CHECK_OK(loom_add(b, x, y, &s));
    CHECK_OK(loom_mul(b, x, y, &p));
    CHECK_OK(loom_graph_output(b, k ? p : s));
    CHECK_OK(loom_graph_output(b, k ? s : p));
  }
  loom_value_t out[2];
  CHECK_OK(loom_if(g, c, branches[0], branches[1], 2, ab, 2, out));
  CHECK_OK(loom_graph_output(g, out[0]));
  CHECK_OK(loom_graph_output(g, out[1]));
  double a[4] = {1, 2, 3, 4}, b[4] = {0.5, -1, 2, 10};
  loom_tensor_t *at = test_tensor(LOOM_F32, 1, (int64_t[]){4}, a);
  loom_tensor_t *bt = test_tensor(LOOM_F32, 1, (int64_t[]){4}, b);
  for (int taken = 0; taken < 2; taken++) {
    loom_tensor_t *in[3] = {scalar(LOOM_BOOL, taken), at, bt}, *res[2] = {0};
    CHECK_OK(loom_interpret(g, 3, in, 2, res));
    double sum[4], prod[4];
    for (int i = 0; i < 4; i++) sum[i] = a[i] + b[i], prod[i] = a[i] * b[i];
    if (res[0]) CHECK_TENSOR(res[0], taken ? sum : prod, 4, 0, 0);
    if (res[1]) CHECK_TENSOR(res[1], taken ? prod : sum, 4, 0, 0);
    destroy_all(res, 2);
    /* Compiled for n = 4. */
    loom_compile_options_t o;
    loom_compile_options_init(&o);
    const char *names[] = {"n"};
    int64_t values[] = {4};
    o.n_symbols = 1, o.symbol_names = names, o.symbol_values = values;
    loom_executable_t *e = NULL;
    CHECK_OK(loom_compile(g, &o, &e));
    if (e) {
      CHECK_OK(loom_executable_new_output(e, 0, &res[0]));
      CHECK_OK(loom_executable_new_output(e, 1, &res[1]));
      CHECK_OK(loom_executable_run(e, 3, in, 2, res));
      CHECK_TENSOR(res[0], taken ? sum : prod, 4, 0, 0);
      CHECK_TENSOR(res[1], taken ? prod : sum, 4, 0, 0);
      destroy_all(res, 2);
      loom_executable_destroy(e);
    }
    loom_tensor_destroy(in[0]);
  }
  loom_tensor_destroy(at);
  loom_tensor_destroy(bt);
  loom_graph_destroy(g);
}

/* c1 ? (c2 ? 2x : x*x) : -x, the inner if inside the then branch. */
static void if_nested(void) {
  loom_dim_t d2[1] = {2};
  loom_graph_t *outer_then = new_graph();
  {
    loom_value_t c2 = input(outer_then, "c2", LOOM_BOOL, 0, NULL);
    loom_value_t x = input(outer_then, "x", LOOM_F32, 1, d2), y;
    CHECK_OK(loom_if(outer_then, c2, branch(TWICE, 1, d2), branch(SQUARE, 1, d2), 1, &x, 1, &y));
    CHECK_OK(loom_graph_output(outer_then, y));
  }
  loom_graph_t *outer_else = new_graph();
  {
    loom_value_t c2 = input(outer_else, "c2", LOOM_BOOL, 0, NULL);
    loom_value_t x = input(outer_else, "x", LOOM_F32, 1, d2), y;
    (void)c2;
    CHECK_OK(loom_neg(outer_else, x, &y));
    CHECK_OK(loom_graph_output(outer_else, y));
  }
  loom_graph_t *g = new_graph();
  loom_value_t c1 = input(g, "c1", LOOM_BOOL, 0, NULL);
  loom_value_t ins[2] = {input(g, "c2", LOOM_BOOL, 0, NULL), input(g, "x", LOOM_F32, 1, d2)};
  loom_value_t y;
  CHECK_OK(loom_if(g, c1, outer_then, outer_else, 2, ins, 1, &y));
  CHECK_OK(loom_graph_output(g, y));
  char *text = NULL;
  CHECK_OK(loom_graph_print(g, &text));
  /* The printer shows the subgraphs, nested ones indented deeper. */
  CHECK(text && strstr(text, "    then_graph = graph {"));
  CHECK(text && strstr(text, "        then_graph = graph {"));
  loom_free(text);
  CHECK_OK(loom_graph_dot(g, &text));
  CHECK(text && strstr(text, "then_graph #0"));
  loom_free(text);
  double xs[2] = {3, -0.5};
  loom_tensor_t *xt = test_tensor(LOOM_F32, 1, (int64_t[]){2}, xs);
  for (int k = 0; k < 4; k++) {
    int a = k & 1, b = k >> 1;
    loom_tensor_t *in[3] = {scalar(LOOM_BOOL, a), scalar(LOOM_BOOL, b), xt}, *out = NULL;
    run_both(g, 3, in, 1, &out, 1);
    double want[2];
    for (int i = 0; i < 2; i++) want[i] = !a ? -xs[i] : b ? 2 * xs[i] : xs[i] * xs[i];
    if (out) CHECK_TENSOR(out, want, 2, 0, 0);
    loom_tensor_destroy(out);
    loom_tensor_destroy(in[0]);
    loom_tensor_destroy(in[1]);
  }
  loom_tensor_destroy(xt);
  loom_graph_destroy(g);
}

/* Two ifs with the same inputs and swapped branches stay two nodes
 * through CSE: their results differ. */
static void if_not_merged_by_cse(void) {
  loom_dim_t d2[1] = {2};
  loom_graph_t *g = new_graph();
  loom_value_t c = input(g, "c", LOOM_BOOL, 0, NULL), x = input(g, "x", LOOM_F32, 1, d2), y1, y2;
  CHECK_OK(loom_if(g, c, branch(TWICE, 1, d2), branch(NEGATE, 1, d2), 1, &x, 1, &y1));
  CHECK_OK(loom_if(g, c, branch(NEGATE, 1, d2), branch(TWICE, 1, d2), 1, &x, 1, &y2));
  CHECK_OK(loom_graph_output(g, y1));
  CHECK_OK(loom_graph_output(g, y2));
  double xs[2] = {1, -3};
  loom_tensor_t *in[2] = {scalar(LOOM_BOOL, 1), test_tensor(LOOM_F32, 1, (int64_t[]){2}, xs)};
  loom_tensor_t *out[2] = {0};
  run_both(g, 2, in, 2, out, 1);
  if (out[0] && out[1]) {
    CHECK_TENSOR(out[0], ((double[]){2, -6}), 2, 0, 0);
    CHECK_TENSOR(out[1], ((double[]){-1, 3}), 2, 0, 0);
  }
  destroy_all(out, 2);
  destroy_all(in, 2);
  loom_graph_destroy(g);
}

/* ---- loop ----------------------------------------------------------------- */

/* body (i, cond, s) -> (cond, s + i + 1, s + i + 1): the running sum. */
static loom_graph_t *sum_body(void) {
  loom_graph_t *b = new_graph();
  loom_value_t i = input(b, "i", LOOM_I64, 0, NULL), c = input(b, "cond", LOOM_BOOL, 0, NULL);
  loom_value_t s = input(b, "s", LOOM_I64, 0, NULL), i1, s1;
  CHECK_OK(loom_add(b, i, constant(b, LOOM_I64, 1), &i1));
  CHECK_OK(loom_add(b, s, i1, &s1));
  CHECK_OK(loom_graph_output(b, c));
  CHECK_OK(loom_graph_output(b, s1));
  CHECK_OK(loom_graph_output(b, s1));
  return b;
}

/* Sum of 1..n with n a graph input: the scan length is data, so the
 * compiled graph falls back to the interpreter for it. */
static void loop_sum_trip_count(void) {
  loom_graph_t *g = new_graph();
  loom_value_t n = input(g, "n", LOOM_I64, 0, NULL), zero = constant(g, LOOM_I64, 0), out[2];
  CHECK_OK(loom_loop(g, n, LOOM_NO_VALUE, sum_body(), 1, &zero, 0, NULL, 2, out));
  CHECK_OK(loom_graph_output(g, out[0]));
  CHECK_OK(loom_graph_output(g, out[1]));
  int64_t ns[] = {10, 1, 0, -3};
  for (int k = 0; k < 4; k++) {
    loom_tensor_t *in = scalar(LOOM_I64, (double)ns[k]), *res[2] = {0};
    CHECK_OK(loom_interpret(g, 1, &in, 2, res));
    int64_t m = ns[k] > 0 ? ns[k] : 0;
    if (res[0]) CHECK_NEAR(test_get(res[0], 0), (double)(m * (m + 1) / 2), 0, 0);
    if (res[1]) {
      CHECK(loom_tensor_rank(res[1]) == 1 && loom_tensor_dim(res[1], 0) == m);
      for (int64_t i = 0; i < m && i < loom_tensor_numel(res[1]); i++)
        CHECK_NEAR(test_get(res[1], i), (double)((i + 1) * (i + 2) / 2), 0, 0);
    }
    destroy_all(res, 2);
    loom_tensor_destroy(in);
  }
  /* Compiling works; the executable runs the interpreter for this shape. */
  loom_executable_t *e = NULL;
  CHECK_ERR(loom_compile(g, NULL, &e), LOOM_ERR_UNSUPPORTED, "known only when the graph runs");
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* A constant trip count and no condition: static scan length, so the
 * loop compiles into a control step. */
static void loop_sum_constant_trips(void) {
  loom_graph_t *g = new_graph();
  loom_value_t s0 = input(g, "s0", LOOM_I64, 0, NULL), out[2];
  CHECK_OK(loom_loop(g, constant(g, LOOM_I64, 6), LOOM_NO_VALUE, sum_body(), 1, &s0, 0, NULL,
                     2, out));
  CHECK_OK(loom_graph_output(g, out[0]));
  CHECK_OK(loom_graph_output(g, out[1]));
  loom_dim_t dims[2];
  int rank;
  CHECK_OK(loom_value_type(g, out[1], NULL, &rank, dims));
  CHECK(rank == 1 && dims[0] == 6);
  loom_tensor_t *in = scalar(LOOM_I64, 100), *res[2] = {0};
  run_both(g, 1, &in, 2, res, 1);
  if (res[0]) CHECK_NEAR(test_get(res[0], 0), 100 + 21, 0, 0);
  double want[6];
  for (int i = 0; i < 6; i++) want[i] = 100 + (i + 1) * (i + 2) / 2;
  if (res[1]) CHECK_TENSOR(res[1], want, 6, 0, 0);
  destroy_all(res, 2);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* A tiny RNN, h = tanh(h W + x_t) for t < T, with W and the sequence as
 * invariants and every h as a scan output. */
enum { RNN_T = 5, RNN_H = 4 };
static loom_graph_t *rnn_body(void) {
  loom_graph_t *b = new_graph();
  loom_dim_t hd[2] = {1, RNN_H}, wd[2] = {RNN_H, RNN_H}, xd[2] = {RNN_T, RNN_H};
  loom_value_t t = input(b, "t", LOOM_I64, 0, NULL), c = input(b, "cond", LOOM_BOOL, 0, NULL);
  loom_value_t h = input(b, "h", LOOM_F32, 2, hd), w = input(b, "w", LOOM_F32, 2, wd);
  loom_value_t xs = input(b, "xs", LOOM_F32, 2, xd), xt, hw, pre, h1;
  CHECK_OK(loom_gather(b, xs, t, 0, &xt));
  CHECK_OK(loom_matmul(b, h, w, 0, 0, &hw));
  CHECK_OK(loom_add(b, hw, xt, &pre));
  CHECK_OK(loom_tanh(b, pre, &h1));
  CHECK_OK(loom_graph_output(b, c));
  CHECK_OK(loom_graph_output(b, h1));
  CHECK_OK(loom_graph_output(b, h1));
  return b;
}

static void loop_rnn(void) {
  loom_graph_t *g = new_graph();
  loom_dim_t hd[2] = {1, RNN_H}, wd[2] = {RNN_H, RNN_H}, xd[2] = {RNN_T, RNN_H};
  loom_value_t h0 = input(g, "h0", LOOM_F32, 2, hd);
  loom_value_t inv[2] = {input(g, "w", LOOM_F32, 2, wd), input(g, "xs", LOOM_F32, 2, xd)}, out[2];
  CHECK_OK(loom_loop(g, constant(g, LOOM_I64, RNN_T), LOOM_NO_VALUE, rnn_body(), 1, &h0, 2, inv,
                     2, out));
  CHECK_OK(loom_graph_output(g, out[0]));
  CHECK_OK(loom_graph_output(g, out[1]));
  test_seed(5);
  loom_tensor_t *in[3] = {test_rand_tensor(LOOM_F32, 2, (int64_t[]){1, RNN_H}, -1, 1),
                          test_rand_tensor(LOOM_F32, 2, (int64_t[]){RNN_H, RNN_H}, -0.8, 0.8),
                          test_rand_tensor(LOOM_F32, 2, (int64_t[]){RNN_T, RNN_H}, -1, 1)};
  /* The recurrence by hand, in double. */
  double h[RNN_H], hs[RNN_T * RNN_H];
  for (int j = 0; j < RNN_H; j++) h[j] = test_get(in[0], j);
  for (int t = 0; t < RNN_T; t++) {
    double next[RNN_H];
    for (int j = 0; j < RNN_H; j++) {
      double acc = test_get(in[2], t * RNN_H + j);
      for (int k = 0; k < RNN_H; k++) acc += h[k] * test_get(in[1], k * RNN_H + j);
      next[j] = tanh(acc);
    }
    memcpy(h, next, sizeof h);
    memcpy(&hs[t * RNN_H], h, sizeof h);
  }
  loom_tensor_t *res[2] = {0};
  run_both(g, 3, in, 2, res, 1);
  if (res[0]) CHECK_TENSOR(res[0], h, RNN_H, 1e-6, 1e-5);
  if (res[1]) CHECK_TENSOR(res[1], hs, RNN_T * RNN_H, 1e-6, 1e-5);
  destroy_all(res, 2);
  destroy_all(in, 3);
  loom_graph_destroy(g);
}

/* while x < 100: x *= 2, with the doubled values as a scan output. */
static loom_graph_t *doubling_body(int with_scan) {
  loom_graph_t *b = new_graph();
  input(b, "i", LOOM_I64, 0, NULL);
  input(b, "cond", LOOM_BOOL, 0, NULL);
  loom_value_t x = input(b, "x", LOOM_F32, 0, NULL), x2, c;
  CHECK_OK(loom_mul(b, x, constant(b, LOOM_F32, 2), &x2));
  CHECK_OK(loom_lt(b, x2, constant(b, LOOM_F32, 100), &c));
  CHECK_OK(loom_graph_output(b, c));
  CHECK_OK(loom_graph_output(b, x2));
  if (with_scan) CHECK_OK(loom_graph_output(b, x2));
  return b;
}

static void loop_while(void) {
  for (int with_scan = 0; with_scan < 2; with_scan++) {
    loom_graph_t *g = new_graph();
    loom_value_t x = input(g, "x", LOOM_F32, 0, NULL), c, out[2];
    CHECK_OK(loom_lt(g, x, constant(g, LOOM_F32, 100), &c));
    CHECK_OK(loom_loop(g, LOOM_NO_VALUE, c, doubling_body(with_scan), 1, &x, 0, NULL,
                       1 + with_scan, out));
    for (int k = 0; k <= with_scan; k++) CHECK_OK(loom_graph_output(g, out[k]));
    double starts[] = {3, 150, 99};
    for (int s = 0; s < 3; s++) {
      loom_tensor_t *in = scalar(LOOM_F32, starts[s]), *res[2] = {0};
      /* Without a scan the shapes are static and the loop compiles. */
      run_both(g, 1, &in, 1 + with_scan, res, !with_scan);
      double v = starts[s], seen[16];
      int n = 0;
      while (v < 100) seen[n++] = v *= 2;
      if (res[0]) CHECK_NEAR(test_get(res[0], 0), v, 0, 0);
      if (with_scan && res[1]) {
        CHECK(loom_tensor_dim(res[1], 0) == n);
        if (loom_tensor_dim(res[1], 0) == n) CHECK_TENSOR(res[1], seen, n, 0, 0);
      }
      destroy_all(res, 2);
      loom_tensor_destroy(in);
    }
    loom_graph_destroy(g);
  }
}

/* A trip count and a condition together: the first to end stops. */
static void loop_trip_and_cond(void) {
  loom_graph_t *g = new_graph();
  loom_value_t x = input(g, "x", LOOM_F32, 0, NULL), m = input(g, "m", LOOM_I64, 0, NULL);
  loom_value_t out;
  CHECK_OK(loom_loop(g, m, constant(g, LOOM_BOOL, 1), doubling_body(0), 1, &x, 0, NULL, 1, &out));
  CHECK_OK(loom_graph_output(g, out));
  double ms[] = {2, 100};
  for (int k = 0; k < 2; k++) {
    loom_tensor_t *in[2] = {scalar(LOOM_F32, 5), scalar(LOOM_I64, ms[k])}, *res = NULL;
    run_both(g, 2, in, 1, &res, 1);
    /* m = 2: 5 -> 10 -> 20; m = 100: stops at 160 on the condition. */
    if (res) CHECK_NEAR(test_get(res, 0), k ? 160 : 20, 0, 0);
    loom_tensor_destroy(res);
    destroy_all(in, 2);
  }
  loom_graph_destroy(g);
}

/* Compiled with runtime symbols (dynamic_symbols): one executable serves
 * several sizes of n, its control steps taking each run's shapes. */
static void runtime_symbols(void) {
  loom_graph_t *g = new_graph(), *body = new_graph();
  loom_dim_t n, bn;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_value_t c = input(g, "c", LOOM_BOOL, 0, NULL), x = input(g, "x", LOOM_F32, 1, &n), y;
  CHECK_OK(loom_if(g, c, sym_branch(TWICE), sym_branch(NEGATE), 1, &x, 1, &y));
  {
    CHECK_OK(loom_dim_symbol(body, "n", &bn));
    input(body, "i", LOOM_I64, 0, NULL);
    loom_value_t bc = input(body, "cond", LOOM_BOOL, 0, NULL), h = input(body, "h", LOOM_F32, 1, &bn);
    loom_value_t h2;
    CHECK_OK(loom_add(body, h, h, &h2));
    CHECK_OK(loom_graph_output(body, bc));
    CHECK_OK(loom_graph_output(body, h2));
    CHECK_OK(loom_graph_output(body, h2));
  }
  loom_value_t out[2];
  CHECK_OK(loom_loop(g, constant(g, LOOM_I64, 2), LOOM_NO_VALUE, body, 1, &y, 0, NULL, 2, out));
  CHECK_OK(loom_graph_output(g, out[0]));
  CHECK_OK(loom_graph_output(g, out[1]));
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.dynamic_symbols = 1;
  loom_executable_t *e = NULL;
  loom_status_t s = loom_compile(g, &o, &e);
  if (s == LOOM_ERR_INVALID && strstr(loom_last_error(), "needs a value")) {
    printf("note: this build has no runtime symbols; skipped\n");
    loom_graph_destroy(g);
    return;
  }
  CHECK_OK(s);
  int64_t sizes[] = {3, 6, 3};
  for (int r = 0; e && r < 3; r++) {
    int64_t m = sizes[r];
    double xs[6] = {1, -2, 3, 0.5, 4, -1};
    loom_tensor_t *in[2] = {scalar(LOOM_BOOL, r != 1), test_tensor(LOOM_F32, 1, &m, xs)};
    int64_t scan_shape[2] = {2, m};
    loom_tensor_t *got[2] = {0};
    CHECK_OK(loom_tensor_create(LOOM_F32, 1, &m, &got[0]));
    CHECK_OK(loom_tensor_create(LOOM_F32, 2, scan_shape, &got[1]));
    CHECK_OK(loom_executable_run(e, 2, in, 2, got));
    /* y = 2x or -x, doubled twice; the rows hold 2y and 4y. */
    double last[6], rows[12];
    for (int i = 0; i < m; i++) {
      double yi = r != 1 ? 2 * xs[i] : -xs[i];
      last[i] = 4 * yi, rows[i] = 2 * yi, rows[m + i] = 4 * yi;
    }
    CHECK_TENSOR(got[0], last, m, 0, 0);
    CHECK_TENSOR(got[1], rows, 2 * m, 0, 0);
    destroy_all(got, 2);
    destroy_all(in, 2);
  }
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* A trip count that counts a symbolic dim (the sum of n ones, as the ONNX
 * importer makes a sequence length a tensor): the scan output stacks
 * along n itself, so the graph compiles with runtime symbols; each run
 * takes n from the input (x + 1, x + 3, x + 6, ... over x's n rows). */
static void loop_counted_dim(void) {
  loom_graph_t *g = new_graph();
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_dim_t xd[2] = {n, 3};
  loom_value_t x = input(g, "x", LOOM_F32, 2, xd), ones, trips, out[2], sum_x;
  CHECK_OK(loom_full(g, 1, &n, 1, LOOM_I64, &ones));
  CHECK_OK(loom_sum(g, ones, 1, (int64_t[]){0}, 0, &trips));
  loom_graph_t *body = new_graph();
  loom_value_t i = input(body, "i", LOOM_I64, 0, NULL), c = input(body, "cond", LOOM_BOOL, 0, NULL);
  loom_dim_t bn;
  CHECK_OK(loom_dim_symbol(body, "n", &bn));
  loom_dim_t bxd[2] = {bn, 3}, rd[1] = {3};
  loom_value_t acc = input(body, "acc", LOOM_F32, 1, rd), bx = input(body, "x", LOOM_F32, 2, bxd);
  loom_value_t row, fi, next;
  CHECK_OK(loom_gather(body, bx, i, 0, &row));
  CHECK_OK(loom_cast(body, i, LOOM_F32, &fi));
  CHECK_OK(loom_add(body, acc, fi, &next));
  CHECK_OK(loom_add(body, next, row, &row));
  CHECK_OK(loom_graph_output(body, c));
  CHECK_OK(loom_graph_output(body, next));
  CHECK_OK(loom_graph_output(body, row));
  loom_value_t init;
  CHECK_OK(loom_full(g, 1, (loom_dim_t[]){3}, 1, LOOM_F32, &init));
  CHECK_OK(loom_loop(g, trips, LOOM_NO_VALUE, body, 1, &init, 1, &x, 2, out));
  CHECK_OK(loom_add(g, out[1], x, &sum_x)); /* provably of x's shape */
  CHECK_OK(loom_graph_output(g, sum_x));
  loom_dim_t dims[2];
  int rank;
  CHECK_OK(loom_value_type(g, out[1], NULL, &rank, dims));
  CHECK(rank == 2 && dims[0] == n && dims[1] == 3);
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.dynamic_symbols = 1;
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  for (int64_t m = 1; e && m <= 5; m += 2) {
    double xs[15], want[15];
    double acc_v = 1;
    for (int r = 0; r < m; r++) {
      acc_v += r;
      for (int k = 0; k < 3; k++) {
        xs[r * 3 + k] = r * 10 + k;
        want[r * 3 + k] = acc_v + 2 * xs[r * 3 + k];
      }
    }
    int64_t shape[2] = {m, 3};
    loom_tensor_t *in = test_tensor(LOOM_F32, 2, shape, xs), *got = NULL, *ref = NULL;
    CHECK_OK(loom_tensor_create(LOOM_F32, 2, shape, &got));
    CHECK_OK(loom_executable_run(e, 1, &in, 1, &got));
    CHECK_TENSOR(got, want, m * 3, 0, 0);
    CHECK_OK(loom_interpret(g, 1, &in, 1, &ref));
    CHECK_TENSOR(ref, want, m * 3, 0, 0);
    loom_tensor_destroy(in);
    loom_tensor_destroy(got);
    loom_tensor_destroy(ref);
  }
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* A loop of 0 trips whose scan output has a symbolic dim: the empty stack
 * takes that dim from the loop's inputs, (0, n, 3). */
static void loop_no_trips_symbolic_scan(void) {
  loom_graph_t *g = new_graph(), *body = new_graph();
  loom_dim_t n, bn;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_symbol(body, "n", &bn));
  loom_dim_t xd[2] = {n, 3}, bxd[2] = {bn, 3};
  loom_value_t trips = input(g, "trips", LOOM_I64, 0, NULL), x = input(g, "x", LOOM_F32, 2, xd);
  input(body, "i", LOOM_I64, 0, NULL);
  loom_value_t c = input(body, "cond", LOOM_BOOL, 0, NULL), bx = input(body, "x", LOOM_F32, 2, bxd);
  loom_value_t twice, out;
  CHECK_OK(loom_add(body, bx, bx, &twice));
  CHECK_OK(loom_graph_output(body, c));
  CHECK_OK(loom_graph_output(body, twice));
  CHECK_OK(loom_loop(g, trips, LOOM_NO_VALUE, body, 0, NULL, 1, &x, 1, &out));
  CHECK_OK(loom_graph_output(g, out));
  for (int t = 0; t <= 2; t += 2) {
    double xs[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    loom_tensor_t *in[2] = {scalar(LOOM_I64, t), test_tensor(LOOM_F32, 2, shape, xs)}, *res = NULL;
    CHECK_OK(loom_interpret(g, 2, in, 1, &res));
    CHECK(res && loom_tensor_rank(res) == 3 && loom_tensor_dim(res, 0) == t &&
          loom_tensor_dim(res, 1) == 2 && loom_tensor_dim(res, 2) == 3);
    loom_tensor_destroy(res);
    destroy_all(in, 2);
  }
  loom_graph_destroy(g);
}

/* ---- Errors and ownership ----------------------------------------------------- */

static void if_shape_errors(void) {
  loom_dim_t d3[1] = {3}, d4[1] = {4};
  loom_graph_t *g = new_graph();
  loom_value_t c = input(g, "c", LOOM_BOOL, 0, NULL), x = input(g, "x", LOOM_F32, 1, d3), y;
  loom_value_t x4 = input(g, "x4", LOOM_F32, 1, d4), cv = input(g, "cv", LOOM_BOOL, 1, d3);
  loom_value_t f = input(g, "f", LOOM_F32, 0, NULL);
  /* Branch outputs differ in dtype. */
  loom_graph_t *t = branch(TWICE, 1, d3), *e = new_graph();
  {
    loom_value_t bx = input(e, "x", LOOM_F32, 1, d3), s;
    CHECK_OK(loom_cast(e, bx, LOOM_F64, &s));
    CHECK_OK(loom_graph_output(e, s));
  }
  CHECK_ERR(loom_if(g, c, t, e, 1, &x, 1, &y), LOOM_ERR_SHAPE,
            "output 0 is f32[3] in then_graph and f64[3] in else_graph");
  CHECK_ERR(loom_if(g, c, branch(TWICE, 1, d3), branch(NEGATE, 1, d3), 1, &x4, 1, &y),
            LOOM_ERR_SHAPE, "then_graph input 0 is f32[3], the outer value is f32[4]");
  CHECK_ERR(loom_if(g, cv, branch(TWICE, 1, d3), branch(NEGATE, 1, d3), 1, &x, 1, &y),
            LOOM_ERR_SHAPE, "cond must be a rank-0");
  CHECK_ERR(loom_if(g, f, branch(TWICE, 1, d3), branch(NEGATE, 1, d3), 1, &x, 1, &y),
            LOOM_ERR_DTYPE, "if");
  CHECK_ERR(loom_if(g, c, branch(TWICE, 1, d3), branch(NEGATE, 1, d3), 1, &x, 2, &y),
            LOOM_ERR_INVALID, "room for 2");
  /* Failed builds leave no node and no subgraph behind. */
  CHECK(loom_graph_num_nodes(g) == 0);
  loom_graph_destroy(g);
}

static void loop_shape_errors(void) {
  loom_graph_t *g = new_graph();
  loom_value_t x = input(g, "x", LOOM_F32, 0, NULL), xi = input(g, "xi", LOOM_I64, 0, NULL);
  loom_value_t n = input(g, "n", LOOM_I64, 0, NULL), fn = input(g, "fn", LOOM_F32, 0, NULL);
  loom_value_t out[2];
  /* Carried value typed f32 outside, i64 in the body. */
  CHECK_ERR(loom_loop(g, n, LOOM_NO_VALUE, sum_body(), 1, &x, 0, NULL, 2, out), LOOM_ERR_SHAPE,
            "body input 2 (carried) is i64[], the outer value is f32[]");
  /* A body whose carried result changes dtype. */
  loom_graph_t *b = new_graph();
  {
    input(b, "i", LOOM_I64, 0, NULL);
    loom_value_t c = input(b, "cond", LOOM_BOOL, 0, NULL), s = input(b, "s", LOOM_I64, 0, NULL), f;
    CHECK_OK(loom_cast(b, s, LOOM_F32, &f));
    CHECK_OK(loom_graph_output(b, c));
    CHECK_OK(loom_graph_output(b, f));
  }
  CHECK_ERR(loom_loop(g, n, LOOM_NO_VALUE, b, 1, &xi, 0, NULL, 1, out), LOOM_ERR_SHAPE,
            "body output 1 (carried) is f32[]");
  CHECK_ERR(loom_loop(g, LOOM_NO_VALUE, LOOM_NO_VALUE, sum_body(), 1, &xi, 0, NULL, 2, out),
            LOOM_ERR_INVALID, "never end");
  CHECK_ERR(loom_loop(g, fn, LOOM_NO_VALUE, sum_body(), 1, &xi, 0, NULL, 2, out),
            LOOM_ERR_DTYPE, "loop");
  CHECK_ERR(loom_loop(g, n, LOOM_NO_VALUE, sum_body(), 1, &xi, 0, NULL, 1, out),
            LOOM_ERR_INVALID, "room for 1");
  /* A body whose first output is not its condition. */
  b = new_graph();
  {
    input(b, "i", LOOM_I64, 0, NULL);
    input(b, "cond", LOOM_BOOL, 0, NULL);
    loom_value_t s = input(b, "s", LOOM_I64, 0, NULL);
    CHECK_OK(loom_graph_output(b, s));
    CHECK_OK(loom_graph_output(b, s));
  }
  CHECK_ERR(loom_loop(g, n, LOOM_NO_VALUE, b, 1, &xi, 0, NULL, 1, out), LOOM_ERR_SHAPE,
            "body output 0 (cond) must be a rank-0 bool");
  /* A body that is not a loop body (no iteration input). */
  CHECK_ERR(loom_loop(g, n, LOOM_NO_VALUE, branch(TWICE, 0, NULL), 0, NULL, 0, NULL, 0, out),
            LOOM_ERR_SHAPE, "body takes 1 inputs; it needs 2");
  CHECK(loom_graph_num_nodes(g) == 0);
  loom_graph_destroy(g);
}

/* Null and repeated subgraphs fail without leaking or freeing twice;
 * a graph destroyed with its ifs and loops frees their subgraphs. */
static void ownership(void) {
  loom_dim_t d2[1] = {2};
  loom_graph_t *g = new_graph();
  loom_value_t c = input(g, "c", LOOM_BOOL, 0, NULL), x = input(g, "x", LOOM_F32, 1, d2), y;
  CHECK_ERR(loom_if(g, c, NULL, branch(NEGATE, 1, d2), 1, &x, 1, &y), LOOM_ERR_INVALID,
            "then_graph: a subgraph is null");
  CHECK_ERR(loom_if(g, c, branch(NEGATE, 1, d2), NULL, 1, &x, 1, &y), LOOM_ERR_INVALID,
            "else_graph: a subgraph is null");
  loom_graph_t *twice = branch(TWICE, 1, d2);
  CHECK_ERR(loom_if(g, c, twice, twice, 1, &x, 1, &y), LOOM_ERR_INVALID, "already belongs");
  CHECK_ERR(loom_if(g, c, g, branch(NEGATE, 1, d2), 1, &x, 1, &y), LOOM_ERR_INVALID,
            "its own subgraph");
  CHECK_ERR(loom_if(NULL, c, branch(NEGATE, 1, d2), branch(NEGATE, 1, d2), 1, &x, 1, &y),
            LOOM_ERR_INVALID, "graph is null");
  CHECK_ERR(loom_loop(g, LOOM_NO_VALUE, c, NULL, 0, NULL, 0, NULL, 0, &y), LOOM_ERR_INVALID,
            "body: a subgraph is null");
  /* A subgraph of one if passed again to another. */
  loom_graph_t *then_g = branch(TWICE, 1, d2);
  CHECK_OK(loom_if(g, c, then_g, branch(NEGATE, 1, d2), 1, &x, 1, &y));
  CHECK_ERR(loom_if(g, c, then_g, branch(NEGATE, 1, d2), 1, &x, 1, &y), LOOM_ERR_INVALID,
            "already belongs");
  CHECK(loom_graph_num_nodes(g) == 1);
  /* Owned now: destroying it is left to g. */
  loom_graph_destroy(then_g);
  CHECK_OK(loom_graph_output(g, y));
  CHECK_OK(loom_graph_verify(g));
  /* The verifier catches a node naming a subgraph that is not there. */
  ((ir_attrs_t *)g->nodes[0].attrs)->a[0].ints[0] = 7; /* corrupted on purpose */
  CHECK_ERR(loom_graph_verify(g), LOOM_ERR_GRAPH, "then_graph names no subgraph");
  loom_graph_destroy(g);
}

/* A branch may not assign: it cannot write the outer graph's state. */
static void stateful_branch_rejected(void) {
  loom_dim_t d2[1] = {2};
  loom_graph_t *g = new_graph(), *t = new_graph();
  loom_value_t c = input(g, "c", LOOM_BOOL, 0, NULL), x = input(g, "x", LOOM_F32, 1, d2), y;
  loom_value_t tx = input(t, "x", LOOM_F32, 1, d2), p;
  CHECK_OK(loom_graph_param(t, "p", LOOM_F32, 1, d2, NULL, &p));
  CHECK_OK(loom_assign(t, p, tx));
  CHECK_OK(loom_graph_output(t, tx));
  CHECK_ERR(loom_if(g, c, t, branch(NEGATE, 1, d2), 1, &x, 1, &y), LOOM_ERR_INVALID,
            "then_graph writes state (node 'assign'); a subgraph cannot");
  loom_graph_destroy(g);
}

/* loss = sum(if(c1, if(c2, x*w + x*x, -x), x + w)): the gradient is an
 * if over the branches' gradients, nested ones included:
 * dx = c1 ? (c2 ? w + 2x : -1) : 1, dw = c1 ? (c2 ? x : 0) : 1. */
static loom_graph_t *grad_inner(int which) {
  loom_dim_t d3[1] = {3};
  loom_graph_t *b = new_graph();
  loom_value_t x = input(b, "x", LOOM_F32, 1, d3), w = input(b, "w", LOOM_F32, 1, d3), y, t;
  if (which == 0) {
    CHECK_OK(loom_mul(b, x, w, &t));
    CHECK_OK(loom_mul(b, x, x, &y));
    CHECK_OK(loom_add(b, t, y, &y));
  } else if (which == 1) {
    CHECK_OK(loom_neg(b, x, &y));
  } else {
    CHECK_OK(loom_add(b, x, w, &y));
  }
  CHECK_OK(loom_graph_output(b, y));
  return b;
}

static void if_gradient(void) {
  loom_dim_t d3[1] = {3};
  loom_graph_t *outer_then = new_graph();
  {
    loom_value_t c2 = input(outer_then, "c2", LOOM_BOOL, 0, NULL);
    loom_value_t xw[2] = {input(outer_then, "x", LOOM_F32, 1, d3),
                          input(outer_then, "w", LOOM_F32, 1, d3)}, y;
    CHECK_OK(loom_if(outer_then, c2, grad_inner(0), grad_inner(1), 2, xw, 1, &y));
    CHECK_OK(loom_graph_output(outer_then, y));
  }
  loom_graph_t *outer_else = new_graph();
  {
    input(outer_else, "c2", LOOM_BOOL, 0, NULL);
    loom_value_t x = input(outer_else, "x", LOOM_F32, 1, d3), w = input(outer_else, "w", LOOM_F32, 1, d3), y;
    CHECK_OK(loom_add(outer_else, x, w, &y));
    CHECK_OK(loom_graph_output(outer_else, y));
  }
  loom_graph_t *g = new_graph();
  loom_value_t c1 = input(g, "c1", LOOM_BOOL, 0, NULL);
  loom_value_t ins[3] = {input(g, "c2", LOOM_BOOL, 0, NULL), input(g, "x", LOOM_F32, 1, d3),
                         input(g, "w", LOOM_F32, 1, d3)};
  loom_value_t y, loss, grads[2];
  CHECK_OK(loom_if(g, c1, outer_then, outer_else, 3, ins, 1, &y));
  CHECK_OK(loom_sum(g, y, 0, NULL, 0, &loss));
  CHECK_OK(loom_grad(g, loss, 2, &ins[1], grads));
  CHECK_OK(loom_graph_output(g, grads[0]));
  CHECK_OK(loom_graph_output(g, grads[1]));
  double xs[3] = {0.5, -2, 3}, ws[3] = {1.5, 0.25, -1};
  loom_tensor_t *xt = test_tensor(LOOM_F32, 1, (int64_t[]){3}, xs);
  loom_tensor_t *wt = test_tensor(LOOM_F32, 1, (int64_t[]){3}, ws);
  for (int k = 0; k < 4; k++) {
    int a = k & 1, b = k >> 1;
    loom_tensor_t *in[4] = {scalar(LOOM_BOOL, a), scalar(LOOM_BOOL, b), xt, wt}, *res[2] = {0};
    run_both(g, 4, in, 2, res, 1);
    double dx[3], dw[3];
    for (int i = 0; i < 3; i++) {
      dx[i] = !a ? 1 : b ? ws[i] + 2 * xs[i] : -1;
      dw[i] = !a ? 1 : b ? xs[i] : 0;
    }
    if (res[0]) CHECK_TENSOR(res[0], dx, 3, 1e-6, 1e-6);
    if (res[1]) CHECK_TENSOR(res[1], dw, 3, 1e-6, 1e-6);
    destroy_all(res, 2);
    loom_tensor_destroy(in[0]);
    loom_tensor_destroy(in[1]);
  }
  loom_tensor_destroy(xt);
  loom_tensor_destroy(wt);
  loom_graph_destroy(g);
}

/* ---- Loop gradients, against finite differences (grad_check) ---------------- */

/* The RNN body in f64: h = tanh(h W + x_t) with an i64 step counter
 * carried beside h (a carried value that takes no gradient), W and the
 * sequence invariant, every h a scan output. */
static loom_graph_t *rnn_body_f64(int t_len) {
  loom_graph_t *b = new_graph();
  loom_dim_t hd[2] = {1, RNN_H}, wd[2] = {RNN_H, RNN_H}, xd[2] = {t_len, RNN_H};
  loom_value_t t = input(b, "t", LOOM_I64, 0, NULL), c = input(b, "cond", LOOM_BOOL, 0, NULL);
  loom_value_t h = input(b, "h", LOOM_F64, 2, hd), k = input(b, "k", LOOM_I64, 0, NULL);
  loom_value_t w = input(b, "w", LOOM_F64, 2, wd), xs = input(b, "xs", LOOM_F64, 2, xd);
  loom_value_t xt, hw, pre, h1, k1;
  CHECK_OK(loom_gather(b, xs, t, 0, &xt));
  CHECK_OK(loom_matmul(b, h, w, 0, 0, &hw));
  CHECK_OK(loom_add(b, hw, xt, &pre));
  CHECK_OK(loom_tanh(b, pre, &h1));
  CHECK_OK(loom_add(b, k, constant(b, LOOM_I64, 1), &k1));
  CHECK_OK(loom_graph_output(b, c));
  CHECK_OK(loom_graph_output(b, h1));
  CHECK_OK(loom_graph_output(b, k1));
  CHECK_OK(loom_graph_output(b, h1));
  return b;
}

/* loss = weighted sums of the final h and of the stacked hs (which = 1:
 * the final h only, 2: the stack only, 3: both). */
typedef struct rnn_case {
  int which;
} rnn_case_t;

static loom_status_t rnn_loss(loom_graph_t *g, const loom_value_t *x, void *ctx,
                              loom_value_t *loss) {
  const rnn_case_t *rc = ctx;
  loom_value_t init[2] = {x[0], constant(g, LOOM_I64, 0)}, out[3], a, b;
  LOOM_TRY(loom_loop(g, constant(g, LOOM_I64, RNN_T), LOOM_NO_VALUE, rnn_body_f64(RNN_T), 2,
                     init, 2, &x[1], 3, out));
  if (rc->which == 1) return grad_check_weighted_sum(g, out[0], loss);
  if (rc->which == 2) return grad_check_weighted_sum(g, out[2], loss);
  LOOM_TRY(grad_check_weighted_sum(g, out[0], &a));
  LOOM_TRY(grad_check_weighted_sum(g, out[2], &b));
  return loom_add(g, a, b, loss);
}

/* d loss / d (h0, W, xs) of an RNN written as one in-graph loop. */
static void loop_gradient_rnn(void) {
  test_seed(11);
  loom_tensor_t *x[3] = {test_rand_tensor(LOOM_F64, 2, (int64_t[]){1, RNN_H}, -1, 1),
                         test_rand_tensor(LOOM_F64, 2, (int64_t[]){RNN_H, RNN_H}, -0.8, 0.8),
                         test_rand_tensor(LOOM_F64, 2, (int64_t[]){RNN_T, RNN_H}, -1, 1)};
  for (int which = 1; which <= 3; which++) {
    rnn_case_t rc = {which};
    char what[64];
    snprintf(what, sizeof what, "loop rnn (loss case %d)", which);
    CHECK(grad_check(what, 3, x, rnn_loss, &rc, NULL));
  }
  destroy_all(x, 3);
}

/* while x < 100: x = x * x * 0.5 + x * w, the values as a scan output:
 * the trip count depends on the data, and the gradient follows the
 * iterations the forward took. */
static loom_graph_t *growth_body(void) {
  loom_graph_t *b = new_graph();
  input(b, "i", LOOM_I64, 0, NULL);
  input(b, "cond", LOOM_BOOL, 0, NULL);
  loom_value_t x = input(b, "x", LOOM_F64, 0, NULL), w = input(b, "w", LOOM_F64, 0, NULL);
  loom_value_t sq, half, xw, x1, c;
  CHECK_OK(loom_mul(b, x, x, &sq));
  CHECK_OK(loom_mul(b, sq, constant(b, LOOM_F64, 0.5), &half));
  CHECK_OK(loom_mul(b, x, w, &xw));
  CHECK_OK(loom_add(b, half, xw, &x1));
  CHECK_OK(loom_lt(b, x1, constant(b, LOOM_F64, 100), &c));
  CHECK_OK(loom_graph_output(b, c));
  CHECK_OK(loom_graph_output(b, x1));
  CHECK_OK(loom_graph_output(b, x1));
  return b;
}

static loom_status_t growth_loss(loom_graph_t *g, const loom_value_t *x, void *ctx,
                                 loom_value_t *loss) {
  (void)ctx;
  loom_value_t c, out[2], a, b;
  LOOM_TRY(loom_lt(g, x[0], constant(g, LOOM_F64, 100), &c));
  LOOM_TRY(loom_loop(g, LOOM_NO_VALUE, c, growth_body(), 1, &x[0], 1, &x[1], 2, out));
  LOOM_TRY(loom_sum(g, out[1], 0, NULL, 0, &a));
  LOOM_TRY(loom_mul(g, out[0], constant(g, LOOM_F64, 0.25), &b));
  return loom_add(g, a, b, loss);
}

static void loop_gradient_while(void) {
  /* starting points whose trip counts (4, 3, 1) stay put within h */
  double starts[][2] = {{1.5, 1.2}, {3.0, 1.1}, {12.0, 0.7}};
  for (int k = 0; k < 3; k++) {
    loom_tensor_t *x[2] = {scalar(LOOM_F64, starts[k][0]), scalar(LOOM_F64, starts[k][1])};
    char what[64];
    snprintf(what, sizeof what, "loop while (start %g)", starts[k][0]);
    grad_check_opts_t o;
    grad_check_opts_init(&o);
    o.rtol = 1e-5;
    o.atol = 1e-5;
    CHECK(grad_check(what, 2, x, growth_loss, NULL, &o));
    destroy_all(x, 2);
  }
  /* A trip count of 0: the gradient passes the initial value through. */
  loom_graph_t *g = new_graph();
  loom_value_t x[2] = {input(g, "x", LOOM_F64, 0, NULL), input(g, "w", LOOM_F64, 0, NULL)};
  loom_value_t loss, grads[2];
  CHECK_OK(growth_loss(g, x, NULL, &loss));
  CHECK_OK(loom_grad(g, loss, 2, x, grads));
  CHECK_OK(loom_graph_output(g, grads[0]));
  CHECK_OK(loom_graph_output(g, grads[1]));
  loom_tensor_t *in[2] = {scalar(LOOM_F64, 150), scalar(LOOM_F64, 1)}, *res[2] = {0};
  run_both(g, 2, in, 2, res, 0);
  if (res[0]) CHECK_NEAR(test_get(res[0], 0), 0.25, 0, 0);
  if (res[1]) CHECK_NEAR(test_get(res[1], 0), 0, 0, 0);
  destroy_all(res, 2);
  destroy_all(in, 2);
  loom_graph_destroy(g);
}

/* ---- Allocation failures ----------------------------------------------------- */

/* One session's state, freed whatever step failed. */
typedef struct session {
  loom_graph_t *g, *sub[2]; /* sub: built, not yet handed to g */
  loom_executable_t *e;
  loom_tensor_t *in[2], *outs[3], *runs[3];
  char *text;
} session_t;

/* OK goes on; NOMEM with a message stops; anything else fails the test. */
static bool step(loom_status_t s, const char *what, int64_t n) {
  if (s == LOOM_OK) return true;
  test_checks++;
  if (s != LOOM_ERR_NOMEM || !loom_last_error()[0])
    test_fail(__FILE__, __LINE__, "fail_after %lld: %s returned %s: %s", (long long)n, what,
              loom_status_name(s), loom_last_error());
  return false;
}

#define STEP(call)                            \
  do {                                        \
    if (!step((call), #call, n)) return false; \
  } while (0)

/* x -> x + x, or x -> -x. */
static bool session_branch(session_t *ss, int k, int64_t n) {
  loom_dim_t d3[1] = {3};
  loom_value_t x, y;
  STEP(loom_graph_create(&ss->sub[k]));
  STEP(loom_graph_input(ss->sub[k], "x", LOOM_F32, 1, d3, &x));
  STEP(k == 0 ? loom_add(ss->sub[k], x, x, &y) : loom_neg(ss->sub[k], x, &y));
  STEP(loom_graph_output(ss->sub[k], y));
  return true;
}

/* (i, cond, x) -> (cond, x + x, x + x). */
static bool session_body(session_t *ss, int64_t n) {
  loom_dim_t d3[1] = {3};
  loom_value_t i, c, x, y;
  loom_graph_t *b;
  STEP(loom_graph_create(&ss->sub[0]));
  b = ss->sub[0];
  STEP(loom_graph_input(b, "i", LOOM_I64, 0, NULL, &i));
  STEP(loom_graph_input(b, "cond", LOOM_BOOL, 0, NULL, &c));
  STEP(loom_graph_input(b, "x", LOOM_F32, 1, d3, &x));
  STEP(loom_add(b, x, x, &y));
  STEP(loom_graph_output(b, c));
  STEP(loom_graph_output(b, y));
  STEP(loom_graph_output(b, y));
  return true;
}

/* Builds y = if(c, 2x, -x) and a 3-trip doubling loop over y, then
 * interprets, compiles (reference steps) and runs it. */
static bool session_run(session_t *ss, int64_t n) {
  loom_dim_t d3[1] = {3};
  int64_t three = 3, shape[1] = {3};
  float xs[3] = {1, 2, 3};
  uint8_t yes = 1;
  loom_value_t c, x, y, trips, out[2];
  STEP(loom_graph_create(&ss->g));
  STEP(loom_graph_input(ss->g, "c", LOOM_BOOL, 0, NULL, &c));
  STEP(loom_graph_input(ss->g, "x", LOOM_F32, 1, d3, &x));
  if (!session_branch(ss, 0, n) || !session_branch(ss, 1, n)) return false;
  loom_graph_t *t = ss->sub[0], *e = ss->sub[1];
  ss->sub[0] = ss->sub[1] = NULL;
  STEP(loom_if(ss->g, c, t, e, 1, &x, 1, &y));
  if (!session_body(ss, n)) return false;
  STEP(loom_tensor_from_data(LOOM_I64, 0, NULL, &three, sizeof three, &ss->in[0]));
  STEP(loom_graph_constant(ss->g, ss->in[0], &trips));
  loom_tensor_destroy(ss->in[0]);
  ss->in[0] = NULL;
  loom_graph_t *body = ss->sub[0];
  ss->sub[0] = NULL; /* the loop owns it from here, even if it fails */
  STEP(loom_loop(ss->g, trips, LOOM_NO_VALUE, body, 1, &y, 0, NULL, 2, out));
  STEP(loom_graph_output(ss->g, out[0]));
  STEP(loom_graph_output(ss->g, out[1]));
  STEP(loom_tensor_from_data(LOOM_BOOL, 0, NULL, &yes, 1, &ss->in[0]));
  STEP(loom_tensor_from_data(LOOM_F32, 1, shape, xs, sizeof xs, &ss->in[1]));
  STEP(loom_interpret(ss->g, 2, ss->in, 2, ss->outs));
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.use_cc = 0, o.num_threads = 1;
  STEP(loom_compile(ss->g, &o, &ss->e));
  for (int k = 0; k < 2; k++) STEP(loom_executable_new_output(ss->e, k, &ss->runs[k]));
  STEP(loom_executable_run(ss->e, 2, ss->in, 2, ss->runs));
  STEP(loom_graph_print(ss->g, &ss->text));
  return true;
}
#undef STEP

static void session_free(session_t *ss) {
  loom_free(ss->text);
  for (int k = 0; k < 3; k++) {
    loom_tensor_destroy(ss->outs[k]);
    loom_tensor_destroy(ss->runs[k]);
  }
  for (int k = 0; k < 2; k++) {
    loom_tensor_destroy(ss->in[k]);
    loom_graph_destroy(ss->sub[k]);
  }
  loom_executable_destroy(ss->e);
  loom_graph_destroy(ss->g);
}

/* Every allocation, made to fail in turn, gives NOMEM with a message and
 * leaks nothing (ASan checks); the last session also computes right. */
static void allocation_failures(void) {
  int64_t n;
  for (n = 0; n < 100000; n++) {
    session_t ss = {0};
    core_alloc_fail_after(n);
    bool done = session_run(&ss, n);
    core_alloc_fail_after(-1);
    if (done) {
      /* y = 2x = (2, 4, 6), doubled three times. */
      double last[3] = {16, 32, 48}, rows[9] = {4, 8, 12, 8, 16, 24, 16, 32, 48};
      CHECK_TENSOR(ss.outs[0], last, 3, 0, 0);
      CHECK_TENSOR(ss.outs[1], rows, 9, 0, 0);
      CHECK_TENSOR(ss.runs[0], last, 3, 0, 0);
      CHECK_TENSOR(ss.runs[1], rows, 9, 0, 0);
    }
    session_free(&ss);
    if (done) break;
  }
  CHECK(n > 50 && n < 100000);
}

int main(void) {
  TEST_RUN(if_both_outcomes);
  TEST_RUN(if_two_outputs_symbolic);
  TEST_RUN(if_nested);
  TEST_RUN(if_not_merged_by_cse);
  TEST_RUN(loop_sum_trip_count);
  TEST_RUN(loop_sum_constant_trips);
  TEST_RUN(loop_rnn);
  TEST_RUN(loop_while);
  TEST_RUN(loop_trip_and_cond);
  TEST_RUN(if_shape_errors);
  TEST_RUN(loop_shape_errors);
  TEST_RUN(ownership);
  TEST_RUN(stateful_branch_rejected);
  TEST_RUN(runtime_symbols);
  TEST_RUN(loop_counted_dim);
  TEST_RUN(loop_no_trips_symbolic_scan);
  TEST_RUN(if_gradient);
  TEST_RUN(loop_gradient_rnn);
  TEST_RUN(loop_gradient_while);
  TEST_RUN(allocation_failures);
  return test_summary();
}
