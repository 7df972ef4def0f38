/* The IR: symbolic dims, broadcasting on them, graph values, printing,
 * and the verifier (fed graphs corrupted through the internal structs). */
#include <string.h>

#include "harness.h"
#include "ir/ir.h"

static const char *fmt(loom_graph_t *g, loom_dim_t d) {
  static char buf[128];
  if (loom_dim_format(g, d, buf, sizeof buf) != LOOM_OK) return "?";
  return buf;
}

static void dims_intern_and_simplify(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n, n2, m, d, e;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_symbol(g, "n", &n2));
  CHECK_OK(loom_dim_symbol(g, "m", &m));
  CHECK(n == n2 && n != m && n < 0 && m < 0);
  CHECK_OK(loom_dim_add(g, n, 0, &d));
  CHECK(d == n);
  CHECK_OK(loom_dim_mul(g, n, 1, &d));
  CHECK(d == n);
  CHECK_OK(loom_dim_mul(g, 1, n, &d));
  CHECK(d == n);
  CHECK_OK(loom_dim_mul(g, n, 0, &d));
  CHECK(d == 0);
  CHECK_OK(loom_dim_floordiv(g, n, 1, &d));
  CHECK(d == n);
  CHECK_OK(loom_dim_floordiv(g, n, n, &d));
  CHECK(d == 1);
  CHECK_OK(loom_dim_mul(g, n, 4, &d));
  CHECK_OK(loom_dim_floordiv(g, d, 4, &e));
  CHECK(e == n);
  CHECK_OK(loom_dim_floordiv(g, d, 2, &e)); /* (n*4)//2 = n*2 */
  CHECK(!strcmp(fmt(g, e), "n*2"));
  CHECK_OK(loom_dim_add(g, 2, 3, &d));
  CHECK(d == 5);
  CHECK_OK(loom_dim_mul(g, 6, 7, &d));
  CHECK(d == 42);
  CHECK_OK(loom_dim_floordiv(g, 7, 2, &d));
  CHECK(d == 3);
  /* (n+1)+2 = n+3, and both orders of operands intern alike. */
  loom_dim_t a, b;
  CHECK_OK(loom_dim_add(g, n, 1, &a));
  CHECK_OK(loom_dim_add(g, a, 2, &a));
  CHECK_OK(loom_dim_add(g, 3, n, &b));
  CHECK(a == b);
  CHECK(!strcmp(fmt(g, a), "n+3"));
  CHECK_OK(loom_dim_add(g, n, m, &a));
  CHECK_OK(loom_dim_add(g, m, n, &b));
  CHECK(a == b);
  CHECK_OK(loom_dim_mul(g, n, m, &a));
  CHECK_OK(loom_dim_mul(g, m, n, &b));
  CHECK(a == b);
  /* (n*2)*3 = n*6 */
  CHECK_OK(loom_dim_mul(g, n, 2, &a));
  CHECK_OK(loom_dim_mul(g, a, 3, &a));
  CHECK_OK(loom_dim_mul(g, n, 6, &b));
  CHECK(a == b);
  loom_graph_destroy(g);
}

static void dims_format(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n, m, d;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_symbol(g, "seq", &m));
  CHECK(!strcmp(fmt(g, 7), "7"));
  CHECK(!strcmp(fmt(g, n), "n"));
  CHECK_OK(loom_dim_mul(g, n, 4, &d));
  CHECK_OK(loom_dim_add(g, d, 1, &d));
  CHECK(!strcmp(fmt(g, d), "n*4+1"));
  CHECK_OK(loom_dim_add(g, n, 1, &d));
  CHECK_OK(loom_dim_mul(g, d, m, &d));
  CHECK(strstr(fmt(g, d), "(n+1)") && strstr(fmt(g, d), "seq") && strchr(fmt(g, d), '*'));
  CHECK_OK(loom_dim_floordiv(g, m, 2, &d));
  CHECK(!strcmp(fmt(g, d), "seq//2"));
  char small[4];
  CHECK_OK(loom_dim_format(g, d, small, sizeof small));
  CHECK(strlen(small) == 3);
  loom_graph_destroy(g);
}

