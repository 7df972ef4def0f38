/* Layout ops: reshape, permute, slice, concat, pad and friends: shape
 * rules and builders. Dims may be symbolic throughout; where a rule needs
 * a constant and meets a symbol it fails and says so. */
#include <stdio.h>
#include <string.h>

#include "core/status.h"
#include "ir/ir.h"

static const char *op_name(const ir_infer_t *c) { return ir_ops[c->op].name; }

/* A dim given in an attribute: a size or a symbol of this graph. */
static bool dim_ok(const loom_graph_t *g, ir_dim_t d) {
  return ir_dim_is_sym(d) ? ir_dim_expr(g, d) != NULL : d >= 0;
}

/* "[n, 3]" into buf. */
static const char *dims_str(const loom_graph_t *g, int n, const ir_dim_t *dims,
                            char *buf, size_t size) {
  size_t used = (size_t)snprintf(buf, size, "[");
  for (int i = 0; i < n && used < size; i++) {
    char d[64];
    used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "",
                             ir_dim_str(g, dims[i], d, sizeof d));
  }
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

static loom_status_t check_rank(ir_infer_t *c, int rank) {
  if (rank > LOOM_MAX_RANK)
    return ir_shape_fail(c, "the result would have rank %d; at most %d", rank,
                         LOOM_MAX_RANK);
  return LOOM_OK;
}

/* An axis of a tensor; unlike ir_axis, a scalar has none. */
static loom_status_t tensor_axis(ir_infer_t *c, int64_t axis, int rank,
                                 int *out) {
  if (rank == 0)
    return loom_fail(LOOM_ERR_AXIS, "%s: axis %lld is out of range for a scalar",
                     op_name(c), (long long)axis);
  return ir_axis(c, axis, rank, out);
}

/* Normalizes n listed axes against rank into out; no axis twice. */
static loom_status_t unique_axes(ir_infer_t *c, int n, const int64_t *axes,
                                 int rank, int *out) {
  for (int i = 0; i < n; i++) {
    LOOM_TRY(tensor_axis(c, axes[i], rank, &out[i]));
    for (int j = 0; j < i; j++)
      if (out[j] == out[i])
        return loom_fail(LOOM_ERR_INVALID, "%s: axis %d is listed twice",
                         op_name(c), out[i]);
  }
  return LOOM_OK;
}

/* ---- reshape --------------------------------------------------------------- */

/* An element count as a constant times symbolic factors, so that counts
 * built in different orders still compare equal. */
#define MAX_FACTORS 32
typedef struct factors {
  int64_t k;               /* constant part */
  int n;                   /* number of symbolic factors */
  ir_dim_t f[MAX_FACTORS]; /* symbols, sums and quotients */
} factors_t;

/* Multiplies d into p; false on overflow or too many factors. */
static bool factor_dim(const loom_graph_t *g, ir_dim_t d, factors_t *p) {
  const ir_expr_t *e = ir_dim_expr(g, d);
  if (!e) return !__builtin_mul_overflow(p->k, d, &p->k);
  if (e->kind == IR_EXPR_CONST) return !__builtin_mul_overflow(p->k, e->c, &p->k);
  if (e->kind == IR_EXPR_MUL) return factor_dim(g, e->a, p) && factor_dim(g, e->b, p);
  if (p->n == MAX_FACTORS) return false;
  p->f[p->n++] = d;
  return true;
}

/* The product of dims other than dims[skip]. */
static bool factor_dims(const loom_graph_t *g, int n, const ir_dim_t *dims,
                        int skip, factors_t *p) {
  p->k = 1;
  p->n = 0;
  for (int i = 0; i < n; i++)
    if (i != skip && !factor_dim(g, dims[i], p)) return false;
  return true;
}

/* Drops the symbolic factors a and b share. */
static void cancel_common(factors_t *a, factors_t *b) {
  for (int i = 0; i < a->n; i++)
    for (int j = 0; j < b->n; j++)
      if (a->f[i] == b->f[j]) {
        a->f[i--] = a->f[--a->n];
        b->f[j] = b->f[--b->n];
        break;
      }
}

/* Symbols first and the constant last, as ir_dim_mul folds constants. */
static loom_status_t factors_product(loom_graph_t *g, const factors_t *p,
                                     ir_dim_t *out) {
  ir_dim_t d = 1;
  for (int i = 0; i < p->n; i++) LOOM_TRY(ir_dim_mul(g, d, p->f[i], &d));
  return ir_dim_mul(g, d, p->k, out);
}

