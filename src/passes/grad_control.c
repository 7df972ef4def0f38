/* Gradient rules of the control ops.
 *
 * if: an if over the branches' gradients. Each gradient branch is its
 * branch with the incoming gradients dy as extra inputs, differentiated
 * (loom_grad) through sum_k sum(y_k * dy_k), whose gradient with respect
 * to an input is the vector-Jacobian product the rule needs. The
 * condition picks the same branch as the forward if.
 *
 * loop: reverse-mode through the iterations. A recording loop runs the
 * forward again with the carried values each iteration starts from
 * stacked as extra scan outputs (the buffer the backward reads, planned
 * like any value) and an iteration counter as an extra carried value.
 * A backward loop then runs as many iterations, t from the last down to
 * 0: its body picks iteration t's carried values and scan gradients out
 * of the stacks and runs the body's vector-Jacobian product (the body's
 * gradient branch, as for if, inlined), carrying the gradients of the
 * carried values from one iteration to the one before and summing the
 * invariants' gradients. */
#include <stdio.h>

#include <string.h>

#include "core/status.h"
#include "ir/rewrite.h"
#include "passes/grad.h"

/* sum(y * dy) of branch gb, in f64 so that outputs of several float
 * dtypes add up. */
static loom_status_t dot_term(loom_graph_t *gb, int32_t y, int32_t dy, loom_value_t *out) {
  loom_value_t p, s;
  LOOM_TRY(loom_mul(gb, (loom_value_t){y}, (loom_value_t){dy}, &p));
  LOOM_TRY(loom_sum(gb, p, 0, NULL, 0, &s));
  return loom_cast(gb, s, LOOM_F64, out);
}

/* The gradient branch of `branch` (a clone, changed in place): inputs
 * (x..., dy for each output k with dout[k] set), outputs the gradients
 * of its float inputs. */
static loom_status_t grad_branch(loom_graph_t *gb, const int32_t *dout, int n_out) {
  int64_t n_x = gb->n_inputs;
  loom_value_t loss = {-1};
  for (int k = 0; k < n_out; k++) {
    if (dout[k] < 0) continue;
    ir_type_t t = gb->values[gb->outputs[k]].type;
    char name[32];
    snprintf(name, sizeof name, "dy%d", k);
    loom_value_t dy, term;
    LOOM_TRY(ir_graph_input(gb, name, t.dtype, t.rank, t.dims, &dy));
    LOOM_TRY(dot_term(gb, gb->outputs[k], dy.id, &term));
    if (loss.id < 0) loss = term;
    else LOOM_TRY(loom_add(gb, loss, term, &loss));
  }
  loom_value_t wrt[n_x > 0 ? n_x : 1], grads[n_x > 0 ? n_x : 1];
  int n_w = 0;
  for (int64_t i = 0; i < n_x; i++)
    if (dtype_is_float(gb->values[gb->inputs[i]].type.dtype)) wrt[n_w++].id = gb->inputs[i];
  LOOM_TRY(loom_grad(gb, loss, n_w, wrt, grads));
  gb->n_outputs = 0;
  for (int i = 0; i < n_w; i++) LOOM_TRY(loom_graph_output(gb, grads[i]));
  return LOOM_OK;
}

/* Adds to c->g the gradient branch of subgraph `attr`; its index in *index. */
static loom_status_t add_grad_branch(grad_ctx_t *c, const char *attr, int64_t *index) {
  loom_graph_t *branch = ir_node_subgraph(c->g, &c->node, attr), *gb;
  if (!branch) return loom_fail(LOOM_ERR_GRAPH, "if: %s names no subgraph", attr);
  LOOM_TRY(ir_graph_clone(branch, &gb));
  loom_status_t s = grad_branch(gb, c->dout, c->node.n_out);
  if (s != LOOM_OK) {
    loom_graph_destroy(gb);
    return loom_fail(s, "gradient of if, %s: %s", attr, loom_last_error());
  }
  return ir_graph_adopt(c->g, gb, index);
}

