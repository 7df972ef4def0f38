/* 3-D convolutions and pools, and MaxPool's Indices, built from Loom's 2-D
 * windows (its op table has no 3-D ones). The depth taps of each output
 * slice are gathered at constant indices and moved into channels (Conv),
 * reduced at once (pools) or summed after the 2-D op (ConvTranspose); the
 * 2-D op does height and width. Indices gathers whole windows. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx/onnx_import.h"

/* A window's geometry as (D, H, W); a model with fewer spatial dims has
 * them last, the leading ones of size 1. */
typedef struct win3 {
  int spatial;                                       /* in the model: 1 to 3 */
  int64_t in[3], kernel[3], stride[3], dilation[3];
  int64_t pads[6];                                   /* begins, then ends */
  int64_t out[3];
} win3_t;

/* Strides, dilations, pads and (unless transpose, whose SAME pads depend
 * on the output) auto_pad; spatial dims must be known. */
static loom_status_t read_win3(ox_node_t *n, const loom_dim_t *xd, int rank, const int64_t *k,
                               int transpose, win3_t *w) {
  int s = w->spatial = rank - 2;
  if (s < 1 || s > 3)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%d spatial dims (1 to 3 are supported)", s);
  const int64_t *strides, *dil, *pads;
  LOOM_TRY(ox_window_attrs(n, s, &strides, &dil, &pads));
  int off = 3 - s;
  for (int d = 0; d < 3; d++) {
    int m = d - off; /* the model's spatial dim, or < 0 */
    w->in[d] = m < 0 ? 1 : xd[2 + m];
    w->kernel[d] = m < 0 ? 1 : k[m];
    w->stride[d] = m >= 0 && strides ? strides[m] : 1;
    w->dilation[d] = m >= 0 && dil ? dil[m] : 1;
    w->pads[d] = m >= 0 && pads ? pads[m] : 0;
    w->pads[3 + d] = m >= 0 && pads ? pads[s + m] : 0;
    if (w->in[d] < 0) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "a symbolic spatial dim");
    if (w->kernel[d] < 1 || w->stride[d] < 1 || w->dilation[d] < 1)
      return ox_fail(n, LOOM_ERR_SHAPE, "kernel, stride and dilation must be >= 1");
    if (w->pads[d] < 0 || w->pads[3 + d] < 0) return ox_fail(n, LOOM_ERR_SHAPE, "negative pads");
  }
  char buf[32];
  const char *ap = ox_string(n, "auto_pad", "NOTSET", buf, sizeof buf);
  int upper = !strcmp(ap, "SAME_UPPER");
  if (!strcmp(ap, "VALID")) {
    memset(w->pads, 0, sizeof w->pads);
  } else if (upper || !strcmp(ap, "SAME_LOWER")) {
    for (int d = 0; d < 3 && !transpose; d++) {
      int64_t out = (w->in[d] + w->stride[d] - 1) / w->stride[d];
      int64_t total = (out - 1) * w->stride[d] + (w->kernel[d] - 1) * w->dilation[d] + 1 - w->in[d];
      if (total < 0) total = 0;
      w->pads[d] = upper ? total / 2 : total - total / 2;
      w->pads[3 + d] = total - w->pads[d];
    }
  } else if (strcmp(ap, "NOTSET")) {
    return ox_fail(n, LOOM_ERR_INVALID, "auto_pad '%s'", ap);
  }
  return LOOM_OK;
}

static int64_t span(const win3_t *w, int d) { return (w->kernel[d] - 1) * w->dilation[d] + 1; }

/* Output sizes of a convolution or pool; ceil_mode adds end padding so
 * that a last partial window counts when it starts inside the input or
 * its begin padding. */
