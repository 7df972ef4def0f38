/* Pooling, softmax and normalization: shape rules and builders. */
#include "core/status.h"
#include "ir/ir.h"

/* ---- Pooling --------------------------------------------------------------- */

/* The 2-D pooling window, read from the attributes with their defaults. */
typedef struct pool_window {
  int64_t kernel[2], stride[2], pads[4], dilation[2];
} pool_window_t;

/* Copies attribute `name` (n entries, each >= min) into dst; an absent
 * attribute leaves dst as it is. */
static loom_status_t read_ints(ir_infer_t *c, const char *name, int n,
                               int64_t min, int64_t *dst) {
  const int64_t *v;
  int got = ir_attr_ints(c->attrs, name, &v);
  if (got < 0) return LOOM_OK;
  if (got != n)
    return loom_fail(LOOM_ERR_INVALID, "%s: '%s' needs %d entries, got %d",
                     ir_ops[c->op].name, name, n, got);
  for (int i = 0; i < n; i++) {
    /* The upper bound keeps the window arithmetic far from overflow. */
    if (v[i] < min || v[i] > INT32_MAX)
      return loom_fail(LOOM_ERR_INVALID, "%s: '%s' entry %d is %lld; it must be in [%lld, 2^31)",
                       ir_ops[c->op].name, name, i, (long long)v[i], (long long)min);
    dst[i] = v[i];
  }
  return LOOM_OK;
}

static loom_status_t read_window(ir_infer_t *c, pool_window_t *w) {
  *w = (pool_window_t){.dilation = {1, 1}};
  LOOM_TRY(read_ints(c, "kernel", 2, 1, w->kernel));
  w->stride[0] = w->kernel[0];
  w->stride[1] = w->kernel[1];
  LOOM_TRY(read_ints(c, "stride", 2, 1, w->stride));
  LOOM_TRY(read_ints(c, "pads", 4, 0, w->pads));
  LOOM_TRY(read_ints(c, "dilation", 2, 1, w->dilation));
  /* PyTorch's limit: a window never lies wholly in the padding. */
  for (int i = 0; i < 4; i++)
    if (w->pads[i] > w->kernel[i % 2] / 2)
      return loom_fail(LOOM_ERR_INVALID,
                       "%s: pad %lld (entry %d) is more than half the kernel size %lld",
                       ir_ops[c->op].name, (long long)w->pads[i], i,
                       (long long)w->kernel[i % 2]);
  int64_t count_pad = ir_op_int(c->op, c->attrs, "count_include_pad");
  if (count_pad != 0 && count_pad != 1)
    return loom_fail(LOOM_ERR_INVALID, "%s: count_include_pad must be 0 or 1, got %lld",
                     ir_ops[c->op].name, (long long)count_pad);
  return LOOM_OK;
}

/* floor((size + pads - dilation*(k-1) - 1) / stride) + 1 on dims. */
static loom_status_t pooled_dim(ir_infer_t *c, const pool_window_t *w, int i,
                                ir_dim_t size, ir_dim_t *out) {
  int64_t shrink = w->pads[i] + w->pads[i + 2] - w->dilation[i] * (w->kernel[i] - 1) - 1;
  if (ir_dim_is_const(size) && size + shrink < 0)
    return ir_shape_fail(c, "the kernel (%lld, dilation %lld) is larger than the padded input (%lld)",
                         (long long)w->kernel[i], (long long)w->dilation[i],
                         (long long)(size + w->pads[i] + w->pads[i + 2]));
  ir_dim_t d;
  LOOM_TRY(ir_dim_add(c->g, size, shrink, &d));
  LOOM_TRY(ir_dim_floordiv(c->g, d, w->stride[i], &d));
  return ir_dim_add(c->g, d, 1, out);
}

loom_status_t ir_shape_pool2d(ir_infer_t *c) {
  if (c->in[0]->rank != 4)
    return ir_shape_fail(c, "input must be NCHW (rank 4), got rank %d", c->in[0]->rank);
  pool_window_t w;
  LOOM_TRY(read_window(c, &w));
  c->out[0] = *c->in[0];
  for (int i = 0; i < 2; i++)
    LOOM_TRY(pooled_dim(c, &w, i, c->in[0]->dims[2 + i], &c->out[0].dims[2 + i]));
  return LOOM_OK;
}

