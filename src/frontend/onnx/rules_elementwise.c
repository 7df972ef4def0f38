/* Rules for ONNX's elementwise ops that are not one Loom op each: the
 * activations with parameters, integer division as ONNX truncates it,
 * the variadic ops, casts and constants. */
#include <math.h>
#include <string.h>

#include "frontend/onnx/onnx_import.h"

#define IN0 LOOM_TRY(ox_need(n, 0)); loom_value_t x = n->in[0]; loom_graph_t *g = n->g

loom_status_t ox_identity(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  n->out[0] = n->in[0];
  return LOOM_OK;
}

loom_status_t ox_leaky_relu(ox_node_t *n) {
  IN0;
  return loom_leaky_relu(g, x, ox_float(n, "alpha", 0.01), &n->out[0]);
}

loom_status_t ox_elu(ox_node_t *n) {
  IN0;
  return loom_elu(g, x, ox_float(n, "alpha", 1.0), &n->out[0]);
}

loom_status_t ox_selu(ox_node_t *n) {
  IN0;
  loom_value_t e, gamma;
  LOOM_TRY(loom_elu(g, x, ox_float(n, "alpha", 1.67326319217681884765625), &e));
  LOOM_TRY(ox_like(n, x, ox_float(n, "gamma", 1.05070102214813232421875), &gamma));
  return loom_mul(g, e, gamma, &n->out[0]);
}

/* alpha * elu(x / alpha). */
loom_status_t ox_celu(ox_node_t *n) {
  IN0;
  loom_value_t alpha, scaled, e;
  LOOM_TRY(ox_like(n, x, ox_float(n, "alpha", 1.0), &alpha));
  LOOM_TRY(loom_div(g, x, alpha, &scaled));
  LOOM_TRY(loom_elu(g, scaled, 1.0, &e));
  return loom_mul(g, e, alpha, &n->out[0]);
}

static loom_status_t hard_sigmoid(ox_node_t *n, loom_value_t x, double alpha, double beta,
                                  loom_value_t *out) {
  loom_value_t a, b, ax, axb;
  LOOM_TRY(ox_like(n, x, alpha, &a));
  LOOM_TRY(ox_like(n, x, beta, &b));
  LOOM_TRY(loom_mul(n->g, x, a, &ax));
  LOOM_TRY(loom_add(n->g, ax, b, &axb));
  return loom_clamp(n->g, axb, 0.0, 1.0, out);
}

loom_status_t ox_hard_sigmoid(ox_node_t *n) {
  IN0;
  (void)g;
  return hard_sigmoid(n, x, ox_float(n, "alpha", 0.2), ox_float(n, "beta", 0.5), &n->out[0]);
}

loom_status_t ox_hard_swish(ox_node_t *n) {
  IN0;
  loom_value_t h;
  LOOM_TRY(hard_sigmoid(n, x, 1.0 / 6.0, 0.5, &h));
  return loom_mul(g, x, h, &n->out[0]);
}

loom_status_t ox_softsign(ox_node_t *n) {
  IN0;
  loom_value_t a, one, d;
  LOOM_TRY(loom_abs(g, x, &a));
  LOOM_TRY(ox_like(n, x, 1.0, &one));
  LOOM_TRY(loom_add(g, a, one, &d));
  return loom_div(g, x, d, &n->out[0]);
}

loom_status_t ox_thresholded_relu(ox_node_t *n) {
  IN0;
  loom_value_t alpha, zero, above;
  LOOM_TRY(ox_like(n, x, ox_float(n, "alpha", 1.0), &alpha));
  LOOM_TRY(ox_like(n, x, 0.0, &zero));
  LOOM_TRY(loom_gt(g, x, alpha, &above));
  return loom_where(g, above, x, zero, &n->out[0]);
}

