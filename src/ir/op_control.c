/* Structured control flow: if and loop. Their bodies are subgraphs that
 * the outer graph owns and names by index in int attributes; a body sees
 * only its own inputs, so the outer values it needs are passed to it
 * explicitly. Types cross the boundary by name: a symbol "n" of a body is
 * the outer graph's symbol "n". */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/ir.h"

/* ---- Ownership ------------------------------------------------------------ */

/* Whether a is g or one of the graphs g is a subgraph of. */
static bool is_self_or_owner(const loom_graph_t *g, const loom_graph_t *a) {
  for (; g; g = g->owner)
    if (g == a) return true;
  return false;
}

void ir_graph_drop_unowned(loom_graph_t *g, loom_graph_t *sub) {
  if (sub && !sub->owner && !is_self_or_owner(g, sub)) loom_graph_destroy(sub);
}

loom_status_t ir_graph_adopt(loom_graph_t *g, loom_graph_t *sub, int64_t *index) {
  if (!sub) return loom_fail(LOOM_ERR_INVALID, "a subgraph is null");
  if (is_self_or_owner(g, sub))
    return loom_fail(LOOM_ERR_INVALID, "a graph cannot be its own subgraph");
  if (sub->owner)
    return loom_fail(LOOM_ERR_INVALID,
                     "the subgraph already belongs to a graph (pass each subgraph once)");
  loom_status_t s = core_grow((void **)&g->subgraphs, &g->cap_subgraphs,
                              g->n_subgraphs + 1, sizeof *g->subgraphs);
  if (s != LOOM_OK) {
    loom_graph_destroy(sub);
    return s;
  }
  sub->owner = g;
  *index = g->n_subgraphs;
  g->subgraphs[g->n_subgraphs++] = sub;
  return LOOM_OK;
}

void ir_graph_drop_adopted(loom_graph_t *g, int64_t index, int64_t n_nodes) {
  /* A node hook may fail after the node went in: it names the subgraph. */
  if (g->n_nodes != n_nodes || index < 0 || index != g->n_subgraphs - 1) return;
  g->subgraphs[index]->owner = NULL;
  loom_graph_destroy(g->subgraphs[index]);
  g->n_subgraphs--;
}

/* Fails (with status) when subgraph `attr` of an op has a node that
 * writes state: a body cannot assign the outer graph's parameters. */
static loom_status_t check_stateless(loom_status_t status, const loom_graph_t *sub,
                                     ir_op_t op, const char *attr) {
  for (int64_t j = 0; j < sub->n_nodes; j++)
    if (ir_ops[sub->nodes[j].op].flags & F_SIDE_EFFECT)
      return loom_fail(status, "%s: %s writes state (node '%s'); a subgraph cannot",
                       ir_ops[op].name, attr, ir_ops[sub->nodes[j].op].name);
  return LOOM_OK;
}

loom_status_t ir_verify_subgraphs(const loom_graph_t *g, int64_t i) {
  const ir_node_t *n = &g->nodes[i];
  const char *names[2];
  int count = ir_subgraph_attrs(n->op, names);
  for (int k = 0; k < count; k++) {
    const loom_graph_t *sub = ir_node_subgraph(g, n, names[k]);
    if (!sub || sub->owner != g)
      return loom_fail(LOOM_ERR_GRAPH, "node %lld (%s): %s names no subgraph of this graph",
                       (long long)i, ir_ops[n->op].name, names[k]);
    LOOM_TRY(check_stateless(LOOM_ERR_GRAPH, sub, n->op, names[k]));
    LOOM_TRY(ir_verify(sub));
  }
  return LOOM_OK;
}

bool ir_node_data_shaped(const loom_graph_t *g, const ir_node_t *n) {
  if (!(ir_ops[n->op].flags & F_DATA_SHAPE)) return false;
  if (n->op != IR_OP_LOOP) return true;
  if (ir_attr_int(n->attrs, "use_cond", 1) == 0 && ir_counted_dim(g, n->in[0]) != -1)
    return false; /* its scan length is that dim */
  int64_t carried = ir_attr_int(n->attrs, "carried", 0);
  for (int64_t k = carried; k < n->n_out; k++) {
    const ir_type_t *t = &g->values[n->out[k]].type;
    if (t->rank > 0 && !ir_dim_is_const(t->dims[0])) return true;
  }
  return false;
}

