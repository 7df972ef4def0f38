/* Contractions: matmul and convolutions: shape rules and builders. */
#include "core/status.h"
#include "ir/ir.h"

loom_status_t ir_shape_matmul(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_conv2d(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_conv_transpose2d(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