static loom_status_t window_out(ox_node_t *n, win3_t *w, int ceil_mode) {
  for (int d = 0; d < 3; d++) {
    int64_t len = w->in[d] + w->pads[d] + w->pads[3 + d] - span(w, d);
    if (len < 0) return ox_fail(n, LOOM_ERR_SHAPE, "the window is larger than the padded input");
    w->out[d] = (ceil_mode ? len + w->stride[d] - 1 : len) / w->stride[d] + 1;
    if (ceil_mode && (w->out[d] - 1) * w->stride[d] >= w->in[d] + w->pads[d]) w->out[d]--;
    int64_t need = (w->out[d] - 1) * w->stride[d] + span(w, d) -
                   (w->in[d] + w->pads[d] + w->pads[3 + d]);
    if (need > 0) w->pads[3 + d] += need;
  }
  return LOOM_OK;
}

/* A constant i64 table of the given shape. */
static loom_status_t i64_table(ox_node_t *n, int rank, const loom_dim_t *shape, const int64_t *v,
                               loom_value_t *out) {
  int64_t count = 1;
  for (int d = 0; d < rank; d++) count *= shape[d];
  LOOM_TRY(ox_vector_i64(n, (int)count, v, out));
  return rank == 1 ? LOOM_OK : loom_reshape(n->g, *out, rank, shape, out);
}

/* x (N, C, D, ...) padded with value along D as w says, then the depth
 * taps of each output slice gathered: (N, C, Do, KD, ...). */
static loom_status_t depth_taps(ox_node_t *n, loom_value_t x, const win3_t *w, double value,
                                loom_value_t *out) {
  int rank = ox_rank(n, x);
  if (w->pads[0] || w->pads[3]) {
    int64_t pads[2 * LOOM_MAX_RANK] = {0};
    pads[2] = w->pads[0];
    pads[rank + 2] = w->pads[3];
    LOOM_TRY(loom_pad(n->g, x, pads, LOOM_PAD_CONSTANT, value, &x));
  }
  int64_t *idx = malloc(sizeof *idx * (size_t)(w->out[0] * w->kernel[0]));
  if (!idx) return ox_fail(n, LOOM_ERR_NOMEM, "out of memory");
  for (int64_t o = 0; o < w->out[0]; o++)
    for (int64_t k = 0; k < w->kernel[0]; k++)
      idx[o * w->kernel[0] + k] = o * w->stride[0] + k * w->dilation[0];
  loom_dim_t shape[2] = {w->out[0], w->kernel[0]};
  loom_value_t iv;
  loom_status_t st = i64_table(n, 2, shape, idx, &iv);
  free(idx);
  LOOM_TRY(st);
  return loom_gather(n->g, x, iv, 2, out);
}

/* The 2-D parameters of w's height and width. */
static void hw_conv_params(const win3_t *w, int64_t groups, loom_conv_params_t *p) {
  memset(p, 0, sizeof *p);
  p->groups = groups;
  for (int d = 0; d < 2; d++) {
    p->stride[d] = w->stride[1 + d];
    p->dilation[d] = w->dilation[1 + d];
    p->pads[d] = w->pads[1 + d];
    p->pads[2 + d] = w->pads[4 + d];
  }
}

/* The checks and sizes both convolutions share: x (N, C, D, H, W) and a
 * weight with known kernel and channel dims. */
static loom_status_t conv_shapes(ox_node_t *n, loom_dim_t *xd, loom_dim_t *wd, int64_t *groups) {
  LOOM_TRY(ox_need(n, 0));
  LOOM_TRY(ox_need(n, 1));
  int rank, wrank;
  LOOM_TRY(ox_dims(n, n->in[0], xd, &rank));
  LOOM_TRY(ox_dims(n, n->in[1], wd, &wrank));
  if (rank != 5 || wrank != 5)
    return ox_fail(n, LOOM_ERR_SHAPE, "input rank %d and weight rank %d (5 for 3-D)", rank, wrank);
  for (int d = 0; d < 5; d++)
    if (wd[d] < 0) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "a symbolic weight dim");
  *groups = ox_int(n, "group", 1);
  if (*groups < 1) return ox_fail(n, LOOM_ERR_INVALID, "group %lld", (long long)*groups);
  return LOOM_OK;
}