loom_status_t ir_shape_global_pool(ir_infer_t *c) {
  if (c->in[0]->rank < 3)
    return ir_shape_fail(c, "input must be (N, C, spatial...) of rank >= 3, got rank %d",
                         c->in[0]->rank);
  c->out[0] = *c->in[0];
  for (int i = 2; i < c->out[0].rank; i++) c->out[0].dims[i] = 1;
  return LOOM_OK;
}

/* ---- Softmax and normalization ----------------------------------------------- */

loom_status_t ir_shape_unary_axis(ir_infer_t *c) {
  int axis;
  LOOM_TRY(ir_axis(c, ir_op_int(c->op, c->attrs, "axis"), c->in[0]->rank, &axis));
  c->out[0] = *c->in[0];
  return LOOM_OK;
}

/* Every input shares input 0's dtype: Loom does not promote. */
static loom_status_t same_dtypes(ir_infer_t *c) {
  for (int i = 1; i < c->n_in; i++)
    if (c->in[i]->dtype != c->in[0]->dtype)
      return loom_fail(LOOM_ERR_DTYPE, "%s: input %d is %s but x is %s; cast it",
                       ir_ops[c->op].name, i, loom_dtype_name(c->in[i]->dtype),
                       loom_dtype_name(c->in[0]->dtype));
  return LOOM_OK;
}

static loom_status_t check_eps(ir_infer_t *c) {
  double eps = ir_op_float(c->op, c->attrs, "eps");
  if (!(eps >= 0))
    return loom_fail(LOOM_ERR_INVALID, "%s: eps must be >= 0, got %g",
                     ir_ops[c->op].name, eps);
  return LOOM_OK;
}

/* True when t has exactly the dims x[axis..]. */
static bool has_trailing_dims(ir_infer_t *c, const ir_type_t *t, const ir_type_t *x,
                              int axis) {
  if (t->rank != x->rank - axis) return false;
  for (int i = 0; i < t->rank; i++) {
    ir_dim_t a = t->dims[i], b = x->dims[axis + i];
    if (a != b && (!ir_specialize(c->g, &a, &b) || a != b)) return false;
  }
  return true;
}

/* layer_norm and rms_norm: x, then scale and bias of the normalized dims. */
loom_status_t ir_shape_norm(ir_infer_t *c) {
  const ir_type_t *x = c->in[0];
  int axis;
  LOOM_TRY(ir_axis(c, ir_op_int(c->op, c->attrs, "axis"), x->rank, &axis));
  LOOM_TRY(check_eps(c));
  LOOM_TRY(same_dtypes(c));
  for (int i = 1; i < c->n_in; i++)
    if (!has_trailing_dims(c, c->in[i], x, axis))
      return ir_shape_fail(c, "%s (input %d) must have the normalized dims of x (from axis %d)",
                           i == 1 ? "scale" : "bias", i, axis);
  c->out[0] = *x;
  return LOOM_OK;
}

/* x (N, C, ...), then scale, bias, running mean, running var, each (C). */
loom_status_t ir_shape_batch_norm(ir_infer_t *c) {
  static const char *const names[] = {"x", "scale", "bias", "running mean", "running var"};
  const ir_type_t *x = c->in[0];
  if (x->rank < 2)
    return ir_shape_fail(c, "x must be (N, C, ...) of rank >= 2, got rank %d", x->rank);
  LOOM_TRY(check_eps(c));
  int64_t training = ir_op_int(c->op, c->attrs, "training");
  if (training != 0 && training != 1)
    return loom_fail(LOOM_ERR_INVALID, "batch_norm: training must be 0 or 1, got %lld",
                     (long long)training);
  LOOM_TRY(same_dtypes(c));
  for (int i = 1; i < 5; i++) {
    ir_dim_t a = c->in[i]->dims[0], b = x->dims[1];
    if (c->in[i]->rank != 1 || (a != b && (!ir_specialize(c->g, &a, &b) || a != b)))
      return ir_shape_fail(c, "%s (input %d) must be (C), C being dim 1 of x", names[i], i);
  }
  c->out[0] = *x;
  c->out[1] = *c->in[3];
  c->out[2] = *c->in[4];
  return LOOM_OK;
}

