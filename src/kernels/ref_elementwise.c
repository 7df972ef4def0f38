/* Reference kernels of elementwise ops. Each op is a scalar function on
 * double (float dtypes) and, where integers are accepted, on int64. */
#include <math.h>

#include "kernels/ref.h"

/* ---- Unary --------------------------------------------------------------- */

typedef double (*unary_f)(double x, const ir_attrs_t *a);
typedef int64_t (*unary_i)(int64_t x, const ir_attrs_t *a);

static loom_status_t run_unary(ref_call_t *c, unary_f f, unary_i fi) {
  const loom_tensor_t *x = c->in[0];
  loom_tensor_t *y = c->out[0];
  int64_t n = loom_tensor_numel(x);
  bool ints = !dtype_is_float(x->dtype);
  for (int64_t i = 0; i < n; i++) {
    if (ints && fi) ref_seti(y, i, fi(ref_geti(x, i), c->attrs));
    else ref_set(y, i, f(ref_get(x, i), c->attrs));
  }
  return LOOM_OK;
}

#define UNARY(name, float_expr, int_expr)                                 \
  static double name##_f(double x, const ir_attrs_t *a) {                 \
    (void)a;                                                              \
    return float_expr;                                                    \
  }                                                                       \
  static int64_t name##_i(int64_t x, const ir_attrs_t *a) {               \
    (void)a;                                                              \
    return int_expr;                                                      \
  }                                                                       \
  loom_status_t ref_##name(ref_call_t *c) {                               \
    return run_unary(c, name##_f, name##_i);                              \
  }

/* An op on float dtypes only. */
#define UNARY_F(name, float_expr)                                         \
  static double name##_f(double x, const ir_attrs_t *a) {                 \
    (void)a;                                                              \
    return float_expr;                                                    \
  }                                                                       \
  loom_status_t ref_##name(ref_call_t *c) {                               \
    return run_unary(c, name##_f, NULL);                                  \
  }

/* Integer negation and abs wrap at the minimum like two's complement. */
UNARY(neg, -x, (int64_t)(0 - (uint64_t)x))
UNARY(abs, fabs(x), x < 0 ? (int64_t)(0 - (uint64_t)x) : x)
UNARY_F(exp, exp(x))
UNARY_F(log, log(x))
UNARY_F(log1p, log1p(x))
UNARY_F(expm1, expm1(x))
UNARY_F(sqrt, sqrt(x))
UNARY_F(rsqrt, 1.0 / sqrt(x))
UNARY_F(reciprocal, 1.0 / x)
UNARY_F(tanh, tanh(x))
UNARY_F(sigmoid, x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)))
UNARY(relu, x > 0 ? x : (isnan(x) ? x : 0.0), x > 0 ? x : 0)
UNARY_F(leaky_relu, x > 0 ? x : x * ir_op_float(IR_OP_LEAKY_RELU, a, "alpha"))
UNARY_F(elu, x > 0 ? x : ir_op_float(IR_OP_ELU, a, "alpha") * expm1(x))
/* GELU is x Phi(x) = x erfc(-x / sqrt 2) / 2, and its tanh form
 * x (1 + tanh u) / 2 = x sigmoid(2u): 1 + erf and 1 + tanh lose all their
 * digits for x < 0 (at x = -8.5 in double), these forms none. */
UNARY_F(gelu, 0.5 * x * erfc(x * -M_SQRT1_2))
static double gelu_tanh_f(double x, const ir_attrs_t *a) {
  (void)a;
  double u = 2.0 * sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  double e = exp(-fabs(u));
  return x * (u >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e));
}
loom_status_t ref_gelu_tanh(ref_call_t *c) { return run_unary(c, gelu_tanh_f, NULL); }
UNARY_F(silu, x * (x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x))))
/* log(1 + e^x) = max(x, 0) + log1p(e^-|x|), which never overflows. */
UNARY_F(softplus, fmax(x, 0.0) + log1p(exp(-fabs(x))))
UNARY_F(sin, sin(x))
UNARY_F(cos, cos(x))
UNARY_F(tan, tan(x))
UNARY_F(asin, asin(x))
UNARY_F(acos, acos(x))
UNARY_F(atan, atan(x))
UNARY_F(sinh, sinh(x))
UNARY_F(cosh, cosh(x))
UNARY_F(asinh, asinh(x))
UNARY_F(acosh, acosh(x))
UNARY_F(atanh, atanh(x))
UNARY_F(erf, erf(x))
UNARY_F(floor, floor(x))
UNARY_F(ceil, ceil(x))
/* nearbyint in the default rounding mode: half to even. */
UNARY_F(round, nearbyint(x))
UNARY(sign, x > 0 ? 1.0 : x < 0 ? -1.0 : x, x > 0 ? 1 : x < 0 ? -1 : 0)
UNARY(not, x == 0, x == 0)
UNARY_F(isnan, isnan(x) ? 1.0 : 0.0)