ir_dim_t ir_counted_dim(const loom_graph_t *g, int32_t v) {
  const ir_value_t *s = &g->values[v];
  if (s->kind != IR_VALUE_NODE || s->type.rank != 0 || s->type.dtype != LOOM_I64) return -1;
  const ir_node_t *sum = &g->nodes[s->node];
  if (sum->op != IR_OP_SUM || sum->n_in != 1) return -1;
  const ir_value_t *f = &g->values[sum->in[0]];
  if (f->kind != IR_VALUE_NODE || f->type.rank != 1) return -1;
  const ir_node_t *full = &g->nodes[f->node];
  if (full->op != IR_OP_FULL || ir_attr_float(full->attrs, "value", 0) != 1.0) return -1;
  return f->type.dims[0]; /* a sum of rank 0 takes every axis */
}

/* ---- Types across the boundary -------------------------------------------- */

/* Dim d of graph `from` as a dim of g: constants as they are, symbols by
 * name, expressions rebuilt. *ok false when a symbol is not one of g's. */
static loom_status_t dim_across(loom_graph_t *g, const loom_graph_t *from,
                                ir_dim_t d, bool *ok, ir_dim_t *out) {
  const ir_expr_t *e = ir_dim_is_sym(d) ? ir_dim_expr(from, d) : NULL;
  if (!e) {
    *out = d;
    return LOOM_OK;
  }
  if (e->kind == IR_EXPR_CONST) {
    *out = e->c;
    return LOOM_OK;
  }
  if (e->kind == IR_EXPR_SYM) {
    for (int64_t i = 0; i < g->n_exprs; i++)
      if (g->exprs[i].kind == IR_EXPR_SYM && !strcmp(g->exprs[i].name, e->name))
        return ir_dim_symbol(g, e->name, out);
    *ok = false;
    *out = 0;
    return LOOM_OK;
  }
  ir_dim_t a, b;
  LOOM_TRY(dim_across(g, from, e->a, ok, &a));
  LOOM_TRY(dim_across(g, from, e->b, ok, &b));
  if (!*ok) return LOOM_OK;
  if (e->kind == IR_EXPR_ADD) return ir_dim_add(g, a, b, out);
  if (e->kind == IR_EXPR_MUL) return ir_dim_mul(g, a, b, out);
  return ir_dim_floordiv(g, a, b, out);
}

/* Type t of graph `from` as a type of g (see dim_across). */
static loom_status_t type_across(loom_graph_t *g, const loom_graph_t *from,
                                 const ir_type_t *t, bool *ok, ir_type_t *out) {
  *ok = true;
  *out = *t;
  for (int d = 0; d < t->rank; d++)
    LOOM_TRY(dim_across(g, from, t->dims[d], ok, &out->dims[d]));
  return LOOM_OK;
}

/* Fails unless outer type `want` equals type t of subgraph `sub`, where
 * `what` names t ("then_graph input 0"). */
static loom_status_t match_type(ir_infer_t *c, const ir_type_t *want,
                                const loom_graph_t *sub, const ir_type_t *t,
                                const char *what) {
  bool ok;
  ir_type_t across;
  LOOM_TRY(type_across(c->g, sub, t, &ok, &across));
  if (ok && ir_type_equal(&across, want)) return LOOM_OK;
  char a[160], b[160];
  return ir_shape_fail(c, "%s is %s, the outer value is %s", what,
                       ir_type_str(sub, t, a, sizeof a),
                       ir_type_str(c->g, want, b, sizeof b));
}

/* The outer type of output k of `sub`; fails when a dim of it is a
 * symbol the outer graph lacks (a size the body's data decides). */
static loom_status_t result_type(ir_infer_t *c, const loom_graph_t *sub,
                                 const char *name, int64_t k, ir_type_t *out) {
  bool ok;
  const ir_type_t *t = &sub->values[sub->outputs[k]].type;
  LOOM_TRY(type_across(c->g, sub, t, &ok, out));
  if (ok) return LOOM_OK;
  char a[160];
  return ir_shape_fail(c, "%s output %lld is %s, a size its inputs do not fix", name,
                       (long long)k, ir_type_str(sub, t, a, sizeof a));
}

/* Fails unless t is a rank-0 value of one of dtypes (named by kind). */
static loom_status_t check_scalar(ir_infer_t *c, const ir_type_t *t, uint32_t dtypes,
                                  const char *kind, const char *what) {
  if (t->rank == 0 && (DT_BIT(t->dtype) & dtypes)) return LOOM_OK;
  char a[160];
  return ir_shape_fail(c, "%s must be a rank-0 %s, not %s", what, kind,
                       ir_type_str(c->g, t, a, sizeof a));
}

