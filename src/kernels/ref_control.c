/* Reference kernels of if and loop: each runs its subgraphs with the
 * interpreter, deciding on the host which branch runs and how often. */
#include <string.h>

#include "core/alloc.h"
#include "kernels/ref.h"

/* Copies t into the preallocated out, or hands t over when out is
 * empty (a kernel that makes its outputs). */
static loom_status_t deliver(ref_call_t *c, int k, loom_tensor_t *t) {
  if (!c->out[k]) {
    c->out[k] = t;
    return LOOM_OK;
  }
  loom_tensor_t *o = c->out[k];
  bool same = o->dtype == t->dtype && o->rank == t->rank &&
              !memcmp(o->shape, t->shape, sizeof(int64_t) * (size_t)t->rank);
  loom_status_t s = LOOM_OK;
  if (!same) {
    char want[160], got[160];
    s = loom_fail(LOOM_ERR_SHAPE, "%s: result %d is %s %s, the node declares %s %s",
                  ref_name(c), k, loom_dtype_name(t->dtype),
                  shape_str(t->rank, t->shape, got, sizeof got), loom_dtype_name(o->dtype),
                  shape_str(o->rank, o->shape, want, sizeof want));
  } else {
    memcpy(o->data, t->data, (size_t)loom_tensor_numel(t) * loom_dtype_size(t->dtype));
  }
  loom_tensor_destroy(t);
  return s;
}

/* Runs subgraph sub on ins; its outputs go to outs (new tensors). */
static loom_status_t run_subgraph(ref_call_t *c, const char *which, loom_graph_t *sub,
                                  int n_in, const loom_tensor_t *const *ins, int n_out,
                                  loom_tensor_t **outs) {
  if (!sub)
    return loom_fail(LOOM_ERR_GRAPH, "%s: %s names no subgraph", ref_name(c), which);
  /* The interpreter only reads its inputs. */
  loom_status_t s = loom_interpret(sub, n_in, (loom_tensor_t *const *)ins, n_out, outs);
  if (s != LOOM_OK) return loom_fail(s, "%s: in %s: %s", ref_name(c), which, loom_last_error());
  return LOOM_OK;
}

loom_status_t ref_if(ref_call_t *c) {
  bool cond = ref_geti(c->in[0], 0) != 0;
  const char *which = cond ? "then_graph" : "else_graph";
  loom_graph_t *sub = ir_node_subgraph(c->g, c->node, which);
  loom_tensor_t *outs[c->n_out > 0 ? c->n_out : 1];
  LOOM_TRY(run_subgraph(c, which, sub, c->n_in - 1, c->in + 1, c->n_out, outs));
  loom_status_t s = LOOM_OK;
  for (int k = 0; k < c->n_out; k++) {
    if (s == LOOM_OK) s = deliver(c, k, outs[k]);
    else loom_tensor_destroy(outs[k]);
  }
  return s;
}

/* ---- loop ----------------------------------------------------------------- */

/* One run of a loop: the body's inputs and the results gathered so far. */
typedef struct loop_run {
  int n_carried, n_scan;
  const loom_tensor_t **body_in; /* iteration, cond, carried.., invariants.. */
  bool *carried_owned;           /* body_in[2 + k] was made by the loop */
  loom_tensor_t **scans;         /* per iteration, n_scan results */
  int64_t n_iters, cap_iters;
} loop_run_t;

static void loop_run_free(loop_run_t *r) {
  for (int k = 0; r->carried_owned && k < r->n_carried; k++)
    if (r->carried_owned[k]) loom_tensor_destroy((loom_tensor_t *)r->body_in[2 + k]);
  for (int64_t i = 0; r->scans && i < r->n_iters * r->n_scan; i++)
    loom_tensor_destroy(r->scans[i]);
  core_free(r->body_in);
  core_free(r->carried_owned);
  core_free(r->scans);
}

/* One iteration: runs the body, takes its carried results as the next
 * inputs and keeps its scan results. */
static loom_status_t loop_step(ref_call_t *c, loop_run_t *r, loom_graph_t *body,
                               bool *cond) {
  int n_out = 1 + r->n_carried + r->n_scan;
  loom_tensor_t *outs[n_out];
  LOOM_TRY(run_subgraph(c, "body", body, c->n_in, r->body_in, n_out, outs));
  *cond = ref_geti(outs[0], 0) != 0;
  loom_tensor_destroy(outs[0]);
  for (int k = 0; k < r->n_carried; k++) {
    if (r->carried_owned[k]) loom_tensor_destroy((loom_tensor_t *)r->body_in[2 + k]);
    r->body_in[2 + k] = outs[1 + k];
    r->carried_owned[k] = true;
  }
  loom_status_t s = core_grow((void **)&r->scans, &r->cap_iters,
                              (r->n_iters + 1) * r->n_scan, sizeof *r->scans);
  for (int k = 0; k < r->n_scan; k++) {
    if (s == LOOM_OK) r->scans[r->n_iters * r->n_scan + k] = outs[1 + r->n_carried + k];
    else loom_tensor_destroy(outs[1 + r->n_carried + k]);
  }
  if (s == LOOM_OK) r->n_iters++;
  return s;
}

/* The shape of one iteration's scan output k when the body never ran: its
 * type in the body, with the body's symbols bound from the shapes of the
 * loop's carried and invariant inputs (an ONNX Loop of 0 trips over a
 * symbolic batch). */
