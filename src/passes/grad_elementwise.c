/* Gradient rules of the elementwise ops, written with IR ops so that a
 * gradient of a gradient works. y is the output, g its gradient; binary
 * operands are summed back to their own shapes (grad_unbroadcast). */
#include <math.h>

#include "core/dtype.h"
#include "core/status.h"
#include "passes/grad.h"

#define TRY LOOM_TRY

/* ---- Small emitters ---------------------------------------------------- */

static int32_t in_(const grad_ctx_t *c, int k) { return c->node.in[k]; }
static int32_t y_(const grad_ctx_t *c) { return c->node.out[0]; }
static int32_t g_(const grad_ctx_t *c) { return c->dout[0]; }
/* The dtype of the gradient, which every rule's scalars share. */
static loom_dtype_t dt_(const grad_ctx_t *c) {
  return grad_type(c, c->node.out[0])->dtype;
}

static loom_status_t op2(grad_ctx_t *c, ir_op_t op, int32_t a, int32_t b,
                         int32_t *out) {
  return grad_binary(c, op, a, b, out);
}

/* a <op> v for a scalar v of the gradient's dtype. */
static loom_status_t op2s(grad_ctx_t *c, ir_op_t op, int32_t a, double v,
                          int32_t *out) {
  int32_t s;
  TRY(grad_scalar(c, v, dt_(c), &s));
  return op2(c, op, a, s, out);
}

/* v <op> a for a scalar v. */
static loom_status_t ops2(grad_ctx_t *c, ir_op_t op, double v, int32_t a,
                          int32_t *out) {
  int32_t s;
  TRY(grad_scalar(c, v, dt_(c), &s));
  return op2(c, op, s, a, out);
}

/* cond ? a : b, where either side may be 0 (-1 stands for zero). */
static loom_status_t choose(grad_ctx_t *c, int32_t cond, int32_t a, int32_t b,
                            int32_t *out) {
  int32_t zero = -1;
  if (a < 0 || b < 0) TRY(grad_scalar(c, 0.0, dt_(c), &zero));
  int32_t in[3] = {cond, a < 0 ? zero : a, b < 0 ? zero : b};
  return grad_op(c, IR_OP_WHERE, 3, in, NULL, out);
}

/* Whether x > 0, as a bool value. */
static loom_status_t positive(grad_ctx_t *c, int32_t x, int32_t *out) {
  int32_t zero;
  TRY(grad_scalar(c, 0.0, dt_(c), &zero));
  return op2(c, IR_OP_GT, x, zero, out);
}

/* dx = g * dy/dx for a unary op. */
static loom_status_t chain(grad_ctx_t *c, int32_t dydx) {
  return op2(c, IR_OP_MUL, g_(c), dydx, &c->din[0]);
}

/* din[k] = d summed back to input k's shape. */
static loom_status_t to_input(grad_ctx_t *c, int k, int32_t d) {
  ir_type_t t = *grad_type(c, in_(c, k));
  return grad_unbroadcast(c, d, &t, &c->din[k]);
}

/* ---- Unary ------------------------------------------------------------- */

loom_status_t grad_neg(grad_ctx_t *c) {
  return grad_unary(c, IR_OP_NEG, g_(c), &c->din[0]);
}

/* sign(0) = 0: the subgradient in the middle of [-1, 1]. */
loom_status_t grad_abs(grad_ctx_t *c) {
  int32_t s;
  TRY(grad_unary(c, IR_OP_SIGN, in_(c, 0), &s));
  return chain(c, s);
}

loom_status_t grad_exp(grad_ctx_t *c) { return chain(c, y_(c)); }

loom_status_t grad_log(grad_ctx_t *c) {
  return op2(c, IR_OP_DIV, g_(c), in_(c, 0), &c->din[0]);
}

/* d log(1 + x) = 1 / (1 + x). */
loom_status_t grad_log1p(grad_ctx_t *c) {
  int32_t t;
  TRY(op2s(c, IR_OP_ADD, in_(c, 0), 1.0, &t));
  return op2(c, IR_OP_DIV, g_(c), t, &c->din[0]);
}

/* d (e^x - 1) = e^x = y + 1. */
loom_status_t grad_expm1(grad_ctx_t *c) {
  int32_t t;
  TRY(op2s(c, IR_OP_ADD, y_(c), 1.0, &t));
  return chain(c, t);
}

/* d sqrt(x) = 1 / (2 sqrt(x)). */
loom_status_t grad_sqrt(grad_ctx_t *c) {
  int32_t t;
  TRY(op2s(c, IR_OP_MUL, y_(c), 2.0, &t));
  return op2(c, IR_OP_DIV, g_(c), t, &c->din[0]);
}

