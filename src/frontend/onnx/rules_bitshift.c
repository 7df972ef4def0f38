/* BitShift on ONNX's unsigned integers, which Loom holds widened (uint8
 * and uint16 as i32, uint32 as i64) or, for uint64, as the i64 of the same
 * bits. Loom has no shift op: a shift is a product or floor quotient by a
 * power of two, computed on the two 32-bit halves of the value so that no
 * i64 product overflows, and a left shift is cut back to the type's width
 * (NumPy's shifts, which ONNX's reference uses, give 0 from the width on). */
#include "frontend/onnx/onnx_import.h"

enum { OX_UINT8 = 2, OX_UINT16 = 4, OX_UINT32 = 12, OX_UINT64 = 13 };

#define TWO32 4294967296.0

typedef struct halves {
  loom_value_t hi, lo; /* each in [0, 2^32) */
} halves_t;

static loom_status_t i64(ox_node_t *n, double v, loom_value_t *out) {
  return ox_scalar(n, LOOM_I64, v, out);
}

static loom_status_t binary_k(ox_node_t *n, loom_status_t (*op)(loom_graph_t *, loom_value_t,
                                                                 loom_value_t, loom_value_t *),
                              loom_value_t a, double k, loom_value_t *out) {
  loom_value_t kv;
  LOOM_TRY(i64(n, k, &kv));
  return op(n->g, a, kv, out);
}

/* 2^e for e in [0, 32]: a gather from a table. */
static loom_status_t power_of_two(ox_node_t *n, loom_value_t e, loom_value_t *out) {
  int64_t table[33];
  for (int k = 0; k <= 32; k++) table[k] = (int64_t)1 << k;
  loom_value_t t;
  LOOM_TRY(ox_vector_i64(n, 33, table, &t));
  return loom_gather(n->g, t, e, 0, out);
}

/* The value's halves: lo = x mod 2^32 (Python's mod, so that uint64's
 * upper half read as a negative i64 comes out right), hi its rest. */
static loom_status_t split(ox_node_t *n, loom_value_t x, halves_t *h) {
  loom_value_t rest;
  LOOM_TRY(binary_k(n, loom_mod, x, TWO32, &h->lo));
  LOOM_TRY(loom_sub(n->g, x, h->lo, &rest));
  LOOM_TRY(binary_k(n, loom_div, rest, TWO32, &h->hi));
  return binary_k(n, loom_mod, h->hi, TWO32, &h->hi);
}

/* hi * 2^32 + lo as the i64 of those 64 bits. */
static loom_status_t join(ox_node_t *n, halves_t h, loom_value_t *out) {
  loom_value_t top, wrapped;
  LOOM_TRY(binary_k(n, loom_ge, h.hi, TWO32 / 2, &top));
  LOOM_TRY(binary_k(n, loom_sub, h.hi, TWO32, &wrapped));
  LOOM_TRY(loom_where(n->g, top, wrapped, h.hi, &h.hi));
  LOOM_TRY(binary_k(n, loom_mul, h.hi, TWO32, &h.hi));
  return loom_add(n->g, h.hi, h.lo, out);
}

/* x << s for s in [0, 64): within a half (s < 32) the low half's overflow
 * carries into the high one; from 32 on the low half moves up whole. */
static loom_status_t shift_left(ox_node_t *n, halves_t x, loom_value_t small, loom_value_t p,
                                halves_t *out) {
  loom_graph_t *g = n->g;
  loom_value_t lo, carry, hi, zero;
  LOOM_TRY(loom_mul(g, x.lo, p, &lo));
  LOOM_TRY(binary_k(n, loom_div, lo, TWO32, &carry));
  LOOM_TRY(binary_k(n, loom_mod, lo, TWO32, &lo));
  LOOM_TRY(loom_mul(g, x.hi, p, &hi));
  LOOM_TRY(loom_add(g, hi, carry, &hi));
  LOOM_TRY(binary_k(n, loom_mod, hi, TWO32, &hi));
  LOOM_TRY(i64(n, 0, &zero));
  LOOM_TRY(loom_where(g, small, lo, zero, &out->lo));
  return loom_where(g, small, hi, lo, &out->hi); /* s >= 32: p is 2^(s-32) */
}

