/* Elementwise ops and assign: shape rules, and the builders of the ops
 * with attributes (the others come from the table: op_builders.c). */
#include "core/status.h"
#include "ir/ir.h"

loom_status_t ir_shape_unary(ir_infer_t *c) {
  c->out[0] = *c->in[0];
  return LOOM_OK;
}

loom_status_t ir_shape_unary_bool(ir_infer_t *c) {
  c->out[0] = *c->in[0];
  c->out[0].dtype = LOOM_BOOL;
  return LOOM_OK;
}

loom_status_t ir_shape_cast(ir_infer_t *c) {
  int64_t dtype = ir_attr_int(c->attrs, "dtype", -1);
  if (dtype < 0 || dtype >= LOOM_DTYPE_COUNT)
    return loom_fail(LOOM_ERR_DTYPE, "cast: target dtype %lld is not a dtype",
                     (long long)dtype);
  c->out[0] = *c->in[0];
  c->out[0].dtype = (loom_dtype_t)dtype;
  return LOOM_OK;
}

/* Both operands of a binary op share one dtype: Loom does not promote,
 * so that every conversion is a visible cast in the graph. */
static loom_status_t same_dtype(ir_infer_t *c, int i, int j) {
  if (c->in[i]->dtype != c->in[j]->dtype)
    return loom_fail(LOOM_ERR_DTYPE,
                     "%s: input %d is %s and input %d is %s; cast one of them",
                     ir_ops[c->op].name, i, loom_dtype_name(c->in[i]->dtype), j,
                     loom_dtype_name(c->in[j]->dtype));
  return LOOM_OK;
}

loom_status_t ir_shape_binary(ir_infer_t *c) {
  LOOM_TRY(same_dtype(c, 0, 1));
  c->out[0].dtype = c->in[0]->dtype;
  return ir_broadcast(c, c->in[0], c->in[1], &c->out[0]);
}

loom_status_t ir_shape_compare(ir_infer_t *c) {
  LOOM_TRY(same_dtype(c, 0, 1));
  c->out[0].dtype = LOOM_BOOL;
  return ir_broadcast(c, c->in[0], c->in[1], &c->out[0]);
}

loom_status_t ir_shape_where(ir_infer_t *c) {
  LOOM_TRY(ir_check_dtype(c, 0, DT_BOOL, "condition"));
  LOOM_TRY(same_dtype(c, 1, 2));
  ir_type_t ab;
  LOOM_TRY(ir_broadcast(c, c->in[1], c->in[2], &ab));
  c->out[0].dtype = c->in[1]->dtype;
  return ir_broadcast(c, c->in[0], &ab, &c->out[0]);
}

loom_status_t ir_shape_assign(ir_infer_t *c) {
  const ir_value_t *param = &c->g->values[c->in_ids[0]];
  if (param->kind != IR_VALUE_PARAM)
    return loom_fail(LOOM_ERR_INVALID, "assign: input 0 must be a parameter");
  if (!ir_type_equal(c->in[0], c->in[1]))
    return ir_shape_fail(c, "the value's type differs from the parameter's");
  return LOOM_OK;
}

/* ---- Builders ------------------------------------------------------------ */

loom_status_t loom_leaky_relu(loom_graph_t *g, loom_value_t x, double alpha,
                              loom_value_t *out) {
  ir_attrs_t a = {0};
  ir_attrs_float(&a, "alpha", alpha);
  return ir_build1(g, IR_OP_LEAKY_RELU, 1, &x, &a, out);
}

loom_status_t loom_elu(loom_graph_t *g, loom_value_t x, double alpha,
                       loom_value_t *out) {
  ir_attrs_t a = {0};
  ir_attrs_float(&a, "alpha", alpha);
  return ir_build1(g, IR_OP_ELU, 1, &x, &a, out);
}

loom_status_t loom_cast(loom_graph_t *g, loom_value_t x, loom_dtype_t dtype,
                        loom_value_t *out) {
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "dtype", dtype);
  return ir_build1(g, IR_OP_CAST, 1, &x, &a, out);
}

loom_status_t loom_clamp(loom_graph_t *g, loom_value_t x, double lo, double hi,
                         loom_value_t *out) {
  ir_attrs_t a = {0};
  ir_attrs_float(&a, "min", lo);
  ir_attrs_float(&a, "max", hi);
  return ir_build1(g, IR_OP_CLAMP, 1, &x, &a, out);
}
