/* Rules for ONNX's layout and indexing ops, with the inputs that moved
 * from attributes to constant inputs between opsets (Squeeze, Unsqueeze,
 * Split, Slice, Pad at 10-13). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx/onnx_import.h"
#include "ir/ir.h"

#define MAXN 64 /* entries of a constant shape, axes or pads input */

/* The ints of attribute `name` (opsets before `since`) or of constant
 * input i (from `since`); *count -1 when neither is given. */
static loom_status_t ints_attr_or_input(const ox_node_t *n, int64_t since, const char *name,
                                        int i, int64_t *out, int *count) {
  *count = -1;
  if (n->opset < since) {
    int c;
    const int64_t *v = ox_ints(n, name, &c);
    if (!ox_attr(n, name)) return LOOM_OK;
    if (c > MAXN) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%s has %d entries", name, c);
    ox_copy(out, v, sizeof *v * (size_t)c);
    *count = c;
    return LOOM_OK;
  }
  if (!ox_has(n, i)) return LOOM_OK;
  return ox_const_ints(n, i, name, out, MAXN, count);
}

static int all_const(const loom_dim_t *dims, int rank) {
  for (int d = 0; d < rank; d++)
    if (dims[d] < 0) return 0;
  return 1;
}

loom_status_t ox_reshape(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  loom_dim_t shape[MAXN]; /* entries may be symbolic (a shape value) */
  int count;
  if (n->opset < 5) {
    const int64_t *v = ox_ints(n, "shape", &count);
    if (count > LOOM_MAX_RANK) return ox_fail(n, LOOM_ERR_SHAPE, "shape has %d entries", count);
    ox_copy(shape, v, sizeof *v * (size_t)count);
  } else {
    LOOM_TRY(ox_shape_dims(n, 1, "shape", shape, LOOM_MAX_RANK, &count));
  }
  loom_dim_t in[LOOM_MAX_RANK], out[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_dims(n, n->in[0], in, &rank));
  int allowzero = (int)ox_int(n, "allowzero", 0);
  for (int d = 0; d < count; d++) {
    if (shape[d] == 0 && !allowzero) {
      if (d >= rank) return ox_fail(n, LOOM_ERR_SHAPE, "shape entry %d is 0 past the input's rank", d);
      out[d] = in[d];
    } else if (shape[d] < -1 && !ox_is_dim_sym(shape[d])) {
      return ox_fail(n, LOOM_ERR_SHAPE, "shape entry %d is %lld", d, (long long)shape[d]);
    } else {
      out[d] = shape[d];
    }
  }
  return loom_reshape(n->g, n->in[0], count, out, &n->out[0]);
}

static loom_status_t dims_product(ox_node_t *n, const loom_dim_t *dims, int from, int to,
                                  loom_dim_t *out) {
  loom_dim_t p = 1;
  for (int d = from; d < to; d++) LOOM_TRY(loom_dim_mul(n->g, p, dims[d], &p));
  *out = p;
  return LOOM_OK;
}

loom_status_t ox_flatten(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  loom_dim_t dims[LOOM_MAX_RANK], out[2];
  int rank;
  LOOM_TRY(ox_dims(n, n->in[0], dims, &rank));
  int64_t axis = ox_int(n, "axis", 1);
  if (axis < -rank || axis > rank)
    return ox_fail(n, LOOM_ERR_AXIS, "axis %lld is out of range for rank %d", (long long)axis, rank);
  if (axis < 0) axis += rank;
  LOOM_TRY(dims_product(n, dims, 0, (int)axis, &out[0]));
  LOOM_TRY(dims_product(n, dims, (int)axis, rank, &out[1]));
  return loom_reshape(n->g, n->in[0], 2, out, &n->out[0]);
}

loom_status_t ox_squeeze(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  int64_t axes[MAXN];
  int count;
  LOOM_TRY(ints_attr_or_input(n, 13, "axes", 1, axes, &count));
  if (count <= 0) { /* every dim of size 1: a symbolic one might be */
    loom_dim_t dims[LOOM_MAX_RANK];
    int rank;
    LOOM_TRY(ox_dims(n, n->in[0], dims, &rank));
    for (int d = 0; d < rank; d++)
      if (ox_is_dim_sym(dims[d])) {
        char name[64];
        loom_dim_format(n->g, dims[d], name, sizeof name);
        return ox_fail(n, LOOM_ERR_UNSUPPORTED, "no axes, and dim %d is symbolic (%s): whether "
                       "it goes is known only when the model runs (give axes, or the dim's "
                       "size)", d, name);
      }
  }
  return loom_squeeze(n->g, n->in[0], count < 0 ? 0 : count, axes, &n->out[0]);
}

