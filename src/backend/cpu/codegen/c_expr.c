/* Per-op scalar expressions: one template per op for float dtypes
 * (computed in the dtype itself; f32, f16 and bf16 in float, each op
 * rounded to f16 or bf16 once, at its result) and one for integers
 * (computed in int64, wrapping like the reference kernels). Templates
 * name the inputs' locals $0 $1 $2; $T is the float type, $f the suffix
 * of its math functions ("f" for float), $p that of a helper with a form
 * of its own for half precision ("h"), $A, $L and $H the op's attributes
 * (alpha; clamp's bounds), $M the integer dtype's bits all set (1 for
 * bool, whose one bit is its value; else -1). */
#include <math.h>
#include <string.h>

#include "backend/cpu/codegen/cg.h"

typedef struct expr_rule {
  const char *f; /* float dtypes; NULL: not generated */
  const char *i; /* integer and bool dtypes; NULL: not generated */
  /* Work per element in plain operations (cg_op_cost; 0 reads as 1): a
   * transcendental function counts 8, a division or square root 3. */
  int cost;
} expr_rule_t;

/* e^-|x| is e^-x on one side and e^x on the other, the very operands of
 * the two stable forms 1 / (1 + e) and e / (1 + e), so one exponential
 * serves both, and so does one division: the numerator is selected
 * first (the same bits as selecting the quotient; if-converted, the two
 * quotients were two divisions per element). */
#define SIGMOID(x)                                                             \
  "((" x " >= 0 ? ($T)1 : loom_exp$f(-fabs$f(" x "))) / "                      \
  "(($T)1 + loom_exp$f(-fabs$f(" x "))))"
#define WRAP(op) "(int64_t)((uint64_t)$0 " op " (uint64_t)$1)"

