/* Bucket padding with masking (src/passes/pad.h). One walk over the nodes
 * in order: every value carries a tag per axis, the group whose padding
 * that axis holds (-1: none), and a rule per op maps its inputs' tags to
 * its outputs'. Where an op combines elements along a padded axis, the
 * rule first replaces the padded positions by the op's identity with
 * where(), never with a product: padding may hold NaN or inf, and
 * NaN * 0 is NaN. Means and variances divide by the real size.
 *
 * Invariant: along a tagged axis, the positions below the group's real
 * size hold what the unpadded graph computes; the others are arbitrary.
 * An op that would let padding reach a real position in a way no mask
 * can undo (a reshape merging a padded axis, a slice or concat along it,
 * a convolution over it) makes the pass fail with LOOM_ERR_UNSUPPORTED. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/rewrite.h"
#include "kernels/ref.h"
#include "passes/pad.h"

#define MAX_GROUPS 64

typedef int8_t tags_t[LOOM_MAX_RANK];

/* What padded positions become before an op reads them: its identity. */
typedef enum fill { FILL_ZERO, FILL_ONE, FILL_LOWEST, FILL_HIGHEST } fill_t;

typedef struct pad_ctx {
  const loom_graph_t *src;
  ir_rewriter_t rw;
  int n_groups;
  tags_t *tags;  /* per src value */
  ir_dim_t *dim; /* per group: the padded (bucket) size */
  int32_t *real; /* per group: dst input holding the real size (i64) */
  int32_t *mask; /* per group: dst bool [dim], iota < real; -1 until built */
  int64_t node;  /* the src node being rewritten */
  loom_status_t s; /* first failure of the emit helpers */
} pad_ctx_t;

typedef loom_status_t (*pad_rule_fn)(pad_ctx_t *c);

/* ---- Access to the node being rewritten --------------------------------- */

static const ir_node_t *cur(const pad_ctx_t *c) { return &c->src->nodes[c->node]; }
static int32_t in_v(const pad_ctx_t *c, int k) { return cur(c)->in[k]; }
static int32_t in_d(const pad_ctx_t *c, int k) {
  return ir_rewrite_lookup(&c->rw, cur(c)->in[k]);
}
static const int8_t *in_tags(const pad_ctx_t *c, int k) { return c->tags[in_v(c, k)]; }
static const ir_type_t *in_type(const pad_ctx_t *c, int k) {
  return &c->src->values[in_v(c, k)].type;
}
static const ir_type_t *out_type(const pad_ctx_t *c, int k) {
  return &c->src->values[cur(c)->out[k]].type;
}
static int8_t *out_tags(pad_ctx_t *c, int k) { return c->tags[cur(c)->out[k]]; }
static const ir_attrs_t *attrs(const pad_ctx_t *c) { return cur(c)->attrs; }

static bool any_tag(const int8_t *t, int rank) {
  for (int d = 0; d < rank; d++)
    if (t[d] >= 0) return true;
  return false;
}

static void no_tags(int8_t *t) { memset(t, -1, sizeof(tags_t)); }

static loom_status_t unsupported(pad_ctx_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static loom_status_t unsupported(pad_ctx_t *c, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (c->node < 0) return loom_fail(LOOM_ERR_UNSUPPORTED, "bucket padding: %s", msg);
  return loom_fail(LOOM_ERR_UNSUPPORTED, "bucket padding: %s (node %lld) %s",
                   ir_ops[cur(c)->op].name, (long long)c->node, msg);
}

/* Normalizes an axis attribute; out-of-range axes were rejected when the
 * node was built. */
static int norm_axis(int64_t axis, int rank) {
  return (int)(axis < 0 ? axis + rank : axis);
}

/* ---- Emitting: each helper does nothing after the first failure -------- */

static int32_t emit(pad_ctx_t *c, ir_op_t op, int n_in, const int32_t *ins,
                    const ir_attrs_t *a) {
  int32_t out = -1;
  if (c->s == LOOM_OK) c->s = ir_rewrite_emit(&c->rw, op, n_in, ins, a, &out, 1);
  return c->s == LOOM_OK ? out : -1;
}

static int32_t op1(pad_ctx_t *c, ir_op_t op, int32_t x) { return emit(c, op, 1, &x, NULL); }
static int32_t op2(pad_ctx_t *c, ir_op_t op, int32_t x, int32_t y) {
  return emit(c, op, 2, (int32_t[]){x, y}, NULL);
}

static ir_type_t dst_type(const pad_ctx_t *c, int32_t d) {
  return c->rw.dst->values[d].type;
}

/* A rank-0 constant; integers are set exactly (int64 bounds do not fit a
 * double). */
static int32_t constant(pad_ctx_t *c, loom_dtype_t dt, double f, int64_t i) {
  loom_tensor_t *t = NULL;
  int32_t out = -1;
  if (c->s == LOOM_OK) c->s = tensor_new(dt, 0, NULL, &t);
  if (c->s != LOOM_OK) return -1;
  if (dtype_is_float(dt)) ref_set(t, 0, f);
  else ref_seti(t, 0, i);
  c->s = ir_rewrite_constant(&c->rw, t, &out);
  return c->s == LOOM_OK ? out : -1;
}

static int32_t scalar(pad_ctx_t *c, loom_dtype_t dt, double v) {
  return constant(c, dt, v, (int64_t)v);
}

static void int_range(loom_dtype_t dt, int64_t *lo, int64_t *hi) {
  switch (dt) {
    case LOOM_I8: *lo = INT8_MIN, *hi = INT8_MAX; break;
    case LOOM_I32: *lo = INT32_MIN, *hi = INT32_MAX; break;
    case LOOM_BOOL: *lo = 0, *hi = 1; break;
    default: *lo = INT64_MIN, *hi = INT64_MAX; break;
  }
}

static int32_t fill_const(pad_ctx_t *c, loom_dtype_t dt, fill_t f) {
  int64_t lo, hi;
  int_range(dt, &lo, &hi);
  switch (f) {
    case FILL_ONE: return constant(c, dt, 1.0, 1);
    case FILL_LOWEST: return constant(c, dt, -INFINITY, lo);
    case FILL_HIGHEST: return constant(c, dt, INFINITY, hi);
    default: return constant(c, dt, 0.0, 0);
  }
}

/* The reduction op over the axes marked in red. */
static int32_t reduce(pad_ctx_t *c, ir_op_t op, int32_t x, const bool *red,
                      int rank, bool keepdim) {
  int64_t axes[LOOM_MAX_RANK];
  int n = 0;
  for (int d = 0; d < rank; d++)
    if (red[d]) axes[n++] = d;
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "axes", n, axes);
  ir_attrs_int(&a, "keepdim", keepdim);
  return emit(c, op, 1, &x, &a);
}

static int32_t squeeze(pad_ctx_t *c, int32_t x, const bool *drop, int rank) {
  int64_t axes[LOOM_MAX_RANK];
  int n = 0;
  for (int d = 0; d < rank; d++)
    if (drop[d]) axes[n++] = d;
  if (n == 0) return x;
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "axes", n, axes);
  return emit(c, IR_OP_SQUEEZE, 1, &x, &a);
}

static int32_t reshape(pad_ctx_t *c, int32_t x, int rank, const ir_dim_t *dims) {
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "shape", rank, dims);
  return emit(c, IR_OP_RESHAPE, 1, &x, &a);
}

