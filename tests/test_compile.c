/* Compiled executables against the interpreter: the same graphs, the same
 * results, through every path (generated code, reference steps, copies,
 * the interpreter fallback), and the guard's errors. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/ir.h"
#include "passes/fuse.h"

/* x (n, 4) -> relu(x @ w + b) * 2 - x[:, :1] summed over axis 1; a param
 * counter incremented by assign. Exercises contraction, elementwise,
 * reduction, layout and state. */
static loom_graph_t *mixed_graph(loom_value_t *counter) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, w, b, xw, h, r, two, y, first, z, s, one, next;
  int64_t wshape[2] = {4, 3}, bshape[1] = {3};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){5, 4}, &x));
  loom_tensor_t *wt = test_tensor(LOOM_F32, 2, wshape,
                                  (double[]){1, 0, -1, 2, 1, 0, 0, -1, 1, 0.5, 0.5, 0.5});
  loom_tensor_t *bt = test_tensor(LOOM_F32, 1, bshape, (double[]){0.1, -0.2, 0.3});
  CHECK_OK(loom_graph_param(g, "w", LOOM_F32, 2, wshape, wt, &w));
  CHECK_OK(loom_graph_param(g, "b", LOOM_F32, 1, bshape, bt, &b));
  CHECK_OK(loom_graph_param(g, "counter", LOOM_F32, 0, NULL, NULL, counter));
  loom_tensor_t *two_t = test_tensor(LOOM_F32, 0, NULL, (double[]){2});
  loom_tensor_t *one_t = test_tensor(LOOM_F32, 0, NULL, (double[]){1});
  CHECK_OK(loom_graph_constant(g, two_t, &two));
  CHECK_OK(loom_graph_constant(g, one_t, &one));
  CHECK_OK(loom_matmul(g, x, w, 0, 0, &xw));
  CHECK_OK(loom_add(g, xw, b, &h));
  CHECK_OK(loom_relu(g, h, &r));
  CHECK_OK(loom_mul(g, r, two, &y));
  CHECK_OK(loom_slice(g, x, 1, (int64_t[]){0}, (int64_t[]){1}, (int64_t[]){1}, NULL, &first));
  CHECK_OK(loom_sub(g, y, first, &z));
  CHECK_OK(loom_sum(g, z, 1, (int64_t[]){1}, 0, &s));
  CHECK_OK(loom_add(g, *counter, one, &next));
  CHECK_OK(loom_assign(g, *counter, next));
  CHECK_OK(loom_graph_output(g, s));
  CHECK_OK(loom_graph_output(g, z));
  loom_tensor_destroy(wt);
  loom_tensor_destroy(bt);
  loom_tensor_destroy(two_t);
  loom_tensor_destroy(one_t);
  return g;
}

/* Runs e on inputs into fresh outputs (the caller destroys them). */
static void run_exe(loom_executable_t *e, int n_in, loom_tensor_t **in, int n_out,
                    loom_tensor_t **out) {
  for (int i = 0; i < n_out; i++) CHECK_OK(loom_executable_new_output(e, i, &out[i]));
  CHECK_OK(loom_executable_run(e, n_in, in, n_out, out));
}

static void check_same(loom_tensor_t *a, loom_tensor_t *b) {
  CHECK(loom_tensor_numel(a) == loom_tensor_numel(b));
  for (int64_t i = 0; i < loom_tensor_numel(a); i++)
    CHECK_NEAR(test_get(a, i), test_get(b, i), 1e-5, 1e-5);
}

static void compiled_equals_interpreted(loom_compile_options_t *o) {
  loom_value_t counter;
  loom_graph_t *g = mixed_graph(&counter);
  test_seed(7);
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){5, 4}, -2, 2);
  loom_tensor_t *want[2], *got[2];
  CHECK_OK(loom_interpret(g, 1, &x, 2, want));
  loom_executable_t *e;
  CHECK_OK(loom_compile(g, o, &e));
  loom_stats_t before = LOOM_STATS_INIT, after = LOOM_STATS_INIT;
  loom_stats_get(&before);
  for (int run = 0; run < 3; run++) {
    run_exe(e, 1, &x, 2, got);
    check_same(got[0], want[0]);
    check_same(got[1], want[1]);
    loom_tensor_destroy(got[0]);
    loom_tensor_destroy(got[1]);
  }
  loom_stats_get(&after);
  CHECK(after.compiles == before.compiles); /* runs never recompile */
  /* One interpreted run and three compiled runs each added one. */
  loom_tensor_t *state;
  CHECK_OK(loom_graph_param_tensor(g, counter, &state));
  CHECK_NEAR(test_get(state, 0), 4, 0, 0);
  loom_executable_destroy(e);
  loom_tensor_destroy(want[0]);
  loom_tensor_destroy(want[1]);
  loom_tensor_destroy(x);
  loom_graph_destroy(g);
}

