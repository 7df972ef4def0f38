/* Contractions: matmul and convolutions: shape rules and builders. */
#include <string.h>

#include "core/status.h"
#include "ir/ir.h"

/* Every input has the dtype of input 0: Loom does not promote, so that
 * every conversion is a visible cast in the graph. */
static loom_status_t same_dtypes(ir_infer_t *c) {
  for (int i = 1; i < c->n_in; i++)
    if (c->in[i]->dtype != c->in[0]->dtype)
      return loom_fail(LOOM_ERR_DTYPE,
                       "%s: input 0 is %s and input %d is %s; cast one of them",
                       ir_ops[c->op].name, loom_dtype_name(c->in[0]->dtype), i,
                       loom_dtype_name(c->in[i]->dtype));
  return LOOM_OK;
}

/* An attribute that must be 0 or 1. */
static loom_status_t flag_attr(ir_infer_t *c, const char *name, bool *out) {
  int64_t v = ir_op_int(c->op, c->attrs, name);
  if (v != 0 && v != 1)
    return loom_fail(LOOM_ERR_INVALID, "%s: attribute '%s' must be 0 or 1, not %lld",
                     ir_ops[c->op].name, name, (long long)v);
  *out = v == 1;
  return LOOM_OK;
}

/* ---- matmul -------------------------------------------------------------- */

/* One operand seen as a batch of (rows, cols) matrices after promotion of
 * a 1-D operand and the optional swap of the last two dims. */
typedef struct mm_view {
  ir_type_t batch;
  ir_dim_t rows, cols;
} mm_view_t;

static void mm_view(const ir_type_t *t, bool trans, bool is_b, mm_view_t *v) {
  memset(v, 0, sizeof *v);
  if (t->rank == 1) { /* NumPy: a is (1, K), b is (K, 1) */
    v->rows = is_b ? t->dims[0] : 1;
    v->cols = is_b ? 1 : t->dims[0];
    return;
  }
  v->batch.rank = t->rank - 2;
  memcpy(v->batch.dims, t->dims, sizeof(ir_dim_t) * (size_t)v->batch.rank);
  v->rows = t->dims[t->rank - 2];
  v->cols = t->dims[t->rank - 1];
  if (trans) {
    ir_dim_t r = v->rows;
    v->rows = v->cols;
    v->cols = r;
  }
}

loom_status_t ir_shape_matmul(ir_infer_t *c) {
  LOOM_TRY(same_dtypes(c));
  bool ta = false, tb = false;
  LOOM_TRY(flag_attr(c, "trans_a", &ta));
  LOOM_TRY(flag_attr(c, "trans_b", &tb));
  const ir_type_t *a = c->in[0], *b = c->in[1];
  if (a->rank < 1 || b->rank < 1)
    return ir_shape_fail(c, "operands must have rank 1 or more");
  mm_view_t va, vb;
  mm_view(a, ta, false, &va);
  mm_view(b, tb, true, &vb);
  if (va.cols != vb.rows) ir_specialize(c->g, &va.cols, &vb.rows);
  if (va.cols != vb.rows) {
    char ka[64], kb[64];
    return ir_shape_fail(c, "contracted dims differ: %s (a) and %s (b)",
                         ir_dim_str(c->g, va.cols, ka, sizeof ka),
                         ir_dim_str(c->g, vb.rows, kb, sizeof kb));
  }
  ir_type_t *y = &c->out[0];
  LOOM_TRY(ir_broadcast(c, &va.batch, &vb.batch, y));
  y->dtype = a->dtype;
  /* The dims added by promoting a 1-D operand are dropped again. */
  if (a->rank >= 2) y->dims[y->rank++] = va.rows;
  if (b->rank >= 2) y->dims[y->rank++] = vb.cols;
  return LOOM_OK;
}

/* ---- Convolutions -------------------------------------------------------- */