/* Conv: the depth taps join the channels, inside each group,
 * (N, C, Do, KD, H, W) -> (N*Do, G*KD*C/G, H, W), and the weight
 * (M, C/G, KD, KH, KW) -> (M, KD*C/G, KH, KW): one 2-D convolution. */
loom_status_t ox_conv3d(ox_node_t *n) {
  loom_graph_t *g = n->g;
  loom_dim_t xd[LOOM_MAX_RANK], wd[LOOM_MAX_RANK];
  int64_t G;
  LOOM_TRY(conv_shapes(n, xd, wd, &G));
  int64_t M = wd[0], Cg = wd[1], KD = wd[2];
  if (M % G) return ox_fail(n, LOOM_ERR_SHAPE, "%lld filters in %lld groups", (long long)M, (long long)G);
  if (xd[1] >= 0 && xd[1] != Cg * G)
    return ox_fail(n, LOOM_ERR_SHAPE, "%lld input channels, the weight wants %lld",
                   (long long)xd[1], (long long)(Cg * G));
  win3_t w;
  LOOM_TRY(read_win3(n, xd, 5, wd + 2, 0, &w));
  LOOM_TRY(window_out(n, &w, 0));
  loom_dim_t nd;
  LOOM_TRY(loom_dim_mul(g, xd[0], w.out[0], &nd));
  loom_value_t t, wt, y;
  LOOM_TRY(depth_taps(n, n->in[0], &w, 0.0, &t));
  loom_dim_t split[7] = {xd[0], G, Cg, w.out[0], KD, w.in[1], w.in[2]};
  LOOM_TRY(loom_reshape(g, t, 7, split, &t));
  LOOM_TRY(loom_transpose(g, t, (const int64_t[]){0, 3, 1, 4, 2, 5, 6}, &t));
  LOOM_TRY(loom_reshape(g, t, 4, (const loom_dim_t[]){nd, G * KD * Cg, w.in[1], w.in[2]}, &t));
  LOOM_TRY(loom_transpose(g, n->in[1], (const int64_t[]){0, 2, 1, 3, 4}, &wt));
  LOOM_TRY(loom_reshape(g, wt, 4, (const loom_dim_t[]){M, KD * Cg, wd[3], wd[4]}, &wt));
  loom_conv_params_t p;
  hw_conv_params(&w, G, &p);
  loom_value_t bias = ox_has(n, 2) ? n->in[2] : (loom_value_t){.id = -1};
  LOOM_TRY(loom_conv2d(g, t, wt, ox_has(n, 2), bias, &p, &y));
  LOOM_TRY(loom_reshape(g, y, 5, (const loom_dim_t[]){xd[0], w.out[0], M, w.out[1], w.out[2]}, &y));
  return loom_transpose(g, y, (const int64_t[]){0, 2, 1, 3, 4}, &n->out[0]);
}

/* ConvTranspose's pads and output_padding per dim: from output_shape or
 * SAME auto_pad when given, as ONNX says; then its output sizes. */
static loom_status_t transposed_pads(ox_node_t *n, win3_t *w, int64_t *opad) {
  int c;
  const int64_t *op = ox_ints(n, "output_padding", &c);
  if (op && c != 3) return ox_fail(n, LOOM_ERR_SHAPE, "output_padding has %d entries for 3 dims", c);
  const int64_t *os = ox_ints(n, "output_shape", &c);
  if (os && c != 3) return ox_fail(n, LOOM_ERR_SHAPE, "output_shape has %d entries for 3 dims", c);
  char buf[32];
  const char *ap = ox_string(n, "auto_pad", "NOTSET", buf, sizeof buf);
  int same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER");
  for (int d = 0; d < 3; d++) {
    opad[d] = op ? op[d] : 0;
    if (os || same) {
      int64_t want = os ? os[d] : w->in[d] * w->stride[d];
      int64_t total = w->stride[d] * (w->in[d] - 1) + opad[d] + span(w, d) - want;
      if (total < 0) {
        opad[d] -= total;
        total = 0;
      }
      w->pads[d] = !strcmp(ap, "SAME_UPPER") ? total / 2 : total - total / 2;
      w->pads[3 + d] = total - w->pads[d];
    }
    w->out[d] = w->stride[d] * (w->in[d] - 1) + opad[d] + span(w, d) - w->pads[d] - w->pads[3 + d];
    if (w->out[d] < 1) return ox_fail(n, LOOM_ERR_SHAPE, "pads leave no output");
  }
  return LOOM_OK;
}