loom_status_t grad_if(grad_ctx_t *c) {
  const ir_node_t *n = &c->node;
  int n_w = 0;
  for (int i = 1; i < n->n_in; i++) n_w += dtype_is_float(c->g->values[n->in[i]].type.dtype);
  if (n_w == 0) return LOOM_OK; /* no input takes a gradient */
  int64_t then_i, else_i;
  LOOM_TRY(add_grad_branch(c, "then_graph", &then_i));
  LOOM_TRY(add_grad_branch(c, "else_graph", &else_i));
  int32_t in[n->n_in + n->n_out], dx[n->n_in];
  int n_in = 0;
  for (int i = 0; i < n->n_in; i++) in[n_in++] = n->in[i];
  for (int k = 0; k < n->n_out; k++)
    if (c->dout[k] >= 0) in[n_in++] = c->dout[k];
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "then_graph", then_i);
  ir_attrs_int(&a, "else_graph", else_i);
  LOOM_TRY(ir_add_node(c->g, IR_OP_IF, n_in, in, &a, dx, n_w));
  for (int i = 1, w = 0; i < n->n_in; i++)
    if (dtype_is_float(c->g->values[n->in[i]].type.dtype)) c->din[i] = dx[w++];
  return LOOM_OK;
}

/* ---- loop ------------------------------------------------------------------ */

typedef struct loop_parts {
  loom_graph_t *body;
  int carried, invariants, scans;
} loop_parts_t;

/* The dims of type t of graph `from` as dims of g, symbols matched (or
 * made) by name. */
static loom_status_t import_dims(loom_graph_t *g, const loom_graph_t *from, const ir_type_t *t,
                                 loom_dim_t *dims) {
  for (int d = 0; d < t->rank; d++) {
    const ir_expr_t *e = ir_dim_is_sym(t->dims[d]) ? ir_dim_expr(from, t->dims[d]) : NULL;
    if (!e || e->kind == IR_EXPR_CONST) {
      dims[d] = e ? e->c : t->dims[d];
      continue;
    }
    if (e->kind != IR_EXPR_SYM)
      return loom_fail(LOOM_ERR_UNSUPPORTED, "gradient of loop: a stacked value's dim is an "
                       "expression of symbols; only sizes and plain symbols are supported");
    LOOM_TRY(ir_dim_symbol(g, e->name, &dims[d]));
  }
  return LOOM_OK;
}

/* An input of g typed as value v of `from`. */
static loom_status_t input_like(loom_graph_t *g, const loom_graph_t *from, int32_t v,
                                const char *name, loom_value_t *out) {
  const ir_type_t *t = &from->values[v].type;
  loom_dim_t dims[LOOM_MAX_RANK];
  LOOM_TRY(import_dims(g, from, t, dims));
  return loom_graph_input(g, name, t->dtype, t->rank, dims, out);
}

static bool is_float(const loom_graph_t *g, int32_t v) {
  return dtype_is_float(g->values[v].type.dtype);
}

/* The recording body: body with an i64 counter carried after the carried
 * values (k -> k + 1) and each iteration's carried inputs stacked as
 * scan outputs after the body's own. */
static loom_status_t recording_body(const loop_parts_t *lp, loom_graph_t **out) {
  const loom_graph_t *b = lp->body;
  ir_rewriter_t rw;
  LOOM_TRY(ir_rewrite_begin_no_inputs(b, &rw));
  loom_graph_t *d = rw.dst;
  loom_value_t k, x, one, next;
  loom_status_t s = LOOM_OK;
  for (int i = 0; s == LOOM_OK && i < (int)b->n_inputs; i++) {
    if (i == 2 + lp->carried) s = loom_graph_input(d, "counter", LOOM_I64, 0, NULL, &k);
    if (s == LOOM_OK) s = input_like(d, b, b->inputs[i], NULL, &x);
    if (s == LOOM_OK) ir_rewrite_map(&rw, b->inputs[i], x.id);
  }
  if (s == LOOM_OK && lp->invariants == 0)
    s = loom_graph_input(d, "counter", LOOM_I64, 0, NULL, &k);
  for (int64_t i = 0; s == LOOM_OK && i < b->n_nodes; i++) s = ir_rewrite_copy(&rw, i);
  if (s == LOOM_OK) s = loom_full(d, 0, NULL, 1, LOOM_I64, &one);
  if (s == LOOM_OK) s = loom_add(d, k, one, &next);
  int32_t res[b->n_outputs + 1];
  for (int64_t i = 0; s == LOOM_OK && i < b->n_outputs; i++)
    res[i] = ir_rewrite_lookup(&rw, b->outputs[i]);
  int32_t stacked[lp->carried + 1];
  for (int i = 0; s == LOOM_OK && i < lp->carried; i++)
    stacked[i] = ir_rewrite_lookup(&rw, b->inputs[2 + i]);
  if (s == LOOM_OK) s = ir_rewrite_finish(&rw, out);
  else ir_rewrite_abort(&rw);
  if (s != LOOM_OK) return s;
  d = *out;
  d->n_outputs = 0;
  for (int i = 0; s == LOOM_OK && i <= lp->carried; i++)
    s = loom_graph_output(d, (loom_value_t){res[i]});
  if (s == LOOM_OK) s = loom_graph_output(d, next);
  for (int i = 0; s == LOOM_OK && i < lp->scans; i++)
    s = loom_graph_output(d, (loom_value_t){res[1 + lp->carried + i]});
  for (int i = 0; s == LOOM_OK && i < lp->carried; i++)
    s = loom_graph_output(d, (loom_value_t){stacked[i]});
  if (s != LOOM_OK) {
    loom_graph_destroy(*out);
    *out = NULL;
  }
  return s;
}