/* The subgraph named by attribute attr, or a failure naming it. */
static loom_status_t need_subgraph(ir_infer_t *c, const char *attr,
                                   const loom_graph_t **out) {
  *out = ir_attrs_subgraph(c->g, c->attrs, attr);
  if (*out) return check_stateless(LOOM_ERR_INVALID, *out, c->op, attr);
  return loom_fail(LOOM_ERR_INVALID, "%s: attribute %s names no subgraph of this graph",
                   ir_ops[c->op].name, attr);
}

/* ---- if ------------------------------------------------------------------- */

static loom_status_t check_branch_inputs(ir_infer_t *c, const loom_graph_t *b,
                                         const char *name) {
  if (b->n_inputs != c->n_in - 1)
    return ir_shape_fail(c, "%s takes %lld inputs, the node passes %d", name,
                         (long long)b->n_inputs, c->n_in - 1);
  for (int i = 1; i < c->n_in; i++) {
    char what[64];
    snprintf(what, sizeof what, "%s input %d", name, i - 1);
    LOOM_TRY(match_type(c, c->in[i], b, &b->values[b->inputs[i - 1]].type, what));
  }
  return LOOM_OK;
}

loom_status_t ir_shape_if(ir_infer_t *c) {
  const loom_graph_t *then_g, *else_g;
  LOOM_TRY(need_subgraph(c, "then_graph", &then_g));
  LOOM_TRY(need_subgraph(c, "else_graph", &else_g));
  LOOM_TRY(check_scalar(c, c->in[0], DT_COND, "bool or integer", "cond"));
  LOOM_TRY(check_branch_inputs(c, then_g, "then_graph"));
  LOOM_TRY(check_branch_inputs(c, else_g, "else_graph"));
  if (then_g->n_outputs != else_g->n_outputs)
    return ir_shape_fail(c, "then_graph has %lld outputs, else_graph %lld",
                         (long long)then_g->n_outputs, (long long)else_g->n_outputs);
  for (int k = 0; k < c->n_out; k++) {
    ir_type_t other;
    LOOM_TRY(result_type(c, then_g, "then_graph", k, &c->out[k]));
    LOOM_TRY(result_type(c, else_g, "else_graph", k, &other));
    if (!ir_type_equal(&c->out[k], &other)) {
      char a[160], b[160];
      return ir_shape_fail(c, "output %d is %s in then_graph and %s in else_graph", k,
                           ir_type_str(c->g, &c->out[k], a, sizeof a),
                           ir_type_str(c->g, &other, b, sizeof b));
    }
  }
  return LOOM_OK;
}

/* ---- loop ----------------------------------------------------------------- */

/* The trip count when it is known now: a max_trip that is a constant
 * (or a rank-0 full, as a trace records one) and no condition. -1 when
 * only a run can tell. */
static loom_status_t static_trips(ir_infer_t *c, int64_t *trips) {
  *trips = -1;
  const ir_value_t *m = &c->g->values[c->in_ids[0]];
  bool use_cond = ir_attr_int(c->attrs, "use_cond", 1) != 0;
  if (use_cond) return LOOM_OK;
  int64_t v;
  if (m->kind == IR_VALUE_CONST) {
    v = dtype_load_i64(m->data->dtype, m->data->data);
  } else if (m->kind == IR_VALUE_NODE && c->g->nodes[m->node].op == IR_OP_FULL &&
             m->type.rank == 0) {
    double f = ir_attr_float(c->g->nodes[m->node].attrs, "value", 0);
    if (!(f >= -9.2e18 && f <= 9.2e18)) return LOOM_OK; /* as a run would read it */
    v = (int64_t)f;
  } else {
    return LOOM_OK;
  }
  if (v == INT64_MAX)
    return loom_fail(LOOM_ERR_INVALID,
                     "loop: neither a trip count nor a condition: it would never end");
  *trips = v < 0 ? 0 : v;
  return LOOM_OK;
}