/* The shape attribute: entries are dims or a single -1 (*infer). */
static loom_status_t reshape_target(ir_infer_t *c, const int64_t **shape,
                                    int *n, int *infer) {
  *n = ir_attr_ints(c->attrs, "shape", shape);
  LOOM_TRY(check_rank(c, *n));
  *infer = -1;
  for (int i = 0; i < *n; i++) {
    int64_t d = (*shape)[i];
    if (d == -1 && *infer >= 0)
      return loom_fail(LOOM_ERR_INVALID, "reshape: shape has more than one -1 "
                       "(entries %d and %d)", *infer, i);
    if (d == -1) *infer = i;
    else if (!dim_ok(c->g, d))
      return loom_fail(LOOM_ERR_INVALID, "reshape: shape entry %d (%lld) is "
                       "neither a size, a symbol of the graph nor -1",
                       i, (long long)d);
  }
  return LOOM_OK;
}

/* In a trace (ir_pin_dim), the symbolic factors that did not cancel, by
 * their sizes now: a reshape to sizes the program computed from a
 * symbolic dim specializes it rather than failing. */
static void pin_factors(ir_infer_t *c, factors_t *in, factors_t *want) {
  factors_t *sides[2] = {in, want};
  int64_t k[2];
  for (int s = 0; s < 2; s++) {
    k[s] = sides[s]->k;
    for (int i = 0; i < sides[s]->n; i++) {
      ir_dim_t d = sides[s]->f[i];
      if (!ir_pin_dim(c->g, &d) || __builtin_mul_overflow(k[s], d, &k[s])) return;
    }
  }
  for (int s = 0; s < 2; s++) {
    sides[s]->k = k[s];
    sides[s]->n = 0;
  }
}

/* "6*n" into buf. */
static const char *factors_str(const loom_graph_t *g, const factors_t *p,
                               char *buf, size_t size) {
  bool shown = p->k != 1 || p->n == 0;
  size_t used = 0;
  buf[0] = '\0';
  if (shown) used = (size_t)snprintf(buf, size, "%lld", (long long)p->k);
  for (int i = 0; i < p->n && used < size; i++, shown = true) {
    char d[64];
    used += (size_t)snprintf(buf + used, size - used, "%s%s", shown ? "*" : "",
                             ir_dim_str(g, p->f[i], d, sizeof d));
  }
  return buf;
}

/* in and want after cancelling; in0 and want0 before, for the message. */
static loom_status_t check_same_count(ir_infer_t *c, const factors_t *in,
                                      const factors_t *want, const factors_t *in0,
                                      const factors_t *want0, const char *shape) {
  if ((in->k == 0 && want->k == 0) ||
      (in->n == 0 && want->n == 0 && in->k == want->k))
    return LOOM_OK;
  char a[128], b[128];
  factors_str(c->g, in0, a, sizeof a);
  factors_str(c->g, want0, b, sizeof b);
  if (in->n == 0 && want->n == 0)
    return ir_shape_fail(c, "the input has %s elements but shape %s has %s", a,
                         shape, b);
  return ir_shape_fail(c, "cannot prove that the input's %s elements equal "
                       "shape %s's %s", a, shape, b);
}

static loom_status_t infer_dim(ir_infer_t *c, factors_t *in,
                               const factors_t *want, const char *shape,
                               ir_dim_t *out) {
  if (want->n > 0)
    return ir_shape_fail(c, "cannot infer -1 in shape %s: the other dims are "
                         "not a known factor of the element count", shape);
  if (want->k == 0)
    return ir_shape_fail(c, "cannot infer -1 in shape %s: the other dims "
                         "multiply to 0", shape);
  if (in->k % want->k != 0)
    return ir_shape_fail(c, "cannot infer -1 in shape %s: the element count "
                         "is not divisible by %lld", shape, (long long)want->k);
  in->k /= want->k;
  return factors_product(c->g, in, out);
}

