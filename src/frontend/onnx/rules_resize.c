/* Rules for ONNX's resampling ops. Resize and Upsample read sizes known
 * when the model loads, so each resized axis's source indices and weights
 * are worked out here, once, and the op becomes per-axis gathers at
 * constant indices summed with constant weights (1 tap for nearest, 2 for
 * linear, 4 for cubic): exact, differentiable through the gathers, and
 * fusable. Coordinates follow ONNX's reference (onnx/backend/test/case/
 * node/resize.py), which made the conformance data. GridSample and
 * RoiAlign sample where run-time values say: their indices and weights are
 * computed in the graph. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx/onnx_import.h"

/* The most elements a resized axis may have: its index and weight tables
 * are built when the model loads (4 taps of 16 bytes an element). */
#define RS_MAX_AXIS (1 << 22)

/* ---- Resize's plan: sizes, scales and modes ------------------------------- */

typedef enum { RS_NEAREST, RS_LINEAR, RS_CUBIC } rs_mode_t;
typedef enum {
  CT_HALF_PIXEL, CT_HALF_PIXEL_SYMMETRIC, CT_PYTORCH_HALF_PIXEL, CT_ALIGN_CORNERS,
  CT_ASYMMETRIC, CT_TF_HALF_PIXEL_FOR_NN, CT_TF_CROP_AND_RESIZE
} rs_coord_t;
/* NM_LEGACY: Resize 10 and Upsample, which name no rounding; ONNX Runtime
 * floors when enlarging and rounds up when shrinking. */
typedef enum { NM_ROUND_PREFER_FLOOR, NM_ROUND_PREFER_CEIL, NM_FLOOR, NM_CEIL, NM_LEGACY } rs_nearest_t;

static const char *const mode_names[] = {"nearest", "linear", "cubic"};
static const char *const coord_names[] = {"half_pixel", "half_pixel_symmetric",
                                          "pytorch_half_pixel", "align_corners", "asymmetric",
                                          "tf_half_pixel_for_nn", "tf_crop_and_resize"};
static const char *const nearest_names[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                            "ceil"};

typedef struct resize_plan {
  rs_mode_t mode;
  rs_coord_t coord;
  rs_nearest_t nearest;
  double cubic_a, extrapolation;
  int exclude_outside;
  int rank;
  int64_t in[LOOM_MAX_RANK], out[LOOM_MAX_RANK];
  bool symbolic[LOOM_MAX_RANK]; /* a dim known only at run time: kept as it is */
  double scale[LOOM_MAX_RANK];
  double length[LOOM_MAX_RANK]; /* the output length the coordinate formulas use: the
                                   reference's scale * in, unrounded */
  double roi[2 * LOOM_MAX_RANK]; /* starts, then ends (tf_crop_and_resize) */
} resize_plan_t;

/* The index of string attribute name's value among names; fails naming it. */
static loom_status_t pick_name(ox_node_t *n, const char *name, const char *dflt,
                               const char *const *names, int count, int *out) {
  char buf[64];
  const char *s = ox_string(n, name, dflt, buf, sizeof buf);
  for (int k = 0; k < count; k++)
    if (!strcmp(s, names[k])) {
      *out = k;
      return LOOM_OK;
    }
  return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%s '%s' is not supported", name, s);
}

/* Resize 11 and up: the attributes that choose how to sample. */
static loom_status_t read_modes(ox_node_t *n, resize_plan_t *p) {
  int mode = 0, coord = 0, nearest = 0;
  LOOM_TRY(pick_name(n, "mode", "nearest", mode_names, 3, &mode));
  LOOM_TRY(pick_name(n, "coordinate_transformation_mode", "half_pixel", coord_names, 7, &coord));
  LOOM_TRY(pick_name(n, "nearest_mode", "round_prefer_floor", nearest_names, 4, &nearest));
  if (coord == CT_TF_HALF_PIXEL_FOR_NN && n->opset >= 13)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "tf_half_pixel_for_nn was removed in opset 13");
  if (coord == CT_HALF_PIXEL_SYMMETRIC && n->opset < 19)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "half_pixel_symmetric needs opset 19");
  if (ox_int(n, "antialias", 0))
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "antialias is not imported yet");
  p->mode = (rs_mode_t)mode;
  p->coord = (rs_coord_t)coord;
  p->nearest = (rs_nearest_t)nearest;
  p->cubic_a = ox_float(n, "cubic_coeff_a", -0.75);
  p->exclude_outside = (int)ox_int(n, "exclude_outside", 0);
  p->extrapolation = ox_float(n, "extrapolation_value", 0.0);
  return LOOM_OK;
}

/* Resize 10 and Upsample: nearest or linear, on asymmetric coordinates. */
static loom_status_t read_legacy_mode(ox_node_t *n, resize_plan_t *p) {
  char buf[32];
  const char *mode = ox_string(n, "mode", "nearest", buf, sizeof buf);
  if (!strcmp(mode, "nearest")) p->mode = RS_NEAREST;
  else if (!strcmp(mode, "linear") || !strcmp(mode, "bilinear")) p->mode = RS_LINEAR;
  else return ox_fail(n, LOOM_ERR_UNSUPPORTED, "mode '%s' is not supported", mode);
  p->coord = CT_ASYMMETRIC;
  p->nearest = NM_LEGACY;
  p->cubic_a = -0.75;
  return LOOM_OK;
}

/* x's dims into the plan, every axis unresized to begin with; a symbolic
 * one (a batch) stands as 1 until the scales show it is kept. */
static loom_status_t plan_input(ox_node_t *n, loom_value_t x, resize_plan_t *p) {
  loom_dim_t dims[LOOM_MAX_RANK];
  LOOM_TRY(ox_dims(n, x, dims, &p->rank));
  if (p->rank < 1) return ox_fail(n, LOOM_ERR_SHAPE, "the input is a scalar");
  for (int d = 0; d < p->rank; d++) {
    if (dims[d] == 0)
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "input dim %d is 0 (a non-empty shape is "
                     "needed)", d);
    p->symbolic[d] = dims[d] < 0;
    p->in[d] = p->out[d] = p->symbolic[d] ? 1 : dims[d];
    p->scale[d] = 1.0;
    p->length[d] = (double)dims[d];
    p->roi[d] = 0.0;
    p->roi[p->rank + d] = 1.0;
  }
  return LOOM_OK;
}

/* The axes scales, sizes and roi list: attribute axes (opset 18), else all. */
static loom_status_t read_axes(ox_node_t *n, const resize_plan_t *p, int64_t *axes, int *count) {
  int c;
  const int64_t *given = n->opset >= 18 ? ox_ints(n, "axes", &c) : NULL;
  *count = given ? c : p->rank;
  for (int k = 0; k < *count; k++) {
    if (!given) axes[k] = k;
    else LOOM_TRY(ox_axis(n, given[k], p->rank, "axis", &axes[k]));
  }
  return LOOM_OK;
}