loom_status_t ox_unsqueeze(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  int64_t axes[MAXN];
  int count;
  LOOM_TRY(ints_attr_or_input(n, 13, "axes", 1, axes, &count));
  if (count < 0) return ox_fail(n, LOOM_ERR_FORMAT, "axes are missing");
  return loom_unsqueeze(n->g, n->in[0], count, axes, &n->out[0]);
}

loom_status_t ox_transpose(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  int count;
  const int64_t *perm = ox_ints(n, "perm", &count);
  if (perm && count != ox_rank(n, n->in[0]))
    return ox_fail(n, LOOM_ERR_SHAPE, "perm has %d entries for rank %d", count,
                   ox_rank(n, n->in[0]));
  return loom_transpose(n->g, n->in[0], perm, &n->out[0]);
}

loom_status_t ox_concat(ox_node_t *n) {
  for (int i = 0; i < n->n_in; i++) LOOM_TRY(ox_need(n, i));
  if (!ox_attr(n, "axis") && n->opset >= 4)
    return ox_fail(n, LOOM_ERR_FORMAT, "the axis attribute is missing");
  return loom_concat(n->g, n->n_in, n->in, ox_int(n, "axis", 1), &n->out[0]);
}

loom_status_t ox_split(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  loom_dim_t dims[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_dims(n, n->in[0], dims, &rank));
  int64_t axis;
  LOOM_TRY(ox_axis(n, ox_int(n, "axis", 0), rank, "axis", &axis));
  int64_t sizes[MAXN];
  int count;
  LOOM_TRY(ints_attr_or_input(n, 13, "split", 1, sizes, &count));
  if (count < 0) {
    if (dims[axis] < 0)
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "an even split of a symbolic dim");
    bool counted = ox_attr(n, "num_outputs") != NULL;
    int parts = counted ? (int)ox_int(n, "num_outputs", 1) : n->n_out;
    if (parts < 1 || parts > MAXN) return ox_fail(n, LOOM_ERR_FORMAT, "%d outputs", parts);
    /* equal parts before opset 18's num_outputs, whose last may be smaller */
    if (!counted && dims[axis] % parts != 0)
      return ox_fail(n, LOOM_ERR_SHAPE, "%lld elements do not split into %d equal parts "
                     "(give the sizes)", (long long)dims[axis], parts);
    int64_t each = (dims[axis] + parts - 1) / parts, left = dims[axis];
    if (each * (parts - 1) > dims[axis])
      return ox_fail(n, LOOM_ERR_SHAPE, "%lld elements cannot be split into %d parts of %lld "
                     "and a last one smaller", (long long)dims[axis], parts, (long long)each);
    for (int k = 0; k < parts; k++) {
      sizes[k] = left < each ? left : each;
      left -= sizes[k];
    }
    count = parts;
  }
  if (count != n->n_out)
    return ox_fail(n, LOOM_ERR_SHAPE, "%d sizes for %d outputs", count, n->n_out);
  return loom_split(n->g, n->in[0], axis, count, sizes, n->out);
}

/* An axis whose slice starts or ends at a symbolic dim (other than an end
 * at its own size; PyTorch's pe[:x.size(0)], a cache's k[:, past:]):
 * taken by a gather of positions start, start + step, ... below end,
 * after the slice of the other axes. */
typedef struct sym_slice {
  int64_t axis, step;
  loom_dim_t start, end;
} sym_slice_t;

/* Bounds computed from symbolic dims (shape values): an end that is the
 * axis's own size, stepping forward, takes the axis to its end; another
 * symbolic bound moves its axis from the slice's lists (*count shrinks)
 * to sym[] (*n_sym of them). A symbolic start is taken as it is: a
 * position from the axis's start, not from its end. */
