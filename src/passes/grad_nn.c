/* Gradient rules of the neural-network ops: matmul, convolutions, pooling
 * and normalization. Each is written on the IR: a rule emits the ops that
 * compute its inputs' gradients from its outputs' gradients. */
#include <string.h>

#include "core/status.h"
#include "passes/grad.h"

/* ---- Helpers ------------------------------------------------------------- */

/* Types are copied: emitting nodes may move the graph's value array. */
static ir_type_t type_of(const grad_ctx_t *c, int32_t v) {
  return *grad_type(c, v);
}

static loom_status_t matmul(grad_ctx_t *c, int32_t a, int32_t b, bool ta,
                            bool tb, int32_t *out) {
  ir_attrs_t attrs = {0};
  ir_attrs_int(&attrs, "trans_a", ta);
  ir_attrs_int(&attrs, "trans_b", tb);
  int32_t in[2] = {a, b};
  return grad_op(c, IR_OP_MATMUL, 2, in, &attrs, out);
}

/* v with size-1 dims inserted at the given axes of the result. */
static loom_status_t unsqueeze(grad_ctx_t *c, int32_t v, int n,
                               const int64_t *axes, int32_t *out) {
  if (n == 0) {
    *out = v;
    return LOOM_OK;
  }
  ir_attrs_t attrs = {0};
  ir_attrs_ints(&attrs, "axes", n, axes);
  return grad_op(c, IR_OP_UNSQUEEZE, 1, &v, &attrs, out);
}

/* v without its size-1 dim `axis`. */
static loom_status_t squeeze(grad_ctx_t *c, int32_t v, int64_t axis,
                             int32_t *out) {
  ir_attrs_t attrs = {0};
  ir_attrs_ints(&attrs, "axes", 1, &axis);
  return grad_op(c, IR_OP_SQUEEZE, 1, &v, &attrs, out);
}

/* sum or mean of v over axes, keeping them as size-1 dims or not. */
static loom_status_t reduce(grad_ctx_t *c, ir_op_t op, int32_t v, int n,
                            const int64_t *axes, bool keepdim, int32_t *out) {
  ir_attrs_t attrs = {0};
  ir_attrs_ints(&attrs, "axes", n, axes);
  ir_attrs_int(&attrs, "keepdim", keepdim);
  return grad_op(c, op, 1, &v, &attrs, out);
}

/* ---- matmul -------------------------------------------------------------- */

/* v as a matrix of its rows: (-1, last dim), a view for contiguous v. */
static loom_status_t rows_of(grad_ctx_t *c, int32_t v, int32_t *out) {
  ir_type_t t = type_of(c, v);
  ir_dim_t dims[2] = {-1, t.dims[t.rank - 1]};
  ir_attrs_t attrs = {0};
  ir_attrs_ints(&attrs, "shape", 2, dims);
  return grad_op(c, IR_OP_RESHAPE, 1, &v, &attrs, out);
}

/* The gradient of a rank-2 B broadcast over A's batch (a linear layer
 * over a batch of sequences): the batch sum of A^T @ dY is one product
 * over all rows, (batch*m, k)^T @ (batch*m, n), rather than a batch of
 * partial products (batch times B's size) and their sum. */
static loom_status_t matmul_rows(grad_ctx_t *c, int32_t a, int32_t dy, bool tb,
                                 int32_t *out) {
  int32_t a2, dy2;
  LOOM_TRY(rows_of(c, a, &a2));
  LOOM_TRY(rows_of(c, dy, &dy2));
  return tb ? matmul(c, dy2, a2, true, false, out) : matmul(c, a2, dy2, true, false, out);
}

/* With A and B the operands as multiplied (after the trans flags), the
 * gradients are dY @ B^T and A^T @ dY; a transposed operand's gradient is
 * the transpose of that, which the trans flags give without a copy. A
 * 1-D operand is first promoted as the forward pass did ((1, K) for a,
 * (K, 1) for b) and dY gets the dim the promotion dropped; the batch
 * dims are summed back to each operand's own by grad_unbroadcast. */