static loom_status_t apply_scales(ox_node_t *n, resize_plan_t *p, const double *s, int count,
                                  const int64_t *axes, int n_axes) {
  if (count != n_axes)
    return ox_fail(n, LOOM_ERR_SHAPE, "%d scales for %d axes", count, n_axes);
  for (int k = 0; k < count; k++) {
    int d = (int)axes[k];
    if (!(s[k] > 0) || !isfinite(s[k]))
      return ox_fail(n, LOOM_ERR_INVALID, "scale %g of axis %d is not positive", s[k], d);
    p->scale[d] = s[k];
    p->length[d] = s[k] * (double)p->in[d];
    if (p->length[d] > RS_MAX_AXIS)
      return ox_fail(n, LOOM_ERR_SHAPE, "scale %g is too large: axis %d would have %.0f "
                     "elements (at most %d)", s[k], d, p->length[d], RS_MAX_AXIS);
    /* The f32 product, as ONNX Runtime and PyTorch size it: 5 * 1.4f is
     * 7 there, 6.9999999 in f64. */
    p->out[d] = (int64_t)floorf((float)s[k] * (float)p->in[d]);
  }
  return LOOM_OK;
}

/* keep_aspect_ratio_policy (opset 18) scales every listed axis alike: by
 * the smallest (not_larger) or largest (not_smaller) ratio of sizes. */
static loom_status_t apply_sizes(ox_node_t *n, resize_plan_t *p, const int64_t *sz, int count,
                                 const int64_t *axes, int n_axes) {
  if (count != n_axes) return ox_fail(n, LOOM_ERR_SHAPE, "%d sizes for %d axes", count, n_axes);
  char buf[32];
  const char *policy = n->opset >= 18 ? ox_string(n, "keep_aspect_ratio_policy", "stretch", buf,
                                                  sizeof buf) : "stretch";
  int stretch = !strcmp(policy, "stretch"), larger = !strcmp(policy, "not_smaller");
  if (!stretch && !larger && strcmp(policy, "not_larger"))
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "keep_aspect_ratio_policy '%s'", policy);
  double keep = larger ? 0.0 : INFINITY;
  for (int k = 0; k < count; k++) {
    if (sz[k] < 1 || sz[k] > RS_MAX_AXIS)
      return ox_fail(n, LOOM_ERR_INVALID, "size %lld of axis %lld (1 to %d)", (long long)sz[k],
                     (long long)axes[k], RS_MAX_AXIS);
    double r = (double)sz[k] / (double)p->in[axes[k]];
    keep = larger ? fmax(keep, r) : fmin(keep, r);
  }
  for (int k = 0; k < count; k++) {
    int d = (int)axes[k];
    p->scale[d] = stretch ? (double)((float)sz[k] / (float)p->in[d]) : keep;
    p->length[d] = stretch ? (double)sz[k] : keep * (double)p->in[d];
    p->out[d] = stretch ? sz[k] : (int64_t)floor(p->length[d] + 0.5);
    if (p->out[d] > RS_MAX_AXIS)
      return ox_fail(n, LOOM_ERR_SHAPE, "axis %d would have %lld elements (at most %d)", d,
                     (long long)p->out[d], RS_MAX_AXIS);
  }
  return LOOM_OK;
}

/* An optional constant input with at least one entry (opset 11 passes an
 * empty tensor for the one of scales and sizes it does not use). */
static int given(const ox_node_t *n, int i) {
  if (!ox_has(n, i)) return 0;
  const loom_tensor_t *t = ox_const(n, n->in[i]);
  return !t || loom_tensor_numel(t) > 0;
}

/* The output shape from input scales_at or sizes_at (-1: none), and roi. */
static loom_status_t read_shape(ox_node_t *n, resize_plan_t *p, int scales_at, int sizes_at,
                                int roi_at) {
  int64_t axes[LOOM_MAX_RANK], sizes[LOOM_MAX_RANK];
  double vals[2 * LOOM_MAX_RANK];
  int n_axes, count;
  LOOM_TRY(read_axes(n, p, axes, &n_axes));
  int has_scales = given(n, scales_at), has_sizes = sizes_at >= 0 && given(n, sizes_at);
  if (has_scales == has_sizes)
    return ox_fail(n, LOOM_ERR_INVALID, "%s", has_scales ? "both scales and sizes are given"
                                                         : "neither scales nor sizes is given");
  if (has_scales) {
    LOOM_TRY(ox_const_doubles(n, scales_at, "scales", vals, LOOM_MAX_RANK, &count));
    LOOM_TRY(apply_scales(n, p, vals, count, axes, n_axes));
  } else {
    /* sizes computed from x's shape (PyTorch's interpolate(size=...) with
     * a symbolic batch): a symbolic entry that is x's own dim keeps it */
    loom_dim_t xd[LOOM_MAX_RANK];
    int rank;
    LOOM_TRY(ox_dims(n, n->in[0], xd, &rank));
    LOOM_TRY(ox_shape_dims(n, sizes_at, "sizes", sizes, LOOM_MAX_RANK, &count));
    for (int k = 0; k < count && k < n_axes; k++) {
      if (!ox_is_dim_sym(sizes[k])) continue;
      if (sizes[k] != xd[axes[k]])
        return ox_fail(n, LOOM_ERR_UNSUPPORTED, "size %d is a symbolic dim other than the "
                       "input's dim %lld", k, (long long)axes[k]);
      sizes[k] = p->in[axes[k]];
    }
    LOOM_TRY(apply_sizes(n, p, sizes, count, axes, n_axes));
  }
  for (int d = 0; d < p->rank; d++)
    if (p->symbolic[d] && p->scale[d] != 1.0)
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "input dim %d is symbolic: Loom resizes axes "
                     "of static size (a symbolic one must keep scale 1)", d);
  if (p->coord != CT_TF_CROP_AND_RESIZE) return LOOM_OK;
  if (!ox_has(n, roi_at))
    return ox_fail(n, LOOM_ERR_INVALID, "tf_crop_and_resize needs roi (input %d)", roi_at);
  LOOM_TRY(ox_const_doubles(n, roi_at, "roi", vals, 2 * LOOM_MAX_RANK, &count));
  if (count != 2 * n_axes)
    return ox_fail(n, LOOM_ERR_SHAPE, "roi has %d entries for %d axes", count, n_axes);
  for (int k = 0; k < n_axes; k++) {
    p->roi[axes[k]] = vals[k];
    p->roi[p->rank + axes[k]] = vals[n_axes + k];
  }
  return LOOM_OK;
}