static const expr_rule_t rules[IR_OP_COUNT] = {
    [IR_OP_NEG] = {"-$0", "(int64_t)(0 - (uint64_t)$0)", 0},
    [IR_OP_ABS] = {"fabs$f($0)", "($0 < 0 ? (int64_t)(0 - (uint64_t)$0) : (int64_t)$0)", 0},
    [IR_OP_EXP] = {"loom_exp$f($0)", NULL, 8},
    [IR_OP_LOG] = {"log$f($0)", NULL, 8},
    [IR_OP_LOG1P] = {"log1p$f($0)", NULL, 8},
    [IR_OP_EXPM1] = {"expm1$f($0)", NULL, 8},
    [IR_OP_SQRT] = {"sqrt$f($0)", NULL, 3},
    [IR_OP_RSQRT] = {"($T)1 / sqrt$f($0)", NULL, 3},
    [IR_OP_RECIPROCAL] = {"($T)1 / $0", NULL, 3},
    [IR_OP_TANH] = {"loom_tanh$f($0)", NULL, 8},
    [IR_OP_SIGMOID] = {SIGMOID("$0"), NULL, 8},
    /* relu passes NaN through, as the reference does. */
    [IR_OP_RELU] = {"loom_maximum$f($0, ($T)0)", "($0 > 0 ? (int64_t)$0 : 0)", 0},
    [IR_OP_LEAKY_RELU] = {"($0 > 0 ? $0 : $0 * ($T)$A)", NULL, 0},
    [IR_OP_ELU] = {"($0 > 0 ? $0 : ($T)$A * expm1$f($0))", NULL, 8},
    [IR_OP_GELU] = {"loom_gelu$p($0)", NULL, 8},
    [IR_OP_GELU_TANH] = {"loom_gelu_tanh$p($0)", NULL, 8},
    [IR_OP_SILU] = {"$0 * " SIGMOID("$0"), NULL, 8},
    /* max(x, 0) + log1p(e^-|x|) never overflows. */
    [IR_OP_SOFTPLUS] = {"(fmax$f($0, ($T)0) + log1p$f(exp$f(-fabs$f($0))))", NULL, 8},
    [IR_OP_SIN] = {"sin$f($0)", NULL, 8},
    [IR_OP_COS] = {"cos$f($0)", NULL, 8},
    [IR_OP_TAN] = {"tan$f($0)", NULL, 8},
    [IR_OP_ASIN] = {"asin$f($0)", NULL, 8},
    [IR_OP_ACOS] = {"acos$f($0)", NULL, 8},
    [IR_OP_ATAN] = {"atan$f($0)", NULL, 8},
    [IR_OP_SINH] = {"sinh$f($0)", NULL, 8},
    [IR_OP_COSH] = {"cosh$f($0)", NULL, 8},
    [IR_OP_ASINH] = {"asinh$f($0)", NULL, 8},
    [IR_OP_ACOSH] = {"acosh$f($0)", NULL, 8},
    [IR_OP_ATANH] = {"atanh$f($0)", NULL, 8},
    [IR_OP_ERF] = {"loom_erf$f($0)", NULL, 8},
    [IR_OP_FLOOR] = {"floor$f($0)", NULL, 0},
    [IR_OP_CEIL] = {"ceil$f($0)", NULL, 0},
    /* nearbyint rounds half to even in the default rounding mode. */
    [IR_OP_ROUND] = {"nearbyint$f($0)", NULL, 0},
    [IR_OP_SIGN] = {"($0 > 0 ? ($T)1 : $0 < 0 ? ($T)-1 : $0)", "($0 > 0 ? 1 : $0 < 0 ? -1 : 0)", 0},
    [IR_OP_NOT] = {"($0 == 0)", "($0 == 0)", 0},
    [IR_OP_BITWISE_NOT] = {NULL, "($0 ^ $M)", 0},
    [IR_OP_ISNAN] = {"($0 != $0)", NULL, 0},
    [IR_OP_IDENTITY] = {"$0", "$0", 0},
    [IR_OP_CLAMP] = {"loom_clamp$f($0, $L, $H)", "loom_clampi($0, $L, $H)", 0},
    [IR_OP_ADD] = {"($0 + $1)", WRAP("+"), 0},
    [IR_OP_SUB] = {"($0 - $1)", WRAP("-"), 0},
    [IR_OP_MUL] = {"($0 * $1)", WRAP("*"), 0},
    /* Integer division by zero is an error the reference reports; code
     * cannot, so integer div and mod stay with the reference kernel. */
    [IR_OP_DIV] = {"($0 / $1)", NULL, 3},
    [IR_OP_MOD] = {"loom_mod$f($0, $1)", NULL, 0},
    [IR_OP_POW] = {"pow$f($0, $1)", "loom_powi($0, $1)", 8},
    /* NaN propagates: a NaN a wins the test, a NaN b loses it and is taken. */
    [IR_OP_MAXIMUM] = {"loom_maximum$f($0, $1)", "($0 > $1 ? $0 : $1)", 0},
    [IR_OP_MINIMUM] = {"loom_minimum$f($0, $1)", "($0 < $1 ? $0 : $1)", 0},
    [IR_OP_EQ] = {"($0 == $1)", "($0 == $1)", 0},
    [IR_OP_NE] = {"($0 != $1)", "($0 != $1)", 0},
    [IR_OP_LT] = {"($0 < $1)", "($0 < $1)", 0},
    [IR_OP_LE] = {"($0 <= $1)", "($0 <= $1)", 0},
    [IR_OP_GT] = {"($0 > $1)", "($0 > $1)", 0},
    [IR_OP_GE] = {"($0 >= $1)", "($0 >= $1)", 0},
    [IR_OP_AND] = {"($0 != 0 && $1 != 0)", "($0 != 0 && $1 != 0)", 0},
    [IR_OP_OR] = {"($0 != 0 || $1 != 0)", "($0 != 0 || $1 != 0)", 0},
    [IR_OP_XOR] = {"(($0 != 0) != ($1 != 0))", "(($0 != 0) != ($1 != 0))", 0},
    [IR_OP_BITWISE_AND] = {NULL, "($0 & $1)", 0},
    [IR_OP_BITWISE_OR] = {NULL, "($0 | $1)", 0},
    [IR_OP_BITWISE_XOR] = {NULL, "($0 ^ $1)", 0},
    [IR_OP_BITSHIFT_LEFT] = {NULL, "loom_shl($0, $1)", 0},
    [IR_OP_BITSHIFT_RIGHT] = {NULL, "loom_shr($0, $1)", 0},
    [IR_OP_WHERE] = {"($0 ? $1 : $2)", "($0 ? $1 : $2)", 0},
};

