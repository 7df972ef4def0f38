/* The op table as the public API shows it. */
#include "core/status.h"
#include "ir/ir.h"
#include "kernels/ref.h"

int loom_op_count(void) { return IR_OP_COUNT; }

loom_status_t loom_op_get_info(int i, loom_op_info_t *out) {
  LOOM_CHECK_ARG(out);
  if (i < 0 || i >= IR_OP_COUNT)
    return loom_fail(LOOM_ERR_INVALID, "op index %d is outside 0..%d", i,
                     IR_OP_COUNT - 1);
  const ir_op_info_t *info = &ir_ops[i];
  out->name = info->name;
  out->fusion_class = ir_fusion_class_name(info->fusion_class);
  out->doc = info->doc;
  out->has_reference = ref_kernels[i] != NULL;
  out->has_gradient = info->has_grad;
  out->not_differentiable = info->not_differentiable;
  out->has_codegen = info->has_codegen;
  out->data_dependent_shape = (info->flags & F_DATA_SHAPE) != 0;
  return LOOM_OK;
}