loom_status_t grad_matmul(grad_ctx_t *c) {
  int32_t a = c->node.in[0], b = c->node.in[1], dy = c->dout[0];
  ir_type_t a_type = type_of(c, a), b_type = type_of(c, b);
  bool ta = ir_attr_int(c->node.attrs, "trans_a", 0) != 0;
  bool tb = ir_attr_int(c->node.attrs, "trans_b", 0) != 0;
  int ry = type_of(c, dy).rank;
  bool a1 = a_type.rank == 1, b1 = b_type.rank == 1;
  int64_t axis0 = 0, axis1 = 1, y_axes[2] = {a1 ? ry - 1 : ry, ry + 1};
  if (a1) LOOM_TRY(unsqueeze(c, a, 1, &axis0, &a));
  if (b1) LOOM_TRY(unsqueeze(c, b, 1, &axis1, &b));
  if (a1 && b1) y_axes[0] = 0;
  LOOM_TRY(unsqueeze(c, dy, (int)a1 + (int)b1, y_axes, &dy));
  ta = ta && !a1;
  tb = tb && !b1;
  int32_t da, db;
  if (ta) LOOM_TRY(matmul(c, b, dy, tb, true, &da));
  else LOOM_TRY(matmul(c, dy, b, false, !tb, &da));
  if (!ta && !a1 && !b1 && a_type.rank > 2 && b_type.rank == 2)
    LOOM_TRY(matmul_rows(c, a, dy, tb, &db));
  else if (tb) LOOM_TRY(matmul(c, dy, a, true, ta, &db));
  else LOOM_TRY(matmul(c, a, dy, !ta, false, &db));
  /* A promoted dim is squeezed away before the batch sums, which align
   * dims from the right. */
  if (a1) LOOM_TRY(squeeze(c, da, type_of(c, da).rank - 2, &da));
  if (b1) LOOM_TRY(squeeze(c, db, type_of(c, db).rank - 1, &db));
  LOOM_TRY(grad_unbroadcast(c, da, &a_type, &c->din[0]));
  return grad_unbroadcast(c, db, &b_type, &c->din[1]);
}

/* ---- Convolutions -------------------------------------------------------- */

/* The node's list attribute `name` of n entries, or dflt. */
static void node_ints(const grad_ctx_t *c, const char *name, int n,
                      int64_t dflt, int64_t *out) {
  const int64_t *v;
  if (ir_attr_ints(c->node.attrs, name, &v) == n)
    memcpy(out, v, sizeof(int64_t) * (size_t)n);
  else
    for (int i = 0; i < n; i++) out[i] = dflt;
}

/* The geometry every convolution of the rule shares with the node. */
static void conv_geometry(const grad_ctx_t *c, ir_attrs_t *attrs) {
  int64_t v[4];
  node_ints(c, "stride", 2, 1, v);
  ir_attrs_ints(attrs, "stride", 2, v);
  node_ints(c, "pads", 4, 0, v);
  ir_attrs_ints(attrs, "pads", 4, v);
  node_ints(c, "dilation", 2, 1, v);
  ir_attrs_ints(attrs, "dilation", 2, v);
  ir_attrs_int(attrs, "groups", ir_attr_int(c->node.attrs, "groups", 1));
}

/* The kernel size of weight w: the weight's gradient op needs it as an
 * attribute. */
static loom_status_t kernel_size(const grad_ctx_t *c, int32_t w, int64_t *k) {
  ir_type_t t = type_of(c, w);
  if (!ir_dim_is_const(t.dims[2]) || !ir_dim_is_const(t.dims[3]))
    return loom_fail(LOOM_ERR_UNSUPPORTED, "%s gradient: the kernel size must be "
                     "known, not symbolic", ir_ops[c->node.op].name);
  k[0] = t.dims[2];
  k[1] = t.dims[3];
  return LOOM_OK;
}

/* Gradient of a weight as conv2d_weight_grad(x, dy): x is the input of a
 * conv2d and dy the gradient of its output. */
static loom_status_t weight_grad(grad_ctx_t *c, int32_t x, int32_t dy,
                                 const int64_t *kernel, int32_t *out) {
  ir_attrs_t attrs = {0};
  conv_geometry(c, &attrs);
  ir_attrs_ints(&attrs, "kernel", 2, kernel);
  int32_t in[2] = {x, dy};
  return grad_op(c, IR_OP_CONV2D_WEIGHT_GRAD, 2, in, &attrs, out);
}