/* Slice t (rank-0 i64 of g) of stacked value v: its leading axis dropped. */
static loom_status_t pick(loom_graph_t *g, loom_value_t v, loom_value_t t, loom_value_t *out) {
  loom_value_t at, row;
  int64_t zero = 0;
  LOOM_TRY(loom_unsqueeze(g, t, 1, &zero, &at));
  LOOM_TRY(loom_index_select(g, v, at, 0, &row));
  return loom_squeeze(g, row, 1, &zero, out);
}

/* The inputs of the backward body, in the loop's order: (j, cond,
 * carried: the float carried values' gradients then the float
 * invariants' sums, invariants: the stacked carried values, the stacked
 * scan gradients, the invariants, the trip count). */
typedef struct grad_body_in {
  loom_value_t j, cond, trips, t;
  loom_value_t *g_carried, *g_inv, *stacked, *dscan, *inv;
} grad_body_in_t;

/* Adds bb's inputs (types from the outer graph g's values: the forward
 * node n, its recording loop's stacks, the scan gradients dout). */
static loom_status_t grad_body_inputs(loom_graph_t *bb, const grad_ctx_t *c,
                                      const loop_parts_t *lp, const int32_t *stacks,
                                      grad_body_in_t *in) {
  const ir_node_t *n = &c->node;
  const loom_graph_t *g = c->g;
  int nf = 0, nv = 0, ns = 0;
  LOOM_TRY(loom_graph_input(bb, "j", LOOM_I64, 0, NULL, &in->j));
  LOOM_TRY(loom_graph_input(bb, "cond", LOOM_BOOL, 0, NULL, &in->cond));
  for (int i = 0; i < lp->carried; i++)
    if (is_float(g, n->in[2 + i])) LOOM_TRY(input_like(bb, g, n->in[2 + i], NULL, &in->g_carried[nf++]));
  for (int v = 0; v < lp->invariants; v++)
    if (is_float(g, n->in[2 + lp->carried + v]))
      LOOM_TRY(input_like(bb, g, n->in[2 + lp->carried + v], NULL, &in->g_inv[nv++]));
  for (int i = 0; i < lp->carried; i++) LOOM_TRY(input_like(bb, g, stacks[i], NULL, &in->stacked[i]));
  for (int k = 0; k < lp->scans; k++)
    if (c->dout[lp->carried + k] >= 0 && is_float(g, n->out[lp->carried + k]))
      LOOM_TRY(input_like(bb, g, c->dout[lp->carried + k], NULL, &in->dscan[ns++]));
  for (int v = 0; v < lp->invariants; v++)
    LOOM_TRY(input_like(bb, g, n->in[2 + lp->carried + v], NULL, &in->inv[v]));
  LOOM_TRY(loom_graph_input(bb, "trips", LOOM_I64, 0, NULL, &in->trips));
  loom_value_t one, last; /* t = trips - 1 - j */
  LOOM_TRY(loom_full(bb, 0, NULL, 1, LOOM_I64, &one));
  LOOM_TRY(loom_sub(bb, in->trips, one, &last));
  return loom_sub(bb, last, in->j, &in->t);
}

/* The backward body: the body's gradient branch gb (inputs: iteration,
 * cond, carried, invariants, then the seeds of the float carried outputs
 * and of the seeded scans; outputs: the gradients of the float carried
 * values, then of the float invariants) inlined after the picks. */