/* ~x; a bool flips its one bit (stored, ~1 would read as true). */
loom_status_t ref_bitwise_not(ref_call_t *c) {
  const loom_tensor_t *x = c->in[0];
  loom_tensor_t *y = c->out[0];
  int64_t ones = x->dtype == LOOM_BOOL ? 1 : -1, n = loom_tensor_numel(x);
  for (int64_t i = 0; i < n; i++) ref_seti(y, i, ref_geti(x, i) ^ ones);
  return LOOM_OK;
}

/* min(max(x, lo), hi): when lo > hi every result is hi. A NaN bound is
 * no bound. */
static double clamp_f(double x, const ir_attrs_t *a) {
  double lo = ir_op_float(IR_OP_CLAMP, a, "min");
  double hi = ir_op_float(IR_OP_CLAMP, a, "max");
  if (isnan(x)) return x;
  double v = x < lo ? lo : x;
  return v > hi ? hi : v;
}

/* An integer bound from a double one, rounded inward (ceil for the lower,
 * floor for the upper) and saturated to int64. */
static int64_t int_bound(double b, bool lower) {
  if (isnan(b)) return lower ? INT64_MIN : INT64_MAX;
  b = lower ? ceil(b) : floor(b);
  if (b <= -9223372036854775808.0) return INT64_MIN;
  if (b >= 9223372036854775808.0) return INT64_MAX;
  return (int64_t)b;
}

/* Integers clamp exactly in int64; a result that is a bound outside the
 * dtype's range saturates to it instead of wrapping. */
static void clamp_int(ref_call_t *c) {
  int64_t lo = int_bound(ir_op_float(IR_OP_CLAMP, c->attrs, "min"), true);
  int64_t hi = int_bound(ir_op_float(IR_OP_CLAMP, c->attrs, "max"), false);
  int64_t n = loom_tensor_numel(c->in[0]);
  for (int64_t i = 0; i < n; i++) {
    int64_t x = ref_geti(c->in[0], i);
    int64_t v = x < lo ? lo : x;
    v = v > hi ? hi : v;
    if (v == x) ref_seti(c->out[0], i, x);
    else ref_set(c->out[0], i, (double)v);
  }
}

loom_status_t ref_clamp(ref_call_t *c) {
  if (dtype_is_float(c->in[0]->dtype)) return run_unary(c, clamp_f, NULL);
  clamp_int(c);
  return LOOM_OK;
}

loom_status_t ref_identity(ref_call_t *c) {
  int64_t n = loom_tensor_numel(c->in[0]);
  for (int64_t i = 0; i < n; i++) ref_copy_elem(c->out[0], i, c->in[0], i);
  return LOOM_OK;
}

loom_status_t ref_cast(ref_call_t *c) {
  const loom_tensor_t *x = c->in[0];
  loom_tensor_t *y = c->out[0];
  int64_t n = loom_tensor_numel(x);
  /* Integers stay exact through int64; floats go through double. */
  bool exact_int = !dtype_is_float(x->dtype);
  for (int64_t i = 0; i < n; i++) {
    if (exact_int) ref_seti(y, i, ref_geti(x, i));
    else ref_set(y, i, ref_get(x, i));
  }
  return LOOM_OK;
}

/* ---- Binary -------------------------------------------------------------- */

typedef double (*binary_f)(double a, double b);
/* Integer form; sets *err for a division by zero. */
typedef int64_t (*binary_i)(int64_t a, int64_t b, bool *err);

static loom_status_t run_binary(ref_call_t *c, binary_f f, binary_i fi) {
  const loom_tensor_t *a = c->in[0], *b = c->in[1];
  loom_tensor_t *y = c->out[0];
  int64_t n = loom_tensor_numel(y);
  bool ints = !dtype_is_float(a->dtype);
  int64_t idx[LOOM_MAX_RANK];
  for (int64_t i = 0; i < n; i++) {
    ref_unravel(y->rank, y->shape, i, idx);
    int64_t ia = ref_broadcast_index(a->rank, a->shape, y->rank, idx);
    int64_t ib = ref_broadcast_index(b->rank, b->shape, y->rank, idx);
    if (ints) {
      bool err = false;
      int64_t v = fi(ref_geti(a, ia), ref_geti(b, ib), &err);
      if (err)
        return loom_fail(LOOM_ERR_VALUE, "%s: integer division by zero",
                         ref_name(c));
      if (y->dtype == LOOM_BOOL) ref_seti(y, i, v != 0);
      else ref_seti(y, i, v);
    } else {
      ref_set(y, i, f(ref_get(a, ia), ref_get(b, ib)));
    }
  }
  return LOOM_OK;
}

#define BINARY(name, float_expr, int_expr)                               \
  static double name##_f(double a, double b) { return float_expr; }      \
  static int64_t name##_i(int64_t a, int64_t b, bool *err) {             \
    (void)err;                                                           \
    return int_expr;                                                     \
  }                                                                      \
  loom_status_t ref_##name(ref_call_t *c) {                              \
    return run_binary(c, name##_f, name##_i);                            \
  }