/* d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3. */
loom_status_t grad_rsqrt(grad_ctx_t *c) {
  int32_t t;
  TRY(op2(c, IR_OP_MUL, y_(c), y_(c), &t));
  TRY(op2(c, IR_OP_MUL, t, y_(c), &t));
  TRY(op2s(c, IR_OP_MUL, t, -0.5, &t));
  return chain(c, t);
}

/* d 1/x = -1/x^2 = -y^2. */
loom_status_t grad_reciprocal(grad_ctx_t *c) {
  int32_t t;
  TRY(op2(c, IR_OP_MUL, y_(c), y_(c), &t));
  TRY(grad_unary(c, IR_OP_NEG, t, &t));
  return chain(c, t);
}

loom_status_t grad_tanh(grad_ctx_t *c) {
  int32_t t;
  TRY(op2(c, IR_OP_MUL, y_(c), y_(c), &t));
  TRY(ops2(c, IR_OP_SUB, 1.0, t, &t));
  return chain(c, t);
}

loom_status_t grad_sigmoid(grad_ctx_t *c) {
  int32_t t;
  TRY(ops2(c, IR_OP_SUB, 1.0, y_(c), &t));
  TRY(op2(c, IR_OP_MUL, y_(c), t, &t));
  return chain(c, t);
}

/* Zero at x = 0, as PyTorch: relu'(0) = 0. */
/* The gradient passes where x > 0, and at a NaN: only x <= 0 stops it
 * (PyTorch's rule; relu(NaN) is NaN, and its gradient 1). */
loom_status_t grad_relu(grad_ctx_t *c) {
  int32_t zero, stop;
  TRY(grad_scalar(c, 0.0, dt_(c), &zero));
  TRY(op2(c, IR_OP_LE, in_(c, 0), zero, &stop));
  return choose(c, stop, -1, g_(c), &c->din[0]);
}

loom_status_t grad_leaky_relu(grad_ctx_t *c) {
  double alpha = ir_op_float(c->node.op, c->node.attrs, "alpha");
  int32_t pos, neg;
  TRY(positive(c, in_(c, 0), &pos));
  TRY(op2s(c, IR_OP_MUL, g_(c), alpha, &neg));
  return choose(c, pos, g_(c), neg, &c->din[0]);
}

/* For x <= 0, d alpha (e^x - 1) = alpha e^x = y + alpha. */
loom_status_t grad_elu(grad_ctx_t *c) {
  double alpha = ir_op_float(c->node.op, c->node.attrs, "alpha");
  int32_t pos, neg;
  TRY(positive(c, in_(c, 0), &pos));
  TRY(op2s(c, IR_OP_ADD, y_(c), alpha, &neg));
  TRY(op2(c, IR_OP_MUL, g_(c), neg, &neg));
  return choose(c, pos, g_(c), neg, &c->din[0]);
}

/* d x Phi(x) = Phi(x) + x phi(x), Phi the normal CDF, phi its density. */
loom_status_t grad_gelu(grad_ctx_t *c) {
  int32_t x = in_(c, 0), cdf, pdf, d;
  TRY(op2s(c, IR_OP_MUL, x, M_SQRT1_2, &cdf));
  TRY(grad_unary(c, IR_OP_ERF, cdf, &cdf));
  TRY(op2s(c, IR_OP_ADD, cdf, 1.0, &cdf));
  TRY(op2s(c, IR_OP_MUL, cdf, 0.5, &cdf));
  TRY(op2(c, IR_OP_MUL, x, x, &pdf));
  TRY(op2s(c, IR_OP_MUL, pdf, -0.5, &pdf));
  TRY(grad_unary(c, IR_OP_EXP, pdf, &pdf));
  TRY(op2s(c, IR_OP_MUL, pdf, 0.5 * M_2_SQRTPI * M_SQRT1_2, &pdf));
  TRY(op2(c, IR_OP_MUL, pdf, x, &pdf));
  TRY(op2(c, IR_OP_ADD, cdf, pdf, &d));
  return chain(c, d);
}

/* y = x/2 (1 + tanh u), u = k (x + a x^3):
 * dy/dx = (1 + tanh u)/2 + x/2 (1 - tanh^2 u) k (1 + 3a x^2). */
