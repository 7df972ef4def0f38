/* Pooling, softmax and normalization: reference kernels. Each views its
 * input as (outer, len, inner) around the dims it reduces, element
 * (o, j, i) at (o * len + j) * inner + i. */
#include <math.h>

#include "core/alloc.h"
#include "kernels/ref.h"

static int64_t dims_product(const loom_tensor_t *t, int from, int to) {
  int64_t n = 1;
  for (int d = from; d < to; d++) n *= t->shape[d];
  return n;
}

/* The attribute axis, normalized (the shape rule has checked it). */
static int attr_axis(const ref_call_t *c) {
  int rank = c->in[0]->rank;
  int64_t axis = ir_op_int(c->node->op, c->attrs, "axis");
  if (axis < 0) axis += rank;
  return axis < 0 ? 0 : (int)axis;
}

/* ---- Pooling ------------------------------------------------------------- */

typedef struct pool {
  int64_t kernel[2], stride[2], pads[4], dilation[2];
  bool count_include_pad;
} pool_t;

static void read_ints(const ref_call_t *c, const char *name, int n, int64_t *dst) {
  const int64_t *v;
  if (ir_attr_ints(c->attrs, name, &v) == n)
    for (int i = 0; i < n; i++) dst[i] = v[i];
}

static pool_t read_pool(const ref_call_t *c) {
  pool_t p = {.dilation = {1, 1}};
  read_ints(c, "kernel", 2, p.kernel);
  p.stride[0] = p.kernel[0];
  p.stride[1] = p.kernel[1];
  read_ints(c, "stride", 2, p.stride);
  read_ints(c, "pads", 4, p.pads);
  read_ints(c, "dilation", 2, p.dilation);
  p.count_include_pad = ir_op_int(c->node->op, c->attrs, "count_include_pad") != 0;
  return p;
}

/* Folds the in-bounds elements of one window; returns how many there were. */
typedef void (*pool_fold_fn)(double v, double *acc);

static int64_t pool_window(const pool_t *p, const loom_tensor_t *x,
                           int64_t plane, int64_t oh, int64_t ow,
                           pool_fold_fn fold, double *acc) {
  int64_t h = x->shape[2], w = x->shape[3], count = 0;
  for (int64_t kh = 0; kh < p->kernel[0]; kh++) {
    int64_t ih = oh * p->stride[0] - p->pads[0] + kh * p->dilation[0];
    if (ih < 0 || ih >= h) continue;
    for (int64_t kw = 0; kw < p->kernel[1]; kw++) {
      int64_t iw = ow * p->stride[1] - p->pads[1] + kw * p->dilation[1];
      if (iw < 0 || iw >= w) continue;
      fold(ref_get(x, (plane * h + ih) * w + iw), acc);
      count++;
    }
  }
  return count;
}

/* NaN wins, as in PyTorch: a window holding one has no maximum. */
static void fold_max(double v, double *acc) {
  if (isnan(v) || v > *acc) *acc = v;
}

static void fold_sum(double v, double *acc) { *acc += v; }

typedef double (*pool_result_fn)(const pool_t *p, double acc, int64_t count);

static double max_result(const pool_t *p, double acc, int64_t count) {
  (void)p, (void)count;
  return acc;
}

static double avg_result(const pool_t *p, double acc, int64_t count) {
  int64_t divisor = p->count_include_pad ? p->kernel[0] * p->kernel[1] : count;
  return acc / (double)divisor;
}

/* A symbolic H or W is known only now: the padded input must still hold
 * one window, as the shape rule checks for constant dims. */
static loom_status_t check_fits(const ref_call_t *c, const pool_t *p) {
  for (int i = 0; i < 2; i++) {
    int64_t padded = c->in[0]->shape[2 + i] + p->pads[i] + p->pads[i + 2];
    int64_t window = p->dilation[i] * (p->kernel[i] - 1) + 1;
    if (padded < window)
      return loom_fail(LOOM_ERR_SHAPE,
                       "%s: input dim %d is %lld (%lld padded), smaller than the window %lld",
                       ref_name(c), 2 + i, (long long)c->in[0]->shape[2 + i],
                       (long long)padded, (long long)window);
  }
  return LOOM_OK;
}