static loom_status_t check_body_io(ir_infer_t *c, const loom_graph_t *body,
                                   int64_t carried) {
  if (carried < 0 || carried > c->n_in - 2)
    return loom_fail(LOOM_ERR_INVALID, "loop: %lld carried values, but %d inputs follow "
                     "max_trip and cond", (long long)carried, c->n_in - 2);
  if (body->n_inputs != c->n_in)
    return ir_shape_fail(c, "the body takes %lld inputs; it needs %d (iteration, cond, "
                         "%lld carried, %lld invariant)", (long long)body->n_inputs,
                         c->n_in, (long long)carried, (long long)(c->n_in - 2 - carried));
  if (body->n_outputs < 1 + carried)
    return ir_shape_fail(c, "the body returns %lld outputs; it needs at least %lld "
                         "(cond, %lld carried)", (long long)body->n_outputs,
                         (long long)(1 + carried), (long long)carried);
  const ir_type_t *iter = &body->values[body->inputs[0]].type;
  const ir_type_t *cond_in = &body->values[body->inputs[1]].type;
  const ir_type_t *cond_out = &body->values[body->outputs[0]].type;
  LOOM_TRY(check_scalar(c, iter, DT_BIT(LOOM_I64), "i64", "body input 0 (iteration)"));
  LOOM_TRY(check_scalar(c, cond_in, DT_BOOL, "bool", "body input 1 (cond)"));
  return check_scalar(c, cond_out, DT_BOOL, "bool", "body output 0 (cond)");
}

static loom_status_t check_loop_values(ir_infer_t *c, const loom_graph_t *body,
                                       int64_t carried) {
  for (int i = 2; i < c->n_in; i++) {
    char what[64];
    bool is_carried = i < 2 + carried;
    snprintf(what, sizeof what, "body input %d (%s)", i, is_carried ? "carried" : "invariant");
    LOOM_TRY(match_type(c, c->in[i], body, &body->values[body->inputs[i]].type, what));
    if (!is_carried) continue;
    /* A carried value keeps its type from one iteration to the next. */
    snprintf(what, sizeof what, "body output %d (carried)", i - 1);
    LOOM_TRY(match_type(c, c->in[i], body, &body->values[body->outputs[i - 1]].type, what));
  }
  return LOOM_OK;
}

loom_status_t ir_shape_loop(ir_infer_t *c) {
  const loom_graph_t *body;
  LOOM_TRY(need_subgraph(c, "body", &body));
  int64_t carried = ir_attr_int(c->attrs, "carried", 0);
  LOOM_TRY(check_scalar(c, c->in[0], DT_INT, "integer", "max_trip"));
  LOOM_TRY(check_scalar(c, c->in[1], DT_COND, "bool or integer", "cond"));
  LOOM_TRY(check_body_io(c, body, carried));
  LOOM_TRY(check_loop_values(c, body, carried));
  int64_t trips;
  LOOM_TRY(static_trips(c, &trips));
  ir_dim_t len = trips;
  if (trips < 0 && ir_attr_int(c->attrs, "use_cond", 1) == 0)
    len = ir_counted_dim(c->g, c->in_ids[0]);
  if (len == -1 && c->n_out > carried) LOOM_TRY(ir_dim_fresh_symbol(c->g, "trips", &len));
  for (int k = 0; k < c->n_out; k++) {
    if (k < carried) {
      c->out[k] = *c->in[2 + k];
      continue;
    }
    ir_type_t t;
    LOOM_TRY(result_type(c, body, "body", k + 1, &t));
    if (t.rank + 1 > LOOM_MAX_RANK)
      return ir_shape_fail(c, "scan output %lld would have rank %d (at most %d)",
                           (long long)(k - carried), t.rank + 1, LOOM_MAX_RANK);
    c->out[k] = (ir_type_t){.dtype = t.dtype, .rank = t.rank + 1, .dims = {len}};
    memcpy(&c->out[k].dims[1], t.dims, sizeof(ir_dim_t) * (size_t)t.rank);
  }
  return LOOM_OK;
}

/* ---- Builders ------------------------------------------------------------- */

loom_status_t loom_if(loom_graph_t *g, loom_value_t cond, loom_graph_t *then_g,
                      loom_graph_t *else_g, int n_in, const loom_value_t *in,
                      int n_out, loom_value_t *out) {
  if (!g || (n_out > 0 && !out) || n_in < 0 || n_out < 0 || (n_in > 0 && !in) ||
      n_in > 4096 || n_out > 4096) {
    ir_graph_drop_unowned(g, then_g);
    if (else_g != then_g) ir_graph_drop_unowned(g, else_g);
    return loom_fail(LOOM_ERR_INVALID, "if: %s", !g ? "the graph is null"
                     : n_out > 0 && !out ? "out is null" : "bad input or output count");
  }
  int64_t ti = -1, ei = -1, n_nodes = g->n_nodes;
  loom_status_t s = ir_graph_adopt(g, then_g, &ti);
  if (s != LOOM_OK) {
    if (else_g != then_g) ir_graph_drop_unowned(g, else_g);
    return loom_fail(s, "if: then_graph: %s", loom_last_error());
  }
  s = ir_graph_adopt(g, else_g, &ei);
  if (s != LOOM_OK) {
    ir_graph_drop_adopted(g, ti, n_nodes);
    return loom_fail(s, "if: else_graph: %s", loom_last_error());
  }
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "then_graph", ti);
  ir_attrs_int(&a, "else_graph", ei);
  int32_t ids[n_in + 1], res[n_out > 0 ? n_out : 1];
  ids[0] = cond.id;
  for (int i = 0; i < n_in; i++) ids[i + 1] = in[i].id;
  if (then_g->n_outputs != n_out)
    s = loom_fail(LOOM_ERR_INVALID, "if: the branches return %lld outputs, room for %d "
                  "was given", (long long)then_g->n_outputs, n_out);
  if (s == LOOM_OK) s = ir_add_node(g, IR_OP_IF, n_in + 1, ids, &a, res, n_out);
  if (s != LOOM_OK) {
    ir_graph_drop_adopted(g, ei, n_nodes);
    ir_graph_drop_adopted(g, ti, n_nodes);
    return s;
  }
  for (int k = 0; k < n_out; k++) out[k].id = res[k];
  return LOOM_OK;
}

