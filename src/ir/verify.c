/* The verifier: a graph is runnable when every reference resolves, every
 * node reads only values defined before it, arities, dtypes and
 * attributes fit the op table, and no parameter is assigned twice. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "ir/ir.h"

/* Whether node `from` reaches node `to` through the values it produces,
 * walking consumers depth-first; seen marks visited nodes. */
static bool reaches(const loom_graph_t *g, int64_t from, int64_t to,
                    uint8_t *seen) {
  if (from == to) return true;
  if (seen[from]) return false;
  seen[from] = 1;
  const ir_node_t *n = &g->nodes[from];
  for (int k = 0; k < n->n_out; k++)
    for (int64_t j = 0; j < g->n_nodes; j++)
      for (int i = 0; i < g->nodes[j].n_in; i++)
        if (g->nodes[j].in[i] == n->out[k] && reaches(g, j, to, seen))
          return true;
  return false;
}

/* Node i reads a value produced by node j >= i: a cycle or a bad order. */
static loom_status_t order_error(const loom_graph_t *g, int64_t i, int64_t j,
                                 int32_t v) {
  char buf[64];
  const char *op = ir_ops[g->nodes[i].op].name;
  ir_value_str(g, v, buf, sizeof buf);
  if (i == j)
    return loom_fail(LOOM_ERR_GRAPH, "cycle: node %lld (%s) reads its own output %s",
                     (long long)i, op, buf);
  uint8_t *seen = core_calloc((size_t)g->n_nodes, 1);
  bool cycle = seen && reaches(g, i, j, seen);
  core_free(seen);
  if (cycle)
    return loom_fail(LOOM_ERR_GRAPH,
                     "cycle: node %lld (%s) reads %s from node %lld (%s), "
                     "which depends on node %lld",
                     (long long)i, op, buf, (long long)j,
                     ir_ops[g->nodes[j].op].name, (long long)i);
  return loom_fail(LOOM_ERR_GRAPH,
                   "node %lld (%s) reads %s before node %lld defines it",
                   (long long)i, op, buf, (long long)j);
}

static loom_status_t verify_node(const loom_graph_t *g, int64_t i) {
  const ir_node_t *n = &g->nodes[i];
  if ((unsigned)n->op >= IR_OP_COUNT)
    return loom_fail(LOOM_ERR_GRAPH, "node %lld has unknown op %d", (long long)i, (int)n->op);
  const ir_op_info_t *info = &ir_ops[n->op];
  if (n->n_in < info->in_min || (info->in_max >= 0 && n->n_in > info->in_max))
    return loom_fail(LOOM_ERR_GRAPH, "node %lld (%s) has %d inputs", (long long)i,
                     info->name, n->n_in);
  for (int k = 0; k < n->n_in; k++) {
    int32_t v = n->in[k];
    if (!ir_value_valid(g, v))
      return loom_fail(LOOM_ERR_GRAPH,
                       "dangling value: node %lld (%s) input %d refers to %%%d, "
                       "which is not in the graph", (long long)i, info->name, k, v);
    const ir_value_t *val = &g->values[v];
    if (val->kind == IR_VALUE_NODE && val->node >= i)
      return order_error(g, i, val->node, v);
  }
  if (n->n_in > 0 && !(info->dtypes & DT_BIT(g->values[n->in[0]].type.dtype)))
    return loom_fail(LOOM_ERR_DTYPE, "node %lld (%s) does not accept dtype %s",
                     (long long)i, info->name,
                     loom_dtype_name(g->values[n->in[0]].type.dtype));
  for (int k = 0; k < n->n_out; k++) {
    int32_t v = n->out[k];
    if (!ir_value_valid(g, v) || g->values[v].kind != IR_VALUE_NODE ||
        g->values[v].node != i || g->values[v].index != k)
      return loom_fail(LOOM_ERR_GRAPH, "node %lld (%s) output %d (%%%d) is not "
                       "recorded as its output", (long long)i, info->name, k, v);
  }
  if (info->flags & F_SUBGRAPH) LOOM_TRY(ir_verify_subgraphs(g, i));
  return ir_attrs_check(n->op, n->attrs);
}

/* Every node-produced value points back at its producer. */
static loom_status_t verify_values(const loom_graph_t *g) {
  for (int64_t v = 0; v < g->n_values; v++) {
    const ir_value_t *val = &g->values[v];
    if (val->kind != IR_VALUE_NODE) {
      if ((val->kind == IR_VALUE_PARAM || val->kind == IR_VALUE_CONST) && !val->data)
        return loom_fail(LOOM_ERR_GRAPH, "%%%lld has no data", (long long)v);
      continue;
    }
    if (val->node < 0 || val->node >= g->n_nodes)
      return loom_fail(LOOM_ERR_GRAPH, "dangling value: %%%lld has no producing node",
                       (long long)v);
    const ir_node_t *n = &g->nodes[val->node];
    if (val->index < 0 || val->index >= n->n_out || n->out[val->index] != v)
      return loom_fail(LOOM_ERR_GRAPH, "dangling value: %%%lld is not an output of node %d",
                       (long long)v, val->node);
  }
  return LOOM_OK;
}