static loom_status_t slice_symbolic_bounds(ox_node_t *n, int *count, int64_t *starts,
                                           int64_t *ends, int64_t *axes, int64_t *steps,
                                           sym_slice_t *sym, int *n_sym) {
  int sym_starts = ox_has(n, 1) && ox_is_shape(n->in[1]);
  int sym_ends = ox_has(n, 2) && ox_is_shape(n->in[2]);
  int rank = ox_rank(n, n->in[0]), kept = 0;
  *n_sym = 0;
  for (int k = 0; k < *count; k++) {
    int64_t a, step = steps ? steps[k] : 1;
    LOOM_TRY(ox_axis(n, axes[k], rank, "axis", &a));
    loom_dim_t size = ox_dim(n, n->in[0], (int)a), start = starts[k], end = ends[k];
    int sym_start = sym_starts && ox_is_dim_sym(start), sym_end = sym_ends && ox_is_dim_sym(end);
    if (sym_end && end == size && step > 0 && !sym_start) {
      ends[k] = INT64_MAX;
    } else if (sym_start || sym_end) {
      if (step <= 0)
        return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%s %d is a symbolic dim and step %lld is not "
                       "positive", sym_start ? "start" : "end", k, (long long)step);
      if (!sym_start && start < 0 && ox_is_dim_sym(size))
        return ox_fail(n, LOOM_ERR_UNSUPPORTED, "start %d counts from the end of symbolic "
                       "axis %lld and end %d is a symbolic dim", k, (long long)a, k);
      if (!sym_start && start < 0) start = start + size < 0 ? 0 : start + size;
      if (!sym_start && start > INT32_MAX)
        return ox_fail(n, LOOM_ERR_UNSUPPORTED, "start %d (%lld) before a symbolic end", k,
                       (long long)start);
      if (!sym_end) { /* a constant end: the axis's size, or a position in it */
        if (end < 0 && !ox_is_dim_sym(size)) end = end + size < 0 ? 0 : end + size;
        else if (end < 0) LOOM_TRY(ir_dim_add(n->g, size, end, &end));
        else if (end > INT32_MAX || (!ox_is_dim_sym(size) && end > size)) end = size;
      }
      sym[(*n_sym)++] = (sym_slice_t){a, step, start, end};
      continue;
    }
    starts[kept] = starts[k], ends[kept] = ends[k], axes[kept] = axes[k];
    if (steps) steps[kept] = steps[k];
    kept++;
  }
  *count = kept;
  return LOOM_OK;
}

/* x's positions start, start + step, ... below end along an axis (at most
 * the axis's size when the graph runs: a larger end fails the gather's
 * run). */
static loom_status_t gather_slice(ox_node_t *n, loom_value_t x, const sym_slice_t *e,
                                  loom_value_t *out) {
  loom_dim_t count, minus_start;
  loom_value_t pos, k;
  LOOM_TRY(ir_dim_mul(n->g, e->start, -1, &minus_start));
  LOOM_TRY(ir_dim_add(n->g, e->end, e->step - 1, &count));
  LOOM_TRY(ir_dim_add(n->g, count, minus_start, &count));
  if (e->step > 1) LOOM_TRY(ir_dim_floordiv(n->g, count, e->step, &count));
  LOOM_TRY(ox_iota(n, count, 0, 1, &pos));
  if (e->step > 1) {
    LOOM_TRY(ox_scalar(n, LOOM_I64, (double)e->step, &k));
    LOOM_TRY(loom_mul(n->g, pos, k, &pos));
  }
  if (e->start) {
    LOOM_TRY(ox_dim_tensor(n, e->start, &k));
    LOOM_TRY(loom_add(n->g, pos, k, &pos));
  }
  return loom_gather(n->g, x, pos, e->axis, out);
}

loom_status_t ox_slice(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  int64_t starts[MAXN], ends[MAXN], axes[MAXN], steps[MAXN];
  int ns, ne, na = -1, nt = -1;
  if (n->opset < 10) {
    const int64_t *s = ox_ints(n, "starts", &ns), *e = ox_ints(n, "ends", &ne);
    int c;
    const int64_t *a = ox_ints(n, "axes", &c);
    if (ns > MAXN || ne > MAXN || c > MAXN) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "too many axes");
    if (ns > 0) ox_copy(starts, s, sizeof *s * (size_t)ns);
    if (ne > 0) ox_copy(ends, e, sizeof *e * (size_t)ne);
    if (a && c > 0) ox_copy(axes, a, sizeof *a * (size_t)(na = c));
  } else {
    LOOM_TRY(ox_shape_dims(n, 1, "starts", starts, MAXN, &ns));
    LOOM_TRY(ox_shape_dims(n, 2, "ends", ends, MAXN, &ne));
    if (ox_has(n, 3)) LOOM_TRY(ox_const_ints(n, 3, "axes", axes, MAXN, &na));
    if (ox_has(n, 4)) LOOM_TRY(ox_const_ints(n, 4, "steps", steps, MAXN, &nt));
  }
  if (ne != ns || (na >= 0 && na != ns) || (nt >= 0 && nt != ns))
    return ox_fail(n, LOOM_ERR_SHAPE, "starts, ends, axes and steps differ in length");
  if (na < 0)
    for (int k = 0; k < ns; k++) axes[k] = k;
  sym_slice_t sym[MAXN];
  int n_sym;
  LOOM_TRY(slice_symbolic_bounds(n, &ns, starts, ends, axes, nt < 0 ? NULL : steps, sym,
                                 &n_sym));
  loom_value_t y = n->in[0];
  if (ns > 0 || !n_sym)
    LOOM_TRY(loom_slice(n->g, y, ns, starts, ends, axes, nt < 0 ? NULL : steps, &y));
  for (int k = 0; k < n_sym; k++) LOOM_TRY(gather_slice(n, y, &sym[k], &y));
  n->out[0] = y;
  return LOOM_OK;
}

