/* Rules for ONNX's contractions, convolutions, pools and normalizations:
 * auto_pad and ceil_mode become explicit pads, 1-D convolutions and pools
 * run as 2-D ones of height 1, and the opset-13 change of Softmax's axis
 * is kept. 3-D windows and MaxPool's Indices are rules_conv3d.c's. */
#include <math.h>
#include <string.h>

#include "frontend/onnx/onnx_import.h"

loom_status_t ox_matmul(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  LOOM_TRY(ox_need(n, 1));
  return loom_matmul(n->g, n->in[0], n->in[1], 0, 0, &n->out[0]);
}

loom_status_t ox_gemm(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  LOOM_TRY(ox_need(n, 1));
  loom_graph_t *g = n->g;
  double alpha = ox_float(n, "alpha", 1.0), beta = ox_float(n, "beta", 1.0);
  loom_value_t y, s;
  LOOM_TRY(loom_matmul(g, n->in[0], n->in[1], (int)ox_int(n, "transA", 0),
                       (int)ox_int(n, "transB", 0), &y));
  if (alpha != 1.0) {
    LOOM_TRY(ox_like(n, y, alpha, &s));
    LOOM_TRY(loom_mul(g, y, s, &y));
  }
  if (ox_has(n, 2) && beta != 0.0) {
    loom_value_t c = n->in[2];
    if (beta != 1.0) {
      LOOM_TRY(ox_like(n, c, beta, &s));
      LOOM_TRY(loom_mul(g, c, s, &c));
    }
    LOOM_TRY(loom_add(g, y, c, &y));
  }
  n->out[0] = y;
  return LOOM_OK;
}

/* ---- Windows: convolutions and pools ----------------------------------------- */

/* A window op's geometry over its spatial dims (1 or 2 of them, as 2). */
typedef struct window {
  int spatial;          /* 1 or 2 in the model */
  int64_t in[2], kernel[2], stride[2], dilation[2], pads[4]; /* pads: t, l, b, r */
} window_t;

static loom_status_t read_window(ox_node_t *n, const loom_dim_t *xd, int rank, const int64_t *k,
                                 window_t *w) {
  w->spatial = rank - 2;
  if (w->spatial < 1 || w->spatial > 2)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%d spatial dims (1 and 2 are supported)", w->spatial);
  int s = w->spatial;
  const int64_t *strides, *dil, *pads;
  LOOM_TRY(ox_window_attrs(n, s, &strides, &dil, &pads));
  memset(w->pads, 0, sizeof w->pads);
  /* A 1-D window runs as 2-D with height 1: its dim is the second. */
  int off = 2 - s;
  for (int d = 0; d < 2; d++) {
    w->in[d] = 1;
    w->kernel[d] = w->stride[d] = w->dilation[d] = 1;
  }
  for (int d = 0; d < s; d++) {
    w->in[off + d] = xd[2 + d];
    w->kernel[off + d] = k[d];
    w->stride[off + d] = strides ? strides[d] : 1;
    w->dilation[off + d] = dil ? dil[d] : 1;
    if (pads) {
      w->pads[off + d] = pads[d];
      w->pads[2 + off + d] = pads[s + d];
    }
    if (w->kernel[off + d] < 1 || w->stride[off + d] < 1 || w->dilation[off + d] < 1)
      return ox_fail(n, LOOM_ERR_SHAPE, "kernel, stride and dilation must be >= 1");
  }
  char buf[32];
  const char *ap = ox_string(n, "auto_pad", "NOTSET", buf, sizeof buf);
  if (!strcmp(ap, "VALID")) memset(w->pads, 0, sizeof w->pads);
  else if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
    for (int d = 0; d < 2; d++) {
      /* At stride 1 the padding is the window's extent less 1, whatever
       * the size: a symbolic dim needs a stride of 1. */
      int64_t total = (w->kernel[d] - 1) * w->dilation[d];
      if (w->stride[d] > 1 && ox_is_dim_sym(w->in[d]))
        return ox_fail(n, LOOM_ERR_UNSUPPORTED, "auto_pad %s with stride %lld on a symbolic "
                       "dim (the padding depends on its size)", ap, (long long)w->stride[d]);
      if (w->stride[d] > 1) {
        int64_t out = (w->in[d] + w->stride[d] - 1) / w->stride[d];
        total = (out - 1) * w->stride[d] + total + 1 - w->in[d];
      }
      if (total < 0) total = 0;
      int64_t small = total / 2;
      w->pads[d] = ap[5] == 'U' ? small : total - small;
      w->pads[2 + d] = total - w->pads[d];
    }
  } else if (strcmp(ap, "NOTSET")) {
    return ox_fail(n, LOOM_ERR_INVALID, "auto_pad '%s'", ap);
  }
  return LOOM_OK;
}