static void defaults(void) { compiled_equals_interpreted(NULL); }

/* The executable keeps its graph: destroying the graph first leaves the
 * executables working (their parameter still counts runs, and the
 * results are the interpreter's), and the last executable frees it (ASan
 * finds a leak or a use after free otherwise). Both kinds: generated code
 * and the interpreter fallback (target "ref"). */
static void graph_destroyed_first(void) {
  loom_value_t counter;
  loom_graph_t *g = mixed_graph(&counter);
  test_seed(9);
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){5, 4}, -2, 2);
  loom_tensor_t *want[2], *got[2], *state;
  CHECK_OK(loom_interpret(g, 1, &x, 2, want));
  loom_compile_options_t ref;
  loom_compile_options_init(&ref);
  ref.target = "ref";
  loom_executable_t *e[2];
  CHECK_OK(loom_compile(g, NULL, &e[0]));
  CHECK_OK(loom_compile(g, &ref, &e[1]));
  CHECK_OK(loom_graph_param_tensor(g, counter, &state)); /* the graph's: it lives on */
  loom_graph_destroy(g);
  for (int k = 0; k < 2; k++) {
    run_exe(e[k], 1, &x, 2, got);
    check_same(got[0], want[0]);
    check_same(got[1], want[1]);
    loom_tensor_destroy(got[0]);
    loom_tensor_destroy(got[1]);
  }
  CHECK_NEAR(test_get(state, 0), 3, 0, 0); /* the interpreter's run and both executables' */
  loom_executable_destroy(e[0]);
  run_exe(e[1], 1, &x, 2, got);
  check_same(got[0], want[0]);
  loom_tensor_destroy(got[0]);
  loom_tensor_destroy(got[1]);
  loom_executable_destroy(e[1]);
  loom_tensor_destroy(want[0]);
  loom_tensor_destroy(want[1]);
  loom_tensor_destroy(x);
}

/* A borrowed parameter is the caller's memory: the interpreter's and the
 * executable's assigns land in it, and the caller's own writes between
 * runs are what the next run reads. */
static void borrowed_parameter(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[1] = {3};
  loom_tensor_t *mine = test_tensor(LOOM_F32, 1, shape, (double[]){1, 2, 3});
  loom_value_t p, x, sum, out;
  CHECK_OK(loom_graph_param_borrow(g, "w", mine, &p));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, (loom_dim_t[]){3}, &x));
  CHECK_OK(loom_add(g, p, x, &sum));
  CHECK_OK(loom_assign(g, p, sum));
  CHECK_OK(loom_mul(g, p, x, &out)); /* reads the value from before the run */
  CHECK_OK(loom_graph_output(g, out));
  loom_tensor_t *xt = test_tensor(LOOM_F32, 1, shape, (double[]){1, 1, 2});
  loom_tensor_t *y = NULL;
  CHECK_OK(loom_interpret(g, 1, &xt, 1, &y));
  CHECK_NEAR(test_get(mine, 2), 5, 0, 0);
  CHECK_NEAR(test_get(y, 2), 6, 0, 0);
  loom_tensor_destroy(y);
  loom_executable_t *e;
  CHECK_OK(loom_compile(g, NULL, &e));
  ((float *)loom_tensor_data(mine))[0] = 10; /* the caller's write */
  run_exe(e, 1, &xt, 1, &y);
  CHECK_NEAR(test_get(mine, 0), 11, 0, 0);
  CHECK_NEAR(test_get(y, 0), 10, 0, 0);
  CHECK_NEAR(test_get(mine, 2), 7, 0, 0);
  loom_executable_destroy(e);
  loom_tensor_destroy(y);
  /* Storage that is not contiguous is refused, naming the parameter. */
  loom_tensor_t *strided;
  float data[6] = {0};
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 1, shape, (int64_t[]){2}, data, &strided));
  loom_value_t q;
  CHECK_ERR(loom_graph_param_borrow(g, "v", strided, &q), LOOM_ERR_INVALID,
            "parameter 'v': borrowed storage must be contiguous");
  CHECK_ERR(loom_graph_param_borrow(g, "w2", NULL, &q), LOOM_ERR_INVALID, "storage");
  loom_tensor_destroy(strided);
  loom_graph_destroy(g);
  /* The graph is gone; the caller's tensor is still whole. */
  CHECK_NEAR(test_get(mine, 1), 4, 0, 0);
  loom_tensor_destroy(mine);
  loom_tensor_destroy(xt);
}