/* ---- Resize's taps: per axis, where each output reads and how much ------- */

typedef struct axis_taps {
  int n;                  /* taps per output position: 1, 2 or 4 */
  int64_t *index;         /* n rows of out: the source index of each tap */
  double *weight;         /* n rows of out */
  unsigned char *outside; /* out: reads extrapolation_value (tf_crop_and_resize) */
  int any_outside;
} axis_taps_t;

/* Where output position i of axis d reads the input; *outside when
 * tf_crop_and_resize puts it off the input. The reference tests "output
 * length 1" on the unrounded length, and pytorch_half_pixel reads -0.5
 * there. */
static double source_coord(const resize_plan_t *p, int d, int64_t i, int *outside) {
  double in = (double)p->in[d], s = p->scale[d], len = p->length[d], x = (double)i;
  /* The scale's own formulas in f32, as ONNX Runtime computes them: 11 /
   * 2.2f is 5 there, 4.9999999 in f64, and nearest reads another pixel. */
  float xf = (float)i, sf = (float)s;
  *outside = 0;
  switch (p->coord) {
  case CT_HALF_PIXEL: return (xf + 0.5f) / sf - 0.5f;
  case CT_HALF_PIXEL_SYMMETRIC: {
    double adjust = (double)p->out[d] / len, offset = in / 2 * (1 - adjust);
    return offset + (x + 0.5) / s - 0.5;
  }
  case CT_PYTORCH_HALF_PIXEL: return len == 1 ? -0.5 : (xf + 0.5f) / sf - 0.5f;
  case CT_ALIGN_CORNERS: return len == 1 ? 0.0 : x * (in - 1) / (len - 1);
  case CT_ASYMMETRIC: return xf / sf;
  /* An axis it keeps (scale 1: a batch, a channel) reads itself, as in
   * ONNX Runtime and TensorFlow, not its neighbour x + 0.5 rounds to. */
  case CT_TF_HALF_PIXEL_FOR_NN: return s == 1 && p->out[d] == p->in[d] ? x : (xf + 0.5f) / sf;
  case CT_TF_CROP_AND_RESIZE: {
    double a = p->roi[d], b = p->roi[p->rank + d];
    double c = len == 1 ? (b - a) * (in - 1) / 2 : x * (b - a) * (in - 1) / (len - 1);
    c += a * (in - 1);
    *outside = !(c >= 0 && c <= in - 1);
    return *outside ? 0.0 : c;
  }
  }
  return 0.0;
}

static void cubic_coeffs(double r, double a, double *c) {
  double u = 1 - r;
  c[0] = ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a;
  c[1] = ((a + 2) * r - (a + 3)) * r * r + 1;
  c[2] = ((a + 2) * u - (a + 3)) * u * u + 1;
  c[3] = ((a * (u + 1) - 5 * a) * (u + 1) + 8 * a) * (u + 1) - 4 * a;
}

/* Which of the two neighbours (0: left, 1: right) nearest reads, ratio
 * being x's distance from the left one. */
static int nearest_pick(rs_nearest_t mode, double ratio, int exact) {
  if (exact) return 1;
  switch (mode) {
  case NM_ROUND_PREFER_FLOOR: return ratio > 0.5;
  case NM_ROUND_PREFER_CEIL: return ratio >= 0.5;
  case NM_FLOOR: return 0;
  default: return 1;
  }
}

/* Taps of one output position at source coordinate x. The reference reads
 * the n nearest entries of the input padded by its edges (n/2 each side),
 * preferring the left one, with ratio in (0, 1]: the window starts at
 * ceil(x) - n/2 and stays inside the padded input. */
static void position_taps(const resize_plan_t *p, int d, double x, int64_t *idx, double *w) {
  int64_t in = p->in[d];
  int n = p->mode == RS_CUBIC ? 4 : 2, half = n / 2;
  double left = ceil(x) - 1, ratio = x - left;
  double first = fmin(fmax(left - (half - 1), (double)-half), (double)(in + half - n));
  double c[4] = {1 - ratio, ratio, 0, 0};
  if (p->mode == RS_CUBIC) cubic_coeffs(ratio, p->cubic_a, c);
  if (p->mode == RS_NEAREST) {
    int k = nearest_pick(p->nearest, ratio, ratio == 1.0);
    c[0] = !k;
    c[1] = k;
  }
  double sum = 0;
  for (int k = 0; k < n; k++) {
    int64_t at = (int64_t)first + k;
    if (p->exclude_outside && p->mode != RS_NEAREST && (at < 0 || at >= in)) c[k] = 0;
    sum += c[k];
    idx[k] = at < 0 ? 0 : at >= in ? in - 1 : at;
  }
  for (int k = 0; k < n; k++) w[k] = p->exclude_outside && sum != 0 ? c[k] / sum : c[k];
}

static void free_taps(axis_taps_t *t) {
  free(t->index);
  free(t->weight);
  free(t->outside);
}

static loom_status_t axis_taps(const resize_plan_t *p, int d, axis_taps_t *t) {
  int64_t out = p->out[d];
  t->n = p->mode == RS_CUBIC ? 4 : p->mode == RS_LINEAR ? 2 : 1;
  t->any_outside = 0;
  t->index = malloc(sizeof *t->index * (size_t)(t->n * out));
  t->weight = malloc(sizeof *t->weight * (size_t)(t->n * out));
  t->outside = malloc((size_t)out);
  if (!t->index || !t->weight || !t->outside) {
    free_taps(t);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for Resize's tables");
  }
  for (int64_t i = 0; i < out; i++) {
    int outside;
    double x = source_coord(p, d, i, &outside), w[4];
    int64_t idx[4];
    t->outside[i] = (unsigned char)outside;
    t->any_outside |= outside;
    if (p->nearest == NM_LEGACY && p->mode == RS_NEAREST) {
      double at = p->scale[d] < 1 ? ceil(x) : floor(x);
      idx[0] = at < 0 ? 0 : at >= (double)p->in[d] ? p->in[d] - 1 : (int64_t)at;
      w[0] = 1;
    } else if (p->mode == RS_NEAREST) {
      position_taps(p, d, x, idx, w);
      idx[0] = w[1] != 0 ? idx[1] : idx[0];
      w[0] = 1;
    } else {
      position_taps(p, d, x, idx, w);
    }
    for (int k = 0; k < t->n; k++) {
      t->index[k * out + i] = idx[k];
      t->weight[k * out + i] = w[k];
    }
  }
  return LOOM_OK;
}

