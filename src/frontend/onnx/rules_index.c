/* Rules for ONNX's scatter and gather ops beyond Gather: ScatterElements
 * (and its old name Scatter), ScatterND, GatherND, Compress,
 * ReverseSequence and MaxUnpool. Loom has gather and scatter_add; the
 * rest is index arithmetic around them:
 *   - an N-D index becomes a flat row of a reshaped tensor (GatherND,
 *     ScatterND), and a per-element index a flat position (take_along);
 *   - a replacing scatter is two scatter_adds, of the updates and of a
 *     count, selected where the count is not 0;
 *   - mul, max and min scatters compare each update's index with every
 *     position along the axis and reduce over the updates (their memory
 *     is updates x axis length). */
#include <string.h>

#include "core/alloc.h"
#include "frontend/onnx/onnx_import.h"

/* A dense mask of more elements than this is refused rather than made. */
#define MAX_DENSE ((int64_t)1 << 28)

typedef enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN } reduction_t;

static int64_t product(const loom_dim_t *dims, int from, int to) {
  int64_t p = 1;
  for (int d = from; d < to; d++) p *= dims[d];
  return p;
}

static loom_status_t reduction_of(const ox_node_t *n, reduction_t *out) {
  static const char *const names[] = {"none", "add", "mul", "max", "min"};
  char buf[32];
  const char *r = ox_string(n, "reduction", "none", buf, sizeof buf);
  for (int k = 0; k < 5; k++)
    if (!strcmp(r, names[k])) {
      *out = (reduction_t)k;
      return LOOM_OK;
    }
  return ox_fail(n, LOOM_ERR_UNSUPPORTED, "reduction '%s' (none, add, mul, max or min)", r);
}

/* idx as i64, negative entries counted back from size (which broadcasts
 * against idx: one size, or one per index component). */
static loom_status_t wrap_negative(ox_node_t *n, loom_value_t idx, loom_value_t size,
                                   loom_value_t *out) {
  loom_value_t zero, neg, wrapped;
  LOOM_TRY(loom_cast(n->g, idx, LOOM_I64, &idx));
  LOOM_TRY(ox_scalar(n, LOOM_I64, 0, &zero));
  LOOM_TRY(loom_lt(n->g, idx, zero, &neg));
  LOOM_TRY(loom_add(n->g, idx, size, &wrapped));
  return loom_where(n->g, neg, wrapped, idx, out);
}

/* The product of dims[from..to-1], symbolic where one of them is. */
static loom_status_t dim_product(ox_node_t *n, const loom_dim_t *dims, int from, int to,
                                 loom_dim_t *out) {
  loom_dim_t p = 1;
  for (int d = from; d < to; d++) LOOM_TRY(loom_dim_mul(n->g, p, dims[d], &p));
  *out = p;
  return LOOM_OK;
}

/* The flat position, in the row-major block of dims[0..k-1], that each
 * k-vector of idx (last axis) names: an i64 of idx's shape less its last
 * dim. Symbolic dims give sizes and strides computed when the graph runs. */
static loom_status_t flat_rows(ox_node_t *n, loom_value_t idx, const loom_dim_t *dims, int k,
                               loom_value_t *out) {
  loom_dim_t strides[LOOM_MAX_RANK], stride = 1;
  for (int j = k - 1; j >= 0; j--) {
    strides[j] = stride;
    LOOM_TRY(loom_dim_mul(n->g, stride, dims[j], &stride));
  }
  loom_value_t size_v, stride_v, terms;
  LOOM_TRY(ox_dims_tensor(n, k, dims, &size_v));
  LOOM_TRY(ox_dims_tensor(n, k, strides, &stride_v));
  LOOM_TRY(wrap_negative(n, idx, size_v, &idx));
  LOOM_TRY(loom_mul(n->g, idx, stride_v, &terms));
  int64_t last = -1;
  return loom_sum(n->g, terms, 1, &last, 0, out);
}

/* ---- Scatter along an axis ---------------------------------------------------- */

/* Replacing: each position takes the updates written to it (ONNX leaves
 * duplicates undefined; they give their mean, so MaxUnpool's repeated
 * maxima of overlapping windows give their value). */