/* The real size of group g as a rank-0 value of dtype dt. */
static int32_t real_as(pad_ctx_t *c, int g, loom_dtype_t dt) {
  if (dt == LOOM_I64) return c->real[g];
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "dtype", dt);
  return emit(c, IR_OP_CAST, 1, &c->real[g], &a);
}

/* ---- Masks ---------------------------------------------------------------- */

/* Bool [dim] of group g, true below the real size: iota < real. A
 * symbolic dim has no arange (its limit is a number), so the iota is
 * then an exclusive running sum of ones. */
static int32_t group_mask(pad_ctx_t *c, int g) {
  if (c->s != LOOM_OK || c->mask[g] >= 0) return c->mask[g];
  ir_dim_t dim = c->dim[g];
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "dtype", LOOM_I64);
  int32_t iota;
  if (ir_dim_is_const(dim)) {
    ir_attrs_float(&a, "limit", (double)dim);
    iota = emit(c, IR_OP_ARANGE, 0, NULL, &a);
  } else {
    ir_attrs_ints(&a, "shape", 1, &dim);
    ir_attrs_float(&a, "value", 1.0);
    int32_t ones = emit(c, IR_OP_FULL, 0, NULL, &a);
    ir_attrs_t s = {0};
    ir_attrs_int(&s, "axis", 0);
    ir_attrs_int(&s, "exclusive", 1);
    iota = emit(c, IR_OP_CUMSUM, 1, &ones, &s);
  }
  c->mask[g] = op2(c, IR_OP_LT, iota, c->real[g]);
  return c->mask[g];
}

/* Group g's mask shaped to broadcast along `axis` of a rank-`rank` value. */
static int32_t axis_mask(pad_ctx_t *c, int g, int axis, int rank) {
  int32_t m = group_mask(c, g);
  if (rank == 1) return m;
  ir_dim_t shape[LOOM_MAX_RANK];
  for (int d = 0; d < rank; d++) shape[d] = d == axis ? c->dim[g] : 1;
  return reshape(c, m, rank, shape);
}

/* True where every axis d with which[d] >= 0 is below group which[d]'s
 * real size; -1 when no axis is listed. */
static int32_t axes_mask(pad_ctx_t *c, const int8_t *which, int rank) {
  int32_t m = -1;
  for (int d = 0; d < rank; d++) {
    if (which[d] < 0) continue;
    int32_t md = axis_mask(c, which[d], d, rank);
    m = m < 0 ? md : op2(c, IR_OP_AND, m, md);
  }
  return m;
}

/* x with the padded positions of the listed axes replaced by f. */
static int32_t masked(pad_ctx_t *c, int32_t x, const int8_t *which, fill_t f) {
  if (c->s != LOOM_OK) return -1;
  ir_type_t t = dst_type(c, x);
  int32_t m = axes_mask(c, which, t.rank);
  if (m < 0) return x;
  return emit(c, IR_OP_WHERE, 3, (int32_t[]){m, x, fill_const(c, t.dtype, f)}, NULL);
}

/* The tags of t kept where red is set; -1 elsewhere. */
static void tags_on(const int8_t *t, const bool *red, int rank, int8_t *out) {
  no_tags(out);
  for (int d = 0; d < rank; d++)
    if (red[d]) out[d] = t[d];
}

/* ---- Counts, means and variances over padded axes ------------------------ */

/* The number of elements a reduction over red takes in the unpadded
 * graph, as a rank-0 value of dt: the real sizes of the tagged axes
 * times the other reduced dims. -1 without failing when one of those is
 * symbolic. */
static int32_t real_count(pad_ctx_t *c, const bool *red, const int8_t *tags,
                          int rank, const ir_dim_t *dims, loom_dtype_t dt) {
  int64_t k = 1;
  for (int d = 0; d < rank; d++) {
    if (!red[d] || tags[d] >= 0) continue;
    if (!ir_dim_is_const(dims[d])) return -1;
    k *= dims[d];
  }
  int32_t count = -1;
  for (int d = 0; d < rank; d++)
    if (red[d] && tags[d] >= 0) {
      int32_t r = real_as(c, tags[d], dt);
      count = count < 0 ? r : op2(c, IR_OP_MUL, count, r);
    }
  if (k != 1) count = op2(c, IR_OP_MUL, count, scalar(c, dt, (double)k));
  return count;
}

/* The mean of x over red, padded positions of the tagged axes left out.
 * With a symbolic unpadded reduced dim, the mean over the unpadded axes
 * comes first (a mean op knows its size at run time), then the sum over
 * the padded ones divided by their real sizes. */
static int32_t masked_mean(pad_ctx_t *c, int32_t x, const bool *red,
                           const int8_t *tags, bool keepdim) {
  if (c->s != LOOM_OK) return -1;
  ir_type_t t = dst_type(c, x);
  int8_t which[LOOM_MAX_RANK];
  tags_on(tags, red, t.rank, which);
  int32_t xm = masked(c, x, which, FILL_ZERO);
  int32_t count = real_count(c, red, tags, t.rank, t.dims, t.dtype);
  if (count >= 0) return op2(c, IR_OP_DIV, reduce(c, IR_OP_SUM, xm, red, t.rank, keepdim), count);
  bool other[LOOM_MAX_RANK] = {0}, padded[LOOM_MAX_RANK] = {0};
  for (int d = 0; d < t.rank; d++) {
    other[d] = red[d] && which[d] < 0;
    padded[d] = which[d] >= 0;
  }
  int32_t m = reduce(c, IR_OP_MEAN, xm, other, t.rank, true);
  int32_t s = reduce(c, IR_OP_SUM, m, padded, t.rank, true);
  int32_t y = op2(c, IR_OP_DIV, s, real_count(c, padded, tags, t.rank, t.dims, t.dtype));
  return keepdim ? y : squeeze(c, y, red, t.rank);
}

/* sum((x - mean)^2) / max(count - correction, 0), as the kernel divides. */
static int32_t masked_variance(pad_ctx_t *c, int32_t x, const bool *red,
                               const int8_t *tags, bool keepdim,
                               int64_t correction) {
  if (c->s != LOOM_OK) return -1;
  ir_type_t t = dst_type(c, x);
  int32_t xc = op2(c, IR_OP_SUB, x, masked_mean(c, x, red, tags, true));
  int32_t sq = op2(c, IR_OP_MUL, xc, xc);
  if (correction == 0) return masked_mean(c, sq, red, tags, keepdim);
  int32_t count = real_count(c, red, tags, t.rank, t.dims, t.dtype);
  if (c->s == LOOM_OK && count < 0) {
    c->s = unsupported(c, "with a correction reduces a symbolic unpadded dim "
                       "next to a padded one");
    return -1;
  }
  int8_t which[LOOM_MAX_RANK];
  tags_on(tags, red, t.rank, which);
  int32_t sum = reduce(c, IR_OP_SUM, masked(c, sq, which, FILL_ZERO), red, t.rank, keepdim);
  int32_t denom = op2(c, IR_OP_SUB, count, scalar(c, t.dtype, (double)correction));
  denom = op2(c, IR_OP_MAXIMUM, denom, scalar(c, t.dtype, 0.0));
  return op2(c, IR_OP_DIV, sum, denom);
}

/* ---- Tags ----------------------------------------------------------------- */

/* The group of a symbolic dim that pads it, or -1. */
static int group_of_dim(const pad_ctx_t *c, ir_dim_t d) {
  if (!ir_dim_is_sym(d)) return -1;
  for (int g = 0; g < c->n_groups; g++)
    if (c->dim[g] == d) return g;
  return -1;
}