/* The bias's gradient: dy summed over all but the channel dim. */
static loom_status_t bias_grad(grad_ctx_t *c, int32_t dy, int32_t *out) {
  static const int64_t axes[3] = {0, 2, 3};
  return reduce(c, IR_OP_SUM, dy, 3, axes, false, out);
}

/* conv2d drops the input rows (columns) that no window reaches when the
 * stride does not divide the span: the transposed convolution gets them
 * back through output_padding, which is that remainder. */
static loom_status_t input_output_padding(const grad_ctx_t *c, const int64_t *kernel,
                                          int64_t *out_pad) {
  int64_t stride[2], pads[4], dil[2];
  node_ints(c, "stride", 2, 1, stride);
  node_ints(c, "pads", 4, 0, pads);
  node_ints(c, "dilation", 2, 1, dil);
  ir_type_t x = type_of(c, c->node.in[0]);
  for (int i = 0; i < 2; i++) {
    ir_dim_t h = x.dims[2 + i];
    if (stride[i] == 1) {
      out_pad[i] = 0;
      continue;
    }
    if (!ir_dim_is_const(h))
      return loom_fail(LOOM_ERR_UNSUPPORTED, "conv2d gradient: input dim %d is "
                       "symbolic and the stride is %lld; the gradient's shape "
                       "needs the dim", 2 + i, (long long)stride[i]);
    out_pad[i] = (h + pads[i] + pads[i + 2] - dil[i] * (kernel[i] - 1) - 1) % stride[i];
  }
  return LOOM_OK;
}

/* dx = conv_transpose2d(dy, w), dw = conv2d_weight_grad(x, dy), dbias = the
 * sum of dy over batch and positions. */
loom_status_t grad_conv2d(grad_ctx_t *c) {
  int32_t x = c->node.in[0], w = c->node.in[1], dy = c->dout[0];
  int64_t kernel[2], out_pad[2];
  LOOM_TRY(kernel_size(c, w, kernel));
  LOOM_TRY(input_output_padding(c, kernel, out_pad));
  ir_attrs_t attrs = {0};
  conv_geometry(c, &attrs);
  ir_attrs_ints(&attrs, "output_padding", 2, out_pad);
  int32_t in[2] = {dy, w};
  LOOM_TRY(grad_op(c, IR_OP_CONV_TRANSPOSE2D, 2, in, &attrs, &c->din[0]));
  LOOM_TRY(weight_grad(c, x, dy, kernel, &c->din[1]));
  if (c->node.n_in == 3) LOOM_TRY(bias_grad(c, dy, &c->din[2]));
  return LOOM_OK;
}

/* The first `want` rows and columns of v, whose spatial dims may exceed
 * them. */
static loom_status_t crop_to(grad_ctx_t *c, int32_t v, const ir_type_t *want,
                             int32_t *out) {
  ir_type_t t = type_of(c, v);
  if (t.dims[2] == want->dims[2] && t.dims[3] == want->dims[3]) {
    *out = v;
    return LOOM_OK;
  }
  int64_t starts[2] = {0, 0}, ends[2] = {want->dims[2], want->dims[3]}, axes[2] = {2, 3};
  if (!ir_dim_is_const(ends[0]) || !ir_dim_is_const(ends[1]))
    return loom_fail(LOOM_ERR_UNSUPPORTED, "conv_transpose2d gradient: symbolic "
                     "input dims with output_padding of a stride or more");
  ir_attrs_t attrs = {0};
  ir_attrs_ints(&attrs, "starts", 2, starts);
  ir_attrs_ints(&attrs, "ends", 2, ends);
  ir_attrs_ints(&attrs, "axes", 2, axes);
  return grad_op(c, IR_OP_SLICE, 1, &v, &attrs, out);
}

/* conv_transpose2d is conv2d's input gradient, so its own gradients swap
 * roles: dx = conv2d(dy, w), and dw = conv2d_weight_grad(dy, x) (dy is the
 * input of that conv2d and x its output). An output_padding of a stride
 * or more adds positions that conv2d maps past x's end: they are cut. */