/* For ConvTranspose, the (Do, KD) table of where output depth od takes
 * input depth i's tap kd from, in the (D*KD + 1) taps of the 2-D result
 * (index D*KD: a zero slice, for taps no input reaches). */
static loom_status_t depth_scatter_table(ox_node_t *n, const win3_t *w, loom_value_t *out) {
  int64_t D = w->in[0], KD = w->kernel[0], Do = w->out[0];
  int64_t *idx = malloc(sizeof *idx * (size_t)(Do * KD));
  if (!idx) return ox_fail(n, LOOM_ERR_NOMEM, "out of memory");
  for (int64_t o = 0; o < Do; o++)
    for (int64_t k = 0; k < KD; k++) {
      int64_t t = o + w->pads[0] - k * w->dilation[0];
      int hit = t >= 0 && t % w->stride[0] == 0 && t / w->stride[0] < D;
      idx[o * KD + k] = hit ? t / w->stride[0] * KD + k : D * KD;
    }
  loom_status_t st = i64_table(n, 2, (const loom_dim_t[]){Do, KD}, idx, out);
  free(idx);
  return st;
}

/* ConvTranspose: depth joins the batch, (N*D, C, H, W), and every depth
 * tap has its own filters, (C, KD*M/G, KH, KW); each output depth then
 * sums the taps that reach it, gathered. */
