/* The CPU back end's eager kernels (be_backend_t.eager): one node at a
 * time on host tensors, for the fallback interpreter (rt_interpret) where
 * nothing is compiled. They exist before any compile, so a segment seen
 * for the first time, or with no C compiler on the machine, still runs
 * its matmuls on the library GEMM and the rest as plain loops and row
 * copies, not through the reference kernels' per-element dtype dispatch
 * in double. They cover:
 *   - matmul of f32 (here);
 *   - concat, split, slice with steps of 1, and pad with a constant
 *     (no crop), of any dtype (here);
 *   - expand, of any dtype, and cast between bool, i32, i64 and f32
 *     (eager_elementwise.c);
 *   - f32 and i64 add, sub, mul and mod (Python's; an i64 divisor of 0
 *     is the reference's, which fails); i64 bitwise_and, bitwise_or,
 *     bitwise_xor, bitshift_left and bitshift_right; f32 div, maximum, minimum and the unary
 *     ops neg, abs, relu, sqrt, exp, log, tanh, sigmoid, identity; eq,
 *     ne, lt, le, gt, ge of f32 or i64, giving bool; where, sides of any
 *     dtype (eager_elementwise.c), all with NumPy broadcasting;
 *   - gather, index_select and embedding of any dtype, scatter_add of f32
 *     whose index and src have one shape, equal to self's off the axis;
 *     i64 or i32 indices (eager_index.c);
 *   - sum and mean of f32 over adjacent axes, softmax and log_softmax of
 *     f32 (eager_reduce.c);
 *   - conv2d, conv_transpose2d and conv2d_weight_grad of dense f32 NCHW
 *     tensors, on generated code's kernels (eager_conv.c); max_pool2d and
 *     avg_pool2d of dense f32 NCHW images (eager_pool.c).
 * Every other op, dtype or layout is the reference kernels', and so is
 * an index out of range, whose error the reference kernel gives.
 *
 * Results are the reference's bits except matmul's, the convolutions' and those of exp,
 * tanh and sigmoid: f32 add, sub, mul, div and mod are exact roundings of the
 * double results the reference rounds, the other unary ops round the
 * same or compute in double as the reference does, comparisons are
 * exact, scatter_add, sum and mean add in double in the reference's
 * order and round once, softmax and log_softmax compute each line in
 * double as it does. matmul accumulates in f32, and exp, tanh and
 * sigmoid compute in float (float_math.h, within a few ulp), as compiled
 * code does (the convolutions too): libm's double functions were a quarter of an LSTM's time in
 * the fallback. */
#include <string.h>

#include "backend/cpu/eager.h"
#include "backend/cpu/kernels/gemm.h"

/* ---- matmul -------------------------------------------------------------- */

enum { EAGER_SPLIT_MACS = 1 << 24 };

