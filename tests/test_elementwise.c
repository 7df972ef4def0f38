/* Elementwise ops: every unary and binary op in every dtype it accepts,
 * against hand-computed values and closed forms; NumPy broadcasting;
 * strided and broadcast (stride 0) inputs; cast between every pair of
 * dtypes; and the error paths. */
#include <stdbool.h>
#include <string.h>

#include "harness.h"

#define BIT(d) (1u << (d))
#define FLOATS (BIT(LOOM_F32) | BIT(LOOM_F64) | BIT(LOOM_F16) | BIT(LOOM_BF16))
#define INTS (BIT(LOOM_I8) | BIT(LOOM_I32) | BIT(LOOM_I64))
#define NUMERIC (FLOATS | INTS)
#define ALL (NUMERIC | BIT(LOOM_BOOL))
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const loom_dtype_t dtypes[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16,
                                      LOOM_I8,  LOOM_I32, LOOM_I64, LOOM_BOOL};

typedef loom_status_t (*unary_fn)(loom_graph_t *, loom_value_t, loom_value_t *);
typedef loom_status_t (*binary_fn)(loom_graph_t *, loom_value_t, loom_value_t,
                                   loom_value_t *);

static void tensor_dims(const loom_tensor_t *t, int64_t *dims) {
  for (int i = 0; i < loom_tensor_rank(t); i++) dims[i] = loom_tensor_dim(t, i);
}

static loom_value_t input_like(loom_graph_t *g, const char *name,
                               const loom_tensor_t *t) {
  int64_t dims[LOOM_MAX_RANK];
  loom_value_t v = {-1};
  tensor_dims(t, dims);
  CHECK_OK(loom_graph_input(g, name, loom_tensor_dtype(t), loom_tensor_rank(t), dims, &v));
  return v;
}

