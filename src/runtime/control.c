/* Control-flow steps: an if or loop node of a compiled graph holds one
 * executable per subgraph, compiled once when the graph is compiled for
 * the shapes the node sees. A run reads the condition and the trip count
 * from the slots on the host and replays the chosen executable, binding
 * the node's slots (and, for a loop, buffers that carry values from one
 * iteration to the next) without copying. Under runtime symbols
 * (dynamic_symbols) the subgraphs are compiled with their symbols open
 * too, and a run takes the node's shapes from the current symbols. */
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/rewrite.h"
#include "runtime/executable.h"

struct rt_control {
  const ir_node_t *node;
  loom_executable_t *exe[2];  /* if: then, else; loop: body */
  loom_graph_t *bound;        /* loop: the body compiled, its constants bound */
  loom_tensor_t **in, **out;  /* over the node's slots, pointed at each run */
  int32_t *in_slot, *out_slot;
  bool dynamic;               /* shapes follow runtime symbols */
  /* Loop only. */
  int n_carried, n_scan;
  bool use_cond;
  loom_tensor_t *iter, *cond_in, *cond_out; /* the body's scalars */
  loom_tensor_t **carry[2];  /* carried values, alternating between runs */
  loom_tensor_t **scan_row;  /* one row of each scan output */
  loom_tensor_t **body_in, **body_out;
};

/* Placeholder data of the wrappers until a run points them at slots. */
static char placeholder;

/* A tensor of value v's type and shape over placeholder data. */
static loom_status_t wrap_value(const loom_executable_t *e, int32_t v, loom_tensor_t **out) {
  int64_t shape[LOOM_MAX_RANK];
  LOOM_TRY(rt_value_shape(e, v, shape));
  const ir_type_t *t = &e->graph->values[v].type;
  return loom_tensor_wrap(t->dtype, t->rank, shape, NULL, &placeholder, out);
}

static loom_status_t wrap_node(const loom_executable_t *e, int32_t node, rt_control_t *c) {
  const ir_node_t *n = c->node;
  c->in = core_calloc((size_t)n->n_in + 1, sizeof *c->in);
  c->out = core_calloc((size_t)n->n_out + 1, sizeof *c->out);
  c->in_slot = core_malloc(sizeof(int32_t) * (size_t)(n->n_in + 1));
  c->out_slot = core_malloc(sizeof(int32_t) * (size_t)(n->n_out + 1));
  if (!c->in || !c->out || !c->in_slot || !c->out_slot)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  for (int k = 0; k < n->n_in + n->n_out; k++) {
    bool is_in = k < n->n_in;
    int32_t v = is_in ? n->in[k] : n->out[k - n->n_in];
    int32_t slot = e->slot_of_value[v];
    if (slot < 0)
      return loom_fail(LOOM_ERR_GRAPH, "compile: %s of node %d (%s) has no storage",
                       is_in ? "an input" : "an output", node, ir_ops[n->op].name);
    LOOM_TRY(wrap_value(e, v, is_in ? &c->in[k] : &c->out[k - n->n_in]));
    if (is_in) c->in_slot[k] = slot;
    else c->out_slot[k - n->n_in] = slot;
  }
  return LOOM_OK;
}

/* The symbols of the outer options that sub has too (the outer graph
 * compiles with runtime symbols: sizes it leaves open stay open in sub). */
static int outer_symbols(const loom_graph_t *sub, const loom_compile_options_t *o,
                         const char **names, int64_t *values) {
  int n = 0;
  for (int k = 0; k < o->n_symbols; k++)
    if (ir_symbol_find(sub, o->symbol_names[k])) {
      names[n] = o->symbol_names[k];
      values[n++] = o->symbol_values[k];
    }
  return n;
}

/* Compiles subgraph sub, whose input i takes node input first + i, for
 * those inputs' shapes: each plain symbol of its inputs gets the size it
 * has there. */