/* x + bias below -lambd, x - bias above lambd, 0 between. */
loom_status_t ox_shrink(ox_node_t *n) {
  IN0;
  double lambd = ox_float(n, "lambd", 0.5), bias = ox_float(n, "bias", 0.0);
  loom_value_t lo, hi, b, zero, below, above, plus, minus, mid;
  LOOM_TRY(ox_like(n, x, -lambd, &lo));
  LOOM_TRY(ox_like(n, x, lambd, &hi));
  LOOM_TRY(ox_like(n, x, bias, &b));
  LOOM_TRY(ox_like(n, x, 0.0, &zero));
  LOOM_TRY(loom_lt(g, x, lo, &below));
  LOOM_TRY(loom_gt(g, x, hi, &above));
  LOOM_TRY(loom_add(g, x, b, &plus));
  LOOM_TRY(loom_sub(g, x, b, &minus));
  LOOM_TRY(loom_where(g, above, minus, zero, &mid));
  return loom_where(g, below, plus, mid, &n->out[0]);
}

loom_status_t ox_is_inf(ox_node_t *n) {
  IN0;
  int neg = (int)ox_int(n, "detect_negative", 1), pos = (int)ox_int(n, "detect_positive", 1);
  loom_value_t pinf, ninf, p, q;
  LOOM_TRY(ox_like(n, x, INFINITY, &pinf));
  LOOM_TRY(ox_like(n, x, -INFINITY, &ninf));
  LOOM_TRY(loom_eq(g, x, pinf, &p));
  LOOM_TRY(loom_eq(g, x, ninf, &q));
  if (pos && neg) return loom_or(g, p, q, &n->out[0]);
  if (pos) return loom_identity(g, p, &n->out[0]);
  if (neg) return loom_identity(g, q, &n->out[0]);
  loom_value_t f;
  LOOM_TRY(loom_ne(g, x, x, &f));
  return loom_and(g, f, p, &n->out[0]); /* all false */
}

loom_status_t ox_gelu(ox_node_t *n) {
  IN0;
  if (ox_string_is(n, "approximate", "none", "tanh")) return loom_gelu_tanh(g, x, &n->out[0]);
  if (!ox_string_is(n, "approximate", "none", "none"))
    return ox_fail(n, LOOM_ERR_INVALID, "approximate must be 'none' or 'tanh'");
  return loom_gelu(g, x, &n->out[0]);
}

loom_status_t ox_mish(ox_node_t *n) {
  IN0;
  loom_value_t sp, t;
  LOOM_TRY(loom_softplus(g, x, &sp));
  LOOM_TRY(loom_tanh(g, sp, &t));
  return loom_mul(g, x, t, &n->out[0]);
}

loom_status_t ox_prelu(ox_node_t *n) {
  IN0;
  LOOM_TRY(ox_need(n, 1));
  loom_value_t zero, neg, scaled, slope = n->in[1];
  int r = ox_rank(n, x);
  if (n->opset < 7 && r > 2 && ox_rank(n, slope) == 1 && ox_dim(n, slope, 0) != 1) {
    /* Before opset 7, a slope per channel: dim 1 of x. */
    int64_t axes[LOOM_MAX_RANK];
    for (int k = 0; k < r - 2; k++) axes[k] = k + 1;
    LOOM_TRY(loom_unsqueeze(g, slope, r - 2, axes, &slope));
  }
  LOOM_TRY(ox_like(n, x, 0.0, &zero));
  LOOM_TRY(loom_lt(g, x, zero, &neg));
  LOOM_TRY(loom_mul(g, x, slope, &scaled));
  return loom_where(g, neg, scaled, x, &n->out[0]);
}

/* a / b truncated toward zero for integers: Loom's integer division
 * floors, so one is added where the remainder is not zero and the signs
 * differ. */
static loom_status_t trunc_div(ox_node_t *n, loom_value_t a, loom_value_t b, loom_value_t *out) {
  loom_graph_t *g = n->g;
  loom_value_t q, r, zero, rnz, an, bn, differ, fix, fixc;
  LOOM_TRY(loom_div(g, a, b, &q));
  LOOM_TRY(loom_mod(g, a, b, &r));
  LOOM_TRY(ox_like(n, a, 0.0, &zero));
  LOOM_TRY(loom_ne(g, r, zero, &rnz));
  LOOM_TRY(loom_lt(g, a, zero, &an));
  LOOM_TRY(loom_lt(g, b, zero, &bn));
  LOOM_TRY(loom_xor(g, an, bn, &differ));
  LOOM_TRY(loom_and(g, rnz, differ, &fix));
  LOOM_TRY(loom_cast(g, fix, ox_dtype(n, a), &fixc));
  return loom_add(g, q, fixc, out);
}