/* x viewed as 4-D (a 1-D window's input gets a height of 1). */
static loom_status_t as_4d(ox_node_t *n, const window_t *w, loom_value_t x, loom_value_t *out) {
  if (w->spatial == 2) {
    *out = x;
    return LOOM_OK;
  }
  int64_t axis = 2;
  return loom_unsqueeze(n->g, x, 1, &axis, out);
}

static loom_status_t from_4d(ox_node_t *n, const window_t *w, loom_value_t y, loom_value_t *out) {
  if (w->spatial == 2) {
    *out = y;
    return LOOM_OK;
  }
  int64_t axis = 2;
  return loom_squeeze(n->g, y, 1, &axis, out);
}

static loom_status_t conv_common(ox_node_t *n, int transpose) {
  LOOM_TRY(ox_need(n, 0));
  LOOM_TRY(ox_need(n, 1));
  loom_graph_t *g = n->g;
  loom_dim_t xd[LOOM_MAX_RANK], wd[LOOM_MAX_RANK];
  int rank, wrank;
  LOOM_TRY(ox_dims(n, n->in[0], xd, &rank));
  if (rank == 5) return transpose ? ox_conv_transpose3d(n) : ox_conv3d(n);
  LOOM_TRY(ox_dims(n, n->in[1], wd, &wrank));
  if (wrank != rank) return ox_fail(n, LOOM_ERR_SHAPE, "weight rank %d, input rank %d", wrank, rank);
  for (int d = 2; d < rank; d++)
    if (wd[d] < 0) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "a symbolic kernel size");
  window_t w;
  int64_t k[2] = {wd[2], rank > 3 ? wd[3] : 1};
  LOOM_TRY(read_window(n, xd, rank, k, &w));
  loom_conv_params_t p = {.groups = ox_int(n, "group", 1)};
  /* The C API reads a group of 0 as 1. */
  if (p.groups < 1)
    return ox_fail(n, LOOM_ERR_INVALID, "group is %lld (it must be at least 1)",
                   (long long)p.groups);
  for (int d = 0; d < 2; d++) {
    p.stride[d] = w.stride[d];
    p.dilation[d] = w.dilation[d];
  }
  ox_copy(p.pads, w.pads, sizeof p.pads);
  if (transpose) {
    int c, off = 2 - w.spatial;
    const int64_t *op = ox_ints(n, "output_padding", &c);
    for (int d = 0; op && d < w.spatial && d < c; d++) p.output_padding[off + d] = op[d];
    const int64_t *os = ox_ints(n, "output_shape", &c);
    char buf[32];
    const char *ap = ox_string(n, "auto_pad", "NOTSET", buf, sizeof buf);
    int same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER");
    if (os || same) {
      if (os && c != w.spatial)
        return ox_fail(n, LOOM_ERR_SHAPE, "output_shape has %d entries for %d dims", c, w.spatial);
      for (int d = 0; d < w.spatial; d++) {
        int a = off + d;
        int64_t want = os ? os[d] : w.in[a] * w.stride[a];
        int64_t total = w.stride[a] * (w.in[a] - 1) + p.output_padding[a] +
                        (w.kernel[a] - 1) * w.dilation[a] + 1 - want;
        if (total < 0) {
          p.output_padding[a] -= total;
          total = 0;
        }
        int64_t half = total / 2;
        p.pads[a] = !strcmp(ap, "SAME_UPPER") ? half : total - half;
        p.pads[2 + a] = total - p.pads[a];
      }
    }
  }
  loom_value_t x, wt, y, bias = {.id = -1};
  LOOM_TRY(as_4d(n, &w, n->in[0], &x));
  LOOM_TRY(as_4d(n, &w, n->in[1], &wt));
  if (ox_has(n, 2)) bias = n->in[2];
  LOOM_TRY(transpose ? loom_conv_transpose2d(g, x, wt, ox_has(n, 2), bias, &p, &y)
                     : loom_conv2d(g, x, wt, ox_has(n, 2), bias, &p, &y));
  return from_4d(n, &w, y, &n->out[0]);
}