loom_status_t ir_shape_reshape(ir_infer_t *c) {
  const ir_type_t *x = c->in[0];
  const int64_t *shape;
  int n, infer;
  LOOM_TRY(reshape_target(c, &shape, &n, &infer));
  char text[256];
  dims_str(c->g, n, shape, text, sizeof text);
  factors_t in, want;
  if (!factor_dims(c->g, x->rank, x->dims, -1, &in) ||
      !factor_dims(c->g, n, shape, infer, &want))
    return ir_shape_fail(c, "element counts of the input and shape %s are too "
                         "large or too complex to compare", text);
  factors_t in0 = in, want0 = want;
  cancel_common(&in, &want);
  /* A -1 takes the input's symbolic factors that the other dims leave
   * (reshape(-1, C) of (B, T, C) is (B*T, C) for every B): sizes are
   * needed only where a factor stays on the shape's side or the
   * constants do not divide. */
  bool general = infer < 0 ? in.n + want.n == 0
                           : want.n == 0 && (want.k == 0 || in.k % want.k == 0);
  if (!general) pin_factors(c, &in, &want);
  c->out[0].dtype = x->dtype;
  c->out[0].rank = n;
  memcpy(c->out[0].dims, shape, sizeof(ir_dim_t) * (size_t)n);
  if (infer < 0) return check_same_count(c, &in, &want, &in0, &want0, text);
  return infer_dim(c, &in, &want, text, &c->out[0].dims[infer]);
}

/* ---- transpose, expand, squeeze, unsqueeze, flip, tile ------------------- */

/* The permutation: the perm attribute, or reversed dims without one. */
static loom_status_t transpose_perm(ir_infer_t *c, int rank, int *perm) {
  const int64_t *p;
  int n = ir_attr_ints(c->attrs, "perm", &p);
  if (n < 0) {
    for (int i = 0; i < rank; i++) perm[i] = rank - 1 - i;
    return LOOM_OK;
  }
  if (n != rank)
    return loom_fail(LOOM_ERR_INVALID, "transpose: perm has %d entries for an "
                     "input of rank %d", n, rank);
  bool seen[LOOM_MAX_RANK] = {0};
  for (int i = 0; i < n; i++) {
    LOOM_TRY(tensor_axis(c, p[i], rank, &perm[i]));
    if (seen[perm[i]])
      return loom_fail(LOOM_ERR_INVALID, "transpose: perm is not a "
                       "permutation: axis %d appears twice", perm[i]);
    seen[perm[i]] = true;
  }
  return LOOM_OK;
}

loom_status_t ir_shape_transpose(ir_infer_t *c) {
  const ir_type_t *x = c->in[0];
  int perm[LOOM_MAX_RANK];
  LOOM_TRY(transpose_perm(c, x->rank, perm));
  c->out[0] = *x;
  for (int i = 0; i < x->rank; i++) c->out[0].dims[i] = x->dims[perm[i]];
  return LOOM_OK;
}

/* NumPy broadcast_to: dims align from the right; an input dim is kept or
 * is 1. */
loom_status_t ir_shape_expand(ir_infer_t *c) {
  const ir_type_t *x = c->in[0];
  const int64_t *shape;
  int n = ir_attr_ints(c->attrs, "shape", &shape);
  LOOM_TRY(check_rank(c, n));
  char text[256], dim[64];
  for (int i = 0; i < n; i++)
    if (!dim_ok(c->g, shape[i]))
      return loom_fail(LOOM_ERR_INVALID, "expand: shape entry %d (%lld) is "
                       "neither a size nor a symbol of the graph",
                       i, (long long)shape[i]);
  dims_str(c->g, n, shape, text, sizeof text);
  if (n < x->rank)
    return ir_shape_fail(c, "cannot broadcast to shape %s of lower rank", text);
  for (int i = 0; i < n; i++) {
    int j = i - (n - x->rank);
    ir_dim_t from = j >= 0 ? x->dims[j] : 1, to = shape[i];
    if (from != to && from != 1) ir_specialize(c->g, &from, &to);
    if (from != to && from != 1)
      return ir_shape_fail(c, "cannot broadcast dim %d (%s) to shape %s", j,
                           ir_dim_str(c->g, x->dims[j], dim, sizeof dim), text);
  }
  c->out[0].dtype = x->dtype;
  c->out[0].rank = n;
  memcpy(c->out[0].dims, shape, sizeof(ir_dim_t) * (size_t)n);
  return LOOM_OK;
}

