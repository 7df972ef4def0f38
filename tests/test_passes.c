/* The rewriter and the pass pipeline. Each pass is checked twice: the
 * rewritten graph has the expected nodes, and it computes what the
 * original graph computes in the interpreter (the reference kernels). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "harness.h"
#include "ir/ir.h"
#include "ir/rewrite.h"
#include "passes/passes.h"

/* ---- Helpers --------------------------------------------------------------- */

static int count_op(const loom_graph_t *g, ir_op_t op) {
  int n = 0;
  for (int64_t i = 0; i < g->n_nodes; i++) n += g->nodes[i].op == op;
  return n;
}

/* The ops of g in order, as "max sub exp sum div". */
static const char *op_list(const loom_graph_t *g, char *buf, size_t size) {
  buf[0] = '\0';
  for (int64_t i = 0; i < g->n_nodes; i++) {
    size_t used = strlen(buf);
    snprintf(buf + used, size - used, "%s%s", i ? " " : "", ir_ops[g->nodes[i].op].name);
  }
  return buf;
}

#define CHECK_OPS(g, want)                                                 \
  do {                                                                     \
    char ops_[512];                                                        \
    op_list((g), ops_, sizeof ops_);                                       \
    CHECK(strcmp(ops_, (want)) == 0);                                      \
    if (strcmp(ops_, (want))) printf("  ops: %s\n  want: %s\n", ops_, (want)); \
  } while (0)

/* Interprets a and b on the same inputs; every output must agree. */
static void check_same(loom_graph_t *a, loom_graph_t *b, int n_in,
                       loom_tensor_t *const *in, double atol, double rtol) {
  int n_out = loom_graph_num_outputs(a);
  CHECK(n_out == loom_graph_num_outputs(b));
  loom_tensor_t *ya[8] = {0}, *yb[8] = {0};
  CHECK_OK(loom_interpret(a, n_in, in, n_out, ya));
  CHECK_OK(loom_interpret(b, n_in, in, n_out, yb));
  for (int k = 0; k < n_out; k++) {
    if (!ya[k] || !yb[k]) continue;
    int64_t n = loom_tensor_numel(ya[k]);
    CHECK(n == loom_tensor_numel(yb[k]));
    CHECK(loom_tensor_dtype(ya[k]) == loom_tensor_dtype(yb[k]));
    CHECK(loom_tensor_rank(ya[k]) == loom_tensor_rank(yb[k]));
    double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) want[i] = test_get(ya[k], i);
    CHECK_TENSOR(yb[k], want, n, atol, rtol);
    free(want);
  }
  for (int k = 0; k < n_out; k++) {
    loom_tensor_destroy(ya[k]);
    loom_tensor_destroy(yb[k]);
  }
}

static loom_value_t input(loom_graph_t *g, const char *name, loom_dtype_t dt,
                          int rank, const int64_t *dims) {
  loom_value_t v = {-1};
  CHECK_OK(loom_graph_input(g, name, dt, rank, dims, &v));
  return v;
}

/* Runs pass on g into *out and checks that it agrees with g on in. */
static loom_graph_t *run_pass(pass_fn pass, loom_graph_t *g, int n_in,
                              loom_tensor_t *const *in, double rtol) {
  loom_graph_t *h = NULL;
  CHECK_OK(pass(g, &h));
  if (h) check_same(g, h, n_in, in, rtol, rtol);
  return h;
}

/* ---- The rewriter ---------------------------------------------------------- */

/* A clone keeps symbols, inputs (names, types, order), parameters
 * (the same storage) and computes the same thing. */
