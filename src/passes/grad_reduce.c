/* Gradient rules of reductions, scans, top-k and softmax. A reduced
 * gradient goes back by reshaping it to the input's rank (reduced dims of
 * size 1) and letting broadcasting spread it over the reduced dims. */
#include <string.h>

#include "core/status.h"
#include "passes/grad.h"

/* ---- Helpers ------------------------------------------------------------- */

/* The reduced axes of the node (all when "axes" is absent). */
static void reduced_axes(const grad_ctx_t *c, int rank, bool *red) {
  const int64_t *axes = NULL;
  int n = ir_attr_ints(c->node.attrs, "axes", &axes);
  for (int d = 0; d < LOOM_MAX_RANK; d++) red[d] = n < 0 && d < rank;
  for (int i = 0; i < n; i++) red[axes[i] < 0 ? axes[i] + rank : axes[i]] = true;
}

static loom_status_t reshape_to(grad_ctx_t *c, int32_t v, int rank,
                                const ir_dim_t *dims, int32_t *out) {
  const ir_type_t *t = grad_type(c, v);
  if (t->rank == rank && !memcmp(t->dims, dims, sizeof(ir_dim_t) * (size_t)rank)) {
    *out = v;
    return LOOM_OK;
  }
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "shape", rank, dims);
  return grad_op(c, IR_OP_RESHAPE, 1, &v, &a, out);
}

/* A reduced value v (keepdim or not) reshaped to keep the reduced dims
 * with size 1, so that it broadcasts against the input x. */
static loom_status_t keep_dims(grad_ctx_t *c, int32_t v, int32_t *out) {
  const ir_type_t *x = grad_type(c, c->node.in[0]);
  bool red[LOOM_MAX_RANK];
  reduced_axes(c, x->rank, red);
  ir_type_t kept = *x;
  for (int d = 0; d < x->rank; d++)
    if (red[d]) kept.dims[d] = 1;
  return reshape_to(c, v, kept.rank, kept.dims, out);
}

/* v broadcast to exactly the type of input 0. */
static loom_status_t expand_to_input(grad_ctx_t *c, int32_t v, int32_t *out) {
  const ir_type_t *x = grad_type(c, c->node.in[0]);
  if (ir_type_equal(grad_type(c, v), x)) {
    *out = v;
    return LOOM_OK;
  }
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "shape", x->rank, x->dims);
  return grad_op(c, IR_OP_EXPAND, 1, &v, &a, out);
}

/* The same reduction of x with keepdim, under op. */
static loom_status_t reduce_keep(grad_ctx_t *c, ir_op_t op, int32_t x,
                                 int32_t *out) {
  ir_attrs_t a = {0};
  const int64_t *axes;
  int n = ir_attr_ints(c->node.attrs, "axes", &axes);
  if (n >= 0) ir_attrs_ints(&a, "axes", n, axes);
  ir_attrs_int(&a, "keepdim", 1);
  return grad_op(c, op, 1, &x, &a, out);
}

/* The number of elements each output reduces, as a keepdim-shaped value
 * (a scalar when the reduced dims are constants). */
static loom_status_t reduced_count(grad_ctx_t *c, int32_t *out) {
  const ir_type_t *x = grad_type(c, c->node.in[0]);
  bool red[LOOM_MAX_RANK], symbolic = false;
  reduced_axes(c, x->rank, red);
  double n = 1;
  for (int d = 0; d < x->rank; d++)
    if (red[d]) {
      symbolic |= ir_dim_is_sym(x->dims[d]);
      n *= (double)x->dims[d];
    }
  if (!symbolic) return grad_scalar(c, n, x->dtype, out);
  /* Only a run knows the count: sum ones over the same axes. */
  int32_t one, ones;
  LOOM_TRY(grad_scalar(c, 1, x->dtype, &one));
  LOOM_TRY(expand_to_input(c, one, &ones));
  return reduce_keep(c, IR_OP_SUM, ones, out);
}

/* dout reshaped to keep the reduced dims. */
static loom_status_t dout_kept(grad_ctx_t *c, int32_t *out) {
  return keep_dims(c, c->dout[0], out);
}

/* The node's output reshaped to keep the reduced dims. */
static loom_status_t out_kept(grad_ctx_t *c, int32_t *out) {
  return keep_dims(c, c->node.out[0], out);
}