loom_status_t ox_div(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  LOOM_TRY(ox_need(n, 1));
  if (ox_is_float(ox_dtype(n, n->in[0]))) return loom_div(n->g, n->in[0], n->in[1], &n->out[0]);
  return trunc_div(n, n->in[0], n->in[1], &n->out[0]);
}

/* The result has the base's type; an integer base with a float exponent
 * is raised in the exponent's type and the result truncated back, as
 * ONNX Runtime computes it (4 ^ 0.5 is 2, not 4 ^ 0). */
loom_status_t ox_pow(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  LOOM_TRY(ox_need(n, 1));
  loom_value_t x = n->in[0], e = n->in[1];
  loom_dtype_t dt = ox_dtype(n, x), et = ox_dtype(n, e);
  if (!ox_is_float(dt) && ox_is_float(et)) {
    loom_value_t y;
    LOOM_TRY(loom_cast(n->g, x, et, &x));
    LOOM_TRY(loom_pow(n->g, x, e, &y));
    return loom_cast(n->g, y, dt, &n->out[0]);
  }
  if (et != dt) LOOM_TRY(loom_cast(n->g, e, dt, &e));
  return loom_pow(n->g, x, e, &n->out[0]);
}

/* fmod 0: the sign of the divisor (Python's %, Loom's mod); fmod 1: the
 * sign of the dividend (C's fmod), a - b * trunc(a / b). */
loom_status_t ox_mod(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  LOOM_TRY(ox_need(n, 1));
  loom_graph_t *g = n->g;
  loom_value_t a = n->in[0], b = n->in[1];
  if (!ox_int(n, "fmod", 0)) {
    if (ox_is_float(ox_dtype(n, a)))
      return ox_fail(n, LOOM_ERR_INVALID, "fmod must be 1 for floating-point inputs");
    return loom_mod(g, a, b, &n->out[0]);
  }
  loom_value_t q, t, bt;
  if (ox_is_float(ox_dtype(n, a))) {
    loom_value_t s, m, f;
    LOOM_TRY(loom_div(g, a, b, &q));
    LOOM_TRY(loom_sign(g, q, &s));
    LOOM_TRY(loom_abs(g, q, &m));
    LOOM_TRY(loom_floor(g, m, &f));
    LOOM_TRY(loom_mul(g, s, f, &t));
  } else {
    LOOM_TRY(trunc_div(n, a, b, &t));
  }
  LOOM_TRY(loom_mul(g, b, t, &bt));
  return loom_sub(g, a, bt, &n->out[0]);
}

static loom_status_t fold_inputs(ox_node_t *n, loom_status_t (*fn)(loom_graph_t *, loom_value_t,
                                                                    loom_value_t, loom_value_t *),
                                 loom_value_t *out) {
  if (n->n_in < 1) return ox_fail(n, LOOM_ERR_FORMAT, "needs at least one input");
  LOOM_TRY(ox_need(n, 0));
  loom_value_t acc = n->in[0];
  for (int i = 1; i < n->n_in; i++) {
    LOOM_TRY(ox_need(n, i));
    LOOM_TRY(fn(n->g, acc, n->in[i], &acc));
  }
  if (n->n_in == 1) return loom_identity(n->g, acc, out);
  *out = acc;
  return LOOM_OK;
}

loom_status_t ox_max(ox_node_t *n) { return fold_inputs(n, loom_maximum, &n->out[0]); }
loom_status_t ox_min(ox_node_t *n) { return fold_inputs(n, loom_minimum, &n->out[0]); }
loom_status_t ox_sum(ox_node_t *n) { return fold_inputs(n, loom_add, &n->out[0]); }

