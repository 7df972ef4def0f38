/* Contractions: matmul and convolutions: reference kernels. */
#include <string.h>

#include "core/alloc.h"
#include "kernels/ref.h"

/* ---- matmul -------------------------------------------------------------- */

/* One operand as a batch of logical (rows, cols) matrices: a 1-D operand
 * promoted as NumPy does, a transposed one read through swapped strides. */
typedef struct mm_operand {
  const loom_tensor_t *t;
  int batch_rank;
  const int64_t *batch; /* shape of the batch dims */
  int64_t mat_size;     /* elements per stored matrix */
  int64_t rows, cols;
  int64_t rs, cs; /* element strides of a logical row and column */
} mm_operand_t;

static void mm_operand(const loom_tensor_t *t, bool trans, bool is_b,
                       mm_operand_t *m) {
  int r = t->rank;
  *m = (mm_operand_t){.t = t, .batch = t->shape};
  if (r == 1) {
    int64_t k = t->shape[0];
    m->mat_size = k;
    m->rows = is_b ? k : 1;
    m->cols = is_b ? 1 : k;
    m->rs = is_b ? 1 : 0;
    m->cs = is_b ? 0 : 1;
    return;
  }
  int64_t pr = t->shape[r - 2], pc = t->shape[r - 1];
  m->batch_rank = r - 2;
  m->mat_size = pr * pc;
  m->rows = trans ? pc : pr;
  m->cols = trans ? pr : pc;
  m->rs = trans ? 1 : pc;
  m->cs = trans ? pc : 1;
}

/* Row i of a (from base ba) times column j of b (from base bb). */
static double mm_dot_f(const mm_operand_t *a, int64_t ba, const mm_operand_t *b,
                       int64_t bb, int64_t i, int64_t j) {
  double acc = 0;
  for (int64_t k = 0; k < a->cols; k++)
    acc += ref_get(a->t, ba + i * a->rs + k * a->cs) *
           ref_get(b->t, bb + k * b->rs + j * b->cs);
  return acc;
}

/* Unsigned arithmetic wraps where signed overflow would be undefined. */
static int64_t mm_dot_i(const mm_operand_t *a, int64_t ba, const mm_operand_t *b,
                        int64_t bb, int64_t i, int64_t j) {
  uint64_t acc = 0;
  for (int64_t k = 0; k < a->cols; k++)
    acc += (uint64_t)ref_geti(a->t, ba + i * a->rs + k * a->cs) *
           (uint64_t)ref_geti(b->t, bb + k * b->rs + j * b->cs);
  return (int64_t)acc;
}

loom_status_t ref_matmul(ref_call_t *c) {
  mm_operand_t a, b;
  mm_operand(c->in[0], ir_op_int(c->node->op, c->attrs, "trans_a"), false, &a);
  mm_operand(c->in[1], ir_op_int(c->node->op, c->attrs, "trans_b"), true, &b);
  loom_tensor_t *y = c->out[0];
  int batch_rank = a.batch_rank > b.batch_rank ? a.batch_rank : b.batch_rank;
  int64_t n_batch = 1, idx[LOOM_MAX_RANK];
  for (int d = 0; d < batch_rank; d++) n_batch *= y->shape[d];
  bool ints = !dtype_is_float(y->dtype);
  int64_t m = a.rows, n = b.cols;
  for (int64_t bi = 0; bi < n_batch; bi++) {
    ref_unravel(batch_rank, y->shape, bi, idx);
    int64_t ba = ref_broadcast_index(a.batch_rank, a.batch, batch_rank, idx) * a.mat_size;
    int64_t bb = ref_broadcast_index(b.batch_rank, b.batch, batch_rank, idx) * b.mat_size;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        int64_t o = (bi * m + i) * n + j;
        if (ints) ref_seti(y, o, mm_dot_i(&a, ba, &b, bb, i, j));
        else ref_set(y, o, mm_dot_f(&a, ba, &b, bb, i, j));
      }
  }
  return LOOM_OK;
}

/* ---- Convolutions -------------------------------------------------------- */

/* The attributes, inputs and sizes of one convolution. For conv2d, x is
 * (N, C, H, W), w (O, C/groups, kh, kw) and y (N, O, Ho, Wo); for the
 * transposed form, x is (N, C, H, W), w (C, O/groups, kh, kw) and y
 * (N, O, Ho, Wo). The shape rule has checked them all. */
typedef struct conv {
  int64_t stride[2], pads[4], dilation[2], groups;
  const loom_tensor_t *x, *w, *bias;
  loom_tensor_t *y;
} conv_t;

static void conv_setup(ref_call_t *c, conv_t *k) {
  ir_op_ints(c->node->op, c->attrs, "stride", 2, k->stride);
  ir_op_ints(c->node->op, c->attrs, "pads", 4, k->pads);
  ir_op_ints(c->node->op, c->attrs, "dilation", 2, k->dilation);
  k->groups = ir_op_int(c->node->op, c->attrs, "groups");
  k->x = c->in[0];
  k->w = c->in[1];
  k->bias = c->n_in > 2 ? c->in[2] : NULL;
  k->y = c->out[0];
}

/* Flat index of (i0, i1, i2, i3) in a contiguous 4-D shape. */
static int64_t at4(const int64_t *s, int64_t i0, int64_t i1, int64_t i2,
                   int64_t i3) {
  return ((i0 * s[1] + i1) * s[2] + i2) * s[3] + i3;
}

/* Position in the input (conv2d) or output (transposed) that output
 * (input) position p meets at kernel tap t along spatial axis a. */