/* Integer arithmetic wraps (computed unsigned), as the dtype would. */
#define WRAP(expr) ((int64_t)(expr))
BINARY(add, a + b, WRAP((uint64_t)a + (uint64_t)b))
BINARY(sub, a - b, WRAP((uint64_t)a - (uint64_t)b))
BINARY(mul, a * b, WRAP((uint64_t)a * (uint64_t)b))
BINARY(maximum, isnan(a) || isnan(b) ? NAN : fmax(a, b), a > b ? a : b)
BINARY(minimum, isnan(a) || isnan(b) ? NAN : fmin(a, b), a < b ? a : b)
BINARY(eq, a == b, a == b)
BINARY(ne, a != b, a != b)
BINARY(lt, a < b, a < b)
BINARY(le, a <= b, a <= b)
BINARY(gt, a > b, a > b)
BINARY(ge, a >= b, a >= b)
BINARY(and, (a != 0) && (b != 0), (a != 0) && (b != 0))
BINARY(or, (a != 0) || (b != 0), (a != 0) || (b != 0))
BINARY(xor, (a != 0) != (b != 0), (a != 0) != (b != 0))

/* An op on integers and bool only: the op table refuses float inputs. */
#define BINARY_I(name, int_expr)                                         \
  static int64_t name##_i(int64_t a, int64_t b, bool *err) {             \
    (void)err;                                                           \
    return int_expr;                                                     \
  }                                                                      \
  loom_status_t ref_##name(ref_call_t *c) {                              \
    return run_binary(c, NULL, name##_i);                                \
  }

/* On the int64 every integer dtype loads as, sign extended, so that the
 * store's wrap leaves the dtype's bits; bools load as 0 and 1 and stay so. */
BINARY_I(bitwise_and, a & b)
BINARY_I(bitwise_or, a | b)
BINARY_I(bitwise_xor, a ^ b)

/* Shifts in int64, wrapped to the dtype on store: an i8 or i32 shifted by
 * its width or more keeps no bit of a (left) or only copies of its sign
 * (right), as PyTorch gives; b < 0 or b >= 64, undefined in C, gives the
 * same. Right shifts of negatives are arithmetic, as GCC and Clang do. */
static int64_t shift_left(int64_t a, int64_t b) {
  return b < 0 || b >= 64 ? 0 : (int64_t)((uint64_t)a << b);
}
static int64_t shift_right(int64_t a, int64_t b) {
  return b < 0 || b >= 64 ? (a < 0 ? -1 : 0) : a >> b;
}
BINARY_I(bitshift_left, shift_left(a, b))
BINARY_I(bitshift_right, shift_right(a, b))

static double div_f(double a, double b) { return a / b; }
static int64_t div_i(int64_t a, int64_t b, bool *err) {
  if (b == 0) {
    *err = true;
    return 0;
  }
  if (b == -1) return (int64_t)(0 - (uint64_t)a); /* INT64_MIN / -1 wraps */
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
loom_status_t ref_div(ref_call_t *c) { return run_binary(c, div_f, div_i); }

/* Python's %: the result has the sign of b. */
static double mod_f(double a, double b) {
  double r = fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
static int64_t mod_i(int64_t a, int64_t b, bool *err) {
  if (b == 0) {
    *err = true;
    return 0;
  }
  if (b == -1) return 0;
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
loom_status_t ref_mod(ref_call_t *c) { return run_binary(c, mod_f, mod_i); }

static double pow_f(double a, double b) { return pow(a, b); }
/* Integer power by squaring; a negative exponent gives 0 except for
 * bases 1 and -1, as integer arithmetic would. */
static int64_t pow_i(int64_t a, int64_t b, bool *err) {
  (void)err;
  if (b < 0) return a == 1 ? 1 : a == -1 ? (b % 2 ? -1 : 1) : 0;
  uint64_t r = 1, base = (uint64_t)a;
  while (b) {
    if (b & 1) r *= base;
    base *= base;
    b >>= 1;
  }
  return (int64_t)r;
}
loom_status_t ref_pow(ref_call_t *c) { return run_binary(c, pow_f, pow_i); }

loom_status_t ref_where(ref_call_t *c) {
  const loom_tensor_t *cond = c->in[0], *a = c->in[1], *b = c->in[2];
  loom_tensor_t *y = c->out[0];
  int64_t n = loom_tensor_numel(y);
  int64_t idx[LOOM_MAX_RANK];
  for (int64_t i = 0; i < n; i++) {
    ref_unravel(y->rank, y->shape, i, idx);
    int64_t ic = ref_broadcast_index(cond->rank, cond->shape, y->rank, idx);
    bool pick_a = ref_geti(cond, ic) != 0;
    const loom_tensor_t *src = pick_a ? a : b;
    ref_copy_elem(y, i, src, ref_broadcast_index(src->rank, src->shape, y->rank, idx));
  }
  return LOOM_OK;
}