typedef struct conv_attrs {
  int64_t stride[2], pads[4], dilation[2], out_pad[2], groups;
} conv_attrs_t;

/* List attribute `name` of exactly n entries, or the op's default when
 * absent. */
static loom_status_t ints_attr(ir_infer_t *c, const char *name, int n, int64_t *out) {
  const int64_t *v;
  int got = ir_attr_ints(c->attrs, name, &v);
  if (got < 0) {
    ir_op_ints(c->op, c->attrs, name, n, out);
    return LOOM_OK;
  }
  if (got != n)
    return loom_fail(LOOM_ERR_INVALID, "%s: attribute '%s' needs %d entries, got %d",
                     ir_ops[c->op].name, name, n, got);
  memcpy(out, v, sizeof(int64_t) * (size_t)n);
  return LOOM_OK;
}

/* The bound keeps the dim arithmetic of the shape rules far from
 * overflow. */
#define CONV_ATTR_MAX INT32_MAX

/* Entries of a list attribute all in [lo, CONV_ATTR_MAX]. */
static loom_status_t check_range(ir_infer_t *c, const char *name,
                                 const int64_t *v, int n, int64_t lo) {
  for (int i = 0; i < n; i++)
    if (v[i] < lo || v[i] > CONV_ATTR_MAX)
      return loom_fail(LOOM_ERR_INVALID, "%s: attribute '%s' entry %d is %lld; "
                       "it must be from %lld to %lld", ir_ops[c->op].name, name,
                       i, (long long)v[i], (long long)lo, (long long)CONV_ATTR_MAX);
  return LOOM_OK;
}

static loom_status_t conv_attrs(ir_infer_t *c, conv_attrs_t *p) {
  LOOM_TRY(ints_attr(c, "stride", 2, p->stride));
  LOOM_TRY(ints_attr(c, "pads", 4, p->pads));
  LOOM_TRY(ints_attr(c, "dilation", 2, p->dilation));
  LOOM_TRY(check_range(c, "stride", p->stride, 2, 1));
  LOOM_TRY(check_range(c, "pads", p->pads, 4, 0));
  LOOM_TRY(check_range(c, "dilation", p->dilation, 2, 1));
  p->groups = ir_op_int(c->op, c->attrs, "groups");
  LOOM_TRY(check_range(c, "groups", &p->groups, 1, 1));
  if (c->op != IR_OP_CONV_TRANSPOSE2D) return LOOM_OK;
  LOOM_TRY(ints_attr(c, "output_padding", 2, p->out_pad));
  LOOM_TRY(check_range(c, "output_padding", p->out_pad, 2, 0));
  for (int i = 0; i < 2; i++)
    if (p->out_pad[i] >= p->stride[i] && p->out_pad[i] >= p->dilation[i])
      return loom_fail(LOOM_ERR_INVALID, "%s: output_padding %lld must be "
                       "smaller than the stride (%lld) or the dilation (%lld)",
                       ir_ops[c->op].name, (long long)p->out_pad[i],
                       (long long)p->stride[i], (long long)p->dilation[i]);
  return LOOM_OK;
}

/* Ranks of x and w (4) and of the bias (1), and one dtype for all. */
static loom_status_t conv_ranks(ir_infer_t *c) {
  LOOM_TRY(same_dtypes(c));
  if (c->in[0]->rank != 4)
    return ir_shape_fail(c, "x must have rank 4 (N, C, H, W), not %d", c->in[0]->rank);
  if (c->in[1]->rank != 4)
    return ir_shape_fail(c, "w must have rank 4, not %d", c->in[1]->rank);
  if (c->n_in == 3 && c->in[2]->rank != 1)
    return ir_shape_fail(c, "bias must have rank 1, not %d", c->in[2]->rank);
  return LOOM_OK;
}

