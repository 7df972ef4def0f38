/* Helpers for gradient rules: emitting ops, scalars, and summing a
 * gradient back over the dims along which an operand was broadcast. */
#include "core/status.h"
#include "passes/grad.h"

loom_status_t grad_op(grad_ctx_t *c, ir_op_t op, int n_in, const int32_t *in,
                      const ir_attrs_t *attrs, int32_t *out) {
  return ir_add_node(c->g, op, n_in, in, attrs, out, 1);
}

loom_status_t grad_unary(grad_ctx_t *c, ir_op_t op, int32_t x, int32_t *out) {
  return grad_op(c, op, 1, &x, NULL, out);
}

loom_status_t grad_binary(grad_ctx_t *c, ir_op_t op, int32_t a, int32_t b,
                          int32_t *out) {
  int32_t in[2] = {a, b};
  return grad_op(c, op, 2, in, NULL, out);
}

loom_status_t grad_scalar(grad_ctx_t *c, double v, loom_dtype_t dtype,
                          int32_t *out) {
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "shape", 0, NULL);
  ir_attrs_float(&a, "value", v);
  ir_attrs_int(&a, "dtype", dtype);
  return grad_op(c, IR_OP_FULL, 0, NULL, &a, out);
}

const ir_type_t *grad_type(const grad_ctx_t *c, int32_t v) {
  return &c->g->values[v].type;
}

/* The axes of dx (of type d) that a value of type t was broadcast along:
 * the leading ones t lacks, and those where t has 1 and d does not. */
static int broadcast_axes(const ir_type_t *d, const ir_type_t *t,
                          int64_t *axes) {
  int lead = d->rank - t->rank, n = 0;
  for (int i = 0; i < d->rank; i++)
    if (i < lead || (t->dims[i - lead] == 1 && d->dims[i] != 1)) axes[n++] = i;
  return n;
}

loom_status_t grad_unbroadcast(grad_ctx_t *c, int32_t dx,
                               const ir_type_t *target, int32_t *out) {
  /* Copies: emitting nodes may move the graph's value array. */
  ir_type_t d = *grad_type(c, dx), t = *target;
  if (d.rank < t.rank)
    return loom_fail(LOOM_ERR_SHAPE, "grad_unbroadcast: a gradient of rank %d "
                     "cannot sum down to rank %d", d.rank, t.rank);
  int64_t axes[LOOM_MAX_RANK];
  int n = broadcast_axes(&d, &t, axes);
  int32_t v = dx;
  if (n > 0) {
    ir_attrs_t a = {0};
    ir_attrs_ints(&a, "axes", n, axes);
    ir_attrs_int(&a, "keepdim", 1);
    LOOM_TRY(grad_op(c, IR_OP_SUM, 1, &v, &a, &v));
  }
  if (!ir_type_equal(grad_type(c, v), &t)) {
    ir_attrs_t a = {0};
    ir_attrs_ints(&a, "shape", t.rank, t.dims);
    LOOM_TRY(grad_op(c, IR_OP_RESHAPE, 1, &v, &a, &v));
  }
  *out = v;
  return LOOM_OK;
}
