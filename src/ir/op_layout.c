/* Layout ops: reshape, permute, slice, concat, pad and friends: shape rules and builders. */
#include "core/status.h"
#include "ir/ir.h"

loom_status_t ir_shape_reshape(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_transpose(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_expand(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_squeeze(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_unsqueeze(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_slice(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_concat(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_split(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_pad(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_flip(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_tile(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