static loom_status_t scatter_replace(ox_node_t *n, loom_value_t data, loom_value_t idx,
                                     loom_value_t upd, int axis, loom_value_t *out) {
  loom_graph_t *g = n->g;
  loom_dtype_t dt = ox_dtype(n, data);
  loom_dim_t dd[LOOM_MAX_RANK], du[LOOM_MAX_RANK];
  int rank, urank;
  LOOM_TRY(ox_dims(n, data, dd, &rank));
  LOOM_TRY(ox_dims(n, upd, du, &urank));
  loom_value_t zeros, none, ones, sum, count, one, hit, mean;
  LOOM_TRY(loom_full(g, rank, dd, 0, dt, &zeros));
  LOOM_TRY(loom_full(g, rank, dd, 0, LOOM_I64, &none));
  LOOM_TRY(loom_full(g, urank, du, 1, LOOM_I64, &ones));
  LOOM_TRY(loom_scatter_add(g, zeros, idx, upd, axis, &sum));
  LOOM_TRY(loom_scatter_add(g, none, idx, ones, axis, &count));
  LOOM_TRY(ox_scalar(n, LOOM_I64, 1, &one));
  LOOM_TRY(loom_ge(g, count, one, &hit));
  LOOM_TRY(loom_maximum(g, count, one, &count));
  LOOM_TRY(loom_cast(g, count, dt, &count));
  LOOM_TRY(loom_div(g, sum, count, &mean));
  return loom_where(g, hit, mean, data, out);
}

/* data moved so that axis is last and cut to the updates' extent off the
 * axis: (U without axis) + (D[axis]). perm receives the move. */
static loom_status_t axis_last(ox_node_t *n, loom_value_t data, const loom_dim_t *du, int rank,
                               int axis, int64_t *perm, loom_value_t *out) {
  int64_t starts[LOOM_MAX_RANK], ends[LOOM_MAX_RANK], axes[LOOM_MAX_RANK];
  for (int d = 0, k = 0; d < rank; d++)
    if (d != axis) perm[k++] = d;
  perm[rank - 1] = axis;
  LOOM_TRY(loom_transpose(n->g, data, perm, &data));
  for (int k = 0; k < rank - 1; k++) {
    starts[k] = 0;
    ends[k] = du[perm[k]];
    axes[k] = k;
  }
  return loom_slice(n->g, data, rank - 1, starts, ends, axes, NULL, out);
}

/* The (U without axis) + (D[axis]) result put back in data's layout,
 * data's own entries where the updates did not reach. */
static loom_status_t axis_back(ox_node_t *n, loom_value_t r, loom_value_t data,
                               const loom_dim_t *du, const int64_t *perm, int rank, int axis,
                               loom_value_t *out) {
  loom_dim_t dd[LOOM_MAX_RANK], reach[LOOM_MAX_RANK];
  int64_t inv[LOOM_MAX_RANK], pads[2 * LOOM_MAX_RANK] = {0};
  LOOM_TRY(ox_dims(n, data, dd, &rank));
  int same = 1;
  for (int k = 0; k < rank; k++) inv[perm[k]] = k;
  for (int d = 0; d < rank; d++) {
    reach[d] = d == axis ? dd[d] : du[d];
    pads[rank + d] = dd[d] - reach[d];
    same &= pads[rank + d] == 0;
  }
  LOOM_TRY(loom_transpose(n->g, r, inv, &r));
  if (same) {
    *out = r;
    return LOOM_OK;
  }
  loom_value_t inside;
  LOOM_TRY(loom_pad(n->g, r, pads, LOOM_PAD_CONSTANT, 0, &r));
  LOOM_TRY(loom_full(n->g, rank, reach, 1, LOOM_BOOL, &inside));
  LOOM_TRY(loom_pad(n->g, inside, pads, LOOM_PAD_CONSTANT, 0, &inside));
  return loom_where(n->g, inside, r, data, out);
}

/* mul, max, min: mask[u.., j] = (index[u..] == j) for each position j along
 * the axis; the updates where it holds (else data, or 1 for mul) reduce
 * over the updates' axis, and that combines with data. */
