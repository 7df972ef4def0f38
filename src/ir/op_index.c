/* Indexing ops: gather, scatter, embedding, one-hot: shape rules and builders. */
#include "core/status.h"
#include "ir/ir.h"

loom_status_t ir_shape_gather(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_index_select(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_scatter_add(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_embedding(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_one_hot(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