static loom_status_t run_pool(ref_call_t *c, double init, pool_fold_fn fold,
                              pool_result_fn result) {
  const loom_tensor_t *x = c->in[0];
  loom_tensor_t *y = c->out[0];
  pool_t p = read_pool(c);
  LOOM_TRY(check_fits(c, &p));
  int64_t planes = y->shape[0] * y->shape[1], oh_n = y->shape[2], ow_n = y->shape[3];
  for (int64_t plane = 0; plane < planes; plane++)
    for (int64_t oh = 0; oh < oh_n; oh++)
      for (int64_t ow = 0; ow < ow_n; ow++) {
        double acc = init;
        int64_t count = pool_window(&p, x, plane, oh, ow, fold, &acc);
        ref_set(y, (plane * oh_n + oh) * ow_n + ow, result(&p, acc, count));
      }
  return LOOM_OK;
}

loom_status_t ref_max_pool2d(ref_call_t *c) {
  return run_pool(c, -INFINITY, fold_max, max_result);
}

loom_status_t ref_avg_pool2d(ref_call_t *c) {
  return run_pool(c, 0.0, fold_sum, avg_result);
}

loom_status_t ref_global_avg_pool(ref_call_t *c) {
  const loom_tensor_t *x = c->in[0];
  int64_t planes = dims_product(x, 0, 2), len = dims_product(x, 2, x->rank);
  for (int64_t o = 0; o < planes; o++) {
    double sum = 0;
    for (int64_t j = 0; j < len; j++) sum += ref_get(x, o * len + j);
    ref_set(c->out[0], o, sum / (double)len);
  }
  return LOOM_OK;
}

/* ---- Softmax ------------------------------------------------------------- */

/* Writes softmax (or log_softmax) of each line along the axis. Subtracting
 * the maximum keeps e^x finite; a line of -inf gives NaN (-inf - -inf),
 * as in PyTorch. */
static loom_status_t run_softmax(ref_call_t *c, bool log_form) {
  const loom_tensor_t *x = c->in[0];
  loom_tensor_t *y = c->out[0];
  int axis = attr_axis(c);
  int64_t outer = dims_product(x, 0, axis), inner = dims_product(x, axis + 1, x->rank);
  int64_t len = x->rank ? x->shape[axis] : 1;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t base = o * len * inner + i;
      double max = -INFINITY, sum = 0;
      for (int64_t j = 0; j < len; j++) max = fmax(max, ref_get(x, base + j * inner));
      for (int64_t j = 0; j < len; j++) sum += exp(ref_get(x, base + j * inner) - max);
      for (int64_t j = 0; j < len; j++) {
        double shifted = ref_get(x, base + j * inner) - max;
        ref_set(y, base + j * inner, log_form ? shifted - log(sum) : exp(shifted) / sum);
      }
    }
  return LOOM_OK;
}

loom_status_t ref_softmax(ref_call_t *c) { return run_softmax(c, false); }
loom_status_t ref_log_softmax(ref_call_t *c) { return run_softmax(c, true); }

/* ---- Layer and RMS normalization ----------------------------------------- */

static double line_mean(const loom_tensor_t *x, int64_t base, int64_t len) {
  double sum = 0;
  for (int64_t j = 0; j < len; j++) sum += ref_get(x, base + j);
  return sum / (double)len;
}

/* Mean of (x - center)^2 over a line: the population variance about the
 * mean, or the mean square about 0. */
static double line_mean_square(const loom_tensor_t *x, int64_t base,
                               int64_t len, double center) {
  double sum = 0;
  for (int64_t j = 0; j < len; j++) {
    double d = ref_get(x, base + j) - center;
    sum += d * d;
  }
  return sum / (double)len;
}

/* Optional input i at j: `dflt` when the node has no input i. */
static double optional_get(const ref_call_t *c, int i, int64_t j, double dflt) {
  return i < c->n_in ? ref_get(c->in[i], j) : dflt;
}

/* y = (x - center) / sqrt(mean((x - center)^2) + eps) * scale + bias over
 * dims axis..; layer_norm centers on the mean, rms_norm on 0. */