/* Which dims squeeze drops: the listed ones, or every constant 1. */
static loom_status_t squeezed(ir_infer_t *c, bool *drop) {
  const ir_type_t *x = c->in[0];
  const int64_t *axes;
  int n = ir_attr_ints(c->attrs, "axes", &axes);
  if (n <= 0) {
    for (int i = 0; i < x->rank; i++) drop[i] = x->dims[i] == 1;
    return LOOM_OK;
  }
  int ax[IR_MAX_ATTR_INTS];
  LOOM_TRY(unique_axes(c, n, axes, x->rank, ax));
  for (int i = 0; i < n; i++) {
    char dim[64];
    if (x->dims[ax[i]] != 1)
      return ir_shape_fail(c, "axis %d has size %s, not 1", ax[i],
                           ir_dim_str(c->g, x->dims[ax[i]], dim, sizeof dim));
    drop[ax[i]] = true;
  }
  return LOOM_OK;
}

loom_status_t ir_shape_squeeze(ir_infer_t *c) {
  const ir_type_t *x = c->in[0];
  bool drop[LOOM_MAX_RANK] = {0};
  LOOM_TRY(squeezed(c, drop));
  c->out[0].dtype = x->dtype;
  c->out[0].rank = 0;
  for (int i = 0; i < x->rank; i++)
    if (!drop[i]) c->out[0].dims[c->out[0].rank++] = x->dims[i];
  return LOOM_OK;
}

loom_status_t ir_shape_unsqueeze(ir_infer_t *c) {
  const ir_type_t *x = c->in[0];
  const int64_t *axes;
  int n = ir_attr_ints(c->attrs, "axes", &axes);
  int rank = x->rank + n;
  LOOM_TRY(check_rank(c, rank));
  int ax[IR_MAX_ATTR_INTS];
  LOOM_TRY(unique_axes(c, n, axes, rank, ax));
  bool inserted[LOOM_MAX_RANK] = {0};
  for (int i = 0; i < n; i++) inserted[ax[i]] = true;
  c->out[0].dtype = x->dtype;
  c->out[0].rank = rank;
  for (int i = 0, j = 0; i < rank; i++)
    c->out[0].dims[i] = inserted[i] ? 1 : x->dims[j++];
  return LOOM_OK;
}

loom_status_t ir_shape_flip(ir_infer_t *c) {
  const int64_t *axes;
  int n = ir_attr_ints(c->attrs, "axes", &axes);
  int ax[IR_MAX_ATTR_INTS];
  LOOM_TRY(unique_axes(c, n, axes, c->in[0]->rank, ax));
  c->out[0] = *c->in[0];
  return LOOM_OK;
}

loom_status_t ir_shape_tile(ir_infer_t *c) {
  const ir_type_t *x = c->in[0];
  const int64_t *reps;
  int n = ir_attr_ints(c->attrs, "repeats", &reps);
  if (n != x->rank)
    return loom_fail(LOOM_ERR_INVALID, "tile: repeats has %d entries for an "
                     "input of rank %d", n, x->rank);
  c->out[0] = *x;
  for (int i = 0; i < n; i++) {
    if (reps[i] < 0)
      return loom_fail(LOOM_ERR_INVALID, "tile: repeat %d is %lld; repeats "
                       "must be non-negative", i, (long long)reps[i]);
    LOOM_TRY(ir_dim_mul(c->g, x->dims[i], reps[i], &c->out[0].dims[i]));
  }
  return LOOM_OK;
}

/* ---- slice ------------------------------------------------------------- */

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* Python slicing with clamping (as ONNX Slice computes it) on one axis
 * of size dim: the first index taken and the count. The reference kernel
 * uses it too, so that shapes and data agree by construction. */
void ir_slice_range(int64_t dim, int64_t start, int64_t end, int64_t step,
                    int64_t *first, int64_t *count) {
  *first = 0;
  *count = 0;
  if (dim <= 0) return;
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = clamp(start, 0, dim);
    end = clamp(end, 0, dim);
  } else {
    /* -1: before the front, so that nothing is taken from there. */
    start = clamp(start, -1, dim - 1);
    end = clamp(end, -1, dim - 1);
  }
  int64_t span = step > 0 ? end - start : start - end;
  uint64_t magnitude = step > 0 ? (uint64_t)step : 0 - (uint64_t)step;
  *first = start;
  *count = span <= 0 ? 0 : (int64_t)(((uint64_t)span - 1) / magnitude + 1);
}