static loom_status_t scatter_dense(ox_node_t *n, loom_value_t data, loom_value_t idx,
                                   loom_value_t upd, int axis, reduction_t red,
                                   loom_value_t *out) {
  loom_graph_t *g = n->g;
  loom_dim_t dd[LOOM_MAX_RANK], du[LOOM_MAX_RANK];
  int rank, urank;
  LOOM_TRY(ox_dims(n, data, dd, &rank));
  LOOM_TRY(ox_dims(n, upd, du, &urank));
  if (product(du, 0, urank) * dd[axis] > MAX_DENSE)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "a %s scatter of %lld updates into %lld positions "
                   "is too large", red == RED_MUL ? "mul" : red == RED_MAX ? "max" : "min",
                   (long long)product(du, 0, urank), (long long)dd[axis]);
  int64_t perm[LOOM_MAX_RANK], at = rank, ax = axis;
  loom_value_t base, base_e, idx_e, upd_e, pos, mask, fill, cand, r;
  LOOM_TRY(axis_last(n, data, du, rank, axis, perm, &base));
  LOOM_TRY(loom_unsqueeze(g, base, 1, &ax, &base_e));
  LOOM_TRY(loom_unsqueeze(g, idx, 1, &at, &idx_e));
  LOOM_TRY(loom_unsqueeze(g, upd, 1, &at, &upd_e));
  LOOM_TRY(ox_iota(n, dd[axis], rank, rank + 1, &pos));
  LOOM_TRY(loom_eq(g, idx_e, pos, &mask));
  if (red == RED_MUL) LOOM_TRY(ox_like(n, data, 1, &fill));
  else fill = base_e;
  LOOM_TRY(loom_where(g, mask, upd_e, fill, &cand));
  if (red == RED_MUL) {
    LOOM_TRY(loom_prod(g, cand, 1, &ax, 0, &r));
    /* prod of integers is i64 */
    if (ox_dtype(n, r) != ox_dtype(n, data)) LOOM_TRY(loom_cast(g, r, ox_dtype(n, data), &r));
    LOOM_TRY(loom_mul(g, r, base, &r));
  } else {
    LOOM_TRY((red == RED_MAX ? loom_max : loom_min)(g, cand, 1, &ax, 0, &r));
    LOOM_TRY((red == RED_MAX ? loom_maximum : loom_minimum)(g, r, base, &r));
  }
  return axis_back(n, r, data, du, perm, rank, axis, out);
}

/* data with updates written at idx (i64, >= 0, shaped like upd) along
 * axis, combined as red says. Bool data computes on 0 and 1. */
static loom_status_t scatter_along(ox_node_t *n, loom_value_t data, loom_value_t idx,
                                   loom_value_t upd, int axis, reduction_t red,
                                   loom_value_t *out) {
  if (ox_dtype(n, data) == LOOM_BOOL) {
    loom_value_t d, u, r, zero;
    LOOM_TRY(loom_cast(n->g, data, LOOM_I32, &d));
    LOOM_TRY(loom_cast(n->g, upd, LOOM_I32, &u));
    LOOM_TRY(scatter_along(n, d, idx, u, axis, red, &r));
    LOOM_TRY(ox_scalar(n, LOOM_I32, 0, &zero));
    return loom_ne(n->g, r, zero, out);
  }
  if (ox_dtype(n, upd) != ox_dtype(n, data))
    return ox_fail(n, LOOM_ERR_DTYPE, "updates are %s and data %s",
                   loom_dtype_name(ox_dtype(n, upd)), loom_dtype_name(ox_dtype(n, data)));
  if (red == RED_ADD) return loom_scatter_add(n->g, data, idx, upd, axis, out);
  if (red == RED_NONE) return scatter_replace(n, data, idx, upd, axis, out);
  return scatter_dense(n, data, idx, upd, axis, red, out);
}

/* ---- The rules -------------------------------------------------------------- */