/* Operands of rank 2 and more, f32; batch dims broadcast (NumPy). */
static bool eager_matmul(ref_call_t *c, loom_status_t *status) {
  const loom_tensor_t *a = c->in[0], *b = c->in[1];
  loom_tensor_t *y = c->out[0];
  if (a->dtype != LOOM_F32 || b->dtype != LOOM_F32 || y->dtype != LOOM_F32 ||
      a->rank < 2 || b->rank < 2)
    return false;
  int ta = (int)ir_op_int(c->node->op, c->attrs, "trans_a");
  int tb = (int)ir_op_int(c->node->op, c->attrs, "trans_b");
  int ra = a->rank, rb = b->rank, batch_rank = y->rank - 2;
  int64_t m = y->shape[y->rank - 2], n = y->shape[y->rank - 1];
  int64_t k = ta ? a->shape[ra - 2] : a->shape[ra - 1];
  *status = LOOM_OK;
  if (m == 0 || n == 0) return true;
  if (k == 0) { /* a sum of nothing */
    memset(y->data, 0, (size_t)loom_tensor_numel(y) * sizeof(float));
    return true;
  }
  int64_t n_batch = loom_tensor_numel(y) / (m * n);
  /* the fallback's threads for a product long enough to repay waking
   * them (about 0.3 ms on one core); the small ones of a recurrent cell
   * ran slower split */
  core_pool_t *pool = (double)n_batch * (double)m * (double)n * (double)k >= EAGER_SPLIT_MACS
                          ? c->pool : NULL;
  loom_abi_gemm_t d = {.m = m, .n = n, .k = k, .batch = 1,
                       .lda = a->shape[ra - 1], .trans_a = ta,
                       .ldb = b->shape[rb - 1], .trans_b = tb, .ldc = n};
  int64_t mat_a = a->shape[ra - 2] * a->shape[ra - 1];
  int64_t mat_b = b->shape[rb - 2] * b->shape[rb - 1];
  const float *pa = a->data, *pb = b->data;
  float *py = y->data;
  int64_t items_a = loom_tensor_numel(a) / mat_a, items_b = loom_tensor_numel(b) / mat_b;
  /* An operand with as many items as the output lines up with it (its
   * batch dims are the output's, less leading ones); one with a single
   * item is shared. Then one call serves every item. */
  if ((items_a == n_batch || items_a == 1) && (items_b == n_batch || items_b == 1)) {
    d.batch = n_batch;
    d.a = pa;
    d.b = pb;
    d.c = py;
    d.stride_a = items_a == 1 ? 0 : mat_a;
    d.stride_b = items_b == 1 ? 0 : mat_b;
    d.stride_c = m * n;
    kern_gemm_f32(&d, pool);
    return true;
  }
  int64_t idx[LOOM_MAX_RANK];
  for (int64_t i = 0; i < n_batch; i++) {
    ref_unravel(batch_rank, y->shape, i, idx);
    d.a = pa + ref_broadcast_index(ra - 2, a->shape, batch_rank, idx) * mat_a;
    d.b = pb + ref_broadcast_index(rb - 2, b->shape, batch_rank, idx) * mat_b;
    d.c = py + i * m * n;
    kern_gemm_f32(&d, pool);
  }
  return true;
}

/* ---- Data movement (any dtype) --------------------------------------------- */

static int64_t prod(int from, int to, const int64_t *shape) {
  int64_t n = 1;
  for (int d = from; d < to; d++) n *= shape[d];
  return n;
}

static int attr_axis(const ref_call_t *c, int rank) {
  int64_t axis = ir_attr_int(c->attrs, "axis", 0);
  return (int)(axis < 0 ? axis + rank : axis);
}

/* concat joins, split cuts, along axis: viewed as (outer, size, inner),
 * each part is a block of rows of the whole in every outer index. */
static bool eager_join(ref_call_t *c, bool join, loom_status_t *status) {
  const loom_tensor_t *whole = join ? c->out[0] : c->in[0];
  int n_parts = join ? c->n_in : c->n_out, axis = attr_axis(c, whole->rank);
  int64_t es = (int64_t)loom_dtype_size(whole->dtype);
  int64_t outer = prod(0, axis, whole->shape);
  int64_t row = prod(axis + 1, whole->rank, whole->shape) * es;
  char *w = whole->data;
  for (int64_t o = 0; o < outer; o++) {
    int64_t at = o * whole->shape[axis];
    for (int k = 0; k < n_parts; k++) {
      const loom_tensor_t *part = join ? c->in[k] : c->out[k];
      int64_t rows = part->shape[axis];
      if (rows * row > 0) {
        char *p = (char *)part->data + o * rows * row;
        if (join) memcpy(w + at * row, p, (size_t)(rows * row));
        else memcpy(p, w + at * row, (size_t)(rows * row));
      }
      at += rows;
    }
  }
  *status = LOOM_OK;
  return true;
}

/* slice with steps of 1: a box of the input, copied row by row. */
static bool eager_slice(ref_call_t *c, loom_status_t *status) {
  const loom_tensor_t *x = c->in[0];
  loom_tensor_t *y = c->out[0];
  int64_t first[LOOM_MAX_RANK], step[LOOM_MAX_RANK];
  *status = ref_slice_window(c, first, step);
  if (*status != LOOM_OK) return true;
  for (int d = 0; d < x->rank; d++)
    if (step[d] != 1) return false;
  int r = x->rank;
  if (loom_tensor_numel(y) == 0) return true;
  int64_t es = (int64_t)loom_dtype_size(x->dtype), len = y->shape[r - 1] * es;
  int64_t stride[LOOM_MAX_RANK], idx[LOOM_MAX_RANK] = {0}, rows = prod(0, r - 1, y->shape);
  for (int d = r - 1; d >= 0; d--) stride[d] = d == r - 1 ? 1 : stride[d + 1] * x->shape[d + 1];
  for (int64_t i = 0; i < rows; i++) {
    int64_t at = first[r - 1];
    for (int d = 0; d < r - 1; d++) at += (first[d] + idx[d]) * stride[d];
    memcpy((char *)y->data + i * len, (const char *)x->data + at * es, (size_t)len);
    for (int d = r - 2; d >= 0 && ++idx[d] == y->shape[d]; d--) idx[d] = 0;
  }
  return true;
}