/* A rank-0 constant standing for an absent loop input. */
static loom_status_t scalar_constant(loom_graph_t *g, loom_dtype_t dtype, int64_t v,
                                     loom_value_t *out) {
  loom_tensor_t *t;
  LOOM_TRY(tensor_new(dtype, 0, NULL, &t));
  dtype_store_i64(dtype, t->data, v);
  loom_status_t s = loom_graph_constant(g, t, out);
  loom_tensor_destroy(t);
  return s;
}

static loom_status_t build_loop(loom_graph_t *g, int64_t body, loom_value_t max_trip,
                                loom_value_t cond, int n_carried, const loom_value_t *init,
                                int n_invariant, const loom_value_t *invariants,
                                int n_out, loom_value_t *out) {
  bool use_cond = cond.id >= 0;
  if (max_trip.id < 0) LOOM_TRY(scalar_constant(g, LOOM_I64, INT64_MAX, &max_trip));
  if (!use_cond) LOOM_TRY(scalar_constant(g, LOOM_BOOL, 1, &cond));
  int n_in = 2 + n_carried + n_invariant;
  int32_t ids[n_in], res[n_out > 0 ? n_out : 1];
  ids[0] = max_trip.id;
  ids[1] = cond.id;
  for (int i = 0; i < n_carried; i++) ids[2 + i] = init[i].id;
  for (int i = 0; i < n_invariant; i++) ids[2 + n_carried + i] = invariants[i].id;
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "body", body);
  ir_attrs_int(&a, "carried", n_carried);
  ir_attrs_int(&a, "use_cond", use_cond);
  int want = ir_control_n_out(g, IR_OP_LOOP, &a);
  if (want != n_out)
    return loom_fail(LOOM_ERR_INVALID, "loop: the body makes %d results (%d carried, %d "
                     "scan), room for %d was given", want, n_carried, want - n_carried, n_out);
  LOOM_TRY(ir_add_node(g, IR_OP_LOOP, n_in, ids, &a, res, n_out));
  for (int k = 0; k < n_out; k++) out[k].id = res[k];
  return LOOM_OK;
}

loom_status_t loom_loop(loom_graph_t *g, loom_value_t max_trip, loom_value_t cond,
                        loom_graph_t *body, int n_carried, const loom_value_t *init,
                        int n_invariant, const loom_value_t *invariants, int n_out,
                        loom_value_t *out) {
  bool bad_counts = n_carried < 0 || n_invariant < 0 || n_out < 0 ||
                    (n_carried > 0 && !init) || (n_invariant > 0 && !invariants) ||
                    n_carried > 4096 || n_invariant > 4096 || n_out > 4096;
  if (!g || (n_out > 0 && !out) || bad_counts) {
    ir_graph_drop_unowned(g, body);
    return loom_fail(LOOM_ERR_INVALID, "loop: %s", !g ? "the graph is null"
                     : n_out > 0 && !out ? "out is null"
                     : "bad carried, invariant or output count");
  }
  int64_t bi = -1, n_nodes = g->n_nodes;
  loom_status_t s = ir_graph_adopt(g, body, &bi);
  if (s != LOOM_OK) return loom_fail(s, "loop: body: %s", loom_last_error());
  s = build_loop(g, bi, max_trip, cond, n_carried, init, n_invariant, invariants, n_out, out);
  if (s != LOOM_OK) ir_graph_drop_adopted(g, bi, n_nodes);
  return s;
}