loom_status_t ox_scatter_elements(ox_node_t *n) {
  for (int i = 0; i < 3; i++) LOOM_TRY(ox_need(n, i));
  loom_dim_t dd[LOOM_MAX_RANK], di[LOOM_MAX_RANK], du[LOOM_MAX_RANK];
  int rank, irank, urank;
  LOOM_TRY(ox_static_dims(n, n->in[0], "data", dd, &rank));
  LOOM_TRY(ox_static_dims(n, n->in[1], "indices", di, &irank));
  LOOM_TRY(ox_static_dims(n, n->in[2], "updates", du, &urank));
  if (rank < 1 || irank != rank || urank != rank)
    return ox_fail(n, LOOM_ERR_SHAPE, "data, indices and updates have ranks %d, %d, %d (one "
                   "rank, at least 1)", rank, irank, urank);
  int64_t axis;
  LOOM_TRY(ox_axis(n, ox_int(n, "axis", 0), rank, "axis", &axis));
  for (int d = 0; d < rank; d++)
    if (di[d] != du[d] || (d != axis && di[d] > dd[d]))
      return ox_fail(n, LOOM_ERR_SHAPE, "dim %d: indices %lld, updates %lld, data %lld (indices "
                     "and updates of one shape, within data off the axis)", d, (long long)di[d],
                     (long long)du[d], (long long)dd[d]);
  reduction_t red = RED_NONE;
  LOOM_TRY(reduction_of(n, &red));
  loom_value_t size, idx;
  LOOM_TRY(ox_scalar(n, LOOM_I64, (double)dd[axis], &size));
  LOOM_TRY(wrap_negative(n, n->in[1], size, &idx));
  return scatter_along(n, n->in[0], idx, n->in[2], (int)axis, red, &n->out[0]);
}

/* Scatter (opsets 9-10) is ScatterElements without reduction. */
loom_status_t ox_scatter(ox_node_t *n) { return ox_scatter_elements(n); }

/* data viewed as (rows of its first k dims) + the rest; each k-vector of
 * indices names a row, which its slice of updates is scattered into. */
/* Symbolic dims (a sequence length) are taken where the updates replace
 * or add; mul, max and min build a mask as large as data's dim. */
loom_status_t ox_scatter_nd(ox_node_t *n) {
  for (int i = 0; i < 3; i++) LOOM_TRY(ox_need(n, i));
  loom_dim_t dd[LOOM_MAX_RANK], di[LOOM_MAX_RANK], du[LOOM_MAX_RANK];
  int r, q, ur;
  reduction_t red = RED_NONE;
  LOOM_TRY(reduction_of(n, &red));
  if (red == RED_NONE || red == RED_ADD) {
    LOOM_TRY(ox_dims(n, n->in[0], dd, &r));
    LOOM_TRY(ox_dims(n, n->in[1], di, &q));
    LOOM_TRY(ox_dims(n, n->in[2], du, &ur));
  } else {
    LOOM_TRY(ox_static_dims(n, n->in[0], "data", dd, &r));
    LOOM_TRY(ox_static_dims(n, n->in[1], "indices", di, &q));
    LOOM_TRY(ox_static_dims(n, n->in[2], "updates", du, &ur));
  }
  if (q >= 1 && ox_is_dim_sym(di[q - 1]))
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "indices' last dim is symbolic");
  int k = q ? (int)di[q - 1] : 0;
  if (q < 1 || k < 1 || k > r || ur != q - 1 + r - k)
    return ox_fail(n, LOOM_ERR_SHAPE, "indices' last dim (%d) must be 1..data's rank (%d), and "
                   "updates' rank (%d) indices' rank - 1 + data's rank - that", k, r, ur);
  for (int d = 0; d < ur; d++) {
    loom_dim_t want = d < q - 1 ? di[d] : dd[d - (q - 1) + k];
    if (du[d] != want && !ox_is_dim_sym(du[d]) && !ox_is_dim_sym(want))
      return ox_fail(n, LOOM_ERR_SHAPE, "updates' dim %d is %lld, not indices.shape[:-1] + "
                     "data.shape[k:]", d, (long long)du[d]);
  }
  loom_value_t rows, data, upd, idx;
  LOOM_TRY(flat_rows(n, n->in[1], dd, k, &rows));
  loom_dim_t shape[LOOM_MAX_RANK];
  int rest = r - k;
  ox_copy(shape + 1, dd + k, sizeof *dd * (size_t)rest);
  LOOM_TRY(dim_product(n, dd, 0, k, &shape[0]));
  LOOM_TRY(loom_reshape(n->g, n->in[0], rest + 1, shape, &data));
  LOOM_TRY(dim_product(n, di, 0, q - 1, &shape[0]));
  LOOM_TRY(loom_reshape(n->g, n->in[2], rest + 1, shape, &upd));
  loom_dim_t column[LOOM_MAX_RANK];
  for (int d = 0; d <= rest; d++) column[d] = d ? 1 : shape[0];
  LOOM_TRY(loom_reshape(n->g, rows, rest + 1, column, &idx));
  LOOM_TRY(loom_expand(n->g, idx, rest + 1, shape, &idx));
  loom_value_t flat;
  LOOM_TRY(scatter_along(n, data, idx, upd, 0, red, &flat));
  return loom_reshape(n->g, flat, r, dd, &n->out[0]);
}