/* Whether axis d's taps give back the input unchanged. */
static int taps_identity(const resize_plan_t *p, int d, const axis_taps_t *t) {
  int64_t out = p->out[d];
  if (out != p->in[d] || t->any_outside) return 0;
  for (int64_t i = 0; i < out; i++) {
    double own = 0;
    for (int k = 0; k < t->n; k++) {
      double w = t->weight[k * out + i];
      if (t->index[k * out + i] == i) own += w;
      else if (w != 0) return 0;
    }
    if (own != 1) return 0;
  }
  return 1;
}

/* ---- Resize's graph: gathers and weighted sums ------------------------------ */

/* A constant of dtype shaped 1 everywhere but axis d, holding count values
 * (bool for LOOM_BOOL, from nonzero). */
static loom_status_t along_axis(ox_node_t *n, loom_dtype_t dtype, int rank, int d, int64_t count,
                                const double *values, const unsigned char *flags,
                                loom_value_t *out) {
  int64_t shape[LOOM_MAX_RANK];
  for (int k = 0; k < rank; k++) shape[k] = k == d ? count : 1;
  loom_dtype_t held = dtype == LOOM_F64 || dtype == LOOM_BOOL ? dtype : LOOM_F32;
  size_t size = loom_dtype_size(held) * (size_t)count;
  void *buf = malloc(size ? size : 1);
  if (!buf) return loom_fail(LOOM_ERR_NOMEM, "out of memory for Resize's tables");
  for (int64_t i = 0; i < count; i++) {
    if (held == LOOM_BOOL) ((unsigned char *)buf)[i] = flags[i] != 0;
    else if (held == LOOM_F64) ((double *)buf)[i] = values[i];
    else ((float *)buf)[i] = (float)values[i];
  }
  loom_tensor_t *t = NULL;
  loom_status_t st = loom_tensor_from_data(held, rank, shape, buf, size, &t);
  free(buf);
  if (st == LOOM_OK) st = loom_graph_constant(n->g, t, out);
  loom_tensor_destroy(t);
  if (st == LOOM_OK && held != dtype) st = loom_cast(n->g, *out, dtype, out);
  return st;
}

static int all_equal(const double *w, int64_t count, double v) {
  for (int64_t i = 0; i < count; i++)
    if (w[i] != v) return 0;
  return 1;
}

/* x resampled along axis d: the sum over taps of x gathered at the tap's
 * indices times its weights, extrapolation_value where the crop is off the
 * input. */
static loom_status_t resize_axis(ox_node_t *n, const resize_plan_t *p, int d,
                                 const axis_taps_t *t, loom_value_t x, loom_value_t *out) {
  loom_graph_t *g = n->g;
  loom_dtype_t dt = ox_dtype(n, x);
  int64_t len = p->out[d];
  loom_value_t y = {.id = -1};
  for (int k = 0; k < t->n; k++) {
    const double *w = t->weight + k * len;
    if (all_equal(w, len, 0.0)) continue;
    loom_value_t idx, v, wv;
    LOOM_TRY(ox_vector_i64(n, (int)len, t->index + k * len, &idx));
    LOOM_TRY(loom_gather(g, x, idx, d, &v));
    if (!all_equal(w, len, 1.0)) {
      LOOM_TRY(along_axis(n, dt, p->rank, d, len, w, NULL, &wv));
      LOOM_TRY(loom_mul(g, v, wv, &v));
    }
    if (y.id < 0) y = v;
    else LOOM_TRY(loom_add(g, y, v, &y));
  }
  if (y.id < 0) return ox_fail(n, LOOM_ERR_INVALID, "every weight of axis %d is 0", d);
  if (t->any_outside) {
    loom_value_t mask, fill;
    LOOM_TRY(along_axis(n, LOOM_BOOL, p->rank, d, len, NULL, t->outside, &mask));
    LOOM_TRY(ox_like(n, y, p->extrapolation, &fill));
    LOOM_TRY(loom_where(g, mask, fill, y, &y));
  }
  *out = y;
  return LOOM_OK;
}

/* Axis by axis, the last first (the reference's order of summing). Integer
 * inputs interpolate in f64 and truncate back, as the reference's astype. */
static loom_status_t resize_run(ox_node_t *n, const resize_plan_t *p, loom_value_t x) {
  loom_dtype_t dt = ox_dtype(n, x);
  int cast = !ox_is_float(dt) && p->mode != RS_NEAREST;
  if (cast) LOOM_TRY(loom_cast(n->g, x, LOOM_F64, &x));
  for (int d = p->rank - 1; d >= 0; d--) {
    if (p->symbolic[d]) continue; /* scale 1: kept (read_shape) */
    axis_taps_t t;
    LOOM_TRY(axis_taps(p, d, &t));
    loom_status_t st = taps_identity(p, d, &t) ? LOOM_OK : resize_axis(n, p, d, &t, x, &x);
    free_taps(&t);
    LOOM_TRY(st);
  }
  if (cast) LOOM_TRY(loom_cast(n->g, x, dt, &x));
  if (x.id == n->in[0].id) LOOM_TRY(loom_identity(n->g, x, &x));
  return ox_set(n, 0, x);
}

loom_status_t ox_resize(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  resize_plan_t p;
  memset(&p, 0, sizeof p);
  LOOM_TRY(plan_input(n, n->in[0], &p));
  if (n->opset < 11) {
    LOOM_TRY(read_legacy_mode(n, &p));
    LOOM_TRY(ox_need(n, 1));
    LOOM_TRY(read_shape(n, &p, 1, -1, -1));
  } else {
    LOOM_TRY(read_modes(n, &p));
    LOOM_TRY(read_shape(n, &p, 2, 3, 1));
  }
  return resize_run(n, &p, n->in[0]);
}

/* Upsample: attribute scales before opset 9, input 1 from it. */
loom_status_t ox_upsample(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  resize_plan_t p;
  memset(&p, 0, sizeof p);
  LOOM_TRY(plan_input(n, n->in[0], &p));
  LOOM_TRY(read_legacy_mode(n, &p));
  if (n->opset >= 9) {
    LOOM_TRY(ox_need(n, 1));
    LOOM_TRY(read_shape(n, &p, 1, -1, -1));
  } else {
    int count;
    const float *s = ox_floats(n, "scales", &count);
    if (!s) return ox_fail(n, LOOM_ERR_FORMAT, "attribute scales is missing");
    double scales[LOOM_MAX_RANK];
    int64_t axes[LOOM_MAX_RANK];
    for (int k = 0; k < count && k < LOOM_MAX_RANK; k++) scales[k] = s[k];
    for (int k = 0; k < p.rank; k++) axes[k] = k;
    LOOM_TRY(apply_scales(n, &p, scales, count, axes, p.rank));
  }
  return resize_run(n, &p, n->in[0]);
}