/* ---- Builders ------------------------------------------------------------ */

/* The attributes of a pooling call; zero stride and dilation mean defaults. */
static void pool_attrs(const loom_pool_params_t *p, bool with_dilation,
                       ir_attrs_t *a) {
  int64_t stride[2], dilation[2];
  for (int i = 0; i < 2; i++) {
    stride[i] = p->stride[i] ? p->stride[i] : p->kernel[i];
    dilation[i] = p->dilation[i] ? p->dilation[i] : 1;
  }
  ir_attrs_ints(a, "kernel", 2, p->kernel);
  ir_attrs_ints(a, "stride", 2, stride);
  ir_attrs_ints(a, "pads", 4, p->pads);
  if (with_dilation) ir_attrs_ints(a, "dilation", 2, dilation);
}

loom_status_t loom_max_pool2d(loom_graph_t *g, loom_value_t x,
                              const loom_pool_params_t *p, loom_value_t *out) {
  LOOM_CHECK_ARG(p);
  ir_attrs_t a = {0};
  pool_attrs(p, true, &a);
  return ir_build1(g, IR_OP_MAX_POOL2D, 1, &x, &a, out);
}

loom_status_t loom_avg_pool2d(loom_graph_t *g, loom_value_t x,
                              const loom_pool_params_t *p, loom_value_t *out) {
  LOOM_CHECK_ARG(p);
  /* Refused rather than ignored, so that a caller never gets a window
   * other than the one asked for. */
  for (int i = 0; i < 2; i++)
    if (p->dilation[i] != 0 && p->dilation[i] != 1)
      return loom_fail(LOOM_ERR_INVALID, "avg_pool2d: dilation %lld is not supported (only 1)",
                       (long long)p->dilation[i]);
  ir_attrs_t a = {0};
  pool_attrs(p, false, &a);
  ir_attrs_int(&a, "count_include_pad", p->count_include_pad);
  return ir_build1(g, IR_OP_AVG_POOL2D, 1, &x, &a, out);
}

loom_status_t loom_softmax(loom_graph_t *g, loom_value_t x, int64_t axis,
                           loom_value_t *out) {
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "axis", axis);
  return ir_build1(g, IR_OP_SOFTMAX, 1, &x, &a, out);
}

loom_status_t loom_log_softmax(loom_graph_t *g, loom_value_t x, int64_t axis,
                               loom_value_t *out) {
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "axis", axis);
  return ir_build1(g, IR_OP_LOG_SOFTMAX, 1, &x, &a, out);
}

loom_status_t loom_layer_norm(loom_graph_t *g, loom_value_t x, int has_scale,
                              loom_value_t scale, int has_bias,
                              loom_value_t bias, int64_t axis, double eps,
                              loom_value_t *out) {
  LOOM_CHECK_ARG(g);
  /* Inputs are positional: a bias alone goes with a scale of ones. */
  if (has_bias && !has_scale) {
    loom_dtype_t dtype;
    int rank;
    loom_dim_t dims[LOOM_MAX_RANK];
    LOOM_TRY(loom_value_type(g, bias, &dtype, &rank, dims));
    LOOM_TRY(loom_full(g, rank, dims, 1.0, dtype, &scale));
    has_scale = 1;
  }
  loom_value_t in[3] = {x, scale, bias};
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "axis", axis);
  ir_attrs_float(&a, "eps", eps);
  return ir_build1(g, IR_OP_LAYER_NORM, 1 + (has_scale != 0) + (has_bias != 0), in, &a, out);
}