int ir_slice_bounds(const ir_attrs_t *a, int rank, ir_slice_bound_t *out) {
  const int64_t *starts, *ends, *axes, *steps;
  int n = ir_attr_ints(a, "starts", &starts);
  bool has_ends = ir_attr_ints(a, "ends", &ends) == n;
  bool has_axes = ir_attr_ints(a, "axes", &axes) == n;
  bool has_steps = ir_attr_ints(a, "steps", &steps) == n;
  if (n < 0 || !has_ends) return 0;
  for (int i = 0; i < n && i < IR_MAX_ATTR_INTS; i++) {
    int64_t axis = has_axes ? axes[i] : i;
    out[i] = (ir_slice_bound_t){.axis = (int)(axis < 0 ? axis + rank : axis), .start = starts[i],
                                .end = ends[i], .step = has_steps ? steps[i] : 1};
  }
  return n < IR_MAX_ATTR_INTS ? n : IR_MAX_ATTR_INTS;
}

/* A bound this far out stands for the axis's end (or for before its
 * front) on any axis memory can hold: exporters write INT64_MAX,
 * -INT64_MAX or INT64_MIN. */
#define FAR_BOUND ((int64_t)1 << 62)

static int64_t far_bound(int64_t v) {
  return v >= FAR_BOUND ? INT64_MAX : v <= -FAR_BOUND ? INT64_MIN : v;
}

/* Whether a slice takes a whole axis whatever its size. */
static bool whole_axis(int64_t start, int64_t end, int64_t step) {
  if (step == 1) return (start == 0 || start == INT64_MIN) && end == INT64_MAX;
  return step == -1 && (start == -1 || start == INT64_MAX) && end == INT64_MIN;
}

/* A bound of a forward slice as a position on an axis of any size: c
 * from the front, or c (<= 0) from the end. */
static void position(int64_t v, bool *from_end, int64_t *c) {
  *from_end = v == INT64_MAX || (v < 0 && v != INT64_MIN);
  *c = v == INT64_MAX || v == INT64_MIN ? 0 : v;
}

/* The count of a forward slice of an axis of symbolic size n: a constant
 * when both bounds count from one side, n + c (over step) when the start
 * counts from the front and the end from the end. Exact on axes long
 * enough to hold the bounds; a run over a shorter one fails when it binds
 * the symbols (runtime/symbols.c checks every slice). */
static bool symbolic_count(ir_infer_t *c, ir_dim_t n, int64_t start, int64_t end,
                           int64_t step, ir_dim_t *out, loom_status_t *s) {
  bool from_end[2];
  int64_t at[2];
  position(start, &from_end[0], &at[0]);
  position(end, &from_end[1], &at[1]);
  *s = LOOM_OK;
  if (step <= 0 || (from_end[0] && !from_end[1])) return false;
  if (step > FAR_BOUND) step = FAR_BOUND; /* one element on any axis, as larger ones */
  int64_t span = at[1] - at[0];
  if (from_end[0] == from_end[1]) {
    *out = span <= 0 ? 0 : (span - 1) / step + 1;
    return true;
  }
  ir_dim_t x = n;
  *s = ir_dim_add(c->g, n, span + step - 1, &x);
  if (*s == LOOM_OK && step > 1) *s = ir_dim_floordiv(c->g, x, step, &x);
  *out = x;
  return true;
}

static loom_status_t slice_dim(ir_infer_t *c, int axis, int64_t start,
                               int64_t end, int64_t step, ir_dim_t *dim) {
  if (step == 0)
    return loom_fail(LOOM_ERR_INVALID, "slice: step on axis %d is 0", axis);
  start = far_bound(start), end = far_bound(end);
  if (ir_dim_is_sym(*dim) && whole_axis(start, end, step)) return LOOM_OK;
  ir_dim_t one = 1;
  if (ir_dim_is_sym(*dim)) ir_specialize(c->g, dim, &one);
  loom_status_t s;
  if (ir_dim_is_sym(*dim) && symbolic_count(c, *dim, start, end, step, dim, &s)) return s;
  if (ir_dim_is_sym(*dim)) {
    char d[64];
    return ir_shape_fail(c, "axis %d has symbolic size %s; a slice of it keeps it "
                         "only with a positive step and bounds from the front, from "
                         "the end, or the start from the front and the end from the "
                         "end, or as the whole axis reversed", axis,
                         ir_dim_str(c->g, *dim, d, sizeof d));
  }
  int64_t first;
  ir_slice_range(*dim, start, end, step, &first, dim);
  return LOOM_OK;
}

