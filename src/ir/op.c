/* The op table, built from the rows of ops.def. */
#include "ir/ir.h"

#define EW IR_CLASS_EW
#define REDUCE IR_CLASS_REDUCE
#define CONTRACT IR_CLASS_CONTRACT
#define LAYOUT IR_CLASS_LAYOUT
#define HOST IR_CLASS_HOST

/* Declares each row's shape rule. */
#define LOOM_OP(ID, name, cls, imin, imax, nout, dt, fl, shape, ...) \
  loom_status_t ir_shape_##shape(ir_infer_t *c);
#include "ir/ops.def"
#undef LOOM_OP

/* grad names its rule, defined by a later layer, or says NONE (no rule
 * yet) or ZERO (not differentiable). */
#define HAS_RULE(rule) (#rule[0] != 'N' && #rule[0] != 'Z')
#define IS_ZERO(rule) (#rule[0] == 'Z')

const ir_op_info_t ir_ops[IR_OP_COUNT] = {
#define LOOM_OP(ID, nm, cls, imin, imax, nout, dt, fl, shp, ref, grad, dec, pad, \
                build, at, dc)                                                     \
  [IR_OP_##ID] = {.name = #nm,                                              \
                  .fusion_class = cls,                                      \
                  .in_min = imin,                                           \
                  .in_max = imax,                                           \
                  .n_out = nout,                                            \
                  .dtypes = dt,                                             \
                  .flags = fl,                                              \
                  .shape = ir_shape_##shp,                                \
                  .has_grad = HAS_RULE(grad),                               \
                  .not_differentiable = IS_ZERO(grad),                      \
                  .attrs = at,                                              \
                  .doc = dc},
#include "ir/ops.def"
#undef LOOM_OP
};

const char *ir_fusion_class_name(ir_fusion_class_t c) {
  static const char *const names[] = {"elementwise", "reduction",
                                      "contraction", "layout", "host"};
  return (unsigned)c < 5 ? names[c] : "?";
}
