/* Rules for ONNX's reductions: axes from the attribute or (ReduceSum from
 * opset 13, the others from 18) from a constant input, keepdims,
 * noop_with_empty_axes, and results kept in the input's dtype where Loom
 * widens integers. */
#include <math.h>
#include <stdbool.h>

#include "frontend/onnx/onnx_import.h"

typedef enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_LOG_SUM, R_LSE, R_SUM_SQ } reduce_t;

/* ReduceMax/ReduceMin over an axis of size 0: the dtype's lowest (max)
 * or highest (min) value, -inf and +inf for floats, as ONNX specifies
 * (Loom's max and min refuse an empty axis); false and true for bool.
 * *done is false when no reduced axis is known to be empty. */
static loom_status_t empty_extreme(ox_node_t *n, bool max, int count, const int64_t *axes,
                                   int keep, bool *done) {
  *done = false;
  loom_dim_t dims[LOOM_MAX_RANK], out[LOOM_MAX_RANK];
  int rank, n_out = 0;
  loom_dtype_t dt;
  LOOM_TRY(loom_value_type(n->g, n->in[0], &dt, &rank, dims));
  bool red[LOOM_MAX_RANK] = {false}, empty = false;
  for (int k = 0; k < count; k++) {
    int64_t a = axes[k] < 0 ? axes[k] + rank : axes[k];
    if (a < 0 || a >= rank) return LOOM_OK; /* the reduction itself names the bad axis */
    red[a] = true;
  }
  for (int d = 0; d < rank; d++) {
    if (!count) red[d] = true;
    empty |= red[d] && dims[d] == 0;
    if (!red[d]) out[n_out++] = dims[d];
    else if (keep) out[n_out++] = 1;
  }
  if (!empty) return LOOM_OK;
  double v = dt == LOOM_BOOL ? (max ? 0 : 1) : max ? -INFINITY : INFINITY; /* saturated */
  *done = true;
  return loom_full(n->g, n_out, out, v, dt, &n->out[0]);
}

static loom_status_t reduce(ox_node_t *n, reduce_t kind) {
  LOOM_TRY(ox_need(n, 0));
  loom_graph_t *g = n->g;
  int64_t axes[LOOM_MAX_RANK * 2];
  int count = 0;
  int64_t since = kind == R_SUM ? 13 : 18;
  if (n->opset < since) {
    if (ox_has(n, 1))
      return ox_fail(n, LOOM_ERR_FORMAT, "axes as an input at opset %lld (an attribute until "
                     "opset %lld)", (long long)n->opset, (long long)since);
    const int64_t *a = ox_ints(n, "axes", &count);
    if (count > LOOM_MAX_RANK) return ox_fail(n, LOOM_ERR_SHAPE, "%d axes", count);
    for (int k = 0; k < count; k++) axes[k] = a[k];
  } else if (ox_attr(n, "axes")) {
    /* read as absent, it would reduce every axis */
    return ox_fail(n, LOOM_ERR_FORMAT, "an axes attribute at opset %lld (an input from opset "
                   "%lld)", (long long)n->opset, (long long)since);
  } else if (ox_has(n, 1)) {
    LOOM_TRY(ox_const_ints(n, 1, "axes", axes, LOOM_MAX_RANK, &count));
  }
  int keep = (int)ox_int(n, "keepdims", 1);
  loom_value_t x = n->in[0], y;
  if (count == 0 && ox_int(n, "noop_with_empty_axes", 0)) {
    n->out[0] = x;
    return LOOM_OK;
  }
  if (kind == R_MAX || kind == R_MIN) {
    bool done;
    LOOM_TRY(empty_extreme(n, kind == R_MAX, count, axes, keep, &done));
    if (done) return LOOM_OK;
  }
  loom_dtype_t dt = ox_dtype(n, x);
  int64_t *ax = count ? axes : NULL;
  switch (kind) {
    case R_SUM: LOOM_TRY(loom_sum(g, x, count, ax, keep, &y)); break;
    case R_MAX: LOOM_TRY(loom_max(g, x, count, ax, keep, &y)); break;
    case R_MIN: LOOM_TRY(loom_min(g, x, count, ax, keep, &y)); break;
    case R_PROD: LOOM_TRY(loom_prod(g, x, count, ax, keep, &y)); break;
    case R_MEAN:
      if (!ox_is_float(dt)) LOOM_TRY(loom_cast(g, x, LOOM_F64, &x));
      LOOM_TRY(loom_mean(g, x, count, ax, keep, &y));
      break;
    case R_L1:
      LOOM_TRY(loom_abs(g, x, &x));
      LOOM_TRY(loom_sum(g, x, count, ax, keep, &y));
      break;
    case R_L2:
    case R_SUM_SQ:
      if (kind == R_L2 && !ox_is_float(dt)) LOOM_TRY(loom_cast(g, x, LOOM_F64, &x));
      LOOM_TRY(loom_mul(g, x, x, &x));
      LOOM_TRY(loom_sum(g, x, count, ax, keep, &y));
      if (kind == R_L2) LOOM_TRY(loom_sqrt(g, y, &y));
      break;
    case R_LOG_SUM:
      LOOM_TRY(loom_sum(g, x, count, ax, keep, &y));
      LOOM_TRY(loom_log(g, y, &y));
      break;
    case R_LSE: LOOM_TRY(loom_logsumexp(g, x, count, ax, keep, &y)); break;
  }
  if (ox_dtype(n, y) != dt) LOOM_TRY(loom_cast(g, y, dt, &y));
  n->out[0] = y;
  return LOOM_OK;
}