loom_status_t ir_shape_slice(ir_infer_t *c) {
  const ir_type_t *x = c->in[0];
  const int64_t *starts, *ends, *axes, *steps;
  int n = ir_attr_ints(c->attrs, "starts", &starts);
  int n_ends = ir_attr_ints(c->attrs, "ends", &ends);
  int n_axes = ir_attr_ints(c->attrs, "axes", &axes);
  int n_steps = ir_attr_ints(c->attrs, "steps", &steps);
  if (n_ends != n || (n_axes >= 0 && n_axes != n) || (n_steps >= 0 && n_steps != n))
    return loom_fail(LOOM_ERR_INVALID, "slice: starts, ends, axes and steps "
                     "differ in length (%d, %d, %d, %d)", n, n_ends, n_axes, n_steps);
  int64_t all[IR_MAX_ATTR_INTS];
  for (int i = 0; i < n; i++) all[i] = i;
  int ax[IR_MAX_ATTR_INTS];
  LOOM_TRY(unique_axes(c, n, n_axes >= 0 ? axes : all, x->rank, ax));
  c->out[0] = *x;
  for (int i = 0; i < n; i++)
    LOOM_TRY(slice_dim(c, ax[i], starts[i], ends[i], n_steps >= 0 ? steps[i] : 1,
                       &c->out[0].dims[ax[i]]));
  return LOOM_OK;
}

/* ---- concat, split, pad -------------------------------------------------- */

static loom_status_t concat_operand(ir_infer_t *c, int i, int axis) {
  const ir_type_t *x = c->in[0], *y = c->in[i];
  if (y->dtype != x->dtype)
    return loom_fail(LOOM_ERR_DTYPE, "concat: input %d is %s and input 0 is "
                     "%s; cast one of them", i, loom_dtype_name(y->dtype),
                     loom_dtype_name(x->dtype));
  if (y->rank != x->rank)
    return ir_shape_fail(c, "input %d has rank %d and input 0 rank %d", i,
                         y->rank, x->rank);
  for (int d = 0; d < x->rank; d++) {
    ir_dim_t a = c->out[0].dims[d], b = y->dims[d];
    if (d == axis || a == b) continue;
    if (!ir_specialize(c->g, &a, &b) || a != b)
      return ir_shape_fail(c, "input %d differs from input 0 in dim %d, which "
                           "is not the concat axis %d", i, d, axis);
    c->out[0].dims[d] = a;
  }
  return LOOM_OK;
}

loom_status_t ir_shape_concat(ir_infer_t *c) {
  const ir_type_t *x = c->in[0];
  int axis;
  LOOM_TRY(tensor_axis(c, ir_attr_int(c->attrs, "axis", 0), x->rank, &axis));
  c->out[0] = *x;
  for (int i = 1; i < c->n_in; i++) {
    LOOM_TRY(concat_operand(c, i, axis));
    ir_dim_t *d = &c->out[0].dims[axis];
    LOOM_TRY(ir_dim_add(c->g, *d, c->in[i]->dims[axis], d));
  }
  return LOOM_OK;
}

loom_status_t ir_shape_split(ir_infer_t *c) {
  const ir_type_t *x = c->in[0];
  int axis;
  LOOM_TRY(tensor_axis(c, ir_attr_int(c->attrs, "axis", 0), x->rank, &axis));
  const int64_t *sizes;
  int n = ir_attr_ints(c->attrs, "sizes", &sizes);
  if (n < 1)
    return loom_fail(LOOM_ERR_INVALID, "split: needs at least one size");
  int64_t total = 0;
  for (int i = 0; i < n; i++)
    if (sizes[i] < 0 || __builtin_add_overflow(total, sizes[i], &total))
      return loom_fail(LOOM_ERR_INVALID, "split: size %d (%lld) is negative "
                       "or too large", i, (long long)sizes[i]);
  char dim[64];
  ir_dim_t size = x->dims[axis];
  if (size != total) ir_specialize(c->g, &size, &total);
  if (size != total)
    return ir_shape_fail(c, "sizes sum to %lld but axis %d has size %s",
                         (long long)total, axis,
                         ir_dim_str(c->g, x->dims[axis], dim, sizeof dim));
  for (int k = 0; k < n; k++) {
    c->out[k] = *x;
    c->out[k].dims[axis] = sizes[k];
  }
  return LOOM_OK;
}

/* Reflect needs pads below the size (NumPy 'reflect' does not repeat the
 * edge); edge needs an element to repeat; crops (negative pads) may take
 * the whole dim, no more. The kernel checks symbolic sizes when it knows
 * them. */