static bool plain_dtype(loom_dtype_t d) { return (unsigned)d < LOOM_DTYPE_COUNT; }

/* f16 and bf16 compute in float, rounded to their dtype after each op as
 * the reference's store rounds them. */
static bool single(loom_dtype_t d) {
  return d == LOOM_F32 || d == LOOM_F16 || d == LOOM_BF16;
}

/* The dtype an op computes in: where's is its branches', others' input 0. */
static loom_dtype_t domain(const loom_graph_t *g, const ir_node_t *n) {
  return g->values[n->in[n->op == IR_OP_WHERE ? 1 : 0]].type.dtype;
}

bool cg_expr_has_rule(ir_op_t op) {
  return op == IR_OP_CAST || rules[op].f != NULL || rules[op].i != NULL;
}

bool cg_expr_supported(const loom_graph_t *g, const ir_node_t *n) {
  for (int i = 0; i < n->n_in; i++)
    if (!plain_dtype(g->values[n->in[i]].type.dtype)) return false;
  for (int i = 0; i < n->n_out; i++)
    if (!plain_dtype(g->values[n->out[i]].type.dtype)) return false;
  if (n->op == IR_OP_CAST) return true;
  if (n->n_in == 0) return false;
  const expr_rule_t *r = &rules[n->op];
  return dtype_is_float(domain(g, n)) ? r->f != NULL : r->i != NULL;
}

int cg_op_cost(ir_op_t op) {
  return (unsigned)op < IR_OP_COUNT && rules[op].cost > 0 ? rules[op].cost : 1;
}

int64_t cg_group_cost(const loom_graph_t *g, const fuse_group_t *grp) {
  int64_t ops = 0;
  for (int k = 0; k < grp->n_nodes; k++) ops += cg_op_cost(g->nodes[grp->nodes[k]].op);
  /* a plain op or two is what CG_PARALLEL_MIN was measured on */
  return ops / 2 > 1 ? ops / 2 : 1;
}

/* ---- Attributes as literals -------------------------------------------- */

static double alpha(const ir_node_t *n) {
  return ir_op_float(n->op, n->attrs, "alpha");
}

/* An integer clamp bound, rounded inward and held to the dtype's range,
 * which is where the reference's saturating store puts it. */
static int64_t int_bound(double b, bool lower, loom_dtype_t d) {
  static const double lo[] = {[LOOM_I8] = -128.0, [LOOM_I32] = -2147483648.0,
                              [LOOM_I64] = -9223372036854775808.0, [LOOM_BOOL] = 0};
  static const double hi[] = {[LOOM_I8] = 127.0, [LOOM_I32] = 2147483647.0,
                              [LOOM_I64] = 9223372036854775807.0, [LOOM_BOOL] = 1};
  if (isnan(b)) b = lower ? -INFINITY : INFINITY;
  b = lower ? ceil(b) : floor(b);
  if (b <= lo[d]) return d == LOOM_I64 ? INT64_MIN : (int64_t)lo[d];
  if (b >= hi[d]) return d == LOOM_I64 ? INT64_MAX : (int64_t)hi[d];
  return (int64_t)b;
}

static void clamp_bound(cg_buf_t *b, const ir_node_t *n, loom_dtype_t d,
                        bool lower) {
  double v = ir_op_float(n->op, n->attrs, lower ? "min" : "max");
  if (dtype_is_float(d)) {
    cg_double(b, isnan(v) ? (lower ? -INFINITY : INFINITY) : v);
    return;
  }
  int64_t i = int_bound(v, lower, d);
  if (i == INT64_MIN) cg_printf(b, "INT64_MIN");
  else cg_printf(b, "(int64_t)%lldLL", (long long)i);
}