/* ONNX Expand broadcasts both ways: a 1 in the shape keeps the input's dim. */
loom_status_t ox_expand(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  loom_dim_t shape[MAXN];
  int count;
  LOOM_TRY(ox_shape_dims(n, 1, "shape", shape, LOOM_MAX_RANK, &count));
  loom_dim_t in[LOOM_MAX_RANK], out[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_dims(n, n->in[0], in, &rank));
  int r = count > rank ? count : rank;
  for (int d = 0; d < r; d++) {
    int di = d - (r - rank), ds = d - (r - count);
    loom_dim_t a = di >= 0 ? in[di] : 1, b = ds >= 0 ? shape[ds] : 1;
    int sa = ox_is_dim_sym(a), sb = ox_is_dim_sym(b);
    if (b != 1 && a != 1 && a != b && !sa && !sb)
      return ox_fail(n, LOOM_ERR_SHAPE, "shape entry %d (%lld) does not broadcast with the input",
                     ds, (long long)b);
    /* A symbolic entry against a constant dim other than 1 can only be
     * that dim or 1: the input's dim stays. */
    out[d] = b == 1 || (sb && !sa && a != 1) ? a : b;
  }
  return loom_expand(n->g, n->in[0], r, out, &n->out[0]);
}

loom_status_t ox_tile(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  int64_t reps[MAXN];
  int count;
  LOOM_TRY(ox_const_ints(n, 1, "repeats", reps, LOOM_MAX_RANK, &count));
  if (count != ox_rank(n, n->in[0]))
    return ox_fail(n, LOOM_ERR_SHAPE, "%d repeats for rank %d", count, ox_rank(n, n->in[0]));
  return loom_tile(n->g, n->in[0], reps, &n->out[0]);
}

/* Pad's wrap mode (opset 19): along each padded axis, negative pads crop
 * first (as ONNX Runtime does, and as the other modes here do); output i
 * then reads the kept part, of size k, at (i - before) mod k: a gather
 * (pads beyond k wrap again). */
static loom_status_t pad_wrap(ox_node_t *n, int rank, const int64_t *pads) {
  loom_dim_t dims[LOOM_MAX_RANK];
  int r;
  LOOM_TRY(ox_dims(n, n->in[0], dims, &r));
  loom_value_t x = n->in[0];
  for (int a = 0; a < rank; a++) {
    int64_t before = pads[a], after = pads[rank + a];
    if (!before && !after) continue;
    if (ox_is_dim_sym(dims[a]))
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "mode 'wrap' over axis %d, a symbolic dim", a);
    int64_t cut = before < 0 ? -before : 0, kept = dims[a] + (before < 0 ? before : 0) +
                                                     (after < 0 ? after : 0);
    int64_t grow_before = before > 0 ? before : 0, grow = grow_before + (after > 0 ? after : 0);
    int64_t len = kept + grow;
    if (kept < 0 || (kept == 0 && grow > 0) || len > (int64_t)1 << 24)
      return ox_fail(n, LOOM_ERR_SHAPE, "mode 'wrap': axis %d of %lld padded by %lld and "
                     "%lld", a, (long long)dims[a], (long long)before, (long long)after);
    int64_t *idx = malloc(sizeof *idx * (size_t)(len ? len : 1));
    if (!idx) return ox_fail(n, LOOM_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < len; i++)
      idx[i] = cut + ((i - grow_before) % kept + kept) % kept;
    loom_value_t iv;
    loom_status_t st = ox_vector_i64(n, (int)len, idx, &iv);
    free(idx);
    LOOM_TRY(st);
    LOOM_TRY(loom_gather(n->g, x, iv, a, &x));
  }
  n->out[0] = x;
  return LOOM_OK;
}

