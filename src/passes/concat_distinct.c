/* A concat that reads one value more than once gets a copy of it for each
 * repeat. The memory plan writes each operand of a concat straight into
 * its place in the result (compiler/layout_place.c), which needs one
 * buffer per operand; a value read twice cannot sit in two places, and
 * the whole concat then copies. Repeats come from CSE: a data-parallel
 * bucket holds the gradients of two batch norms' biases after one
 * residual add (each the sum of the same incoming gradient), which CSE
 * merges into one value. With the copy, the concat moves nothing but the
 * repeat (a ResNet-18 bucket of 25 MB was copied whole every step). */
#include "core/status.h"
#include "ir/rewrite.h"
#include "passes/passes.h"

/* Whether input k of n repeats an earlier input made by a node (graph
 * inputs, parameters and constants are never placed inside a result). */
static bool repeats(const loom_graph_t *g, const ir_node_t *n, int k) {
  if (g->values[n->in[k]].kind != IR_VALUE_NODE) return false;
  for (int j = 0; j < k; j++)
    if (n->in[j] == n->in[k]) return true;
  return false;
}

/* Concat n with each repeat read through a copy: stop_gradient, the
 * identity as an op of its own (identity is an alias, which shares its
 * input's buffer). */
static loom_status_t copy_concat(ir_rewriter_t *rw, const ir_node_t *n) {
  int32_t in[n->n_in], out;
  for (int k = 0; k < n->n_in; k++) {
    in[k] = ir_rewrite_lookup(rw, n->in[k]);
    int32_t copy;
    if (repeats(rw->src, n, k)) {
      LOOM_TRY(ir_rewrite_emit(rw, IR_OP_STOP_GRADIENT, 1, &in[k], NULL, &copy, 1));
      in[k] = copy;
    }
  }
  LOOM_TRY(ir_rewrite_emit(rw, IR_OP_CONCAT, n->n_in, in, n->attrs, &out, 1));
  ir_rewrite_map(rw, n->out[0], out);
  return LOOM_OK;
}

loom_status_t pass_concat_distinct(const loom_graph_t *src, loom_graph_t **out) {
  LOOM_CHECK_ARG(src);
  LOOM_CHECK_ARG(out);
  ir_rewriter_t rw;
  LOOM_TRY(ir_rewrite_begin(src, &rw));
  loom_status_t s = LOOM_OK;
  for (int64_t i = 0; s == LOOM_OK && i < src->n_nodes; i++) {
    const ir_node_t *n = &src->nodes[i];
    bool repeated = false;
    for (int k = 1; n->op == IR_OP_CONCAT && k < n->n_in && !repeated; k++)
      repeated = repeats(src, n, k);
    s = repeated ? copy_concat(&rw, n) : ir_rewrite_copy(&rw, i);
  }
  if (s != LOOM_OK) {
    ir_rewrite_abort(&rw);
    return s;
  }
  return ir_rewrite_finish(&rw, out);
}