/* x >> s: within a half the high half's low bits move down; from 32 on
 * the high half moves down whole. */
static loom_status_t shift_right(ox_node_t *n, halves_t x, loom_value_t small, loom_value_t p,
                                 loom_value_t q, halves_t *out) {
  loom_graph_t *g = n->g;
  loom_value_t lo, hi, low_bits, zero;
  LOOM_TRY(loom_div(g, x.hi, p, &hi));
  LOOM_TRY(loom_mod(g, x.hi, p, &low_bits));
  LOOM_TRY(loom_mul(g, low_bits, q, &low_bits));
  LOOM_TRY(loom_div(g, x.lo, p, &lo));
  LOOM_TRY(loom_add(g, lo, low_bits, &lo));
  LOOM_TRY(i64(n, 0, &zero));
  LOOM_TRY(loom_where(g, small, lo, hi, &out->lo));
  return loom_where(g, small, hi, zero, &out->hi);
}

static loom_status_t width_of(ox_node_t *n, int *bits) {
  int32_t t = ox_declared_type(n, n->proto->input[0]);
  if (!t) t = ox_declared_type(n, n->proto->output[0]);
  loom_dtype_t dt = ox_dtype(n, n->in[0]);
  *bits = t == OX_UINT8 ? 8 : t == OX_UINT16 ? 16 : t == OX_UINT32 ? 32 : t == OX_UINT64 ? 64 : 0;
  if (!*bits && t)
    return ox_fail(n, LOOM_ERR_DTYPE, "input 0 is %s (unsigned integers only)",
                   ox_onnx_type_name(t));
  if (!*bits)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "the model declares no type for input 0 (a %s in "
                   "Loom, which does not tell the unsigned width: declare it in value_info)",
                   loom_dtype_name(dt));
  if (dt != (*bits <= 16 ? LOOM_I32 : LOOM_I64))
    return ox_fail(n, LOOM_ERR_DTYPE, "input 0 is %s for a declared %d-bit unsigned type",
                   loom_dtype_name(dt), *bits);
  return LOOM_OK;
}

loom_status_t ox_bit_shift(ox_node_t *n) {
  for (int i = 0; i < 2; i++) LOOM_TRY(ox_need(n, i));
  loom_graph_t *g = n->g;
  int bits, left;
  LOOM_TRY(width_of(n, &bits));
  if (ox_string_is(n, "direction", "", "LEFT")) left = 1;
  else if (ox_string_is(n, "direction", "", "RIGHT")) left = 0;
  else return ox_fail(n, LOOM_ERR_FORMAT, "direction must be LEFT or RIGHT");
  loom_dtype_t dt = ox_dtype(n, n->in[0]);
  loom_value_t x, s, inside, small, a, p, q, zero, y;
  halves_t h, r;
  LOOM_TRY(loom_cast(g, n->in[0], LOOM_I64, &x));
  LOOM_TRY(loom_cast(g, n->in[1], LOOM_I64, &s));
  /* A uint64 shift of 2^63 or more reads as negative: past the width too. */
  LOOM_TRY(binary_k(n, loom_lt, s, bits, &inside));
  LOOM_TRY(i64(n, 0, &zero));
  LOOM_TRY(loom_ge(g, s, zero, &small));
  LOOM_TRY(loom_and(g, inside, small, &inside));
  LOOM_TRY(loom_where(g, inside, s, zero, &s));
  LOOM_TRY(binary_k(n, loom_lt, s, 32, &small));
  LOOM_TRY(binary_k(n, loom_mod, s, 32, &a));
  LOOM_TRY(power_of_two(n, a, &p));
  LOOM_TRY(i64(n, 32, &q));
  LOOM_TRY(loom_sub(g, q, a, &q));
  LOOM_TRY(power_of_two(n, q, &q));
  LOOM_TRY(split(n, x, &h));
  LOOM_TRY(left ? shift_left(n, h, small, p, &r) : shift_right(n, h, small, p, q, &r));
  LOOM_TRY(join(n, r, &y));
  if (left && bits < 64) LOOM_TRY(binary_k(n, loom_mod, y, (double)((int64_t)1 << bits), &y));
  LOOM_TRY(loom_where(g, inside, y, zero, &y));
  return loom_cast(g, y, dt, &n->out[0]);
}