/* A chain longer than a group takes (FUSE_MAX_NODES), with a softmax every
 * 50 nodes (folds in the chain's groups), compiles into several generated
 * groups that give the interpreter's results. */
static void long_chain_compiles_in_pieces(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, v, scale, t;
  int64_t last[] = {-1};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){4, 64}, &x));
  loom_tensor_t *st = test_tensor(LOOM_F32, 0, NULL, (double[]){0.75});
  CHECK_OK(loom_graph_constant(g, st, &scale));
  loom_tensor_destroy(st);
  v = x;
  for (int i = 0; i < 600; i++) {
    loom_status_t s = i % 3 == 0 ? loom_tanh(g, v, &v)
                    : i % 3 == 1 ? loom_mul(g, v, scale, &v)
                                 : loom_add(g, v, x, &v);
    CHECK_OK(s);
    if (i % 50 != 49) continue;
    CHECK_OK(loom_max(g, v, 1, last, 1, &t));
    CHECK_OK(loom_sub(g, v, t, &v));
    CHECK_OK(loom_exp(g, v, &v));
    CHECK_OK(loom_sum(g, v, 1, last, 1, &t));
    CHECK_OK(loom_div(g, v, t, &v));
  }
  CHECK_OK(loom_graph_output(g, v));
  test_seed(11);
  loom_tensor_t *in = test_rand_tensor(LOOM_F32, 2, (int64_t[]){4, 64}, -2, 2);
  loom_tensor_t *want, *got;
  CHECK_OK(loom_interpret(g, 1, &in, 1, &want));
  loom_executable_t *e;
  CHECK_OK(loom_compile(g, NULL, &e));
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  CHECK_OK(loom_executable_info(e, &info));
  CHECK(!info.interpreted && info.n_reference == 0);
  CHECK(info.n_groups >= (info.n_nodes + FUSE_MAX_NODES - 1) / FUSE_MAX_NODES);
  run_exe(e, 1, &in, 1, &got);
  check_same(got, want);
  loom_tensor_destroy(got);
  loom_tensor_destroy(want);
  loom_tensor_destroy(in);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

static void fusion_off(void) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.fusion = 0;
  compiled_equals_interpreted(&o);
}

static void passes_off(void) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.passes = 0;
  compiled_equals_interpreted(&o);
}

static void two_threads(void) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.num_threads = 2;
  compiled_equals_interpreted(&o);
}

/* A missing C compiler: one warning, the same results. */
static void missing_compiler(void) {
  setenv("LOOM_CC", "/nonexistent/cc", 1);
  compiled_equals_interpreted(NULL);
  unsetenv("LOOM_CC");
}