static int64_t conv_pos(const conv_t *k, int a, int64_t p, int64_t t) {
  return p * k->stride[a] - k->pads[a] + t * k->dilation[a];
}

/* y[n, o, oh, ow]: the bias plus x's window under w[o]. */
static double conv_pixel(const conv_t *k, int64_t n, int64_t o, int64_t oh,
                         int64_t ow) {
  const int64_t *xs = k->x->shape, *ws = k->w->shape;
  int64_t cg = ws[1], g = o / (ws[0] / k->groups);
  double acc = k->bias ? ref_get(k->bias, o) : 0.0;
  for (int64_t ci = 0; ci < cg; ci++)
    for (int64_t i = 0; i < ws[2]; i++) {
      int64_t ih = conv_pos(k, 0, oh, i);
      if (ih < 0 || ih >= xs[2]) continue;
      for (int64_t j = 0; j < ws[3]; j++) {
        int64_t iw = conv_pos(k, 1, ow, j);
        if (iw < 0 || iw >= xs[3]) continue;
        acc += ref_get(k->x, at4(xs, n, g * cg + ci, ih, iw)) *
               ref_get(k->w, at4(ws, o, ci, i, j));
      }
    }
  return acc;
}

loom_status_t ref_conv2d(ref_call_t *c) {
  conv_t k;
  conv_setup(c, &k);
  int64_t n = loom_tensor_numel(k.y), idx[4];
  for (int64_t e = 0; e < n; e++) {
    ref_unravel(4, k.y->shape, e, idx);
    ref_set(k.y, e, conv_pixel(&k, idx[0], idx[1], idx[2], idx[3]));
  }
  return LOOM_OK;
}

/* Adds x[n, c, ih, iw] times the kernel of input channel c into acc,
 * laid out like y. */
static void convt_scatter(const conv_t *k, double *acc, int64_t n, int64_t c,
                          int64_t ih, int64_t iw) {
  const int64_t *ys = k->y->shape, *ws = k->w->shape;
  int64_t og = ws[1], g = c / (ws[0] / k->groups);
  double v = ref_get(k->x, at4(k->x->shape, n, c, ih, iw));
  for (int64_t oc = 0; oc < og; oc++)
    for (int64_t i = 0; i < ws[2]; i++) {
      int64_t oh = conv_pos(k, 0, ih, i);
      if (oh < 0 || oh >= ys[2]) continue;
      for (int64_t j = 0; j < ws[3]; j++) {
        int64_t ow = conv_pos(k, 1, iw, j);
        if (ow < 0 || ow >= ys[3]) continue;
        acc[at4(ys, n, g * og + oc, oh, ow)] += v * ref_get(k->w, at4(ws, c, oc, i, j));
      }
    }
}

/* The gradient of conv2d with respect to its input: every input pixel
 * scatters itself times the kernel into the output. The sums are kept in
 * double so that f16 and bf16 outputs round once. */
loom_status_t ref_conv_transpose2d(ref_call_t *c) {
  conv_t k;
  conv_setup(c, &k);
  int64_t ny = loom_tensor_numel(k.y), nx = loom_tensor_numel(k.x), idx[4];
  double *acc = ref_scratch(c, sizeof *acc * (size_t)ny);
  if (!acc)
    return loom_fail(LOOM_ERR_NOMEM, "%s: out of memory for %lld sums",
                     ref_name(c), (long long)ny);
  for (int64_t e = 0; e < nx; e++) {
    ref_unravel(4, k.x->shape, e, idx);
    convt_scatter(&k, acc, idx[0], idx[1], idx[2], idx[3]);
  }
  for (int64_t e = 0; e < ny; e++) {
    ref_unravel(4, k.y->shape, e, idx);
    ref_set(k.y, e, acc[e] + (k.bias ? ref_get(k.bias, idx[1]) : 0.0));
  }
  ref_scratch_release(c, acc);
  return LOOM_OK;
}

/* ---- conv2d_weight_grad -------------------------------------------------- */

/* dw[o, ci, i, j]: the sum over every batch entry and output position of
 * dy times the input pixel that tap (i, j) of the weight met there. */
static double weight_grad_tap(const conv_t *k, const loom_tensor_t *dy,
                              int64_t o, int64_t ci, int64_t i, int64_t j) {
  const int64_t *xs = k->x->shape, *ds = dy->shape;
  int64_t cg = k->y->shape[1], g = o / (ds[1] / k->groups);
  double acc = 0;
  for (int64_t n = 0; n < ds[0]; n++)
    for (int64_t oh = 0; oh < ds[2]; oh++) {
      int64_t ih = conv_pos(k, 0, oh, i);
      if (ih < 0 || ih >= xs[2]) continue;
      for (int64_t ow = 0; ow < ds[3]; ow++) {
        int64_t iw = conv_pos(k, 1, ow, j);
        if (iw < 0 || iw >= xs[3]) continue;
        acc += ref_get(dy, at4(ds, n, o, oh, ow)) *
               ref_get(k->x, at4(xs, n, g * cg + ci, ih, iw));
      }
    }
  return acc;
}

loom_status_t ref_conv2d_weight_grad(ref_call_t *c) {
  conv_t k;
  conv_setup(c, &k);
  k.w = NULL; /* input 1 is dy; the output k.y is the weight's gradient */
  int64_t n = loom_tensor_numel(k.y), idx[4];
  for (int64_t e = 0; e < n; e++) {
    ref_unravel(4, k.y->shape, e, idx);
    ref_set(k.y, e, weight_grad_tap(&k, c->in[1], idx[0], idx[1], idx[2], idx[3]));
  }
  return LOOM_OK;
}
