/* Shape values: the integer tensors of dims that exported models compute
 * when they run (Shape, then Gather, Unsqueeze, Concat, arithmetic, on
 * to Reshape, Expand or ConstantOfShape). While the model loads each is
 * a short list of Loom dims, so that a dim the model's inputs leave
 * symbolic becomes a symbolic expression of the graph rather than a
 * tensor, and the model compiles once for all sizes. A list whose
 * entries are all constants is an ordinary constant (folded as any
 * other); one with a symbolic entry is numbered from OX_SHAPE_BASE, an
 * id no Loom graph has, and only the ops here and the rules of its
 * consumers (ox_shape_dims) take it. */
#include <string.h>

#include "core/alloc.h"
#include "frontend/onnx/onnx_import.h"
#include "ir/ir.h"

typedef struct ox_shape_val {
  int n, rank;        /* rank 0 (one entry, a scalar) or 1 */
  /* LOOM_I64 or LOOM_I32; LOOM_F32 or LOOM_F64 after a Cast (integers
   * still, as a float tensor holds them: PyTorch's arange(x.size(0)).float()) */
  loom_dtype_t dtype;
  const loom_graph_t *g; /* the graph whose dims they are */
  loom_dim_t dims[OX_SHAPE_MAX];
} ox_shape_val_t;

struct ox_shapes {
  int n, cap;
  ox_shape_val_t *list;
};

void ox_shapes_free(struct ox_shapes *s) {
  if (!s) return;
  core_free(s->list);
  core_free(s);
}

int ox_is_dim_sym(loom_dim_t d) { return ir_dim_is_sym(d); }

static int all_const(const ox_shape_val_t *v) {
  for (int k = 0; k < v->n; k++)
    if (!ir_dim_is_const(v->dims[k])) return 0;
  return 1;
}

static loom_status_t store(ox_node_t *n, const ox_shape_val_t *v, loom_value_t *out) {
  struct ox_shapes **sp = ox_shape_store(n);
  if (!*sp && !(*sp = core_calloc(1, sizeof **sp)))
    return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  struct ox_shapes *s = *sp;
  if (s->n == OX_SEQ_BASE - OX_SHAPE_BASE)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "too many shape values");
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 64;
    ox_shape_val_t *list = core_realloc(s->list, sizeof *list * (size_t)cap);
    if (!list) return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
    s->list = list;
    s->cap = cap;
  }
  s->list[s->n] = *v;
  s->list[s->n].g = n->g;
  out->id = OX_SHAPE_BASE + s->n++;
  return LOOM_OK;
}

/* v as an ordinary constant when its entries all are, else stored. */
static loom_status_t emit(ox_node_t *n, const ox_shape_val_t *v, loom_value_t *out) {
  if (!all_const(v)) return store(n, v, out);
  loom_tensor_t *t = NULL;
  int64_t shape[1] = {v->n};
  union {
    int32_t i32[OX_SHAPE_MAX];
    float f32[OX_SHAPE_MAX];
    double f64[OX_SHAPE_MAX];
  } narrow;
  for (int k = 0; k < v->n; k++) {
    narrow.i32[k] = (int32_t)v->dims[k];
    if (v->dtype == LOOM_F32) narrow.f32[k] = (float)v->dims[k];
    if (v->dtype == LOOM_F64) narrow.f64[k] = (double)v->dims[k];
  }
  int wide = v->dtype == LOOM_I64;
  size_t bytes = (size_t)loom_dtype_size(v->dtype) * (size_t)v->n;
  LOOM_TRY(loom_tensor_from_data(v->dtype, v->rank, shape, wide ? (void *)v->dims : &narrow,
                                 bytes, &t));
  loom_status_t st = loom_graph_constant(n->g, t, out);
  loom_tensor_destroy(t);
  return st;
}

loom_status_t ox_shape_make(ox_node_t *n, int count, const loom_dim_t *dims, int rank,
                            loom_value_t *out) {
  if (count > OX_SHAPE_MAX)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "a shape of %d dims computed from symbolic dims "
                   "(at most %d)", count, OX_SHAPE_MAX);
  ox_shape_val_t v = {.n = count, .rank = rank, .dtype = LOOM_I64};
  ox_copy(v.dims, dims, sizeof *dims * (size_t)count);
  return emit(n, &v, out);
}