static loom_status_t run_norm(ref_call_t *c, bool centered) {
  const loom_tensor_t *x = c->in[0];
  loom_tensor_t *y = c->out[0];
  int axis = attr_axis(c);
  double eps = ir_op_float(c->node->op, c->attrs, "eps");
  int64_t outer = dims_product(x, 0, axis), len = dims_product(x, axis, x->rank);
  for (int64_t o = 0; o < outer; o++) {
    int64_t base = o * len;
    double center = centered ? line_mean(x, base, len) : 0.0;
    double inv = 1.0 / sqrt(line_mean_square(x, base, len, center) + eps);
    for (int64_t j = 0; j < len; j++) {
      double v = (ref_get(x, base + j) - center) * inv;
      ref_set(y, base + j, v * optional_get(c, 1, j, 1.0) + optional_get(c, 2, j, 0.0));
    }
  }
  return LOOM_OK;
}

loom_status_t ref_layer_norm(ref_call_t *c) { return run_norm(c, true); }
loom_status_t ref_rms_norm(ref_call_t *c) { return run_norm(c, false); }

/* ---- Batch normalization ------------------------------------------------- */

typedef struct channel_stats {
  double mean, var; /* var: biased (population) */
} channel_stats_t;

/* Mean and biased variance of channel ch of x (N, C, inner). */
static channel_stats_t batch_stats(const loom_tensor_t *x, int64_t ch,
                                   int64_t inner) {
  int64_t n = x->shape[0], channels = x->shape[1], count = n * inner;
  double sum = 0, sq = 0;
  for (int64_t b = 0; b < n; b++)
    for (int64_t i = 0; i < inner; i++) sum += ref_get(x, (b * channels + ch) * inner + i);
  double mean = sum / (double)count;
  for (int64_t b = 0; b < n; b++)
    for (int64_t i = 0; i < inner; i++) {
      double d = ref_get(x, (b * channels + ch) * inner + i) - mean;
      sq += d * d;
    }
  return (channel_stats_t){mean, sq / (double)count};
}

loom_status_t ref_batch_norm(ref_call_t *c) {
  const loom_tensor_t *x = c->in[0], *scale = c->in[1], *bias = c->in[2];
  const loom_tensor_t *run_mean = c->in[3], *run_var = c->in[4];
  double eps = ir_op_float(c->node->op, c->attrs, "eps");
  double m = ir_op_float(c->node->op, c->attrs, "momentum");
  bool training = ir_op_int(c->node->op, c->attrs, "training") != 0;
  int64_t n = x->shape[0], channels = x->shape[1], inner = dims_product(x, 2, x->rank);
  int64_t count = n * inner;
  /* The unbiased variance needs two values, as PyTorch insists. */
  if (training && count < 2)
    return loom_fail(LOOM_ERR_VALUE,
                     "batch_norm: training needs more than 1 value per channel, got %lld",
                     (long long)count);
  for (int64_t ch = 0; ch < channels; ch++) {
    channel_stats_t s = {ref_get(run_mean, ch), ref_get(run_var, ch)};
    double new_mean = s.mean, new_var = s.var;
    if (training) {
      s = batch_stats(x, ch, inner);
      new_mean = (1 - m) * new_mean + m * s.mean;
      new_var = (1 - m) * new_var + m * s.var * (double)count / (double)(count - 1);
    }
    double k = ref_get(scale, ch) / sqrt(s.var + eps), b = ref_get(bias, ch);
    for (int64_t bi = 0; bi < n; bi++)
      for (int64_t i = 0; i < inner; i++) {
        int64_t at = (bi * channels + ch) * inner + i;
        ref_set(c->out[0], at, (ref_get(x, at) - s.mean) * k + b);
      }
    ref_set(c->out[1], ch, new_mean);
    ref_set(c->out[2], ch, new_var);
  }
  return LOOM_OK;
}

/* ---- Pooling gradients --------------------------------------------------- */

/* Flat index (in its plane) of the maximum of x's window at (oh, ow)
 * that PyTorch routes the gradient to: the first of tied maxima, but the
 * last NaN (a NaN is the maximum, as in the forward pass, and PyTorch's
 * scan takes every NaN it meets). -1 when the window holds no input
 * element. */
static int64_t window_argmax(const pool_t *p, const loom_tensor_t *x,
                             int64_t plane, int64_t oh, int64_t ow) {
  int64_t h = x->shape[2], w = x->shape[3], best = -1;
  double max = -INFINITY;
  for (int64_t kh = 0; kh < p->kernel[0]; kh++) {
    int64_t ih = oh * p->stride[0] - p->pads[0] + kh * p->dilation[0];
    if (ih < 0 || ih >= h) continue;
    for (int64_t kw = 0; kw < p->kernel[1]; kw++) {
      int64_t iw = ow * p->stride[1] - p->pads[1] + kw * p->dilation[1];
      if (iw < 0 || iw >= w) continue;
      double v = ref_get(x, (plane * h + ih) * w + iw);
      if (best < 0 || isnan(v) || v > max) {
        best = ih * w + iw;
        max = v;
      }
    }
  }
  return best;
}