loom_status_t grad_conv_transpose2d(grad_ctx_t *c) {
  int32_t x = c->node.in[0], w = c->node.in[1], dy = c->dout[0];
  ir_type_t xt = type_of(c, x);
  int64_t kernel[2];
  LOOM_TRY(kernel_size(c, w, kernel));
  ir_attrs_t attrs = {0};
  conv_geometry(c, &attrs);
  int32_t in[2] = {dy, w}, dx;
  LOOM_TRY(grad_op(c, IR_OP_CONV2D, 2, in, &attrs, &dx));
  LOOM_TRY(crop_to(c, dx, &xt, &c->din[0]));
  LOOM_TRY(weight_grad(c, dy, x, kernel, &c->din[1]));
  if (c->node.n_in == 3) LOOM_TRY(bias_grad(c, dy, &c->din[2]));
  return LOOM_OK;
}

/* ---- Pooling ------------------------------------------------------------- */

/* max_pool2d_grad and avg_pool2d_grad take the pool's own attributes. */
static loom_status_t pool_grad(grad_ctx_t *c, ir_op_t op) {
  int32_t in[2] = {c->node.in[0], c->dout[0]};
  return grad_op(c, op, 2, in, c->node.attrs, &c->din[0]);
}

loom_status_t grad_max_pool2d(grad_ctx_t *c) {
  return pool_grad(c, IR_OP_MAX_POOL2D_GRAD);
}

loom_status_t grad_avg_pool2d(grad_ctx_t *c) {
  return pool_grad(c, IR_OP_AVG_POOL2D_GRAD);
}

/* Each input element gets dy / (the count of pooled elements), dy spread
 * over the pooled dims. */
loom_status_t grad_global_avg_pool(grad_ctx_t *c) {
  ir_type_t x = type_of(c, c->node.in[0]);
  int32_t count, dx;
  double n = 1;
  bool symbolic = false;
  for (int d = 2; d < x.rank; d++) {
    symbolic |= !ir_dim_is_const(x.dims[d]);
    n *= (double)x.dims[d];
  }
  if (!symbolic) {
    LOOM_TRY(grad_scalar(c, n, x.dtype, &count));
  } else { /* only a run knows the count: sum ones over the pooled dims */
    ir_attrs_t attrs = {0};
    ir_attrs_ints(&attrs, "shape", x.rank - 2, x.dims + 2);
    ir_attrs_float(&attrs, "value", 1.0);
    ir_attrs_int(&attrs, "dtype", x.dtype);
    LOOM_TRY(grad_op(c, IR_OP_FULL, 0, NULL, &attrs, &count));
    LOOM_TRY(grad_op(c, IR_OP_SUM, 1, &count, NULL, &count));
  }
  LOOM_TRY(grad_binary(c, IR_OP_DIV, c->dout[0], count, &dx));
  ir_attrs_t attrs = {0};
  ir_attrs_ints(&attrs, "shape", x.rank, x.dims);
  return grad_op(c, IR_OP_EXPAND, 1, &dx, &attrs, &c->din[0]);
}

/* ---- Normalization ------------------------------------------------------- */

/* A normalization's pieces over the reduced axes: xhat = (x - center) *
 * rstd, rstd = 1/sqrt(mean((x - center)^2) + eps), both kept at x's rank. */
typedef struct norm {
  int n_axes;
  int64_t axes[LOOM_MAX_RANK];
  bool centered; /* center is the mean (layer, batch norm), else 0 (rms) */
  int32_t xhat, rstd;
} norm_t;

static loom_status_t norm_stats(grad_ctx_t *c, norm_t *k, int32_t x, double eps) {
  loom_dtype_t dtype = type_of(c, x).dtype;
  int32_t xc = x, mean, sq, var, e;
  if (k->centered) {
    LOOM_TRY(reduce(c, IR_OP_MEAN, x, k->n_axes, k->axes, true, &mean));
    LOOM_TRY(grad_binary(c, IR_OP_SUB, x, mean, &xc));
  }
  LOOM_TRY(grad_binary(c, IR_OP_MUL, xc, xc, &sq));
  LOOM_TRY(reduce(c, IR_OP_MEAN, sq, k->n_axes, k->axes, true, &var));
  LOOM_TRY(grad_scalar(c, eps, dtype, &e));
  LOOM_TRY(grad_binary(c, IR_OP_ADD, var, e, &var));
  LOOM_TRY(grad_unary(c, IR_OP_RSQRT, var, &k->rstd));
  return grad_binary(c, IR_OP_MUL, xc, k->rstd, &k->xhat);
}