static loom_status_t check_pad_fits(ir_infer_t *c, int64_t mode, int d,
                                    int64_t begin, int64_t end) {
  ir_dim_t dim = c->in[0]->dims[d];
  int64_t most = begin > end ? begin : end;
  if (ir_dim_is_sym(dim)) return LOOM_OK;
  int64_t size;
  if (__builtin_add_overflow(dim, begin, &size) || __builtin_add_overflow(size, end, &size))
    return ir_shape_fail(c, "pads (%lld, %lld) on dim %d overflow its size", (long long)begin,
                         (long long)end, d);
  if (size < 0)
    return ir_shape_fail(c, "pads (%lld, %lld) crop more than the %lld elements "
                         "of dim %d", (long long)begin, (long long)end, (long long)dim, d);
  if (most <= 0 || mode == LOOM_PAD_CONSTANT) return LOOM_OK;
  if (mode == LOOM_PAD_REFLECT && most >= dim)
    return ir_shape_fail(c, "reflect pad %lld on dim %d is too large: it must "
                         "be smaller than the size %lld", (long long)most, d,
                         (long long)dim);
  if (mode == LOOM_PAD_EDGE && dim == 0)
    return ir_shape_fail(c, "edge pad on dim %d of size 0: no edge to repeat", d);
  return LOOM_OK;
}

loom_status_t ir_shape_pad(ir_infer_t *c) {
  const ir_type_t *x = c->in[0];
  const int64_t *pads;
  int n = ir_attr_ints(c->attrs, "pads", &pads);
  int64_t mode = ir_op_int(c->op, c->attrs, "mode");
  if (n != 2 * x->rank)
    return loom_fail(LOOM_ERR_INVALID, "pad: pads has %d entries; rank %d "
                     "needs %d (begins, then ends)", n, x->rank, 2 * x->rank);
  if (mode < LOOM_PAD_CONSTANT || mode > LOOM_PAD_EDGE)
    return loom_fail(LOOM_ERR_INVALID, "pad: mode %lld is not 0 (constant), "
                     "1 (reflect) or 2 (edge)", (long long)mode);
  c->out[0] = *x;
  for (int d = 0; d < x->rank; d++) {
    int64_t begin = pads[d], end = pads[d + x->rank];
    LOOM_TRY(check_pad_fits(c, mode, d, begin, end));
    ir_dim_t *o = &c->out[0].dims[d];
    LOOM_TRY(ir_dim_add(c->g, *o, begin, o));
    LOOM_TRY(ir_dim_add(c->g, *o, end, o));
  }
  return LOOM_OK;
}

/* ---- Builders ------------------------------------------------------------ */

/* A list argument of n entries: n >= 0, and the pointer set when n > 0. */
static loom_status_t check_list(const char *fn, const char *what, int n,
                                const void *p) {
  if (n < 0)
    return loom_fail(LOOM_ERR_INVALID, "%s: %s count %d is negative", fn, what, n);
  if (n > 0 && !p)
    return loom_fail(LOOM_ERR_INVALID, "%s: argument '%s' is null", fn, what);
  return LOOM_OK;
}

/* The rank of x, for builders whose attribute lengths follow it. */
static loom_status_t value_rank(const char *fn, loom_graph_t *g,
                                loom_value_t x, int *rank) {
  if (!g) return loom_fail(LOOM_ERR_INVALID, "%s: argument 'g' is null", fn);
  if (!ir_value_valid(g, x.id))
    return loom_fail(LOOM_ERR_INVALID, "%s: %%%d is not a value of the graph",
                     fn, x.id);
  *rank = g->values[x.id].type.rank;
  return LOOM_OK;
}

/* A unary layout op whose one attribute is an ints list. */
static loom_status_t build_list(loom_graph_t *g, ir_op_t op, loom_value_t x,
                                const char *attr, int n, const int64_t *v,
                                loom_value_t *out) {
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, attr, n, v);
  return ir_build1(g, op, 1, &x, &a, out);
}

loom_status_t loom_reshape(loom_graph_t *g, loom_value_t x, int rank,
                           const loom_dim_t *shape, loom_value_t *out) {
  LOOM_TRY(check_list(__func__, "shape", rank, shape));
  return build_list(g, IR_OP_RESHAPE, x, "shape", rank, shape, out);
}

loom_status_t loom_transpose(loom_graph_t *g, loom_value_t x,
                             const int64_t *perm, loom_value_t *out) {
  if (!perm) return ir_build1(g, IR_OP_TRANSPOSE, 1, &x, NULL, out);
  int rank = 0;
  LOOM_TRY(value_rank(__func__, g, x, &rank));
  return build_list(g, IR_OP_TRANSPOSE, x, "perm", rank, perm, out);
}