static loom_status_t compile_subgraph(rt_control_t *c, loom_graph_t *sub, int first,
                                      const loom_compile_options_t *o,
                                      loom_executable_t **out) {
  int cap = (int)sub->n_inputs * LOOM_MAX_RANK + (o->n_symbols > 0 ? o->n_symbols : 0) + 1;
  int n = 0;
  const char **names = core_malloc(sizeof *names * (size_t)cap);
  int64_t *values = core_malloc(sizeof *values * (size_t)cap);
  loom_status_t s = names && values ? LOOM_OK
                    : loom_fail(LOOM_ERR_NOMEM, "out of memory compiling a subgraph");
  for (int64_t i = 0; s == LOOM_OK && !c->dynamic && i < sub->n_inputs; i++) {
    const ir_type_t *t = &sub->values[sub->inputs[i]].type;
    const loom_tensor_t *x = c->in[first + i];
    for (int d = 0; d < t->rank && d < x->rank; d++) {
      const ir_expr_t *x_expr = ir_dim_expr(sub, t->dims[d]);
      if (!x_expr || x_expr->kind != IR_EXPR_SYM) continue;
      names[n] = x_expr->name;
      values[n++] = x->shape[d];
    }
  }
  if (s == LOOM_OK && c->dynamic) n = outer_symbols(sub, o, names, values);
  loom_compile_options_t so = *o;
  so.n_symbols = n;
  so.symbol_names = names;
  so.symbol_values = values;
  if (s == LOOM_OK) s = loom_compile(sub, &so, out);
  core_free(names);
  core_free(values);
  return s;
}

/* The loop's body with each invariant input that is a constant of the
 * outer graph read as that constant, so that the body's compile folds and
 * packs what it computes from it (a recurrent weight's GEMM panels) once,
 * not at every iteration. *out stays NULL when no invariant is one. */
static loom_status_t bind_constants(const loom_executable_t *e, const rt_control_t *c,
                                    const loom_graph_t *body, loom_graph_t **out) {
  const ir_node_t *n = c->node;
  int first = 2 + (int)ir_attr_int(n->attrs, "carried", 0);
  bool any = false;
  for (int j = first; j < n->n_in && j < body->n_inputs; j++)
    any |= e->graph->values[n->in[j]].kind == IR_VALUE_CONST;
  if (!any) return LOOM_OK;
  ir_rewriter_t rw;
  LOOM_TRY(ir_rewrite_begin(body, &rw));
  loom_status_t s = LOOM_OK;
  for (int j = first; s == LOOM_OK && j < n->n_in && j < body->n_inputs; j++) {
    const ir_value_t *v = &e->graph->values[n->in[j]];
    const ir_type_t *t = &body->values[body->inputs[j]].type;
    if (v->kind != IR_VALUE_CONST || !v->data || v->data->dtype != t->dtype ||
        v->data->rank != t->rank || !tensor_is_contiguous(v->data))
      continue;
    bool same = true;
    for (int d = 0; d < t->rank; d++) same &= t->dims[d] == v->data->shape[d];
    int32_t id;
    if (same && (s = ir_rewrite_borrowed_constant(&rw, v->data, &id)) == LOOM_OK)
      ir_rewrite_map(&rw, body->inputs[j], id);
  }
  for (int64_t i = 0; s == LOOM_OK && i < body->n_nodes; i++) s = ir_rewrite_copy(&rw, i);
  if (s != LOOM_OK) {
    ir_rewrite_abort(&rw);
    return s;
  }
  return ir_rewrite_finish(&rw, out);
}

/* The loop's own tensors: the body's scalars, two sets of carried
 * buffers, the rows of the scan outputs and the binding arrays. */
static loom_status_t loop_buffers(rt_control_t *c) {
  const ir_node_t *n = c->node;
  c->n_carried = (int)ir_attr_int(n->attrs, "carried", 0);
  c->n_scan = n->n_out - c->n_carried;
  c->use_cond = ir_attr_int(n->attrs, "use_cond", 1) != 0;
  LOOM_TRY(tensor_new(LOOM_I64, 0, NULL, &c->iter));
  LOOM_TRY(tensor_new(LOOM_BOOL, 0, NULL, &c->cond_in));
  LOOM_TRY(tensor_new(LOOM_BOOL, 0, NULL, &c->cond_out));
  size_t nc = (size_t)c->n_carried + 1, ns = (size_t)c->n_scan + 1;
  c->carry[0] = core_calloc(nc, sizeof *c->carry[0]);
  c->carry[1] = core_calloc(nc, sizeof *c->carry[1]);
  c->scan_row = core_calloc(ns, sizeof *c->scan_row);
  c->body_in = core_calloc((size_t)n->n_in, sizeof *c->body_in);
  c->body_out = core_calloc((size_t)n->n_out + 1, sizeof *c->body_out);
  if (!c->carry[0] || !c->carry[1] || !c->scan_row || !c->body_in || !c->body_out)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling a loop");
  for (int k = 0; k < c->n_carried; k++) {
    const loom_tensor_t *like = c->out[k];
    LOOM_TRY(tensor_new(like->dtype, like->rank, like->shape, &c->carry[0][k]));
    LOOM_TRY(tensor_new(like->dtype, like->rank, like->shape, &c->carry[1][k]));
  }
  for (int k = 0; k < c->n_scan; k++) {
    const loom_tensor_t *all = c->out[c->n_carried + k];
    LOOM_TRY(loom_tensor_wrap(all->dtype, all->rank - 1, all->shape + 1, NULL, &placeholder,
                              &c->scan_row[k]));
  }
  return LOOM_OK;
}