loom_status_t ox_reduce_sum(ox_node_t *n) { return reduce(n, R_SUM); }
loom_status_t ox_reduce_mean(ox_node_t *n) { return reduce(n, R_MEAN); }
loom_status_t ox_reduce_max(ox_node_t *n) { return reduce(n, R_MAX); }
loom_status_t ox_reduce_min(ox_node_t *n) { return reduce(n, R_MIN); }
loom_status_t ox_reduce_prod(ox_node_t *n) { return reduce(n, R_PROD); }
loom_status_t ox_reduce_l1(ox_node_t *n) { return reduce(n, R_L1); }
loom_status_t ox_reduce_l2(ox_node_t *n) { return reduce(n, R_L2); }
loom_status_t ox_reduce_log_sum(ox_node_t *n) { return reduce(n, R_LOG_SUM); }
loom_status_t ox_reduce_log_sum_exp(ox_node_t *n) { return reduce(n, R_LSE); }
loom_status_t ox_reduce_sum_square(ox_node_t *n) { return reduce(n, R_SUM_SQ); }

/* select_last_index: the first extreme of x reversed along axis, counted
 * from the end. */
static loom_status_t arg_extreme(ox_node_t *n, int max) {
  LOOM_TRY(ox_need(n, 0));
  loom_graph_t *g = n->g;
  loom_dim_t dims[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(loom_value_type(g, n->in[0], NULL, &rank, dims));
  int64_t axis;
  LOOM_TRY(ox_axis(n, ox_int(n, "axis", 0), rank, "axis", &axis));
  int keep = (int)ox_int(n, "keepdims", 1);
  loom_value_t x = n->in[0], y;
  int last = (int)ox_int(n, "select_last_index", 0);
  if (last) {
    if (dims[axis] < 0) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "select_last_index on a symbolic dim");
    LOOM_TRY(loom_flip(g, x, 1, &axis, &x));
  }
  LOOM_TRY(max ? loom_argmax(g, x, 1, axis, keep, &y) : loom_argmin(g, x, 1, axis, keep, &y));
  if (last) {
    loom_value_t top;
    LOOM_TRY(ox_scalar(n, LOOM_I64, (double)(dims[axis] - 1), &top));
    LOOM_TRY(loom_sub(g, top, y, &y));
  }
  n->out[0] = y;
  return LOOM_OK;
}

loom_status_t ox_argmax(ox_node_t *n) { return arg_extreme(n, 1); }
loom_status_t ox_argmin(ox_node_t *n) { return arg_extreme(n, 0); }

loom_status_t ox_cumsum(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  int64_t axis;
  int count;
  LOOM_TRY(ox_const_ints(n, 1, "axis", &axis, 1, &count));
  loom_value_t y;
  LOOM_TRY(loom_cumsum(n->g, n->in[0], axis, (int)ox_int(n, "exclusive", 0),
                       (int)ox_int(n, "reverse", 0), &y));
  loom_dtype_t dt = ox_dtype(n, n->in[0]);
  if (ox_dtype(n, y) != dt) LOOM_TRY(loom_cast(n->g, y, dt, &y));
  n->out[0] = y;
  return LOOM_OK;
}

loom_status_t ox_topk(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  int64_t k;
  int count = 1;
  if (n->opset < 10) k = ox_int(n, "k", -1);
  else LOOM_TRY(ox_const_ints(n, 1, "K", &k, 1, &count));
  if (k < 0) return ox_fail(n, LOOM_ERR_VALUE, "K is %lld", (long long)k);
  loom_value_t values, indices;
  LOOM_TRY(loom_topk(n->g, n->in[0], k, ox_int(n, "axis", -1), (int)ox_int(n, "largest", 1),
                     &values, &indices));
  ox_set(n, 0, values);
  return ox_set(n, 1, indices);
}