/* Outputs that are inputs, parameters, or the same value twice. */
static void outputs_alias(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, p, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, (loom_dim_t[]){3}, &x));
  loom_tensor_t *pt = test_tensor(LOOM_F32, 1, (int64_t[]){3}, (double[]){7, 8, 9});
  CHECK_OK(loom_graph_param(g, "p", LOOM_F32, 1, (int64_t[]){3}, pt, &p));
  CHECK_OK(loom_neg(g, x, &y));
  CHECK_OK(loom_graph_output(g, x));
  CHECK_OK(loom_graph_output(g, p));
  CHECK_OK(loom_graph_output(g, y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in = test_tensor(LOOM_F32, 1, (int64_t[]){3}, (double[]){1, 2, 3});
  loom_executable_t *e;
  CHECK_OK(loom_compile(g, NULL, &e));
  loom_tensor_t *out[4];
  run_exe(e, 1, &in, 4, out);
  CHECK_TENSOR(out[0], ((double[]){1, 2, 3}), 3, 0, 0);
  CHECK_TENSOR(out[1], ((double[]){7, 8, 9}), 3, 0, 0);
  CHECK_TENSOR(out[2], ((double[]){-1, -2, -3}), 3, 0, 0);
  CHECK_TENSOR(out[3], ((double[]){-1, -2, -3}), 3, 0, 0);
  for (int i = 0; i < 4; i++) loom_tensor_destroy(out[i]);
  loom_executable_destroy(e);
  loom_tensor_destroy(in);
  loom_tensor_destroy(pt);
  loom_graph_destroy(g);
}

/* A symbolic batch specialized at compile time; a strided input. */
static void symbols_and_strides(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  loom_value_t x, y;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){n, 2}, &x));
  CHECK_OK(loom_exp(g, x, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_executable_t *e;
  CHECK_ERR(loom_compile(g, NULL, &e), LOOM_ERR_INVALID, "symbol 'n'");
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  const char *names[] = {"n"};
  int64_t values[] = {3};
  o.n_symbols = 1;
  o.symbol_names = names;
  o.symbol_values = values;
  CHECK_OK(loom_compile(g, &o, &e));
  /* The transpose of a row-major (2, 3) array, as a strided (3, 2) view. */
  float data[6] = {0, 1, 2, 3, 4, 5};
  loom_tensor_t *view;
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, (int64_t[]){3, 2}, (int64_t[]){1, 3}, data, &view));
  loom_tensor_t *out;
  run_exe(e, 1, &view, 1, &out);
  double want[6] = {exp(0), exp(3), exp(1), exp(4), exp(2), exp(5)};
  CHECK_TENSOR(out, want, 6, 1e-6, 1e-6);
  loom_tensor_destroy(out);
  loom_tensor_destroy(view);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

static void guard_errors(void) {
  loom_value_t counter;
  loom_graph_t *g = mixed_graph(&counter);
  loom_executable_t *e;
  CHECK_OK(loom_compile(g, NULL, &e));
  loom_tensor_t *bad = test_tensor(LOOM_F32, 2, (int64_t[]){4, 4}, (double[16]){0});
  loom_tensor_t *bad_dtype = test_tensor(LOOM_F64, 2, (int64_t[]){5, 4}, (double[20]){0});
  loom_tensor_t *outs[2];
  CHECK_OK(loom_executable_new_output(e, 0, &outs[0]));
  CHECK_OK(loom_executable_new_output(e, 1, &outs[1]));
  CHECK_ERR(loom_executable_run(e, 1, &bad, 2, outs), LOOM_ERR_BINDING, "(4, 4)");
  CHECK_ERR(loom_executable_run(e, 1, &bad_dtype, 2, outs), LOOM_ERR_BINDING, "f64");
  CHECK_ERR(loom_executable_run(e, 0, NULL, 2, outs), LOOM_ERR_BINDING, "inputs");
  CHECK_ERR(loom_executable_run(e, 1, &bad, 1, outs), LOOM_ERR_BINDING, "outputs");
  loom_tensor_t *swapped[2] = {outs[1], outs[0]};
  loom_tensor_t *x = test_tensor(LOOM_F32, 2, (int64_t[]){5, 4}, (double[20]){0});
  CHECK_ERR(loom_executable_run(e, 1, &x, 2, swapped), LOOM_ERR_BINDING, "output 0");
  CHECK_ERR(loom_executable_run(NULL, 1, &x, 2, outs), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_compile(NULL, NULL, &e), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_executable_new_output(e, 2, &x), LOOM_ERR_INVALID, "output 2");
  loom_tensor_destroy(x);
  loom_tensor_destroy(bad);
  loom_tensor_destroy(bad_dtype);
  loom_tensor_destroy(outs[0]);
  loom_tensor_destroy(outs[1]);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* nonzero's count is data-dependent: the executable interprets. */
static void data_dependent_falls_back(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, nz, c, s;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, (loom_dim_t[]){4}, &x));
  CHECK_OK(loom_nonzero(g, x, &nz));
  CHECK_OK(loom_cast(g, nz, LOOM_F32, &c));
  CHECK_OK(loom_sum(g, c, 0, NULL, 0, &s));
  CHECK_OK(loom_graph_output(g, s));
  loom_executable_t *e;
  CHECK_OK(loom_compile(g, NULL, &e));
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  CHECK_OK(loom_executable_info(e, &info));
  CHECK(info.interpreted == 1);
  loom_tensor_t *in = test_tensor(LOOM_F32, 1, (int64_t[]){4}, (double[]){0, 5, 0, 6});
  loom_tensor_t *out;
  run_exe(e, 1, &in, 1, &out);
  CHECK_TENSOR(out, ((double[]){4}), 1, 0, 0); /* indices 1 and 3 */
  loom_tensor_destroy(out);
  loom_tensor_destroy(in);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* The contractions' flops, against hand counts: a matmul with trans_a,
 * a conv2d, a conv_transpose2d and a conv2d_weight_grad; the elementwise
 * op counts nothing; a symbol takes its compiled value. */
