/* Reductions, scans and top-k: shape rules and builders. */
#include "core/status.h"
#include "ir/ir.h"

loom_status_t ir_shape_reduce(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_argreduce(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

loom_status_t ir_shape_topk(ir_infer_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: shape rule missing", ir_ops[c->op].name);
}

