/* Reductions, scans and top-k: shape rules and builders. */
#include "core/status.h"
#include "ir/ir.h"

/* A 0/1 flag attribute; anything else is a bad value. */
static loom_status_t flag_attr(ir_infer_t *c, const char *name, bool *out) {
  int64_t v = ir_op_int(c->op, c->attrs, name);
  if (v != 0 && v != 1)
    return loom_fail(LOOM_ERR_INVALID, "%s: attribute '%s' must be 0 or 1, not %lld",
                     ir_ops[c->op].name, name, (long long)v);
  *out = v == 1;
  return LOOM_OK;
}

/* Marks the axes listed in attribute "axes" (all when absent) in red. */
static loom_status_t reduced_axes(ir_infer_t *c, int rank, bool *red) {
  const int64_t *axes = NULL;
  int n = ir_attr_ints(c->attrs, "axes", &axes);
  for (int d = 0; d < LOOM_MAX_RANK; d++) red[d] = n < 0 && d < rank;
  for (int i = 0; i < n; i++) {
    int a;
    LOOM_TRY(ir_axis(c, axes[i], rank, &a));
    if (red[a])
      return loom_fail(LOOM_ERR_INVALID, "%s: axis %lld is listed twice in axes",
                       ir_ops[c->op].name, (long long)axes[i]);
    red[a] = true;
  }
  return LOOM_OK;
}

/* Extremes of nothing are undefined: a reduced dim known to be 0 fails
 * here; a symbolic one that turns out 0 fails in the kernel. */
static loom_status_t check_nonempty(ir_infer_t *c, const bool *red) {
  for (int d = 0; d < c->in[0]->rank; d++)
    if (red[d] && c->in[0]->dims[d] == 0)
      return ir_shape_fail(c, "reduces dim %d of size 0, which has no %s", d,
                           c->op == IR_OP_MAX || c->op == IR_OP_ARGMAX
                               ? "maximum" : "minimum");
  return LOOM_OK;
}

static bool needs_nonempty(ir_op_t op) {
  return op == IR_OP_MAX || op == IR_OP_MIN || op == IR_OP_ARGMAX ||
         op == IR_OP_ARGMIN;
}

/* The dtype of op's result on x: x's, or i64 for integers and bool where
 * the op says so (PyTorch's sum of a bool tensor counts). */
static loom_dtype_t result_dtype(const ir_infer_t *c) {
  loom_dtype_t d = c->in[0]->dtype;
  return (ir_ops[c->op].flags & F_INT_I64) && !dtype_is_float(d) ? LOOM_I64 : d;
}

/* Drops the reduced dims, or keeps them with size 1. */
static void reduced_type(const ir_type_t *in, const bool *red, bool keepdim,
                         loom_dtype_t dtype, ir_type_t *out) {
  out->dtype = dtype;
  out->rank = 0;
  for (int d = 0; d < in->rank; d++) {
    if (!red[d]) out->dims[out->rank++] = in->dims[d];
    else if (keepdim) out->dims[out->rank++] = 1;
  }
}

loom_status_t ir_shape_reduce(ir_infer_t *c) {
  const ir_type_t *x = c->in[0];
  bool red[LOOM_MAX_RANK], keepdim = false;
  LOOM_TRY(reduced_axes(c, x->rank, red));
  LOOM_TRY(flag_attr(c, "keepdim", &keepdim));
  if (needs_nonempty(c->op)) LOOM_TRY(check_nonempty(c, red));
  int64_t correction = ir_op_int(c->op, c->attrs, "correction");
  if (correction < 0)
    return loom_fail(LOOM_ERR_INVALID, "%s: correction %lld is negative",
                     ir_ops[c->op].name, (long long)correction);
  reduced_type(x, red, keepdim, result_dtype(c), &c->out[0]);
  return LOOM_OK;
}

loom_status_t ir_shape_argreduce(ir_infer_t *c) {
  const ir_type_t *x = c->in[0];
  bool red[LOOM_MAX_RANK] = {0}, keepdim = false;
  LOOM_TRY(flag_attr(c, "keepdim", &keepdim));
  if (ir_attrs_find(c->attrs, "axis")) {
    int a;
    LOOM_TRY(ir_axis(c, ir_attr_int(c->attrs, "axis", 0), x->rank, &a));
    red[a] = x->rank > 0;
  } else {
    for (int d = 0; d < x->rank; d++) red[d] = true;
  }
  LOOM_TRY(check_nonempty(c, red));
  reduced_type(x, red, keepdim, LOOM_I64, &c->out[0]);
  return LOOM_OK;
}

loom_status_t ir_shape_cumsum(ir_infer_t *c) {
  int a;
  bool flag = false;
  LOOM_TRY(ir_axis(c, ir_attr_int(c->attrs, "axis", 0), c->in[0]->rank, &a));
  LOOM_TRY(flag_attr(c, "exclusive", &flag));
  LOOM_TRY(flag_attr(c, "reverse", &flag));
  c->out[0] = *c->in[0];
  c->out[0].dtype = result_dtype(c);
  return LOOM_OK;
}

