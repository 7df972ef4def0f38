/* Groups whose generated code is the same up to where their values are
 * stored share one function of the module (src/backend/cpu/codegen/c_dedup.c): every
 * layer of a stack of equal layers, every piece of a long chain. Each
 * test counts the functions (loom_executable_info_t.n_kernels and the
 * definitions in the generated C) and checks the results against the
 * interpreter, since a step that ran its function with another group's
 * slots, packed weights or node numbers would read or write the wrong
 * storage. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/ir.h"
#include "loom/ops.h"

/* Definitions of group functions in e's generated C. */
static int functions_in_source(const loom_executable_t *e) {
  char *text = NULL;
  CHECK_OK(loom_executable_explain(e, &text));
  int n = 0;
  const char *c = text ? strstr(text, "== generated C") : NULL;
  for (; c && (c = strstr(c, "\nvoid loom_group_")); c++) n++;
  loom_free(text);
  return n;
}

/* Compiles g (options o, or the defaults), runs it and the interpreter on
 * in, and compares every output; the executable, for counting. */
static loom_executable_t *compile_and_compare(loom_graph_t *g, const loom_compile_options_t *o,
                                              int n_in, loom_tensor_t *const *in) {
  int n_out = (int)g->n_outputs;
  loom_tensor_t *want[4] = {0}, *got[4] = {0};
  loom_executable_t *e = NULL;
  CHECK(n_out <= 4);
  CHECK_OK(loom_interpret(g, n_in, in, n_out, want));
  CHECK_OK(loom_compile(g, o, &e));
  if (!e) return NULL;
  test_check_no_lost_code(e);
  for (int i = 0; i < n_out; i++) CHECK_OK(loom_executable_new_output(e, i, &got[i]));
  CHECK_OK(loom_executable_run(e, n_in, in, n_out, got));
  for (int i = 0; i < n_out; i++) {
    if (!want[i] || !got[i]) continue;
    int64_t n = loom_tensor_numel(want[i]);
    double *w = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t j = 0; j < n; j++) w[j] = test_get(want[i], j);
    CHECK_TENSOR(got[i], w, n, 1e-5, 1e-4);
    free(w);
    loom_tensor_destroy(want[i]);
    loom_tensor_destroy(got[i]);
  }
  return e;
}

/* x (16, 32) through `layers` layers relu(h @ w + b) of widths[l] outputs
 * each, every weight and bias a parameter of its own values; outputs the
 * last h and its sum. */
static loom_graph_t *dense_stack(int layers, const int64_t *widths) {
  loom_graph_t *g;
  loom_value_t h, s;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){16, 32}, &h));
  int64_t in = 32;
  for (int l = 0; l < layers; l++) {
    int64_t ws[2] = {in, widths[l]}, bs[1] = {widths[l]};
    loom_tensor_t *wt = test_rand_tensor(LOOM_F32, 2, ws, -0.3, 0.3);
    loom_tensor_t *bt = test_rand_tensor(LOOM_F32, 1, bs, -0.1, 0.1);
    char wn[16], bn[16];
    snprintf(wn, sizeof wn, "w%d", l);
    snprintf(bn, sizeof bn, "b%d", l);
    loom_value_t w, b, xw, a;
    CHECK_OK(loom_graph_param(g, wn, LOOM_F32, 2, ws, wt, &w));
    CHECK_OK(loom_graph_param(g, bn, LOOM_F32, 1, bs, bt, &b));
    CHECK_OK(loom_matmul(g, h, w, 0, 0, &xw));
    CHECK_OK(loom_add(g, xw, b, &a));
    CHECK_OK(loom_relu(g, a, &h));
    loom_tensor_destroy(wt);
    loom_tensor_destroy(bt);
    in = widths[l];
  }
  CHECK_OK(loom_sum(g, h, 0, NULL, 0, &s));
  CHECK_OK(loom_graph_output(g, h));
  CHECK_OK(loom_graph_output(g, s));
  return g;
}

/* Four equal layers: one function for the four matmul groups (each with
 * its bias and relu), one for the sum; and each layer's own weights. */
/* e's info; failing to get it fails the test instead of skipping the
 * checks that read it. */