loom_status_t ox_conv_transpose3d(ox_node_t *n) {
  loom_graph_t *g = n->g;
  loom_dim_t xd[LOOM_MAX_RANK], wd[LOOM_MAX_RANK];
  int64_t G;
  LOOM_TRY(conv_shapes(n, xd, wd, &G));
  int64_t C = wd[0], Mg = wd[1], KD = wd[2], M = Mg * G;
  if (C % G) return ox_fail(n, LOOM_ERR_SHAPE, "%lld channels in %lld groups", (long long)C, (long long)G);
  win3_t w;
  int64_t opad[3];
  LOOM_TRY(read_win3(n, xd, 5, wd + 2, 1, &w));
  LOOM_TRY(transposed_pads(n, &w, opad));
  int64_t D = w.in[0];
  loom_dim_t nd;
  LOOM_TRY(loom_dim_mul(g, xd[0], D, &nd));
  /* The 2-D result's size before ONNX's pads crop it. */
  int64_t ho = w.out[1], wo = w.out[2];
  loom_value_t x, wt, z, table;
  LOOM_TRY(loom_transpose(g, n->in[0], (const int64_t[]){0, 2, 1, 3, 4}, &x));
  LOOM_TRY(loom_reshape(g, x, 4, (const loom_dim_t[]){nd, C, w.in[1], w.in[2]}, &x));
  LOOM_TRY(loom_transpose(g, n->in[1], (const int64_t[]){0, 2, 1, 3, 4}, &wt));
  LOOM_TRY(loom_reshape(g, wt, 4, (const loom_dim_t[]){C, KD * Mg, wd[3], wd[4]}, &wt));
  loom_conv_params_t p;
  hw_conv_params(&w, G, &p);
  p.output_padding[0] = opad[1];
  p.output_padding[1] = opad[2];
  LOOM_TRY(loom_conv_transpose2d(g, x, wt, 0, (loom_value_t){.id = -1}, &p, &z));
  loom_dim_t split[7] = {xd[0], D, G, KD, Mg, ho, wo};
  LOOM_TRY(loom_reshape(g, z, 7, split, &z));
  LOOM_TRY(loom_transpose(g, z, (const int64_t[]){0, 1, 3, 2, 4, 5, 6}, &z));
  LOOM_TRY(loom_reshape(g, z, 5, (const loom_dim_t[]){xd[0], D * KD, M, ho, wo}, &z));
  int64_t pads[10] = {0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
  LOOM_TRY(loom_pad(g, z, pads, LOOM_PAD_CONSTANT, 0.0, &z));
  LOOM_TRY(depth_scatter_table(n, &w, &table));
  LOOM_TRY(loom_gather(g, z, table, 1, &z));
  LOOM_TRY(loom_sum(g, z, 1, (const int64_t[]){2}, 0, &z));
  LOOM_TRY(loom_transpose(g, z, (const int64_t[]){0, 2, 1, 3, 4}, &z));
  if (ox_has(n, 2)) {
    loom_value_t b;
    LOOM_TRY(loom_reshape(g, n->in[2], 4, (const loom_dim_t[]){M, 1, 1, 1}, &b));
    LOOM_TRY(loom_add(g, z, b, &z));
  }
  n->out[0] = z;
  return LOOM_OK;
}

/* ---- Pools ------------------------------------------------------------------- */

/* A 2-D pool over x's (H, W) with w's height and width geometry; average
 * sums over the zero-padded window and divides by its full size. Pads
 * wider than half the kernel (which Loom's pools refuse) are added
 * explicitly. */
static loom_status_t hw_pool(ox_node_t *n, loom_value_t x, const win3_t *w, int max,
                             loom_value_t *out) {
  loom_pool_params_t p = {.count_include_pad = 1};
  int wide = 0;
  for (int d = 0; d < 2; d++) {
    p.kernel[d] = w->kernel[1 + d];
    p.stride[d] = w->stride[1 + d];
    p.dilation[d] = w->dilation[1 + d];
    p.pads[d] = w->pads[1 + d];
    p.pads[2 + d] = w->pads[4 + d];
    wide |= p.pads[d] > p.kernel[d] / 2 || p.pads[2 + d] > p.kernel[d] / 2;
  }
  if (wide) {
    int64_t pads[8] = {0, 0, p.pads[0], p.pads[1], 0, 0, p.pads[2], p.pads[3]};
    LOOM_TRY(loom_pad(n->g, x, pads, LOOM_PAD_CONSTANT, max ? -INFINITY : 0.0, &x));
    memset(p.pads, 0, sizeof p.pads);
  }
  return max ? loom_max_pool2d(n->g, x, &p, out) : loom_avg_pool2d(n->g, x, &p, out);
}

/* How many of window o's elements along dim d AveragePool divides by: the
 * input's, or with count_include_pad also the pads' (end_pad: the model's,
 * before ceil_mode's). */
static int64_t window_count(const win3_t *w, int d, int64_t o, int64_t end_pad, int include) {
  int64_t start = o * w->stride[d] - w->pads[d], end = start + w->kernel[d];
  int64_t lo = include ? -w->pads[d] : 0, hi = include ? w->in[d] + end_pad : w->in[d];
  return (end < hi ? end : hi) - (start > lo ? start : lo);
}

/* AveragePool's (Do, Ho, Wo) factors that turn hw_pool's means over the
 * full height-width window into ONNX's averages. */
static loom_status_t avg_factors(ox_node_t *n, const win3_t *w, const int64_t *end_pads,
                                 loom_dtype_t dt, loom_value_t *out) {
  int include = (int)ox_int(n, "count_include_pad", 0);
  int64_t count = w->out[0] * w->out[1] * w->out[2];
  double *f = malloc(sizeof *f * (size_t)count);
  if (!f) return ox_fail(n, LOOM_ERR_NOMEM, "out of memory");
  double area = (double)(w->kernel[1] * w->kernel[2]);
  for (int64_t i = 0; i < count; i++) {
    int64_t o[3] = {i / (w->out[1] * w->out[2]), i / w->out[2] % w->out[1], i % w->out[2]};
    int64_t c = 1;
    for (int d = 0; d < 3; d++) c *= window_count(w, d, o[d], end_pads[d], include);
    f[i] = c > 0 ? area / (double)c : 0.0;
  }
  loom_tensor_t *t = NULL;
  loom_status_t st = loom_tensor_from_data(LOOM_F64, 3, w->out, f, sizeof *f * (size_t)count, &t);
  free(f);
  if (st == LOOM_OK) st = loom_graph_constant(n->g, t, out);
  loom_tensor_destroy(t);
  LOOM_TRY(st);
  return dt == LOOM_F64 ? LOOM_OK : loom_cast(n->g, *out, dt, out);
}

/* 3-D pool: the depth window reduced first, (N, C, Do, H, W), then a 2-D
 * pool of (N, C*Do, H, W). */
static loom_status_t pool3d(ox_node_t *n, loom_value_t x, const win3_t *w,
                            const int64_t *end_pads, int max, loom_value_t *out) {
  loom_graph_t *g = n->g;
  loom_dim_t xd[LOOM_MAX_RANK], cd;
  int rank;
  LOOM_TRY(ox_dims(n, x, xd, &rank));
  LOOM_TRY(loom_dim_mul(g, xd[1], w->out[0], &cd));
  loom_value_t t, y;
  const int64_t taps = 3;
  LOOM_TRY(depth_taps(n, x, w, max ? -INFINITY : 0.0, &t));
  LOOM_TRY(max ? loom_max(g, t, 1, &taps, 0, &t) : loom_sum(g, t, 1, &taps, 0, &t));
  LOOM_TRY(loom_reshape(g, t, 4, (const loom_dim_t[]){xd[0], cd, w->in[1], w->in[2]}, &t));
  LOOM_TRY(hw_pool(n, t, w, max, &y));
  LOOM_TRY(loom_reshape(g, y, 5, (const loom_dim_t[]){xd[0], xd[1], w->out[0], w->out[1], w->out[2]}, &y));
  if (max) {
    *out = y;
    return LOOM_OK;
  }
  loom_value_t f;
  LOOM_TRY(avg_factors(n, w, end_pads, ox_dtype(n, x), &f));
  return loom_mul(g, y, f, out);
}

/* ---- MaxPool's Indices ------------------------------------------------------- */

/* For window element k of output o (both flat): where it lies in the
 * flattened padded input (at), its place k in the window or K when it is
 * padding (place), and its input element's flat spatial index, in
 * row-major order or, for storage_order 1, column-major (index). */
typedef struct window_tables {
  int64_t *at, *place, *index;
} window_tables_t;

static void fill_window_tables(const win3_t *w, int col_major, int64_t O, int64_t K,
                               window_tables_t *t) {
  for (int64_t o = 0; o < O; o++)
    for (int64_t k = 0; k < K; k++) {
      int64_t oi[3] = {o / (w->out[1] * w->out[2]), o / w->out[2] % w->out[1], o % w->out[2]};
      int64_t ki[3] = {k / (w->kernel[1] * w->kernel[2]), k / w->kernel[2] % w->kernel[1],
                       k % w->kernel[2]};
      int64_t at = 0, row = 0, col = 0, col_stride = 1;
      int inside = 1;
      for (int d = 0; d < 3; d++) {
        int64_t padded = oi[d] * w->stride[d] + ki[d] * w->dilation[d];
        int64_t x = padded - w->pads[d];
        at = at * (w->in[d] + w->pads[d] + w->pads[3 + d]) + padded;
        inside &= x >= 0 && x < w->in[d];
        row = row * w->in[d] + x;
        col += x * col_stride;
        col_stride *= w->in[d];
      }
      t->at[o * K + k] = at;
      t->place[o * K + k] = inside ? k : K;
      t->index[o * K + k] = inside ? (col_major ? col : row) : 0;
    }
}

/* The tables as constants: at and place (O, K), index (O*K). */
static loom_status_t window_tables(ox_node_t *n, const win3_t *w, loom_value_t *at,
                                   loom_value_t *place, loom_value_t *index) {
  int64_t O = w->out[0] * w->out[1] * w->out[2];
  int64_t K = w->kernel[0] * w->kernel[1] * w->kernel[2];
  if (O * K > INT32_MAX)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%lld window elements for Indices", (long long)(O * K));
  size_t size = sizeof(int64_t) * (size_t)(O * K);
  window_tables_t t = {malloc(size), malloc(size), malloc(size)};
  loom_status_t st = LOOM_OK;
  if (!t.at || !t.place || !t.index) st = ox_fail(n, LOOM_ERR_NOMEM, "out of memory");
  if (st == LOOM_OK) {
    fill_window_tables(w, ox_int(n, "storage_order", 0) != 0, O, K, &t);
    const loom_dim_t shape[2] = {O, K};
    st = i64_table(n, 2, shape, t.at, at);
    if (st == LOOM_OK) st = i64_table(n, 2, shape, t.place, place);
    if (st == LOOM_OK) st = ox_vector_i64(n, (int)(O * K), t.index, index);
  }
  free(t.at);
  free(t.place);
  free(t.index);
  return st;
}

/* Constants for Indices: output o's first window element, o*K, in the
 * (O*K) index table (offs), and the index of (n, c, 0...), (n*C + c)*S,
 * shaped (N, C, 1) (chan). */
static loom_status_t index_offsets(ox_node_t *n, int64_t O, int64_t K, const loom_dim_t *xd,
                                   int64_t S, loom_value_t *offs, loom_value_t *chan) {
  int64_t NC = xd[0] * xd[1];
  int64_t *v = malloc(sizeof *v * (size_t)(O > NC ? O : NC));
  if (!v) return ox_fail(n, LOOM_ERR_NOMEM, "out of memory");
  for (int64_t o = 0; o < O; o++) v[o] = o * K;
  loom_status_t st = ox_vector_i64(n, (int)O, v, offs);
  for (int64_t c = 0; c < NC; c++) v[c] = c * S;
  if (st == LOOM_OK) st = i64_table(n, 3, (const loom_dim_t[]){xd[0], xd[1], 1}, v, chan);
  free(v);
  return st;
}

/* MaxPool with Indices, any spatial rank: every window gathered from the
 * -inf-padded input flattened to (N, C, P), as (N, C, O, K); the max, and
 * the first window place holding it mapped to its input element's index
 * in NCHW order: (n*C + c)*S plus the spatial index. */
static loom_status_t max_pool_indices(ox_node_t *n, loom_value_t x, const win3_t *w,
                                      loom_value_t *y, loom_value_t *ind) {
  loom_graph_t *g = n->g;
  loom_dim_t xd[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_dims(n, x, xd, &rank));
  if (xd[0] < 0 || xd[1] < 0)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "Indices with a symbolic batch or channel dim");
  int s = rank - 2;
  int64_t pads[2 * LOOM_MAX_RANK] = {0}, P = 1, S = 1;
  for (int m = 0; m < s; m++) {
    int d = 3 - s + m;
    pads[2 + m] = w->pads[d];
    pads[rank + 2 + m] = w->pads[3 + d];
  }
  for (int d = 0; d < 3; d++) {
    P *= w->in[d] + w->pads[d] + w->pads[3 + d];
    S *= w->in[d];
  }
  int64_t O = w->out[0] * w->out[1] * w->out[2];
  int64_t K = w->kernel[0] * w->kernel[1] * w->kernel[2];
  loom_value_t at, place, index, vals, max, hit, k_none, k, offs, chan;
  LOOM_TRY(loom_pad(g, x, pads, LOOM_PAD_CONSTANT, -INFINITY, &x));
  LOOM_TRY(loom_reshape(g, x, 3, (const loom_dim_t[]){xd[0], xd[1], P}, &x));
  LOOM_TRY(window_tables(n, w, &at, &place, &index));
  LOOM_TRY(loom_gather(g, x, at, 2, &vals));
  LOOM_TRY(loom_max(g, vals, 1, (const int64_t[]){3}, 1, &max));
  /* The first place equal to the max; a NaN max matches none (K): clamped. */
  LOOM_TRY(loom_eq(g, vals, max, &hit));
  LOOM_TRY(ox_scalar(n, LOOM_I64, (double)K, &k_none));
  LOOM_TRY(loom_where(g, hit, place, k_none, &k));
  LOOM_TRY(loom_min(g, k, 1, (const int64_t[]){3}, 0, &k));
  LOOM_TRY(loom_clamp(g, k, 0, (double)(K - 1), &k));
  LOOM_TRY(index_offsets(n, O, K, xd, S, &offs, &chan));
  LOOM_TRY(loom_add(g, k, offs, &k));
  LOOM_TRY(loom_gather(g, index, k, 0, &k));
  LOOM_TRY(loom_add(g, k, chan, &k));
  loom_dim_t shape[LOOM_MAX_RANK] = {xd[0], xd[1]};
  for (int m = 0; m < s; m++) shape[2 + m] = w->out[3 - s + m];
  LOOM_TRY(loom_reshape(g, max, rank, shape, y));
  return loom_reshape(g, k, rank, shape, ind);
}