/* Output tags of inputs broadcast together (NumPy alignment from the
 * right). A padded axis must not be broadcast, and one axis cannot carry
 * two groups. */
static loom_status_t broadcast_tags(pad_ctx_t *c, int n, const int32_t *vals,
                                    const ir_type_t *out, int8_t *tags) {
  no_tags(tags);
  for (int j = 0; j < out->rank; j++)
    for (int k = 0; k < n; k++) {
      const ir_type_t *t = &c->src->values[vals[k]].type;
      int a = j - (out->rank - t->rank);
      int g = a >= 0 ? c->tags[vals[k]][a] : -1;
      if (g < 0) continue;
      if (t->dims[a] != out->dims[j])
        return unsupported(c, "broadcasts padded axis %d of input %d", a, k);
      if (tags[j] >= 0 && tags[j] != g)
        return unsupported(c, "combines the padding of groups %d and %d on "
                           "axis %d", tags[j], g, j);
      tags[j] = g;
    }
  return LOOM_OK;
}

/* The tags left after reducing red: dropped, or size 1 with keepdim. */
static void reduced_tags(const int8_t *in, int rank, const bool *red,
                         bool keepdim, int8_t *out) {
  no_tags(out);
  for (int d = 0, o = 0; d < rank; d++) {
    if (!red[d]) out[o] = in[d];
    if (!red[d] || keepdim) o++;
  }
}

/* The axes attribute (all axes when absent), normalized, into red. */
static void axes_attr(const ir_attrs_t *a, int rank, bool *red) {
  const int64_t *v;
  int n = ir_attr_ints(a, "axes", &v);
  for (int d = 0; d < LOOM_MAX_RANK; d++) red[d] = n < 0 && d < rank;
  for (int i = 0; i < n && rank > 0; i++) red[norm_axis(v[i], rank)] = true;
}

/* ---- Rule helpers --------------------------------------------------------- */

/* The node as it is, its outputs tagged later by the caller. */
static loom_status_t copy(pad_ctx_t *c) { return ir_rewrite_copy(&c->rw, c->node); }

/* The node's op and attributes over new inputs; one output. */
static loom_status_t reemit(pad_ctx_t *c, const int32_t *ins) {
  int32_t y = emit(c, cur(c)->op, cur(c)->n_in, ins, attrs(c));
  LOOM_TRY(c->s);
  ir_rewrite_map(&c->rw, cur(c)->out[0], y);
  return LOOM_OK;
}

/* Maps output 0 to y once the emit helpers have succeeded. */
static loom_status_t map0(pad_ctx_t *c, int32_t y) {
  LOOM_TRY(c->s);
  ir_rewrite_map(&c->rw, cur(c)->out[0], y);
  return LOOM_OK;
}

/* Fails unless the only padded axis of input k is axis 0 (or none). */
static loom_status_t leading_only(pad_ctx_t *c, int k, const char *why) {
  const int8_t *t = in_tags(c, k);
  for (int d = 1; d < in_type(c, k)->rank; d++)
    if (t[d] >= 0) return unsupported(c, "pads axis %d of input %d: %s", d, k, why);
  return LOOM_OK;
}

/* ---- Elementwise ops and generators ------------------------------------ */

static loom_status_t rule_elementwise(pad_ctx_t *c) {
  const ir_node_t *n = cur(c);
  LOOM_TRY(broadcast_tags(c, n->n_in, n->in, out_type(c, 0), out_tags(c, 0)));
  /* An integer divisor of 0 in the padding fails the kernel: pad with 1. */
  bool int_div = (n->op == IR_OP_DIV || n->op == IR_OP_MOD) &&
                 !dtype_is_float(in_type(c, 1)->dtype);
  if (!int_div || !any_tag(in_tags(c, 1), in_type(c, 1)->rank)) return copy(c);
  int32_t ins[2] = {in_d(c, 0), masked(c, in_d(c, 1), in_tags(c, 1), FILL_ONE)};
  return reemit(c, ins);
}

/* full, arange, random_*: an axis of a padded symbolic size is padded
 * (its values do not depend on the position along it, or for random
 * numbers, on axis 0 only, as the generator counts by flat position). */
static loom_status_t rule_generator(pad_ctx_t *c) {
  const ir_type_t *t = out_type(c, 0);
  int8_t *tags = out_tags(c, 0);
  for (int d = 0; d < t->rank; d++) {
    tags[d] = (int8_t)group_of_dim(c, t->dims[d]);
    if (tags[d] >= 0 && d > 0 && (ir_ops[cur(c)->op].flags & F_RANDOM))
      return unsupported(c, "draws numbers by flat position, which padding "
                         "on axis %d shifts", d);
  }
  return copy(c);
}

static loom_status_t rule_dropout(pad_ctx_t *c) {
  LOOM_TRY(leading_only(c, 0, "random numbers are drawn by flat position, "
                        "which padding shifts"));
  memcpy(out_tags(c, 0), in_tags(c, 0), sizeof(tags_t));
  memcpy(out_tags(c, 1), in_tags(c, 0), sizeof(tags_t));
  return copy(c);
}

/* Ops whose inputs must not be padded at all. */
static loom_status_t rule_unpadded(pad_ctx_t *c) {
  for (int k = 0; k < cur(c)->n_in; k++)
    if (any_tag(in_tags(c, k), in_type(c, k)->rank))
      return unsupported(c, "reads padded input %d: %s", k,
                         cur(c)->op == IR_OP_ASSIGN
                             ? "padding would be written to a parameter"
                             : "its result depends on every element");
  return copy(c);
}

/* ---- Reductions ------------------------------------------------------------ */

static fill_t identity_of(ir_op_t op, const ir_attrs_t *a) {
  switch (op) {
    case IR_OP_PROD: return FILL_ONE;
    case IR_OP_MAX: case IR_OP_ARGMAX: case IR_OP_LOGSUMEXP:
    case IR_OP_SOFTMAX: case IR_OP_LOG_SOFTMAX: return FILL_LOWEST;
    case IR_OP_MIN: case IR_OP_ARGMIN: return FILL_HIGHEST;
    case IR_OP_TOPK: return ir_attr_int(a, "largest", 1) ? FILL_LOWEST : FILL_HIGHEST;
    default: return FILL_ZERO;
  }
}

/* sum, mean, max, min, prod, logsumexp, variance. */
static loom_status_t rule_reduce(pad_ctx_t *c) {
  const ir_node_t *n = cur(c);
  int rank = in_type(c, 0)->rank;
  bool red[LOOM_MAX_RANK], keepdim = ir_attr_int(attrs(c), "keepdim", 0) != 0;
  axes_attr(attrs(c), rank, red);
  reduced_tags(in_tags(c, 0), rank, red, keepdim, out_tags(c, 0));
  int8_t which[LOOM_MAX_RANK];
  tags_on(in_tags(c, 0), red, rank, which);
  if (!any_tag(which, rank)) return copy(c);
  int32_t x = in_d(c, 0);
  if (n->op == IR_OP_MEAN) return map0(c, masked_mean(c, x, red, which, keepdim));
  if (n->op == IR_OP_VARIANCE)
    return map0(c, masked_variance(c, x, red, which, keepdim,
                                   ir_attr_int(attrs(c), "correction", 0)));
  int32_t xm = masked(c, x, which, identity_of(n->op, attrs(c)));
  return reemit(c, &xm);
}

/* argmax, argmin: along an axis, or over the flattened tensor, whose flat
 * index only padding of axis 0 leaves unchanged. */