loom_status_t loom_rms_norm(loom_graph_t *g, loom_value_t x, int has_scale,
                            loom_value_t scale, int64_t axis, double eps,
                            loom_value_t *out) {
  loom_value_t in[2] = {x, scale};
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "axis", axis);
  ir_attrs_float(&a, "eps", eps);
  return ir_build1(g, IR_OP_RMS_NORM, 1 + (has_scale != 0), in, &a, out);
}

loom_status_t loom_batch_norm(loom_graph_t *g, loom_value_t x,
                              loom_value_t scale, loom_value_t bias,
                              loom_value_t mean, loom_value_t var, double eps,
                              double momentum, int training, loom_value_t *out,
                              loom_value_t *new_mean, loom_value_t *new_var) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  LOOM_CHECK_ARG(new_mean);
  LOOM_CHECK_ARG(new_var);
  int32_t in[5] = {x.id, scale.id, bias.id, mean.id, var.id};
  ir_attrs_t a = {0};
  ir_attrs_float(&a, "eps", eps);
  ir_attrs_float(&a, "momentum", momentum);
  ir_attrs_int(&a, "training", training);
  int32_t ids[3] = {-1, -1, -1};
  LOOM_TRY(ir_add_node(g, IR_OP_BATCH_NORM, 5, in, &a, ids, 3));
  out->id = ids[0];
  new_mean->id = ids[1];
  new_var->id = ids[2];
  return LOOM_OK;
}

/* ---- Pooling gradients --------------------------------------------------- */

/* x (N, C, H, W) and dy, the gradient of the pooling of x: same dtype, and
 * dy of the pooled shape. The result has x's type. */
loom_status_t ir_shape_pool2d_grad(ir_infer_t *c) {
  const ir_type_t *x = c->in[0], *dy = c->in[1];
  LOOM_TRY(same_dtypes(c));
  if (x->rank != 4 || dy->rank != 4)
    return ir_shape_fail(c, "x and dy must be NCHW (rank 4)");
  pool_window_t w;
  LOOM_TRY(read_window(c, &w));
  for (int i = 0; i < 4; i++) {
    ir_dim_t want = x->dims[i];
    if (i >= 2) LOOM_TRY(pooled_dim(c, &w, i - 2, x->dims[i], &want));
    if (dy->dims[i] != want) {
      char s[64];
      return ir_shape_fail(c, "dy dim %d must be %s, the pooled shape of x", i,
                           ir_dim_str(c->g, want, s, sizeof s));
    }
  }
  c->out[0] = *x;
  return LOOM_OK;
}

static loom_status_t pool_grad_build(loom_graph_t *g, ir_op_t op, loom_value_t x,
                                     loom_value_t dy, const loom_pool_params_t *p,
                                     loom_value_t *out) {
  LOOM_CHECK_ARG(p);
  /* As avg_pool2d does: refused rather than ignored. */
  for (int i = 0; i < 2; i++)
    if (op == IR_OP_AVG_POOL2D_GRAD && p->dilation[i] != 0 && p->dilation[i] != 1)
      return loom_fail(LOOM_ERR_INVALID, "avg_pool2d_grad: dilation %lld is not "
                       "supported (only 1)", (long long)p->dilation[i]);
  ir_attrs_t a = {0};
  pool_attrs(p, op == IR_OP_MAX_POOL2D_GRAD, &a);
  if (op == IR_OP_AVG_POOL2D_GRAD) ir_attrs_int(&a, "count_include_pad", p->count_include_pad);
  loom_value_t in[2] = {x, dy};
  return ir_build1(g, op, 2, in, &a, out);
}

loom_status_t loom_max_pool2d_grad(loom_graph_t *g, loom_value_t x,
                                   loom_value_t dy, const loom_pool_params_t *p,
                                   loom_value_t *out) {
  return pool_grad_build(g, IR_OP_MAX_POOL2D_GRAD, x, dy, p, out);
}

loom_status_t loom_avg_pool2d_grad(loom_graph_t *g, loom_value_t x,
                                   loom_value_t dy, const loom_pool_params_t *p,
                                   loom_value_t *out) {
  return pool_grad_build(g, IR_OP_AVG_POOL2D_GRAD, x, dy, p, out);
}