loom_status_t ox_conv(ox_node_t *n) { return conv_common(n, 0); }
loom_status_t ox_conv_transpose(ox_node_t *n) { return conv_common(n, 1); }

/* Pads wider than half the kernel (which ONNX allows and Loom's pools do
 * not): padded explicitly, with -inf for max; for average, the sum over the
 * window divided by the count of the window's input elements, or by its
 * size when count_include_pad. */
static loom_status_t wide_pads_pool(ox_node_t *n, loom_value_t x, const loom_pool_params_t *p,
                                    int max, loom_value_t *out) {
  loom_graph_t *g = n->g;
  int64_t pads[8] = {0, 0, p->pads[0], p->pads[1], 0, 0, p->pads[2], p->pads[3]};
  loom_pool_params_t q = *p;
  memset(q.pads, 0, sizeof q.pads);
  q.count_include_pad = 1;
  loom_value_t xp;
  LOOM_TRY(loom_pad(g, x, pads, LOOM_PAD_CONSTANT, max ? -INFINITY : 0.0, &xp));
  if (max) return loom_max_pool2d(g, xp, &q, out);
  LOOM_TRY(loom_avg_pool2d(g, xp, &q, out));
  if (p->count_include_pad) return LOOM_OK;
  loom_dim_t dims[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_dims(n, x, dims, &rank));
  loom_value_t ones, mask, share;
  LOOM_TRY(loom_full(g, rank, dims, 1.0, ox_dtype(n, x), &ones));
  LOOM_TRY(loom_pad(g, ones, pads, LOOM_PAD_CONSTANT, 0.0, &mask));
  LOOM_TRY(loom_avg_pool2d(g, mask, &q, &share));
  return loom_div(g, *out, share, out);
}