/* ---- GridSample: taps at run-time places, as PyTorch's grid_sample ----------- */

typedef enum { GP_ZEROS, GP_BORDER, GP_REFLECTION } grid_padding_t;

/* One sampling: X as a table of rows (N*H*W, C) that taps gather from. */
typedef struct grid_ctx {
  ox_node_t *n;
  loom_dtype_t ct;      /* the dtype coordinates and sums are computed in */
  int64_t h, w;
  loom_dim_t grid[3];   /* N, Ho, Wo */
  int align;
  grid_padding_t padding;
  loom_value_t table;   /* (N*H*W, C) */
  loom_value_t base;    /* i64 (N, 1, 1): the first row of each batch entry */
  loom_value_t sum;     /* (N, Ho, Wo, C); id -1 before the first tap */
} grid_ctx_t;

static loom_status_t gs_const(grid_ctx_t *c, double v, loom_value_t *out) {
  return ox_scalar(c->n, c->ct, v, out);
}

/* x * a + b */
static loom_status_t gs_affine(grid_ctx_t *c, loom_value_t x, double a, double b,
                               loom_value_t *out) {
  loom_value_t s;
  LOOM_TRY(gs_const(c, a, &s));
  LOOM_TRY(loom_mul(c->n->g, x, s, out));
  if (b == 0) return LOOM_OK;
  LOOM_TRY(gs_const(c, b, &s));
  return loom_add(c->n->g, *out, s, out);
}

/* x reflected into [lo, hi] (PyTorch's reflect_coordinates, taking the
 * doubled bounds): |x - lo| folded by the span, mirrored on odd folds. */
static loom_status_t gs_reflect(grid_ctx_t *c, loom_value_t x, double lo, double hi,
                                loom_value_t *out) {
  loom_graph_t *g = c->n->g;
  double span = hi - lo;
  if (span <= 0) return gs_affine(c, x, 0.0, 0.0, out);
  loom_value_t a, folds, half, odd, extra, up, down, s;
  LOOM_TRY(gs_affine(c, x, 1.0, -lo, &a));
  LOOM_TRY(loom_abs(g, a, &a));
  LOOM_TRY(gs_affine(c, a, 1.0 / span, 0.0, &folds));
  LOOM_TRY(loom_floor(g, folds, &folds));
  LOOM_TRY(gs_affine(c, folds, -span, 0.0, &extra));
  LOOM_TRY(loom_add(g, a, extra, &extra));
  LOOM_TRY(gs_affine(c, folds, 0.5, 0.0, &half));
  LOOM_TRY(loom_floor(g, half, &half));
  LOOM_TRY(gs_affine(c, half, -2.0, 0.0, &half));
  LOOM_TRY(loom_add(g, folds, half, &odd)); /* folds mod 2 */
  LOOM_TRY(gs_const(c, 0.5, &s));
  LOOM_TRY(loom_gt(g, odd, s, &odd));
  LOOM_TRY(gs_affine(c, extra, 1.0, lo, &up));
  LOOM_TRY(gs_affine(c, extra, -1.0, hi, &down));
  return loom_where(g, odd, down, up, out);
}

/* A coordinate on an axis of size `size` moved inside by padding_mode
 * (zeros leaves it, and taps off the input read 0). */
static loom_status_t gs_pad(grid_ctx_t *c, loom_value_t x, int64_t size, loom_value_t *out) {
  double hi = (double)(size - 1);
  if (c->padding == GP_ZEROS) {
    *out = x;
    return LOOM_OK;
  }
  if (c->padding == GP_REFLECTION) {
    if (c->align) LOOM_TRY(gs_reflect(c, x, 0.0, hi, &x));
    else LOOM_TRY(gs_reflect(c, x, -0.5, hi + 0.5, &x));
  }
  return loom_clamp(c->n->g, x, 0.0, hi, out);
}

/* The row of (y, x) (whole numbers, inside the image) in a table of
 * (N*H*W, C) rows, base being the batch entry's first row; in i64, exact
 * for any image size. */
static loom_status_t pixel_index(ox_node_t *n, loom_value_t base, loom_value_t y, loom_value_t x,
                                 int64_t w, loom_value_t *out) {
  loom_value_t wv;
  LOOM_TRY(loom_cast(n->g, y, LOOM_I64, &y));
  LOOM_TRY(loom_cast(n->g, x, LOOM_I64, &x));
  LOOM_TRY(ox_scalar(n, LOOM_I64, (double)w, &wv));
  LOOM_TRY(loom_mul(n->g, y, wv, &y));
  LOOM_TRY(loom_add(n->g, y, x, out));
  return loom_add(n->g, *out, base, out);
}

/* Adds X at integer coordinates (xc, yc) times weight w to the sum; 0 where
 * they are off the input. */
static loom_status_t gs_tap(grid_ctx_t *c, loom_value_t xc, loom_value_t yc, loom_value_t w) {
  loom_graph_t *g = c->n->g;
  loom_value_t xk, yk, okx, oky, ok, idx, v, zero;
  LOOM_TRY(loom_clamp(g, xc, 0.0, (double)(c->w - 1), &xk));
  LOOM_TRY(loom_clamp(g, yc, 0.0, (double)(c->h - 1), &yk));
  LOOM_TRY(loom_eq(g, xk, xc, &okx));
  LOOM_TRY(loom_eq(g, yk, yc, &oky));
  LOOM_TRY(loom_and(g, okx, oky, &ok));
  LOOM_TRY(gs_const(c, 0.0, &zero));
  LOOM_TRY(loom_where(g, ok, w, zero, &w));
  LOOM_TRY(pixel_index(c->n, c->base, yk, xk, c->w, &idx));
  LOOM_TRY(loom_gather(g, c->table, idx, 0, &v));
  int64_t last = 3;
  LOOM_TRY(loom_unsqueeze(g, w, 1, &last, &w));
  LOOM_TRY(loom_mul(g, v, w, &v));
  if (c->sum.id < 0) c->sum = v;
  else LOOM_TRY(loom_add(g, c->sum, v, &c->sum));
  return LOOM_OK;
}

static loom_status_t gs_nearest(grid_ctx_t *c, loom_value_t ix, loom_value_t iy) {
  loom_value_t one;
  LOOM_TRY(gs_pad(c, ix, c->w, &ix));
  LOOM_TRY(gs_pad(c, iy, c->h, &iy));
  LOOM_TRY(loom_round(c->n->g, ix, &ix));
  LOOM_TRY(loom_round(c->n->g, iy, &iy));
  LOOM_TRY(loom_full(c->n->g, 3, c->grid, 1.0, c->ct, &one));
  return gs_tap(c, ix, iy, one);
}