/* din[0] = factor * dout (kept), factor of the input's shape. */
static loom_status_t times_dout(grad_ctx_t *c, int32_t factor) {
  int32_t dy, dx;
  LOOM_TRY(dout_kept(c, &dy));
  LOOM_TRY(grad_binary(c, IR_OP_MUL, factor, dy, &dx));
  return expand_to_input(c, dx, &c->din[0]);
}

static loom_status_t bool_to(grad_ctx_t *c, int32_t b, loom_dtype_t dtype,
                             int32_t *out) {
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "dtype", dtype);
  return grad_op(c, IR_OP_CAST, 1, &b, &a, out);
}

/* ---- Reductions ------------------------------------------------------------ */

loom_status_t grad_sum(grad_ctx_t *c) {
  int32_t dy;
  LOOM_TRY(dout_kept(c, &dy));
  return expand_to_input(c, dy, &c->din[0]);
}

loom_status_t grad_mean(grad_ctx_t *c) {
  int32_t dy, n, dx;
  LOOM_TRY(dout_kept(c, &dy));
  LOOM_TRY(reduced_count(c, &n));
  LOOM_TRY(grad_binary(c, IR_OP_DIV, dy, n, &dx));
  return expand_to_input(c, dx, &c->din[0]);
}

/* As torch.amax / amin: ties share the gradient evenly. */
/* The extreme's gradient goes to its ties in equal shares; a NaN extreme
 * is tied by the NaNs (PyTorch's rule: x == NaN holds nowhere, and the
 * shares would be 0 / 0 everywhere). */
loom_status_t grad_max(grad_ctx_t *c) {
  int32_t x = c->node.in[0], y, eq, nan_x, nan_y, both, hit, mask, ties, dy, share;
  loom_dtype_t dt = grad_type(c, x)->dtype;
  LOOM_TRY(out_kept(c, &y));
  LOOM_TRY(grad_binary(c, IR_OP_EQ, x, y, &eq));
  LOOM_TRY(grad_unary(c, IR_OP_ISNAN, x, &nan_x));
  LOOM_TRY(grad_unary(c, IR_OP_ISNAN, y, &nan_y));
  LOOM_TRY(grad_binary(c, IR_OP_AND, nan_x, nan_y, &both));
  LOOM_TRY(grad_binary(c, IR_OP_OR, eq, both, &hit));
  LOOM_TRY(bool_to(c, hit, dt, &mask));
  LOOM_TRY(reduce_keep(c, IR_OP_SUM, mask, &ties));
  LOOM_TRY(dout_kept(c, &dy));
  LOOM_TRY(grad_binary(c, IR_OP_DIV, dy, ties, &share));
  return grad_binary(c, IR_OP_MUL, mask, share, &c->din[0]);
}

loom_status_t grad_min(grad_ctx_t *c) { return grad_max(c); }

/* d/dx_i prod = product of the others, computed without dividing by a
 * zero: the product of the non-zero entries divided by x_i's non-zero
 * stand-in, kept only where no other entry is zero. */
loom_status_t grad_prod(grad_ctx_t *c) {
  int32_t x = c->node.in[0], zero, one, is0, nz, p, others, z, zc, zo, ok, g;
  loom_dtype_t dt = grad_type(c, x)->dtype;
  LOOM_TRY(grad_scalar(c, 0, dt, &zero));
  LOOM_TRY(grad_scalar(c, 1, dt, &one));
  LOOM_TRY(grad_binary(c, IR_OP_EQ, x, zero, &is0));
  int32_t w[3] = {is0, one, x};
  LOOM_TRY(grad_op(c, IR_OP_WHERE, 3, w, NULL, &nz));
  LOOM_TRY(reduce_keep(c, IR_OP_PROD, nz, &p));
  LOOM_TRY(grad_binary(c, IR_OP_DIV, p, nz, &others));
  LOOM_TRY(bool_to(c, is0, dt, &z));
  LOOM_TRY(reduce_keep(c, IR_OP_SUM, z, &zc));
  LOOM_TRY(grad_binary(c, IR_OP_SUB, zc, z, &zo));
  LOOM_TRY(grad_binary(c, IR_OP_EQ, zo, zero, &ok));
  int32_t w2[3] = {ok, others, zero};
  LOOM_TRY(grad_op(c, IR_OP_WHERE, 3, w2, NULL, &g));
  return times_dout(c, g);
}