loom_status_t loom_expand(loom_graph_t *g, loom_value_t x, int rank,
                          const loom_dim_t *shape, loom_value_t *out) {
  LOOM_TRY(check_list(__func__, "shape", rank, shape));
  return build_list(g, IR_OP_EXPAND, x, "shape", rank, shape, out);
}

loom_status_t loom_squeeze(loom_graph_t *g, loom_value_t x, int n_axes,
                           const int64_t *axes, loom_value_t *out) {
  LOOM_TRY(check_list(__func__, "axes", n_axes, axes));
  if (n_axes == 0) return ir_build1(g, IR_OP_SQUEEZE, 1, &x, NULL, out);
  return build_list(g, IR_OP_SQUEEZE, x, "axes", n_axes, axes, out);
}

loom_status_t loom_unsqueeze(loom_graph_t *g, loom_value_t x, int n_axes,
                             const int64_t *axes, loom_value_t *out) {
  LOOM_TRY(check_list(__func__, "axes", n_axes, axes));
  return build_list(g, IR_OP_UNSQUEEZE, x, "axes", n_axes, axes, out);
}

loom_status_t loom_slice(loom_graph_t *g, loom_value_t x, int n,
                         const int64_t *starts, const int64_t *ends,
                         const int64_t *axes, const int64_t *steps,
                         loom_value_t *out) {
  LOOM_TRY(check_list(__func__, "starts", n, starts));
  LOOM_TRY(check_list(__func__, "ends", n, ends));
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "starts", n, starts);
  ir_attrs_ints(&a, "ends", n, ends);
  if (axes) ir_attrs_ints(&a, "axes", n, axes);
  if (steps) ir_attrs_ints(&a, "steps", n, steps);
  return ir_build1(g, IR_OP_SLICE, 1, &x, &a, out);
}

loom_status_t loom_concat(loom_graph_t *g, int n, const loom_value_t *xs,
                          int64_t axis, loom_value_t *out) {
  LOOM_TRY(check_list(__func__, "xs", n, xs));
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "axis", axis);
  return ir_build1(g, IR_OP_CONCAT, n, xs, &a, out);
}

loom_status_t loom_split(loom_graph_t *g, loom_value_t x, int64_t axis, int n,
                         const int64_t *sizes, loom_value_t *outs) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(outs);
  LOOM_TRY(check_list(__func__, "sizes", n, sizes));
  if (n > IR_MAX_ATTR_INTS)
    return loom_fail(LOOM_ERR_INVALID, "%s: %d pieces; at most %d", __func__,
                     n, IR_MAX_ATTR_INTS);
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "axis", axis);
  ir_attrs_ints(&a, "sizes", n, sizes);
  int32_t ids[IR_MAX_ATTR_INTS];
  LOOM_TRY(ir_add_node(g, IR_OP_SPLIT, 1, &x.id, &a, ids, n));
  for (int i = 0; i < n; i++) outs[i].id = ids[i];
  return LOOM_OK;
}

loom_status_t loom_pad(loom_graph_t *g, loom_value_t x, const int64_t *pads,
                       loom_pad_mode_t mode, double value, loom_value_t *out) {
  int rank = 0;
  LOOM_TRY(value_rank(__func__, g, x, &rank));
  LOOM_TRY(check_list(__func__, "pads", 2 * rank, pads));
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "pads", 2 * rank, pads);
  ir_attrs_int(&a, "mode", mode);
  ir_attrs_float(&a, "value", value);
  return ir_build1(g, IR_OP_PAD, 1, &x, &a, out);
}

loom_status_t loom_flip(loom_graph_t *g, loom_value_t x, int n_axes,
                        const int64_t *axes, loom_value_t *out) {
  LOOM_TRY(check_list(__func__, "axes", n_axes, axes));
  return build_list(g, IR_OP_FLIP, x, "axes", n_axes, axes, out);
}

loom_status_t loom_tile(loom_graph_t *g, loom_value_t x,
                        const int64_t *repeats, loom_value_t *out) {
  int rank = 0;
  LOOM_TRY(value_rank(__func__, g, x, &rank));
  LOOM_TRY(check_list(__func__, "repeats", rank, repeats));
  return build_list(g, IR_OP_TILE, x, "repeats", rank, repeats, out);
}