static void dims_errors(void) {
  loom_graph_t *g, *h;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_create(&h));
  loom_dim_t n, d, foreign;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_symbol(h, "a", &foreign));
  CHECK_OK(loom_dim_symbol(h, "b", &foreign));
  CHECK_ERR(loom_dim_floordiv(g, n, 0, &d), LOOM_ERR_SHAPE, "zero");
  CHECK_ERR(loom_dim_add(g, n, -3, &d), LOOM_ERR_INVALID, "b");
  CHECK_ERR(loom_dim_mul(g, foreign, 2, &d), LOOM_ERR_INVALID, "symbol");
  CHECK_ERR(loom_dim_symbol(g, "", &d), LOOM_ERR_INVALID, "name");
  CHECK_ERR(loom_dim_symbol(g, NULL, &d), LOOM_ERR_INVALID, "name");
  loom_value_t x;
  CHECK_ERR(loom_graph_input(g, "x", LOOM_F32, 1, &foreign, &x), LOOM_ERR_SHAPE, "symbol");
  loom_graph_destroy(g);
  loom_graph_destroy(h);
}

static void broadcast_symbolic(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n, m;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_symbol(g, "m", &m));
  loom_dim_t da[] = {n, 1}, db[] = {1, 4}, dn[] = {n}, dm[] = {m};
  loom_value_t a, b, vn, vm, y;
  CHECK_OK(loom_graph_input(g, "a", LOOM_F32, 2, da, &a));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F32, 2, db, &b));
  CHECK_OK(loom_graph_input(g, "vn", LOOM_F32, 1, dn, &vn));
  CHECK_OK(loom_graph_input(g, "vm", LOOM_F32, 1, dm, &vm));
  CHECK_OK(loom_add(g, a, b, &y));
  loom_dtype_t dt;
  int rank;
  loom_dim_t dims[LOOM_MAX_RANK];
  CHECK_OK(loom_value_type(g, y, &dt, &rank, dims));
  CHECK(dt == LOOM_F32 && rank == 2 && dims[0] == n && dims[1] == 4);
  CHECK_OK(loom_mul(g, vn, a, &y)); /* [n] * [n, 1] -> [n, n] */
  CHECK_OK(loom_value_type(g, y, &dt, &rank, dims));
  CHECK(rank == 2 && dims[0] == n && dims[1] == n);
  CHECK_OK(loom_sub(g, vn, vn, &y));
  CHECK_OK(loom_value_type(g, y, NULL, &rank, dims));
  CHECK(rank == 1 && dims[0] == n);
  CHECK_ERR(loom_add(g, vn, vm, &y), LOOM_ERR_SHAPE, "cannot broadcast");
  CHECK_ERR(loom_add(g, vn, vm, &y), LOOM_ERR_SHAPE, "f32[m]");
  CHECK_ERR(loom_add(g, vn, b, &y), LOOM_ERR_SHAPE, "add");
  loom_graph_destroy(g);
}

static void graph_values(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {2, 3};
  double init_v[] = {1, 2, 3, 4, 5, 6};
  loom_tensor_t *init = test_tensor(LOOM_F64, 2, shape, init_v);
  loom_value_t x, p, q, c, y;
  loom_dim_t dims[] = {2, 3};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 2, dims, &x));
  CHECK_OK(loom_graph_param(g, "w", LOOM_F64, 2, shape, init, &p));
  CHECK_OK(loom_graph_param(g, "z", LOOM_I32, 1, shape, NULL, &q));
  CHECK_OK(loom_graph_constant(g, init, &c));
  /* The graph holds copies: changing init afterwards changes nothing. */
  double zeros[6] = {0};
  CHECK_OK(loom_tensor_write(init, zeros, sizeof zeros));
  CHECK_OK(loom_add(g, x, p, &y));
  CHECK_OK(loom_add(g, y, c, &y));
  CHECK_OK(loom_graph_output(g, y));
  CHECK_OK(loom_graph_output(g, x));
  CHECK(loom_graph_num_inputs(g) == 1);
  CHECK(loom_graph_num_outputs(g) == 2);
  CHECK(loom_graph_num_nodes(g) == 2);
  loom_dtype_t dt;
  int rank;
  loom_dim_t d[LOOM_MAX_RANK];
  CHECK_OK(loom_value_type(g, q, &dt, &rank, d));
  CHECK(dt == LOOM_I32 && rank == 1 && d[0] == 2);
  CHECK_OK(loom_value_type(g, c, &dt, &rank, d));
  CHECK(dt == LOOM_F64 && rank == 2 && d[0] == 2 && d[1] == 3);
  loom_tensor_t *w, *z;
  CHECK_OK(loom_graph_param_tensor(g, p, &w));
  CHECK_OK(loom_graph_param_tensor(g, q, &z));
  CHECK_TENSOR(w, init_v, 6, 0, 0);
  double z_want[] = {0, 0};
  CHECK_TENSOR(z, z_want, 2, 0, 0);
  CHECK_ERR(loom_graph_param_tensor(g, x, &w), LOOM_ERR_INVALID, "not a parameter");
  CHECK_OK(loom_graph_verify(g));
  loom_tensor_t *in = test_tensor(LOOM_F64, 2, shape, init_v);
  loom_tensor_t *outs[2] = {NULL, NULL};
  CHECK_OK(loom_interpret(g, 1, &in, 2, outs));
  double want[] = {3, 6, 9, 12, 15, 18};
  CHECK_TENSOR(outs[0], want, 6, 0, 0);
  CHECK_TENSOR(outs[1], init_v, 6, 0, 0);
  loom_tensor_destroy(outs[0]);
  loom_tensor_destroy(outs[1]);
  loom_tensor_destroy(in);
  loom_tensor_destroy(init);
  loom_graph_destroy(g);
}