/* ---- Entry points (from rules_nn.c) ------------------------------------------ */

/* The pool's window, with ceil_mode's pads; end_pads: the model's. */
static loom_status_t pool_window(ox_node_t *n, int max, win3_t *w, int64_t *end_pads) {
  LOOM_TRY(ox_need(n, 0));
  loom_dim_t xd[LOOM_MAX_RANK];
  int rank, c;
  LOOM_TRY(ox_dims(n, n->in[0], xd, &rank));
  const int64_t *ks = ox_ints(n, "kernel_shape", &c);
  if (!ks || c != rank - 2)
    return ox_fail(n, LOOM_ERR_SHAPE, "kernel_shape has %d entries for rank %d", c, rank);
  LOOM_TRY(read_win3(n, xd, rank, ks, 0, w));
  if (!max && (w->dilation[0] != 1 || w->dilation[1] != 1 || w->dilation[2] != 1))
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "dilated average pooling");
  for (int d = 0; d < 3; d++) end_pads[d] = w->pads[3 + d];
  return window_out(n, w, (int)ox_int(n, "ceil_mode", 0));
}

/* Integer inputs pool in f64 (exact for any i32), cast back after. */
static loom_status_t pool_entry(ox_node_t *n, int max, int indices) {
  win3_t w;
  int64_t end_pads[3] = {0};
  LOOM_TRY(pool_window(n, max, &w, end_pads));
  loom_value_t x = n->in[0], y, ind;
  loom_dtype_t dt = ox_dtype(n, x);
  int is_int = !ox_is_float(dt);
  if (is_int) LOOM_TRY(loom_cast(n->g, x, LOOM_F64, &x));
  LOOM_TRY(indices ? max_pool_indices(n, x, &w, &y, &ind) : pool3d(n, x, &w, end_pads, max, &y));
  if (is_int) LOOM_TRY(loom_cast(n->g, y, dt, &y));
  n->out[0] = y;
  return indices ? ox_set(n, 1, ind) : LOOM_OK;
}

loom_status_t ox_pool3d(ox_node_t *n, int max) {
  LOOM_TRY(ox_need(n, 0));
  if (ox_rank(n, n->in[0]) != 5)
    return ox_fail(n, LOOM_ERR_SHAPE, "rank %d (5 for a 3-D pool)", ox_rank(n, n->in[0]));
  return pool_entry(n, max, 0);
}

loom_status_t ox_max_pool_indices(ox_node_t *n) { return pool_entry(n, 1, 1); }