/* ---- Templates ---------------------------------------------------------- */

static void expand(cg_buf_t *b, const char *t, const loom_graph_t *g,
                   const ir_node_t *n) {
  loom_dtype_t d = domain(g, n);
  for (const char *p = t; *p; p++) {
    if (*p != '$') {
      cg_printf(b, "%c", *p);
      continue;
    }
    char k = *++p;
    if (k >= '0' && k <= '2') cg_printf(b, "v%d", (int)n->in[k - '0']);
    else if (k == 'T') cg_printf(b, "%s", cg_local_type(d));
    else if (k == 'f') cg_printf(b, "%s", single(d) ? "f" : "");
    else if (k == 'p') cg_printf(b, "%s", d == LOOM_F32 ? "f" : single(d) ? "h" : "");
    else if (k == 'A') cg_double(b, alpha(n));
    else if (k == 'L' || k == 'H') clamp_bound(b, n, d, k == 'L');
    else if (k == 'M') cg_printf(b, "%s", d == LOOM_BOOL ? "1" : "-1");
  }
}

/* Floats reach integers truncated and saturated (NaN to 0), integers
 * reach narrower ones wrapped, anything reaches bool as x != 0: the
 * reference's conversions on store. */
static void cast_expr(cg_buf_t *b, loom_dtype_t from, loom_dtype_t to, int v) {
  if (to == LOOM_BOOL) cg_printf(b, "(v%d != 0)", v);
  else if (dtype_is_float(to)) cg_printf(b, "(%s)(double)v%d", cg_local_type(to), v);
  else if (!dtype_is_float(from)) cg_printf(b, "v%d", v);
  else if (to == LOOM_I64) cg_printf(b, "loom_f2i64((double)v%d)", v);
  else if (to == LOOM_I32) cg_printf(b, "loom_sat((double)v%d, -2147483648.0, 2147483647.0)", v);
  else cg_printf(b, "loom_sat((double)v%d, -128.0, 127.0)", v);
}

/* maximum or minimum with a constant that is not NaN: one test, with the
 * constant on the left so that a NaN on the right fails it and is taken.
 * GCC makes that one vmaxps, against three instructions for the general
 * form, which is what bounds a long fused chain. */
static bool minmax_by_constant(cg_buf_t *b, const loom_graph_t *g, const ir_node_t *n) {
  if (n->op != IR_OP_MAXIMUM && n->op != IR_OP_MINIMUM) return false;
  double x;
  int k = -1;
  for (int i = 1; i >= 0 && k < 0; i--)
    if (cg_scalar_constant(g, n->in[i], &x) && !isnan(x)) k = i;
  if (k < 0) return false;
  int cst = (int)n->in[k], other = (int)n->in[1 - k];
  cg_printf(b, "(v%d %c v%d ? v%d : v%d)", cst, n->op == IR_OP_MAXIMUM ? '>' : '<', other,
            cst, other);
  return true;
}

void cg_node_stmt(cg_buf_t *b, int level, const loom_graph_t *g,
                  const ir_node_t *n) {
  loom_dtype_t to = g->values[n->out[0]].type.dtype;
  const char *t = cg_local_type(to);
  const char *round = to == LOOM_F16 ? "loom_f16_round" : to == LOOM_BF16 ? "loom_bf16_round" : NULL;
  cg_line(b, level, "const %s v%d = ", t, (int)n->out[0]);
  if (round) cg_printf(b, "%s(", round);
  if (n->op == IR_OP_CAST) {
    cg_printf(b, "(%s)", t);
    cast_expr(b, g->values[n->in[0]].type.dtype, to, (int)n->in[0]);
  } else {
    const expr_rule_t *r = &rules[n->op];
    loom_dtype_t d = domain(g, n);
    /* Integer results wrap to the dtype (and tests to bool) through a
     * cast, as the reference's store does; a float result is its type. */
    bool cast = !dtype_is_float(d) || (d != to && !(single(d) && to == LOOM_F32));
    if (cast) cg_printf(b, "(%s)(", t);
    if (!dtype_is_float(d) || !minmax_by_constant(b, g, n))
      expand(b, dtype_is_float(d) ? r->f : r->i, g, n);
    if (cast) cg_printf(b, ")");
  }
  cg_printf(b, round ? ");\n" : ";\n");
}