/* Shape value v, when it is one of n's graph (a body imported into a
 * graph of its own does not share the enclosing graph's dims). */
static const ox_shape_val_t *stored(const ox_node_t *n, loom_value_t v) {
  struct ox_shapes *s = *ox_shape_store((ox_node_t *)n);
  int k = v.id - OX_SHAPE_BASE;
  return ox_is_shape(v) && s && k < s->n && s->list[k].g == n->g ? &s->list[k] : NULL;
}

/* Input i as a shape value: a stored one, or a small integer constant. */
static loom_status_t operand(ox_node_t *n, int i, ox_shape_val_t *out) {
  LOOM_TRY(ox_need(n, i));
  const ox_shape_val_t *s = stored(n, n->in[i]);
  if (s) {
    *out = *s;
    return LOOM_OK;
  }
  const loom_tensor_t *t = ox_const(n, n->in[i]);
  loom_dtype_t dt = t ? loom_tensor_dtype(t) : LOOM_F32;
  if (!t || (dt != LOOM_I64 && dt != LOOM_I32) || loom_tensor_rank(t) > 1)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "input %d is not a constant integer scalar or "
                   "vector, and another input holds dims computed from symbolic dims, which "
                   "Loom has only while the model loads (as sizes, never as a tensor)", i);
  int64_t vals[OX_SHAPE_MAX];
  int count;
  LOOM_TRY(ox_const_ints(n, i, "a shape operand", vals, OX_SHAPE_MAX, &count));
  *out = (ox_shape_val_t){.n = count, .rank = loom_tensor_rank(t), .dtype = dt};
  for (int k = 0; k < count; k++) {
    if (!ir_dim_is_const(vals[k]))
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "input %d entry %d (%lld) is out of the range of "
                     "dims", i, k, (long long)vals[k]);
    out->dims[k] = vals[k];
  }
  return LOOM_OK;
}

loom_status_t ox_shape_dims(const ox_node_t *n, int i, const char *what, loom_dim_t *out, int cap,
                            int *count) {
  const ox_shape_val_t *s = ox_has(n, i) ? stored(n, n->in[i]) : NULL;
  if (!s) return ox_const_ints(n, i, what, out, cap, count);
  if (s->n > cap)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%s has %d entries (at most %d)", what, s->n, cap);
  ox_copy(out, s->dims, sizeof *out * (size_t)s->n);
  *count = s->n;
  return LOOM_OK;
}

/* ---- Ops on shape values -------------------------------------------------------- */

static loom_status_t sv_gather(ox_node_t *n, const ox_shape_val_t *x, ox_shape_val_t *y) {
  int64_t idx[OX_SHAPE_MAX], axis;
  int count;
  LOOM_TRY(ox_axis(n, ox_int(n, "axis", 0), x->rank, "axis", &axis));
  LOOM_TRY(ox_const_ints(n, 1, "indices", idx, OX_SHAPE_MAX, &count));
  int irank = ox_rank(n, n->in[1]);
  if (x->rank != 1) return ox_fail(n, LOOM_ERR_SHAPE, "gathering from a scalar");
  if (irank > 1) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "rank-%d indices into dims", irank);
  *y = (ox_shape_val_t){.n = count, .rank = irank, .dtype = x->dtype};
  for (int k = 0; k < count; k++) {
    if (idx[k] < -x->n || idx[k] >= x->n)
      return ox_fail(n, LOOM_ERR_VALUE, "index %lld is out of range for %d dims",
                     (long long)idx[k], x->n);
    y->dims[k] = x->dims[idx[k] < 0 ? idx[k] + x->n : idx[k]];
  }
  return LOOM_OK;
}

