/* Rules for ONNX's normalizations that Loom has no op of its own for:
 * GroupNormalization, LRN and MeanVarianceNormalization, each decomposed
 * into reductions (or an average pool over the channels, for LRN) and
 * elementwise ops, so that gradients flow through them. */
#include "frontend/onnx/onnx_import.h"

static loom_status_t need_float(const ox_node_t *n, loom_value_t x) {
  if (ox_is_float(ox_dtype(n, x))) return LOOM_OK;
  return ox_fail(n, LOOM_ERR_DTYPE, "input of dtype %s (needs a float type)",
                 loom_dtype_name(ox_dtype(n, x)));
}

/* ---- GroupNormalization ------------------------------------------------------ */

/* Scale or bias (input i) shaped (1, G, k, 1, ...) of rank r to broadcast
 * against x viewed as (N, G, C/G, d...): k = 1 when it holds one value per
 * group (opsets 18 to 20), C/G when one per channel (opset 21 on). */
static loom_status_t group_param(ox_node_t *n, int i, int64_t groups, int64_t k, int r,
                                 loom_value_t *out) {
  loom_value_t p = n->in[i];
  if (ox_rank(n, p) != 1 || (ox_dim(n, p, 0) >= 0 && ox_dim(n, p, 0) != groups * k))
    return ox_fail(n, LOOM_ERR_SHAPE, "%s must have shape (%lld)", i == 1 ? "scale" : "bias",
                   (long long)(groups * k));
  loom_dim_t shape[LOOM_MAX_RANK];
  for (int d = 0; d < r; d++) shape[d] = d == 1 ? groups : d == 2 ? k : 1;
  return loom_reshape(n->g, p, r, shape, out);
}

/* x (N, C, d...) viewed as (N, G, C/G, d...), normalized over all but the
 * first two dims, scaled and shifted, viewed back. */
loom_status_t ox_group_norm(ox_node_t *n) {
  for (int i = 0; i < 3; i++) LOOM_TRY(ox_need(n, i));
  loom_graph_t *g = n->g;
  loom_value_t x = n->in[0];
  LOOM_TRY(need_float(n, x));
  loom_dim_t xd[LOOM_MAX_RANK], gd[LOOM_MAX_RANK];
  int r;
  LOOM_TRY(ox_dims(n, x, xd, &r));
  if (!ox_attr(n, "num_groups")) return ox_fail(n, LOOM_ERR_FORMAT, "num_groups is missing");
  int64_t groups = ox_int(n, "num_groups", 0);
  if (r < 2 || r >= LOOM_MAX_RANK)
    return ox_fail(n, LOOM_ERR_SHAPE, "input of rank %d (needs 2 to %d)", r, LOOM_MAX_RANK - 1);
  if (xd[1] < 0) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "a symbolic channel count");
  if (groups < 1 || xd[1] % groups)
    return ox_fail(n, LOOM_ERR_INVALID, "num_groups %lld does not divide %lld channels",
                   (long long)groups, (long long)xd[1]);
  gd[0] = xd[0];
  gd[1] = groups;
  gd[2] = xd[1] / groups;
  for (int d = 2; d < r; d++) gd[d + 1] = xd[d];
  int64_t axes[LOOM_MAX_RANK];
  for (int d = 2; d <= r; d++) axes[d - 2] = d;
  /* stash_type 1 (the default): statistics of half-precision inputs in f32. */
  loom_dtype_t dt = ox_dtype(n, x);
  int stash = (dt == LOOM_F16 || dt == LOOM_BF16) && ox_int(n, "stash_type", 1) == 1;
  loom_value_t xg, mean, var, e, inv, y, scale, bias;
  LOOM_TRY(loom_reshape(g, x, r + 1, gd, &xg));
  if (stash) LOOM_TRY(loom_cast(g, xg, LOOM_F32, &xg));
  LOOM_TRY(loom_mean(g, xg, r - 1, axes, 1, &mean));
  LOOM_TRY(loom_variance(g, xg, r - 1, axes, 1, 0, &var));
  LOOM_TRY(ox_like(n, var, ox_float(n, "epsilon", 1e-5), &e));
  LOOM_TRY(loom_add(g, var, e, &var));
  LOOM_TRY(loom_rsqrt(g, var, &inv));
  LOOM_TRY(loom_sub(g, xg, mean, &y));
  LOOM_TRY(loom_mul(g, y, inv, &y));
  if (stash) LOOM_TRY(loom_cast(g, y, dt, &y));
  int64_t k = n->opset >= 21 ? gd[2] : 1;
  LOOM_TRY(group_param(n, 1, groups, k, r + 1, &scale));
  LOOM_TRY(group_param(n, 2, groups, k, r + 1, &bias));
  LOOM_TRY(loom_mul(g, y, scale, &y));
  LOOM_TRY(loom_add(g, y, bias, &y));
  return loom_reshape(g, y, r, xd, &n->out[0]);
}