void cg_expr_helpers(cg_buf_t *b) {
  cg_printf(b,
      "\n#include <math.h>\n"
      "\n/* FP exceptions are never observed: without this GCC will not turn\n"
      " * a loop with a float conditional and a conversion into vector code.\n"
      " * Results do not change. */\n"
      "#if defined(__GNUC__) && !defined(__clang__)\n"
      "#pragma GCC optimize(\"no-trapping-math\")\n"
      "#endif\n"
      "\n/* Lanes of a block of an elementwise body with `live` arrays live at\n"
      " * once (c_elementwise.c): 64 floats in flight hid a chain's latency on\n"
      " * AVX2 and AVX-512 alike; fewer where the arrays would not fit the\n"
      " * target's vector registers beside a few constants. */\n"
      "#if defined(__AVX512F__)\n"
      "#define LOOM_VEC_FLOATS 16\n"
      "#define LOOM_VEC_REGS 32\n"
      "#elif defined(__AVX__)\n"
      "#define LOOM_VEC_FLOATS 8\n"
      "#define LOOM_VEC_REGS 16\n"
      "#else\n"
      "#define LOOM_VEC_FLOATS 4\n"
      "#define LOOM_VEC_REGS 16\n"
      "#endif\n"
      "#define LOOM_LANES_FIT(live, n) ((live) * (n) / LOOM_VEC_FLOATS + 4 <= LOOM_VEC_REGS)\n"
      "#define LOOM_LANES(live) \\\n"
      "  (LOOM_LANES_FIT(live, 64) ? 64 : LOOM_LANES_FIT(live, 32) ? 32 : 16)\n"
      "\n/* Helpers of the scalar expressions, matching the reference kernels. */\n"
      "/* max and min that keep a NaN of either side: a plain max, then a's NaN\n"
      " * put back, as two statements. Written as one condition, GCC turns it\n"
      " * into two compares and a mask merge per vector, twice the time. */\n"
      "static inline float loom_maximumf(float a, float b) {\n"
      "  float m = a > b ? a : b;\n"
      "  return a != a ? a : m;\n"
      "}\n"
      "static inline double loom_maximum(double a, double b) {\n"
      "  double m = a > b ? a : b;\n"
      "  return a != a ? a : m;\n"
      "}\n"
      "static inline float loom_minimumf(float a, float b) {\n"
      "  float m = a < b ? a : b;\n"
      "  return a != a ? a : m;\n"
      "}\n"
      "static inline double loom_minimum(double a, double b) {\n"
      "  double m = a < b ? a : b;\n"
      "  return a != a ? a : m;\n"
      "}\n"
      "/* The same for either float type (the folds' accumulators). */\n"
      "#define LOOM_MAXIMUM(a, b) _Generic((a) + (b), double: loom_maximum, default: loom_maximumf)(a, b)\n"
      "#define LOOM_MINIMUM(a, b) _Generic((a) + (b), double: loom_minimum, default: loom_minimumf)(a, b)\n"
      "/* Bounds are never NaN (NaN is no bound), so a NaN x fails both tests\n"
      " * and passes through. */\n"
      "static inline float loom_clampf(float x, float lo, float hi) {\n"
      "  float v = x < lo ? lo : x;\n"
      "  return v > hi ? hi : v;\n"
      "}\n"
      "static inline double loom_clamp(double x, double lo, double hi) {\n"
      "  double v = x < lo ? lo : x;\n"
      "  return v > hi ? hi : v;\n"
      "}\n"
      "static inline int64_t loom_clampi(int64_t x, int64_t lo, int64_t hi) {\n"
      "  int64_t v = x < lo ? lo : x;\n"
      "  return v > hi ? hi : v;\n"
      "}\n"
      "/* Python's %%: the result takes the sign of b. */\n"
      "static inline float loom_modf(float a, float b) {\n"
      "  float r = fmodf(a, b);\n"
      "  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n"
      "}\n"
      "static inline double loom_mod(double a, double b) {\n"
      "  double r = fmod(a, b);\n"
      "  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n"
      "}\n"
      "/* Powers by squaring; negative exponents give 0 but for bases 1, -1. */\n"
      "static inline int64_t loom_powi(int64_t a, int64_t e) {\n"
      "  if (e < 0) return a == 1 ? 1 : a == -1 ? (e %% 2 ? -1 : 1) : 0;\n"
      "  uint64_t r = 1, base = (uint64_t)a;\n"
      "  for (; e; e >>= 1) {\n"
      "    if (e & 1) r *= base;\n"
      "    base *= base;\n"
      "  }\n"
      "  return (int64_t)r;\n"
      "}\n"
      "/* Shifts in int64 (the store wraps them to the dtype); b < 0 and\n"
      " * b >= 64, undefined in C, shift every bit out, as the reference. */\n"
      "static inline int64_t loom_shl(int64_t a, int64_t b) {\n"
      "  return b < 0 || b >= 64 ? 0 : (int64_t)((uint64_t)a << b);\n"
      "}\n"
      "static inline int64_t loom_shr(int64_t a, int64_t b) {\n"
      "  return b < 0 || b >= 64 ? (a < 0 ? -1 : 0) : a >> b;\n"
      "}\n"
      "/* Truncates toward zero and saturates; NaN becomes 0. */\n"
      "static inline int64_t loom_sat(double v, double lo, double hi) {\n"
      "  if (v != v) return 0;\n"
      "  return v <= lo ? (int64_t)lo : v >= hi ? (int64_t)hi : (int64_t)v;\n"
      "}\n"
      "/* IEEE half and bfloat16, round to nearest even. */\n"
      "typedef union { uint32_t u; float f; } loom_bits_t;\n"
      "static inline float loom_f16_to_f32(uint16_t h) {\n"
      "  uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;\n"
      "  loom_bits_t v;\n"
      "  if (e == 0) v.f = (float)m * 5.9604644775390625e-8f;\n"
      "  else if (e == 31) v.f = m ? NAN : INFINITY;\n"
      "  else v.u = ((e + 112) << 23) | (m << 13);\n"
      "  return (h & 0x8000) ? -v.f : v.f;\n"
      "}\n"
      "static inline uint16_t loom_f32_to_f16(float f) {\n"
      "  loom_bits_t v = {.f = f};\n"
      "  uint32_t sign = (v.u >> 16) & 0x8000, a = v.u & 0x7fffffff;\n"
      "  if (a > 0x7f800000) return (uint16_t)(sign | 0x7e00);\n"
      "  if (a >= 0x477ff000) return (uint16_t)(sign | 0x7c00);\n"
      "  if (a < 0x38800000) return (uint16_t)(sign | (uint32_t)nearbyintf(fabsf(f) * 16777216.0f));\n"
      "  a -= 0x38000000;\n"
      "  a += 0xfff + ((a >> 13) & 1);\n"
      "  return (uint16_t)(sign | (a >> 13));\n"
      "}\n"
      "static inline float loom_bf16_to_f32(uint16_t h) {\n"
      "  loom_bits_t v = {.u = (uint32_t)h << 16};\n"
      "  return v.f;\n"
      "}\n"
      "static inline uint16_t loom_f32_to_bf16(float f) {\n"
      "  loom_bits_t v = {.f = f};\n"
      "  if ((v.u & 0x7fffffff) > 0x7f800000) return (uint16_t)((v.u >> 16) | 0x40);\n"
      "  return (uint16_t)((v.u + 0x7fff + ((v.u >> 16) & 1)) >> 16);\n"
      "}\n"
      "static inline float loom_f16_round(float f) { return loom_f16_to_f32(loom_f32_to_f16(f)); }\n"
      "static inline float loom_bf16_round(float f) { return loom_bf16_to_f32(loom_f32_to_bf16(f)); }\n"
      "/* The float math below is written out (no libm call) so that loops\n"
      " * over it vectorize. Under GCC each function is also a vector\n"
      " * function, compiled for 8 and 16 lanes (-fopenmp-simd) and called, not\n"
      " * inlined: a fused body with hundreds of transcendentals stays small\n"
      " * (inlined, GCC stops inlining past its growth limits and the loop\n"
      " * then runs scalar, and compiles for seconds), and a call per vector\n"
      " * costs about what the inlined code does. Other compilers inline. */\n"
      "#if defined(__GNUC__) && !defined(__clang__)\n"
      "#define LOOM_VECTOR_FN _Pragma(\"omp declare simd simdlen(8) notinbranch\") \\\n"
      "  _Pragma(\"omp declare simd simdlen(16) notinbranch\") static __attribute__((noinline))\n"
      "#else\n"
      "#define LOOM_VECTOR_FN static inline\n"
      "#endif\n");
  /* the float functions: one source with the eager kernels' */
  cg_printf(b, "%s", cg_float_math_text);
  cg_printf(b,
      "static inline double loom_exp(double x) { return exp(x); }\n"
      "static inline double loom_erf(double x) { return erf(x); }\n"
      "static inline double loom_tanh(double x) { return tanh(x); }\n"
      "/* GELU, x Phi(x): in f32 as PyTorch computes it, x (1 + erf(x / sqrt 2)) / 2\n"
      " * and x (1 + tanh u) / 2, which vectorize (in the FFN's epilogue); 1 + erf\n"
      " * and 1 + tanh cancel for x < 0 (a relative error of 1e-2 at x = -4, 1e-6\n"
      " * absolute), which half precision would see: its forms x erfc(-x / sqrt 2) / 2\n"
      " * and x sigmoid(2u) keep their relative accuracy, so that the one rounding\n"
      " * to f16 or bf16 falls where the reference's does (about 3x and 1.6x the\n"
      " * time of the f32 forms); f64 computes them as the reference does. */\n"
      "static inline float loom_geluf(float x) {\n"
      "  return 0.5f * x * (1.0f + loom_erff(x * 0.70710678118654752f));\n"
      "}\n"
      "static inline float loom_gelu_tanhf(float x) {\n"
      "  return 0.5f * x * (1.0f + loom_tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));\n"
      "}\n"
      "static inline float loom_geluh(float x) { return 0.5f * x * loom_erfcf(x * -0.70710678118654752f); }\n"
      "static inline float loom_gelu_tanhh(float x) {\n"
      "  float u = 1.59576912160573071f * (x + 0.044715f * x * x * x);\n"
      "  float e = loom_expf(-fabsf(u));\n"
      "  return x * ((u >= 0 ? 1.0f : e) / (1.0f + e));\n"
      "}\n"
      "static inline double loom_gelu(double x) { return 0.5 * x * erfc(x * -0.70710678118654752); }\n"
      "static inline double loom_gelu_tanh(double x) {\n"
      "  double u = 1.59576912160573071 * (x + 0.044715 * x * x * x);\n"
      "  double e = exp(-fabs(u));\n"
      "  return x * ((u >= 0 ? 1.0 : e) / (1.0 + e));\n"
      "}\n"
      "static inline int64_t loom_f2i64(double v) {\n"
      "  if (v != v) return 0;\n"
      "  if (v >= 9223372036854775807.0) return INT64_MAX;\n"
      "  return v <= -9223372036854775808.0 ? INT64_MIN : (int64_t)v;\n"
      "}\n");
}