loom_status_t ox_pad(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  int rank = ox_rank(n, n->in[0]);
  int64_t given[MAXN], axes[MAXN], pads[2 * LOOM_MAX_RANK] = {0};
  int count, na = -1;
  double value = 0;
  char mode_buf[32];
  const char *mode = ox_string(n, "mode", "constant", mode_buf, sizeof mode_buf);
  if (n->opset < 11) {
    const int64_t *p = ox_ints(n, n->opset < 2 ? "paddings" : "pads", &count);
    if (count > MAXN) return ox_fail(n, LOOM_ERR_SHAPE, "%d pads", count);
    ox_copy(given, p, sizeof *p * (size_t)count);
    value = ox_float(n, "value", 0.0);
  } else {
    LOOM_TRY(ox_const_ints(n, 1, "pads", given, MAXN, &count));
    if (ox_has(n, 2)) {
      int c;
      LOOM_TRY(ox_const_doubles(n, 2, "constant_value", &value, 1, &c));
    }
    if (ox_has(n, 3)) LOOM_TRY(ox_const_ints(n, 3, "axes", axes, MAXN, &na));
  }
  if (na < 0) {
    na = rank;
    for (int k = 0; k < rank; k++) axes[k] = k;
  }
  if (count != 2 * na)
    return ox_fail(n, LOOM_ERR_SHAPE, "%d pads for %d axes", count, na);
  for (int k = 0; k < na; k++) {
    int64_t a;
    LOOM_TRY(ox_axis(n, axes[k], rank, "axis", &a));
    pads[a] = given[k];
    pads[rank + a] = given[na + k];
  }
  if (!strcmp(mode, "wrap")) return pad_wrap(n, rank, pads);
  loom_pad_mode_t m;
  if (!strcmp(mode, "constant")) m = LOOM_PAD_CONSTANT;
  else if (!strcmp(mode, "reflect")) m = LOOM_PAD_REFLECT;
  else if (!strcmp(mode, "edge")) m = LOOM_PAD_EDGE;
  else return ox_fail(n, LOOM_ERR_UNSUPPORTED, "mode '%s' is not supported", mode);
  return loom_pad(n->g, n->in[0], pads, m, value, &n->out[0]);
}