loom_status_t ir_shape_topk(ir_infer_t *c) {
  const ir_type_t *x = c->in[0];
  int64_t k = ir_attr_int(c->attrs, "k", 0);
  int a;
  bool largest = true;
  if (x->rank == 0) return ir_shape_fail(c, "needs an input of rank 1 or more");
  LOOM_TRY(ir_axis(c, ir_op_int(c->op, c->attrs, "axis"), x->rank, &a));
  LOOM_TRY(flag_attr(c, "largest", &largest));
  if (k < 0)
    return loom_fail(LOOM_ERR_INVALID, "topk: k %lld is negative", (long long)k);
  if (ir_dim_is_const(x->dims[a]) && k > x->dims[a])
    return ir_shape_fail(c, "k %lld is larger than dim %d (size %lld)",
                         (long long)k, a, (long long)x->dims[a]);
  c->out[0] = *x;
  c->out[0].dims[a] = k;
  c->out[1] = c->out[0];
  c->out[1].dtype = LOOM_I64;
  return LOOM_OK;
}

/* ---- Builders ------------------------------------------------------------ */

/* Sets "axes" unless both n_axes and axes say "all". */
static loom_status_t set_axes(ir_op_t op, ir_attrs_t *a, int n_axes,
                              const int64_t *axes) {
  if (n_axes < 0 || (n_axes > 0 && !axes))
    return loom_fail(LOOM_ERR_INVALID, "%s: n_axes is %d and axes is %s",
                     ir_ops[op].name, n_axes, axes ? "given" : "null");
  /* A non-null empty list reduces over no axes, as NumPy's axis=(). */
  if (axes) ir_attrs_ints(a, "axes", n_axes, axes);
  return LOOM_OK;
}

static loom_status_t build_reduce(loom_graph_t *g, ir_op_t op, loom_value_t x,
                                  int n_axes, const int64_t *axes, int keepdim,
                                  ir_attrs_t *a, loom_value_t *out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  LOOM_TRY(set_axes(op, a, n_axes, axes));
  ir_attrs_int(a, "keepdim", keepdim);
  return ir_build1(g, op, 1, &x, a, out);
}

#define REDUCE_BUILDER(name, ID)                                             \
  loom_status_t loom_##name(loom_graph_t *g, loom_value_t x, int n_axes,     \
                            const int64_t *axes, int keepdim,                \
                            loom_value_t *out) {                             \
    ir_attrs_t a = {0};                                                      \
    return build_reduce(g, IR_OP_##ID, x, n_axes, axes, keepdim, &a, out);   \
  }

REDUCE_BUILDER(sum, SUM)
REDUCE_BUILDER(mean, MEAN)
REDUCE_BUILDER(max, MAX)
REDUCE_BUILDER(min, MIN)
REDUCE_BUILDER(prod, PROD)
REDUCE_BUILDER(logsumexp, LOGSUMEXP)

loom_status_t loom_variance(loom_graph_t *g, loom_value_t x, int n_axes,
                            const int64_t *axes, int keepdim, int correction,
                            loom_value_t *out) {
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "correction", correction);
  return build_reduce(g, IR_OP_VARIANCE, x, n_axes, axes, keepdim, &a, out);
}

static loom_status_t build_argreduce(loom_graph_t *g, ir_op_t op,
                                     loom_value_t x, int has_axis,
                                     int64_t axis, int keepdim,
                                     loom_value_t *out) {
  ir_attrs_t a = {0};
  if (has_axis) ir_attrs_int(&a, "axis", axis);
  ir_attrs_int(&a, "keepdim", keepdim);
  return ir_build1(g, op, 1, &x, &a, out);
}

loom_status_t loom_argmax(loom_graph_t *g, loom_value_t x, int has_axis,
                          int64_t axis, int keepdim, loom_value_t *out) {
  return build_argreduce(g, IR_OP_ARGMAX, x, has_axis, axis, keepdim, out);
}

loom_status_t loom_argmin(loom_graph_t *g, loom_value_t x, int has_axis,
                          int64_t axis, int keepdim, loom_value_t *out) {
  return build_argreduce(g, IR_OP_ARGMIN, x, has_axis, axis, keepdim, out);
}

loom_status_t loom_cumsum(loom_graph_t *g, loom_value_t x, int64_t axis,
                          int exclusive, int reverse, loom_value_t *out) {
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "axis", axis);
  ir_attrs_int(&a, "exclusive", exclusive);
  ir_attrs_int(&a, "reverse", reverse);
  return ir_build1(g, IR_OP_CUMSUM, 1, &x, &a, out);
}

loom_status_t loom_topk(loom_graph_t *g, loom_value_t x, int64_t k,
                        int64_t axis, int largest, loom_value_t *values,
                        loom_value_t *indices) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(values);
  LOOM_CHECK_ARG(indices);
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "k", k);
  ir_attrs_int(&a, "axis", axis);
  ir_attrs_int(&a, "largest", largest);
  int32_t in = x.id, out[2];
  LOOM_TRY(ir_add_node(g, IR_OP_TOPK, 1, &in, &a, out, 2));
  values->id = out[0];
  indices->id = out[1];
  return LOOM_OK;
}
