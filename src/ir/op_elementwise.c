/* Elementwise ops and assign: shape rules and builders. */
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

#define UNARY_BUILDER(name, ID)                                             \
  loom_status_t loom_##name(loom_graph_t *g, loom_value_t x,                \
                            loom_value_t *out) {                            \
    return ir_build1(g, IR_OP_##ID, 1, &x, NULL, out);                      \
  }

UNARY_BUILDER(neg, NEG)
UNARY_BUILDER(abs, ABS)
UNARY_BUILDER(exp, EXP)
UNARY_BUILDER(log, LOG)
UNARY_BUILDER(sqrt, SQRT)
UNARY_BUILDER(rsqrt, RSQRT)
UNARY_BUILDER(reciprocal, RECIPROCAL)
UNARY_BUILDER(tanh, TANH)
UNARY_BUILDER(sigmoid, SIGMOID)
UNARY_BUILDER(relu, RELU)
UNARY_BUILDER(gelu, GELU)
UNARY_BUILDER(gelu_tanh, GELU_TANH)
UNARY_BUILDER(silu, SILU)
UNARY_BUILDER(softplus, SOFTPLUS)
UNARY_BUILDER(sin, SIN)
UNARY_BUILDER(cos, COS)
UNARY_BUILDER(erf, ERF)
UNARY_BUILDER(floor, FLOOR)
UNARY_BUILDER(ceil, CEIL)
UNARY_BUILDER(round, ROUND)
UNARY_BUILDER(sign, SIGN)
UNARY_BUILDER(not, NOT)
UNARY_BUILDER(isnan, ISNAN)
UNARY_BUILDER(identity, IDENTITY)
UNARY_BUILDER(stop_gradient, STOP_GRADIENT)

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

#define BINARY_BUILDER(name, ID)                                            \
  loom_status_t loom_##name(loom_graph_t *g, loom_value_t a, loom_value_t b,\
                            loom_value_t *out) {                            \
    loom_value_t in[2] = {a, b};                                            \
    return ir_build1(g, IR_OP_##ID, 2, in, NULL, out);                      \
  }

BINARY_BUILDER(add, ADD)
BINARY_BUILDER(sub, SUB)
BINARY_BUILDER(mul, MUL)
BINARY_BUILDER(div, DIV)
BINARY_BUILDER(pow, POW)
BINARY_BUILDER(maximum, MAXIMUM)
BINARY_BUILDER(minimum, MINIMUM)
BINARY_BUILDER(mod, MOD)
BINARY_BUILDER(eq, EQ)
BINARY_BUILDER(ne, NE)
BINARY_BUILDER(lt, LT)
BINARY_BUILDER(le, LE)
BINARY_BUILDER(gt, GT)
BINARY_BUILDER(ge, GE)
BINARY_BUILDER(and, AND)
BINARY_BUILDER(or, OR)
BINARY_BUILDER(xor, XOR)

loom_status_t loom_where(loom_graph_t *g, loom_value_t cond, loom_value_t a,
                         loom_value_t b, loom_value_t *out) {
  loom_value_t in[3] = {cond, a, b};
  return ir_build1(g, IR_OP_WHERE, 3, in, NULL, out);
}