/* floor(x), and the weights of its 2 (linear) or 4 (cubic, from floor - 1)
 * neighbours. */
static loom_status_t gs_weights(grid_ctx_t *c, loom_value_t x, int cubic, loom_value_t *base,
                                loom_value_t *w) {
  loom_graph_t *g = c->n->g;
  loom_value_t t, u;
  LOOM_TRY(loom_floor(g, x, base));
  LOOM_TRY(loom_sub(g, x, *base, &t));
  if (!cubic) {
    w[1] = t;
    return gs_affine(c, t, -1.0, 1.0, &w[0]);
  }
  /* PyTorch's cubic convolution with A = -0.75, for distances 1+t, t,
   * 1-t, 2-t. */
  const double a = -0.75;
  LOOM_TRY(gs_affine(c, t, -1.0, 1.0, &u));
  loom_value_t d[4];
  LOOM_TRY(gs_affine(c, t, 1.0, 1.0, &d[0]));
  d[1] = t;
  d[2] = u;
  LOOM_TRY(gs_affine(c, u, 1.0, 1.0, &d[3]));
  for (int k = 0; k < 4; k++) {
    loom_value_t p;
    int far = k == 0 || k == 3;
    /* near: ((a+2)d - (a+3)) d^2 + 1; far: ((a d - 5a) d + 8a) d - 4a */
    LOOM_TRY(gs_affine(c, d[k], far ? a : a + 2, far ? -5 * a : -(a + 3), &p));
    LOOM_TRY(loom_mul(g, p, d[k], &p));
    if (far) LOOM_TRY(gs_affine(c, p, 1.0, 8 * a, &p));
    LOOM_TRY(loom_mul(g, p, d[k], &p));
    LOOM_TRY(gs_affine(c, p, 1.0, far ? -4 * a : 1.0, &w[k]));
  }
  return LOOM_OK;
}

/* Bilinear taps the 2x2 neighbours of the padded coordinate; bicubic the
 * 4x4 around the raw one, each tap's coordinate padded on its own. */
static loom_status_t gs_interpolate(grid_ctx_t *c, loom_value_t ix, loom_value_t iy, int cubic) {
  loom_value_t x0, y0, wx[4], wy[4];
  if (!cubic) {
    LOOM_TRY(gs_pad(c, ix, c->w, &ix));
    LOOM_TRY(gs_pad(c, iy, c->h, &iy));
  }
  LOOM_TRY(gs_weights(c, ix, cubic, &x0, wx));
  LOOM_TRY(gs_weights(c, iy, cubic, &y0, wy));
  int taps = cubic ? 4 : 2, from = cubic ? -1 : 0;
  for (int j = 0; j < taps; j++) {
    loom_value_t yc;
    LOOM_TRY(gs_affine(c, y0, 1.0, from + j, &yc));
    if (cubic) LOOM_TRY(gs_pad(c, yc, c->h, &yc));
    for (int i = 0; i < taps; i++) {
      loom_value_t xc, w;
      LOOM_TRY(gs_affine(c, x0, 1.0, from + i, &xc));
      if (cubic) LOOM_TRY(gs_pad(c, xc, c->w, &xc));
      LOOM_TRY(loom_mul(c->n->g, wx[i], wy[j], &w));
      LOOM_TRY(gs_tap(c, xc, yc, w));
    }
  }
  return LOOM_OK;
}

/* Grid coordinate k (0: x, 1: y) in pixels: -1 and 1 are the corner
 * pixels' centres (align_corners) or their outer edges. */
static loom_status_t gs_unnormalize(grid_ctx_t *c, loom_value_t grid, int k, int64_t size,
                                    loom_value_t *out) {
  loom_value_t at;
  LOOM_TRY(ox_scalar(c->n, LOOM_I64, k, &at));
  LOOM_TRY(loom_gather(c->n->g, grid, at, 3, out));
  double s = (double)size, half = (s - 1) / 2;
  return gs_affine(c, *out, c->align ? half : s / 2, half, out);
}

static const char *const gs_mode_names[] = {"nearest", "bilinear", "bicubic", "linear", "cubic"};
static const char *const gs_padding_names[] = {"zeros", "border", "reflection"};

/* X (N, C, H, W) in dtype ct as rows of channels (N*H*W, C): a pixel's
 * channels are one gather. */
static loom_status_t pixel_table(ox_node_t *n, loom_value_t x, loom_dtype_t ct,
                                 const loom_dim_t *xd, loom_value_t *out) {
  int64_t perm[4] = {0, 2, 3, 1};
  loom_dim_t rows[2] = {0, xd[1]};
  LOOM_TRY(loom_dim_mul(n->g, xd[0], xd[2] * xd[3], &rows[0]));
  LOOM_TRY(loom_cast(n->g, x, ct, &x));
  LOOM_TRY(loom_transpose(n->g, x, perm, &x));
  return loom_reshape(n->g, x, 2, rows, out);
}

/* The pixel table, and each batch entry's first row. */
static loom_status_t gs_table(grid_ctx_t *c, loom_value_t x, const loom_dim_t *xd) {
  loom_value_t hw;
  LOOM_TRY(pixel_table(c->n, x, c->ct, xd, &c->table));
  LOOM_TRY(ox_iota(c->n, xd[0], 0, 3, &c->base)); /* a symbolic batch counts at run time */
  LOOM_TRY(ox_scalar(c->n, LOOM_I64, (double)(xd[2] * xd[3]), &hw));
  return loom_mul(c->n->g, c->base, hw, &c->base);
}

static loom_status_t gs_check(ox_node_t *n, const loom_dim_t *xd, int xr, const loom_dim_t *gd,
                              int gr) {
  if (xr != 4 || gr != 4)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "input rank %d, grid rank %d (2-D sampling: "
                   "ranks 4 and 4 are imported)", xr, gr);
  for (int d = 1; d < 4; d++) /* the batch and the grid's places may be symbolic */
    if (ox_is_dim_sym(xd[d]) || (d == 3 && ox_is_dim_sym(gd[d])))
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "input dim %d or grid dim 3 is symbolic (the "
                     "input's channels, height and width must be static)", d);
  if (gd[3] != 2 || gd[0] != xd[0])
    return ox_fail(n, LOOM_ERR_SHAPE, "grid (%lld, %lld, %lld, %lld) for %lld inputs: it must "
                   "be (N, H_out, W_out, 2)", (long long)gd[0], (long long)gd[1],
                   (long long)gd[2], (long long)gd[3], (long long)xd[0]);
  if (xd[2] < 1 || xd[3] < 1) return ox_fail(n, LOOM_ERR_SHAPE, "an empty input image");
  if (!ox_is_float(ox_dtype(n, n->in[0])) || !ox_is_float(ox_dtype(n, n->in[1])))
    return ox_fail(n, LOOM_ERR_DTYPE, "input and grid must be floating point");
  return LOOM_OK;
}