/* d is a multiple of groups (proved only for constants and groups 1). */
static loom_status_t check_divisible(ir_infer_t *c, ir_dim_t d,
                                     const char *what, int64_t groups) {
  if (groups == 1) return LOOM_OK;
  char s[64];
  if (!ir_dim_is_const(d) || d % groups != 0)
    return ir_shape_fail(c, "%s (%s) must be a multiple of groups (%lld)", what,
                         ir_dim_str(c->g, d, s, sizeof s), (long long)groups);
  return LOOM_OK;
}

static loom_status_t check_bias(ir_infer_t *c, ir_dim_t out_channels) {
  if (c->n_in < 3 || c->in[2]->dims[0] == out_channels) return LOOM_OK;
  char s[64];
  return ir_shape_fail(c, "bias must have one entry per output channel (%s)",
                       ir_dim_str(c->g, out_channels, s, sizeof s));
}

/* r = a + b*k for a constant k. */
static loom_status_t dim_axpy(loom_graph_t *g, ir_dim_t a, ir_dim_t b,
                              int64_t k, ir_dim_t *r) {
  ir_dim_t t;
  LOOM_TRY(ir_dim_mul(g, b, k, &t));
  return ir_dim_add(g, a, t, r);
}

/* A spatial output dim must hold at least one element when known. */
static loom_status_t check_nonempty(ir_infer_t *c, ir_dim_t d, const char *axis) {
  if (!ir_dim_is_const(d) || d >= 1) return LOOM_OK;
  return ir_shape_fail(c, "the output %s would be %lld; the input is too small "
                       "for the kernel, padding and dilation", axis, (long long)d);
}

/* conv2d: Ho = (H + pad_begin + pad_end - dilation*(k-1) - 1) // stride + 1. */
static loom_status_t conv_out_dim(ir_infer_t *c, const conv_attrs_t *p, int i,
                                  ir_dim_t *out) {
  loom_graph_t *g = c->g;
  ir_dim_t in = c->in[0]->dims[2 + i], k = c->in[1]->dims[2 + i], t;
  LOOM_TRY(ir_dim_add(g, in, p->pads[i] + p->pads[i + 2] + p->dilation[i] - 1, &t));
  LOOM_TRY(dim_axpy(g, t, k, -p->dilation[i], &t));
  LOOM_TRY(ir_dim_floordiv(g, t, p->stride[i], &t));
  LOOM_TRY(ir_dim_add(g, t, 1, out));
  return check_nonempty(c, *out, i ? "width" : "height");
}

loom_status_t ir_shape_conv2d(ir_infer_t *c) {
  conv_attrs_t p;
  LOOM_TRY(conv_ranks(c));
  LOOM_TRY(conv_attrs(c, &p));
  const ir_type_t *x = c->in[0], *w = c->in[1];
  ir_dim_t channels;
  LOOM_TRY(ir_dim_mul(c->g, w->dims[1], p.groups, &channels));
  ir_dim_t x_channels = x->dims[1];
  if (channels != x_channels) ir_specialize(c->g, &channels, &x_channels);
  if (channels != x_channels) {
    char s[64], t[64];
    return ir_shape_fail(c, "x has %s channels but w expects %s (w dim 1 * groups %lld)",
                         ir_dim_str(c->g, x->dims[1], s, sizeof s),
                         ir_dim_str(c->g, channels, t, sizeof t), (long long)p.groups);
  }
  LOOM_TRY(check_divisible(c, w->dims[0], "output channels (w dim 0)", p.groups));
  LOOM_TRY(check_bias(c, w->dims[0]));
  ir_type_t *y = &c->out[0];
  *y = (ir_type_t){.dtype = x->dtype, .rank = 4};
  y->dims[0] = x->dims[0];
  y->dims[1] = w->dims[0];
  LOOM_TRY(conv_out_dim(c, &p, 0, &y->dims[2]));
  return conv_out_dim(c, &p, 1, &y->dims[3]);
}

/* conv_transpose2d: Ho = (H-1)*stride - pad_begin - pad_end
 *                        + dilation*(k-1) + output_padding + 1. */