/* data viewed as (batch x rows of its dims b..b+k-1) + the rest; each
 * k-vector of indices, offset by its batch, names a row. */
loom_status_t ox_gather_nd(ox_node_t *n) {
  for (int i = 0; i < 2; i++) LOOM_TRY(ox_need(n, i));
  loom_dim_t dd[LOOM_MAX_RANK], di[LOOM_MAX_RANK];
  int r, q;
  LOOM_TRY(ox_dims(n, n->in[0], dd, &r));
  LOOM_TRY(ox_dims(n, n->in[1], di, &q));
  int64_t b = ox_int(n, "batch_dims", 0);
  if (q >= 1 && ox_is_dim_sym(di[q - 1]))
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "indices' last dim is symbolic");
  int k = q ? (int)di[q - 1] : 0;
  if (b < 0 || b >= q || b >= r || k < 1 || b + k > r)
    return ox_fail(n, LOOM_ERR_SHAPE, "batch_dims %lld and indices' last dim %d do not fit data "
                   "of rank %d and indices of rank %d", (long long)b, k, r, q);
  for (int d = 0; d < b; d++)
    if (dd[d] != di[d])
      return ox_fail(n, LOOM_ERR_SHAPE, "batch dim %d differs between data and indices", d);
  /* Symbolic dims (indices counted by NonZero: tf.boolean_mask) give
   * strides and positions computed when the graph runs. */
  loom_value_t rows, data;
  LOOM_TRY(flat_rows(n, n->in[1], dd + b, k, &rows));
  loom_dim_t stride;
  LOOM_TRY(dim_product(n, dd, (int)b, (int)b + k, &stride));
  for (int d = (int)b - 1; d >= 0; d--) {
    loom_value_t pos, step;
    LOOM_TRY(ox_iota(n, di[d], d, q - 1, &pos));
    LOOM_TRY(ox_dim_tensor(n, stride, &step));
    LOOM_TRY(loom_mul(n->g, pos, step, &pos));
    LOOM_TRY(loom_add(n->g, rows, pos, &rows));
    LOOM_TRY(loom_dim_mul(n->g, stride, dd[d], &stride));
  }
  loom_dim_t shape[LOOM_MAX_RANK];
  int rest = r - (int)b - k;
  shape[0] = stride;
  ox_copy(shape + 1, dd + b + k, sizeof *dd * (size_t)rest);
  LOOM_TRY(loom_reshape(n->g, n->in[0], rest + 1, shape, &data));
  return loom_gather(n->g, data, rows, 0, &n->out[0]);
}

/* out[i] = data[i with axis replaced by idx[i]] (idx i64, >= 0,
 * broadcasting to data's shape): one gather from the flattened data. */