loom_status_t grad_gelu_tanh(grad_ctx_t *c) {
  const double k = sqrt(2.0 / M_PI), a = 0.044715;
  int32_t x = in_(c, 0), x2, u, t, left, right, du;
  TRY(op2(c, IR_OP_MUL, x, x, &x2));
  TRY(op2s(c, IR_OP_MUL, x2, a, &u));
  TRY(op2s(c, IR_OP_ADD, u, 1.0, &u));
  TRY(op2(c, IR_OP_MUL, u, x, &u));
  TRY(op2s(c, IR_OP_MUL, u, k, &u));
  TRY(grad_unary(c, IR_OP_TANH, u, &t));
  TRY(op2s(c, IR_OP_ADD, t, 1.0, &left));
  TRY(op2s(c, IR_OP_MUL, left, 0.5, &left));
  TRY(op2(c, IR_OP_MUL, t, t, &right));
  TRY(ops2(c, IR_OP_SUB, 1.0, right, &right));
  TRY(op2s(c, IR_OP_MUL, x2, 3.0 * a, &du));
  TRY(op2s(c, IR_OP_ADD, du, 1.0, &du));
  TRY(op2(c, IR_OP_MUL, right, du, &right));
  TRY(op2(c, IR_OP_MUL, right, x, &right));
  TRY(op2s(c, IR_OP_MUL, right, 0.5 * k, &right));
  TRY(op2(c, IR_OP_ADD, left, right, &left));
  return chain(c, left);
}

/* d x s(x) = s (1 + x (1 - s)), s = sigmoid(x). */
loom_status_t grad_silu(grad_ctx_t *c) {
  int32_t x = in_(c, 0), s, t;
  TRY(grad_unary(c, IR_OP_SIGMOID, x, &s));
  TRY(ops2(c, IR_OP_SUB, 1.0, s, &t));
  TRY(op2(c, IR_OP_MUL, x, t, &t));
  TRY(op2s(c, IR_OP_ADD, t, 1.0, &t));
  TRY(op2(c, IR_OP_MUL, s, t, &t));
  return chain(c, t);
}

loom_status_t grad_softplus(grad_ctx_t *c) {
  int32_t s;
  TRY(grad_unary(c, IR_OP_SIGMOID, in_(c, 0), &s));
  return chain(c, s);
}

loom_status_t grad_sin(grad_ctx_t *c) {
  int32_t t;
  TRY(grad_unary(c, IR_OP_COS, in_(c, 0), &t));
  return chain(c, t);
}

loom_status_t grad_cos(grad_ctx_t *c) {
  int32_t t;
  TRY(grad_unary(c, IR_OP_SIN, in_(c, 0), &t));
  TRY(grad_unary(c, IR_OP_NEG, t, &t));
  return chain(c, t);
}

/* d tan(x) = 1 + tan^2(x) = 1 + y^2. */
loom_status_t grad_tan(grad_ctx_t *c) {
  int32_t t;
  TRY(op2(c, IR_OP_MUL, y_(c), y_(c), &t));
  TRY(op2s(c, IR_OP_ADD, t, 1.0, &t));
  return chain(c, t);
}

/* g / sqrt(sign * (x^2 - 1)) with sign -1 for asin and acos (1 - x^2),
 * +1 for acosh (x^2 - 1), then negated for acos. 1 - x^2 is -x^2 + 1,
 * +0 at x = +-1 (-(x^2 - 1) would be -0 there, its rsqrt -inf). */
static loom_status_t inverse_sqrt_rule(grad_ctx_t *c, double sign, bool negate) {
  int32_t t;
  TRY(op2(c, IR_OP_MUL, in_(c, 0), in_(c, 0), &t));
  if (sign < 0) {
    TRY(grad_unary(c, IR_OP_NEG, t, &t));
    TRY(op2s(c, IR_OP_ADD, t, 1.0, &t));
  } else {
    TRY(op2s(c, IR_OP_SUB, t, 1.0, &t));
  }
  TRY(grad_unary(c, IR_OP_RSQRT, t, &t));
  if (negate) TRY(grad_unary(c, IR_OP_NEG, t, &t));
  return chain(c, t);
}

loom_status_t grad_asin(grad_ctx_t *c) { return inverse_sqrt_rule(c, -1, false); }
loom_status_t grad_acos(grad_ctx_t *c) { return inverse_sqrt_rule(c, -1, true); }
loom_status_t grad_acosh(grad_ctx_t *c) { return inverse_sqrt_rule(c, 1, false); }

