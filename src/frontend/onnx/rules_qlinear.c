/* Rules for ONNX's integer contractions: MatMulInteger and ConvInteger
 * (int32 results) and QLinearMatMul and QLinearConv (requantized to uint8
 * or int8). Inputs less their zero points are integers of at most 9 bits,
 * so their products summed in f64 are exact (below 2^53) whatever the
 * order: the contraction runs as an f64 matmul or conv2d (Loom's conv2d
 * takes floats only) and is cast back. Loom reads uint8 as int32
 * (onnx.md): a uint8 result keeps its 0..255 in an int32. Requantizing
 * multiplies by a_scale b_scale / y_scale, rounds half to even, adds the
 * zero point and saturates, as ONNX says. */
#include <string.h>

#include "frontend/onnx/onnx_import.h"

static int is_quantized(loom_dtype_t dt) { return dt == LOOM_I8 || dt == LOOM_I32; }

/* Input i (an 8-bit integer tensor, uint8 read as int32) as f64. */
static loom_status_t widened(ox_node_t *n, int i, const char *what, loom_value_t *out) {
  LOOM_TRY(ox_need(n, i));
  loom_dtype_t dt = ox_dtype(n, n->in[i]);
  if (!is_quantized(dt))
    return ox_fail(n, LOOM_ERR_DTYPE, "%s is %s (uint8 or int8 expected)", what,
                   loom_dtype_name(dt));
  return loom_cast(n->g, n->in[i], LOOM_F64, out);
}

/* Per-tensor or per-slice value v (a scale or zero point) of an operand of
 * rank r, shaped to broadcast against it: rank 0 or one entry as a scalar;
 * a vector of `size` entries placed along dim `dim` (the others 1); a
 * value of rank r as it is. */
static loom_status_t slice_shaped(ox_node_t *n, loom_value_t v, int r, int dim, loom_dim_t size,
                                  const char *what, loom_value_t *out) {
  loom_dim_t vd[LOOM_MAX_RANK];
  int vr;
  LOOM_TRY(ox_dims(n, v, vd, &vr));
  *out = v;
  if (vr == 0 || (vr == 1 && vd[0] == 1)) return loom_reshape(n->g, v, 0, NULL, out);
  if (vr == r && vr != 1) return LOOM_OK;
  if (vr != 1 || dim < 0 || dim >= r || (vd[0] >= 0 && size >= 0 && vd[0] != size))
    return ox_fail(n, LOOM_ERR_SHAPE, "%s has rank %d and %lld entries: a scalar, or one entry "
                   "per %s expected", what, vr, (long long)(vr ? vd[0] : 1),
                   dim == r - 1 ? "column" : dim == r - 2 ? "row" : "channel");
  loom_dim_t dims[LOOM_MAX_RANK];
  for (int d = 0; d < r; d++) dims[d] = d == dim ? vd[0] : 1;
  return loom_reshape(n->g, v, r, dims, out);
}

/* x - zero point (input zi, when present), in f64; the zero point per
 * tensor or along dim `dim` of x. */
static loom_status_t centered(ox_node_t *n, loom_value_t x, int zi, int dim, const char *what,
                              loom_value_t *out) {
  *out = x;
  if (!ox_has(n, zi)) return LOOM_OK;
  if (!is_quantized(ox_dtype(n, n->in[zi])))
    return ox_fail(n, LOOM_ERR_DTYPE, "%s is %s (uint8 or int8 expected)", what,
                   loom_dtype_name(ox_dtype(n, n->in[zi])));
  int r = ox_rank(n, x);
  loom_value_t zp;
  LOOM_TRY(slice_shaped(n, n->in[zi], r, dim, dim >= 0 && dim < r ? ox_dim(n, x, dim) : -1, what,
                        &zp));
  LOOM_TRY(loom_cast(n->g, zp, LOOM_F64, &zp));
  return loom_sub(n->g, x, zp, out);
}