static bool info_of(loom_executable_t *e, loom_executable_info_t *info) {
  loom_status_t s = loom_executable_info(e, info);
  CHECK_OK(s);
  return s == LOOM_OK;
}

static void equal_layers_share_a_function(void) {
  test_seed(15);
  loom_graph_t *g = dense_stack(4, (int64_t[]){32, 32, 32, 32});
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){16, 32}, -1, 1);
  loom_executable_t *e = compile_and_compare(g, NULL, 1, &x);
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  if (e && info_of(e, &info) && !info.interpreted &&
      info.n_generated > 0) {
    CHECK(info.n_generated == 5);
    CHECK(info.n_kernels == 2);
    CHECK(functions_in_source(e) == info.n_kernels);
  }
  loom_executable_destroy(e);
  loom_tensor_destroy(x);
  loom_graph_destroy(g);
}

/* Layers of other widths have other code: no sharing. */
static void different_layers_do_not_share(void) {
  test_seed(16);
  loom_graph_t *g = dense_stack(3, (int64_t[]){32, 24, 16});
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){16, 32}, -1, 1);
  loom_executable_t *e = compile_and_compare(g, NULL, 1, &x);
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  if (e && info_of(e, &info) && info.n_generated > 0) {
    CHECK(info.n_kernels == info.n_generated);
    CHECK(functions_in_source(e) == info.n_kernels);
  }
  loom_executable_destroy(e);
  loom_tensor_destroy(x);
  loom_graph_destroy(g);
}

/* Bytes of e's generated C. */
static int64_t source_bytes(const loom_executable_t *e) {
  char *text = NULL;
  CHECK_OK(loom_executable_explain(e, &text));
  const char *c = text ? strstr(text, "== generated C") : NULL;
  int64_t n = c ? (int64_t)strlen(c) : 0;
  loom_free(text);
  return n;
}

/* A module of many different functions compiled cold with LOOM_CC_JOBS=4
 * is cut into (here two or more) units compiled at once (src/backend/cpu/parts.c); the
 * executable must compute what the interpreter does. */
static void module_in_units_runs_as_one(void) {
  test_seed(18);
  char dir[] = "/tmp/loom_dedup_units_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  const char *old_dir = getenv("LOOM_CACHE_DIR");
  char *saved = old_dir ? strdup(old_dir) : NULL;
  setenv("LOOM_CACHE_DIR", dir, 1);
  setenv("LOOM_CC_JOBS", "4", 1);
  int64_t widths[24];
  for (int l = 0; l < 24; l++) widths[l] = 8 + l;
  loom_graph_t *g = dense_stack(24, widths);
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){16, 32}, -1, 1);
  loom_stats_t before = LOOM_STATS_INIT, after = LOOM_STATS_INIT;
  CHECK_OK(loom_stats_get(&before));
  loom_executable_t *e = compile_and_compare(g, NULL, 1, &x);
  CHECK_OK(loom_stats_get(&after));
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  if (e && info_of(e, &info) && !info.interpreted &&
      info.n_generated > 0) {
    CHECK(after.cc_invocations == before.cc_invocations + 1); /* built, not found */
    CHECK(info.n_kernels > 24);
    /* Over the prelude (about 14 KB) and two units' 16 KB minimum. */
    CHECK(source_bytes(e) > 50000);
  }
  loom_executable_destroy(e);
  loom_tensor_destroy(x);
  loom_graph_destroy(g);
  unsetenv("LOOM_CC_JOBS");
  if (saved) setenv("LOOM_CACHE_DIR", saved, 1);
  else unsetenv("LOOM_CACHE_DIR");
  free(saved);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
}

/* Frozen weights are packed per slot at compile time; the shared GEMM
 * call must find each layer's own packing through its step's map. */
static void frozen_layers_find_their_packed_weights(void) {
  test_seed(17);
  loom_graph_t *g = dense_stack(4, (int64_t[]){32, 32, 32, 32});
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){16, 32}, -1, 1);
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.freeze_params = 1;
  loom_executable_t *e = compile_and_compare(g, &o, 1, &x);
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  if (e && info_of(e, &info) && info.n_generated > 0)
    CHECK(info.n_kernels < info.n_generated);
  loom_executable_destroy(e);
  loom_tensor_destroy(x);
  loom_graph_destroy(g);
}