static loom_status_t sv_slice(ox_node_t *n, const ox_shape_val_t *x, ox_shape_val_t *y) {
  int64_t starts[1], ends[1], axes[1] = {0}, steps[1] = {1};
  int ns = 1, ne = 1, c = 1;
  if (n->opset < 10) {
    const int64_t *s = ox_ints(n, "starts", &ns), *e = ox_ints(n, "ends", &ne);
    const int64_t *a = ox_ints(n, "axes", &c);
    if (ns != 1 || ne != 1 || (a && c != 1))
      return ox_fail(n, LOOM_ERR_SHAPE, "slicing a vector of dims takes one axis");
    starts[0] = s[0];
    ends[0] = e[0];
    if (a) axes[0] = a[0];
  } else {
    LOOM_TRY(ox_const_ints(n, 1, "starts", starts, 1, &ns));
    LOOM_TRY(ox_const_ints(n, 2, "ends", ends, 1, &ne));
    if (ox_has(n, 3)) LOOM_TRY(ox_const_ints(n, 3, "axes", axes, 1, &c));
    if (ox_has(n, 4)) LOOM_TRY(ox_const_ints(n, 4, "steps", steps, 1, &c));
  }
  if (x->rank != 1 || (axes[0] != 0 && axes[0] != -1) || ns != 1 || ne != 1)
    return ox_fail(n, LOOM_ERR_SHAPE, "slicing a vector of dims takes one axis, 0");
  if (steps[0] == 0) return ox_fail(n, LOOM_ERR_VALUE, "step is 0");
  int64_t first, count;
  ir_slice_range(x->n, starts[0], ends[0], steps[0], &first, &count);
  *y = (ox_shape_val_t){.n = (int)count, .rank = 1, .dtype = x->dtype};
  for (int64_t k = 0; k < count; k++) y->dims[k] = x->dims[first + k * steps[0]];
  return LOOM_OK;
}

static loom_status_t sv_concat(ox_node_t *n, ox_shape_val_t *y) {
  int64_t axis = ox_int(n, "axis", 0);
  if (axis != 0 && axis != -1)
    return ox_fail(n, LOOM_ERR_AXIS, "axis %lld of a vector of dims", (long long)axis);
  *y = (ox_shape_val_t){.rank = 1, .dtype = LOOM_I64};
  for (int i = 0; i < n->n_in; i++) {
    ox_shape_val_t x;
    LOOM_TRY(operand(n, i, &x));
    if (x.rank != 1) return ox_fail(n, LOOM_ERR_SHAPE, "input %d is a scalar", i);
    if (y->n + x.n > OX_SHAPE_MAX)
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "over %d dims computed from symbolic dims",
                     OX_SHAPE_MAX);
    ox_copy(y->dims + y->n, x.dims, sizeof *x.dims * (size_t)x.n);
    y->n += x.n;
    y->dtype = x.dtype;
  }
  return LOOM_OK;
}

/* Unsqueeze (to 1) or Squeeze (to 0) between a scalar and one entry. */
static loom_status_t sv_rerank(ox_node_t *n, const ox_shape_val_t *x, int to, ox_shape_val_t *y) {
  int64_t axes[2] = {0};
  int count = 0;
  if (n->opset < 13) {
    const int64_t *a = ox_ints(n, "axes", &count);
    if (count == 1) axes[0] = a[0];
  } else if (ox_has(n, 1)) {
    LOOM_TRY(ox_const_ints(n, 1, "axes", axes, 2, &count));
  }
  if (x->rank == to || x->n != 1 || count > 1 || (axes[0] != 0 && axes[0] != -1) ||
      (to == 1 && count != 1))
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "only a scalar of dims and a vector of one dim "
                   "turn into each other (axes [0])");
  *y = *x;
  y->rank = to;
  return LOOM_OK;
}

/* Reshape of a shape value: between a scalar and a vector of its dims. */
static loom_status_t sv_reshape(ox_node_t *n, const ox_shape_val_t *x, ox_shape_val_t *y) {
  int64_t shape[2];
  int count;
  LOOM_TRY(ox_const_ints(n, 1, "shape", shape, 2, &count));
  if (count > 1 || (count == 1 && shape[0] != -1 && shape[0] != x->n) || (!count && x->n != 1))
    return ox_fail(n, LOOM_ERR_SHAPE, "reshaping %d dims to rank %d", x->n, count);
  *y = *x;
  y->rank = count;
  return LOOM_OK;
}

/* The dtype a Cast to ONNX type `to` keeps dims in, or -1: another type
 * makes them a tensor (ox_shape_node). */