/* The input's gradient given g, the gradient of xhat (dy times the scale):
 * rstd * (g - mean(g) - xhat * mean(g * xhat)), the mean(g) term only
 * where the center is the mean. */
static loom_status_t norm_input_grad(grad_ctx_t *c, const norm_t *k, int32_t g,
                                     int32_t *out) {
  int32_t gx, proj, t = g;
  LOOM_TRY(grad_binary(c, IR_OP_MUL, g, k->xhat, &gx));
  LOOM_TRY(reduce(c, IR_OP_MEAN, gx, k->n_axes, k->axes, true, &proj));
  LOOM_TRY(grad_binary(c, IR_OP_MUL, k->xhat, proj, &proj));
  if (k->centered) {
    int32_t mean;
    LOOM_TRY(reduce(c, IR_OP_MEAN, g, k->n_axes, k->axes, true, &mean));
    LOOM_TRY(grad_binary(c, IR_OP_SUB, t, mean, &t));
  }
  LOOM_TRY(grad_binary(c, IR_OP_SUB, t, proj, &t));
  return grad_binary(c, IR_OP_MUL, t, k->rstd, out);
}

/* layer_norm and rms_norm: y = xhat * scale + bias over dims axis..; scale
 * and bias have those dims, so their gradients sum over the others. */
static loom_status_t grad_norm(grad_ctx_t *c, bool centered) {
  int32_t x = c->node.in[0], dy = c->dout[0], g = dy;
  ir_type_t xt = type_of(c, x);
  int64_t axis = ir_attr_int(c->node.attrs, "axis", -1);
  if (axis < 0) axis += xt.rank;
  norm_t k = {.centered = centered};
  for (int64_t d = axis; d < xt.rank; d++) k.axes[k.n_axes++] = d;
  LOOM_TRY(norm_stats(c, &k, x, ir_op_float(c->node.op, c->node.attrs, "eps")));
  if (c->node.n_in >= 2) {
    int32_t scale = c->node.in[1], dscale;
    ir_type_t st = type_of(c, scale);
    LOOM_TRY(grad_binary(c, IR_OP_MUL, dy, k.xhat, &dscale));
    LOOM_TRY(grad_unbroadcast(c, dscale, &st, &c->din[1]));
    LOOM_TRY(grad_binary(c, IR_OP_MUL, dy, scale, &g));
  }
  if (c->node.n_in >= 3) {
    ir_type_t bt = type_of(c, c->node.in[2]);
    LOOM_TRY(grad_unbroadcast(c, dy, &bt, &c->din[2]));
  }
  return norm_input_grad(c, &k, g, &c->din[0]);
}

loom_status_t grad_layer_norm(grad_ctx_t *c) { return grad_norm(c, true); }
loom_status_t grad_rms_norm(grad_ctx_t *c) { return grad_norm(c, false); }

/* A per-channel vector (C) as (C, 1, ..., 1), which broadcasts against x
 * (N, C, ...). */
static loom_status_t per_channel(grad_ctx_t *c, int32_t v, int x_rank, int32_t *out) {
  int64_t axes[LOOM_MAX_RANK];
  for (int i = 0; i < x_rank - 2; i++) axes[i] = i + 1;
  return unsqueeze(c, v, x_rank - 2, axes, out);
}

/* Inference mode normalizes with the running statistics, so y is affine
 * in x: dx = dy * scale * rstd, and the statistics get gradients too. */