static loom_status_t convt_out_dim(ir_infer_t *c, const conv_attrs_t *p, int i,
                                   ir_dim_t *out) {
  loom_graph_t *g = c->g;
  ir_dim_t in = c->in[0]->dims[2 + i], k = c->in[1]->dims[2 + i], t;
  LOOM_TRY(ir_dim_add(g, in, -1, &t));
  LOOM_TRY(ir_dim_mul(g, t, p->stride[i], &t));
  LOOM_TRY(dim_axpy(g, t, k, p->dilation[i], &t));
  int64_t rest = -p->pads[i] - p->pads[i + 2] - p->dilation[i] + p->out_pad[i] + 1;
  LOOM_TRY(ir_dim_add(g, t, rest, out));
  return check_nonempty(c, *out, i ? "width" : "height");
}

loom_status_t ir_shape_conv_transpose2d(ir_infer_t *c) {
  conv_attrs_t p;
  LOOM_TRY(conv_ranks(c));
  LOOM_TRY(conv_attrs(c, &p));
  const ir_type_t *x = c->in[0], *w = c->in[1];
  ir_dim_t w_in = w->dims[0], x_channels = x->dims[1];
  if (w_in != x_channels) ir_specialize(c->g, &w_in, &x_channels);
  if (w_in != x_channels) {
    char s[64], t[64];
    return ir_shape_fail(c, "x has %s channels but w dim 0 is %s",
                         ir_dim_str(c->g, x->dims[1], s, sizeof s),
                         ir_dim_str(c->g, w->dims[0], t, sizeof t));
  }
  LOOM_TRY(check_divisible(c, w_in, "input channels", p.groups));
  ir_type_t *y = &c->out[0];
  *y = (ir_type_t){.dtype = x->dtype, .rank = 4};
  y->dims[0] = x->dims[0];
  LOOM_TRY(ir_dim_mul(c->g, w->dims[1], p.groups, &y->dims[1]));
  LOOM_TRY(check_bias(c, y->dims[1]));
  LOOM_TRY(convt_out_dim(c, &p, 0, &y->dims[2]));
  return convt_out_dim(c, &p, 1, &y->dims[3]);
}

/* ---- Builders ------------------------------------------------------------ */

loom_status_t loom_matmul(loom_graph_t *g, loom_value_t a, loom_value_t b,
                          int trans_a, int trans_b, loom_value_t *out) {
  ir_attrs_t attrs = {0};
  ir_attrs_int(&attrs, "trans_a", trans_a != 0);
  ir_attrs_int(&attrs, "trans_b", trans_b != 0);
  loom_value_t in[2] = {a, b};
  return ir_build1(g, IR_OP_MATMUL, 2, in, &attrs, out);
}

/* Zero means "the default" for the entries where 0 is not a valid value. */
static int64_t or_one(int64_t v) { return v == 0 ? 1 : v; }

static void conv_build_attrs(const loom_conv_params_t *p, bool transpose,
                             ir_attrs_t *a) {
  loom_conv_params_t none = {0};
  if (!p) p = &none;
  int64_t stride[2] = {or_one(p->stride[0]), or_one(p->stride[1])};
  int64_t dilation[2] = {or_one(p->dilation[0]), or_one(p->dilation[1])};
  ir_attrs_ints(a, "stride", 2, stride);
  ir_attrs_ints(a, "pads", 4, p->pads);
  ir_attrs_ints(a, "dilation", 2, dilation);
  ir_attrs_int(a, "groups", or_one(p->groups));
  if (transpose) ir_attrs_ints(a, "output_padding", 2, p->output_padding);
}

static loom_status_t conv_build(loom_graph_t *g, ir_op_t op, loom_value_t x,
                                loom_value_t w, int has_bias, loom_value_t bias,
                                const loom_conv_params_t *p, loom_value_t *out) {
  ir_attrs_t attrs = {0};
  conv_build_attrs(p, op == IR_OP_CONV_TRANSPOSE2D, &attrs);
  loom_value_t in[3] = {x, w, bias};
  return ir_build1(g, op, has_bias ? 3 : 2, in, &attrs, out);
}

