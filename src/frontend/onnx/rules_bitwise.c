/* The ONNX ops on bits whose result depends on the unsigned type: BitShift
 * and BitwiseNot (BitwiseAnd, Or and Xor map to Loom's ops as they are,
 * onnx_ops.def). Loom holds ONNX's unsigned integers widened (uint8 and
 * uint16 as i32, uint32 as i64), where their high bits are clear, or, for
 * uint64, as the i64 of the same bits; the model's declared type tells
 * which (the widened Loom dtype cannot). */
#include "frontend/onnx/onnx_import.h"

enum { OX_UINT8 = 2, OX_UINT16 = 4, OX_UINT32 = 12, OX_UINT64 = 13 };

/* The ONNX type of input 0, as the model's input, output or value_info
 * types declare it; 0 when it declares none. */
static int32_t declared(ox_node_t *n) {
  int32_t t = ox_declared_type(n, n->proto->input[0]);
  return t ? t : ox_declared_type(n, n->proto->output[0]);
}

static int unsigned_bits(int32_t t) {
  return t == OX_UINT8 ? 8 : t == OX_UINT16 ? 16 : t == OX_UINT32 ? 32 : t == OX_UINT64 ? 64 : 0;
}

static loom_status_t undeclared(ox_node_t *n) {
  return ox_fail(n, LOOM_ERR_UNSUPPORTED, "the model declares no type for input 0 (a %s in "
                 "Loom, which does not tell the unsigned width: declare it in value_info)",
                 loom_dtype_name(ox_dtype(n, n->in[0])));
}

/* The declared type's width in bits when it is unsigned, else 0; fails on
 * a Loom dtype that does not hold that type. */
static loom_status_t width_of(ox_node_t *n, int32_t t, int *bits) {
  loom_dtype_t dt = ox_dtype(n, n->in[0]);
  *bits = unsigned_bits(t);
  if (*bits && dt != (*bits <= 16 ? LOOM_I32 : LOOM_I64))
    return ox_fail(n, LOOM_ERR_DTYPE, "input 0 is %s for a declared %d-bit unsigned type",
                   loom_dtype_name(dt), *bits);
  return LOOM_OK;
}

/* x & (2^bits - 1): a widened unsigned value cut back to its width. */
static loom_status_t cut_to(ox_node_t *n, loom_value_t x, int bits, loom_value_t *out) {
  loom_value_t m;
  LOOM_TRY(ox_scalar(n, ox_dtype(n, x), (double)(((int64_t)1 << bits) - 1), &m));
  return loom_bitwise_and(n->g, x, m, out);
}

/* ~x, cut to the width of an unsigned type held widened. Without a
 * declared type only i8 (int8) and i64 (int64 or uint64, the same bits)
 * are unambiguous. */
loom_status_t ox_bitwise_not(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  int32_t t = declared(n);
  loom_dtype_t dt = ox_dtype(n, n->in[0]);
  if (!t && dt == LOOM_I32) return undeclared(n);
  int bits = 0;
  if (t) LOOM_TRY(width_of(n, t, &bits));
  loom_value_t y;
  LOOM_TRY(loom_bitwise_not(n->g, n->in[0], &y));
  if (bits && bits < 64) return cut_to(n, y, bits, &n->out[0]);
  n->out[0] = y;
  return LOOM_OK;
}

/* uint64 x >> s (x the i64 of its bits): the arithmetic shift, its copies
 * of the sign bit cleared by ~(-1 << (64 - s)); 0 where s >= 64 (or reads
 * as negative, from 2^63 on). */
static loom_status_t shift_right_u64(ox_node_t *n, loom_value_t x, loom_value_t s,
                                     loom_value_t *out) {
  loom_graph_t *g = n->g;
  loom_value_t c64, ones, zero, k, mask, y, inside, low;
  LOOM_TRY(ox_scalar(n, LOOM_I64, 64, &c64));
  LOOM_TRY(ox_scalar(n, LOOM_I64, -1, &ones));
  LOOM_TRY(ox_scalar(n, LOOM_I64, 0, &zero));
  LOOM_TRY(loom_sub(g, c64, s, &k));
  LOOM_TRY(loom_bitshift_left(g, ones, k, &mask));
  LOOM_TRY(loom_bitwise_not(g, mask, &mask));
  LOOM_TRY(loom_bitshift_right(g, x, s, &y));
  LOOM_TRY(loom_bitwise_and(g, y, mask, &y));
  LOOM_TRY(loom_ge(g, s, zero, &inside));
  LOOM_TRY(loom_lt(g, s, c64, &low));
  LOOM_TRY(loom_and(g, inside, low, &inside));
  return loom_where(g, inside, y, zero, out);
}

/* Shifts by the width or more give 0, as NumPy's (ONNX's reference): a
 * left shift is cut back to the width, and a right shift of a widened
 * value (never negative) is its logical shift. */
loom_status_t ox_bit_shift(ox_node_t *n) {
  for (int i = 0; i < 2; i++) LOOM_TRY(ox_need(n, i));
  int32_t t = declared(n);
  if (!t) return undeclared(n);
  int bits, left;
  LOOM_TRY(width_of(n, t, &bits));
  if (!bits)
    return ox_fail(n, LOOM_ERR_DTYPE, "input 0 is %s (unsigned integers only)",
                   ox_onnx_type_name(t));
  if (ox_string_is(n, "direction", "", "LEFT")) left = 1;
  else if (ox_string_is(n, "direction", "", "RIGHT")) left = 0;
  else return ox_fail(n, LOOM_ERR_FORMAT, "direction must be LEFT or RIGHT");
  loom_graph_t *g = n->g;
  loom_value_t x = n->in[0], s = n->in[1], y;
  if (!left && bits == 64) return shift_right_u64(n, x, s, &n->out[0]);
  if (!left) return loom_bitshift_right(g, x, s, &n->out[0]);
  LOOM_TRY(loom_bitshift_left(g, x, s, &y));
  if (bits < 64) return cut_to(n, y, bits, &n->out[0]);
  n->out[0] = y;
  return LOOM_OK;
}