static loom_status_t rule_argreduce(pad_ctx_t *c) {
  int rank = in_type(c, 0)->rank;
  bool all = !ir_attrs_find(attrs(c), "axis");
  bool red[LOOM_MAX_RANK] = {0};
  for (int d = 0; d < rank; d++)
    red[d] = all || d == norm_axis(ir_attr_int(attrs(c), "axis", 0), rank);
  if (all) LOOM_TRY(leading_only(c, 0, "a flat index counts padded positions"));
  reduced_tags(in_tags(c, 0), rank, red, ir_attr_int(attrs(c), "keepdim", 0) != 0,
               out_tags(c, 0));
  int8_t which[LOOM_MAX_RANK];
  tags_on(in_tags(c, 0), red, rank, which);
  if (!any_tag(which, rank)) return copy(c);
  int32_t xm = masked(c, in_d(c, 0), which, identity_of(cur(c)->op, attrs(c)));
  return reemit(c, &xm);
}

/* A forward running sum reads only earlier positions: padding, at the
 * end, is never read. A reverse one reads it: zeroed. */
static loom_status_t rule_cumsum(pad_ctx_t *c) {
  int rank = in_type(c, 0)->rank;
  memcpy(out_tags(c, 0), in_tags(c, 0), sizeof(tags_t));
  int axis = norm_axis(ir_attr_int(attrs(c), "axis", 0), rank);
  if (rank == 0 || in_tags(c, 0)[axis] < 0 || !ir_attr_int(attrs(c), "reverse", 0))
    return copy(c);
  int8_t which[LOOM_MAX_RANK];
  no_tags(which);
  which[axis] = in_tags(c, 0)[axis];
  int32_t xm = masked(c, in_d(c, 0), which, FILL_ZERO);
  return reemit(c, &xm);
}

/* softmax, log_softmax, topk: along one axis, whose padding becomes the
 * value that never wins (-inf, or +inf for the smallest k). */
static loom_status_t rule_along_axis(pad_ctx_t *c) {
  const ir_node_t *n = cur(c);
  int rank = in_type(c, 0)->rank;
  int axis = rank ? norm_axis(ir_attr_int(attrs(c), "axis", -1), rank) : 0;
  for (int k = 0; k < n->n_out; k++) {
    memcpy(out_tags(c, k), in_tags(c, 0), sizeof(tags_t));
    if (n->op == IR_OP_TOPK) out_tags(c, k)[axis] = -1;
  }
  if (rank == 0 || in_tags(c, 0)[axis] < 0) return copy(c);
  int8_t which[LOOM_MAX_RANK];
  no_tags(which);
  which[axis] = in_tags(c, 0)[axis];
  int32_t xm = masked(c, in_d(c, 0), which, identity_of(n->op, attrs(c)));
  int32_t outs[2] = {-1, -1};
  if (c->s == LOOM_OK)
    c->s = ir_rewrite_emit(&c->rw, n->op, 1, &xm, attrs(c), outs, n->n_out);
  LOOM_TRY(c->s);
  for (int k = 0; k < n->n_out; k++) ir_rewrite_map(&c->rw, n->out[k], outs[k]);
  return LOOM_OK;
}

/* ---- Normalization -------------------------------------------------------- */

/* layer_norm and rms_norm over axis..rank-1, rebuilt from their
 * definitions with masked statistics when one of those axes is padded. */
static loom_status_t rule_norm(pad_ctx_t *c) {
  const ir_node_t *n = cur(c);
  int rank = in_type(c, 0)->rank;
  LOOM_TRY(broadcast_tags(c, n->n_in, n->in, out_type(c, 0), out_tags(c, 0)));
  bool red[LOOM_MAX_RANK] = {0};
  int axis = norm_axis(ir_attr_int(attrs(c), "axis", -1), rank);
  for (int d = axis; d < rank; d++) red[d] = true;
  int8_t which[LOOM_MAX_RANK];
  tags_on(in_tags(c, 0), red, rank, which);
  if (!any_tag(which, rank)) return copy(c);
  bool centered = n->op == IR_OP_LAYER_NORM;
  double eps = ir_op_float(n->op, attrs(c), "eps");
  loom_dtype_t dt = in_type(c, 0)->dtype;
  int32_t x = in_d(c, 0);
  if (centered) x = op2(c, IR_OP_SUB, x, masked_mean(c, x, red, which, true));
  int32_t var = masked_mean(c, op2(c, IR_OP_MUL, x, x), red, which, true);
  int32_t inv = op1(c, IR_OP_RSQRT, op2(c, IR_OP_ADD, var, scalar(c, dt, eps)));
  int32_t y = op2(c, IR_OP_MUL, x, inv);
  if (n->n_in > 1) y = op2(c, IR_OP_MUL, y, in_d(c, 1));
  if (n->n_in > 2) y = op2(c, IR_OP_ADD, y, in_d(c, 2));
  return map0(c, y);
}

/* Tags of batch_norm: y as x (the channel's padding shared with the
 * per-channel inputs), running statistics by channel. */
static loom_status_t batch_norm_tags(pad_ctx_t *c) {
  int8_t ch = in_tags(c, 0)[1];
  for (int k = 1; k < 5; k++) {
    int8_t g = in_tags(c, k)[0];
    if (g >= 0 && ch >= 0 && g != ch)
      return unsupported(c, "combines the padding of groups %d and %d on the "
                         "channel axis", ch, g);
    if (g >= 0) ch = g;
  }
  memcpy(out_tags(c, 0), in_tags(c, 0), sizeof(tags_t));
  out_tags(c, 0)[1] = ch;
  out_tags(c, 1)[0] = ch;
  out_tags(c, 2)[0] = ch;
  return LOOM_OK;
}

/* Training batch_norm whose batch or spatial axes are padded: statistics
 * over the real positions, the running variance unbiased by the real
 * count, as the kernel computes them. */
static loom_status_t rule_batch_norm(pad_ctx_t *c) {
  const ir_type_t *xt = in_type(c, 0);
  int rank = xt->rank;
  LOOM_TRY(batch_norm_tags(c));
  bool red[LOOM_MAX_RANK] = {0};
  for (int d = 0; d < rank; d++) red[d] = d != 1;
  int8_t which[LOOM_MAX_RANK];
  tags_on(in_tags(c, 0), red, rank, which);
  if (!ir_attr_int(attrs(c), "training", 0) || !any_tag(which, rank)) return copy(c);
  loom_dtype_t dt = xt->dtype;
  double eps = ir_op_float(cur(c)->op, attrs(c), "eps");
  double m = ir_op_float(cur(c)->op, attrs(c), "momentum");
  int32_t x = in_d(c, 0);
  int32_t count = real_count(c, red, which, rank, xt->dims, dt);
  if (c->s == LOOM_OK && count < 0)
    return unsupported(c, "has a symbolic spatial dim next to a padded axis");
  ir_dim_t per_channel[LOOM_MAX_RANK], channels = xt->dims[1];
  for (int d = 0; d < rank; d++) per_channel[d] = d == 1 ? channels : 1;
  int32_t mean = masked_mean(c, x, red, which, true);
  int32_t xc = op2(c, IR_OP_SUB, x, mean);
  int32_t var = masked_mean(c, op2(c, IR_OP_MUL, xc, xc), red, which, true);
  int32_t k = op2(c, IR_OP_MUL, reshape(c, in_d(c, 1), rank, per_channel),
                  op1(c, IR_OP_RSQRT, op2(c, IR_OP_ADD, var, scalar(c, dt, eps))));
  int32_t y = op2(c, IR_OP_ADD, op2(c, IR_OP_MUL, xc, k),
                  reshape(c, in_d(c, 2), rank, per_channel));
  int32_t unbiased = op2(c, IR_OP_MUL, reshape(c, var, 1, &channels),
                         op2(c, IR_OP_DIV, count,
                             op2(c, IR_OP_SUB, count, scalar(c, dt, 1.0))));
  int32_t keep = scalar(c, dt, 1.0 - m), take = scalar(c, dt, m);
  int32_t new_mean = op2(c, IR_OP_ADD, op2(c, IR_OP_MUL, in_d(c, 3), keep),
                         op2(c, IR_OP_MUL, reshape(c, mean, 1, &channels), take));
  int32_t new_var = op2(c, IR_OP_ADD, op2(c, IR_OP_MUL, in_d(c, 4), keep),
                        op2(c, IR_OP_MUL, unbiased, take));
  LOOM_TRY(c->s);
  ir_rewrite_map(&c->rw, cur(c)->out[0], y);
  ir_rewrite_map(&c->rw, cur(c)->out[1], new_mean);
  ir_rewrite_map(&c->rw, cur(c)->out[2], new_var);
  return LOOM_OK;
}