static loom_status_t take_along(ox_node_t *n, loom_value_t data, loom_value_t idx, int axis,
                                loom_value_t *out) {
  loom_dim_t dd[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_dims(n, data, dd, &rank));
  loom_value_t flat = idx, coord, step;
  int64_t stride = product(dd, axis + 1, rank);
  LOOM_TRY(ox_scalar(n, LOOM_I64, (double)stride, &step));
  LOOM_TRY(loom_mul(n->g, flat, step, &flat));
  for (int d = 0; d < rank; d++) {
    if (d == axis) continue;
    LOOM_TRY(ox_iota(n, dd[d], d, rank, &coord));
    LOOM_TRY(ox_scalar(n, LOOM_I64, (double)product(dd, d + 1, rank), &step));
    LOOM_TRY(loom_mul(n->g, coord, step, &coord));
    LOOM_TRY(loom_add(n->g, flat, coord, &flat));
  }
  loom_dim_t all = -1;
  LOOM_TRY(loom_reshape(n->g, data, 1, &all, &data));
  return loom_gather(n->g, data, flat, 0, out);
}

/* Entry t < len[b] of sequence b comes from len[b] - 1 - t; the rest stay. */
loom_status_t ox_reverse_sequence(ox_node_t *n) {
  for (int i = 0; i < 2; i++) LOOM_TRY(ox_need(n, i));
  loom_graph_t *g = n->g;
  loom_dim_t dd[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_static_dims(n, n->in[0], "input", dd, &rank));
  int64_t bax = ox_int(n, "batch_axis", 1), tax = ox_int(n, "time_axis", 0);
  if (rank < 2 || bax < 0 || bax > 1 || tax < 0 || tax > 1 || bax == tax)
    return ox_fail(n, LOOM_ERR_SHAPE, "batch_axis %lld and time_axis %lld must be 0 and 1 in "
                   "some order, of an input of rank >= 2 (not %d)", (long long)bax,
                   (long long)tax, rank);
  if (ox_rank(n, n->in[1]) != 1 || ox_dim(n, n->in[1], 0) != dd[bax])
    return ox_fail(n, LOOM_ERR_SHAPE, "sequence_lens must hold one length per batch entry (%lld)",
                   (long long)dd[bax]);
  loom_dim_t shape[LOOM_MAX_RANK];
  for (int d = 0; d < rank; d++) shape[d] = d == bax ? dd[bax] : 1;
  loom_value_t len, t, one, last, back, inside, src;
  LOOM_TRY(loom_cast(g, n->in[1], LOOM_I64, &len));
  LOOM_TRY(loom_clamp(g, len, 0, (double)dd[tax], &len));
  LOOM_TRY(loom_reshape(g, len, rank, shape, &len));
  LOOM_TRY(ox_iota(n, dd[tax], (int)tax, rank, &t));
  LOOM_TRY(ox_scalar(n, LOOM_I64, 1, &one));
  LOOM_TRY(loom_sub(g, len, one, &last));
  LOOM_TRY(loom_sub(g, last, t, &back));
  LOOM_TRY(loom_lt(g, t, len, &inside));
  LOOM_TRY(loom_where(g, inside, back, t, &src));
  return take_along(n, n->in[0], src, (int)tax, &n->out[0]);
}

/* The indices of condition's true entries among the first `size`: a
 * constant when condition is one, else nonzero's (known when it runs). */
static loom_status_t kept_positions(ox_node_t *n, int64_t size, loom_value_t *out) {
  loom_value_t cond = n->in[1];
  int64_t len = ox_dim(n, cond, 0);
  const loom_tensor_t *t = ox_const(n, cond);
  if (t) {
    int64_t *keep = core_calloc((size_t)len + 1, sizeof *keep);
    if (!keep) return ox_fail(n, LOOM_ERR_NOMEM, "out of memory");
    int count = 0;
    for (int64_t i = 0; i < len && i < size; i++) {
      double v;
      loom_tensor_get_f64(t, i, &v);
      if (v != 0) keep[count++] = i;
    }
    loom_status_t st = ox_vector_i64(n, count, keep, out);
    core_free(keep);
    return st;
  }
  if (len < 0) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "a condition of symbolic length");
  if (len > size) {
    int64_t zero = 0;
    LOOM_TRY(loom_slice(n->g, cond, 1, &zero, &size, &zero, NULL, &cond));
  }
  int64_t column = 1;
  LOOM_TRY(loom_nonzero(n->g, cond, out));
  return loom_squeeze(n->g, *out, 1, &column, out);
}