static loom_status_t control_build(loom_executable_t *e, int32_t node,
                                   const loom_compile_options_t *o, rt_control_t *c) {
  c->node = &e->graph->nodes[node];
  c->dynamic = o->dynamic_symbols != 0;
  LOOM_TRY(wrap_node(e, node, c));
  const char *names[2];
  int count = ir_subgraph_attrs(c->node->op, names);
  bool is_loop = c->node->op == IR_OP_LOOP;
  for (int k = 0; k < count; k++) {
    loom_graph_t *sub = ir_node_subgraph(e->graph, c->node, names[k]);
    if (!sub)
      return loom_fail(LOOM_ERR_GRAPH, "compile: node %d (%s): %s names no subgraph", node,
                       ir_ops[c->node->op].name, names[k]);
    /* A branch takes the node's inputs after cond; a body all of them. */
    loom_status_t s = is_loop ? bind_constants(e, c, sub, &c->bound) : LOOM_OK;
    if (s == LOOM_OK)
      s = compile_subgraph(c, c->bound ? c->bound : sub, is_loop ? 0 : 1, o, &c->exe[k]);
    if (s != LOOM_OK)
      return loom_fail(s, "compile: node %d (%s): %s: %s", node, ir_ops[c->node->op].name,
                       names[k], loom_last_error());
    /* A subgraph's lost code is the executable's too. */
    rt_fallback_note(e, c->exe[k]->fallback, c->exe[k]->fallback_reason);
  }
  return is_loop ? loop_buffers(c) : LOOM_OK;
}

loom_status_t rt_control_build(loom_executable_t *e, int32_t node,
                               const loom_compile_options_t *o, rt_control_t **out) {
  *out = core_calloc(1, sizeof **out);
  if (!*out) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  return control_build(e, node, o, *out);
}

/* ---- Running ---------------------------------------------------------------- */

static int64_t read_scalar(const loom_tensor_t *t) {
  return dtype_load_i64(t->dtype, t->data);
}

static loom_status_t run_if(rt_control_t *c) {
  const ir_node_t *n = c->node;
  bool cond = read_scalar(c->in[0]) != 0;
  loom_status_t s = loom_executable_run(c->exe[cond ? 0 : 1], n->n_in - 1, c->in + 1,
                                        n->n_out, c->out);
  if (s != LOOM_OK)
    return loom_fail(s, "if: %s: %s", cond ? "then_graph" : "else_graph", loom_last_error());
  return LOOM_OK;
}

/* Binds iteration i: carried values from `from` (NULL: the node's
 * initial values), results into carry[to] and row i of each scan. */
static void bind_iteration(rt_control_t *c, int64_t i, loom_tensor_t **from, int to,
                           bool cond) {
  const ir_node_t *n = c->node;
  *(int64_t *)c->iter->data = i;
  *(uint8_t *)c->cond_in->data = cond;
  c->body_in[0] = c->iter;
  c->body_in[1] = c->cond_in;
  for (int k = 0; k < c->n_carried; k++) c->body_in[2 + k] = from ? from[k] : c->in[2 + k];
  for (int j = 2 + c->n_carried; j < n->n_in; j++) c->body_in[j] = c->in[j];
  c->body_out[0] = c->cond_out;
  for (int k = 0; k < c->n_carried; k++) c->body_out[1 + k] = c->carry[to][k];
  for (int k = 0; k < c->n_scan; k++) {
    loom_tensor_t *row = c->scan_row[k];
    size_t bytes = (size_t)loom_tensor_numel(row) * loom_dtype_size(row->dtype);
    row->data = (char *)c->out[c->n_carried + k]->data + (size_t)i * bytes;
    c->body_out[1 + c->n_carried + k] = row;
  }
}

