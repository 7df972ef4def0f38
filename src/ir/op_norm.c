/* Pooling, softmax and normalization: shape rules and builders. */
#include "core/status.h"
#include "ir/ir.h"

loom_status_t ir_shape_pool2d(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_global_pool(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_unary_axis(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_norm(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_batch_norm(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