static int cast_dtype(int64_t to) {
  switch (to) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: return LOOM_I64;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: return LOOM_I32;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: return LOOM_F32;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: return LOOM_F64;
    default: return -1;
  }
}

static loom_status_t sv_cast(ox_node_t *n, const ox_shape_val_t *x, ox_shape_val_t *y) {
  int dt = cast_dtype(ox_int(n, "to", 0));
  if (dt < 0) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "casting dims to this type");
  *y = *x;
  y->dtype = (loom_dtype_t)dt;
  return LOOM_OK;
}

/* One entry of an arithmetic op; op is the ONNX op's first letter
 * ('A'dd, 'S'ub, 'M'ul, 'D'iv, 'x' Max, 'n' Min). */
static loom_status_t entry_op(ox_node_t *n, char op, loom_dim_t a, loom_dim_t b, loom_dim_t *y) {
  int consts = ir_dim_is_const(a) && ir_dim_is_const(b);
  switch (op) {
    case 'A': return ir_dim_add(n->g, a, b, y); /* b may be a negative constant */
    case 'S': /* a + b * -1: a negative constant is a dim only inside the IR */
      LOOM_TRY(ir_dim_mul(n->g, b, -1, &b));
      return ir_dim_add(n->g, a, b, y);
    case 'M': return ir_dim_mul(n->g, a, b, y);
    case 'D':
      /* ONNX truncates, floor division agrees on dims (never negative). */
      if (ir_dim_is_const(b) && b <= 0 && !consts)
        return ox_fail(n, LOOM_ERR_UNSUPPORTED, "dividing a symbolic dim by %lld", (long long)b);
      if (consts && b == 0) return ox_fail(n, LOOM_ERR_VALUE, "division by zero");
      if (consts) {
        *y = a / b;
        return LOOM_OK;
      }
      return loom_dim_floordiv(n->g, a, b, y);
    default:
      if (a == b || consts) {
        *y = op == 'x' ? (a > b ? a : b) : (a < b ? a : b);
        return LOOM_OK;
      }
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "the %s of dims only a run can compare",
                     op == 'x' ? "maximum" : "minimum");
  }
}

/* Broadcast two shape values: the count of the result, or fails. */
static loom_status_t broadcast2(ox_node_t *n, const ox_shape_val_t *a, const ox_shape_val_t *b,
                                ox_shape_val_t *y) {
  if (a->n != b->n && a->n != 1 && b->n != 1)
    return ox_fail(n, LOOM_ERR_SHAPE, "%d and %d entries do not broadcast", a->n, b->n);
  *y = (ox_shape_val_t){.n = a->n > b->n ? a->n : b->n, .rank = a->rank > b->rank ? a->rank : b->rank,
                        .dtype = a->dtype};
  return LOOM_OK;
}

static loom_status_t sv_arith(ox_node_t *n, char op, ox_shape_val_t *y) {
  ox_shape_val_t a, b;
  LOOM_TRY(operand(n, 0, &a));
  LOOM_TRY(operand(n, 1, &b));
  LOOM_TRY(broadcast2(n, &a, &b, y));
  for (int k = 0; k < y->n; k++)
    LOOM_TRY(entry_op(n, op, a.dims[a.n == 1 ? 0 : k], b.dims[b.n == 1 ? 0 : k], &y->dims[k]));
  return LOOM_OK;
}

/* Equal folds where each pair of entries is provably equal or unequal:
 * one expression, two constants, or a symbolic dim (never negative) and
 * a negative constant (PyTorch's -1 checks). */