/* A chain of 1,100 neg and tanh nodes is cut into fused groups of a
 * bounded size, all alike but the last: their functions are one. */
static void long_chain_shares_its_pieces(void) {
  test_seed(18);
  loom_graph_t *g;
  loom_value_t y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){4, 64}, &y));
  for (int i = 0; i < 1100; i++) CHECK_OK(i % 2 ? loom_tanh(g, y, &y) : loom_neg(g, y, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){4, 64}, -2, 2);
  loom_executable_t *e = compile_and_compare(g, NULL, 1, &x);
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  if (e && info_of(e, &info) && info.n_generated > 0) {
    CHECK(info.n_generated >= 3);
    CHECK(info.n_kernels <= 2);
    CHECK(functions_in_source(e) == info.n_kernels);
  }
  loom_executable_destroy(e);
  loom_tensor_destroy(x);
  loom_graph_destroy(g);
}

/* Two one_hot nodes alike but for their origin (one built as
 * cross_entropy builds its own, src/ir/origin.c) share a function; an
 * index out of range names the node of the step that met it, through
 * the position the code reports and the step's group. */
static void index_errors_name_the_steps_own_node(void) {
  for (int bad = 0; bad < 2; bad++) {
    loom_graph_t *g;
    loom_value_t a, b, ha, hb;
    CHECK_OK(loom_graph_create(&g));
    CHECK_OK(loom_graph_input(g, "a", LOOM_I64, 1, (loom_dim_t[]){6}, &a));
    CHECK_OK(loom_graph_input(g, "b", LOOM_I64, 1, (loom_dim_t[]){6}, &b));
    ir_attrs_t attrs = {0};
    ir_attrs_int(&attrs, "depth", 5);
    ir_attrs_int(&attrs, "dtype", LOOM_F32);
    ir_attrs_int(&attrs, IR_ORIGIN_ATTR, IR_ORIGIN_CROSS_ENTROPY_LABELS);
    CHECK_OK(ir_build1(g, IR_OP_ONE_HOT, 1, &a, &attrs, &ha));
    CHECK_OK(loom_one_hot(g, b, 5, LOOM_F32, &hb));
    CHECK_OK(loom_graph_output(g, ha));
    CHECK_OK(loom_graph_output(g, hb));
    loom_tensor_t *in[2], *out[2] = {0};
    in[0] = test_tensor(LOOM_I64, 1, (int64_t[]){6}, (double[]){0, 1, 2, 3, 4, bad ? 0 : 9});
    in[1] = test_tensor(LOOM_I64, 1, (int64_t[]){6}, (double[]){4, 3, bad ? 7 : 2, 1, 0, 0});
    loom_executable_t *e = NULL;
    CHECK_OK(loom_compile(g, NULL, &e));
    loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
    if (e && info_of(e, &info) && info.n_generated == 2)
      CHECK(info.n_kernels == 1);
    for (int i = 0; e && i < 2; i++) CHECK_OK(loom_executable_new_output(e, i, &out[i]));
    if (e && bad == 0)
      CHECK_ERR(loom_executable_run(e, 2, in, 2, out), LOOM_ERR_VALUE,
                "loom_cross_entropy: label 9 (at position 5)");
    if (e && bad == 1)
      CHECK_ERR(loom_executable_run(e, 2, in, 2, out), LOOM_ERR_VALUE,
                "one_hot: index 7 (at position 2)");
    loom_executable_destroy(e);
    for (int i = 0; i < 2; i++) {
      loom_tensor_destroy(in[i]);
      loom_tensor_destroy(out[i]);
    }
    loom_graph_destroy(g);
  }
}

int main(void) {
  TEST_RUN(equal_layers_share_a_function);
  TEST_RUN(different_layers_do_not_share);
  TEST_RUN(module_in_units_runs_as_one);
  TEST_RUN(frozen_layers_find_their_packed_weights);
  TEST_RUN(long_chain_shares_its_pieces);
  TEST_RUN(index_errors_name_the_steps_own_node);
  return test_summary();
}