loom_status_t ox_shape(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  loom_dim_t dims[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_dims(n, n->in[0], dims, &rank));
  int64_t start = ox_int(n, "start", 0), end = ox_int(n, "end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = start < 0 ? 0 : start > rank ? rank : start;
  end = end < 0 ? 0 : end > rank ? rank : end;
  if (end < start) end = start;
  return ox_shape_make(n, (int)(end - start), dims + start, 1, &n->out[0]);
}

loom_status_t ox_size(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  loom_dim_t dims[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_dims(n, n->in[0], dims, &rank));
  loom_dim_t size = 1;
  for (int d = 0; d < rank; d++) LOOM_TRY(loom_dim_mul(n->g, size, dims[d], &size));
  return ox_shape_make(n, 1, &size, 0, &n->out[0]);
}

loom_status_t ox_constant_of_shape(ox_node_t *n) {
  loom_dim_t shape[MAXN];
  int count;
  LOOM_TRY(ox_shape_dims(n, 0, "shape", shape, LOOM_MAX_RANK, &count));
  for (int d = 0; d < count; d++)
    if (shape[d] < 0 && !ox_is_dim_sym(shape[d]))
      return ox_fail(n, LOOM_ERR_SHAPE, "shape entry %d is %lld", d, (long long)shape[d]);
  loom_dtype_t dt = LOOM_F32;
  double value = 0;
  const Onnx__AttributeProto *a = ox_attr_typed(n, "value", OX_ATTR_TENSOR);
  if (a && a->t) {
    loom_tensor_t *t = NULL;
    loom_status_t st = ox_tensor_from_proto(a->t, NULL, &t);
    if (st != LOOM_OK) return ox_fail(n, st, "value: %s", loom_last_error());
    dt = loom_tensor_dtype(t);
    st = loom_tensor_numel(t) == 1 ? loom_tensor_get_f64(t, 0, &value)
                                   : ox_fail(n, LOOM_ERR_SHAPE, "value must hold one element");
    loom_tensor_destroy(t);
    LOOM_TRY(st);
  }
  return loom_full(n->g, count, shape, value, dt, &n->out[0]);
}

/* Range over symbolic dims: start + delta * (0, 1, ...), the positions
 * counted by a cumulative sum of ones, as many as the bounds give: up to
 * a symbolic limit from a constant start, or down from a symbolic start
 * to a constant limit (PyTorch's arange(n - 1, -1, -1)). */
static loom_status_t range_symbolic(ox_node_t *n) {
  double start = 0, limit = 0, delta;
  loom_dim_t sym, count;
  int c, up = !ox_is_shape(n->in[0]);
  if (ox_is_shape(n->in[2]) || (ox_is_shape(n->in[0]) && ox_is_shape(n->in[1])))
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "a symbolic delta, or start and limit both "
                   "symbolic");
  LOOM_TRY(ox_const_doubles(n, 2, "delta", &delta, 1, &c));
  if (up) LOOM_TRY(ox_const_doubles(n, 0, "start", &start, 1, &c));
  else LOOM_TRY(ox_const_doubles(n, 1, "limit", &limit, 1, &c));
  LOOM_TRY(ox_shape_dims(n, up ? 1 : 0, up ? "limit" : "start", &sym, 1, &c));
  double step = up ? delta : -delta, fixed = up ? start : limit;
  if (c != 1 || !(step >= 1 && step < 1e15) || !(fabs(fixed) < 1e15) ||
      step != (int64_t)step || fixed != (int64_t)fixed)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "a symbolic limit needs an integer start and a "
                   "positive integer delta, a symbolic start an integer limit and a negative "
                   "integer delta");
  loom_dtype_t dt = ox_dtype(n, n->in[up ? 0 : 1]);
  loom_value_t ones, pos, d, s;
  /* ceil((sym - fixed) / step): up, (limit - start) / delta; down,
   * (start - limit) / -delta */
  LOOM_TRY(ir_dim_add(n->g, sym, (int64_t)(step - 1 - fixed), &count));
  LOOM_TRY(ir_dim_floordiv(n->g, count, (int64_t)step, &count));
  LOOM_TRY(loom_full(n->g, 1, &count, 1, dt, &ones));
  LOOM_TRY(loom_cumsum(n->g, ones, 0, 1, 0, &pos));
  LOOM_TRY(ox_scalar(n, dt, delta, &d));
  LOOM_TRY(loom_mul(n->g, pos, d, &pos));
  if (up) LOOM_TRY(ox_scalar(n, dt, start, &s));
  else {
    LOOM_TRY(ox_dims_tensor(n, 1, &sym, &s));
    LOOM_TRY(loom_reshape(n->g, s, 0, NULL, &s));
    if (dt != LOOM_I64) LOOM_TRY(loom_cast(n->g, s, dt, &s));
  }
  return loom_add(n->g, pos, s, &n->out[0]);
}

loom_status_t ox_range(ox_node_t *n) {
  if (ox_has(n, 0) && ox_has(n, 1) && ox_has(n, 2) &&
      (ox_is_shape(n->in[0]) || ox_is_shape(n->in[1]) || ox_is_shape(n->in[2])))
    return range_symbolic(n);
  double v[3];
  int c;
  const char *names[3] = {"start", "limit", "delta"};
  for (int i = 0; i < 3; i++) LOOM_TRY(ox_const_doubles(n, i, names[i], &v[i], 1, &c));
  if (v[2] == 0) return ox_fail(n, LOOM_ERR_VALUE, "delta is 0");
  return loom_arange(n->g, v[0], v[1], v[2], ox_dtype(n, n->in[0]), &n->out[0]);
}

loom_status_t ox_gather(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  LOOM_TRY(ox_need(n, 1));
  return loom_gather(n->g, n->in[0], n->in[1], ox_int(n, "axis", 0), &n->out[0]);
}

/* out[i] = data[i with axis replaced by index[i]]: one gather from the
 * flattened data at positions computed from the index's coordinates
 * (symbolic dims give strides and coordinates counted when it runs). */
