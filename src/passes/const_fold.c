/* Constant folding: a node whose inputs are all constants runs now, with
 * its reference kernel, and its outputs become constants. Random and
 * side-effecting ops must run at run time, data-shaped ones have no
 * fixed type, and results above a size stay computed (a folded constant
 * is memory the graph carries forever). */
#include <string.h>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/rewrite.h"
#include "kernels/ref.h"
#include "passes/passes.h"

/* The largest result folded, in elements; a transpose folds up to the
 * larger limit, since it rearranges a constant the graph holds already
 * (a recurrent weight that a loop's body reads each iteration). */
#define FOLD_MAX_ELEMENTS (64 * 1024)
#define FOLD_MAX_TRANSPOSED (16 * 1024 * 1024)

/* Whether n's outputs have constant shapes within the size limit. */
static bool small_outputs(const loom_graph_t *g, const ir_node_t *n) {
  int64_t limit = n->op == IR_OP_TRANSPOSE ? FOLD_MAX_TRANSPOSED : FOLD_MAX_ELEMENTS;
  for (int k = 0; k < n->n_out; k++) {
    const ir_type_t *t = &g->values[n->out[k]].type;
    int64_t count = 1;
    for (int d = 0; d < t->rank; d++) {
      if (!ir_dim_is_const(t->dims[d])) return false;
      count *= t->dims[d];
      if (count > limit) return false;
    }
  }
  return true;
}

static bool foldable(const ir_rewriter_t *rw, const ir_node_t *n) {
  /* A subgraph may read parameters of its own, which folding would freeze. */
  if (ir_ops[n->op].flags & (F_RANDOM | F_SIDE_EFFECT | F_DATA_SHAPE | F_SUBGRAPH | F_COLLECTIVE))
    return false;
  for (int k = 0; k < n->n_in; k++) {
    int32_t d = ir_rewrite_lookup(rw, n->in[k]);
    if (d < 0 || rw->dst->values[d].kind != IR_VALUE_CONST) return false;
  }
  return small_outputs(rw->src, n);
}

static loom_status_t new_outputs(const loom_graph_t *g, const ir_node_t *n,
                                 loom_tensor_t **outs) {
  for (int k = 0; k < n->n_out; k++) {
    const ir_type_t *t = &g->values[n->out[k]].type;
    LOOM_TRY(tensor_new(t->dtype, t->rank, t->dims, &outs[k]));
  }
  return LOOM_OK;
}

/* Runs n on its constant inputs. A kernel that fails (an index out of
 * range) leaves the node to fail at run time, where the user sees it. */
static loom_status_t fold_node(ir_rewriter_t *rw, int64_t i, bool *done) {
  const ir_node_t *n = &rw->src->nodes[i];
  const loom_tensor_t *ins[n->n_in > 0 ? n->n_in : 1];
  loom_tensor_t *outs[n->n_out > 0 ? n->n_out : 1];
  memset(outs, 0, sizeof outs);
  for (int k = 0; k < n->n_in; k++)
    ins[k] = rw->dst->values[ir_rewrite_lookup(rw, n->in[k])].data;
  ref_call_t call = {.g = rw->src, .node = n, .attrs = n->attrs, .n_in = n->n_in,
                     .in = ins, .n_out = n->n_out, .out = outs};
  loom_status_t s = new_outputs(rw->src, n, outs);
  if (s == LOOM_OK && ref_kernels[n->op](&call) != LOOM_OK) {
    for (int k = 0; k < n->n_out; k++) loom_tensor_destroy(outs[k]);
    return LOOM_OK;
  }
  int k = 0;
  for (; s == LOOM_OK && k < n->n_out; k++) {
    int32_t d;
    s = ir_rewrite_constant(rw, outs[k], &d);
    if (s == LOOM_OK) ir_rewrite_map(rw, n->out[k], d);
  }
  for (; k < n->n_out; k++) loom_tensor_destroy(outs[k]);
  *done = s == LOOM_OK;
  return s;
}

loom_status_t pass_const_fold(const loom_graph_t *src, loom_graph_t **out) {
  LOOM_CHECK_ARG(src);
  LOOM_CHECK_ARG(out);
  ir_rewriter_t rw;
  LOOM_TRY(ir_rewrite_begin(src, &rw));
  for (int64_t i = 0; i < src->n_nodes; i++) {
    bool done = false;
    loom_status_t s = LOOM_OK;
    if (foldable(&rw, &src->nodes[i])) s = fold_node(&rw, i, &done);
    if (s == LOOM_OK && !done) s = ir_rewrite_copy(&rw, i);
    if (s != LOOM_OK) {
      ir_rewrite_abort(&rw);
      return s;
    }
  }
  return ir_rewrite_finish(&rw, out);
}