/* The f64 matmul of inputs ai and bi less their zero points (azi, bzi):
 * a's per row, b's per column. */
static loom_status_t int_matmul(ox_node_t *n, int ai, int azi, int bi, int bzi, loom_value_t *out) {
  loom_value_t a, b;
  LOOM_TRY(widened(n, ai, "a", &a));
  LOOM_TRY(widened(n, bi, "b", &b));
  LOOM_TRY(centered(n, a, azi, ox_rank(n, a) - 2, "a_zero_point", &a));
  LOOM_TRY(centered(n, b, bzi, ox_rank(n, b) - 1, "b_zero_point", &b));
  return loom_matmul(n->g, a, b, 0, 0, out);
}

/* The f64 convolution of x (input 0) and w (input wi) less their zero
 * points (input 2 per tensor, wzi per tensor or output channel), plus
 * bias (-1: none), by the Conv rule (its attributes are ConvInteger's
 * and QLinearConv's). */
static loom_status_t int_conv(ox_node_t *n, int wi, int wzi, loom_value_t bias, int xzi,
                              loom_value_t *out) {
  loom_value_t in[3] = {{-1}, {-1}, bias}, y[1] = {{-1}};
  LOOM_TRY(widened(n, 0, "x", &in[0]));
  LOOM_TRY(widened(n, wi, "w", &in[1]));
  if (ox_has(n, xzi) && ox_rank(n, n->in[xzi]) > 1)
    return ox_fail(n, LOOM_ERR_SHAPE, "x_zero_point must be a scalar");
  LOOM_TRY(centered(n, in[0], xzi, -1, "x_zero_point", &in[0]));
  LOOM_TRY(centered(n, in[1], wzi, 0, "w_zero_point", &in[1]));
  loom_value_t *saved_in = n->in, *saved_out = n->out;
  int saved_n_in = n->n_in, saved_n_out = n->n_out;
  n->in = in;
  n->n_in = bias.id >= 0 ? 3 : 2;
  n->out = y;
  n->n_out = 1;
  loom_status_t st = ox_conv(n);
  n->in = saved_in;
  n->n_in = saved_n_in;
  n->out = saved_out;
  n->n_out = saved_n_out;
  *out = y[0];
  return st;
}

loom_status_t ox_matmul_integer(ox_node_t *n) {
  loom_value_t y;
  LOOM_TRY(int_matmul(n, 0, 2, 1, 3, &y));
  return loom_cast(n->g, y, LOOM_I32, &n->out[0]);
}

loom_status_t ox_conv_integer(ox_node_t *n) {
  loom_value_t y, none = {.id = -1};
  LOOM_TRY(int_conv(n, 1, 3, none, 2, &y));
  return loom_cast(n->g, y, LOOM_I32, &n->out[0]);
}

/* Scale input i in f32 (or its own float dtype, when the first scale's),
 * shaped per slice as slice_shaped. */
static loom_status_t scale_of(ox_node_t *n, int i, int r, int dim, loom_dim_t size,
                              loom_dtype_t dt, const char *what, loom_value_t *out) {
  LOOM_TRY(ox_need(n, i));
  if (!ox_is_float(ox_dtype(n, n->in[i])))
    return ox_fail(n, LOOM_ERR_DTYPE, "%s is %s, not a float dtype", what,
                   loom_dtype_name(ox_dtype(n, n->in[i])));
  LOOM_TRY(slice_shaped(n, n->in[i], r, dim, size, what, out));
  return loom_cast(n->g, *out, dt, out);
}

/* acc (f64) times mult, rounded half to even, plus y_zero_point (input
 * yzi, per tensor or along dim of acc), saturated to its type: int8 when
 * it is int8, else uint8 (read as int32; the default without one). */