loom_status_t ox_gather_elements(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  LOOM_TRY(ox_need(n, 1));
  loom_graph_t *g = n->g;
  loom_dim_t dd[LOOM_MAX_RANK], di[LOOM_MAX_RANK];
  int rank, irank;
  LOOM_TRY(ox_dims(n, n->in[0], dd, &rank));
  LOOM_TRY(ox_dims(n, n->in[1], di, &irank));
  if (irank != rank) return ox_fail(n, LOOM_ERR_SHAPE, "index rank %d, data rank %d", irank, rank);
  int64_t axis;
  LOOM_TRY(ox_axis(n, ox_int(n, "axis", 0), rank, "axis", &axis));
  loom_value_t idx, zero, neg, size, wrapped, flat, stride_v, term;
  LOOM_TRY(loom_cast(g, n->in[1], LOOM_I64, &idx));
  LOOM_TRY(ox_scalar(n, LOOM_I64, 0, &zero));
  LOOM_TRY(ox_dim_tensor(n, dd[axis], &size));
  LOOM_TRY(loom_lt(g, idx, zero, &neg));
  LOOM_TRY(loom_add(g, idx, size, &wrapped));
  LOOM_TRY(loom_where(g, neg, wrapped, idx, &idx));
  loom_dim_t stride = 1;
  flat = zero;
  for (int d = rank - 1; d >= 0; d--) {
    loom_value_t coord = idx;
    if (d != axis) LOOM_TRY(ox_iota(n, di[d], d, rank, &coord));
    LOOM_TRY(ox_dim_tensor(n, stride, &stride_v));
    LOOM_TRY(loom_mul(g, coord, stride_v, &term));
    LOOM_TRY(loom_add(g, flat, term, &flat));
    LOOM_TRY(loom_dim_mul(g, stride, dd[d], &stride));
  }
  /* An index outside the axis would read another row's element of the
   * flattened data: it goes past the end instead, so the gather fails. */
  loom_value_t low, high, outside, past;
  LOOM_TRY(loom_lt(g, idx, zero, &low));
  LOOM_TRY(loom_ge(g, idx, size, &high));
  LOOM_TRY(loom_or(g, low, high, &outside));
  LOOM_TRY(ox_dim_tensor(n, stride, &past));
  LOOM_TRY(loom_where(g, outside, past, flat, &flat));
  loom_dim_t all = -1;
  loom_value_t data;
  LOOM_TRY(loom_reshape(g, n->in[0], 1, &all, &data));
  return loom_gather(g, data, flat, 0, &n->out[0]);
}

loom_status_t ox_trilu(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  loom_graph_t *g = n->g;
  loom_dim_t dims[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_dims(n, n->in[0], dims, &rank));
  if (rank < 2) return ox_fail(n, LOOM_ERR_SHAPE, "needs rank 2 or more, not %d", rank);
  double k = 0;
  int c;
  if (ox_has(n, 1)) LOOM_TRY(ox_const_doubles(n, 1, "k", &k, 1, &c));
  loom_value_t i, j, diff, kv, keep, zero;
  LOOM_TRY(ox_iota(n, dims[rank - 2], 0, 2, &i));
  LOOM_TRY(ox_iota(n, dims[rank - 1], 1, 2, &j));
  LOOM_TRY(loom_sub(g, j, i, &diff));
  LOOM_TRY(ox_scalar(n, LOOM_I64, k, &kv));
  LOOM_TRY(ox_int(n, "upper", 1) ? loom_ge(g, diff, kv, &keep) : loom_le(g, diff, kv, &keep));
  LOOM_TRY(ox_scalar(n, ox_dtype(n, n->in[0]), 0, &zero));
  return loom_where(g, keep, n->in[0], zero, &n->out[0]);
}

/* Out-of-range indices give rows of off_value, as ONNX says: a comparison
 * with 0..depth-1, not Loom's one_hot (which rejects them). */
loom_status_t ox_one_hot(ox_node_t *n) {
  for (int i = 0; i < 3; i++) LOOM_TRY(ox_need(n, i));
  loom_graph_t *g = n->g;
  double depth_d;
  int c;
  LOOM_TRY(ox_const_doubles(n, 1, "depth", &depth_d, 1, &c));
  int64_t depth = (int64_t)depth_d;
  if (depth < 1) return ox_fail(n, LOOM_ERR_VALUE, "depth %lld", (long long)depth);
  int rank = ox_rank(n, n->in[0]);
  int64_t axis = ox_int(n, "axis", -1);
  if (axis < -(rank + 1) || axis > rank)
    return ox_fail(n, LOOM_ERR_AXIS, "axis %lld for rank %d", (long long)axis, rank + 1);
  if (axis < 0) axis += rank + 1;
  loom_value_t idx, zero, d, neg, wrapped, classes, hot, on, off;
  LOOM_TRY(loom_cast(g, n->in[0], LOOM_I64, &idx));
  LOOM_TRY(ox_scalar(n, LOOM_I64, 0, &zero));
  LOOM_TRY(ox_scalar(n, LOOM_I64, (double)depth, &d));
  LOOM_TRY(loom_lt(g, idx, zero, &neg));
  LOOM_TRY(loom_add(g, idx, d, &wrapped));
  LOOM_TRY(loom_where(g, neg, wrapped, idx, &idx));
  int64_t at = axis;
  LOOM_TRY(loom_unsqueeze(g, idx, 1, &at, &idx));
  LOOM_TRY(ox_iota(n, depth, (int)axis, rank + 1, &classes));
  LOOM_TRY(loom_eq(g, idx, classes, &hot));
  int64_t first = 0, second = 1;
  LOOM_TRY(loom_slice(g, n->in[2], 1, &first, &second, &first, NULL, &off));
  int64_t third = 2;
  LOOM_TRY(loom_slice(g, n->in[2], 1, &second, &third, &first, NULL, &on));
  LOOM_TRY(loom_reshape(g, on, 0, NULL, &on));
  LOOM_TRY(loom_reshape(g, off, 0, NULL, &off));
  return loom_where(g, hot, on, off, &n->out[0]);
}