static loom_status_t sv_equal(ox_node_t *n) {
  ox_shape_val_t a, b, y = {0};
  LOOM_TRY(operand(n, 0, &a));
  LOOM_TRY(operand(n, 1, &b));
  LOOM_TRY(broadcast2(n, &a, &b, &y));
  uint8_t eq[OX_SHAPE_MAX];
  for (int k = 0; k < y.n; k++) {
    loom_dim_t p = a.dims[a.n == 1 ? 0 : k], q = b.dims[b.n == 1 ? 0 : k];
    int cp = ir_dim_is_const(p), cq = ir_dim_is_const(q);
    if (p != q && !(cp && cq) && !(cp && p < 0) && !(cq && q < 0)) {
      char ps[64], qs[64];
      loom_dim_format(n->g, p, ps, sizeof ps);
      loom_dim_format(n->g, q, qs, sizeof qs);
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "whether %s equals %s is known only when the "
                     "model runs", ps, qs);
    }
    eq[k] = p == q;
  }
  loom_tensor_t *t = NULL;
  int64_t shape[1] = {y.n};
  LOOM_TRY(loom_tensor_from_data(LOOM_BOOL, y.rank, shape, eq, (size_t)y.n, &t));
  loom_status_t st = loom_graph_constant(n->g, t, &n->out[0]);
  loom_tensor_destroy(t);
  return st;
}

/* Where with a condition known when the model loads picks entries. */
static loom_status_t sv_where(ox_node_t *n, ox_shape_val_t *y) {
  LOOM_TRY(ox_need(n, 0));
  const loom_tensor_t *ct = ox_const(n, n->in[0]);
  if (!ct)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "choosing between dims computed from symbolic dims "
                   "needs a condition known when the model loads");
  int nc = (int)loom_tensor_numel(ct);
  if (nc > OX_SHAPE_MAX || loom_tensor_rank(ct) > 1)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "a condition of %d entries over dims", nc);
  double cond[OX_SHAPE_MAX];
  for (int k = 0; k < nc; k++) LOOM_TRY(loom_tensor_get_f64(ct, k, &cond[k]));
  ox_shape_val_t a, b, ab = {0};
  LOOM_TRY(operand(n, 1, &a));
  LOOM_TRY(operand(n, 2, &b));
  LOOM_TRY(broadcast2(n, &a, &b, &ab));
  if (nc != ab.n && nc != 1 && ab.n != 1)
    return ox_fail(n, LOOM_ERR_SHAPE, "%d conditions for %d entries", nc, ab.n);
  *y = ab;
  y->n = nc > ab.n ? nc : ab.n;
  int rc = ox_rank(n, n->in[0]);
  y->rank = rc > y->rank ? rc : y->rank;
  for (int k = 0; k < y->n; k++)
    y->dims[k] = cond[nc == 1 ? 0 : k] ? a.dims[a.n == 1 ? 0 : k] : b.dims[b.n == 1 ? 0 : k];
  return LOOM_OK;
}

/* Shape (as_shape 1) or Size of a shape value: its count of entries. */
static loom_status_t sv_count(ox_node_t *n, const ox_shape_val_t *x, int as_shape) {
  ox_shape_val_t y = {.n = as_shape ? x->rank : 1, .rank = as_shape, .dtype = LOOM_I64};
  y.dims[0] = x->n;
  return emit(n, &y, &n->out[0]);
}

/* Ops whose inputs (those set in mask) may be shape values: their rules
 * read them through ox_shape_dims. */
static int consumer(const ox_node_t *n, int i) {
  static const struct { const char *op; unsigned mask; } list[] = {
      {"Reshape", 2}, {"Expand", 2}, {"ConstantOfShape", 1}, {"Tile", 2}, {"Slice", 30},
      {"Range", 7}, {"Resize", 14}, {"Upsample", 2}};
  for (size_t k = 0; k < sizeof list / sizeof *list; k++)
    if (!strcmp(n->proto->op_type, list[k].op)) return (list[k].mask >> i) & 1;
  return 0;
}

/* The ops that take input 0 as the shape value they work on. */
static int unary_op(const char *op) {
  static const char *const list[] = {"Identity", "Gather",  "Slice", "Unsqueeze", "Squeeze",
                                     "Reshape",  "Cast",    "Shape", "Size"};
  for (size_t k = 0; k < sizeof list / sizeof *list; k++)
    if (!strcmp(op, list[k])) return 1;
  return 0;
}

static loom_status_t unary(ox_node_t *n, const char *op, const ox_shape_val_t *x,
                           ox_shape_val_t *y) {
  *y = *x;
  if (!strcmp(op, "Identity")) return LOOM_OK;
  if (!strcmp(op, "Gather")) return sv_gather(n, x, y);
  if (!strcmp(op, "Slice")) return sv_slice(n, x, y);
  if (!strcmp(op, "Unsqueeze")) return sv_rerank(n, x, 1, y);
  if (!strcmp(op, "Squeeze")) return sv_rerank(n, x, 0, y);
  if (!strcmp(op, "Reshape")) return sv_reshape(n, x, y);
  return sv_cast(n, x, y);
}