/* ---- Contractions and pooling --------------------------------------------- */

/* The axes of one matmul operand: contracted, kept (rows of a, columns
 * of b; -1 for a vector), and how many batch dims lead. */
typedef struct mm_axes {
  int k, kept, batch;
} mm_axes_t;

static mm_axes_t mm_axes(int rank, bool trans, bool is_b) {
  if (rank == 1) return (mm_axes_t){0, -1, 0};
  int last = rank - 1, prev = rank - 2;
  bool k_last = is_b ? trans : !trans;
  return (mm_axes_t){k_last ? last : prev, k_last ? prev : last, rank - 2};
}

/* Batch dims broadcast as elementwise ops do; padding along the
 * contracted dim is zeroed in both operands (the other may hold
 * NaN there too). */
static loom_status_t rule_matmul(pad_ctx_t *c) {
  bool ta = ir_attr_int(attrs(c), "trans_a", 0), tb = ir_attr_int(attrs(c), "trans_b", 0);
  const ir_type_t *at = in_type(c, 0), *bt = in_type(c, 1), *yt = out_type(c, 0);
  const int8_t *tga = in_tags(c, 0), *tgb = in_tags(c, 1);
  mm_axes_t a = mm_axes(at->rank, ta, false), b = mm_axes(bt->rank, tb, true);
  int8_t *out = out_tags(c, 0);
  no_tags(out);
  int batch = yt->rank - (a.kept >= 0) - (b.kept >= 0);
  for (int j = 0; j < batch; j++) {
    int ia = j - (batch - a.batch), ib = j - (batch - b.batch);
    int8_t ga = ia >= 0 ? tga[ia] : -1, gb = ib >= 0 ? tgb[ib] : -1;
    if ((ga >= 0 && at->dims[ia] != yt->dims[j]) || (gb >= 0 && bt->dims[ib] != yt->dims[j]))
      return unsupported(c, "broadcasts a padded batch axis");
    if (ga >= 0 && gb >= 0 && ga != gb)
      return unsupported(c, "combines the padding of groups %d and %d", ga, gb);
    out[j] = ga >= 0 ? ga : gb;
  }
  if (a.kept >= 0) out[batch] = tga[a.kept];
  if (b.kept >= 0) out[yt->rank - 1] = tgb[b.kept];
  int8_t g = tga[a.k] >= 0 ? tga[a.k] : tgb[b.k];
  if (tga[a.k] >= 0 && tgb[b.k] >= 0 && tga[a.k] != tgb[b.k])
    return unsupported(c, "contracts dims padded in groups %d and %d", tga[a.k], tgb[b.k]);
  if (g < 0) return copy(c);
  int8_t wa[LOOM_MAX_RANK], wb[LOOM_MAX_RANK];
  no_tags(wa);
  no_tags(wb);
  wa[a.k] = wb[b.k] = g;
  int32_t ins[2] = {masked(c, in_d(c, 0), wa, FILL_ZERO), masked(c, in_d(c, 1), wb, FILL_ZERO)};
  return reemit(c, ins);
}

/* Convolutions: windows slide over spatial axes and mix channels, so only
 * the batch axis of x may be padded. */
static loom_status_t rule_conv(pad_ctx_t *c) {
  LOOM_TRY(leading_only(c, 0, "a convolution's windows and channels cross it"));
  for (int k = 1; k < cur(c)->n_in; k++)
    if (any_tag(in_tags(c, k), in_type(c, k)->rank))
      return unsupported(c, "reads padded weights or bias (input %d)", k);
  out_tags(c, 0)[0] = in_tags(c, 0)[0];
  return copy(c);
}

/* The weight gradient sums over the batch: padded images are zeroed in
 * both x and dy. */
static loom_status_t rule_conv_weight_grad(pad_ctx_t *c) {
  LOOM_TRY(leading_only(c, 0, "a convolution's windows and channels cross it"));
  LOOM_TRY(leading_only(c, 1, "a convolution's windows and channels cross it"));
  int8_t g = in_tags(c, 0)[0] >= 0 ? in_tags(c, 0)[0] : in_tags(c, 1)[0];
  if (g < 0) return copy(c);
  int8_t which[LOOM_MAX_RANK];
  no_tags(which);
  which[0] = g;
  int32_t ins[2] = {masked(c, in_d(c, 0), which, FILL_ZERO),
                    masked(c, in_d(c, 1), which, FILL_ZERO)};
  return reemit(c, ins);
}

/* Pooling (and its gradients) works per image and channel: those axes
 * may be padded, the spatial ones not. */
static loom_status_t rule_pool(pad_ctx_t *c) {
  int8_t *out = out_tags(c, 0);
  for (int k = 0; k < cur(c)->n_in; k++) {
    const int8_t *t = in_tags(c, k);
    if (t[2] >= 0 || t[3] >= 0)
      return unsupported(c, "pools over padded spatial axes of input %d", k);
    for (int d = 0; d < 2; d++) {
      if (t[d] >= 0 && out[d] >= 0 && t[d] != out[d])
        return unsupported(c, "combines the padding of groups %d and %d", out[d], t[d]);
      if (t[d] >= 0) out[d] = t[d];
    }
  }
  return copy(c);
}

/* ---- Layout ---------------------------------------------------------------- */

static loom_status_t rule_transpose(pad_ctx_t *c) {
  int rank = in_type(c, 0)->rank;
  const int64_t *p;
  int n = ir_attr_ints(attrs(c), "perm", &p);
  for (int i = 0; i < rank; i++)
    out_tags(c, 0)[i] = in_tags(c, 0)[n < 0 ? rank - 1 - i : norm_axis(p[i], rank)];
  return copy(c);
}

static loom_status_t rule_squeeze(pad_ctx_t *c) {
  const ir_type_t *xt = in_type(c, 0);
  bool drop[LOOM_MAX_RANK] = {0};
  const int64_t *v;
  int n = ir_attr_ints(attrs(c), "axes", &v);
  for (int d = 0; d < xt->rank; d++) drop[d] = n <= 0 && xt->dims[d] == 1;
  for (int i = 0; i < n; i++) drop[norm_axis(v[i], xt->rank)] = true;
  for (int d = 0, o = 0; d < xt->rank; d++) {
    if (drop[d] && in_tags(c, 0)[d] >= 0)
      return unsupported(c, "drops padded axis %d", d);
    if (!drop[d]) out_tags(c, 0)[o++] = in_tags(c, 0)[d];
  }
  return copy(c);
}