loom_status_t ox_nonzero(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  loom_value_t rows;
  LOOM_TRY(loom_nonzero(n->g, n->in[0], &rows));
  return loom_transpose(n->g, rows, NULL, &n->out[0]);
}

/* (N, C, H, W) <-> (N, C/b^2, H*b, W*b) through a rank-6 transpose. */
static loom_status_t block_move(ox_node_t *n, int to_space) {
  LOOM_TRY(ox_need(n, 0));
  loom_dim_t d[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_dims(n, n->in[0], d, &rank));
  int64_t b = ox_int(n, "blocksize", 0);
  if (rank != 4 || !all_const(d + 1, 3) || b < 1) /* a symbolic batch moves as it is */
    return ox_fail(n, LOOM_ERR_SHAPE, "needs a rank-4 input of static channels, height and "
                   "width, and blocksize >= 1");
  loom_value_t t;
  if (to_space) {
    if (d[1] % (b * b)) return ox_fail(n, LOOM_ERR_SHAPE, "channels not divisible by blocksize^2");
    int crd = ox_string_is(n, "mode", "DCR", "CRD");
    int64_t c = d[1] / (b * b);
    loom_dim_t s6[6] = {d[0], b, b, c, d[2], d[3]}, s6crd[6] = {d[0], c, b, b, d[2], d[3]};
    int64_t perm[6] = {0, 3, 4, 1, 5, 2}, perm_crd[6] = {0, 1, 4, 2, 5, 3};
    LOOM_TRY(loom_reshape(n->g, n->in[0], 6, crd ? s6crd : s6, &t));
    LOOM_TRY(loom_transpose(n->g, t, crd ? perm_crd : perm, &t));
    loom_dim_t s4[4] = {d[0], c, d[2] * b, d[3] * b};
    return loom_reshape(n->g, t, 4, s4, &n->out[0]);
  }
  if (d[2] % b || d[3] % b) return ox_fail(n, LOOM_ERR_SHAPE, "H and W must divide by blocksize");
  loom_dim_t s6[6] = {d[0], d[1], d[2] / b, b, d[3] / b, b};
  int64_t perm[6] = {0, 3, 5, 1, 2, 4};
  LOOM_TRY(loom_reshape(n->g, n->in[0], 6, s6, &t));
  LOOM_TRY(loom_transpose(n->g, t, perm, &t));
  loom_dim_t s4[4] = {d[0], d[1] * b * b, d[2] / b, d[3] / b};
  return loom_reshape(n->g, t, 4, s4, &n->out[0]);
}

loom_status_t ox_depth_to_space(ox_node_t *n) { return block_move(n, 1); }
loom_status_t ox_space_to_depth(ox_node_t *n) { return block_move(n, 0); }

loom_status_t ox_eye_like(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  loom_dim_t d[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_dims(n, n->in[0], d, &rank));
  if (rank != 2 || !all_const(d, 2))
    return ox_fail(n, LOOM_ERR_SHAPE, "needs a static rank-2 input");
  loom_dtype_t dt = ox_dtype(n, n->in[0]);
  if (ox_attr(n, "dtype") && !ox_dtype_from_onnx((int32_t)ox_int(n, "dtype", 1), &dt))
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "dtype %s",
                   ox_onnx_type_name((int32_t)ox_int(n, "dtype", 1)));
  loom_value_t i, j, diff, kv, on;
  LOOM_TRY(ox_iota(n, d[0], 0, 2, &i));
  LOOM_TRY(ox_iota(n, d[1], 1, 2, &j));
  LOOM_TRY(loom_sub(n->g, j, i, &diff));
  LOOM_TRY(ox_scalar(n, LOOM_I64, (double)ox_int(n, "k", 0), &kv));
  LOOM_TRY(loom_eq(n->g, diff, kv, &on));
  return loom_cast(n->g, on, dt, &n->out[0]);
}