loom_status_t ox_compress(ox_node_t *n) {
  for (int i = 0; i < 2; i++) LOOM_TRY(ox_need(n, i));
  loom_dim_t dd[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_static_dims(n, n->in[0], "input", dd, &rank));
  if (ox_rank(n, n->in[1]) != 1)
    return ox_fail(n, LOOM_ERR_SHAPE, "condition has rank %d, not 1", ox_rank(n, n->in[1]));
  loom_value_t data = n->in[0], keep;
  int64_t axis = 0;
  if (ox_attr(n, "axis")) {
    LOOM_TRY(ox_axis(n, ox_int(n, "axis", 0), rank, "axis", &axis));
  } else {
    loom_dim_t all = product(dd, 0, rank);
    LOOM_TRY(loom_reshape(n->g, data, 1, &all, &data));
    dd[0] = all;
  }
  LOOM_TRY(kept_positions(n, dd[axis], &keep));
  return loom_gather(n->g, data, keep, axis, &n->out[0]);
}

/* MaxPool's indices are flat positions in the unpooled shape the
 * attributes give: a replacing scatter of the flattened input into zeros
 * of that shape, then padded (or cut) at the ends to output_shape, as
 * ONNX's reference does. */
loom_status_t ox_max_unpool(ox_node_t *n) {
  for (int i = 0; i < 2; i++) LOOM_TRY(ox_need(n, i));
  loom_dim_t dx[LOOM_MAX_RANK], di[LOOM_MAX_RANK], shape[LOOM_MAX_RANK];
  int rank, irank, nk, ns, np;
  LOOM_TRY(ox_static_dims(n, n->in[0], "X", dx, &rank));
  LOOM_TRY(ox_static_dims(n, n->in[1], "I", di, &irank));
  const int64_t *kernel = ox_ints(n, "kernel_shape", &nk);
  const int64_t *strides = ox_ints(n, "strides", &ns), *pads = ox_ints(n, "pads", &np);
  int sp = rank - 2;
  if (rank < 3 || irank != rank || memcmp(dx, di, sizeof *dx * (size_t)rank) || nk != sp ||
      (strides && ns != sp) || (pads && np != 2 * sp))
    return ox_fail(n, LOOM_ERR_SHAPE, "X and I must be of one shape (N, C, spatial..), with "
                   "kernel_shape, strides and pads (twice) per spatial dim");
  shape[0] = dx[0];
  shape[1] = dx[1];
  for (int d = 0; d < sp; d++) {
    shape[2 + d] = (dx[2 + d] - 1) * (strides ? strides[d] : 1) + kernel[d] -
                   (pads ? pads[d] + pads[sp + d] : 0);
    if (shape[2 + d] < 1)
      return ox_fail(n, LOOM_ERR_SHAPE, "spatial dim %d unpools to %lld", d,
                     (long long)shape[2 + d]);
  }
  int64_t total = product(shape, 0, rank), ends[2 * LOOM_MAX_RANK] = {0};
  if (ox_has(n, 2)) {
    int64_t want[LOOM_MAX_RANK];
    int count;
    LOOM_TRY(ox_const_ints(n, 2, "output_shape", want, LOOM_MAX_RANK, &count));
    if (count != rank) return ox_fail(n, LOOM_ERR_SHAPE, "output_shape has %d dims", count);
    for (int d = 0; d < rank; d++) {
      if (want[d] < 0) return ox_fail(n, LOOM_ERR_SHAPE, "output_shape[%d] is %lld", d, (long long)want[d]);
      ends[rank + d] = want[d] - shape[d];
    }
  }
  loom_dim_t all = -1;
  loom_value_t zeros, x, idx, flat;
  LOOM_TRY(loom_full(n->g, 1, &total, 0, ox_dtype(n, n->in[0]), &zeros));
  LOOM_TRY(loom_reshape(n->g, n->in[0], 1, &all, &x));
  LOOM_TRY(loom_reshape(n->g, n->in[1], 1, &all, &idx));
  LOOM_TRY(scatter_along(n, zeros, idx, x, 0, RED_NONE, &flat));
  LOOM_TRY(loom_reshape(n->g, flat, rank, shape, &flat));
  return loom_pad(n->g, flat, ends, LOOM_PAD_CONSTANT, 0, &n->out[0]);
}