static loom_status_t pool_common(ox_node_t *n, int max) {
  LOOM_TRY(ox_need(n, 0));
  if (max && n->n_out > 1 && n->proto->output[1] && *n->proto->output[1])
    return ox_max_pool_indices(n);
  loom_dim_t xd[LOOM_MAX_RANK];
  int rank, c;
  LOOM_TRY(ox_dims(n, n->in[0], xd, &rank));
  if (rank == 5) return ox_pool3d(n, max);
  const int64_t *ks = ox_ints(n, "kernel_shape", &c);
  if (!ks || c != rank - 2)
    return ox_fail(n, LOOM_ERR_SHAPE, "kernel_shape has %d entries for rank %d", c, rank);
  window_t w;
  LOOM_TRY(read_window(n, xd, rank, ks, &w));
  if (!max && (w.dilation[0] != 1 || w.dilation[1] != 1))
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "dilated average pooling");
  int count_pad = (int)ox_int(n, "count_include_pad", 0);
  int64_t model_pads[4];
  memcpy(model_pads, w.pads, sizeof model_pads);
  if (ox_int(n, "ceil_mode", 0)) {
    /* Extra end padding so that the last partial window counts, as long as
     * it starts inside the input or its begin padding. */
    for (int d = 0; d < 2; d++) {
      int64_t span = (w.kernel[d] - 1) * w.dilation[d] + 1;
      if (w.in[d] < 0) {
        /* Over a symbolic size, stride - 1 more at the end gives the
         * rounded-up count for every size, and no window reads past what
         * the exact padding would hold; that last window always starts
         * inside when end pad + stride <= span. An average counting pads
         * would count the extra ones. */
        if (w.pads[2 + d] + w.stride[d] > span || (!max && count_pad))
          return ox_fail(n, LOOM_ERR_UNSUPPORTED, "ceil_mode on symbolic axis %d with %s", d,
                         !max && count_pad ? "count_include_pad"
                                           : "an end pad and stride that pass the window");
        w.pads[2 + d] += w.stride[d] - 1;
        continue;
      }
      int64_t len = w.in[d] + w.pads[d] + w.pads[2 + d] - span;
      int64_t out = (len + w.stride[d] - 1) / w.stride[d] + 1;
      if ((out - 1) * w.stride[d] >= w.in[d] + w.pads[d]) out--;
      int64_t need = (out - 1) * w.stride[d] + span - (w.in[d] + w.pads[d] + w.pads[2 + d]);
      if (need > 0) w.pads[2 + d] += need;
    }
  }
  loom_pool_params_t p = {.count_include_pad = count_pad};
  for (int d = 0; d < 2; d++) {
    p.kernel[d] = w.kernel[d];
    p.stride[d] = w.stride[d];
    p.dilation[d] = w.dilation[d];
  }
  ox_copy(p.pads, w.pads, sizeof p.pads);
  loom_value_t x, y;
  LOOM_TRY(as_4d(n, &w, n->in[0], &x));
  if (!max && count_pad && memcmp(model_pads, w.pads, sizeof model_pads)) {
    /* The windows ceil_mode adds end past the model's padding, and count
     * only what lies inside it (ONNX Runtime and PyTorch divide the last
     * window of a 3-wide pool at stride 2 over 8 + 2 pads by 6): the
     * model's pads become zeros of the input, and the pool counts the
     * padded input's elements, not ceil_mode's extra ones. */
    int64_t pads[8] = {0, 0, model_pads[0], model_pads[1], 0, 0, model_pads[2], model_pads[3]};
    LOOM_TRY(loom_pad(n->g, x, pads, LOOM_PAD_CONSTANT, 0.0, &x));
    for (int i = 0; i < 4; i++) p.pads[i] = w.pads[i] - model_pads[i];
    p.count_include_pad = 0;
  }
  loom_dtype_t dt = ox_dtype(n, x);
  int is_int = !ox_is_float(dt);
  if (is_int) LOOM_TRY(loom_cast(n->g, x, LOOM_F64, &x)); /* exact for any i32 */
  int wide = 0;
  for (int i = 0; i < 4; i++) wide |= p.pads[i] > p.kernel[i % 2] / 2;
  LOOM_TRY(wide ? wide_pads_pool(n, x, &p, max, &y)
                : max ? loom_max_pool2d(n->g, x, &p, &y) : loom_avg_pool2d(n->g, x, &p, &y));
  if (is_int) LOOM_TRY(loom_cast(n->g, y, dt, &y));
  return from_4d(n, &w, y, &n->out[0]);
}

loom_status_t ox_max_pool(ox_node_t *n) { return pool_common(n, 1); }
loom_status_t ox_average_pool(ox_node_t *n) { return pool_common(n, 0); }

static loom_status_t global_pool(ox_node_t *n, int max) {
  LOOM_TRY(ox_need(n, 0));
  int rank = ox_rank(n, n->in[0]);
  if (rank < 3) return ox_fail(n, LOOM_ERR_SHAPE, "needs rank 3 or more, not %d", rank);
  int64_t axes[LOOM_MAX_RANK];
  for (int d = 2; d < rank; d++) axes[d - 2] = d;
  return max ? loom_max(n->g, n->in[0], rank - 2, axes, 1, &n->out[0])
             : loom_mean(n->g, n->in[0], rank - 2, axes, 1, &n->out[0]);
}

loom_status_t ox_global_average_pool(ox_node_t *n) { return global_pool(n, 0); }
loom_status_t ox_global_max_pool(ox_node_t *n) { return global_pool(n, 1); }

/* ---- Normalizations ------------------------------------------------------------ */

/* v (C) shaped (C, 1, ...) to broadcast against (N, C, d...) of rank r. */
static loom_status_t per_channel(ox_node_t *n, loom_value_t v, int r, loom_value_t *out) {
  int64_t axes[LOOM_MAX_RANK];
  for (int k = 0; k < r - 2; k++) axes[k] = k + 1;
  return r > 2 ? loom_unsqueeze(n->g, v, r - 2, axes, out) : loom_identity(n->g, v, out);
}