loom_status_t loom_conv2d(loom_graph_t *g, loom_value_t x, loom_value_t w,
                          int has_bias, loom_value_t bias,
                          const loom_conv_params_t *p, loom_value_t *out) {
  return conv_build(g, IR_OP_CONV2D, x, w, has_bias, bias, p, out);
}

loom_status_t loom_conv_transpose2d(loom_graph_t *g, loom_value_t x,
                                    loom_value_t w, int has_bias,
                                    loom_value_t bias,
                                    const loom_conv_params_t *p,
                                    loom_value_t *out) {
  return conv_build(g, IR_OP_CONV_TRANSPOSE2D, x, w, has_bias, bias, p, out);
}

/* ---- conv2d_weight_grad -------------------------------------------------- */

/* Input dims 0 and 1 of x and dy: the same batch, and channel counts that
 * the groups divide. */
static loom_status_t weight_grad_channels(ir_infer_t *c, int64_t groups) {
  const ir_type_t *x = c->in[0], *dy = c->in[1];
  ir_dim_t nx = x->dims[0], ndy = dy->dims[0];
  if (nx != ndy) ir_specialize(c->g, &nx, &ndy);
  if (nx != ndy)
    return ir_shape_fail(c, "x and dy must have the same batch size (dim 0)");
  LOOM_TRY(check_divisible(c, x->dims[1], "input channels (x dim 1)", groups));
  return check_divisible(c, dy->dims[1], "output channels (dy dim 1)", groups);
}

/* dy's spatial dims are the positions of the convolution's output, or as
 * many fewer as conv_transpose2d's weight gradient (the roles swapped)
 * meets: there x's extra output_padding rows, fewer than the stride or
 * the dilation, may add floor(output_padding / stride) positions that its
 * input (this dy) lacks. */
static loom_status_t weight_grad_positions(ir_infer_t *c, const conv_attrs_t *p,
                                           const int64_t *kernel) {
  for (int i = 0; i < 2; i++) {
    ir_dim_t h = c->in[0]->dims[2 + i], o = c->in[1]->dims[2 + i];
    if (!ir_dim_is_const(h) || !ir_dim_is_const(o)) continue;
    int64_t span = p->dilation[i] * (kernel[i] - 1) + 1;
    bool fits = h + p->pads[i] + p->pads[i + 2] >= span;
    int64_t most = fits ? (h + p->pads[i] + p->pads[i + 2] - span) / p->stride[i] + 1 : 0;
    int64_t widest = p->stride[i] > p->dilation[i] ? p->stride[i] : p->dilation[i];
    int64_t fewest = most - (widest - 1) / p->stride[i];
    if (!fits || o > most || o < fewest)
      return ir_shape_fail(c, "dy dim %d is %lld but this convolution of x gives %lld "
                           "positions", 2 + i, (long long)o, (long long)most);
  }
  return LOOM_OK;
}

/* x (N, C, H, W), dy (N, O, Ho, Wo) -> (O, C/groups, kh, kw). The kernel
 * size is an attribute because x and dy do not determine it. */