static void flops_counted(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_value_t a, b, mm, e, x, w, y, wt, yt, dy, dw;
  /* a (3, n) read transposed: (n, 3) @ (3, 5), depth 3 */
  CHECK_OK(loom_graph_input(g, "a", LOOM_F32, 2, (loom_dim_t[]){3, n}, &a));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F32, 2, (loom_dim_t[]){3, 5}, &b));
  CHECK_OK(loom_matmul(g, a, b, 1, 0, &mm));
  CHECK_OK(loom_exp(g, mm, &e));
  CHECK_OK(loom_graph_output(g, e));
  /* x (1, 2, 5, 5), w (3, 2, 3, 3), no padding: y (1, 3, 3, 3), depth 18 */
  loom_conv_params_t p = {.stride = {1, 1}, .dilation = {1, 1}, .groups = 1};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, (loom_dim_t[]){1, 2, 5, 5}, &x));
  CHECK_OK(loom_graph_input(g, "w", LOOM_F32, 4, (loom_dim_t[]){3, 2, 3, 3}, &w));
  CHECK_OK(loom_conv2d(g, x, w, 0, x, &p, &y));
  CHECK_OK(loom_graph_output(g, y));
  /* y (1, 3, 3, 3) through wt (3, 2, 2, 2): 27 inputs, 8 products each */
  CHECK_OK(loom_graph_input(g, "wt", LOOM_F32, 4, (loom_dim_t[]){3, 2, 2, 2}, &wt));
  CHECK_OK(loom_conv_transpose2d(g, y, wt, 0, y, &p, &yt));
  CHECK_OK(loom_graph_output(g, yt));
  /* dw (3, 2, 3, 3) summed over 1 image x 9 positions */
  CHECK_OK(loom_graph_input(g, "dy", LOOM_F32, 4, (loom_dim_t[]){1, 3, 3, 3}, &dy));
  CHECK_OK(loom_conv2d_weight_grad(g, x, dy, (int64_t[]){3, 3}, &p, &dw));
  CHECK_OK(loom_graph_output(g, dw));
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  const char *names[] = {"n"};
  int64_t values[] = {4};
  o.n_symbols = 1;
  o.symbol_names = names;
  o.symbol_values = values;
  loom_executable_t *ex;
  CHECK_OK(loom_compile(g, &o, &ex));
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  CHECK_OK(loom_executable_info(ex, &info));
  double want = 2.0 * (4 * 5 * 3 + 27 * 18 + 27 * 8 + 54 * 9);
  CHECK(info.flops == want);
  char *text = NULL, line[64];
  CHECK_OK(loom_executable_explain(ex, &text));
  snprintf(line, sizeof line, "\n  %.0f flops a run in contractions\n", want);
  CHECK(text && strstr(text, line));
  loom_free(text);
  loom_executable_destroy(ex);
  /* An op with no inputs is no contraction: nothing to read. */
  loom_value_t r;
  CHECK_OK(loom_arange(g, 0, 4, 1, LOOM_F32, &r));
  CHECK(ir_node_flops(g, &g->nodes[g->n_nodes - 1], NULL) == 0);
  loom_graph_destroy(g);
}

/* Layout ops that the memory plan does without copies (compiler/
 * layout_place.h): a concat whose operands are written into its result by
 * their producers, slices of a buffer read where they lie. Each graph
 * against the interpreter, twice (the second run reads what the first
 * left in the arena), with how many ops went in place: the count the
 * compiler logs, so that a graph meant to keep its copies (an operand
 * read after the concat, the same operand in two concats, a graph input
 * twice, a concat across rows, a slice with a step) shows it did. */