/* (x - mean) / sqrt(var + eps) * scale + bias, scale and bias per channel. */
static loom_status_t normalize(ox_node_t *n, loom_value_t x, loom_value_t mean, loom_value_t var,
                               double eps, loom_value_t *out) {
  loom_graph_t *g = n->g;
  int r = ox_rank(n, x);
  loom_value_t e, ve, inv, c, y, s, b;
  LOOM_TRY(ox_like(n, var, eps, &e));
  LOOM_TRY(loom_add(g, var, e, &ve));
  LOOM_TRY(loom_rsqrt(g, ve, &inv));
  LOOM_TRY(loom_sub(g, x, mean, &c));
  LOOM_TRY(loom_mul(g, c, inv, &y));
  LOOM_TRY(per_channel(n, n->in[1], r, &s));
  LOOM_TRY(per_channel(n, n->in[2], r, &b));
  LOOM_TRY(loom_mul(g, y, s, &y));
  return loom_add(g, y, b, out);
}

loom_status_t ox_batch_norm(ox_node_t *n) {
  for (int i = 0; i < 5; i++) LOOM_TRY(ox_need(n, i));
  loom_graph_t *g = n->g;
  double eps = ox_float(n, "epsilon", 1e-5), momentum = ox_float(n, "momentum", 0.9);
  int training = n->opset >= 14 ? (int)ox_int(n, "training_mode", 0) : 0;
  if (!training) {
    loom_value_t nm, nv;
    return loom_batch_norm(g, n->in[0], n->in[1], n->in[2], n->in[3], n->in[4], eps, 0.1, 0,
                           &n->out[0], &nm, &nv);
  }
  /* Training: the batch's statistics (population variance, as ONNX says),
   * and running ones that weight the old by momentum. */
  int r = ox_rank(n, n->in[0]);
  int64_t axes[LOOM_MAX_RANK];
  int na = 0;
  for (int d = 0; d < r; d++)
    if (d != 1) axes[na++] = d;
  loom_value_t mean, var, mk, vk, m, one_m, a, b;
  LOOM_TRY(loom_mean(g, n->in[0], na, axes, 0, &mean));
  LOOM_TRY(loom_variance(g, n->in[0], na, axes, 0, 0, &var));
  LOOM_TRY(per_channel(n, mean, r, &mk));
  LOOM_TRY(per_channel(n, var, r, &vk));
  LOOM_TRY(normalize(n, n->in[0], mk, vk, eps, &n->out[0]));
  LOOM_TRY(ox_like(n, mean, momentum, &m));
  LOOM_TRY(ox_like(n, mean, 1 - momentum, &one_m));
  LOOM_TRY(loom_mul(g, n->in[3], m, &a));
  LOOM_TRY(loom_mul(g, mean, one_m, &b));
  loom_value_t run_mean, run_var;
  LOOM_TRY(loom_add(g, a, b, &run_mean));
  LOOM_TRY(loom_mul(g, n->in[4], m, &a));
  LOOM_TRY(loom_mul(g, var, one_m, &b));
  LOOM_TRY(loom_add(g, a, b, &run_var));
  ox_set(n, 1, run_mean);
  return ox_set(n, 2, run_var);
}

loom_status_t ox_instance_norm(ox_node_t *n) {
  for (int i = 0; i < 3; i++) LOOM_TRY(ox_need(n, i));
  int r = ox_rank(n, n->in[0]);
  if (r < 3) return ox_fail(n, LOOM_ERR_SHAPE, "needs rank 3 or more, not %d", r);
  int64_t axes[LOOM_MAX_RANK];
  for (int d = 2; d < r; d++) axes[d - 2] = d;
  loom_value_t mean, var;
  LOOM_TRY(loom_mean(n->g, n->in[0], r - 2, axes, 1, &mean));
  LOOM_TRY(loom_variance(n->g, n->in[0], r - 2, axes, 1, 0, &var));
  return normalize(n, n->in[0], mean, var, ox_float(n, "epsilon", 1e-5), &n->out[0]);
}