loom_status_t ox_grid_sample(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  LOOM_TRY(ox_need(n, 1));
  loom_graph_t *g = n->g;
  loom_dim_t xd[LOOM_MAX_RANK], gd[LOOM_MAX_RANK];
  int xr, gr, mode = 0, padding = 0;
  LOOM_TRY(ox_dims(n, n->in[0], xd, &xr));
  LOOM_TRY(ox_dims(n, n->in[1], gd, &gr));
  LOOM_TRY(gs_check(n, xd, xr, gd, gr));
  LOOM_TRY(pick_name(n, "mode", n->opset >= 20 ? "linear" : "bilinear", gs_mode_names, 5, &mode));
  LOOM_TRY(pick_name(n, "padding_mode", "zeros", gs_padding_names, 3, &padding));
  loom_dtype_t dt = ox_dtype(n, n->in[0]);
  grid_ctx_t c = {.n = n, .ct = dt == LOOM_F64 ? LOOM_F64 : LOOM_F32, .h = xd[2], .w = xd[3],
                  .grid = {gd[0], gd[1], gd[2]}, .align = (int)ox_int(n, "align_corners", 0),
                  .padding = (grid_padding_t)padding, .sum = {.id = -1}};
  loom_value_t grid, ix, iy, y;
  LOOM_TRY(gs_table(&c, n->in[0], xd));
  LOOM_TRY(loom_cast(g, n->in[1], c.ct, &grid));
  LOOM_TRY(gs_unnormalize(&c, grid, 0, c.w, &ix));
  LOOM_TRY(gs_unnormalize(&c, grid, 1, c.h, &iy));
  if (mode == 0) LOOM_TRY(gs_nearest(&c, ix, iy));
  else LOOM_TRY(gs_interpolate(&c, ix, iy, mode == 2 || mode == 4));
  int64_t perm[4] = {0, 3, 1, 2};
  LOOM_TRY(loom_transpose(g, c.sum, perm, &y));
  LOOM_TRY(loom_cast(g, y, dt, &y));
  return ox_set(n, 0, y);
}

/* ---- RoiAlign: bilinear samples averaged (or maxed) over each box's bins ---- */

/* The boxes of one RoiAlign, read as ONNX Runtime reads them. */
typedef struct roi_ctx {
  ox_node_t *n;
  loom_dtype_t ct;
  loom_value_t rois;    /* (R, 4) in ct: x1, y1, x2, y2 */
  double scale, offset; /* spatial_scale; 0.5 for half_pixel */
  int legacy;           /* output_half_pixel: boxes at least a pixel wide */
  int64_t sampling;     /* samples per bin along each axis */
} roi_ctx_t;

/* Column col of the boxes, scaled to pixels: (R, 1). */
static loom_status_t ra_edge(roi_ctx_t *c, int col, loom_value_t *out) {
  loom_value_t at, s;
  int64_t axis = 1;
  LOOM_TRY(ox_scalar(c->n, LOOM_I64, col, &at));
  LOOM_TRY(loom_gather(c->n->g, c->rois, at, 1, out));
  LOOM_TRY(ox_scalar(c->n, c->ct, c->scale, &s));
  LOOM_TRY(loom_mul(c->n->g, *out, s, out));
  LOOM_TRY(ox_scalar(c->n, c->ct, c->offset, &s));
  LOOM_TRY(loom_sub(c->n->g, *out, s, out));
  return loom_unsqueeze(c->n->g, *out, 1, &axis, out);
}

/* One axis of every box's samples (col 0: x, 1: y): the two pixels each of
 * the pooled * sampling samples reads, lo and hi (R, pooled * sampling),
 * and their weights, 0 for a sample more than a pixel off the image. */
static loom_status_t ra_axis(roi_ctx_t *c, int col, int64_t pooled, int64_t size,
                             loom_value_t *lohi, loom_value_t *w) {
  loom_graph_t *g = c->n->g;
  int64_t count = pooled * c->sampling;
  loom_value_t start, end, len, s, offs, pos, ok, okhi, t, zero;
  LOOM_TRY(ra_edge(c, col, &start));
  LOOM_TRY(ra_edge(c, col + 2, &end));
  LOOM_TRY(loom_sub(g, end, start, &len));
  if (c->legacy) {
    LOOM_TRY(ox_scalar(c->n, c->ct, 1.0, &s));
    LOOM_TRY(loom_maximum(g, len, s, &len));
  }
  LOOM_TRY(ox_scalar(c->n, c->ct, (double)pooled, &s));
  LOOM_TRY(loom_div(g, len, s, &len)); /* a bin's size */
  double *at = malloc(sizeof *at * (size_t)count);
  if (!at) return loom_fail(LOOM_ERR_NOMEM, "out of memory for RoiAlign's offsets");
  for (int64_t k = 0; k < count; k++)
    at[k] = (double)(k / c->sampling) + ((double)(k % c->sampling) + 0.5) / (double)c->sampling;
  loom_status_t st = along_axis(c->n, c->ct, 2, 1, count, at, NULL, &offs);
  free(at);
  LOOM_TRY(st);
  LOOM_TRY(loom_mul(g, len, offs, &pos));
  LOOM_TRY(loom_add(g, start, pos, &pos));
  LOOM_TRY(ox_scalar(c->n, c->ct, -1.0, &s));
  LOOM_TRY(loom_ge(g, pos, s, &ok));
  LOOM_TRY(ox_scalar(c->n, c->ct, (double)size, &s));
  LOOM_TRY(loom_le(g, pos, s, &okhi));
  LOOM_TRY(loom_and(g, ok, okhi, &ok));
  LOOM_TRY(loom_clamp(g, pos, 0.0, (double)(size - 1), &pos));
  LOOM_TRY(loom_floor(g, pos, &lohi[0]));
  LOOM_TRY(ox_scalar(c->n, c->ct, 1.0, &s));
  LOOM_TRY(loom_add(g, lohi[0], s, &lohi[1]));
  LOOM_TRY(loom_clamp(g, lohi[1], 0.0, (double)(size - 1), &lohi[1]));
  LOOM_TRY(loom_sub(g, pos, lohi[0], &t));
  LOOM_TRY(ox_scalar(c->n, c->ct, 0.0, &zero));
  LOOM_TRY(loom_where(g, ok, t, zero, &w[1]));
  LOOM_TRY(loom_sub(g, s, t, &t));
  return loom_where(g, ok, t, zero, &w[0]);
}