/* A small graph: x: f32[n, 4], w param f32[4], y = relu(x + w), z = -y. */
static loom_graph_t *small_graph(loom_value_t *x, loom_value_t *w,
                                 loom_value_t *y, loom_value_t *z) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_dim_t dims[] = {n, 4};
  int64_t wshape[] = {4};
  loom_value_t s;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, dims, x));
  CHECK_OK(loom_graph_param(g, "w", LOOM_F32, 1, wshape, NULL, w));
  CHECK_OK(loom_add(g, *x, *w, &s));
  CHECK_OK(loom_relu(g, s, y));
  CHECK_OK(loom_neg(g, *y, z));
  CHECK_OK(loom_graph_output(g, *z));
  return g;
}

static void print_and_dot(void) {
  loom_value_t x, w, y, z;
  loom_graph_t *g = small_graph(&x, &w, &y, &z);
  char *text = NULL, *dot = NULL;
  CHECK_OK(loom_graph_print(g, &text));
  CHECK(text && strstr(text, "input %0(x): f32[n, 4]"));
  CHECK(text && strstr(text, "param %1(w): f32[4]"));
  CHECK(text && strstr(text, "add(%0(x), %1(w))"));
  CHECK(text && strstr(text, "relu("));
  CHECK(text && strstr(text, "neg("));
  CHECK(text && strstr(text, "return %"));
  CHECK_OK(loom_graph_dot(g, &dot));
  CHECK(dot && strstr(dot, "digraph"));
  CHECK(dot && strstr(dot, "f32[n, 4]"));
  CHECK(dot && strstr(dot, "\"relu\""));
  CHECK(dot && strstr(dot, "n0 -> n1"));
  CHECK(dot && strstr(dot, "out0"));
  loom_free(text);
  loom_free(dot);
  loom_graph_destroy(g);
}