/* Runs op on shape values; *done 0 when op is none of the shape ops. */
static loom_status_t shape_op(ox_node_t *n, const char *op, int first, int *done) {
  ox_shape_val_t y = {0};
  loom_status_t st = LOOM_OK;
  *done = 1;
  if (first == 0 && (!strcmp(op, "Shape") || !strcmp(op, "Size")))
    return sv_count(n, stored(n, n->in[0]), op[1] == 'h');
  if (first == 0 && unary_op(op)) st = unary(n, op, stored(n, n->in[0]), &y);
  else if (!strcmp(op, "Concat")) st = sv_concat(n, &y);
  else if (!strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") || !strcmp(op, "Div"))
    st = sv_arith(n, op[0], &y);
  else if ((!strcmp(op, "Max") || !strcmp(op, "Min")) && n->n_in == 2)
    st = sv_arith(n, op[1] == 'a' ? 'x' : 'n', &y);
  else if (!strcmp(op, "Equal")) return sv_equal(n);
  else if (!strcmp(op, "Where")) st = sv_where(n, &y);
  else *done = 0;
  if (st != LOOM_OK || !*done) return st;
  return emit(n, &y, &n->out[0]);
}

/* Whether every shape value among n's inputs goes to its rule. */
static int all_consumed(const ox_node_t *n) {
  for (int i = 0; i < n->n_in; i++)
    if (ox_has(n, i) && ox_is_shape(n->in[i]) && !consumer(n, i)) return 0;
  return 1;
}

/* Whether the shape ops can run n on dims: its other inputs are integer
 * constants of rank <= 1 (Where's condition a bool one), a Cast is to a
 * type dims stay in, a Reshape keeps them a vector, and an op
 * that computes (arithmetic, Equal, Where) has no dims held as floats,
 * whose division is not the dims' floor division. */
static int on_dims(const ox_node_t *n) {
  const char *op = n->proto->op_type;
  if (!strcmp(op, "Cast") && cast_dtype(ox_int(n, "to", 0)) < 0) return 0;
  if (!strcmp(op, "Reshape") && ox_has(n, 1)) { /* dims stay a vector or a scalar */
    const loom_tensor_t *shape = ox_const(n, n->in[1]);
    if (shape && loom_tensor_numel(shape) > 1) return 0;
  }
  int moves = unary_op(op) || !strcmp(op, "Concat");
  for (int i = 0; i < n->n_in; i++) {
    if (!ox_has(n, i)) continue;
    if (ox_is_shape(n->in[i])) {
      loom_dtype_t dt = stored(n, n->in[i])->dtype;
      if (!moves && (dt == LOOM_F32 || dt == LOOM_F64)) return 0;
      continue;
    }
    const loom_tensor_t *t = ox_const(n, n->in[i]);
    loom_dtype_t dt = t ? loom_tensor_dtype(t) : LOOM_F32;
    int where_cond = i == 0 && !strcmp(op, "Where") && dt == LOOM_BOOL;
    if (!t || (dt != LOOM_I64 && dt != LOOM_I32 && !where_cond) || loom_tensor_rank(t) > 1)
      return 0;
  }
  return 1;
}

/* A symbol as an i64 scalar computed when the graph runs: the sum of d
 * ones (a symbol has a value only then; ir_counted_dim reads it back as
 * d). */
static loom_status_t symbol_tensor(ox_node_t *n, loom_dim_t d, loom_value_t *out) {
  loom_value_t ones;
  LOOM_TRY(loom_full(n->g, 1, &d, 1, LOOM_I64, &ones));
  return loom_sum(n->g, ones, 1, (int64_t[]){0}, 0, out);
}

/* Dim d as an i64 scalar, built as its expression is (symbols counted by
 * symbol_tensor, constants, +, *, floor division), so that a dim whose
 * value is negative (5 - T at T = 7) is one: counting it as a whole would
 * ask for a negative number of ones. */
loom_status_t ox_dim_tensor(ox_node_t *n, loom_dim_t d, loom_value_t *out) {
  const ir_expr_t *e = ir_dim_is_sym(d) ? ir_dim_expr(n->g, d) : NULL;
  if (!e) return ox_scalar(n, LOOM_I64, (double)d, out);
  if (e->kind == IR_EXPR_CONST) return ox_scalar(n, LOOM_I64, (double)e->c, out);
  if (e->kind == IR_EXPR_SYM) return symbol_tensor(n, d, out);
  loom_value_t a, b, r;
  LOOM_TRY(ox_dim_tensor(n, e->a, &a));
  LOOM_TRY(ox_dim_tensor(n, e->b, &b));
  if (e->kind == IR_EXPR_ADD) return loom_add(n->g, a, b, out);
  if (e->kind == IR_EXPR_MUL) return loom_mul(n->g, a, b, out);
  /* floor(a / b) = (a - a mod b) / b, the division exact (mod has b's sign) */
  LOOM_TRY(loom_mod(n->g, a, b, &r));
  LOOM_TRY(loom_sub(n->g, a, r, &a));
  return loom_div(n->g, a, b, out);
}

/* Shape value v as a tensor of the graph, of its dtype and rank. */
static loom_status_t materialize(ox_node_t *n, const ox_shape_val_t *v, loom_value_t *out) {
  loom_value_t parts[OX_SHAPE_MAX];
  for (int k = 0; k < v->n; k++) {
    LOOM_TRY(ox_dim_tensor(n, v->dims[k], &parts[k]));
    if (v->dtype != LOOM_I64) LOOM_TRY(loom_cast(n->g, parts[k], v->dtype, &parts[k]));
    if (v->rank == 1) LOOM_TRY(loom_unsqueeze(n->g, parts[k], 1, (int64_t[]){0}, &parts[k]));
  }
  if (v->rank == 0) {
    *out = parts[0];
    return LOOM_OK;
  }
  return loom_concat(n->g, v->n, parts, 0, out);
}

loom_status_t ox_dims_tensor(ox_node_t *n, int count, const loom_dim_t *dims,
                             loom_value_t *out) {
  if (count > OX_SHAPE_MAX)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%d dims as a tensor (at most %d)", count,
                   OX_SHAPE_MAX);
  ox_shape_val_t v = {.n = count, .rank = 1, .dtype = LOOM_I64, .g = n->g};
  ox_copy(v.dims, dims, sizeof *dims * (size_t)count);
  return all_const(&v) ? ox_vector_i64(n, count, dims, out) : materialize(n, &v, out);
}