static void clone_keeps_interface(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_value_t x = input(g, "x", LOOM_F32, 2, (int64_t[]){n, 3});
  loom_value_t y = input(g, "y", LOOM_F32, 1, (int64_t[]){3});
  loom_value_t w, c, t, out;
  loom_tensor_t *winit = test_tensor(LOOM_F32, 1, (int64_t[]){3}, (double[]){1, 2, 3});
  CHECK_OK(loom_graph_param(g, "w", LOOM_F32, 1, (int64_t[]){3}, winit, &w));
  c = test_constant(g, LOOM_F32, 0, NULL, (double[]){0.5});
  CHECK_OK(loom_mul(g, x, w, &t));
  CHECK_OK(loom_add(g, t, y, &t));
  CHECK_OK(loom_mul(g, t, c, &out));
  CHECK_OK(loom_graph_output(g, out));
  loom_graph_t *h = NULL;
  CHECK_OK(ir_graph_clone(g, &h));
  CHECK(h && h->n_inputs == 2 && h->n_params == 1 && h->n_symbols == 1);
  CHECK(h && h->n_nodes == 3);
  for (int i = 0; h && i < 2; i++) {
    CHECK(strcmp(h->values[h->inputs[i]].name, g->values[g->inputs[i]].name) == 0);
    CHECK(ir_type_equal(&h->values[h->inputs[i]].type, &g->values[g->inputs[i]].type));
  }
  if (h) {
    const ir_value_t *p = &h->values[h->params[0]];
    CHECK(p->borrowed && p->data == g->values[w.id].data);
    CHECK(strcmp(p->name, "w") == 0);
  }
  loom_tensor_t *in[2] = {test_rand_tensor(LOOM_F32, 2, (int64_t[]){4, 3}, -1, 1),
                          test_rand_tensor(LOOM_F32, 1, (int64_t[]){3}, -1, 1)};
  if (h) check_same(g, h, 2, in, 0, 0);
  /* A transposed view binds the same as its contiguous copy. */
  float data[12];
  for (int i = 0; i < 12; i++) data[i] = (float)test_get(in[0], (i % 4) * 3 + i / 4);
  loom_tensor_t *view;
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, (int64_t[]){4, 3}, (int64_t[]){1, 4}, data, &view));
  loom_tensor_t *vin[2] = {view, in[1]};
  if (h) check_same(g, h, 2, vin, 0, 0);
  loom_tensor_t *yv = NULL, *yc = NULL;
  if (h) {
    yv = test_run1(h, 2, vin);
    yc = test_run1(h, 2, in);
    double want[12];
    for (int i = 0; yc && i < 12; i++) want[i] = test_get(yc, i);
    if (yv && yc) CHECK_TENSOR(yv, want, 12, 0, 0);
  }
  loom_tensor_destroy(yv);
  loom_tensor_destroy(yc);
  loom_tensor_destroy(view);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_tensor_destroy(winit);
  loom_graph_destroy(h);
  loom_graph_destroy(g);
}

/* An assign in a rewritten graph updates the original's parameter. */
static void clone_shares_parameters(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t c, one, next;
  CHECK_OK(loom_graph_param(g, "count", LOOM_I64, 1, (int64_t[]){1}, NULL, &c));
  one = test_constant(g, LOOM_I64, 1, (int64_t[]){1}, (double[]){1});
  CHECK_OK(loom_add(g, c, one, &next));
  CHECK_OK(loom_assign(g, c, next));
  CHECK_OK(loom_graph_output(g, next));
  pass_options_t o;
  pass_options_init(&o);
  loom_graph_t *h = NULL;
  CHECK_OK(pass_pipeline(g, &o, &h));
  loom_tensor_t *state;
  CHECK_OK(loom_graph_param_tensor(g, c, &state));
  for (int run = 1; h && run <= 3; run++) {
    loom_tensor_t *y = NULL;
    CHECK_OK(loom_interpret(h, 0, NULL, 1, &y));
    CHECK(y && test_get(y, 0) == run);
    CHECK(test_get(state, 0) == run);
    loom_tensor_destroy(y);
  }
  loom_graph_destroy(h);
  loom_graph_destroy(g);
}

/* A pass that forgets an output is an internal error, not a bad graph. */
static void unmapped_output_fails(void) {
  loom_graph_t *g, *h = NULL;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, "x", LOOM_F32, 1, (int64_t[]){2}), y;
  CHECK_OK(loom_exp(g, x, &y));
  CHECK_OK(loom_graph_output(g, y));
  ir_rewriter_t rw;
  CHECK_OK(ir_rewrite_begin(g, &rw));
  CHECK_ERR(ir_rewrite_finish(&rw, &h), LOOM_ERR_GRAPH, "not mapped");
  CHECK(h == NULL);
  /* Copying a node whose input was dropped names the node. */
  loom_value_t z;
  CHECK_OK(loom_log(g, y, &z));
  CHECK_OK(ir_rewrite_begin(g, &rw));
  CHECK_ERR(ir_rewrite_copy(&rw, 1), LOOM_ERR_GRAPH, "dropped");
  ir_rewrite_abort(&rw);
  CHECK_ERR(ir_graph_clone(NULL, &h), LOOM_ERR_INVALID, "src");
  loom_graph_destroy(g);
}

/* ---- Constant folding ------------------------------------------------------ */