static loom_status_t run_loop(rt_control_t *c) {
  const ir_node_t *n = c->node;
  int64_t max_trip = read_scalar(c->in[0]);
  bool cond = !c->use_cond || read_scalar(c->in[1]) != 0;
  /* Scan outputs were sized for this many rows (a constant trip count). */
  int64_t rows = c->n_scan > 0 ? c->out[c->n_carried]->shape[0] : INT64_MAX;
  loom_tensor_t **from = NULL;
  int to = 0;
  int64_t i = 0;
  for (; i < max_trip && cond; i++) {
    if (i >= rows)
      return loom_fail(LOOM_ERR_SHAPE, "loop: iteration %lld is past the %lld rows of its "
                       "scan outputs", (long long)i, (long long)rows);
    bind_iteration(c, i, from, to, cond);
    loom_status_t s = loom_executable_run(c->exe[0], n->n_in, c->body_in,
                                          1 + c->n_carried + c->n_scan, c->body_out);
    if (s != LOOM_OK)
      return loom_fail(s, "loop: body, iteration %lld: %s", (long long)i, loom_last_error());
    cond = !c->use_cond || *(const uint8_t *)c->cond_out->data;
    from = c->carry[to];
    to ^= 1;
  }
  if (c->n_scan > 0 && i != rows)
    return loom_fail(LOOM_ERR_SHAPE, "loop: ran %lld iterations for %lld scan rows",
                     (long long)i, (long long)rows);
  for (int k = 0; k < c->n_carried; k++) {
    const loom_tensor_t *last = from ? from[k] : c->in[2 + k];
    memcpy(c->out[k]->data, last->data,
           (size_t)loom_tensor_numel(last) * loom_dtype_size(last->dtype));
  }
  return LOOM_OK;
}

/* Under runtime symbols: the node's tensors take this run's shapes, and a
 * loop's carried buffers follow them (allocating only when they change). */
static loom_status_t resize(const loom_executable_t *e, rt_control_t *c) {
  const ir_node_t *n = c->node;
  for (int k = 0; k < n->n_in + n->n_out; k++) {
    loom_tensor_t *t = k < n->n_in ? c->in[k] : c->out[k - n->n_in];
    int64_t shape[LOOM_MAX_RANK];
    LOOM_TRY(rt_value_shape(e, k < n->n_in ? n->in[k] : n->out[k - n->n_in], shape));
    tensor_view_init(t, t->dtype, t->rank, shape, t->data);
  }
  if (n->op != IR_OP_LOOP) return LOOM_OK;
  for (int k = 0; k < c->n_carried; k++) {
    const loom_tensor_t *like = c->out[k];
    for (int b = 0; b < 2; b++) {
      loom_tensor_t **buf = &c->carry[b][k];
      if (*buf && !memcmp((*buf)->shape, like->shape, sizeof(int64_t) * (size_t)like->rank))
        continue;
      loom_tensor_destroy(*buf);
      *buf = NULL;
      LOOM_TRY(tensor_new(like->dtype, like->rank, like->shape, buf));
    }
  }
  for (int k = 0; k < c->n_scan; k++) {
    const loom_tensor_t *all = c->out[c->n_carried + k];
    tensor_view_init(c->scan_row[k], all->dtype, all->rank - 1, all->shape + 1, NULL);
  }
  return LOOM_OK;
}

loom_status_t rt_control_run(loom_executable_t *e, rt_control_t *c) {
  const ir_node_t *n = c->node;
  if (c->dynamic) LOOM_TRY(resize(e, c));
  for (int k = 0; k < n->n_in; k++) c->in[k]->data = e->slots[c->in_slot[k]];
  for (int k = 0; k < n->n_out; k++) c->out[k]->data = e->slots[c->out_slot[k]];
  return n->op == IR_OP_LOOP ? run_loop(c) : run_if(c);
}

static void destroy_all(loom_tensor_t **ts, int n) {
  for (int k = 0; ts && k < n; k++) loom_tensor_destroy(ts[k]);
  core_free(ts);
}

void rt_control_free(rt_control_t *c) {
  if (!c) return;
  const ir_node_t *n = c->node;
  for (int k = 0; k < 2; k++) loom_executable_destroy(c->exe[k]);
  loom_graph_destroy(c->bound);
  destroy_all(c->in, n ? n->n_in : 0);
  destroy_all(c->out, n ? n->n_out : 0);
  core_free(c->in_slot);
  core_free(c->out_slot);
  loom_tensor_destroy(c->iter);
  loom_tensor_destroy(c->cond_in);
  loom_tensor_destroy(c->cond_out);
  destroy_all(c->carry[0], c->n_carried);
  destroy_all(c->carry[1], c->n_carried);
  destroy_all(c->scan_row, c->n_scan);
  core_free(c->body_in);
  core_free(c->body_out);
  core_free(c);
}