/* Adds g to every in-bounds element of the window at (oh, ow) of a plane
 * of dx (sums, laid out like x). */
static void window_spread(const pool_t *p, const int64_t *xs, double *plane_sums,
                          int64_t oh, int64_t ow, double g) {
  for (int64_t kh = 0; kh < p->kernel[0]; kh++) {
    int64_t ih = oh * p->stride[0] - p->pads[0] + kh * p->dilation[0];
    if (ih < 0 || ih >= xs[2]) continue;
    for (int64_t kw = 0; kw < p->kernel[1]; kw++) {
      int64_t iw = ow * p->stride[1] - p->pads[1] + kw * p->dilation[1];
      if (iw >= 0 && iw < xs[3]) plane_sums[ih * xs[3] + iw] += g;
    }
  }
}

/* Routes dy (y's gradient) of one window into the sums of its plane. */
typedef void (*pool_route_fn)(const pool_t *p, const loom_tensor_t *x,
                              int64_t plane, int64_t oh, int64_t ow, double g,
                              double *plane_sums);

static void route_max(const pool_t *p, const loom_tensor_t *x, int64_t plane,
                      int64_t oh, int64_t ow, double g, double *plane_sums) {
  int64_t at = window_argmax(p, x, plane, oh, ow);
  if (at >= 0) plane_sums[at] += g;
}

static void route_avg(const pool_t *p, const loom_tensor_t *x, int64_t plane,
                      int64_t oh, int64_t ow, double g, double *plane_sums) {
  (void)plane;
  /* The divisor of the forward pass: the window's in-bounds count, or
   * the whole kernel when padding counts. */
  int64_t count = 0;
  for (int64_t kh = 0; kh < p->kernel[0]; kh++) {
    int64_t ih = oh * p->stride[0] - p->pads[0] + kh;
    for (int64_t kw = 0; kw < p->kernel[1]; kw++) {
      int64_t iw = ow * p->stride[1] - p->pads[1] + kw;
      count += ih >= 0 && ih < x->shape[2] && iw >= 0 && iw < x->shape[3];
    }
  }
  int64_t divisor = p->count_include_pad ? p->kernel[0] * p->kernel[1] : count;
  if (divisor > 0) window_spread(p, x->shape, plane_sums, oh, ow, g / (double)divisor);
}

/* The sums are kept in double so that f16 and bf16 round once. */
static loom_status_t run_pool_grad(ref_call_t *c, pool_route_fn route) {
  const loom_tensor_t *x = c->in[0], *dy = c->in[1];
  loom_tensor_t *dx = c->out[0];
  pool_t p = read_pool(c);
  LOOM_TRY(check_fits(c, &p));
  int64_t nx = loom_tensor_numel(x), plane_size = x->shape[2] * x->shape[3];
  double *sums = ref_scratch(c, sizeof *sums * (size_t)nx);
  if (!sums)
    return loom_fail(LOOM_ERR_NOMEM, "%s: out of memory for %lld sums",
                     ref_name(c), (long long)nx);
  int64_t planes = dy->shape[0] * dy->shape[1], oh_n = dy->shape[2], ow_n = dy->shape[3];
  for (int64_t plane = 0; plane < planes; plane++)
    for (int64_t oh = 0; oh < oh_n; oh++)
      for (int64_t ow = 0; ow < ow_n; ow++)
        route(&p, x, plane, oh, ow, ref_get(dy, (plane * oh_n + oh) * ow_n + ow),
              sums + plane * plane_size);
  for (int64_t e = 0; e < nx; e++) ref_set(dx, e, sums[e]);
  ref_scratch_release(c, sums);
  return LOOM_OK;
}

loom_status_t ref_max_pool2d_grad(ref_call_t *c) {
  return run_pool_grad(c, route_max);
}

loom_status_t ref_avg_pool2d_grad(ref_call_t *c) {
  return run_pool_grad(c, route_avg);
}