static void fold_constant_subgraph(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, "x", LOOM_F32, 1, (int64_t[]){3});
  loom_value_t a = test_constant(g, LOOM_F32, 1, (int64_t[]){3}, (double[]){1, 2, 3});
  loom_value_t b = test_constant(g, LOOM_F32, 1, (int64_t[]){3}, (double[]){4, 5, 6});
  loom_value_t s, e, y, p, q, seed, off, r, big, bs;
  CHECK_OK(loom_add(g, a, b, &s));     /* folds */
  CHECK_OK(loom_exp(g, s, &e));        /* folds, through the first */
  CHECK_OK(loom_mul(g, x, e, &y));     /* reads an input: stays */
  CHECK_OK(loom_graph_param(g, "p", LOOM_F32, 1, (int64_t[]){3}, NULL, &p));
  CHECK_OK(loom_add(g, p, a, &q));     /* a parameter is not a constant */
  seed = test_constant(g, LOOM_I64, 0, NULL, (double[]){7});
  off = test_constant(g, LOOM_I64, 0, NULL, (double[]){0});
  CHECK_OK(loom_random_uniform(g, seed, off, 1, (int64_t[]){3}, 0, 1, LOOM_F32, &r));
  CHECK_OK(loom_full(g, 2, (int64_t[]){300, 300}, 2.0, LOOM_F32, &big)); /* too big */
  CHECK_OK(loom_sum(g, big, 0, NULL, 0, &bs));
  CHECK_OK(loom_graph_output(g, y));
  CHECK_OK(loom_graph_output(g, q));
  CHECK_OK(loom_graph_output(g, r));
  CHECK_OK(loom_graph_output(g, bs));
  CHECK_OK(loom_graph_output(g, e));   /* an output that is now a constant */
  loom_tensor_t *in = test_rand_tensor(LOOM_F32, 1, (int64_t[]){3}, -1, 1);
  loom_graph_t *h = run_pass(pass_const_fold, g, 1, &in, 0);
  if (h) {
    CHECK_OPS(h, "mul add random_uniform full sum");
    CHECK(h->values[h->outputs[4]].kind == IR_VALUE_CONST);
  }
  loom_tensor_destroy(in);
  loom_graph_destroy(h);
  loom_graph_destroy(g);
}

/* A kernel that fails while folding (an index out of range) leaves the
 * node to fail at run time. */
