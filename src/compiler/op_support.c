/* loom_op_get_info: an op's row of the table with what the layers below
 * provide for it (a reference kernel, code from the default back end). */
#include "backend/backend.h"
#include "core/sized.h"
#include "core/status.h"
#include "ir/ir.h"
#include "kernels/ref.h"

/* The table's flags as the public API names them. */
static uint32_t public_flags(const ir_op_info_t *info) {
  return (info->has_grad ? LOOM_OP_DIFFERENTIABLE : 0) |
         (info->flags & F_RANDOM ? LOOM_OP_RANDOM : 0) |
         (info->flags & F_SIDE_EFFECT ? LOOM_OP_SIDE_EFFECT : 0) |
         (info->flags & F_DATA_SHAPE ? LOOM_OP_DATA_SHAPE : 0) |
         (info->flags & F_SUBGRAPH ? LOOM_OP_SUBGRAPH : 0) |
         (info->flags & F_COLLECTIVE ? LOOM_OP_COLLECTIVE : 0);
}

loom_status_t loom_op_get_info(int i, loom_op_info_t *out) {
  LOOM_TRY(ir_op_check(__func__, i));
  const ir_op_info_t *info = &ir_ops[i];
  const be_backend_t *target = be_find(NULL);
  loom_op_info_t o = {.size = sizeof o,
                      .name = info->name,
                      .fusion_class = ir_fusion_class_name(info->fusion_class),
                      .doc = info->doc,
                      .has_reference = ref_kernels[i] != NULL,
                      .has_gradient = info->has_grad,
                      .not_differentiable = info->not_differentiable,
                      .has_codegen = target && target->generates((ir_op_t)i),
                      .data_dependent_shape = (info->flags & F_DATA_SHAPE) != 0,
                      .in_min = info->in_min,
                      .in_max = info->in_max,
                      .n_out = info->n_out,
                      .dtypes = info->dtypes,
                      .flags = public_flags(info),
                      .n_attrs = ir_op_schema((ir_op_t)i)->n};
  return core_sized_write(__func__, "loom_op_info_t", out, &o, sizeof o);
}

int loom_target_count(void) {
  int n;
  be_list(&n);
  return n;
}

const char *loom_target_name(int i) {
  int n;
  const be_backend_t *const *all = be_list(&n);
  return i >= 0 && i < n ? all[i]->name : NULL;
}

const char *loom_target_isa(const char *target) {
  const be_backend_t *b = be_find(target);
  return b && b->isa ? b->isa() : NULL;
}

loom_status_t loom_op_generated(int op, const char *target, int *out) {
  LOOM_CHECK_ARG(out);
  LOOM_TRY(ir_op_check(__func__, op));
  const be_backend_t *b = be_find(target);
  if (!b) {
    char names[256];
    be_names(names, sizeof names);
    return loom_fail(LOOM_ERR_INVALID, "%s: no back end is called '%s' (there are: %s)",
                     __func__, target, names);
  }
  *out = b->generates((ir_op_t)op) ? 1 : 0;
  return LOOM_OK;
}