loom_status_t grad_logsumexp(grad_ctx_t *c) {
  int32_t y, d, e;
  LOOM_TRY(out_kept(c, &y));
  LOOM_TRY(grad_binary(c, IR_OP_SUB, c->node.in[0], y, &d));
  LOOM_TRY(grad_unary(c, IR_OP_EXP, d, &e));
  return times_dout(c, e);
}

/* d var / dx = 2 (x - mean) / (n - correction). */
loom_status_t grad_variance(grad_ctx_t *c) {
  int32_t x = c->node.in[0], m, d, two, n, corr, denom, f, g;
  loom_dtype_t dt = grad_type(c, x)->dtype;
  LOOM_TRY(reduce_keep(c, IR_OP_MEAN, x, &m));
  LOOM_TRY(grad_binary(c, IR_OP_SUB, x, m, &d));
  LOOM_TRY(reduced_count(c, &n));
  LOOM_TRY(grad_scalar(c, (double)ir_attr_int(c->node.attrs, "correction", 0),
                       dt, &corr));
  LOOM_TRY(grad_binary(c, IR_OP_SUB, n, corr, &denom));
  LOOM_TRY(grad_scalar(c, 2, dt, &two));
  LOOM_TRY(grad_binary(c, IR_OP_DIV, two, denom, &f));
  LOOM_TRY(grad_binary(c, IR_OP_MUL, d, f, &g));
  return times_dout(c, g);
}

/* ---- Scans and top-k --------------------------------------------------------- */

/* The adjoint of a running sum is the running sum the other way. */
loom_status_t grad_cumsum(grad_ctx_t *c) {
  ir_attrs_t a;
  ir_attrs_copy(&a, c->node.attrs);
  ir_attrs_int(&a, "reverse", !ir_attr_int(&a, "reverse", 0));
  return grad_op(c, IR_OP_CUMSUM, 1, &c->dout[0], &a, &c->din[0]);
}

/* Values only: their gradient goes back to where they were taken. */
loom_status_t grad_topk(grad_ctx_t *c) {
  if (c->dout[0] < 0) return LOOM_OK;
  int32_t zero, zeros;
  LOOM_TRY(grad_scalar(c, 0, grad_type(c, c->node.in[0])->dtype, &zero));
  LOOM_TRY(expand_to_input(c, zero, &zeros));
  int rank = grad_type(c, c->node.in[0])->rank;
  int64_t axis = ir_attr_int(c->node.attrs, "axis", -1);
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "axis", axis < 0 ? axis + rank : axis);
  int32_t in[3] = {zeros, c->node.out[1], c->dout[0]};
  return grad_op(c, IR_OP_SCATTER_ADD, 3, in, &a, &c->din[0]);
}

/* ---- Softmax ------------------------------------------------------------------ */

/* The sum of v along the softmax axis, kept. */
static loom_status_t sum_axis(grad_ctx_t *c, int32_t v, int32_t *out) {
  int64_t axis = ir_attr_int(c->node.attrs, "axis", -1);
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "axes", 1, &axis);
  ir_attrs_int(&a, "keepdim", 1);
  return grad_op(c, IR_OP_SUM, 1, &v, &a, out);
}

/* dx = y * (dy - sum(dy * y)). */
loom_status_t grad_softmax(grad_ctx_t *c) {
  int32_t y = c->node.out[0], dy = c->dout[0], p, s, d;
  LOOM_TRY(grad_binary(c, IR_OP_MUL, dy, y, &p));
  LOOM_TRY(sum_axis(c, p, &s));
  LOOM_TRY(grad_binary(c, IR_OP_SUB, dy, s, &d));
  return grad_binary(c, IR_OP_MUL, y, d, &c->din[0]);
}

/* dx = dy - softmax(x) * sum(dy), softmax(x) = e^y. */
loom_status_t grad_log_softmax(grad_ctx_t *c) {
  int32_t y = c->node.out[0], dy = c->dout[0], p, s, t;
  LOOM_TRY(grad_unary(c, IR_OP_EXP, y, &p));
  LOOM_TRY(sum_axis(c, dy, &s));
  LOOM_TRY(grad_binary(c, IR_OP_MUL, p, s, &t));
  return grad_binary(c, IR_OP_SUB, dy, t, &c->din[0]);
}
