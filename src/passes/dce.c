/* Dead code elimination: a node lives when one of its outputs reaches a
 * graph output, or when it has a side effect (an assign, a collective and
 * the wait that ends it). Walking the
 * nodes backwards finds them all in one pass, since every reader comes
 * after what it reads. */
#include "core/alloc.h"
#include "core/status.h"
#include "ir/rewrite.h"
#include "passes/passes.h"

static bool node_live(const ir_node_t *n, const uint8_t *live) {
  if (ir_ops[n->op].flags & (F_SIDE_EFFECT | F_COLLECTIVE)) return true;
  /* a started collective always runs: its wait ends it, used or not */
  if (n->op == IR_OP_ALL_REDUCE_WAIT) return true;
  for (int k = 0; k < n->n_out; k++)
    if (live[n->out[k]]) return true;
  return false;
}

/* live[v] for values, then live nodes marked in keep. */
static void mark_live(const loom_graph_t *g, uint8_t *live, uint8_t *keep) {
  for (int64_t i = 0; i < g->n_outputs; i++) live[g->outputs[i]] = 1;
  for (int64_t i = g->n_nodes - 1; i >= 0; i--) {
    const ir_node_t *n = &g->nodes[i];
    keep[i] = node_live(n, live);
    if (!keep[i]) continue;
    for (int k = 0; k < n->n_in; k++) live[n->in[k]] = 1;
  }
}

loom_status_t pass_dce(const loom_graph_t *src, loom_graph_t **out) {
  LOOM_CHECK_ARG(src);
  LOOM_CHECK_ARG(out);
  uint8_t *live = core_calloc((size_t)(src->n_values + 1), 1);
  uint8_t *keep = core_calloc((size_t)(src->n_nodes + 1), 1);
  if (!live || !keep) {
    core_free(live);
    core_free(keep);
    return loom_fail(LOOM_ERR_NOMEM, "dce: out of memory");
  }
  mark_live(src, live, keep);
  ir_rewriter_t rw;
  loom_status_t s = ir_rewrite_begin(src, &rw);
  for (int64_t i = 0; s == LOOM_OK && i < src->n_nodes; i++)
    if (keep[i]) s = ir_rewrite_copy(&rw, i);
  core_free(live);
  core_free(keep);
  if (s != LOOM_OK) {
    ir_rewrite_abort(&rw);
    return s;
  }
  return ir_rewrite_finish(&rw, out);
}