static loom_status_t rule_unsqueeze(pad_ctx_t *c) {
  int rank = out_type(c, 0)->rank;
  bool inserted[LOOM_MAX_RANK] = {0};
  const int64_t *v;
  int n = ir_attr_ints(attrs(c), "axes", &v);
  for (int i = 0; i < n; i++) inserted[norm_axis(v[i], rank)] = true;
  for (int d = 0, j = 0; d < rank; d++)
    if (!inserted[d]) out_tags(c, 0)[d] = in_tags(c, 0)[j++];
  return copy(c);
}

/* Broadcasting to a padded symbolic size repeats one value: padded. */
static loom_status_t rule_expand(pad_ctx_t *c) {
  const ir_type_t *xt = in_type(c, 0), *yt = out_type(c, 0);
  for (int i = 0; i < yt->rank; i++) {
    int j = i - (yt->rank - xt->rank);
    int8_t g = j >= 0 ? in_tags(c, 0)[j] : -1;
    if (g >= 0 && xt->dims[j] != yt->dims[i])
      return unsupported(c, "broadcasts padded axis %d", j);
    out_tags(c, 0)[i] = g >= 0 ? g : (int8_t)group_of_dim(c, yt->dims[i]);
  }
  return copy(c);
}

/* A dim product as a constant and sorted symbolic factors. */
typedef struct dim_product {
  int64_t k;
  int n;
  ir_dim_t f[4 * LOOM_MAX_RANK];
} dim_product_t;

static bool factor_into(const loom_graph_t *g, ir_dim_t d, dim_product_t *p) {
  const ir_expr_t *e = ir_dim_expr(g, d);
  if (!e) return !__builtin_mul_overflow(p->k, d, &p->k);
  if (e->kind == IR_EXPR_CONST) return !__builtin_mul_overflow(p->k, e->c, &p->k);
  if (e->kind == IR_EXPR_MUL) return factor_into(g, e->a, p) && factor_into(g, e->b, p);
  if (p->n == (int)(sizeof p->f / sizeof p->f[0])) return false;
  p->f[p->n++] = d;
  return true;
}

static int cmp_dim(const void *a, const void *b) {
  ir_dim_t x = *(const ir_dim_t *)a, y = *(const ir_dim_t *)b;
  return (x > y) - (x < y);
}

/* The product of dims[0..n-1]; false when too complex to factor. */
static bool product_of(const loom_graph_t *g, const ir_dim_t *dims, int n,
                       dim_product_t *p) {
  p->k = 1;
  p->n = 0;
  for (int i = 0; i < n; i++)
    if (!factor_into(g, dims[i], p)) return false;
  qsort(p->f, (size_t)p->n, sizeof p->f[0], cmp_dim);
  return true;
}

static bool same_product(const dim_product_t *a, const dim_product_t *b) {
  return a->k == b->k && a->n == b->n && !memcmp(a->f, b->f, sizeof a->f[0] * (size_t)a->n);
}

/* A padded axis survives a reshape when the output has an axis of its
 * size after the same number of elements: then it is not merged or split. */
static loom_status_t rule_reshape(pad_ctx_t *c) {
  const ir_type_t *xt = in_type(c, 0), *yt = out_type(c, 0);
  for (int a = 0; a < xt->rank; a++) {
    int8_t g = in_tags(c, 0)[a];
    if (g < 0) continue;
    dim_product_t before, out_before;
    int found = -1;
    bool ok = product_of(c->src, xt->dims, a, &before);
    for (int b = 0; ok && found < 0 && b < yt->rank; b++)
      if (yt->dims[b] == xt->dims[a] && product_of(c->src, yt->dims, b, &out_before) &&
          same_product(&before, &out_before))
        found = b;
    if (found < 0) return unsupported(c, "merges or splits padded axis %d", a);
    out_tags(c, 0)[found] = g;
  }
  return copy(c);
}

/* The same as op_layout's whole_axis: a slice that keeps every element. */
static bool whole_axis(int64_t start, int64_t end, int64_t step) {
  if (step == 1) return (start == 0 || start == INT64_MIN) && end == INT64_MAX;
  return false;
}

static loom_status_t rule_slice(pad_ctx_t *c) {
  int rank = in_type(c, 0)->rank;
  const int64_t *starts, *ends, *axes, *steps;
  int n = ir_attr_ints(attrs(c), "starts", &starts);
  ir_attr_ints(attrs(c), "ends", &ends);
  bool has_axes = ir_attr_ints(attrs(c), "axes", &axes) >= 0;
  bool has_steps = ir_attr_ints(attrs(c), "steps", &steps) >= 0;
  for (int i = 0; i < n; i++) {
    int d = has_axes ? norm_axis(axes[i], rank) : i;
    if (in_tags(c, 0)[d] >= 0 && !whole_axis(starts[i], ends[i], has_steps ? steps[i] : 1))
      return unsupported(c, "takes part of padded axis %d, whose end depends on "
                         "the real size", d);
  }
  memcpy(out_tags(c, 0), in_tags(c, 0), sizeof(tags_t));
  return copy(c);
}

/* Fails when the listed per-axis amounts move or repeat a padded axis. */
static loom_status_t check_axis_list(pad_ctx_t *c, const char *attr, int64_t keep,
                                     int stride, const char *what) {
  int rank = in_type(c, 0)->rank;
  const int64_t *v;
  int n = ir_attr_ints(attrs(c), attr, &v);
  for (int i = 0; i < n; i++) {
    int d = stride ? i % rank : norm_axis(v[i], rank);
    bool moved = stride ? v[i] != keep : true;
    if (moved && in_tags(c, 0)[d] >= 0) return unsupported(c, "%s padded axis %d", what, d);
  }
  memcpy(out_tags(c, 0), in_tags(c, 0), sizeof(tags_t));
  return copy(c);
}

static loom_status_t rule_pad(pad_ctx_t *c) {
  return check_axis_list(c, "pads", 0, 1, "pads (so moves the padding of)");
}
static loom_status_t rule_tile(pad_ctx_t *c) {
  return check_axis_list(c, "repeats", 1, 1, "repeats");
}
static loom_status_t rule_flip(pad_ctx_t *c) {
  return check_axis_list(c, "axes", 0, 0, "reverses (so moves the padding of)");
}

/* concat and split along an unpadded axis; the others broadcast-merge. */
static loom_status_t rule_concat_split(pad_ctx_t *c) {
  const ir_node_t *n = cur(c);
  int axis = norm_axis(ir_attr_int(attrs(c), "axis", 0), in_type(c, 0)->rank);
  for (int k = 0; k < n->n_in; k++)
    if (in_tags(c, k)[axis] >= 0)
      return unsupported(c, "joins or cuts along padded axis %d", axis);
  LOOM_TRY(broadcast_tags(c, n->n_in, n->in, in_type(c, 0), out_tags(c, 0)));
  for (int k = 1; k < n->n_out; k++) memcpy(out_tags(c, k), out_tags(c, 0), sizeof(tags_t));
  return copy(c);
}

/* ---- Indexing -------------------------------------------------------------- */