static void verify_cycle(void) {
  loom_value_t x, w, y, z;
  loom_graph_t *g = small_graph(&x, &w, &y, &z);
  CHECK_OK(loom_graph_verify(g));
  /* Node 0 (add) now reads node 1's (relu's) output: add -> relu -> add. */
  int32_t saved = g->nodes[0].in[0];
  g->nodes[0].in[0] = g->nodes[1].out[0];
  CHECK_ERR(loom_graph_verify(g), LOOM_ERR_GRAPH, "cycle");
  loom_tensor_t *in = NULL, *out = NULL;
  int64_t shape[] = {1, 4};
  CHECK_OK(loom_tensor_create(LOOM_F32, 2, shape, &in));
  CHECK_ERR(loom_interpret(g, 1, &in, 1, &out), LOOM_ERR_GRAPH, "cycle");
  CHECK(out == NULL);
  /* A node reading its own output. */
  g->nodes[0].in[0] = g->nodes[0].out[0];
  CHECK_ERR(loom_graph_verify(g), LOOM_ERR_GRAPH, "own output");
  /* Node 1 (relu) reads node 2's (neg's) output, and neg reads relu. */
  g->nodes[0].in[0] = saved;
  g->nodes[1].in[0] = g->nodes[2].out[0];
  CHECK_ERR(loom_graph_verify(g), LOOM_ERR_GRAPH, "cycle");
  g->nodes[1].in[0] = g->nodes[0].out[0];
  CHECK_OK(loom_graph_verify(g));
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

static void verify_dangling(void) {
  loom_value_t x, w, y, z;
  loom_graph_t *g = small_graph(&x, &w, &y, &z);
  int32_t saved = g->nodes[1].in[0];
  g->nodes[1].in[0] = (int32_t)g->n_values + 5;
  CHECK_ERR(loom_graph_verify(g), LOOM_ERR_GRAPH, "dangling");
  g->nodes[1].in[0] = -1;
  CHECK_ERR(loom_graph_verify(g), LOOM_ERR_GRAPH, "dangling");
  g->nodes[1].in[0] = saved;
  g->outputs[0] = (int32_t)g->n_values;
  CHECK_ERR(loom_graph_verify(g), LOOM_ERR_GRAPH, "dangling");
  g->outputs[0] = z.id;
  g->values[z.id].node = 7;
  CHECK_ERR(loom_graph_verify(g), LOOM_ERR_GRAPH, "dangling");
  g->values[z.id].node = 2;
  CHECK_OK(loom_graph_verify(g));
  loom_graph_destroy(g);
}

static void verify_assigns(void) {
  loom_value_t x, w, y, z;
  loom_graph_t *g = small_graph(&x, &w, &y, &z);
  int64_t four[] = {4};
  loom_value_t c, v;
  loom_tensor_t *one;
  CHECK_OK(loom_tensor_create(LOOM_F32, 1, four, &one));
  CHECK_OK(loom_graph_constant(g, one, &c));
  CHECK_OK(loom_add(g, w, c, &v));
  CHECK_ERR(loom_assign(g, x, y), LOOM_ERR_INVALID, "parameter");
  CHECK_ERR(loom_assign(g, w, y), LOOM_ERR_SHAPE, "assign");
  CHECK_OK(loom_assign(g, w, v));
  CHECK_OK(loom_graph_verify(g));
  CHECK_OK(loom_assign(g, w, c));
  CHECK_ERR(loom_graph_verify(g), LOOM_ERR_GRAPH, "assigned twice");
  /* Corrupt the second assign to write an input. */
  ir_node_t *last = &g->nodes[g->n_nodes - 1];
  last->in[0] = x.id;
  CHECK_ERR(loom_graph_verify(g), LOOM_ERR_GRAPH, "not a parameter");
  loom_tensor_destroy(one);
  loom_graph_destroy(g);
}

/* Many nodes (their id arrays over several blocks, one node's longer than
 * a block), a reset, and the same again: every node reads the operands it
 * was given and makes its own outputs, and a reset graph is a new one. */
static void node_ids_across_resets(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  enum { N = 3000, WIDE = 700 };
  static loom_value_t v[N + 1], pieces[WIDE];
  for (int round = 0; round < 3; round++) {
    loom_value_t x;
    CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, (int64_t[]){4}, &x));
    v[0] = x;
    for (int i = 1; i <= N; i++) CHECK_OK(loom_add(g, v[i - 1], i % 3 ? x : v[i / 2], &v[i]));
    for (int i = 0; i < WIDE; i++) pieces[i] = v[N - i];
    loom_value_t cat;
    CHECK_OK(loom_concat(g, WIDE, pieces, 0, &cat));
    CHECK_OK(loom_graph_output(g, cat));
    CHECK_OK(loom_graph_verify(g));
    CHECK(g->n_nodes == N + 1);
    for (int i = 1; i <= N; i++) {
      const ir_node_t *n = &g->nodes[i - 1];
      CHECK(n->n_in == 2 && n->in[0] == v[i - 1].id && n->in[1] == (i % 3 ? x : v[i / 2]).id);
      CHECK(n->n_out == 1 && n->out[0] == v[i].id);
    }
    const ir_node_t *c = &g->nodes[N];
    CHECK(c->n_in == WIDE && c->in[0] == v[N].id && c->in[WIDE - 1] == v[N - WIDE + 1].id);
    CHECK(c->out[0] == cat.id);
    ir_graph_reset(g);
    CHECK(g->n_nodes == 0 && g->n_values == 0);
  }
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(dims_intern_and_simplify);
  TEST_RUN(dims_format);
  TEST_RUN(dims_errors);
  TEST_RUN(broadcast_symbolic);
  TEST_RUN(graph_values);
  TEST_RUN(print_and_dot);
  TEST_RUN(verify_cycle);
  TEST_RUN(verify_dangling);
  TEST_RUN(verify_assigns);
  TEST_RUN(node_ids_across_resets);
  return test_summary();
}
