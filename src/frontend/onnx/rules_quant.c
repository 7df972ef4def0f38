/* Rules for ONNX's linear quantization: QuantizeLinear, DequantizeLinear
 * and DynamicQuantizeLinear, per tensor or per axis, in float arithmetic.
 * Loom reads uint8 as int32 (onnx.md), so a quantized value keeps its
 * ONNX range (0..255) in an int32; rounding is half to even, as ONNX's. */
#include <math.h>
#include <string.h>

#include "frontend/onnx/onnx_import.h"

/* A quantized ONNX type: its range and the Loom dtype it imports as. */
typedef struct qtype {
  double lo, hi;
  loom_dtype_t dtype;
} qtype_t;

static loom_status_t qtype_of_onnx(const ox_node_t *n, int64_t onnx_type, qtype_t *q) {
  static const struct { int64_t type; double lo, hi; } ranges[] = {
      {ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 0, 255},
      {ONNX__TENSOR_PROTO__DATA_TYPE__INT8, -128, 127},
      {ONNX__TENSOR_PROTO__DATA_TYPE__UINT16, 0, 65535},
      {ONNX__TENSOR_PROTO__DATA_TYPE__INT16, -32768, 32767},
  };
  for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
    if (ranges[i].type == onnx_type && ox_dtype_from_onnx((int32_t)onnx_type, &q->dtype)) {
      q->lo = ranges[i].lo;
      q->hi = ranges[i].hi;
      return LOOM_OK;
    }
  return ox_fail(n, LOOM_ERR_UNSUPPORTED, "quantizing to %s is not supported (Loom has no "
                 "float8 or 4-bit dtype; uint8, int8, uint16 and int16 are supported)",
                 ox_onnx_type_name((int32_t)onnx_type));
}

/* The type QuantizeLinear produces: output_dtype (opset 21), else its
 * zero point's, else uint8. */
static loom_status_t quantized_type(const ox_node_t *n, qtype_t *q) {
  int64_t out = ox_int(n, "output_dtype", 0);
  if (out) return qtype_of_onnx(n, out, q);
  if (!ox_has(n, 2)) return qtype_of_onnx(n, ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, q);
  loom_dtype_t dt = ox_dtype(n, n->in[2]);
  if (dt == LOOM_I8) return qtype_of_onnx(n, ONNX__TENSOR_PROTO__DATA_TYPE__INT8, q);
  /* Before opset 21 a zero point is uint8 or int8 (or float8, which Loom
   * cannot read): an int32 one was uint8. From 21 on, uint16 and int16
   * import as int32 too, and the importer no longer knows which. */
  if (dt == LOOM_I32 && n->opset < 21)
    return qtype_of_onnx(n, ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, q);
  if (dt == LOOM_I32)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "a zero point read as int32 may be uint8, uint16 or "
                   "int16 at opset %lld; set output_dtype to say which", (long long)n->opset);
  return ox_fail(n, LOOM_ERR_DTYPE, "y_zero_point is %s (uint8 or int8 expected)",
                 loom_dtype_name(dt));
}

/* Scale or zero point v shaped to broadcast against x: per tensor as it is,
 * per axis (1-D of x's dim axis) along that axis. */
static loom_status_t along_axis(ox_node_t *n, loom_value_t v, loom_value_t x, const char *what,
                                loom_value_t *out) {
  *out = v;
  int vr = ox_rank(n, v), xr = ox_rank(n, x);
  if (vr == 0 || (vr == 1 && ox_dim(n, v, 0) == 1)) return LOOM_OK;
  if (ox_int(n, "block_size", 0) != 0)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "blocked quantization (block_size) is not supported");
  if (vr != 1)
    return ox_fail(n, LOOM_ERR_SHAPE, "%s has rank %d (0, or 1 for one axis)", what, vr);
  if (n->opset < 13)
    return ox_fail(n, LOOM_ERR_SHAPE, "%s must be a scalar before opset 13", what);
  int64_t axis;
  LOOM_TRY(ox_axis(n, ox_int(n, "axis", 1), xr, "axis", &axis));
  loom_dim_t c = ox_dim(n, x, (int)axis), dims[LOOM_MAX_RANK];
  if (c >= 0 && ox_dim(n, v, 0) >= 0 && ox_dim(n, v, 0) != c)
    return ox_fail(n, LOOM_ERR_SHAPE, "%s has %lld entries and axis %lld of x %lld", what,
                   (long long)ox_dim(n, v, 0), (long long)axis, (long long)c);
  for (int d = 0; d < xr; d++) dims[d] = d == axis ? c : 1;
  return loom_reshape(n->g, v, xr, dims, out);
}

/* saturate(round(x / scale) + zero_point), in x's float dtype; scale and
 * zp already broadcast against x (zp may be -1: none). */