static loom_status_t ra_check(ox_node_t *n, const loom_dim_t *xd, int xr, const loom_dim_t *rd,
                              int rr, const loom_dim_t *bd, int br) {
  if (xr != 4) return ox_fail(n, LOOM_ERR_SHAPE, "input rank %d (N, C, H, W is needed)", xr);
  if (rr != 2 || br != 1)
    return ox_fail(n, LOOM_ERR_SHAPE, "rois rank %d, batch_indices rank %d (2 and 1)", rr, br);
  for (int d = 0; d < 4; d++)
    if (xd[d] < 0 || (d < 2 && rd[d] < 0) || (d < 1 && bd[d] < 0))
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "a symbolic dim (static shapes are needed)");
  if (rd[1] != 4 || bd[0] != rd[0])
    return ox_fail(n, LOOM_ERR_SHAPE, "rois (%lld, %lld) with %lld batch_indices: (R, 4) and R "
                   "are needed", (long long)rd[0], (long long)rd[1], (long long)bd[0]);
  if (xd[2] < 1 || xd[3] < 1) return ox_fail(n, LOOM_ERR_SHAPE, "an empty input image");
  if (!ox_is_float(ox_dtype(n, n->in[0])) || !ox_is_float(ox_dtype(n, n->in[1])))
    return ox_fail(n, LOOM_ERR_DTYPE, "input and rois must be floating point");
  return LOOM_OK;
}

/* Sampling ratio 0 picks each box's samples from its size, known only when
 * the graph runs, and is not imported. */
static loom_status_t ra_read(ox_node_t *n, roi_ctx_t *c, int64_t *ph, int64_t *pw, int *max) {
  static const char *const modes[] = {"avg", "max"};
  static const char *const coords[] = {"half_pixel", "output_half_pixel"};
  int coord = 1;
  LOOM_TRY(pick_name(n, "mode", "avg", modes, 2, max));
  if (n->opset >= 16)
    LOOM_TRY(pick_name(n, "coordinate_transformation_mode", "half_pixel", coords, 2, &coord));
  *ph = ox_int(n, "output_height", 1);
  *pw = ox_int(n, "output_width", 1);
  c->sampling = ox_int(n, "sampling_ratio", 0);
  c->scale = ox_float(n, "spatial_scale", 1.0);
  c->offset = coord == 0 ? 0.5 : 0.0;
  c->legacy = coord == 1;
  if (*ph < 1 || *pw < 1 || *ph > 65536 || *pw > 65536)
    return ox_fail(n, LOOM_ERR_INVALID, "output size %lld x %lld", (long long)*ph,
                   (long long)*pw);
  if (c->sampling < 1 || c->sampling > 1024)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "sampling_ratio %lld: adaptive sampling (0) is "
                   "not imported; 1 to 1024 are", (long long)c->sampling);
  return LOOM_OK;
}

loom_status_t ox_roi_align(ox_node_t *n) {
  for (int i = 0; i < 3; i++) LOOM_TRY(ox_need(n, i));
  loom_graph_t *g = n->g;
  loom_dim_t xd[LOOM_MAX_RANK], rd[LOOM_MAX_RANK], bd[LOOM_MAX_RANK];
  int xr, rr, br, max = 0;
  LOOM_TRY(ox_dims(n, n->in[0], xd, &xr));
  LOOM_TRY(ox_dims(n, n->in[1], rd, &rr));
  LOOM_TRY(ox_dims(n, n->in[2], bd, &br));
  LOOM_TRY(ra_check(n, xd, xr, rd, rr, bd, br));
  loom_dtype_t dt = ox_dtype(n, n->in[0]);
  roi_ctx_t c = {.n = n, .ct = dt == LOOM_F64 ? LOOM_F64 : LOOM_F32};
  int64_t ph, pw;
  LOOM_TRY(ra_read(n, &c, &ph, &pw, &max));
  loom_value_t table, base, s, y[2], wy[2], x[2], wx[2], acc = {.id = -1};
  LOOM_TRY(pixel_table(n, n->in[0], c.ct, xd, &table));
  LOOM_TRY(loom_cast(g, n->in[1], c.ct, &c.rois));
  LOOM_TRY(ra_axis(&c, 1, ph, xd[2], y, wy));
  LOOM_TRY(ra_axis(&c, 0, pw, xd[3], x, wx));
  loom_dim_t bshape[3] = {rd[0], 1, 1};
  LOOM_TRY(loom_cast(g, n->in[2], LOOM_I64, &base));
  LOOM_TRY(ox_scalar(n, LOOM_I64, (double)(xd[2] * xd[3]), &s));
  LOOM_TRY(loom_mul(g, base, s, &base));
  LOOM_TRY(loom_reshape(g, base, 3, bshape, &base));
  int64_t ax2 = 2, ax1 = 1, ax3 = 3;
  for (int k = 0; k < 2; k++) {
    LOOM_TRY(loom_unsqueeze(g, y[k], 1, &ax2, &y[k]));
    LOOM_TRY(loom_unsqueeze(g, wy[k], 1, &ax2, &wy[k]));
    LOOM_TRY(loom_unsqueeze(g, x[k], 1, &ax1, &x[k]));
    LOOM_TRY(loom_unsqueeze(g, wx[k], 1, &ax1, &wx[k]));
  }
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++) {
      loom_value_t idx, v, w;
      LOOM_TRY(pixel_index(n, base, y[a], x[b], xd[3], &idx));
      LOOM_TRY(loom_gather(g, table, idx, 0, &v));
      LOOM_TRY(loom_mul(g, wy[a], wx[b], &w));
      LOOM_TRY(loom_unsqueeze(g, w, 1, &ax3, &w));
      LOOM_TRY(loom_mul(g, v, w, &v));
      if (acc.id < 0) acc = v;
      else LOOM_TRY((max ? loom_maximum : loom_add)(g, acc, v, &acc));
    }
  /* (R, PH*S, PW*S, C) -> (R, PH, S, PW, S, C), pooled over the S axes */
  loom_dim_t bins[6] = {rd[0], ph, c.sampling, pw, c.sampling, xd[1]};
  int64_t samples[2] = {2, 4}, perm[4] = {0, 3, 1, 2};
  LOOM_TRY(loom_reshape(g, acc, 6, bins, &acc));
  LOOM_TRY((max ? loom_max : loom_mean)(g, acc, 2, samples, 0, &acc));
  LOOM_TRY(loom_transpose(g, acc, perm, &acc));
  LOOM_TRY(loom_cast(g, acc, dt, &acc));
  return ox_set(n, 0, acc);
}