/* ---- LRN ------------------------------------------------------------------------ */

/* y = x / (bias + alpha / size * square_sum)^beta, square_sum over the
 * channels c - floor((size-1)/2) .. c + ceil((size-1)/2): alpha times an
 * average pool of x^2 viewed as (N, 1, C, d1*d2*...), padded with zeros
 * that count. */
loom_status_t ox_lrn(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  loom_graph_t *g = n->g;
  loom_value_t x = n->in[0];
  LOOM_TRY(need_float(n, x));
  loom_dim_t xd[LOOM_MAX_RANK];
  int r;
  LOOM_TRY(ox_dims(n, x, xd, &r));
  if (r < 2) return ox_fail(n, LOOM_ERR_SHAPE, "input of rank %d (needs (N, C, ...))", r);
  int64_t size = ox_int(n, "size", 0);
  if (size < 1) return ox_fail(n, LOOM_ERR_INVALID, "size %lld (needs a positive size)",
                               (long long)size);
  loom_dim_t view[4] = {xd[0], 1, xd[1], 1};
  for (int d = 2; d < r; d++) LOOM_TRY(loom_dim_mul(g, view[3], xd[d], &view[3]));
  loom_pool_params_t p = {.kernel = {size, 1}, .stride = {1, 1},
                          .pads = {(size - 1) / 2, 0, size / 2, 0}, .count_include_pad = 1};
  loom_value_t sq, avg, a, b, base, beta, y;
  LOOM_TRY(loom_mul(g, x, x, &sq));
  LOOM_TRY(loom_reshape(g, sq, 4, view, &sq));
  LOOM_TRY(loom_avg_pool2d(g, sq, &p, &avg));
  LOOM_TRY(loom_reshape(g, avg, r, xd, &avg));
  LOOM_TRY(ox_like(n, x, ox_float(n, "alpha", 1e-4), &a));
  LOOM_TRY(ox_like(n, x, ox_float(n, "bias", 1.0), &b));
  LOOM_TRY(ox_like(n, x, ox_float(n, "beta", 0.75), &beta));
  LOOM_TRY(loom_mul(g, avg, a, &base));
  LOOM_TRY(loom_add(g, base, b, &base));
  LOOM_TRY(loom_pow(g, base, beta, &base));
  LOOM_TRY(loom_div(g, x, base, &y));
  n->out[0] = y;
  return LOOM_OK;
}

/* ---- MeanVarianceNormalization -------------------------------------------------- */

/* (x - mean) / (sqrt(population variance) + 1e-9) over axes (default
 * 0, 2, 3), the epsilon where ONNX's function body adds it. */
loom_status_t ox_mvn(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  loom_graph_t *g = n->g;
  loom_value_t x = n->in[0];
  LOOM_TRY(need_float(n, x));
  int r = ox_rank(n, x), count;
  static const int64_t dflt[3] = {0, 2, 3};
  const int64_t *given = ox_ints(n, "axes", &count);
  const int64_t *from = given ? given : dflt;
  if (!given) count = 3;
  if (count > r) return ox_fail(n, LOOM_ERR_AXIS, "%d axes for rank %d", count, r);
  int64_t axes[LOOM_MAX_RANK];
  for (int i = 0; i < count; i++) LOOM_TRY(ox_axis(n, from[i], r, "axis", &axes[i]));
  loom_value_t mean, var, std, e, c;
  LOOM_TRY(loom_mean(g, x, count, axes, 1, &mean));
  LOOM_TRY(loom_variance(g, x, count, axes, 1, 0, &var));
  LOOM_TRY(loom_sqrt(g, var, &std));
  LOOM_TRY(ox_like(n, x, 1e-9, &e));
  LOOM_TRY(loom_add(g, std, e, &std));
  LOOM_TRY(loom_sub(g, x, mean, &c));
  return loom_div(g, c, std, &n->out[0]);
}
