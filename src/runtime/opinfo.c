/* The op table as the public API shows it. */
#include "core/sized.h"
#include "core/status.h"
#include "ir/ir.h"
#include "kernels/ref.h"

int loom_op_count(void) { return IR_OP_COUNT; }

loom_status_t loom_op_get_info(int i, loom_op_info_t *out) {
  if (i < 0 || i >= IR_OP_COUNT)
    return loom_fail(LOOM_ERR_INVALID, "op index %d is outside 0..%d", i,
                     IR_OP_COUNT - 1);
  const ir_op_info_t *info = &ir_ops[i];
  loom_op_info_t o = {.size = sizeof o,
                      .name = info->name,
                      .fusion_class = ir_fusion_class_name(info->fusion_class),
                      .doc = info->doc,
                      .has_reference = ref_kernels[i] != NULL,
                      .has_gradient = info->has_grad,
                      .not_differentiable = info->not_differentiable,
                      .has_codegen = info->has_codegen,
                      .data_dependent_shape = (info->flags & F_DATA_SHAPE) != 0};
  return core_sized_write(__func__, "loom_op_info_t", out, &o, sizeof o);
}
