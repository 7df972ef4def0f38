/* The rewriter: a pass builds a new graph from an old one. dst starts with
 * src's symbols, inputs, parameters (storage borrowed) and constants
 * (borrowed); nodes come through ir_add_node, so every rewritten node has
 * its shapes inferred and checked again. */
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/rewrite.h"

/* Appends a value that no node produces (input, parameter, constant). */
static loom_status_t add_leaf(loom_graph_t *g, const ir_value_t *like,
                              loom_tensor_t *data, bool borrowed, int32_t *id) {
  if (g->n_values >= INT32_MAX)
    return loom_fail(LOOM_ERR_GRAPH, "too many values in one graph");
  LOOM_TRY(core_grow((void **)&g->values, &g->cap_values, g->n_values + 1,
                     sizeof *g->values));
  ir_value_t *v = &g->values[g->n_values];
  *v = (ir_value_t){.type = like->type, .kind = like->kind, .node = -1,
                    .index = like->index, .data = data, .borrowed = borrowed};
  if (like->name && !(v->name = core_strdup(like->name)))
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a name");
  *id = (int32_t)g->n_values++;
  return LOOM_OK;
}

static loom_status_t push_id(int32_t **list, int64_t *n, int64_t *cap,
                             int32_t id) {
  LOOM_TRY(core_grow((void **)list, cap, *n + 1, sizeof **list));
  (*list)[(*n)++] = id;
  return LOOM_OK;
}

/* The symbol table, copied whole so that dim handles mean the same in dst. */
static loom_status_t copy_symbols(const loom_graph_t *src, loom_graph_t *dst) {
  if (src->n_exprs == 0) return LOOM_OK;
  LOOM_TRY(core_grow((void **)&dst->exprs, &dst->cap_exprs, src->n_exprs,
                     sizeof *dst->exprs));
  for (int64_t i = 0; i < src->n_exprs; i++) {
    dst->exprs[i] = src->exprs[i];
    dst->exprs[i].name = NULL;
    dst->n_exprs = i + 1;
    if (src->exprs[i].name && !(dst->exprs[i].name = core_strdup(src->exprs[i].name)))
      return loom_fail(LOOM_ERR_NOMEM, "out of memory copying symbols");
  }
  dst->n_symbols = src->n_symbols;
  dst->n_fresh = src->n_fresh;
  return LOOM_OK;
}

static loom_status_t copy_leaves(ir_rewriter_t *rw, bool inputs) {
  const loom_graph_t *src = rw->src;
  loom_graph_t *dst = rw->dst;
  for (int64_t i = 0; inputs && i < src->n_inputs; i++) {
    int32_t v = src->inputs[i], d;
    LOOM_TRY(add_leaf(dst, &src->values[v], NULL, false, &d));
    LOOM_TRY(push_id(&dst->inputs, &dst->n_inputs, &dst->cap_inputs, d));
    rw->map[v] = d;
  }
  for (int64_t i = 0; i < src->n_params; i++) {
    int32_t v = src->params[i], d;
    LOOM_TRY(add_leaf(dst, &src->values[v], src->values[v].data, true, &d));
    LOOM_TRY(push_id(&dst->params, &dst->n_params, &dst->cap_params, d));
    rw->map[v] = d;
  }
  for (int64_t v = 0; v < src->n_values; v++) {
    if (src->values[v].kind != IR_VALUE_CONST) continue;
    int32_t d;
    LOOM_TRY(add_leaf(dst, &src->values[v], src->values[v].data, true, &d));
    rw->map[v] = d;
  }
  return LOOM_OK;
}

/* Clones of src's subgraphs at the same indices, so that the attributes
 * of copied if and loop nodes still name them. */
static loom_status_t copy_subgraphs(ir_rewriter_t *rw) {
  for (int64_t i = 0; i < rw->src->n_subgraphs; i++) {
    loom_graph_t *sub;
    int64_t index;
    LOOM_TRY(ir_graph_clone(rw->src->subgraphs[i], &sub));
    LOOM_TRY(ir_graph_adopt(rw->dst, sub, &index));
  }
  return LOOM_OK;
}