static loom_status_t batch_norm_inference(grad_ctx_t *c, const norm_t *k,
                                          int32_t scale_c, double eps) {
  int32_t dy = c->dout[0], x = c->node.in[0], var = c->node.in[4];
  int32_t t, e, rstd, xc;
  LOOM_TRY(grad_binary(c, IR_OP_MUL, dy, scale_c, &t));
  LOOM_TRY(grad_binary(c, IR_OP_MUL, t, k->rstd, &c->din[0]));
  /* d/d mean = -sum(dy) * scale * rstd; d/d var = -1/2 sum(dy * (x -
   * mean)) * scale * rstd^3, all per channel. */
  LOOM_TRY(grad_scalar(c, eps, type_of(c, x).dtype, &e));
  LOOM_TRY(grad_binary(c, IR_OP_ADD, var, e, &rstd));
  LOOM_TRY(grad_unary(c, IR_OP_RSQRT, rstd, &rstd));
  LOOM_TRY(grad_binary(c, IR_OP_MUL, c->node.in[1], rstd, &t));
  LOOM_TRY(grad_binary(c, IR_OP_MUL, c->din[2], t, &e));
  LOOM_TRY(grad_unary(c, IR_OP_NEG, e, &c->din[3]));
  LOOM_TRY(grad_binary(c, IR_OP_MUL, t, rstd, &t));
  LOOM_TRY(grad_binary(c, IR_OP_MUL, t, rstd, &t));
  LOOM_TRY(grad_scalar(c, -0.5, type_of(c, x).dtype, &e));
  LOOM_TRY(grad_binary(c, IR_OP_MUL, t, e, &t));
  LOOM_TRY(grad_binary(c, IR_OP_DIV, k->xhat, k->rstd, &xc));
  LOOM_TRY(grad_binary(c, IR_OP_MUL, dy, xc, &xc));
  LOOM_TRY(reduce(c, IR_OP_SUM, xc, k->n_axes, k->axes, false, &xc));
  return grad_binary(c, IR_OP_MUL, xc, t, &c->din[4]);
}

/* Inference mode's xhat and rstd come from the running statistics. */
static loom_status_t running_stats(grad_ctx_t *c, norm_t *k, int rank, double eps) {
  int32_t mean, var, e, xc;
  LOOM_TRY(per_channel(c, c->node.in[3], rank, &mean));
  LOOM_TRY(per_channel(c, c->node.in[4], rank, &var));
  LOOM_TRY(grad_scalar(c, eps, type_of(c, mean).dtype, &e));
  LOOM_TRY(grad_binary(c, IR_OP_ADD, var, e, &var));
  LOOM_TRY(grad_unary(c, IR_OP_RSQRT, var, &k->rstd));
  LOOM_TRY(grad_binary(c, IR_OP_SUB, c->node.in[0], mean, &xc));
  return grad_binary(c, IR_OP_MUL, xc, k->rstd, &k->xhat);
}

/* Training mode normalizes with the batch's statistics over every dim but
 * the channel: layer_norm's gradient over those dims. The updated running
 * statistics (outputs 1 and 2) are state, not part of the function: as in
 * PyTorch, which updates them outside autograd, no gradient flows from
 * them (a traced segment that keeps them as outputs receives gradients
 * for them, and drops them here). */
loom_status_t grad_batch_norm(grad_ctx_t *c) {
  if (c->dout[0] < 0) return LOOM_OK; /* only the statistics had gradients */
  int32_t dy = c->dout[0], scale_c, g, prod;
  int rank = type_of(c, c->node.in[0]).rank;
  double eps = ir_op_float(c->node.op, c->node.attrs, "eps");
  bool training = ir_attr_int(c->node.attrs, "training", 0) != 0;
  norm_t k = {.centered = true};
  k.axes[k.n_axes++] = 0;
  for (int d = 2; d < rank; d++) k.axes[k.n_axes++] = d;
  if (training) LOOM_TRY(norm_stats(c, &k, c->node.in[0], eps));
  else LOOM_TRY(running_stats(c, &k, rank, eps));
  LOOM_TRY(grad_binary(c, IR_OP_MUL, dy, k.xhat, &prod));
  LOOM_TRY(reduce(c, IR_OP_SUM, prod, k.n_axes, k.axes, false, &c->din[1]));
  LOOM_TRY(reduce(c, IR_OP_SUM, dy, k.n_axes, k.axes, false, &c->din[2]));
  LOOM_TRY(per_channel(c, c->node.in[1], rank, &scale_c));
  if (!training) return batch_norm_inference(c, &k, scale_c, eps);
  LOOM_TRY(grad_binary(c, IR_OP_MUL, dy, scale_c, &g));
  return norm_input_grad(c, &k, g, &c->din[0]);
}