/* d asinh(x) = 1 / sqrt(x^2 + 1). */
loom_status_t grad_asinh(grad_ctx_t *c) {
  int32_t t;
  TRY(op2(c, IR_OP_MUL, in_(c, 0), in_(c, 0), &t));
  TRY(op2s(c, IR_OP_ADD, t, 1.0, &t));
  TRY(grad_unary(c, IR_OP_RSQRT, t, &t));
  return chain(c, t);
}

/* d atan(x) = 1 / (1 + x^2); d atanh(x) = 1 / (1 - x^2). */
static loom_status_t inverse_square_rule(grad_ctx_t *c, double sign) {
  int32_t t;
  TRY(op2(c, IR_OP_MUL, in_(c, 0), in_(c, 0), &t));
  TRY(ops2(c, sign > 0 ? IR_OP_ADD : IR_OP_SUB, 1.0, t, &t));
  return op2(c, IR_OP_DIV, g_(c), t, &c->din[0]);
}

loom_status_t grad_atan(grad_ctx_t *c) { return inverse_square_rule(c, 1); }
loom_status_t grad_atanh(grad_ctx_t *c) { return inverse_square_rule(c, -1); }

loom_status_t grad_sinh(grad_ctx_t *c) {
  int32_t t;
  TRY(grad_unary(c, IR_OP_COSH, in_(c, 0), &t));
  return chain(c, t);
}

loom_status_t grad_cosh(grad_ctx_t *c) {
  int32_t t;
  TRY(grad_unary(c, IR_OP_SINH, in_(c, 0), &t));
  return chain(c, t);
}

/* d erf(x) = 2/sqrt(pi) e^(-x^2). */
loom_status_t grad_erf(grad_ctx_t *c) {
  int32_t x = in_(c, 0), t;
  TRY(op2(c, IR_OP_MUL, x, x, &t));
  TRY(grad_unary(c, IR_OP_NEG, t, &t));
  TRY(grad_unary(c, IR_OP_EXP, t, &t));
  TRY(op2s(c, IR_OP_MUL, t, M_2_SQRTPI, &t));
  return chain(c, t);
}

loom_status_t grad_identity(grad_ctx_t *c) {
  c->din[0] = g_(c);
  return LOOM_OK;
}

/* Only float-to-float casts pass a gradient (integers carry none). */
loom_status_t grad_cast(grad_ctx_t *c) {
  loom_dtype_t from = grad_type(c, in_(c, 0))->dtype;
  if (!dtype_is_float(from) || !dtype_is_float(dt_(c))) return LOOM_OK;
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "dtype", from);
  return grad_op(c, IR_OP_CAST, 1, &c->dout[0], &a, &c->din[0]);
}

/* The gradient passes where min <= x <= max, bounds included, as
 * PyTorch's clamp (its hardtanh and relu6 exclude them instead); a NaN x
 * gets none. A NaN or infinite bound is no bound. */
loom_status_t grad_clamp(grad_ctx_t *c) {
  double lo = ir_op_float(c->node.op, c->node.attrs, "min");
  double hi = ir_op_float(c->node.op, c->node.attrs, "max");
  int32_t x = in_(c, 0), inside = -1, t;
  if (isfinite(lo)) TRY(op2s(c, IR_OP_GE, x, lo, &inside));
  if (isfinite(hi)) {
    TRY(op2s(c, IR_OP_LE, x, hi, &t));
    if (inside >= 0) TRY(op2(c, IR_OP_AND, inside, t, &t));
    inside = t;
  }
  if (inside < 0) return grad_identity(c);
  return choose(c, inside, g_(c), -1, &c->din[0]);
}

/* ---- Binary ------------------------------------------------------------ */

loom_status_t grad_add(grad_ctx_t *c) {
  TRY(to_input(c, 0, g_(c)));
  return to_input(c, 1, g_(c));
}

loom_status_t grad_sub(grad_ctx_t *c) {
  int32_t ng;
  TRY(to_input(c, 0, g_(c)));
  TRY(grad_unary(c, IR_OP_NEG, g_(c), &ng));
  return to_input(c, 1, ng);
}

loom_status_t grad_mul(grad_ctx_t *c) {
  int32_t da, db;
  TRY(op2(c, IR_OP_MUL, g_(c), in_(c, 1), &da));
  TRY(op2(c, IR_OP_MUL, g_(c), in_(c, 0), &db));
  TRY(to_input(c, 0, da));
  return to_input(c, 1, db);
}

/* d(a/b)/db = -a/b^2 = -(1/b) y. */
loom_status_t grad_div(grad_ctx_t *c) {
  int32_t da, db;
  TRY(op2(c, IR_OP_DIV, g_(c), in_(c, 1), &da));
  TRY(op2(c, IR_OP_MUL, da, y_(c), &db));
  TRY(grad_unary(c, IR_OP_NEG, db, &db));
  TRY(to_input(c, 0, da));
  return to_input(c, 1, db);
}