static void fold_keeps_failing_node(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t data = test_constant(g, LOOM_F32, 1, (int64_t[]){2}, (double[]){1, 2});
  loom_value_t idx = test_constant(g, LOOM_I64, 1, (int64_t[]){1}, (double[]){5});
  loom_value_t y;
  CHECK_OK(loom_gather(g, data, idx, 0, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_graph_t *h = NULL;
  CHECK_OK(pass_const_fold(g, &h));
  if (h) CHECK_OPS(h, "gather");
  loom_tensor_t *out = NULL;
  if (h) CHECK_ERR(loom_interpret(h, 0, NULL, 1, &out), LOOM_ERR_VALUE, "gather");
  loom_graph_destroy(h);
  loom_graph_destroy(g);
}

/* ---- CSE ------------------------------------------------------------------- */

static void cse_merges_equal_nodes(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {2, 3};
  loom_value_t x = input(g, "x", LOOM_F32, 2, shape), y = input(g, "y", LOOM_F32, 2, shape);
  loom_value_t a1, a2, m, s0, s1, t, c1, c2, k1, k2, u;
  CHECK_OK(loom_add(g, x, y, &a1));
  CHECK_OK(loom_add(g, x, y, &a2));
  CHECK_OK(loom_mul(g, a1, a2, &m));
  CHECK_OK(loom_sum(g, m, 1, (int64_t[]){0}, 1, &s0));
  CHECK_OK(loom_sum(g, m, 1, (int64_t[]){1}, 1, &s1)); /* other attrs: stays */
  CHECK_OK(loom_add(g, s0, s1, &t));
  c1 = test_constant(g, LOOM_F32, 1, (int64_t[]){3}, (double[]){2, 3, 4});
  c2 = test_constant(g, LOOM_F32, 1, (int64_t[]){3}, (double[]){2, 3, 4});
  CHECK_OK(loom_mul(g, x, c1, &k1));
  CHECK_OK(loom_mul(g, x, c2, &k2)); /* equal constants: the same mul */
  CHECK_OK(loom_add(g, k1, k2, &u));
  CHECK_OK(loom_graph_output(g, t));
  CHECK_OK(loom_graph_output(g, u));
  loom_tensor_t *in[2] = {test_rand_tensor(LOOM_F32, 2, shape, -1, 1),
                          test_rand_tensor(LOOM_F32, 2, shape, -1, 1)};
  loom_graph_t *h = run_pass(pass_cse, g, 2, in, 0);
  if (h) CHECK_OPS(h, "add mul sum sum add mul add");
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(h);
  loom_graph_destroy(g);
}

/* Two assigns never merge; two random draws from the same seed and
 * offset are the same numbers and do. */
static void cse_side_effects_and_random(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t p, q, one, v, seed, off, r1, r2, s;
  CHECK_OK(loom_graph_param(g, "p", LOOM_F32, 0, NULL, NULL, &p));
  CHECK_OK(loom_graph_param(g, "q", LOOM_F32, 0, NULL, NULL, &q));
  one = test_constant(g, LOOM_F32, 0, NULL, (double[]){1});
  CHECK_OK(loom_add(g, p, one, &v));
  CHECK_OK(loom_assign(g, p, v));
  CHECK_OK(loom_assign(g, q, v));
  seed = test_constant(g, LOOM_I64, 0, NULL, (double[]){1});
  off = test_constant(g, LOOM_I64, 0, NULL, (double[]){2});
  CHECK_OK(loom_random_uniform(g, seed, off, 1, (int64_t[]){4}, 0, 1, LOOM_F32, &r1));
  CHECK_OK(loom_random_uniform(g, seed, off, 1, (int64_t[]){4}, 0, 1, LOOM_F32, &r2));
  CHECK_OK(loom_sub(g, r1, r2, &s));
  CHECK_OK(loom_graph_output(g, s));
  loom_graph_t *h = NULL;
  CHECK_OK(pass_cse(g, &h));
  if (h) CHECK_OPS(h, "add assign assign random_uniform sub");
  loom_tensor_t *y = h ? test_run1(h, 0, NULL) : NULL;
  if (y) CHECK_TENSOR(y, ((double[]){0, 0, 0, 0}), 4, 0, 0);
  loom_tensor_t *tp, *tq;
  CHECK_OK(loom_graph_param_tensor(g, p, &tp));
  CHECK_OK(loom_graph_param_tensor(g, q, &tq));
  CHECK(test_get(tp, 0) == 1 && test_get(tq, 0) == 1);
  loom_tensor_destroy(y);
  loom_graph_destroy(h);
  loom_graph_destroy(g);
}

/* ---- DCE ------------------------------------------------------------------- */

static void dce_drops_unused_branch(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, "x", LOOM_F32, 1, (int64_t[]){4});
  loom_value_t a, b, dead1, dead2, p, v;
  CHECK_OK(loom_exp(g, x, &a));
  CHECK_OK(loom_log(g, x, &dead1));
  CHECK_OK(loom_sin(g, dead1, &dead2));
  CHECK_OK(loom_neg(g, a, &b));
  CHECK_OK(loom_graph_param(g, "p", LOOM_F32, 1, (int64_t[]){4}, NULL, &p));
  CHECK_OK(loom_cos(g, x, &v));
  CHECK_OK(loom_assign(g, p, v)); /* no output reads it, yet it lives */
  CHECK_OK(loom_graph_output(g, b));
  loom_tensor_t *in = test_rand_tensor(LOOM_F32, 1, (int64_t[]){4}, 0.5, 2);
  loom_graph_t *h = run_pass(pass_dce, g, 1, &in, 0);
  if (h) CHECK_OPS(h, "exp neg cos assign");
  loom_tensor_t *tp;
  CHECK_OK(loom_graph_param_tensor(g, p, &tp));
  CHECK_NEAR(test_get(tp, 0), cos(test_get(in, 0)), 1e-6, 1e-6);
  loom_tensor_destroy(in);
  loom_graph_destroy(h);
  loom_graph_destroy(g);
}

/* ---- Simplify -------------------------------------------------------------- */

static void simplify_identities(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {2, 3};
  loom_value_t x = input(g, "x", LOOM_F32, 2, shape);
  loom_value_t one = test_constant(g, LOOM_F32, 0, NULL, (double[]){1});
  loom_value_t zeros = test_constant(g, LOOM_F32, 1, (int64_t[]){3}, (double[]){0, 0, 0});
  loom_value_t ones_big = test_constant(g, LOOM_F32, 3, (int64_t[]){2, 2, 3},
                                   (double[]){1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  loom_value_t f0, a, b, c, d, e, f, h1, k, w;
  CHECK_OK(loom_full(g, 0, NULL, 0.0, LOOM_F32, &f0));
  CHECK_OK(loom_mul(g, x, one, &a));      /* x*1 */
  CHECK_OK(loom_mul(g, one, a, &b));      /* 1*x */
  CHECK_OK(loom_add(g, b, zeros, &c));    /* x+0 */
  CHECK_OK(loom_add(g, f0, c, &d));       /* 0+x, a full node */
  CHECK_OK(loom_sub(g, d, zeros, &e));    /* x-0 */
  CHECK_OK(loom_div(g, e, one, &f));      /* x/1 */
  CHECK_OK(loom_cast(g, f, LOOM_F32, &h1));
  CHECK_OK(loom_identity(g, h1, &k));
  CHECK_OK(loom_mul(g, k, ones_big, &w)); /* broadcasts up: stays */
  CHECK_OK(loom_graph_output(g, k));
  CHECK_OK(loom_graph_output(g, w));
  loom_tensor_t *in = test_rand_tensor(LOOM_F32, 2, shape, -1, 1);
  loom_graph_t *h = run_pass(pass_simplify, g, 1, &in, 0);
  if (h) {
    CHECK_OPS(h, "full mul");
    CHECK(h->outputs[0] == h->inputs[0]);
  }
  loom_tensor_destroy(in);
  loom_graph_destroy(h);
  loom_graph_destroy(g);
}

/* x + zeros that broadcast x up (an index built as dst[:, None] + zeros(1,
 * D)) is x expanded: what reads it can see it does not vary along D. */
static void simplify_broadcast_zero(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {4, 1};
  loom_value_t x = input(g, "x", LOOM_I64, 2, shape), z, y;
  CHECK_OK(loom_full(g, 2, (loom_dim_t[]){1, 3}, 0.0, LOOM_I64, &z));
  CHECK_OK(loom_add(g, x, z, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in = test_tensor(LOOM_I64, 2, shape, (double[]){5, -2, 0, 7});
  loom_graph_t *h = run_pass(pass_simplify, g, 1, &in, 0);
  if (h) CHECK_OPS(h, "full expand");
  loom_tensor_destroy(in);
  loom_graph_destroy(h);
  loom_graph_destroy(g);
}

/* x-x is zeros for integers; for floats it stays (inf-inf is NaN). */
static void simplify_self_sub(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {3};
  loom_value_t i = input(g, "i", LOOM_I32, 1, shape), f = input(g, "f", LOOM_F32, 1, shape);
  loom_value_t di, df;
  CHECK_OK(loom_sub(g, i, i, &di));
  CHECK_OK(loom_sub(g, f, f, &df));
  CHECK_OK(loom_graph_output(g, di));
  CHECK_OK(loom_graph_output(g, df));
  loom_tensor_t *in[2] = {test_tensor(LOOM_I32, 1, shape, (double[]){5, -7, 9}),
                          test_tensor(LOOM_F32, 1, shape, (double[]){INFINITY, NAN, 2})};
  loom_graph_t *h = run_pass(pass_simplify, g, 2, in, 0);
  if (h) CHECK_OPS(h, "full sub");
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(h);
  loom_graph_destroy(g);
}

static void simplify_layout(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {2, 3, 4};
  loom_value_t x = input(g, "x", LOOM_F64, 3, shape);
  loom_value_t s = input(g, "s", LOOM_F64, 0, NULL);
  loom_value_t t1, t2, u1, u2, r1, r2, e1, e2, b, sum;
  CHECK_OK(loom_transpose(g, x, (int64_t[]){1, 2, 0}, &t1));
  CHECK_OK(loom_transpose(g, t1, (int64_t[]){2, 0, 1}, &t2));  /* identity */
  CHECK_OK(loom_transpose(g, t2, (int64_t[]){0, 2, 1}, &u1));
  CHECK_OK(loom_transpose(g, u1, (int64_t[]){2, 1, 0}, &u2));  /* one transpose */
  CHECK_OK(loom_reshape(g, u2, 2, (int64_t[]){6, 4}, &r1));
  CHECK_OK(loom_reshape(g, r1, 2, (int64_t[]){-1, 8}, &r2));  /* one reshape */
  CHECK_OK(loom_expand(g, r2, 2, (int64_t[]){3, 8}, &e1));    /* same shape */
  CHECK_OK(loom_expand(g, s, 2, (int64_t[]){3, 8}, &e2));     /* a scalar */
  CHECK_OK(loom_add(g, e1, e2, &b));                          /* reads s */
  CHECK_OK(loom_sum(g, b, 0, NULL, 0, &sum));
  CHECK_OK(loom_graph_output(g, b));
  CHECK_OK(loom_graph_output(g, sum));
  loom_tensor_t *in[2] = {test_rand_tensor(LOOM_F64, 3, shape, -1, 1),
                          test_tensor(LOOM_F64, 0, NULL, (double[]){0.25})};
  loom_graph_t *h1 = run_pass(pass_simplify, g, 2, in, 0);
  loom_graph_t *h = h1 ? run_pass(pass_dce, h1, 2, in, 0) : NULL;
  if (h) CHECK_OPS(h, "transpose reshape add sum");
  if (h) CHECK(h->nodes[0].in[0] == h->inputs[0] && h->nodes[2].in[1] == h->inputs[1]);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(h1);
  loom_graph_destroy(h);
  loom_graph_destroy(g);
}

/* ---- Decompose ------------------------------------------------------------- */

typedef loom_status_t (*unary_builder)(loom_graph_t *g, loom_value_t x, loom_value_t *out);

/* Builds op(x) on shape, decomposes, checks the ops and the values. */
static void check_decompose(loom_dtype_t dt, int rank, const int64_t *shape,
                            loom_graph_t *g, loom_value_t y, const char *ops,
                            double rtol) {
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in = test_rand_tensor(dt, rank, shape, -3, 3);
  loom_graph_t *h = run_pass(pass_decompose, g, 1, &in, rtol);
  if (h) CHECK_OPS(h, ops);
  loom_tensor_destroy(in);
  loom_graph_destroy(h);
  loom_graph_destroy(g);
}

static void decompose_unary(unary_builder build, const char *ops) {
  loom_dtype_t dts[] = {LOOM_F32, LOOM_F64};
  for (int i = 0; i < 2; i++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_value_t x = input(g, "x", dts[i], 2, (int64_t[]){3, 5}), y;
    CHECK_OK(build(g, x, &y));
    check_decompose(dts[i], 2, (int64_t[]){3, 5}, g, y, ops, dts[i] == LOOM_F32 ? 1e-5 : 1e-12);
  }
}

/* gelu stays whole: 1 + erf(x / sqrt 2) would cancel for x < 0. */
static void decompose_activations(void) {
  decompose_unary(loom_gelu, "gelu");
  decompose_unary(loom_gelu_tanh, "gelu_tanh");
  decompose_unary(loom_silu, "sigmoid mul");
}

static void decompose_softmax(void) {
  loom_dtype_t dts[] = {LOOM_F32, LOOM_F64, LOOM_F16};
  double tol[] = {1e-6, 1e-13, 1e-3};
  for (int i = 0; i < 3; i++)
    for (int axis = 0; axis < 2; axis++) {
      loom_graph_t *g;
      CHECK_OK(loom_graph_create(&g));
      loom_value_t x = input(g, "x", dts[i], 2, (int64_t[]){4, 6}), y;
      /* f16 computes in f32 and rounds once, as the reference kernel does. */
      bool half = dts[i] == LOOM_F16;
      CHECK_OK(loom_softmax(g, x, axis, &y));
      check_decompose(dts[i], 2, (int64_t[]){4, 6}, g, y,
                      half ? "cast max sub exp sum div cast" : "max sub exp sum div", tol[i]);
      CHECK_OK(loom_graph_create(&g));
      x = input(g, "x", dts[i], 2, (int64_t[]){4, 6});
      CHECK_OK(loom_log_softmax(g, x, axis - 2, &y));
      check_decompose(dts[i], 2, (int64_t[]){4, 6}, g, y,
                      half ? "cast max sub exp sum log sub cast" : "max sub exp sum log sub",
                      tol[i] * 4);
    }
}

static void decompose_norms(void) {
  int64_t shape[] = {2, 3, 4};
  for (int axis = 1; axis <= 2; axis++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_value_t x = input(g, "x", LOOM_F32, 3, shape), y;
    int64_t *ns = shape + axis;
    int nr = 3 - axis;
    loom_tensor_t *sc = test_rand_tensor(LOOM_F32, nr, ns, 0.5, 2);
    loom_tensor_t *bi = test_rand_tensor(LOOM_F32, nr, ns, -1, 1);
    loom_value_t s, b;
    CHECK_OK(loom_graph_constant(g, sc, &s));
    CHECK_OK(loom_graph_constant(g, bi, &b));
    CHECK_OK(loom_layer_norm(g, x, 1, s, 1, b, axis, 1e-3, &y));
    check_decompose(LOOM_F32, 3, shape, g, y, "sum mul sub mul sum mul add rsqrt mul mul add", 1e-5);
    CHECK_OK(loom_graph_create(&g));
    x = input(g, "x", LOOM_F32, 3, shape);
    CHECK_OK(loom_graph_constant(g, sc, &s));
    CHECK_OK(loom_rms_norm(g, x, 1, s, axis - 3, 1e-6, &y));
    check_decompose(LOOM_F32, 3, shape, g, y, "mul sum mul add rsqrt mul mul", 1e-5);
    loom_tensor_destroy(sc);
    loom_tensor_destroy(bi);
  }
  /* Without scale and bias, f64. */
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, "x", LOOM_F64, 3, shape), y;
  CHECK_OK(loom_layer_norm(g, x, 0, x, 0, x, -1, 1e-5, &y));
  check_decompose(LOOM_F64, 3, shape, g, y, "sum mul sub mul sum mul add rsqrt mul", 1e-12);
}

static void decompose_batch_norm(void) {
  int64_t shape[] = {2, 3, 2, 2}, cs[] = {3};
  for (int training = 0; training <= 1; training++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_value_t x = input(g, "x", LOOM_F32, 4, shape), p[4], y, nm, nv;
    loom_tensor_t *init[4] = {test_rand_tensor(LOOM_F32, 1, cs, 0.5, 2),
                              test_rand_tensor(LOOM_F32, 1, cs, -1, 1),
                              test_rand_tensor(LOOM_F32, 1, cs, -1, 1),
                              test_rand_tensor(LOOM_F32, 1, cs, 0.5, 2)};
    const char *names[] = {"scale", "bias", "mean", "var"};
    for (int i = 0; i < 4; i++) {
      CHECK_OK(loom_graph_param(g, names[i], LOOM_F32, 1, cs, init[i], &p[i]));
      loom_tensor_destroy(init[i]);
    }
    CHECK_OK(loom_batch_norm(g, x, p[0], p[1], p[2], p[3], 1e-5, 0.1, training, &y, &nm, &nv));
    CHECK_OK(loom_graph_output(g, y));
    CHECK_OK(loom_graph_output(g, nm));
    CHECK_OK(loom_graph_output(g, nv));
    loom_tensor_t *in = test_rand_tensor(LOOM_F32, 4, shape, -2, 2);
    loom_graph_t *h = run_pass(pass_decompose, g, 1, &in, 1e-5);
    if (h) CHECK_OPS(h, training ? "batch_norm" : "add rsqrt mul mul sub unsqueeze unsqueeze mul add");
    if (h && !training) CHECK(h->outputs[1] == h->params[2] && h->outputs[2] == h->params[3]);
    loom_tensor_destroy(in);
    loom_graph_destroy(h);
    loom_graph_destroy(g);
  }
}

/* logsumexp keeps the kernel's answers on lines of -inf and +inf. */
static void decompose_logsumexp(void) {
  int64_t shape[] = {3, 4};
  for (int keepdim = 0; keepdim <= 1; keepdim++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_value_t x = input(g, "x", LOOM_F32, 2, shape), y, z;
    CHECK_OK(loom_logsumexp(g, x, 1, (int64_t[]){-1}, keepdim, &y));
    CHECK_OK(loom_logsumexp(g, x, 0, NULL, keepdim, &z));
    CHECK_OK(loom_graph_output(g, y));
    CHECK_OK(loom_graph_output(g, z));
    double v[12] = {1, 2, 3, 4, -INFINITY, -INFINITY, -INFINITY, -INFINITY, 0, INFINITY, 1, 2};
    loom_tensor_t *in = test_tensor(LOOM_F32, 2, shape, v);
    loom_graph_t *h = run_pass(pass_decompose, g, 1, &in, 1e-6);
    if (h) CHECK(count_op(h, IR_OP_LOGSUMEXP) == 0 && count_op(h, IR_OP_MAX) == 2);
    if (h) CHECK(count_op(h, IR_OP_SQUEEZE) == (keepdim ? 0 : 2));
    loom_tensor_destroy(in);
    loom_graph_destroy(h);
    loom_graph_destroy(g);
  }
}

static void decompose_reductions(void) {
  int64_t shape[] = {4, 5};
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, "x", LOOM_F64, 2, shape), m, v0, v1;
  CHECK_OK(loom_mean(g, x, 1, (int64_t[]){0}, 0, &m));
  CHECK_OK(loom_variance(g, x, 1, (int64_t[]){1}, 1, 1, &v1));
  CHECK_OK(loom_variance(g, x, 0, NULL, 0, 0, &v0));
  CHECK_OK(loom_graph_output(g, m));
  CHECK_OK(loom_graph_output(g, v1));
  CHECK_OK(loom_graph_output(g, v0));
  loom_tensor_t *in = test_rand_tensor(LOOM_F64, 2, shape, -2, 2);
  loom_graph_t *h = run_pass(pass_decompose, g, 1, &in, 1e-12);
  if (h) CHECK(count_op(h, IR_OP_MEAN) == 0 && count_op(h, IR_OP_VARIANCE) == 0);
  loom_tensor_destroy(in);
  loom_graph_destroy(h);
  loom_graph_destroy(g);
  /* A symbolic count keeps mean whole; variance with a correction too. */
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  x = input(g, "x", LOOM_F32, 2, (int64_t[]){n, 5});
  CHECK_OK(loom_mean(g, x, 1, (int64_t[]){0}, 0, &m));
  CHECK_OK(loom_variance(g, x, 1, (int64_t[]){0}, 0, 1, &v1));
  CHECK_OK(loom_graph_output(g, m));
  CHECK_OK(loom_graph_output(g, v1));
  in = test_rand_tensor(LOOM_F32, 2, shape, -2, 2);
  h = run_pass(pass_decompose, g, 1, &in, 1e-6);
  if (h) CHECK_OPS(h, "mean variance");
  loom_tensor_destroy(in);
  loom_graph_destroy(h);
  loom_graph_destroy(g);
}

/* ---- Pipeline -------------------------------------------------------------- */

/* A small network: folded constants survive the intermediate graphs
 * (ASan watches), and the result agrees with the original. */
static void pipeline_end_to_end(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t xs[] = {4, 8}, ws[] = {8, 6};
  loom_value_t x = input(g, "x", LOOM_F32, 2, xs), w, b1, b2, b, h1, a, two, half, s, y, dead;
  loom_tensor_t *wi = test_rand_tensor(LOOM_F32, 2, ws, -1, 1);
  CHECK_OK(loom_graph_param(g, "w", LOOM_F32, 2, ws, wi, &w));
  b1 = test_constant(g, LOOM_F32, 1, (int64_t[]){6}, (double[]){1, 2, 3, 4, 5, 6});
  two = test_constant(g, LOOM_F32, 0, NULL, (double[]){2});
  half = test_constant(g, LOOM_F32, 0, NULL, (double[]){0.5});
  CHECK_OK(loom_mul(g, b1, two, &b2));
  CHECK_OK(loom_mul(g, b2, half, &b)); /* folds to b1 */
  CHECK_OK(loom_matmul(g, x, w, 0, 0, &h1));
  CHECK_OK(loom_add(g, h1, b, &a));
  CHECK_OK(loom_gelu(g, a, &a));
  CHECK_OK(loom_layer_norm(g, a, 0, a, 0, a, -1, 1e-5, &s));
  CHECK_OK(loom_softmax(g, s, -1, &y));
  CHECK_OK(loom_exp(g, a, &dead));
  CHECK_OK(loom_graph_output(g, y));
  pass_options_t o;
  pass_options_init(&o);
  loom_graph_t *h = NULL;
  CHECK_OK(pass_pipeline(g, &o, &h));
  loom_tensor_t *in = test_rand_tensor(LOOM_F32, 2, xs, -1, 1);
  if (h) {
    check_same(g, h, 1, &in, 1e-5, 1e-5);
    CHECK(count_op(h, IR_OP_SOFTMAX) == 0 && count_op(h, IR_OP_EXP) == 1);
    CHECK(count_op(h, IR_OP_MATMUL) == 1);
  }
  /* Everything off: a copy. */
  loom_graph_t *c = NULL;
  o = (pass_options_t){0};
  CHECK_OK(pass_pipeline(g, &o, &c));
  if (c) CHECK(c->n_nodes == g->n_nodes);
  loom_graph_t *d = NULL; /* NULL options: all passes */
  CHECK_OK(pass_pipeline(g, NULL, &d));
  if (d) CHECK(count_op(d, IR_OP_SOFTMAX) == 0);
  loom_graph_destroy(d);
  CHECK_ERR(pass_pipeline(NULL, NULL, &d), LOOM_ERR_INVALID, "src");
  loom_tensor_destroy(in);
  loom_tensor_destroy(wi);
  loom_graph_destroy(c);
  loom_graph_destroy(h);
  loom_graph_destroy(g);
}

/* LOOM_LOG=passes prints the IR after every pass. */
static void pipeline_logs_ir(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, "x", LOOM_F32, 1, (int64_t[]){3}), y;
  CHECK_OK(loom_silu(g, x, &y));
  CHECK_OK(loom_graph_output(g, y));
  test_capture_begin("passes");
  loom_graph_t *h = NULL;
  CHECK_OK(pass_pipeline(g, NULL, &h));
  char *text = test_capture_end();
  CHECK(strstr(text, "loom[passes]: after decompose") != NULL);
  CHECK(strstr(text, "after dce") != NULL);
  CHECK(strstr(text, "sigmoid") != NULL);
  free(text);
  loom_graph_destroy(h);
  loom_graph_destroy(g);
}

/* A transpose that keeps the type still moves data: (4, 3, 4) reversed. */
static void simplify_keeps_type_preserving_transpose(void) {
  loom_graph_t *g, *out;
  loom_value_t x, t;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 3, (loom_dim_t[]){4, 3, 4}, &x));
  CHECK_OK(loom_transpose(g, x, NULL, &t));
  CHECK_OK(loom_graph_output(g, t));
  CHECK_OK(pass_simplify(g, &out));
  CHECK(loom_graph_num_nodes(out) == 1);
  loom_graph_destroy(out);
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(simplify_keeps_type_preserving_transpose);
  test_seed(31);
  TEST_RUN(clone_keeps_interface);
  TEST_RUN(clone_shares_parameters);
  TEST_RUN(unmapped_output_fails);
  TEST_RUN(fold_constant_subgraph);
  TEST_RUN(fold_keeps_failing_node);
  TEST_RUN(cse_merges_equal_nodes);
  TEST_RUN(cse_side_effects_and_random);
  TEST_RUN(dce_drops_unused_branch);
  TEST_RUN(simplify_identities);
  TEST_RUN(simplify_broadcast_zero);
  TEST_RUN(simplify_self_sub);
  TEST_RUN(simplify_layout);
  TEST_RUN(decompose_activations);
  TEST_RUN(decompose_softmax);
  TEST_RUN(decompose_norms);
  TEST_RUN(decompose_batch_norm);
  TEST_RUN(decompose_logsumexp);
  TEST_RUN(decompose_reductions);
  TEST_RUN(pipeline_end_to_end);
  TEST_RUN(pipeline_logs_ir);
  return test_summary();
}