static loom_status_t begin(const loom_graph_t *src, ir_rewriter_t *rw,
                           bool inputs) {
  LOOM_CHECK_ARG(src);
  LOOM_CHECK_ARG(rw);
  *rw = (ir_rewriter_t){.src = src};
  LOOM_TRY(loom_graph_create(&rw->dst));
  loom_status_t s = ir_graph_take_spare(rw->dst, src->n_nodes, src->n_values);
  rw->map = s == LOOM_OK ? core_malloc(sizeof *rw->map * (size_t)(src->n_values ? src->n_values : 1))
                         : NULL;
  if (s == LOOM_OK && !rw->map) s = loom_fail(LOOM_ERR_NOMEM, "out of memory rewriting a graph");
  for (int64_t v = 0; s == LOOM_OK && v < src->n_values; v++) rw->map[v] = -1;
  if (s == LOOM_OK) s = copy_symbols(src, rw->dst);
  if (s == LOOM_OK) s = copy_leaves(rw, inputs);
  if (s == LOOM_OK) s = copy_subgraphs(rw);
  if (s != LOOM_OK) ir_rewrite_abort(rw);
  return s;
}

loom_status_t ir_rewrite_begin(const loom_graph_t *src, ir_rewriter_t *rw) {
  return begin(src, rw, true);
}

loom_status_t ir_rewrite_begin_no_inputs(const loom_graph_t *src,
                                         ir_rewriter_t *rw) {
  return begin(src, rw, false);
}

loom_status_t ir_rewrite_emit(ir_rewriter_t *rw, ir_op_t op, int n_in,
                              const int32_t *dst_in, const ir_attrs_t *attrs,
                              int32_t *dst_out, int out_cap) {
  return ir_add_node(rw->dst, op, n_in, dst_in, attrs, dst_out, out_cap);
}

loom_status_t ir_rewrite_copy(ir_rewriter_t *rw, int64_t node) {
  const ir_node_t *n = &rw->src->nodes[node];
  int32_t in[n->n_in > 0 ? n->n_in : 1];
  for (int i = 0; i < n->n_in; i++) {
    in[i] = ir_rewrite_lookup(rw, n->in[i]);
    if (in[i] < 0) {
      char buf[64];
      return loom_fail(LOOM_ERR_GRAPH,
                       "internal: node %lld (%s) reads %s, which the rewrite dropped",
                       (long long)node, ir_ops[n->op].name,
                       ir_value_str(rw->src, n->in[i], buf, sizeof buf));
    }
  }
  int32_t out[n->n_out > 0 ? n->n_out : 1];
  LOOM_TRY(ir_rewrite_emit(rw, n->op, n->n_in, in, n->attrs, out, n->n_out));
  for (int k = 0; k < n->n_out; k++) {
    /* A data-shaped output got a fresh symbol; keep src's, which is just
     * as unbound, so that the types downstream stay the same. */
    if (ir_node_data_shaped(rw->src, n))
      rw->dst->values[out[k]].type = rw->src->values[n->out[k]].type;
    ir_rewrite_map(rw, n->out[k], out[k]);
  }
  return LOOM_OK;
}

loom_status_t ir_rewrite_constant(ir_rewriter_t *rw, loom_tensor_t *t,
                                  int32_t *dst_value) {
  ir_value_t like = {.kind = IR_VALUE_CONST, .type = {.dtype = t->dtype, .rank = t->rank}};
  for (int i = 0; i < t->rank; i++) like.type.dims[i] = t->shape[i];
  loom_status_t s = add_leaf(rw->dst, &like, t, false, dst_value);
  if (s != LOOM_OK) loom_tensor_destroy(t);
  return s;
}

loom_status_t ir_rewrite_borrowed_constant(ir_rewriter_t *rw, loom_tensor_t *t,
                                           int32_t *dst_value) {
  ir_value_t like = {.kind = IR_VALUE_CONST, .type = {.dtype = t->dtype, .rank = t->rank}};
  for (int i = 0; i < t->rank; i++) like.type.dims[i] = t->shape[i];
  return add_leaf(rw->dst, &like, t, true, dst_value);
}

void ir_rewrite_map(ir_rewriter_t *rw, int32_t v, int32_t d) { rw->map[v] = d; }