/* d a^b = b a^(b-1) da + a^b log(a) db, with PyTorch's values where the
 * formula has none: da = 0 where b = 0 (0^-1 * 0 would be NaN at a = 0),
 * db = 0 where a = 0 and b >= 0 (log 0 * 0^b); db is NaN where a < 0, as
 * the function is not real-valued around there. */
loom_status_t grad_pow(grad_ctx_t *c) {
  int32_t a = in_(c, 0), b = in_(c, 1), da, db, zero, b0, a0, b_pos;
  TRY(op2s(c, IR_OP_SUB, b, 1.0, &da));
  TRY(op2(c, IR_OP_POW, a, da, &da));
  TRY(op2(c, IR_OP_MUL, da, b, &da));
  TRY(op2(c, IR_OP_MUL, g_(c), da, &da));
  TRY(grad_scalar(c, 0.0, dt_(c), &zero));
  TRY(op2(c, IR_OP_EQ, b, zero, &b0));
  TRY(choose(c, b0, -1, da, &da));
  TRY(grad_unary(c, IR_OP_LOG, a, &db));
  TRY(op2(c, IR_OP_MUL, db, y_(c), &db));
  TRY(op2(c, IR_OP_MUL, g_(c), db, &db));
  TRY(op2(c, IR_OP_EQ, a, zero, &a0));
  TRY(op2(c, IR_OP_GE, b, zero, &b_pos));
  TRY(op2(c, IR_OP_AND, a0, b_pos, &a0));
  TRY(choose(c, a0, -1, db, &db));
  TRY(to_input(c, 0, da));
  return to_input(c, 1, db);
}

/* maximum (lose GT) or minimum (LT) as PyTorch: at a tie each operand
 * gets g/2 (what a central difference sees; the total stays g), else the
 * one chosen gets g. An operand gets none only where it lost the
 * comparison, so a NaN sends g to both. */
static loom_status_t extreme_grad(grad_ctx_t *c, ir_op_t b_wins) {
  int32_t a = in_(c, 0), b = in_(c, 1), tie, half, shared, lost[2];
  TRY(op2(c, IR_OP_EQ, a, b, &tie));
  TRY(op2s(c, IR_OP_MUL, g_(c), 0.5, &half));
  TRY(choose(c, tie, half, g_(c), &shared));
  TRY(op2(c, b_wins, b, a, &lost[0]));
  TRY(op2(c, b_wins, a, b, &lost[1]));
  for (int k = 0; k < 2; k++) {
    int32_t d;
    TRY(choose(c, lost[k], -1, shared, &d));
    TRY(to_input(c, k, d));
  }
  return LOOM_OK;
}

loom_status_t grad_maximum(grad_ctx_t *c) { return extreme_grad(c, IR_OP_GT); }

loom_status_t grad_minimum(grad_ctx_t *c) { return extreme_grad(c, IR_OP_LT); }

/* a mod b = a - b floor(a/b): da = g, db = -g floor(a/b). */
loom_status_t grad_mod(grad_ctx_t *c) {
  int32_t q;
  TRY(op2(c, IR_OP_DIV, in_(c, 0), in_(c, 1), &q));
  TRY(grad_unary(c, IR_OP_FLOOR, q, &q));
  TRY(op2(c, IR_OP_MUL, g_(c), q, &q));
  TRY(grad_unary(c, IR_OP_NEG, q, &q));
  TRY(to_input(c, 0, g_(c)));
  return to_input(c, 1, q);
}

/* The condition (bool) gets none; a and b get g where they were chosen. */
loom_status_t grad_where(grad_ctx_t *c) {
  int32_t cond = in_(c, 0), da, db;
  TRY(choose(c, cond, g_(c), -1, &da));
  TRY(choose(c, cond, -1, g_(c), &db));
  TRY(to_input(c, 1, da));
  return to_input(c, 2, db);
}

/* The same mask as the forward pass (output 1), scaled by 1/(1-p). */
loom_status_t grad_dropout(grad_ctx_t *c) {
  if (c->dout[0] < 0) return LOOM_OK;
  double p = ir_attr_float(c->node.attrs, "p", 0.0);
  int32_t kept;
  TRY(op2s(c, IR_OP_DIV, g_(c), 1.0 - p, &kept));
  return choose(c, c->node.out[1], kept, -1, &c->din[0]);
}