/* Each assign writes a parameter, and no parameter twice: the first
 * assign of each parameter is remembered (per parameter, not found again
 * by a scan per assign, which made a training step's verify quadratic). */
static loom_status_t verify_assigns(const loom_graph_t *g) {
  int64_t *first = NULL;
  loom_status_t s = LOOM_OK;
  for (int64_t i = 0; i < g->n_nodes && s == LOOM_OK; i++) {
    if (g->nodes[i].op != IR_OP_ASSIGN) continue;
    int32_t p = g->nodes[i].in[0];
    if (g->values[p].kind != IR_VALUE_PARAM) {
      s = loom_fail(LOOM_ERR_GRAPH, "node %lld (assign) writes %%%d, which is "
                    "not a parameter", (long long)i, p);
      break;
    }
    if (!first && !(first = core_calloc((size_t)g->n_values, sizeof *first)))
      return loom_fail(LOOM_ERR_NOMEM, "out of memory verifying a graph");
    if (first[p])
      s = loom_fail(LOOM_ERR_GRAPH, "parameter %%%d is assigned twice (nodes "
                    "%lld and %lld)", p, (long long)(first[p] - 1), (long long)i);
    first[p] = i + 1;
  }
  core_free(first);
  return s;
}

/* Each all_reduce_start's value is read by one node, its all_reduce_wait
 * (a wait of a value no start made waits for nothing): a start's value
 * that anything else reads would be read before the reduction lands, and
 * a start without a wait would leave the collective writing into memory
 * after the run frees it. */
static loom_status_t verify_collective_pairs(const loom_graph_t *g) {
  int32_t *waits = NULL; /* per start, the waits that read it */
  loom_status_t s = LOOM_OK;
  for (int64_t i = 0; i < g->n_nodes && s == LOOM_OK; i++) {
    const ir_node_t *n = &g->nodes[i];
    for (int k = 0; k < n->n_in && s == LOOM_OK; k++) {
      const ir_value_t *v = &g->values[n->in[k]];
      if (v->kind != IR_VALUE_NODE || g->nodes[v->node].op != IR_OP_ALL_REDUCE_START) continue;
      if (n->op != IR_OP_ALL_REDUCE_WAIT)
        s = loom_fail(LOOM_ERR_GRAPH, "node %lld (%s) reads %%%d, the value of an "
                      "all_reduce_start (node %d): only its all_reduce_wait may",
                      (long long)i, ir_ops[n->op].name, n->in[k], v->node);
      else if (!waits && !(waits = core_calloc((size_t)g->n_nodes, sizeof *waits)))
        s = loom_fail(LOOM_ERR_NOMEM, "out of memory verifying a graph");
      else
        waits[v->node]++;
    }
  }
  for (int64_t i = 0; i < g->n_nodes && s == LOOM_OK; i++)
    if (g->nodes[i].op == IR_OP_ALL_REDUCE_START && (!waits || waits[i] != 1))
      s = loom_fail(LOOM_ERR_GRAPH, "node %lld (all_reduce_start) has %d all_reduce_waits "
                    "(one ends each start)", (long long)i, waits ? waits[i] : 0);
  for (int64_t i = 0; i < g->n_outputs && s == LOOM_OK; i++) {
    const ir_value_t *v = &g->values[g->outputs[i]];
    if (v->kind == IR_VALUE_NODE && g->nodes[v->node].op == IR_OP_ALL_REDUCE_START)
      s = loom_fail(LOOM_ERR_GRAPH, "output %lld is the value of an all_reduce_start (node "
                    "%d): only its all_reduce_wait may read it", (long long)i, v->node);
  }
  core_free(waits);
  return s;
}

loom_status_t ir_verify(const loom_graph_t *g) {
  LOOM_TRY(verify_values(g));
  for (int64_t i = 0; i < g->n_nodes; i++) LOOM_TRY(verify_node(g, i));
  for (int64_t i = 0; i < g->n_outputs; i++)
    if (!ir_value_valid(g, g->outputs[i]))
      return loom_fail(LOOM_ERR_GRAPH, "dangling value: output %lld refers to %%%d",
                       (long long)i, g->outputs[i]);
  LOOM_TRY(verify_collective_pairs(g));
  return verify_assigns(g);
}

loom_status_t loom_graph_verify(const loom_graph_t *g) {
  LOOM_CHECK_ARG(g);
  LOOM_TRY(ir_verify(g));
  loom_clear_error();
  return LOOM_OK;
}