static int run_layout_graph(loom_graph_t *g, int n_in, loom_tensor_t **in, int n_out) {
  loom_tensor_t *want[8], *got[8];
  CHECK_OK(loom_interpret(g, n_in, in, n_out, want));
  loom_compile_options_t o;
  CHECK_OK(loom_compile_options_init(&o));
  o.num_threads = 2;
  loom_executable_t *e;
  test_capture_begin("memory");
  loom_status_t s = loom_compile(g, &o, &e);
  char *log = test_capture_end();
  CHECK_OK(s);
  const char *at = strstr(log, "concats and slices in place");
  int placed = 0;
  if (at) {
    while (at > log && at[-1] == ' ') at--;
    while (at > log && at[-1] >= '0' && at[-1] <= '9') at--;
    placed = atoi(at);
  }
  free(log);
  for (int run = 0; run < 2; run++) {
    run_exe(e, n_in, in, n_out, got);
    for (int i = 0; i < n_out; i++) {
      check_same(got[i], want[i]);
      loom_tensor_destroy(got[i]);
    }
  }
  for (int i = 0; i < n_out; i++) loom_tensor_destroy(want[i]);
  loom_executable_destroy(e);
  return placed;
}

/* Inputs x (8, 3), w (3, 5), y (4, 6) and three producers: a = exp(x),
 * c = x @ w, r = y summed over its rows. */
static loom_graph_t *layout_producers(loom_value_t *x, loom_value_t *a, loom_value_t *c,
                                      loom_value_t *r) {
  loom_graph_t *g;
  loom_value_t w, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){8, 3}, x));
  CHECK_OK(loom_graph_input(g, "w", LOOM_F32, 2, (loom_dim_t[]){3, 5}, &w));
  CHECK_OK(loom_graph_input(g, "y", LOOM_F32, 2, (loom_dim_t[]){4, 6}, &y));
  CHECK_OK(loom_exp(g, *x, a));
  CHECK_OK(loom_matmul(g, *x, w, 0, 0, c));
  CHECK_OK(loom_sum(g, y, 1, (int64_t[]){1}, 0, r));
  return g;
}

/* A bucket as data parallelism makes one: the producers flattened into a
 * concat, a pass over the bucket, then slices of it read by two
 * consumers each. */