static loom_status_t requantize(ox_node_t *n, loom_value_t acc, loom_value_t mult, int yzi,
                                int dim, loom_value_t *out) {
  loom_graph_t *g = n->g;
  loom_dtype_t dt = ox_has(n, yzi) ? ox_dtype(n, n->in[yzi]) : LOOM_I32;
  if (!is_quantized(dt))
    return ox_fail(n, LOOM_ERR_DTYPE, "y_zero_point is %s (uint8 or int8 expected)",
                   loom_dtype_name(dt));
  int r = ox_rank(n, acc);
  loom_value_t y, zp;
  LOOM_TRY(loom_cast(g, mult, LOOM_F64, &mult));
  LOOM_TRY(loom_mul(g, acc, mult, &y));
  LOOM_TRY(loom_round(g, y, &y));
  if (ox_has(n, yzi)) {
    LOOM_TRY(slice_shaped(n, n->in[yzi], r, dim, dim >= 0 && dim < r ? ox_dim(n, acc, dim) : -1,
                          "y_zero_point", &zp));
    LOOM_TRY(loom_cast(g, zp, LOOM_F64, &zp));
    LOOM_TRY(loom_add(g, y, zp, &y));
  }
  LOOM_TRY(loom_clamp(g, y, dt == LOOM_I8 ? -128 : 0, dt == LOOM_I8 ? 127 : 255, &y));
  return loom_cast(g, y, dt, out);
}

/* Inputs: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
 * y_zero_point; a's and y's per row, b's per column. */
loom_status_t ox_qlinear_matmul(ox_node_t *n) {
  loom_graph_t *g = n->g;
  loom_value_t acc, sa, sb, sy, mult;
  LOOM_TRY(int_matmul(n, 0, 2, 3, 5, &acc));
  LOOM_TRY(ox_need(n, 1));
  loom_dtype_t dt = ox_dtype(n, n->in[1]);
  int ra = ox_rank(n, n->in[0]), rb = ox_rank(n, n->in[3]), ry = ox_rank(n, acc);
  LOOM_TRY(scale_of(n, 1, ra, ra - 2, ox_dim(n, n->in[0], ra - 2), dt, "a_scale", &sa));
  LOOM_TRY(scale_of(n, 4, rb, rb - 1, ox_dim(n, n->in[3], rb - 1), dt, "b_scale", &sb));
  LOOM_TRY(scale_of(n, 6, ry, ry - 2, ox_dim(n, acc, ry - 2), dt, "y_scale", &sy));
  LOOM_TRY(loom_mul(g, sa, sb, &mult));
  LOOM_TRY(loom_div(g, mult, sy, &mult));
  return requantize(n, acc, mult, 7, ry - 2, &n->out[0]);
}

/* Inputs: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
 * y_zero_point, B (int32, of scale x_scale w_scale); w's per output
 * channel, the others per tensor. */
loom_status_t ox_qlinear_conv(ox_node_t *n) {
  loom_graph_t *g = n->g;
  loom_value_t acc, sx, sw, sy, mult, bias = {.id = -1};
  if (ox_has(n, 8)) {
    if (ox_dtype(n, n->in[8]) != LOOM_I32 || ox_rank(n, n->in[8]) != 1)
      return ox_fail(n, LOOM_ERR_DTYPE, "B must be a vector of int32");
    LOOM_TRY(loom_cast(g, n->in[8], LOOM_F64, &bias));
  }
  LOOM_TRY(int_conv(n, 3, 5, bias, 2, &acc));
  LOOM_TRY(ox_need(n, 1));
  loom_dtype_t dt = ox_dtype(n, n->in[1]);
  int r = ox_rank(n, acc);
  LOOM_TRY(scale_of(n, 1, r, -1, -1, dt, "x_scale", &sx));
  LOOM_TRY(scale_of(n, 4, r, 1, ox_dim(n, acc, 1), dt, "w_scale", &sw));
  LOOM_TRY(scale_of(n, 6, r, -1, -1, dt, "y_scale", &sy));
  LOOM_TRY(loom_mul(g, sx, sw, &mult));
  LOOM_TRY(loom_div(g, mult, sy, &mult));
  return requantize(n, acc, mult, 7, -1, &n->out[0]);
}