/* f(x) through a one-node graph. */
static loom_tensor_t *apply1(unary_fn f, loom_tensor_t *x) {
  loom_graph_t *g;
  loom_value_t y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(f(g, input_like(g, "x", x), &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *out = test_run1(g, 1, &x);
  loom_graph_destroy(g);
  return out;
}

/* f(a, b) through a one-node graph. */
static loom_tensor_t *apply2(binary_fn f, loom_tensor_t *a, loom_tensor_t *b) {
  loom_graph_t *g;
  loom_value_t y;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t va = input_like(g, "a", a), vb = input_like(g, "b", b);
  CHECK_OK(f(g, va, vb, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in[2] = {a, b};
  loom_tensor_t *out = test_run1(g, 2, in);
  loom_graph_destroy(g);
  return out;
}

static loom_tensor_t *apply_where(loom_tensor_t *c, loom_tensor_t *a,
                                  loom_tensor_t *b) {
  loom_graph_t *g;
  loom_value_t y;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t vc = input_like(g, "c", c), va = input_like(g, "a", a),
               vb = input_like(g, "b", b);
  CHECK_OK(loom_where(g, vc, va, vb, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in[3] = {c, a, b};
  loom_tensor_t *out = test_run1(g, 3, in);
  loom_graph_destroy(g);
  return out;
}

static loom_tensor_t *apply_cast(loom_tensor_t *x, loom_dtype_t to) {
  loom_graph_t *g;
  loom_value_t y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_cast(g, input_like(g, "x", x), to, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *out = test_run1(g, 1, &x);
  loom_graph_destroy(g);
  return out;
}

static bool same_bytes(const loom_tensor_t *a, const loom_tensor_t *b) {
  if (!a || !b || loom_tensor_dtype(a) != loom_tensor_dtype(b) ||
      loom_tensor_numel(a) != loom_tensor_numel(b))
    return false;
  size_t n = (size_t)loom_tensor_numel(a) * loom_dtype_size(loom_tensor_dtype(a));
  return memcmp(loom_tensor_data(a), loom_tensor_data(b), n) == 0;
}

/* Says which case failed, after the harness's own line. */
static void report(int before, const char *op, loom_dtype_t dt) {
  if (test_failures != before)
    fprintf(stderr, "  (in %s on %s)\n", op, loom_dtype_name(dt));
}

/* Ops with an attribute, with the attribute fixed. */
static loom_status_t leaky_relu_01(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_leaky_relu(g, x, 0.1, y);
}
static loom_status_t leaky_relu_default(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_leaky_relu(g, x, 0.01, y);
}
static loom_status_t elu_1(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_elu(g, x, 1.0, y);
}
static loom_status_t elu_half(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_elu(g, x, 0.5, y);
}
static loom_status_t clamp_m1_2(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_clamp(g, x, -1, 2, y);
}
static loom_status_t clamp_open_low(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_clamp(g, x, -INFINITY, 2.5, y);
}
static loom_status_t clamp_crossed(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  return loom_clamp(g, x, 3, 1, y); /* min(max(x, 3), 1) = 1 */
}

/* ---- Unary -------------------------------------------------------------- */

typedef struct unary_case {
  const char *name;
  unary_fn f;
  uint32_t dtypes;
  bool bool_result;
  int n;
  double x[8], want[8];
} unary_case_t;

static const unary_case_t unary_cases[] = {
    {"neg", loom_neg, NUMERIC, false, 4, {0, 5, -3, 1}, {0, -5, 3, -1}},
    {"abs", loom_abs, NUMERIC, false, 4, {0, 5, -3, -1}, {0, 5, 3, 1}},
    {"abs", loom_abs, FLOATS, false, 3, {-0.5, -INFINITY, NAN}, {0.5, INFINITY, NAN}},
    {"exp", loom_exp, FLOATS, false, 5, {0, 0.5, 1, -2, -INFINITY},
     {1, 1.6487212707001282, 2.718281828459045, 0.1353352832366127, 0}},
    {"log", loom_log, FLOATS, false, 5, {1, 0.5, 2, 0, -1},
     {0, -0.6931471805599453, 0.6931471805599453, -INFINITY, NAN}},
    /* ln 2, ln 1/2, ln 4, the series x - x^2/2 + x^3/3 - ..., the pole and
     * beyond it. */
    {"log1p", loom_log1p, FLOATS, false, 7, {0, 1, -0.5, 3, 0.0078125, -1, -2},
     {0, 0.6931471805599453, -0.6931471805599453, 1.3862943611198906,
      0.007782140442054949, -INFINITY, NAN}},
    /* 2^-30 - 2^-61 + ...: 1 + x rounds to 1 in f32, so log(1 + x) would be 0. */
    {"log1p", loom_log1p, BIT(LOOM_F32) | BIT(LOOM_F64), false, 2, {9.313225746154785e-10, -0.75},
     {9.313225741817976e-10, -1.3862943611198906}},
    /* e - 1, 1/e - 1, the limits at +-inf. */
    {"expm1", loom_expm1, FLOATS, false, 6, {0, 1, -1, 0.5, -INFINITY, INFINITY},
     {0, 1.718281828459045, -0.6321205588285577, 0.6487212707001282, -1, INFINITY}},
    /* 2^-30 + 2^-61 + ...: e^x rounds to 1 in f32, so e^x - 1 would be 0. */
    {"expm1", loom_expm1, BIT(LOOM_F32) | BIT(LOOM_F64), false, 2, {9.313225746154785e-10, -3},
     {9.313225750491594e-10, -0.950212931632136}},
    {"sqrt", loom_sqrt, FLOATS, false, 5, {0, 0.25, 4, 2, -1},
     {0, 0.5, 2, 1.4142135623730951, NAN}},
    {"rsqrt", loom_rsqrt, FLOATS, false, 4, {0.25, 4, 2, 0},
     {2, 0.5, 0.7071067811865475, INFINITY}},
    {"reciprocal", loom_reciprocal, FLOATS, false, 4, {0.5, -4, 3, 0},
     {2, -0.25, 0.3333333333333333, INFINITY}},
    {"tanh", loom_tanh, FLOATS, false, 5, {0, 0.5, 1, -2, 1000},
     {0, 0.46211715726000974, 0.7615941559557649, -0.9640275800758169, 1}},
    {"sigmoid", loom_sigmoid, FLOATS, false, 5, {0, 1, -2, 1000, -1000},
     {0.5, 0.7310585786300049, 0.11920292202211755, 1, 0}},
    {"relu", loom_relu, NUMERIC, false, 4, {0, 5, -3, 2}, {0, 5, 0, 2}},
    {"relu", loom_relu, FLOATS, false, 3, {NAN, -0.5, INFINITY}, {NAN, 0, INFINITY}},
    {"leaky_relu", leaky_relu_01, FLOATS, false, 4, {-2, 0, 3, NAN}, {-0.2, 0, 3, NAN}},
    {"leaky_relu", leaky_relu_default, FLOATS, false, 2, {-2, 1.5}, {-0.02, 1.5}},
    {"elu", elu_1, FLOATS, false, 3, {-1, 0, 2}, {-0.6321205588285577, 0, 2}},
    {"elu", elu_half, FLOATS, false, 2, {-2, -1000}, {-0.43233235838169365, -0.5}},
    {"gelu", loom_gelu, FLOATS, false, 4, {0, 1, -1, 2},
     {0, 0.8413447460685429, -0.15865525393145707, 1.9544997361036416}},
    {"gelu_tanh", loom_gelu_tanh, FLOATS, false, 4, {0, 1, -1, 2},
     {0, 0.8411919906082768, -0.15880800939172324, 1.954597694087775}},
    {"silu", loom_silu, FLOATS, false, 5, {0, 1, -2, -1000, 1000},
     {0, 0.7310585786300049, -0.2384058440442351, 0, 1000}},
    {"softplus", loom_softplus, FLOATS, false, 5, {0, 1, -2, 1000, -1000},
     {0.6931471805599453, 1.3132616875182228, 0.1269280110429725, 1000, 0}},
    {"sin", loom_sin, FLOATS, false, 4, {0, 0.5, 1, -2},
     {0, 0.479425538604203, 0.8414709848078965, -0.9092974268256817}},
    {"cos", loom_cos, FLOATS, false, 4, {0, 0.5, 1, -2},
     {1, 0.8775825618903728, 0.5403023058681398, -0.4161468365471424}},
    {"tan", loom_tan, FLOATS, false, 4, {0, 0.5, 1, -2},
     {0, 0.5463024898437905, 1.5574077246549023, 2.185039863261519}},
    {"asin", loom_asin, FLOATS, false, 5, {0, 0.5, -0.9, 1, 2},
     {0, 0.5235987755982989, -1.1197695149986342, 1.5707963267948966, NAN}},
    {"acos", loom_acos, FLOATS, false, 4, {0, 0.5, -0.9, 1},
     {1.5707963267948966, 1.0471975511965979, 2.6905658417935308, 0}},
    {"atan", loom_atan, FLOATS, false, 5, {0, 0.5, -2, 1000, -INFINITY},
     {0, 0.4636476090008061, -1.1071487177940904, 1.5697963271282298, -1.5707963267948966}},
    {"sinh", loom_sinh, FLOATS, false, 4, {0, 0.5, 1, -2},
     {0, 0.5210953054937474, 1.1752011936438014, -3.626860407847019}},
    {"cosh", loom_cosh, FLOATS, false, 4, {0, 0.5, 1, -2},
     {1, 1.1276259652063807, 1.5430806348152437, 3.7621956910836314}},
    {"asinh", loom_asinh, FLOATS, false, 4, {0, 0.5, -2, 1000},
     {0, 0.48121182505960347, -1.4436354751788103, 7.600902709541988}},
    {"acosh", loom_acosh, FLOATS, false, 5, {1, 1.5, 2, 1000, 0.5},
     {0, 0.9624236501192069, 1.3169578969248166, 7.600902209541989, NAN}},
    {"atanh", loom_atanh, FLOATS, false, 5, {0, 0.5, -0.9, 0.25, 1},
     {0, 0.5493061443340548, -1.4722194895832204, 0.25541281188299536, INFINITY}},
    {"erf", loom_erf, FLOATS, false, 5, {0, 0.5, 1, -2, INFINITY},
     {0, 0.5204998778130465, 0.8427007929497149, -0.9953222650189527, 1}},
    {"floor", loom_floor, FLOATS, false, 6, {-2.5, -0.5, 0.5, 1.5, 3, NAN},
     {-3, -1, 0, 1, 3, NAN}},
    {"ceil", loom_ceil, FLOATS, false, 6, {-2.5, -0.5, 0.5, 1.5, 3, -INFINITY},
     {-2, 0, 1, 2, 3, -INFINITY}},
    /* Half to even. */
    {"round", loom_round, FLOATS, false, 8, {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.25, 1.75},
     {0, 2, 2, 0, -2, -2, 0, 2}},
    {"sign", loom_sign, NUMERIC, false, 4, {0, 5, -3, 100}, {0, 1, -1, 1}},
    {"sign", loom_sign, FLOATS, false, 3, {NAN, -0.25, INFINITY}, {NAN, -1, 1}},
    {"not", loom_not, ALL, true, 4, {0, 1, -3, 2}, {1, 0, 0, 0}},
    {"not", loom_not, FLOATS, true, 2, {NAN, -0.0}, {0, 1}},
    {"isnan", loom_isnan, FLOATS, true, 4, {NAN, 0, INFINITY, -1}, {1, 0, 0, 0}},
    {"identity", loom_identity, NUMERIC, false, 4, {0, 5, -3, 100}, {0, 5, -3, 100}},
    {"identity", loom_identity, ALL, false, 4, {0, 1, 1, 0}, {0, 1, 1, 0}},
    {"clamp", clamp_m1_2, NUMERIC, false, 5, {-3, -1, 0, 2, 5}, {-1, -1, 0, 2, 2}},
    /* Integers round the bound 2.5 inward to 2. */
    {"clamp", clamp_open_low, INTS, false, 3, {-100, 2, 3}, {-100, 2, 2}},
    {"clamp", clamp_open_low, FLOATS, false, 3, {-100, 2, 3}, {-100, 2, 2.5}},
    {"clamp", clamp_crossed, NUMERIC, false, 3, {-5, 2, 5}, {1, 1, 1}},
    {"clamp", clamp_m1_2, FLOATS, false, 1, {NAN}, {NAN}},
};

static void unary_ops_every_dtype(void) {
  for (int k = 0; k < COUNT(unary_cases); k++) {
    const unary_case_t *c = &unary_cases[k];
    for (int d = 0; d < COUNT(dtypes); d++) {
      loom_dtype_t dt = dtypes[d];
      if (!(c->dtypes & BIT(dt))) continue;
      int before = test_failures;
      int64_t shape[] = {c->n};
      loom_tensor_t *x = test_tensor(dt, 1, shape, c->x);
      loom_tensor_t *y = apply1(c->f, x);
      CHECK(loom_tensor_dtype(y) == (c->bool_result ? LOOM_BOOL : dt));
      CHECK_TENSOR(y, c->want, c->n, 0, test_rtol(dt, 2));
      report(before, c->name, dt);
      loom_tensor_destroy(x);
      loom_tensor_destroy(y);
    }
  }
}

/* Two's-complement wrap at the minimum of each integer dtype. */
static void unary_integer_edges(void) {
  struct { loom_dtype_t dt; double min; } cases[] = {
      {LOOM_I8, -128}, {LOOM_I32, -2147483648.0}};
  for (int k = 0; k < COUNT(cases); k++) {
    int64_t shape[] = {1};
    loom_tensor_t *x = test_tensor(cases[k].dt, 1, shape, &cases[k].min);
    loom_tensor_t *n = apply1(loom_neg, x), *a = apply1(loom_abs, x);
    CHECK_TENSOR(n, &cases[k].min, 1, 0, 0);
    CHECK_TENSOR(a, &cases[k].min, 1, 0, 0);
    loom_tensor_destroy(x);
    loom_tensor_destroy(n);
    loom_tensor_destroy(a);
  }
  /* A clamp bound outside i8 saturates instead of wrapping. */
  int64_t shape[] = {2};
  double xv[] = {-5, 100}, want[] = {127, 127};
  loom_tensor_t *x = test_tensor(LOOM_I8, 1, shape, xv);
  loom_graph_t *g;
  loom_value_t y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_clamp(g, input_like(g, "x", x), 200, 300, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *out = test_run1(g, 1, &x);
  CHECK_TENSOR(out, want, 2, 0, 0);
  loom_tensor_destroy(out);
  loom_tensor_destroy(x);
  loom_graph_destroy(g);
  /* int64 extremes stay exact. */
  int64_t big[] = {INT64_MAX, INT64_MIN, 9007199254740993LL};
  loom_tensor_t *t;
  CHECK_OK(loom_tensor_from_data(LOOM_I64, 1, (int64_t[]){3}, big, sizeof big, &t));
  loom_tensor_t *r = apply1(loom_identity, t), *s = apply1(loom_relu, t);
  CHECK(same_bytes(r, t));
  const int64_t *rs = loom_tensor_data(s);
  CHECK(rs[0] == INT64_MAX && rs[1] == 0 && rs[2] == 9007199254740993LL);
  loom_tensor_destroy(t);
  loom_tensor_destroy(r);
  loom_tensor_destroy(s);
}

/* ---- Binary ------------------------------------------------------------- */

typedef struct binary_case {
  const char *name;
  binary_fn f;
  uint32_t dtypes;
  bool bool_result;
  int n;
  double a[8], b[8], want[8];
} binary_case_t;

static const binary_case_t binary_cases[] = {
    {"add", loom_add, NUMERIC, false, 4, {1, -2, 3, 0}, {2, 5, -3, 0}, {3, 3, 0, 0}},
    {"sub", loom_sub, NUMERIC, false, 4, {1, -2, 3, 0}, {2, 5, -3, 0}, {-1, -7, 6, 0}},
    {"mul", loom_mul, NUMERIC, false, 4, {1, -2, 3, 0}, {2, 5, -3, 7}, {2, -10, -9, 0}},
    {"div", loom_div, FLOATS, false, 6, {1, -3, 7, 1, -1, 0}, {2, 2, -2, 0, 0, 0},
     {0.5, -1.5, -3.5, INFINITY, -INFINITY, NAN}},
    /* Integers: floor division. */
    {"div", loom_div, INTS, false, 6, {7, -7, 7, -7, 6, 0}, {2, 2, -2, -2, 3, 5},
     {3, -4, -4, 3, 2, 0}},
    {"pow", loom_pow, FLOATS, false, 5, {2, 4, 2, -2, 0}, {3, 0.5, -1, 2, 0},
     {8, 2, 0.5, 4, 1}},
    {"pow", loom_pow, INTS, false, 6, {2, 3, -2, 1, -1, 5}, {3, 0, 3, -2, -3, -1},
     {8, 1, -8, 1, -1, 0}},
    {"maximum", loom_maximum, NUMERIC, false, 4, {1, -2, 3, 0}, {2, -5, 3, -1}, {2, -2, 3, 0}},
    {"maximum", loom_maximum, FLOATS, false, 3, {NAN, 1, -INFINITY}, {1, NAN, 2},
     {NAN, NAN, 2}},
    {"minimum", loom_minimum, NUMERIC, false, 4, {1, -2, 3, 0}, {2, -5, 3, -1}, {1, -5, 3, -1}},
    {"minimum", loom_minimum, FLOATS, false, 3, {NAN, 1, INFINITY}, {1, NAN, 2},
     {NAN, NAN, 2}},
    /* Python %: the sign of b. */
    {"mod", loom_mod, NUMERIC, false, 6, {7, -7, 7, -7, 6, 0}, {3, 3, -3, -3, 3, 4},
     {1, 2, -2, -1, 0, 0}},
    {"mod", loom_mod, FLOATS, false, 4, {5.5, -5.5, 5.5, 1}, {2, 2, -2, 0},
     {1.5, 0.5, -0.5, NAN}},
    {"eq", loom_eq, ALL, true, 4, {1, 0, 1, 0}, {1, 1, 0, 0}, {1, 0, 0, 1}},
    {"eq", loom_eq, NUMERIC, true, 3, {2, -3, 7}, {2, 3, 7}, {1, 0, 1}},
    {"eq", loom_eq, FLOATS, true, 2, {NAN, 0}, {NAN, -0.0}, {0, 1}},
    {"ne", loom_ne, ALL, true, 4, {1, 0, 1, 0}, {1, 1, 0, 0}, {0, 1, 1, 0}},
    {"ne", loom_ne, FLOATS, true, 2, {NAN, 1}, {NAN, 1}, {1, 0}},
    {"lt", loom_lt, NUMERIC, true, 4, {1, 2, 3, -4}, {2, 2, 2, -3}, {1, 0, 0, 1}},
    {"le", loom_le, NUMERIC, true, 4, {1, 2, 3, -4}, {2, 2, 2, -3}, {1, 1, 0, 1}},
    {"gt", loom_gt, NUMERIC, true, 4, {1, 2, 3, -4}, {2, 2, 2, -3}, {0, 0, 1, 0}},
    {"ge", loom_ge, NUMERIC, true, 4, {1, 2, 3, -4}, {2, 2, 2, -3}, {0, 1, 1, 0}},
    {"lt", loom_lt, FLOATS, true, 2, {NAN, 1}, {1, NAN}, {0, 0}},
    {"ge", loom_ge, FLOATS, true, 2, {NAN, 1}, {1, NAN}, {0, 0}},
    {"and", loom_and, ALL, true, 4, {1, 0, 1, 0}, {1, 1, 0, 0}, {1, 0, 0, 0}},
    {"or", loom_or, ALL, true, 4, {1, 0, 1, 0}, {1, 1, 0, 0}, {1, 1, 1, 0}},
    {"xor", loom_xor, ALL, true, 4, {1, 0, 1, 0}, {1, 1, 0, 0}, {0, 1, 1, 0}},
    /* Any non-zero is true. */
    {"and", loom_and, NUMERIC, true, 2, {2, -3}, {-5, 0}, {1, 0}},
    {"xor", loom_xor, NUMERIC, true, 2, {2, -3}, {-5, 0}, {0, 1}},
    {"or", loom_or, FLOATS, true, 2, {NAN, 0}, {0, 0.5}, {1, 1}},
};

static void binary_ops_every_dtype(void) {
  for (int k = 0; k < COUNT(binary_cases); k++) {
    const binary_case_t *c = &binary_cases[k];
    for (int d = 0; d < COUNT(dtypes); d++) {
      loom_dtype_t dt = dtypes[d];
      if (!(c->dtypes & BIT(dt))) continue;
      int before = test_failures;
      int64_t shape[] = {c->n};
      loom_tensor_t *a = test_tensor(dt, 1, shape, c->a);
      loom_tensor_t *b = test_tensor(dt, 1, shape, c->b);
      loom_tensor_t *y = apply2(c->f, a, b);
      CHECK(loom_tensor_dtype(y) == (c->bool_result ? LOOM_BOOL : dt));
      CHECK_TENSOR(y, c->want, c->n, 0, test_rtol(dt, 2));
      report(before, c->name, dt);
      loom_tensor_destroy(a);
      loom_tensor_destroy(b);
      loom_tensor_destroy(y);
    }
  }
}

/* Integer arithmetic wraps like the dtype. */
static void binary_integer_wrap(void) {
  int64_t shape[] = {2};
  double a8[] = {100, -100}, b8[] = {100, 100}, sum8[] = {-56, 0}, prod8[] = {16, -16};
  loom_tensor_t *a = test_tensor(LOOM_I8, 1, shape, a8);
  loom_tensor_t *b = test_tensor(LOOM_I8, 1, shape, b8);
  loom_tensor_t *s = apply2(loom_add, a, b), *m = apply2(loom_mul, a, b);
  CHECK_TENSOR(s, sum8, 2, 0, 0);
  CHECK_TENSOR(m, prod8, 2, 0, 0); /* 10000 = 39*256 + 16 */
  loom_tensor_destroy(a);
  loom_tensor_destroy(b);
  loom_tensor_destroy(s);
  loom_tensor_destroy(m);
  int64_t av[] = {INT64_MIN, INT64_MAX}, bv[] = {-1, 1};
  loom_tensor_t *ta, *tb;
  CHECK_OK(loom_tensor_from_data(LOOM_I64, 1, shape, av, sizeof av, &ta));
  CHECK_OK(loom_tensor_from_data(LOOM_I64, 1, shape, bv, sizeof bv, &tb));
  loom_tensor_t *q = apply2(loom_div, ta, tb), *r = apply2(loom_add, ta, tb);
  const int64_t *qd = loom_tensor_data(q), *rd = loom_tensor_data(r);
  CHECK(qd[0] == INT64_MIN && qd[1] == INT64_MAX);
  CHECK(rd[0] == INT64_MAX && rd[1] == INT64_MIN);
  loom_tensor_destroy(ta);
  loom_tensor_destroy(tb);
  loom_tensor_destroy(q);
  loom_tensor_destroy(r);
}

static void where_every_dtype(void) {
  int64_t shape[] = {4};
  double cv[] = {1, 0, 0, 1}, av[] = {1, 0, 5, -3}, bv[] = {0, 1, -2, 7};
  loom_tensor_t *c = test_tensor(LOOM_BOOL, 1, shape, cv);
  for (int d = 0; d < COUNT(dtypes); d++) {
    loom_dtype_t dt = dtypes[d];
    int before = test_failures;
    loom_tensor_t *a = test_tensor(dt, 1, shape, av);
    loom_tensor_t *b = test_tensor(dt, 1, shape, bv);
    loom_tensor_t *y = apply_where(c, a, b);
    double want[4];
    for (int i = 0; i < 4; i++) want[i] = test_get(cv[i] ? a : b, i);
    CHECK(loom_tensor_dtype(y) == dt);
    CHECK_TENSOR(y, want, 4, 0, 0);
    report(before, "where", dt);
    loom_tensor_destroy(a);
    loom_tensor_destroy(b);
    loom_tensor_destroy(y);
  }
  loom_tensor_destroy(c);
}

/* ---- Broadcasting ------------------------------------------------------- */

static void broadcast_column_with_row(void) {
  int64_t s31[] = {3, 1}, s14[] = {1, 4};
  double av[] = {10, 20, 30}, bv[] = {1, 2, 3, 4};
  for (int d = 0; d < 7; d++) {
    loom_tensor_t *a = test_tensor(dtypes[d], 2, s31, av);
    loom_tensor_t *b = test_tensor(dtypes[d], 2, s14, bv);
    loom_tensor_t *y = apply2(loom_sub, a, b), *lt = apply2(loom_gt, b, a);
    double want[12], wlt[12];
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 4; j++) {
        want[i * 4 + j] = av[i] - bv[j];
        wlt[i * 4 + j] = 0;
      }
    CHECK(loom_tensor_dim(y, 0) == 3 && loom_tensor_dim(y, 1) == 4);
    CHECK_TENSOR(y, want, 12, 0, test_rtol(dtypes[d], 2));
    CHECK_TENSOR(lt, wlt, 12, 0, 0);
    loom_tensor_destroy(a);
    loom_tensor_destroy(b);
    loom_tensor_destroy(y);
    loom_tensor_destroy(lt);
  }
}

static void broadcast_scalar_and_ranks(void) {
  /* A rank-0 scalar with a (2, 3) tensor, on either side. */
  double s = 2, xv[] = {1, 2, 3, 4, 5, 6};
  int64_t s23[] = {2, 3};
  loom_tensor_t *sc = test_tensor(LOOM_F32, 0, NULL, &s);
  loom_tensor_t *x = test_tensor(LOOM_F32, 2, s23, xv);
  loom_tensor_t *y1 = apply2(loom_pow, x, sc), *y2 = apply2(loom_div, sc, x);
  double w1[6], w2[6];
  for (int i = 0; i < 6; i++) {
    w1[i] = xv[i] * xv[i];
    w2[i] = 2 / xv[i];
  }
  CHECK(loom_tensor_rank(y1) == 2 && loom_tensor_rank(y2) == 2);
  CHECK_TENSOR(y1, w1, 6, 0, test_rtol(LOOM_F32, 1));
  CHECK_TENSOR(y2, w2, 6, 0, test_rtol(LOOM_F32, 1));
  loom_tensor_t *ss = apply2(loom_mul, sc, sc);
  double four = 4;
  CHECK(loom_tensor_rank(ss) == 0);
  CHECK_TENSOR(ss, &four, 1, 0, 0);
  /* Rank 1 (4) with rank 3 (2, 3, 4). */
  int64_t s4[] = {4}, s234[] = {2, 3, 4};
  double v4[] = {1, 2, 3, 4}, v24[24], w24[24];
  for (int i = 0; i < 24; i++) {
    v24[i] = i;
    w24[i] = i * 100 + v4[i % 4];
  }
  loom_tensor_t *r1 = test_tensor(LOOM_I32, 1, s4, v4);
  loom_tensor_t *r3 = test_tensor(LOOM_I32, 3, s234, v24);
  loom_tensor_t *h = test_tensor(LOOM_I32, 0, NULL, (double[]){100});
  loom_tensor_t *r3h = apply2(loom_mul, r3, h);
  loom_tensor_t *y3 = apply2(loom_add, r1, r3h);
  CHECK(loom_tensor_rank(y3) == 3 && loom_tensor_dim(y3, 0) == 2 &&
        loom_tensor_dim(y3, 2) == 4);
  CHECK_TENSOR(y3, w24, 24, 0, 0);
  loom_tensor_t *list[] = {sc, x, y1, y2, ss, r1, r3, h, r3h, y3};
  for (int i = 0; i < COUNT(list); i++) loom_tensor_destroy(list[i]);
}

static void broadcast_where(void) {
  int64_t s31[] = {3, 1}, s14[] = {1, 4};
  double cv[] = {1, 0, 1}, av[] = {1, 2, 3, 4}, bv = -1;
  loom_tensor_t *c = test_tensor(LOOM_BOOL, 2, s31, cv);
  loom_tensor_t *a = test_tensor(LOOM_I64, 2, s14, av);
  loom_tensor_t *b = test_tensor(LOOM_I64, 0, NULL, &bv);
  loom_tensor_t *y = apply_where(c, a, b);
  double want[12];
  for (int i = 0; i < 12; i++) want[i] = cv[i / 4] ? av[i % 4] : -1;
  CHECK(loom_tensor_dim(y, 0) == 3 && loom_tensor_dim(y, 1) == 4);
  CHECK_TENSOR(y, want, 12, 0, 0);
  loom_tensor_destroy(c);
  loom_tensor_destroy(a);
  loom_tensor_destroy(b);
  loom_tensor_destroy(y);
}

/* (n, 1) + (1, 4) with n bound when the graph runs. */
static void broadcast_symbolic(void) {
  loom_graph_t *g;
  loom_value_t a, b, y;
  loom_dim_t n;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_dim_t da[] = {n, 1}, db[] = {1, 4};
  CHECK_OK(loom_graph_input(g, "a", LOOM_F64, 2, da, &a));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F64, 2, db, &b));
  CHECK_OK(loom_add(g, a, b, &y));
  loom_dim_t dy[2];
  CHECK_OK(loom_value_type(g, y, NULL, NULL, dy));
  CHECK(dy[0] == n && dy[1] == 4);
  CHECK_OK(loom_graph_output(g, y));
  int64_t s21[] = {2, 1}, s14[] = {1, 4};
  double av[] = {10, 20}, bv[] = {1, 2, 3, 4};
  double want[] = {11, 12, 13, 14, 21, 22, 23, 24};
  loom_tensor_t *in[2] = {test_tensor(LOOM_F64, 2, s21, av),
                          test_tensor(LOOM_F64, 2, s14, bv)};
  loom_tensor_t *out = test_run1(g, 2, in);
  CHECK_TENSOR(out, want, 8, 0, 0);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

/* ---- Non-contiguous inputs ---------------------------------------------- */

static void strided_view_matches_copy(void) {
  /* The transpose (3, 2) of a row-major (2, 3) buffer. */
  float buf[] = {1, 2, 3, 4, 5, 6};
  int64_t shape[] = {3, 2}, strides[] = {1, 3};
  double t[] = {1, 4, 2, 5, 3, 6};
  loom_tensor_t *view, *copy = test_tensor(LOOM_F32, 2, shape, t);
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, shape, strides, buf, &view));
  loom_tensor_t *e1 = apply1(loom_exp, view), *e2 = apply1(loom_exp, copy);
  loom_tensor_t *s1 = apply2(loom_sub, view, copy), *s2 = apply2(loom_mod, view, copy);
  loom_tensor_t *d1 = apply2(loom_sub, copy, view);
  CHECK(same_bytes(e1, e2));
  double want[6], zero[6] = {0};
  for (int i = 0; i < 6; i++) want[i] = exp(t[i]);
  CHECK_TENSOR(e1, want, 6, 0, test_rtol(LOOM_F32, 1));
  CHECK_TENSOR(s1, zero, 6, 0, 0);
  CHECK_TENSOR(s2, zero, 6, 0, 0);
  CHECK_TENSOR(d1, zero, 6, 0, 0);
  /* And a strided view that skips every other element. */
  int32_t ibuf[] = {1, -1, 2, -1, 3, -1, 4, -1};
  int64_t s4[] = {4}, st2[] = {2};
  loom_tensor_t *skip;
  CHECK_OK(loom_tensor_wrap(LOOM_I32, 1, s4, st2, ibuf, &skip));
  loom_tensor_t *n = apply1(loom_neg, skip);
  double wn[] = {-1, -2, -3, -4};
  CHECK_TENSOR(n, wn, 4, 0, 0);
  loom_tensor_t *list[] = {view, copy, e1, e2, s1, s2, d1, skip, n};
  for (int i = 0; i < COUNT(list); i++) loom_tensor_destroy(list[i]);
}

static void broadcast_view_stride_zero(void) {
  /* A (3, 4) view of one row of 4 (stride 0 along dim 0). */
  double row[] = {1, -2, 3, -4};
  int64_t shape[] = {3, 4}, strides[] = {0, 1};
  loom_tensor_t *view;
  CHECK_OK(loom_tensor_wrap(LOOM_F64, 2, shape, strides, row, &view));
  double mv[12], want[12], wrelu[12];
  for (int i = 0; i < 12; i++) {
    mv[i] = i;
    want[i] = i * row[i % 4];
    wrelu[i] = row[i % 4] > 0 ? row[i % 4] : 0;
  }
  loom_tensor_t *m = test_tensor(LOOM_F64, 2, shape, mv);
  loom_tensor_t *y = apply2(loom_mul, view, m), *r = apply1(loom_relu, view);
  CHECK_TENSOR(y, want, 12, 0, 0);
  CHECK_TENSOR(r, wrelu, 12, 0, 0);
  loom_tensor_t *list[] = {view, m, y, r};
  for (int i = 0; i < COUNT(list); i++) loom_tensor_destroy(list[i]);
}

/* ---- cast --------------------------------------------------------------- */

static void cast_every_pair(void) {
  /* Representable in every dtype (bool sees v != 0). */
  double v[] = {0, 1, 2, 7, -3, 100};
  int64_t shape[] = {6};
  for (int s = 0; s < COUNT(dtypes); s++)
    for (int d = 0; d < COUNT(dtypes); d++) {
      loom_dtype_t from = dtypes[s], to = dtypes[d];
      int before = test_failures;
      loom_tensor_t *x = test_tensor(from, 1, shape, v);
      loom_tensor_t *y = apply_cast(x, to);
      double want[6];
      for (int i = 0; i < 6; i++) {
        double src = from == LOOM_BOOL ? v[i] != 0 : v[i];
        want[i] = to == LOOM_BOOL ? src != 0 : src;
      }
      CHECK(loom_tensor_dtype(y) == to);
      CHECK_TENSOR(y, want, 6, 0, 0);
      if (test_failures != before)
        fprintf(stderr, "  (cast %s -> %s)\n", loom_dtype_name(from), loom_dtype_name(to));
      loom_tensor_destroy(x);
      loom_tensor_destroy(y);
    }
}

/* Casts the f64 values v to `to` and checks want. */
static void check_cast_f64(const double *v, int n, loom_dtype_t to,
                           const double *want) {
  int64_t shape[] = {n};
  loom_tensor_t *x = test_tensor(LOOM_F64, 1, shape, v);
  loom_tensor_t *y = apply_cast(x, to);
  int before = test_failures;
  CHECK_TENSOR(y, want, n, 0, 0);
  report(before, "cast from f64", to);
  loom_tensor_destroy(x);
  loom_tensor_destroy(y);
}

static void cast_float_to_int(void) {
  /* Truncation toward zero, from every float dtype. */
  double v[] = {2.75, -2.75, 0.5, -0.5, 100.25};
  double want[] = {2, -2, 0, 0, 100};
  int64_t shape[] = {5};
  loom_dtype_t floats[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16};
  loom_dtype_t ints[] = {LOOM_I8, LOOM_I32, LOOM_I64};
  for (int f = 0; f < 4; f++)
    for (int i = 0; i < 3; i++) {
      loom_tensor_t *x = test_tensor(floats[f], 1, shape, v);
      loom_tensor_t *y = apply_cast(x, ints[i]);
      CHECK_TENSOR(y, want, 5, 0, 0);
      loom_tensor_destroy(x);
      loom_tensor_destroy(y);
    }
  /* NaN gives 0; out of range saturates. */
  double sv[] = {NAN, INFINITY, -INFINITY, 1e10, -1e10, 300, -300};
  double w8[] = {0, 127, -128, 127, -128, 127, -128};
  double w32[] = {0, 2147483647.0, -2147483648.0, 2147483647.0, -2147483648.0, 300, -300};
  check_cast_f64(sv, 7, LOOM_I8, w8);
  check_cast_f64(sv, 7, LOOM_I32, w32);
  loom_tensor_t *x = test_tensor(LOOM_F32, 1, (int64_t[]){3}, (double[]){NAN, 1e30, -1e30});
  loom_tensor_t *y = apply_cast(x, LOOM_I64);
  const int64_t *yd = loom_tensor_data(y);
  CHECK(yd[0] == 0 && yd[1] == INT64_MAX && yd[2] == INT64_MIN);
  loom_tensor_destroy(x);
  loom_tensor_destroy(y);
}

static void cast_int_to_int_wraps(void) {
  int64_t v[] = {300, -129, ((int64_t)1 << 40) + 5};
  loom_tensor_t *x;
  CHECK_OK(loom_tensor_from_data(LOOM_I64, 1, (int64_t[]){3}, v, sizeof v, &x));
  loom_tensor_t *y8 = apply_cast(x, LOOM_I8), *y32 = apply_cast(x, LOOM_I32);
  double w8[] = {44, 127, 5}, w32[] = {300, -129, 5};
  CHECK_TENSOR(y8, w8, 3, 0, 0);
  CHECK_TENSOR(y32, w32, 3, 0, 0);
  /* int64 -> f64 rounds to nearest even past 2^53. */
  int64_t big[] = {9007199254740993LL};
  loom_tensor_t *b;
  CHECK_OK(loom_tensor_from_data(LOOM_I64, 1, (int64_t[]){1}, big, sizeof big, &b));
  loom_tensor_t *bf = apply_cast(b, LOOM_F64);
  double wb = 9007199254740992.0;
  CHECK_TENSOR(bf, &wb, 1, 0, 0);
  loom_tensor_t *list[] = {x, y8, y32, b, bf};
  for (int i = 0; i < COUNT(list); i++) loom_tensor_destroy(list[i]);
}

static void cast_half_rounding(void) {
  /* Ties go to the even neighbour. f16 has 10 fraction bits, bf16 7. */
  double h[] = {1 + 0x1p-11, 1 + 3 * 0x1p-11, 65519, 65520, 0x1p-25, 3 * 0x1p-25,
                -(1 + 0x1p-11), 1e-9};
  double wh[] = {1, 1 + 0x1p-9, 65504, INFINITY, 0, 0x1p-23, -1, 0};
  check_cast_f64(h, 8, LOOM_F16, wh);
  double b[] = {1 + 0x1p-8, 1 + 3 * 0x1p-8, 1.0 / 3, 3.5e38, -(1 + 0x1p-8), 0x1p-133};
  double wb[] = {1, 1 + 0x1p-6, 0.333984375, INFINITY, -1, 0x1p-133};
  check_cast_f64(b, 6, LOOM_BF16, wb);
  /* The same ties from f32. */
  loom_tensor_t *x = test_tensor(LOOM_F32, 1, (int64_t[]){2}, (double[]){1 + 0x1p-8, 1 + 3 * 0x1p-8});
  loom_tensor_t *y = apply_cast(x, LOOM_BF16);
  double wy[] = {1, 1 + 0x1p-6};
  CHECK_TENSOR(y, wy, 2, 0, 0);
  loom_tensor_t *z = apply_cast(y, LOOM_F16); /* exact: bf16 1+2^-6 fits f16 */
  CHECK_TENSOR(z, wy, 2, 0, 0);
  loom_tensor_destroy(x);
  loom_tensor_destroy(y);
  loom_tensor_destroy(z);
  /* NaN and infinities survive every float dtype. */
  double s[] = {NAN, INFINITY, -INFINITY};
  check_cast_f64(s, 3, LOOM_F16, s);
  check_cast_f64(s, 3, LOOM_BF16, s);
  check_cast_f64(s, 3, LOOM_F32, s);
}

static void cast_bool(void) {
  double v[] = {0, -0.0, 0.5, NAN, -INFINITY, 1e-30};
  double want[] = {0, 0, 1, 1, 1, 1};
  check_cast_f64(v, 6, LOOM_BOOL, want);
  double bv[] = {1, 0};
  loom_tensor_t *b = test_tensor(LOOM_BOOL, 1, (int64_t[]){2}, bv);
  for (int d = 0; d < COUNT(dtypes); d++) {
    loom_tensor_t *y = apply_cast(b, dtypes[d]);
    CHECK_TENSOR(y, bv, 2, 0, 0);
    loom_tensor_destroy(y);
  }
  loom_tensor_destroy(b);
}

/* ---- Errors ------------------------------------------------------------- */

static void error_paths(void) {
  loom_graph_t *g;
  loom_value_t a23, a24, f64, i32, bl, y;
  CHECK_OK(loom_graph_create(&g));
  int64_t s23[] = {2, 3}, s24[] = {2, 4};
  CHECK_OK(loom_graph_input(g, "a", LOOM_F32, 2, s23, &a23));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F32, 2, s24, &a24));
  CHECK_OK(loom_graph_input(g, "c", LOOM_F64, 2, s23, &f64));
  CHECK_OK(loom_graph_input(g, "i", LOOM_I32, 2, s23, &i32));
  CHECK_OK(loom_graph_input(g, "m", LOOM_BOOL, 2, s23, &bl));
  CHECK_ERR(loom_add(g, a23, a24, &y), LOOM_ERR_SHAPE, "f32[2, 3]");
  CHECK_ERR(loom_add(g, a23, a24, &y), LOOM_ERR_SHAPE, "f32[2, 4]");
  CHECK_ERR(loom_eq(g, a24, a23, &y), LOOM_ERR_SHAPE, "broadcast");
  CHECK_ERR(loom_exp(g, i32, &y), LOOM_ERR_DTYPE, "i32");
  CHECK_ERR(loom_isnan(g, i32, &y), LOOM_ERR_DTYPE, "isnan");
  CHECK_ERR(loom_neg(g, bl, &y), LOOM_ERR_DTYPE, "bool");
  CHECK_ERR(loom_lt(g, bl, bl, &y), LOOM_ERR_DTYPE, "bool");
  CHECK_ERR(loom_add(g, a23, f64, &y), LOOM_ERR_DTYPE, "f64");
  CHECK_ERR(loom_and(g, bl, i32, &y), LOOM_ERR_DTYPE, "cast");
  CHECK_ERR(loom_where(g, a23, a23, a23, &y), LOOM_ERR_DTYPE, "accepts bool");
  CHECK_ERR(loom_where(g, bl, a23, f64, &y), LOOM_ERR_DTYPE, "f64");
  CHECK_ERR(loom_where(g, bl, a23, a24, &y), LOOM_ERR_SHAPE, "where");
  CHECK_ERR(loom_cast(g, a23, (loom_dtype_t)99, &y), LOOM_ERR_DTYPE, "99");
  CHECK_ERR(loom_cast(g, a23, (loom_dtype_t)-1, &y), LOOM_ERR_DTYPE, "cast");
  CHECK_ERR(loom_add(NULL, a23, a23, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_relu(g, a23, NULL), LOOM_ERR_INVALID, "null");
  loom_value_t stranger = {1000};
  CHECK_ERR(loom_mul(g, a23, stranger, &y), LOOM_ERR_INVALID, "mul");
  CHECK(loom_graph_num_nodes(g) == 0);
  loom_graph_destroy(g);
}

static void integer_division_by_zero(void) {
  binary_fn ops[] = {loom_div, loom_mod};
  loom_dtype_t ints[] = {LOOM_I8, LOOM_I32, LOOM_I64};
  for (int k = 0; k < 2; k++)
    for (int d = 0; d < 3; d++) {
      loom_graph_t *g;
      loom_value_t a, b, y;
      int64_t shape[] = {2};
      CHECK_OK(loom_graph_create(&g));
      CHECK_OK(loom_graph_input(g, "a", ints[d], 1, shape, &a));
      CHECK_OK(loom_graph_input(g, "b", ints[d], 1, shape, &b));
      CHECK_OK(ops[k](g, a, b, &y));
      CHECK_OK(loom_graph_output(g, y));
      loom_tensor_t *in[2] = {test_tensor(ints[d], 1, shape, (double[]){4, 5}),
                              test_tensor(ints[d], 1, shape, (double[]){2, 0})};
      loom_tensor_t *out = (loom_tensor_t *)1;
      CHECK_ERR(loom_interpret(g, 2, in, 1, &out), LOOM_ERR_VALUE, "division by zero");
      CHECK(out == NULL);
      loom_tensor_destroy(in[0]);
      loom_tensor_destroy(in[1]);
      loom_graph_destroy(g);
    }
}

int main(void) {
  TEST_RUN(unary_ops_every_dtype);
  TEST_RUN(unary_integer_edges);
  TEST_RUN(binary_ops_every_dtype);
  TEST_RUN(binary_integer_wrap);
  TEST_RUN(where_every_dtype);
  TEST_RUN(broadcast_column_with_row);
  TEST_RUN(broadcast_scalar_and_ranks);
  TEST_RUN(broadcast_where);
  TEST_RUN(broadcast_symbolic);
  TEST_RUN(strided_view_matches_copy);
  TEST_RUN(broadcast_view_stride_zero);
  TEST_RUN(cast_every_pair);
  TEST_RUN(cast_float_to_int);
  TEST_RUN(cast_int_to_int_wraps);
  TEST_RUN(cast_half_rounding);
  TEST_RUN(cast_bool);
  TEST_RUN(error_paths);
  TEST_RUN(integer_division_by_zero);
  return test_summary();
}