static void layouts_in_place(void) {
  loom_value_t x, a, c, r, fa, fc, cat, three, t, p0, p1, p2, q0, q1, o0, o1, o2;
  loom_graph_t *g = layout_producers(&x, &a, &c, &r);
  CHECK_OK(loom_reshape(g, a, 1, (loom_dim_t[]){24}, &fa));
  CHECK_OK(loom_reshape(g, c, 1, (loom_dim_t[]){40}, &fc));
  CHECK_OK(loom_concat(g, 3, (loom_value_t[]){fa, r, fc}, 0, &cat));
  three = test_constant(g, LOOM_F32, 0, NULL, (double[]){3});
  CHECK_OK(loom_mul(g, cat, three, &t));
  int64_t axis = 0, step = 1;
  CHECK_OK(loom_slice(g, t, 1, (int64_t[]){0}, (int64_t[]){24}, &axis, &step, &p0));
  CHECK_OK(loom_slice(g, t, 1, (int64_t[]){24}, (int64_t[]){28}, &axis, &step, &p1));
  CHECK_OK(loom_slice(g, t, 1, (int64_t[]){28}, (int64_t[]){68}, &axis, &step, &p2));
  CHECK_OK(loom_reshape(g, p0, 2, (loom_dim_t[]){8, 3}, &q0));
  CHECK_OK(loom_reshape(g, p2, 2, (loom_dim_t[]){8, 5}, &q1));
  CHECK_OK(loom_sub(g, q0, x, &o0));
  CHECK_OK(loom_mul(g, p1, three, &o1));
  CHECK_OK(loom_matmul(g, x, q1, 1, 0, &o2)); /* (3, 5): reads the slice as a matrix */
  CHECK_OK(loom_graph_output(g, o0));
  CHECK_OK(loom_graph_output(g, o1));
  CHECK_OK(loom_graph_output(g, o2));
  test_seed(11);
  loom_tensor_t *in[3] = {test_rand_tensor(LOOM_F32, 2, (int64_t[]){8, 3}, -1, 1),
                          test_rand_tensor(LOOM_F32, 2, (int64_t[]){3, 5}, -1, 1),
                          test_rand_tensor(LOOM_F32, 2, (int64_t[]){4, 6}, -1, 1)};
  /* The concat and two slices; the third is a view the matmul reads. */
  CHECK(run_layout_graph(g, 3, in, 3) == 3);
  loom_graph_destroy(g);

  /* Concats that must copy: an operand read after the concat (through
   * its result), one value twice that another concat reads too, a concat
   * across rows, graph inputs; a slice with a step. The one dense slice
   * goes in place. */
  loom_value_t twice, rows, cat2, s0, o3, o4, o5, half, two;
  g = layout_producers(&x, &a, &c, &r);
  CHECK_OK(loom_reshape(g, a, 1, (loom_dim_t[]){24}, &fa));
  CHECK_OK(loom_concat(g, 2, (loom_value_t[]){fa, r}, 0, &cat));
  three = test_constant(g, LOOM_F32, 0, NULL, (double[]){3});
  half = test_constant(g, LOOM_F32, 0, NULL, (double[]){0.5});
  two = test_constant(g, LOOM_F32, 0, NULL, (double[]){2});
  CHECK_OK(loom_mul(g, cat, three, &t));
  CHECK_OK(loom_slice(g, t, 1, (int64_t[]){0}, (int64_t[]){24}, &axis, &step, &p0));
  CHECK_OK(loom_reshape(g, p0, 2, (loom_dim_t[]){8, 3}, &q0));
  CHECK_OK(loom_add(g, q0, a, &o0)); /* a, read after the concat */
  CHECK_OK(loom_concat(g, 2, (loom_value_t[]){r, r}, 0, &twice));
  CHECK_OK(loom_mul(g, twice, half, &o1));
  CHECK_OK(loom_concat(g, 2, (loom_value_t[]){a, c}, 1, &rows));
  CHECK_OK(loom_mul(g, rows, two, &o2));
  CHECK_OK(loom_concat(g, 2, (loom_value_t[]){x, x}, 0, &cat2));
  CHECK_OK(loom_mul(g, cat2, two, &o3));
  step = 2;
  CHECK_OK(loom_slice(g, t, 1, (int64_t[]){1}, (int64_t[]){28}, &axis, &step, &s0));
  CHECK_OK(loom_mul(g, s0, half, &o4));
  CHECK_OK(loom_mul(g, c, half, &o5));
  loom_value_t outs[6] = {o0, o1, o2, o3, o4, o5};
  for (int i = 0; i < 6; i++) CHECK_OK(loom_graph_output(g, outs[i]));
  CHECK(run_layout_graph(g, 3, in, 6) == 1);
  loom_graph_destroy(g);

  /* Two sums of one value, which CSE makes one (as it does the biases'
   * gradients of two batch norms after one residual add in a bucket): the
   * concat still goes in place, the repeat copied into its place
   * (pass_concat_distinct). */
  loom_value_t y, r2;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){8, 3}, &x));
  CHECK_OK(loom_graph_input(g, "y", LOOM_F32, 2, (loom_dim_t[]){4, 6}, &y));
  CHECK_OK(loom_exp(g, x, &a));
  CHECK_OK(loom_sum(g, y, 1, (int64_t[]){1}, 0, &r));
  CHECK_OK(loom_sum(g, y, 1, (int64_t[]){1}, 0, &r2));
  CHECK_OK(loom_reshape(g, a, 1, (loom_dim_t[]){24}, &fa));
  CHECK_OK(loom_concat(g, 3, (loom_value_t[]){r, fa, r2}, 0, &cat));
  three = test_constant(g, LOOM_F32, 0, NULL, (double[]){3});
  CHECK_OK(loom_mul(g, cat, three, &t));
  CHECK_OK(loom_graph_output(g, t));
  CHECK(run_layout_graph(g, 2, (loom_tensor_t *[]){in[0], in[2]}, 1) == 1);
  loom_graph_destroy(g);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(in[i]);
}

int main(void) {
  char dir[] = "/tmp/loom_compile_XXXXXX";
  if (mkdtemp(dir)) setenv("LOOM_CACHE_DIR", dir, 1);
  TEST_RUN(defaults);
  TEST_RUN(graph_destroyed_first);
  TEST_RUN(borrowed_parameter);
  TEST_RUN(long_chain_compiles_in_pieces);
  TEST_RUN(fusion_off);
  TEST_RUN(passes_off);
  TEST_RUN(two_threads);
  TEST_RUN(missing_compiler);
  TEST_RUN(outputs_alias);
  TEST_RUN(symbols_and_strides);
  TEST_RUN(guard_errors);
  TEST_RUN(data_dependent_falls_back);
  TEST_RUN(flops_counted);
  TEST_RUN(layouts_in_place);
  return test_summary();
}