loom_status_t ox_mean(ox_node_t *n) {
  loom_value_t s, count;
  LOOM_TRY(fold_inputs(n, loom_add, &s));
  LOOM_TRY(ox_like(n, s, (double)n->n_in, &count));
  return loom_div(n->g, s, count, &n->out[0]);
}

loom_status_t ox_where(ox_node_t *n) {
  for (int i = 0; i < 3; i++) LOOM_TRY(ox_need(n, i));
  return loom_where(n->g, n->in[0], n->in[1], n->in[2], &n->out[0]);
}

/* Bounds from attributes (opset < 11) or from optional inputs: constant
 * ones become one clamp, computed ones a maximum and a minimum. */
loom_status_t ox_clip(ox_node_t *n) {
  IN0;
  double lo = -INFINITY, hi = INFINITY;
  if (n->opset < 11) {
    lo = ox_float(n, "min", -INFINITY);
    hi = ox_float(n, "max", INFINITY);
    return loom_clamp(g, x, lo, hi, &n->out[0]);
  }
  loom_value_t y = x;
  for (int i = 1; i <= 2; i++) {
    if (!ox_has(n, i)) continue;
    const loom_tensor_t *c = ox_const(n, n->in[i]);
    double v;
    if (c && loom_tensor_numel(c) == 1 && loom_tensor_get_f64(c, 0, &v) == LOOM_OK) {
      if (i == 1) lo = v;
      else hi = v;
      continue;
    }
    LOOM_TRY(i == 1 ? loom_maximum(g, y, n->in[i], &y) : loom_minimum(g, y, n->in[i], &y));
  }
  if (lo == -INFINITY && hi == INFINITY && y.id != x.id) {
    n->out[0] = y;
    return LOOM_OK;
  }
  if (lo != -INFINITY && hi != INFINITY && lo > hi) lo = hi; /* as NumPy's clip: max wins */
  return loom_clamp(g, y, lo, hi, &n->out[0]);
}

/* Before opset 6, `to` is a type's name. */
static int64_t legacy_type(const ox_node_t *n) {
  static const char *const names[] = {"UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16",
                                      "INT32", "INT64", "STRING", "BOOL", "FLOAT16", "DOUBLE",
                                      "UINT32", "UINT64"};
  char buf[32];
  const char *s = ox_string(n, "to", "", buf, sizeof buf);
  for (int k = 0; k < (int)(sizeof names / sizeof *names); k++)
    if (!strcmp(s, names[k])) return k;
  return 0;
}

loom_status_t ox_cast(ox_node_t *n) {
  IN0;
  const Onnx__AttributeProto *a = ox_attr(n, "to");
  int64_t to = a && a->has_s ? legacy_type(n) : ox_int(n, "to", 0);
  loom_dtype_t dt;
  if (!ox_dtype_from_onnx((int32_t)to, &dt))
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "cast to %s: Loom has no such dtype",
                   ox_onnx_type_name((int32_t)to));
  /* A type held in a wider one (uint8, int16, uint16 in i32; uint32 in
   * i64) keeps only its own bits, as a cast in C wraps: -2.5 to uint8 is
   * 254, 40000 to int16 is -25536. */
  int bits = 0, is_signed = 0;
  if (to == ONNX__TENSOR_PROTO__DATA_TYPE__UINT8) bits = 8;
  if (to == ONNX__TENSOR_PROTO__DATA_TYPE__UINT16) bits = 16;
  if (to == ONNX__TENSOR_PROTO__DATA_TYPE__INT16) bits = 16, is_signed = 1;
  if (to == ONNX__TENSOR_PROTO__DATA_TYPE__UINT32) bits = 32;
  if (!bits || ox_dtype(n, x) == LOOM_BOOL) return loom_cast(g, x, dt, &n->out[0]);
  loom_value_t y, mask, half;
  LOOM_TRY(loom_cast(g, x, dt, &y));
  LOOM_TRY(ox_scalar(n, dt, (double)((INT64_C(1) << bits) - 1), &mask));
  if (!is_signed) return loom_bitwise_and(g, y, mask, &n->out[0]);
  LOOM_TRY(ox_scalar(n, dt, (double)(INT64_C(1) << (bits - 1)), &half));
  LOOM_TRY(loom_add(g, y, half, &y));
  LOOM_TRY(loom_bitwise_and(g, y, mask, &y));
  return loom_sub(g, y, half, &n->out[0]);
}