static loom_status_t grad_body(const grad_ctx_t *c, const loop_parts_t *lp, loom_graph_t *gb,
                               const int32_t *stacks, loom_graph_t **out) {
  int C = lp->carried, V = lp->invariants, S = lp->scans;
  loom_value_t g_carried[C + 1], g_inv[V + 1], stacked[C + 1], dscan[S + 1], inv[V + 1];
  grad_body_in_t in = {.g_carried = g_carried, .g_inv = g_inv, .stacked = stacked,
                       .dscan = dscan, .inv = inv};
  ir_rewriter_t rw;
  LOOM_TRY(ir_rewrite_begin_no_inputs(gb, &rw));
  loom_graph_t *bb = rw.dst;
  loom_status_t s = grad_body_inputs(bb, c, lp, stacks, &in);
  /* gb's inputs, mapped */
  int at = 0, nf = 0, ns = 0;
  if (s == LOOM_OK) ir_rewrite_map(&rw, gb->inputs[at++], in.t.id);
  if (s == LOOM_OK) ir_rewrite_map(&rw, gb->inputs[at++], in.cond.id);
  for (int i = 0; s == LOOM_OK && i < C; i++) {
    loom_value_t x;
    s = pick(bb, stacked[i], in.t, &x);
    if (s == LOOM_OK) ir_rewrite_map(&rw, gb->inputs[at++], x.id);
  }
  for (int v = 0; s == LOOM_OK && v < V; v++) ir_rewrite_map(&rw, gb->inputs[at++], inv[v].id);
  for (int i = 0; s == LOOM_OK && i < C; i++)
    if (is_float(c->g, c->node.in[2 + i])) ir_rewrite_map(&rw, gb->inputs[at++], g_carried[nf++].id);
  for (int k = 0; s == LOOM_OK && k < S; k++) {
    if (c->dout[C + k] < 0 || !is_float(c->g, c->node.out[C + k])) continue;
    loom_value_t dy;
    s = pick(bb, dscan[ns++], in.t, &dy);
    if (s == LOOM_OK) ir_rewrite_map(&rw, gb->inputs[at++], dy.id);
  }
  for (int64_t i = 0; s == LOOM_OK && i < gb->n_nodes; i++) s = ir_rewrite_copy(&rw, i);
  int n_res = (int)gb->n_outputs;
  int32_t res[n_res + 1];
  for (int i = 0; s == LOOM_OK && i < n_res; i++) res[i] = ir_rewrite_lookup(&rw, gb->outputs[i]);
  int32_t cond = in.cond.id;
  if (s == LOOM_OK) s = ir_rewrite_finish(&rw, out);
  else ir_rewrite_abort(&rw);
  if (s != LOOM_OK) return s;
  bb = *out;
  bb->n_outputs = 0;
  s = loom_graph_output(bb, (loom_value_t){cond});
  for (int i = 0; s == LOOM_OK && i < nf; i++) s = loom_graph_output(bb, (loom_value_t){res[i]});
  for (int v = 0; s == LOOM_OK && v < n_res - nf; v++) {
    loom_value_t sum;
    s = loom_add(bb, g_inv[v], (loom_value_t){res[nf + v]}, &sum);
    if (s == LOOM_OK) s = loom_graph_output(bb, sum);
  }
  if (s != LOOM_OK) {
    loom_graph_destroy(*out);
    *out = NULL;
  }
  return s;
}

/* Zeros of value v's type in g. */
static loom_status_t zeros_like(loom_graph_t *g, int32_t v, loom_value_t *out) {
  ir_type_t t = g->values[v].type;
  return loom_full(g, t.rank, t.dims, 0, t.dtype, out);
}

/* The recording loop: the forward again, with the counter and the stacks. */
static loom_status_t record(grad_ctx_t *c, const loop_parts_t *lp, loom_value_t *trips,
                            int32_t *stacks) {
  const ir_node_t *n = &c->node;
  int C = lp->carried, V = lp->invariants, S = lp->scans;
  loom_graph_t *rb;
  LOOM_TRY(recording_body(lp, &rb));
  loom_value_t init[C + 2], inv[V + 1], res[2 * C + S + 2];
  for (int i = 0; i < C; i++) init[i].id = n->in[2 + i];
  loom_status_t s = loom_full(c->g, 0, NULL, 0, LOOM_I64, &init[C]);
  if (s != LOOM_OK) {
    loom_graph_destroy(rb);
    return s;
  }
  for (int v = 0; v < V; v++) inv[v].id = n->in[2 + C + v];
  bool use_cond = ir_attr_int(n->attrs, "use_cond", 1) != 0;
  loom_value_t cond = use_cond ? (loom_value_t){n->in[1]} : LOOM_NO_VALUE;
  LOOM_TRY(loom_loop(c->g, (loom_value_t){n->in[0]}, cond, rb, C + 1, init, V, inv,
                     2 * C + S + 1, res));
  *trips = res[C];
  for (int i = 0; i < C; i++) stacks[i] = res[C + 1 + S + i].id;
  return LOOM_OK;
}