/* pad, constant mode, pads of 0 and up (a crop is the reference's): the
 * output filled with the value, stored as the reference stores it, then
 * the input's rows copied into its interior. */
static bool eager_pad(ref_call_t *c, loom_status_t *status) {
  const loom_tensor_t *x = c->in[0];
  loom_tensor_t *y = c->out[0];
  int r = x->rank;
  size_t es = loom_dtype_size(x->dtype);
  const int64_t *pads = NULL;
  if (r == 0 || es > 8 || y->dtype != x->dtype || y->rank != r ||
      ir_op_int(c->node->op, c->attrs, "mode") != LOOM_PAD_CONSTANT ||
      ir_attr_ints(c->attrs, "pads", &pads) != 2 * r)
    return false;
  for (int d = 0; d < r; d++)
    if (pads[d] < 0 || pads[d + r] < 0 || y->shape[d] != x->shape[d] + pads[d] + pads[d + r])
      return false;
  unsigned char fill[8] = {0}, zero[8] = {0};
  dtype_store_f64(y->dtype, fill, ir_op_float(c->node->op, c->attrs, "value"));
  int64_t n = loom_tensor_numel(y);
  if (!memcmp(fill, zero, es)) memset(y->data, 0, (size_t)n * es);
  else
    for (int64_t i = 0; i < n; i++) memcpy((char *)y->data + (size_t)i * es, fill, es);
  int64_t len = x->shape[r - 1] * (int64_t)es, rows = prod(0, r - 1, x->shape);
  int64_t stride[LOOM_MAX_RANK], idx[LOOM_MAX_RANK] = {0};
  for (int d = r - 1; d >= 0; d--) stride[d] = d == r - 1 ? 1 : stride[d + 1] * y->shape[d + 1];
  for (int64_t i = 0; len > 0 && i < rows; i++) {
    int64_t at = pads[r - 1];
    for (int d = 0; d < r - 1; d++) at += (pads[d] + idx[d]) * stride[d];
    memcpy((char *)y->data + at * (int64_t)es, (const char *)x->data + i * len, (size_t)len);
    for (int d = r - 2; d >= 0 && ++idx[d] == x->shape[d]; d--) idx[d] = 0;
  }
  *status = LOOM_OK;
  return true;
}

bool cpu_eager(ref_call_t *c, loom_status_t *status) {
  ir_op_t op = c->node->op;
  /* assigns write state, data-shaped ops make their own outputs */
  if (c->n_out < 1) return false;
  for (int k = 0; k < c->n_out; k++)
    if (!c->out[k]) return false;
  switch (op) {
    case IR_OP_MATMUL: return eager_matmul(c, status);
    case IR_OP_CONCAT: return eager_join(c, true, status);
    case IR_OP_SPLIT: return eager_join(c, false, status);
    case IR_OP_SLICE: return c->in[0]->rank > 0 && eager_slice(c, status);
    case IR_OP_PAD: return eager_pad(c, status);
    case IR_OP_WHERE: return cpu_eager_where(c, status);
    case IR_OP_EXPAND: return cpu_eager_expand(c, status);
    case IR_OP_CAST: return cpu_eager_cast(c, status);
    case IR_OP_GATHER:
    case IR_OP_INDEX_SELECT:
    case IR_OP_EMBEDDING: return cpu_eager_take(c, status);
    case IR_OP_SCATTER_ADD: return cpu_eager_scatter_add(c, status);
    case IR_OP_SUM:
    case IR_OP_MEAN: return cpu_eager_reduce(c, status);
    case IR_OP_SOFTMAX:
    case IR_OP_LOG_SOFTMAX: return cpu_eager_softmax(c, status);
    case IR_OP_CONV2D:
    case IR_OP_CONV_TRANSPOSE2D:
    case IR_OP_CONV2D_WEIGHT_GRAD: return cpu_eager_conv(c, status);
    case IR_OP_MAX_POOL2D:
    case IR_OP_AVG_POOL2D: return cpu_eager_pool(c, status);
    default: break;
  }
  return cpu_eager_elementwise(c, status);
}