/* Y, and the optional Mean and InvStdDev outputs (kept dims of size 1). */
loom_status_t ox_layer_norm(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  LOOM_TRY(ox_need(n, 1));
  loom_graph_t *g = n->g;
  int r = ox_rank(n, n->in[0]);
  int64_t axis;
  LOOM_TRY(ox_axis(n, ox_int(n, "axis", -1), r, "axis", &axis));
  double eps = ox_float(n, "epsilon", 1e-5);
  int64_t axes[LOOM_MAX_RANK];
  for (int d = (int)axis; d < r; d++) axes[d - axis] = d;
  loom_value_t mean, var, e, ve, inv, c, y;
  LOOM_TRY(loom_mean(g, n->in[0], r - (int)axis, axes, 1, &mean));
  LOOM_TRY(loom_variance(g, n->in[0], r - (int)axis, axes, 1, 0, &var));
  LOOM_TRY(ox_like(n, var, eps, &e));
  LOOM_TRY(loom_add(g, var, e, &ve));
  LOOM_TRY(loom_rsqrt(g, ve, &inv));
  LOOM_TRY(loom_sub(g, n->in[0], mean, &c));
  LOOM_TRY(loom_mul(g, c, inv, &y));
  LOOM_TRY(loom_mul(g, y, n->in[1], &y));
  if (ox_has(n, 2)) LOOM_TRY(loom_add(g, y, n->in[2], &y));
  n->out[0] = y;
  ox_set(n, 1, mean);
  ox_set(n, 2, inv);
  return LOOM_OK;
}

/* Before opset 13 these work on x flattened to 2-D at axis (default 1);
 * from 13 along one axis (default -1). */
static loom_status_t along_axis(ox_node_t *n,
                                loom_status_t (*fn)(ox_node_t *, loom_value_t, int64_t,
                                                    loom_value_t *)) {
  LOOM_TRY(ox_need(n, 0));
  loom_dim_t dims[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_dims(n, n->in[0], dims, &rank));
  if (n->opset >= 13) {
    int64_t axis;
    LOOM_TRY(ox_axis(n, ox_int(n, "axis", -1), rank, "axis", &axis));
    return fn(n, n->in[0], axis, &n->out[0]);
  }
  int64_t axis = ox_int(n, "axis", 1);
  if (axis < -rank || axis > rank) return ox_fail(n, LOOM_ERR_AXIS, "axis %lld", (long long)axis);
  if (axis < 0) axis += rank;
  loom_dim_t two[2] = {1, 1};
  for (int d = 0; d < rank; d++) LOOM_TRY(loom_dim_mul(n->g, two[d >= axis], dims[d], &two[d >= axis]));
  loom_value_t flat, y;
  LOOM_TRY(loom_reshape(n->g, n->in[0], 2, two, &flat));
  LOOM_TRY(fn(n, flat, 1, &y));
  return loom_reshape(n->g, y, rank, dims, &n->out[0]);
}

static loom_status_t softmax_fn(ox_node_t *n, loom_value_t x, int64_t axis, loom_value_t *out) {
  return loom_softmax(n->g, x, axis, out);
}
static loom_status_t log_softmax_fn(ox_node_t *n, loom_value_t x, int64_t axis, loom_value_t *out) {
  return loom_log_softmax(n->g, x, axis, out);
}
/* 1 at the first maximum along axis, 0 elsewhere. */
static loom_status_t hardmax_fn(ox_node_t *n, loom_value_t x, int64_t axis, loom_value_t *out) {
  loom_dim_t dims[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_dims(n, x, dims, &rank));
  if (dims[axis] < 0) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "a symbolic axis");
  loom_value_t am, pos, hot;
  LOOM_TRY(loom_argmax(n->g, x, 1, axis, 1, &am));
  LOOM_TRY(loom_arange(n->g, 0, (double)dims[axis], 1, LOOM_I64, &pos));
  loom_dim_t shape[LOOM_MAX_RANK];
  for (int d = 0; d < rank; d++) shape[d] = d == axis ? dims[axis] : 1;
  LOOM_TRY(loom_reshape(n->g, pos, rank, shape, &pos));
  LOOM_TRY(loom_eq(n->g, am, pos, &hot));
  return loom_cast(n->g, hot, ox_dtype(n, x), out);
}

loom_status_t ox_softmax(ox_node_t *n) { return along_axis(n, softmax_fn); }
loom_status_t ox_log_softmax(ox_node_t *n) { return along_axis(n, log_softmax_fn); }
loom_status_t ox_hardmax(ox_node_t *n) { return along_axis(n, hardmax_fn); }