loom_status_t ox_shape_tensor(ox_node_t *n, loom_value_t v, loom_value_t *out) {
  const ox_shape_val_t *s = stored(n, v);
  if (!s) return loom_fail(LOOM_ERR_INVALID, "loom_onnx_load: not a shape value of this graph");
  return materialize(n, s, out);
}

loom_status_t ox_shape_node(ox_node_t *n, int *done) {
  *done = 0;
  int first = -1;
  for (int i = 0; i < n->n_in && first < 0; i++)
    if (ox_has(n, i) && ox_is_shape(n->in[i])) first = i;
  if (first < 0 || all_consumed(n)) return LOOM_OK; /* the rule reads them (ox_shape_dims) */
  for (int i = first; i < n->n_in; i++)
    if (ox_has(n, i) && ox_is_shape(n->in[i]) && !stored(n, n->in[i]))
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "input %d holds dims computed from symbolic dims "
                     "of an enclosing graph (a Loop or Scan body takes no such value)", i);
  if (on_dims(n)) LOOM_TRY(shape_op(n, n->proto->op_type, first, done));
  if (*done) return LOOM_OK;
  /* Any other op reads them as tensors computed when the graph runs (a
   * sequence length cast to float, an index one before it), and its own
   * rule imports it. */
  for (int i = first; i < n->n_in; i++)
    if (ox_has(n, i) && ox_is_shape(n->in[i]) && !consumer(n, i))
      LOOM_TRY(materialize(n, stored(n, n->in[i]), &n->in[i]));
  return LOOM_OK;
}