/* Indices read from padding are garbage: they become 0, a valid index. */
static int32_t safe_indices(pad_ctx_t *c, int k) {
  return masked(c, in_d(c, k), in_tags(c, k), FILL_ZERO);
}

/* gather and index_select: indices from padding are zeroed; along a
 * padded data axis, a negative index counts from the real end. */
static loom_status_t rule_gather(pad_ctx_t *c) {
  const ir_type_t *dt = in_type(c, 0), *it = in_type(c, 1);
  int axis = norm_axis(ir_attr_int(attrs(c), "axis", 0), dt->rank);
  const int8_t *td = in_tags(c, 0), *ti = in_tags(c, 1);
  int8_t *out = out_tags(c, 0);
  int o = 0;
  for (int d = 0; d < axis; d++) out[o++] = td[d];
  for (int d = 0; d < it->rank; d++) out[o++] = ti[d];
  for (int d = axis + 1; d < dt->rank; d++) out[o++] = td[d];
  bool padded_ind = any_tag(ti, it->rank);
  if (!padded_ind && td[axis] < 0) return copy(c);
  int32_t ind = padded_ind ? safe_indices(c, 1) : in_d(c, 1);
  if (td[axis] >= 0) {
    int32_t neg = op2(c, IR_OP_LT, ind, fill_const(c, it->dtype, FILL_ZERO));
    int32_t wrapped = op2(c, IR_OP_ADD, ind, real_as(c, td[axis], it->dtype));
    ind = emit(c, IR_OP_WHERE, 3, (int32_t[]){neg, wrapped, ind}, NULL);
  }
  return reemit(c, (int32_t[]){in_d(c, 0), ind});
}

static loom_status_t rule_embedding(pad_ctx_t *c) {
  int rank = in_type(c, 1)->rank;
  memcpy(out_tags(c, 0), in_tags(c, 1), sizeof(tags_t));
  out_tags(c, 0)[rank] = in_tags(c, 0)[1];
  if (!any_tag(in_tags(c, 1), rank)) return copy(c);
  return reemit(c, (int32_t[]){in_d(c, 0), safe_indices(c, 1)});
}

static loom_status_t rule_one_hot(pad_ctx_t *c) {
  memcpy(out_tags(c, 0), in_tags(c, 0), sizeof(tags_t));
  if (!any_tag(in_tags(c, 0), in_type(c, 0)->rank)) return copy(c);
  int32_t ind = safe_indices(c, 0);
  return reemit(c, &ind);
}

/* scatter_add: entries of index and src in padding add 0 at index 0. */
static loom_status_t rule_scatter_add(pad_ctx_t *c) {
  const ir_type_t *it = in_type(c, 1), *st = in_type(c, 2);
  const int8_t *ti = in_tags(c, 1), *ts = in_tags(c, 2);
  int8_t which[LOOM_MAX_RANK];
  no_tags(which);
  for (int d = 0; d < it->rank; d++) {
    if (ti[d] < 0 && ts[d] < 0) continue;
    if (it->dims[d] != st->dims[d] || (ti[d] >= 0 && ts[d] >= 0 && ti[d] != ts[d]))
      return unsupported(c, "index and src differ on padded axis %d", d);
    which[d] = ti[d] >= 0 ? ti[d] : ts[d];
  }
  memcpy(out_tags(c, 0), in_tags(c, 0), sizeof(tags_t));
  if (!any_tag(which, it->rank)) return copy(c);
  return reemit(c, (int32_t[]){in_d(c, 0), masked(c, in_d(c, 1), which, FILL_ZERO),
                               masked(c, in_d(c, 2), which, FILL_ZERO)});
}

/* ---- The rule table ----------------------------------------------------- */