static loom_status_t quantize(ox_node_t *n, loom_value_t x, loom_value_t scale, loom_value_t zp,
                              const qtype_t *q, loom_value_t *out) {
  loom_graph_t *g = n->g;
  loom_dtype_t dt = ox_dtype(n, x);
  loom_value_t y;
  LOOM_TRY(loom_div(g, x, scale, &y));
  LOOM_TRY(loom_round(g, y, &y));
  if (zp.id >= 0) {
    LOOM_TRY(loom_cast(g, zp, dt, &zp));
    LOOM_TRY(loom_add(g, y, zp, &y));
  }
  LOOM_TRY(loom_clamp(g, y, q->lo, q->hi, &y));
  return loom_cast(g, y, q->dtype, out);
}

loom_status_t ox_quantize_linear(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  LOOM_TRY(ox_need(n, 1));
  loom_value_t x = n->in[0], scale, zp = {.id = -1};
  loom_dtype_t dt = ox_dtype(n, x);
  if (!ox_is_float(dt)) {
    /* int32 x (opset 10 and 13) is quantized in float. */
    if (dt != LOOM_I32)
      return ox_fail(n, LOOM_ERR_DTYPE, "x is %s (a float dtype or int32)", loom_dtype_name(dt));
    LOOM_TRY(loom_cast(n->g, x, LOOM_F32, &x));
    dt = LOOM_F32;
  }
  qtype_t q;
  LOOM_TRY(quantized_type(n, &q));
  LOOM_TRY(along_axis(n, n->in[1], x, "y_scale", &scale));
  if (ox_dtype(n, scale) != dt) LOOM_TRY(loom_cast(n->g, scale, dt, &scale));
  if (ox_has(n, 2)) LOOM_TRY(along_axis(n, n->in[2], x, "y_zero_point", &zp));
  return quantize(n, x, scale, zp, &q, &n->out[0]);
}

/* (x - zero_point) * scale, in scale's dtype. */
loom_status_t ox_dequantize_linear(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  LOOM_TRY(ox_need(n, 1));
  loom_graph_t *g = n->g;
  loom_value_t x = n->in[0], scale, zp;
  loom_dtype_t xdt = ox_dtype(n, x), dt = ox_dtype(n, n->in[1]);
  if (ox_is_float(xdt) || xdt == LOOM_BOOL)
    return ox_fail(n, LOOM_ERR_DTYPE, "x is %s (an integer dtype; Loom has no float8)",
                   loom_dtype_name(xdt));
  if (!ox_is_float(dt))
    return ox_fail(n, LOOM_ERR_DTYPE, "x_scale is %s, not a float dtype", loom_dtype_name(dt));
  LOOM_TRY(along_axis(n, n->in[1], x, "x_scale", &scale));
  LOOM_TRY(loom_cast(g, x, dt, &x));
  if (ox_has(n, 2)) {
    LOOM_TRY(along_axis(n, n->in[2], n->in[0], "x_zero_point", &zp));
    LOOM_TRY(loom_cast(g, zp, dt, &zp));
    LOOM_TRY(loom_sub(g, x, zp, &x));
  }
  return loom_mul(g, x, scale, &n->out[0]);
}

/* uint8 over the range of x widened to hold 0: scale = (max - min) / 255,
 * zero point = saturate(round(-min / scale)), as ONNX's function body. */
loom_status_t ox_dynamic_quantize_linear(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  loom_graph_t *g = n->g;
  loom_value_t x = n->in[0], zero, qmax, lo, hi, scale, zp;
  if (ox_dtype(n, x) != LOOM_F32)
    return ox_fail(n, LOOM_ERR_DTYPE, "x is %s, not float32", loom_dtype_name(ox_dtype(n, x)));
  qtype_t q;
  LOOM_TRY(qtype_of_onnx(n, ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, &q));
  LOOM_TRY(ox_like(n, x, 0.0, &zero));
  LOOM_TRY(ox_like(n, x, q.hi, &qmax));
  LOOM_TRY(loom_min(g, x, 0, NULL, 0, &lo));
  LOOM_TRY(loom_minimum(g, lo, zero, &lo));
  LOOM_TRY(loom_max(g, x, 0, NULL, 0, &hi));
  LOOM_TRY(loom_maximum(g, hi, zero, &hi));
  LOOM_TRY(loom_sub(g, hi, lo, &scale));
  LOOM_TRY(loom_div(g, scale, qmax, &scale));
  LOOM_TRY(loom_div(g, lo, scale, &zp));
  LOOM_TRY(loom_sub(g, zero, zp, &zp));
  LOOM_TRY(loom_clamp(g, zp, q.lo, q.hi, &zp));
  LOOM_TRY(loom_round(g, zp, &zp));
  LOOM_TRY(quantize(n, x, scale, zp, &q, &n->out[0]));
  LOOM_TRY(ox_set(n, 1, scale));
  LOOM_TRY(loom_cast(g, zp, q.dtype, &zp));
  return ox_set(n, 2, zp);
}