loom_status_t ox_cast_like(ox_node_t *n) {
  IN0;
  LOOM_TRY(ox_need(n, 1));
  return loom_cast(g, x, ox_dtype(n, n->in[1]), &n->out[0]);
}

loom_status_t ox_constant(ox_node_t *n) {
  enum { VALUE, VALUE_FLOAT, VALUE_INT, VALUE_FLOATS, VALUE_INTS, FORMS };
  static const struct {
    const char *name;
    int type;
  } forms[FORMS] = {{"value", OX_ATTR_TENSOR},
                    {"value_float", OX_ATTR_FLOAT},
                    {"value_int", OX_ATTR_INT},
                    {"value_floats", OX_ATTR_FLOATS},
                    {"value_ints", OX_ATTR_INTS}};
  const Onnx__AttributeProto *a = n->proto->n_attribute == 1 ? n->proto->attribute[0] : NULL;
  if (!a || !a->name) return ox_fail(n, LOOM_ERR_FORMAT, "needs exactly one value attribute");
  int form = 0;
  while (form < FORMS && strcmp(a->name, forms[form].name)) form++;
  if (form == FORMS)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "attribute '%s' (strings and sparse tensors are not "
                   "supported)", a->name);
  if (!ox_attr_typed(n, a->name, forms[form].type))
    return ox_fail(n, LOOM_ERR_FORMAT, "attribute %s is of another type", a->name);
  loom_tensor_t *t = NULL;
  loom_status_t st = LOOM_OK;
  int64_t count;
  float f = a->f;
  int64_t i = a->i;
  switch (form) {
  case VALUE:
    if (!a->t) return ox_fail(n, LOOM_ERR_FORMAT, "attribute value holds no tensor");
    st = ox_tensor_from_proto(a->t, NULL, &t);
    if (st != LOOM_OK) return ox_fail(n, st, "%s", loom_last_error());
    break;
  case VALUE_FLOAT: st = loom_tensor_from_data(LOOM_F32, 0, NULL, &f, 4, &t); break;
  case VALUE_INT: st = loom_tensor_from_data(LOOM_I64, 0, NULL, &i, 8, &t); break;
  case VALUE_FLOATS:
    count = (int64_t)a->n_floats;
    st = loom_tensor_from_data(LOOM_F32, 1, &count, a->floats, 4 * (size_t)count, &t);
    break;
  default:
    count = (int64_t)a->n_ints;
    st = loom_tensor_from_data(LOOM_I64, 1, &count, a->ints, 8 * (size_t)count, &t);
  }
  LOOM_TRY(st);
  st = loom_graph_constant(n->g, t, &n->out[0]);
  loom_tensor_destroy(t);
  return st;
}

/* Inference: the identity, and a mask of all true. With training_mode
 * a constant true and a ratio above 0 it would draw random numbers,
 * which ONNX leaves to each runtime: not supported. */
loom_status_t ox_dropout(ox_node_t *n) {
  IN0;
  int training = 0;
  if (ox_has(n, 2)) {
    const loom_tensor_t *c = ox_const(n, n->in[2]);
    double v = 1;
    if (!c || loom_tensor_get_f64(c, 0, &v) != LOOM_OK)
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "training_mode must be a constant");
    training = v != 0;
  }
  if (training) {
    double ratio = 0.5;
    int count;
    if (ox_has(n, 1)) LOOM_TRY(ox_const_doubles(n, 1, "ratio", &ratio, 1, &count));
    if (ratio != 0)
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "training-mode dropout draws random numbers");
  }
  n->out[0] = x;
  if (n->n_out > 1) {
    loom_dim_t dims[LOOM_MAX_RANK];
    int rank;
    LOOM_TRY(loom_value_type(g, x, NULL, &rank, dims));
    LOOM_TRY(loom_full(g, rank, dims, 1.0, LOOM_BOOL, &n->out[1]));
  }
  return LOOM_OK;
}