loom_status_t ir_shape_conv2d_weight_grad(ir_infer_t *c) {
  LOOM_TRY(same_dtypes(c));
  if (c->in[0]->rank != 4 || c->in[1]->rank != 4)
    return ir_shape_fail(c, "x and dy must have rank 4 (N, C, H, W)");
  conv_attrs_t p;
  int64_t kernel[2];
  LOOM_TRY(ints_attr(c, "kernel", 2, kernel));
  LOOM_TRY(check_range(c, "kernel", kernel, 2, 1));
  LOOM_TRY(conv_attrs(c, &p));
  LOOM_TRY(weight_grad_channels(c, p.groups));
  LOOM_TRY(weight_grad_positions(c, &p, kernel));
  ir_type_t *dw = &c->out[0];
  *dw = (ir_type_t){.dtype = c->in[0]->dtype, .rank = 4};
  dw->dims[0] = c->in[1]->dims[1];
  LOOM_TRY(ir_dim_floordiv(c->g, c->in[0]->dims[1], p.groups, &dw->dims[1]));
  dw->dims[2] = kernel[0];
  dw->dims[3] = kernel[1];
  return LOOM_OK;
}

loom_status_t loom_conv2d_weight_grad(loom_graph_t *g, loom_value_t x,
                                      loom_value_t dy, const int64_t *kernel,
                                      const loom_conv_params_t *p,
                                      loom_value_t *out) {
  LOOM_CHECK_ARG(kernel);
  ir_attrs_t attrs = {0};
  conv_build_attrs(p, false, &attrs);
  ir_attrs_ints(&attrs, "kernel", 2, kernel);
  loom_value_t in[2] = {x, dy};
  return ir_build1(g, IR_OP_CONV2D_WEIGHT_GRAD, 2, in, &attrs, out);
}

/* ---- Cost ---------------------------------------------------------------- */

/* The product of t's dims [from, to) with symbols at `syms` (NULL: none
 * bound), or -1 when one is unbound. */
static int64_t dims_product(const loom_graph_t *g, const int64_t *syms, const ir_type_t *t,
                            int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) {
    int64_t d = t->dims[i];
    if (!ir_dim_is_const(d) && (!syms || ir_dim_eval(g, d, syms, &d) != LOOM_OK)) return -1;
    p *= d;
  }
  return p;
}

/* Each output element of a contraction sums `depth` products: 2 * depth
 * flops. A convolution's transposed form counts per input element. */
double ir_node_flops(const loom_graph_t *g, const ir_node_t *n, const int64_t *syms) {
  /* Contractions have inputs and an output to read; other ops may not. */
  if (ir_ops[n->op].fusion_class != IR_CLASS_CONTRACT) return 0;
  const ir_type_t *a = &g->values[n->in[0]].type;
  const ir_type_t *y = &g->values[n->out[0]].type;
  int64_t elems, depth;
  switch (n->op) {
  case IR_OP_MATMUL: {
    bool ta = a->rank >= 2 && ir_op_int(n->op, n->attrs, "trans_a");
    int kd = a->rank == 1 ? 0 : ta ? a->rank - 2 : a->rank - 1;
    elems = dims_product(g, syms, y, 0, y->rank);
    depth = dims_product(g, syms, a, kd, kd + 1);
    break;
  }
  case IR_OP_CONV2D: /* y (N, O, Ho, Wo), weight (O, C/groups, kh, kw) */
    elems = dims_product(g, syms, y, 0, 4);
    depth = dims_product(g, syms, &g->values[n->in[1]].type, 1, 4);
    break;
  case IR_OP_CONV_TRANSPOSE2D: /* x (N, C, H, W), weight (C, O/groups, kh, kw) */
    elems = dims_product(g, syms, a, 0, 4);
    depth = dims_product(g, syms, &g->values[n->in[1]].type, 1, 4);
    break;
  case IR_OP_CONV2D_WEIGHT_GRAD: { /* dw (O, C/groups, kh, kw), dy (N, O, Ho, Wo) */
    const ir_type_t *dy = &g->values[n->in[1]].type;
    int64_t images = dims_product(g, syms, dy, 0, 1), positions = dims_product(g, syms, dy, 2, 4);
    elems = dims_product(g, syms, y, 0, 4);
    depth = images < 0 || positions < 0 ? -1 : images * positions;
    break;
  }
  default:
    return 0;
  }
  return elems < 0 || depth < 0 ? -1 : 2.0 * (double)elems * (double)depth;
}