static loom_status_t unrun_scan_dims(ref_call_t *c, const loop_run_t *r, int k,
                                     int64_t *shape) {
  const loom_graph_t *body = ir_node_subgraph(c->g, c->node, "body");
  int n_syms = ir_num_symbols(body);
  int64_t vals[n_syms > 0 ? n_syms : 1];
  for (int i = 0; i < n_syms; i++) vals[i] = -1;
  for (int i = 2; i < c->n_in && i < body->n_inputs; i++) {
    const ir_type_t *bt = &body->values[body->inputs[i]].type;
    for (int d = 0; c->in[i] && d < bt->rank; d++) {
      const ir_expr_t *e = ir_dim_is_sym(bt->dims[d]) ? ir_dim_expr(body, bt->dims[d]) : NULL;
      if (e && e->kind == IR_EXPR_SYM && vals[e->c] < 0) vals[e->c] = c->in[i]->shape[d];
    }
  }
  const ir_type_t *ot = &body->values[body->outputs[1 + r->n_carried + k]].type;
  for (int d = 0; d < ot->rank; d++) {
    loom_status_t s = ir_dim_eval(body, ot->dims[d], vals, &shape[d]);
    if (s != LOOM_OK)
      return loom_fail(LOOM_ERR_SHAPE, "loop: scan output %d of a loop that ran no iteration: "
                       "dim %d: %s", k, d + 1, loom_last_error());
  }
  return LOOM_OK;
}

/* Scan output k: the iterations' results stacked on a new leading axis. */
static loom_status_t stack_scan(ref_call_t *c, loop_run_t *r, int k) {
  int64_t shape[LOOM_MAX_RANK];
  const ir_type_t *t = &c->g->values[c->node->out[r->n_carried + k]].type;
  const loom_tensor_t *given = c->out[r->n_carried + k];
  const loom_tensor_t *first = r->n_iters ? r->scans[k] : NULL;
  bool unrun = false;
  for (int d = 1; d < t->rank; d++) {
    if (first) shape[d] = first->shape[d - 1];
    else if (given) shape[d] = given->shape[d];
    else if (ir_dim_is_const(t->dims[d])) shape[d] = t->dims[d];
    else unrun = true;
  }
  if (unrun) LOOM_TRY(unrun_scan_dims(c, r, k, shape + 1));
  shape[0] = r->n_iters;
  loom_tensor_t *stacked;
  LOOM_TRY(tensor_new(t->dtype, t->rank, shape, &stacked));
  int64_t numel = shape_numel(t->rank - 1, shape + 1);
  size_t row = (size_t)numel * loom_dtype_size(t->dtype);
  for (int64_t i = 0; i < r->n_iters; i++) {
    const loom_tensor_t *x = r->scans[i * r->n_scan + k];
    if (loom_tensor_numel(x) != numel) {
      loom_tensor_destroy(stacked);
      return loom_fail(LOOM_ERR_SHAPE, "loop: scan output %d changes shape at iteration %lld",
                       k, (long long)i);
    }
    memcpy((char *)stacked->data + (size_t)i * row, x->data, row);
  }
  return deliver(c, r->n_carried + k, stacked);
}

static loom_status_t loop_results(ref_call_t *c, loop_run_t *r) {
  for (int k = 0; k < r->n_carried; k++) {
    loom_tensor_t *t;
    if (r->carried_owned[k]) {
      t = (loom_tensor_t *)r->body_in[2 + k];
      r->carried_owned[k] = false;
    } else {
      LOOM_TRY(tensor_contiguous_copy(r->body_in[2 + k], &t));
    }
    LOOM_TRY(deliver(c, k, t));
  }
  for (int k = 0; k < r->n_scan; k++) LOOM_TRY(stack_scan(c, r, k));
  return LOOM_OK;
}

static loom_status_t loop_start(ref_call_t *c, loop_run_t *r, loom_tensor_t *scalars[2]) {
  r->n_carried = (int)ir_attr_int(c->attrs, "carried", 0);
  r->n_scan = c->n_out - r->n_carried;
  r->body_in = core_calloc((size_t)c->n_in, sizeof *r->body_in);
  r->carried_owned = core_calloc((size_t)r->n_carried + 1, sizeof *r->carried_owned);
  if (!r->body_in || !r->carried_owned)
    return loom_fail(LOOM_ERR_NOMEM, "loop: out of memory");
  LOOM_TRY(tensor_new(LOOM_I64, 0, NULL, &scalars[0]));
  LOOM_TRY(tensor_new(LOOM_BOOL, 0, NULL, &scalars[1]));
  r->body_in[0] = scalars[0];
  r->body_in[1] = scalars[1];
  for (int i = 2; i < c->n_in; i++) r->body_in[i] = c->in[i];
  return LOOM_OK;
}

/* ONNX Loop: iterations run while i < max_trip and, when the loop has a
 * condition, while cond (the input's, then the body's) holds. */
loom_status_t ref_loop(ref_call_t *c) {
  loom_graph_t *body = ir_node_subgraph(c->g, c->node, "body");
  bool use_cond = ir_attr_int(c->attrs, "use_cond", 1) != 0;
  int64_t max_trip = ref_geti(c->in[0], 0);
  bool cond = !use_cond || ref_geti(c->in[1], 0) != 0;
  loop_run_t r = {0};
  loom_tensor_t *scalars[2] = {NULL, NULL};
  loom_status_t s = loop_start(c, &r, scalars);
  for (int64_t i = 0; s == LOOM_OK && i < max_trip && cond; i++) {
    ref_seti(scalars[0], 0, i);
    ref_seti(scalars[1], 0, cond);
    s = loop_step(c, &r, body, &cond);
    cond = cond || !use_cond;
  }
  if (s == LOOM_OK) s = loop_results(c, &r);
  loop_run_free(&r);
  loom_tensor_destroy(scalars[0]);
  loom_tensor_destroy(scalars[1]);
  return s;
}