int32_t ir_rewrite_lookup(const ir_rewriter_t *rw, int32_t v) {
  return ir_value_valid(rw->src, v) ? rw->map[v] : -1;
}

/* Drops dst's constants that no node and no output reads (left behind by
 * folding and merging), renumbering the values after them. */
static loom_status_t prune_constants(loom_graph_t *g) {
  uint8_t *used = core_calloc((size_t)(g->n_values ? g->n_values : 1), 1);
  int32_t *renum = core_malloc(sizeof *renum * (size_t)(g->n_values ? g->n_values : 1));
  if (!used || !renum) {
    core_free(used);
    core_free(renum);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory rewriting a graph");
  }
  for (int64_t i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) used[g->nodes[i].in[k]] = 1;
  for (int64_t i = 0; i < g->n_outputs; i++) used[g->outputs[i]] = 1;
  int64_t kept = 0;
  for (int64_t v = 0; v < g->n_values; v++) {
    ir_value_t *val = &g->values[v];
    if (val->kind == IR_VALUE_CONST && !used[v]) {
      core_free(val->name);
      if (!val->borrowed) loom_tensor_destroy(val->data);
      renum[v] = -1;
      continue;
    }
    renum[v] = (int32_t)kept;
    g->values[kept++] = *val;
  }
  g->n_values = kept;
  for (int64_t i = 0; i < g->n_nodes; i++) {
    for (int k = 0; k < g->nodes[i].n_in; k++) g->nodes[i].in[k] = renum[g->nodes[i].in[k]];
    for (int k = 0; k < g->nodes[i].n_out; k++) g->nodes[i].out[k] = renum[g->nodes[i].out[k]];
  }
  for (int64_t i = 0; i < g->n_inputs; i++) g->inputs[i] = renum[g->inputs[i]];
  for (int64_t i = 0; i < g->n_params; i++) g->params[i] = renum[g->params[i]];
  for (int64_t i = 0; i < g->n_outputs; i++) g->outputs[i] = renum[g->outputs[i]];
  core_free(used);
  core_free(renum);
  return LOOM_OK;
}

static loom_status_t map_outputs(ir_rewriter_t *rw) {
  const loom_graph_t *src = rw->src;
  loom_graph_t *dst = rw->dst;
  for (int64_t i = 0; i < src->n_outputs; i++) {
    int32_t d = ir_rewrite_lookup(rw, src->outputs[i]);
    if (d < 0) {
      char buf[64];
      return loom_fail(LOOM_ERR_GRAPH,
                       "internal: graph output %lld (%s) was not mapped by the rewrite",
                       (long long)i, ir_value_str(src, src->outputs[i], buf, sizeof buf));
    }
    LOOM_TRY(push_id(&dst->outputs, &dst->n_outputs, &dst->cap_outputs, d));
  }
  return LOOM_OK;
}

loom_status_t ir_rewrite_finish(ir_rewriter_t *rw, loom_graph_t **out) {
  loom_status_t s = map_outputs(rw);
  if (s == LOOM_OK) s = prune_constants(rw->dst);
  if (s == LOOM_OK) s = ir_verify(rw->dst);
  if (s != LOOM_OK) {
    ir_rewrite_abort(rw);
    return s;
  }
  *out = rw->dst;
  rw->dst = NULL;
  core_free(rw->map);
  rw->map = NULL;
  return LOOM_OK;
}

void ir_rewrite_abort(ir_rewriter_t *rw) {
  loom_graph_destroy(rw->dst);
  core_free(rw->map);
  rw->dst = NULL;
  rw->map = NULL;
}

loom_status_t ir_graph_clone(const loom_graph_t *src, loom_graph_t **out) {
  LOOM_CHECK_ARG(out);
  *out = NULL;
  ir_rewriter_t rw;
  LOOM_TRY(ir_rewrite_begin(src, &rw));
  for (int64_t i = 0; i < src->n_nodes; i++) {
    loom_status_t s = ir_rewrite_copy(&rw, i);
    if (s != LOOM_OK) {
      ir_rewrite_abort(&rw);
      return s;
    }
  }
  return ir_rewrite_finish(&rw, out);
}