loom_status_t grad_loop(grad_ctx_t *c) {
  const ir_node_t *n = &c->node;
  loop_parts_t lp = {.body = ir_node_subgraph(c->g, n, "body"),
                     .carried = (int)ir_attr_int(n->attrs, "carried", 0)};
  if (!lp.body) return loom_fail(LOOM_ERR_GRAPH, "loop: body names no subgraph");
  lp.invariants = n->n_in - 2 - lp.carried;
  lp.scans = n->n_out - lp.carried;
  int C = lp.carried, V = lp.invariants, S = lp.scans, nf = 0, nv = 0;
  for (int i = 0; i < C; i++) nf += is_float(c->g, n->in[2 + i]);
  for (int v = 0; v < V; v++) nv += is_float(c->g, n->in[2 + C + v]);
  if (nf + nv == 0) return LOOM_OK; /* no input takes a gradient */
  /* The body's gradient branch: seeds for the float carried outputs and
   * the scans a gradient reaches. */
  int32_t seeded[1 + C + S];
  seeded[0] = -1;
  for (int i = 0; i < C; i++) seeded[1 + i] = is_float(c->g, n->in[2 + i]) ? 1 : -1;
  for (int k = 0; k < S; k++)
    seeded[1 + C + k] = c->dout[C + k] >= 0 && is_float(c->g, n->out[C + k]) ? 1 : -1;
  loom_graph_t *gb, *bb = NULL;
  LOOM_TRY(ir_graph_clone(lp.body, &gb));
  loom_status_t s = grad_branch(gb, seeded, 1 + C + S);
  loom_value_t trips;
  int32_t stacks[C + 1];
  if (s == LOOM_OK) s = record(c, &lp, &trips, stacks);
  n = &c->node;
  lp.body = ir_node_subgraph(c->g, n, "body"); /* adopting moved the array */
  if (s == LOOM_OK) s = grad_body(c, &lp, gb, stacks, &bb);
  loom_graph_destroy(gb);
  if (s != LOOM_OK) return loom_fail(s, "gradient of loop: %s", loom_last_error());
  /* The backward loop: carried (gradients of the float carried values,
   * sums of the float invariants'), then invariants (stacks, scan
   * gradients, invariants, trip count). */
  loom_value_t init[nf + nv + 1], inv[C + S + V + 2], res[nf + nv + 1];
  int a = 0, b = 0;
  for (int i = 0; s == LOOM_OK && i < C; i++) {
    if (!is_float(c->g, n->in[2 + i])) continue;
    if (c->dout[i] >= 0) init[a++].id = c->dout[i];
    else s = zeros_like(c->g, n->in[2 + i], &init[a++]);
  }
  for (int v = 0; s == LOOM_OK && v < V; v++)
    if (is_float(c->g, n->in[2 + C + v])) s = zeros_like(c->g, n->in[2 + C + v], &init[a++]);
  for (int i = 0; i < C; i++) inv[b++].id = stacks[i];
  for (int k = 0; k < S; k++)
    if (c->dout[C + k] >= 0 && is_float(c->g, n->out[C + k])) inv[b++].id = c->dout[C + k];
  for (int v = 0; v < V; v++) inv[b++].id = n->in[2 + C + v];
  inv[b++] = trips;
  if (s != LOOM_OK) {
    loom_graph_destroy(bb);
    return s;
  }
  LOOM_TRY(loom_loop(c->g, trips, LOOM_NO_VALUE, bb, a, init, b, inv, a, res));
  for (int i = 0, w = 0; i < C; i++)
    if (is_float(c->g, n->in[2 + i])) c->din[2 + i] = res[w++].id;
  for (int v = 0, w = nf; v < V; v++)
    if (is_float(c->g, n->in[2 + C + v])) c->din[2 + C + v] = res[w++].id;
  return LOOM_OK;
}