/* Each op's rule, named by the pad column of its row (ops.def). */
#define rule_NONE NULL
static const pad_rule_fn rules[IR_OP_COUNT] = {
#define LOOM_OP(ID, nm, cls, imin, imax, nout, dt, fl, shp, ref, grad, dec, pad, ...) \
  [IR_OP_##ID] = rule_##pad,
#include "ir/ops.def"
#undef LOOM_OP
};
#undef rule_NONE

/* ---- Checks after each node ------------------------------------------------ */

static bool dim_mentions(const loom_graph_t *g, ir_dim_t d, ir_dim_t sym) {
  if (d == sym) return true;
  const ir_expr_t *e = ir_dim_expr(g, d);
  if (!e || e->kind == IR_EXPR_CONST || e->kind == IR_EXPR_SYM) return false;
  return dim_mentions(g, e->a, sym) || dim_mentions(g, e->b, sym);
}

/* A padded axis has its group's size; an unpadded one has no size made
 * from a padded symbol (padding would be there, untracked). */
static loom_status_t check_axes(pad_ctx_t *c, const ir_type_t *t,
                                const int8_t *tags, const char *what, int k) {
  for (int d = 0; d < t->rank; d++) {
    char buf[64];
    if (tags[d] >= 0 && t->dims[d] != c->dim[tags[d]])
      return unsupported(c, "internal: %s %d axis %d is tagged with group %d "
                         "but has size %s", what, k, d, tags[d],
                         ir_dim_str(c->src, t->dims[d], buf, sizeof buf));
    for (int g = 0; tags[d] < 0 && g < c->n_groups; g++)
      if (ir_dim_is_sym(c->dim[g]) && dim_mentions(c->src, t->dims[d], c->dim[g]))
        return unsupported(c, "makes %s %d axis %d of size %s from padded "
                           "size %s in a way padding cannot follow", what, k, d,
                           ir_dim_str(c->src, t->dims[d], buf, sizeof buf),
                           ir_dim_str(c->src, c->dim[g], buf, sizeof buf));
  }
  return LOOM_OK;
}

/* Each output is mapped, with the type it had, and tagged consistently. */
static loom_status_t check_outputs(pad_ctx_t *c) {
  const ir_node_t *n = cur(c);
  for (int k = 0; k < n->n_out; k++) {
    int32_t d = ir_rewrite_lookup(&c->rw, n->out[k]);
    const ir_type_t *want = out_type(c, k);
    if (d < 0) return unsupported(c, "internal: output %d was not mapped", k);
    ir_type_t got = dst_type(c, d);
    if (!(ir_ops[n->op].flags & F_DATA_SHAPE) && !ir_type_equal(&got, want)) {
      char a[96], b[96];
      return unsupported(c, "internal: the rewrite made %s, not %s",
                         ir_type_str(c->rw.dst, &got, a, sizeof a),
                         ir_type_str(c->src, want, b, sizeof b));
    }
    LOOM_TRY(check_axes(c, want, out_tags(c, k), "output", k));
  }
  return LOOM_OK;
}

static loom_status_t rewrite_node(pad_ctx_t *c, int64_t i) {
  c->node = i;
  pad_rule_fn rule = rules[cur(c)->op];
  bool padded = false;
  for (int k = 0; k < cur(c)->n_in; k++)
    padded |= any_tag(in_tags(c, k), in_type(c, k)->rank);
  if (!rule && padded) return unsupported(c, "has no rule for padded inputs");
  loom_status_t s = rule ? rule(c) : copy(c);
  if (s == LOOM_OK) s = c->s;
  if (s == LOOM_OK) s = check_outputs(c);
  return s;
}

/* ---- Set-up ------------------------------------------------------------------ */

/* Checks padded dim i and tags its input's axis; each group's size is
 * the same in all its dims. */
static loom_status_t tag_input(pad_ctx_t *c, int i, const pad_dim_t *p) {
  const loom_graph_t *src = c->src;
  if (p->input < 0 || p->input >= src->n_inputs)
    return loom_fail(LOOM_ERR_INVALID, "pass_mask_padding: padded dim %d names "
                     "input %d; the graph has %lld", i, p->input, (long long)src->n_inputs);
  const ir_type_t *t = &src->values[src->inputs[p->input]].type;
  if (p->axis < -t->rank || p->axis >= t->rank)
    return loom_fail(LOOM_ERR_AXIS, "pass_mask_padding: padded dim %d: axis %d "
                     "is out of range for input %d of rank %d", i, p->axis, p->input, t->rank);
  if (p->group < 0 || p->group >= c->n_groups)
    return loom_fail(LOOM_ERR_INVALID, "pass_mask_padding: padded dim %d: group "
                     "%d is outside 0..%d", i, p->group, c->n_groups - 1);
  int axis = norm_axis(p->axis, t->rank);
  ir_dim_t size = t->dims[axis];
  if (c->dim[p->group] == -1) c->dim[p->group] = size;
  if (c->dim[p->group] != size) {
    char a[64], b[64];
    return loom_fail(LOOM_ERR_SHAPE, "pass_mask_padding: group %d pads dims of "
                     "sizes %s and %s; one group has one size", p->group,
                     ir_dim_str(src, c->dim[p->group], a, sizeof a),
                     ir_dim_str(src, size, b, sizeof b));
  }
  int8_t *tag = &c->tags[src->inputs[p->input]][axis];
  if (*tag >= 0 && *tag != p->group)
    return loom_fail(LOOM_ERR_INVALID, "pass_mask_padding: axis %d of input %d "
                     "is listed in groups %d and %d", axis, p->input, *tag, p->group);
  *tag = (int8_t)p->group;
  return LOOM_OK;
}

/* Tags the inputs. Groups are numbered without gaps, two never share a
 * symbol, and no input has an axis of a padded symbolic size left out. */
static loom_status_t tag_inputs(pad_ctx_t *c, int n, const pad_dim_t *dims) {
  for (int i = 0; i < n; i++) LOOM_TRY(tag_input(c, i, &dims[i]));
  for (int g = 0; g < c->n_groups; g++) {
    if (c->dim[g] == -1)
      return loom_fail(LOOM_ERR_INVALID, "pass_mask_padding: group %d pads no dim; "
                       "groups are numbered from 0 without gaps", g);
    for (int h = 0; h < g; h++)
      if (ir_dim_is_sym(c->dim[g]) && c->dim[g] == c->dim[h])
        return loom_fail(LOOM_ERR_INVALID, "pass_mask_padding: groups %d and %d "
                         "pad the same symbolic size; dims of one size are one "
                         "group", h, g);
  }
  for (int64_t i = 0; i < c->src->n_inputs; i++) {
    int32_t v = c->src->inputs[i];
    if (check_axes(c, &c->src->values[v].type, c->tags[v], "input", (int)i) != LOOM_OK)
      return loom_fail(LOOM_ERR_INVALID, "pass_mask_padding: input %lld has an "
                       "axis whose size is made from a padded symbol but is not "
                       "listed as padded", (long long)i);
  }
  return LOOM_OK;
}

/* One i64 scalar input per group, after src's inputs. */
static loom_status_t add_real_inputs(pad_ctx_t *c) {
  for (int g = 0; g < c->n_groups; g++) {
    char name[32];
    snprintf(name, sizeof name, "real_size_%d", g);
    loom_value_t v;
    LOOM_TRY(ir_graph_input(c->rw.dst, name, LOOM_I64, 0, NULL, &v));
    c->real[g] = v.id;
    c->mask[g] = -1;
  }
  return LOOM_OK;
}

static int count_groups(int n, const pad_dim_t *dims) {
  int most = -1;
  for (int i = 0; i < n; i++)
    if (dims[i].group > most) most = dims[i].group;
  return most + 1;
}

static loom_status_t alloc_ctx(pad_ctx_t *c, int n_groups) {
  c->n_groups = n_groups;
  int64_t nv = c->src->n_values ? c->src->n_values : 1;
  size_t ng = (size_t)(n_groups ? n_groups : 1);
  c->tags = core_malloc(sizeof *c->tags * (size_t)nv);
  c->dim = core_malloc(sizeof *c->dim * ng);
  c->real = core_malloc(sizeof *c->real * ng);
  c->mask = core_malloc(sizeof *c->mask * ng);
  if (!c->tags || !c->dim || !c->real || !c->mask)
    return loom_fail(LOOM_ERR_NOMEM, "pass_mask_padding: out of memory for %lld values",
                     (long long)nv);
  memset(c->tags, -1, sizeof *c->tags * (size_t)nv);
  for (int g = 0; g < n_groups; g++) c->dim[g] = -1;
  return LOOM_OK;
}

static void free_ctx(pad_ctx_t *c) {
  core_free(c->tags);
  core_free(c->dim);
  core_free(c->real);
  core_free(c->mask);
}

/* The rewrite itself, with the context set up. */
static loom_status_t run(pad_ctx_t *c, int n, const pad_dim_t *dims,
                         pad_result_t *out) {
  LOOM_TRY(tag_inputs(c, n, dims));
  LOOM_TRY(ir_rewrite_begin(c->src, &c->rw));
  loom_status_t s = add_real_inputs(c);
  for (int64_t i = 0; s == LOOM_OK && i < c->src->n_nodes; i++) s = rewrite_node(c, i);
  if (s != LOOM_OK) {
    ir_rewrite_abort(&c->rw);
    return s;
  }
  LOOM_TRY(ir_rewrite_finish(&c->rw, &out->graph));
  out->n_groups = c->n_groups;
  out->n_outputs = (int)c->src->n_outputs;
  size_t n_out = (size_t)(out->n_outputs ? out->n_outputs : 1);
  out->out_group = core_malloc(sizeof *out->out_group * n_out);
  if (!out->out_group)
    return loom_fail(LOOM_ERR_NOMEM, "pass_mask_padding: out of memory");
  for (int i = 0; i < out->n_outputs; i++) {
    int32_t v = c->src->outputs[i];
    for (int a = 0; a < LOOM_MAX_RANK; a++)
      out->out_group[i][a] = a < c->src->values[v].type.rank ? c->tags[v][a] : -1;
  }
  return LOOM_OK;
}

loom_status_t pass_mask_padding(const loom_graph_t *src, int n,
                                const pad_dim_t *dims, pad_result_t *out) {
  LOOM_CHECK_ARG(src);
  LOOM_CHECK_ARG(out);
  *out = (pad_result_t){0};
  if (n < 0 || (n > 0 && !dims))
    return loom_fail(LOOM_ERR_INVALID, "pass_mask_padding: %d padded dims at %p",
                     n, (const void *)dims);
  int n_groups = count_groups(n, dims);
  if (n_groups > MAX_GROUPS)
    return loom_fail(LOOM_ERR_INVALID, "pass_mask_padding: %d groups; at most %d",
                     n_groups, MAX_GROUPS);
  pad_ctx_t c = {.src = src, .node = -1};
  loom_status_t s = alloc_ctx(&c, n_groups);
  if (s == LOOM_OK) s = run(&c, n, dims, out);
  free_ctx(&c);
  if (s != LOOM_OK) pad_result_free(out);
  return s;
}

void pad_result_free(pad_result_t *r) {
  if (!r) return;
  loom_graph_destroy(r->graph);
  core_free(r->out_group);
  *r = (pad_result_t){0};
}
