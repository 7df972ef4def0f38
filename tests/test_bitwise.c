/* The bitwise ops (bitwise_and, _or, _xor, _not) and the shifts
 * (bitshift_left, _right): values computed by hand in every dtype they
 * take, negative numbers among them; bool as one bit; broadcasting; shifts
 * at 0, just under the bit width, at it and past it, and by negative
 * amounts (0 for a left shift, the sign for a right one, as PyTorch 2);
 * a fused chain whose every step wraps to i8; float inputs refused with an
 * error naming the op; no gradient through them. Every graph runs through
 * test_run1, so the compiled path must agree with the interpreter. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "loom/op_table.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef loom_status_t (*unary_fn)(loom_graph_t *, loom_value_t, loom_value_t *);
typedef loom_status_t (*binary_fn)(loom_graph_t *, loom_value_t, loom_value_t,
                                   loom_value_t *);

static const loom_dtype_t ints[] = {LOOM_I8, LOOM_I32, LOOM_I64};

static loom_value_t input_like(loom_graph_t *g, const char *name, const loom_tensor_t *t) {
  int64_t dims[LOOM_MAX_RANK];
  for (int i = 0; i < loom_tensor_rank(t); i++) dims[i] = loom_tensor_dim(t, i);
  loom_value_t v = {-1};
  CHECK_OK(loom_graph_input(g, name, loom_tensor_dtype(t), loom_tensor_rank(t), dims, &v));
  return v;
}

/* f(a, b) through a one-node graph, interpreted and compiled. */
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

static void report(int before, const char *op, loom_dtype_t dt) {
  if (test_failures != before) fprintf(stderr, "  (in %s on %s)\n", op, loom_dtype_name(dt));
}

/* ---- and, or, xor, not ------------------------------------------------------ */

typedef struct binary_case {
  const char *name;
  binary_fn f;
  double want[6];
} binary_case_t;

/* Two's complement: -7 is ...11111001, -6 ...11111010, -128 ...10000000,
 * so the results are the same in i8, i32 and i64. */
static const double A[6] = {12, -7, 5, -1, 0, 127}, B[6] = {10, 3, -6, -128, 77, -2};
static const binary_case_t logic_cases[] = {
    {"bitwise_and", loom_bitwise_and, {8, 1, 0, -128, 0, 126}},
    {"bitwise_or", loom_bitwise_or, {14, -5, -1, -1, 77, -1}},
    {"bitwise_xor", loom_bitwise_xor, {6, -6, -1, 127, 77, -127}},
};

static void logic_ops_on_integers(void) {
  int64_t shape[] = {6};
  for (int d = 0; d < COUNT(ints); d++)
    for (int k = 0; k < COUNT(logic_cases); k++) {
      int before = test_failures;
      loom_tensor_t *a = test_tensor(ints[d], 1, shape, A), *b = test_tensor(ints[d], 1, shape, B);
      loom_tensor_t *y = apply2(logic_cases[k].f, a, b);
      CHECK(y && loom_tensor_dtype(y) == ints[d]);
      CHECK_TENSOR(y, logic_cases[k].want, 6, 0, 0);
      report(before, logic_cases[k].name, ints[d]);
      loom_tensor_destroy(a);
      loom_tensor_destroy(b);
      loom_tensor_destroy(y);
    }
}

static void not_on_integers(void) {
  int64_t shape[] = {5};
  double x[5] = {0, -1, 5, -128, 127}, want[5] = {-1, 0, -6, 127, -128};
  for (int d = 0; d < COUNT(ints); d++) {
    int before = test_failures;
    loom_tensor_t *t = test_tensor(ints[d], 1, shape, x);
    loom_tensor_t *y = apply1(loom_bitwise_not, t);
    CHECK(y && loom_tensor_dtype(y) == ints[d]);
    CHECK_TENSOR(y, want, 5, 0, 0);
    report(before, "bitwise_not", ints[d]);
    loom_tensor_destroy(t);
    loom_tensor_destroy(y);
  }
}

/* On bool the bitwise ops are the logical ones, with a bool result (not
 * is not ~1, which would read as true). */
static void bool_is_one_bit(void) {
  int64_t shape[] = {4};
  double a[4] = {0, 0, 1, 1}, b[4] = {0, 1, 0, 1};
  double w_and[4] = {0, 0, 0, 1}, w_or[4] = {0, 1, 1, 1}, w_xor[4] = {0, 1, 1, 0},
         w_not[4] = {1, 1, 0, 0};
  const double *want[3] = {w_and, w_or, w_xor};
  loom_tensor_t *ta = test_tensor(LOOM_BOOL, 1, shape, a), *tb = test_tensor(LOOM_BOOL, 1, shape, b);
  for (int k = 0; k < COUNT(logic_cases); k++) {
    int before = test_failures;
    loom_tensor_t *y = apply2(logic_cases[k].f, ta, tb);
    CHECK(y && loom_tensor_dtype(y) == LOOM_BOOL);
    CHECK_TENSOR(y, want[k], 4, 0, 0);
    report(before, logic_cases[k].name, LOOM_BOOL);
    loom_tensor_destroy(y);
  }
  loom_tensor_t *y = apply1(loom_bitwise_not, ta);
  CHECK(y && loom_tensor_dtype(y) == LOOM_BOOL);
  CHECK_TENSOR(y, w_not, 4, 0, 0);
  /* not twice is the identity: the bytes stay 0 and 1 */
  loom_tensor_t *z = apply1(loom_bitwise_not, y);
  CHECK_TENSOR(z, a, 4, 0, 0);
  CHECK(z && memcmp(loom_tensor_data(z), (uint8_t[]){0, 0, 1, 1}, 4) == 0);
  loom_tensor_destroy(y);
  loom_tensor_destroy(z);
  loom_tensor_destroy(ta);
  loom_tensor_destroy(tb);
}

/* The i64 extremes, compared as int64 (doubles cannot hold them). */
static void i64_extremes(void) {
  int64_t shape[] = {3};
  int64_t av[3] = {INT64_MIN, INT64_MAX, -1}, bv[3] = {-1, -1, INT64_MIN};
  loom_tensor_t *a, *b;
  CHECK_OK(loom_tensor_from_data(LOOM_I64, 1, shape, av, sizeof av, &a));
  CHECK_OK(loom_tensor_from_data(LOOM_I64, 1, shape, bv, sizeof bv, &b));
  loom_tensor_t *and = apply2(loom_bitwise_and, a, b), *xor = apply2(loom_bitwise_xor, a, b);
  loom_tensor_t *not = apply1(loom_bitwise_not, a);
  int64_t w_and[3] = {INT64_MIN, INT64_MAX, INT64_MIN}, w_xor[3] = {INT64_MAX, INT64_MIN, INT64_MAX};
  int64_t w_not[3] = {INT64_MAX, INT64_MIN, 0};
  CHECK(and && memcmp(loom_tensor_data(and), w_and, sizeof w_and) == 0);
  CHECK(xor && memcmp(loom_tensor_data(xor), w_xor, sizeof w_xor) == 0);
  CHECK(not && memcmp(loom_tensor_data(not), w_not, sizeof w_not) == 0);
  loom_tensor_destroy(and);
  loom_tensor_destroy(xor);
  loom_tensor_destroy(not);
  /* shifts of the extremes: 0x7f..f << 62 is 0xc0..0; the sign bit moves
   * out, or is copied */
  int64_t sv[3] = {1, 62, 63};
  loom_tensor_t *s;
  CHECK_OK(loom_tensor_from_data(LOOM_I64, 1, shape, sv, sizeof sv, &s));
  loom_tensor_t *l = apply2(loom_bitshift_left, a, s), *r = apply2(loom_bitshift_right, a, s);
  int64_t w_l[3] = {0, INT64_MIN / 2, INT64_MIN}, w_r[3] = {INT64_MIN / 2, 1, -1};
  CHECK(l && memcmp(loom_tensor_data(l), w_l, sizeof w_l) == 0);
  CHECK(r && memcmp(loom_tensor_data(r), w_r, sizeof w_r) == 0);
  loom_tensor_destroy(l);
  loom_tensor_destroy(r);
  loom_tensor_destroy(s);
  loom_tensor_destroy(a);
  loom_tensor_destroy(b);
}

/* ---- Shifts ---------------------------------------------------------------- */

/* x (1, 5) shifted by each amount of s (n, 1): row i of the result is x
 * shifted by s[i]. */
enum { MAX_SHIFTS = 10 };
typedef struct shift_table {
  loom_dtype_t dtype;
  int n;
  double s[MAX_SHIFTS];
  double left[MAX_SHIFTS][5], right[MAX_SHIFTS][5];
} shift_table_t;

static const double X[5] = {1, -1, 5, -128, 3};
#define OUT_L {0, 0, 0, 0, 0}       /* every bit shifted out */
#define OUT_R {0, -1, 0, -1, 0}     /* only copies of the sign bit */
#define SAME {1, -1, 5, -128, 3}    /* a shift by 0 */
#define MIN32 -2147483648.0
#define MIN64 -9223372036854775808.0

/* In-range rows agree with torch 1.13 (int8 << 7 of 5 is 640 wrapped to
 * -128); the others are PyTorch 2's definition. */
static const shift_table_t shift_tables[] = {
    {LOOM_I8, 8, {0, 1, 7, 8, 9, 127, -1, -128},
     {SAME, {2, -2, 10, 0, 6}, {-128, -128, -128, 0, -128}, OUT_L, OUT_L, OUT_L, OUT_L, OUT_L},
     {SAME, {0, -1, 2, -64, 1}, OUT_R, OUT_R, OUT_R, OUT_R, OUT_R, OUT_R}},
    {LOOM_I32, 8, {0, 1, 8, 31, 32, 33, 64, -1},
     {SAME, {2, -2, 10, -256, 6}, {256, -256, 1280, -32768, 768}, {MIN32, MIN32, MIN32, 0, MIN32},
      OUT_L, OUT_L, OUT_L, OUT_L},
     {SAME, {0, -1, 2, -64, 1}, OUT_R, OUT_R, OUT_R, OUT_R, OUT_R, OUT_R}},
    {LOOM_I64, 10, {0, 1, 31, 32, 63, 64, 65, 100, -1, MIN64},
     {SAME, {2, -2, 10, -256, 6},
      {2147483648.0, -2147483648.0, 10737418240.0, -274877906944.0, 6442450944.0},
      {4294967296.0, -4294967296.0, 21474836480.0, -549755813888.0, 12884901888.0},
      {MIN64, MIN64, MIN64, 0, MIN64}, OUT_L, OUT_L, OUT_L, OUT_L, OUT_L},
     {SAME, {0, -1, 2, -64, 1}, OUT_R, OUT_R, OUT_R, OUT_R, OUT_R, OUT_R, OUT_R, OUT_R}},
};

static void shift_check(const shift_table_t *t, bool left) {
  int64_t sx[2] = {1, 5}, ss[2] = {t->n, 1};
  loom_tensor_t *x = test_tensor(t->dtype, 2, sx, X), *s = test_tensor(t->dtype, 2, ss, t->s);
  loom_tensor_t *y = apply2(left ? loom_bitshift_left : loom_bitshift_right, x, s);
  CHECK(y && loom_tensor_dtype(y) == t->dtype && loom_tensor_dim(y, 0) == t->n &&
        loom_tensor_dim(y, 1) == 5);
  double want[MAX_SHIFTS * 5];
  for (int i = 0; i < t->n; i++)
    memcpy(want + 5 * i, left ? t->left[i] : t->right[i], sizeof(double) * 5);
  CHECK_TENSOR(y, want, 5 * t->n, 0, 0);
  loom_tensor_destroy(x);
  loom_tensor_destroy(s);
  loom_tensor_destroy(y);
}

static void shifts_by_every_amount(void) {
  for (int k = 0; k < COUNT(shift_tables); k++) {
    int before = test_failures;
    shift_check(&shift_tables[k], true);
    report(before, "bitshift_left", shift_tables[k].dtype);
    before = test_failures;
    shift_check(&shift_tables[k], false);
    report(before, "bitshift_right", shift_tables[k].dtype);
  }
}

/* ---- Broadcasting ----------------------------------------------------------- */

static void broadcasting(void) {
  /* a column by a row: i32 (3, 1) << (1, 4) and >> */
  int64_t s31[2] = {3, 1}, s14[2] = {1, 4};
  double a[3] = {1, -8, 100}, s[4] = {0, 1, 2, 31};
  double w_l[12] = {1, 2, 4, MIN32, -8, -16, -32, 0, 100, 200, 400, 0};
  double w_r[12] = {1, 0, 0, 0, -8, -4, -2, -1, 100, 50, 25, 0};
  loom_tensor_t *ta = test_tensor(LOOM_I32, 2, s31, a), *ts = test_tensor(LOOM_I32, 2, s14, s);
  loom_tensor_t *l = apply2(loom_bitshift_left, ta, ts), *r = apply2(loom_bitshift_right, ta, ts);
  CHECK(l && loom_tensor_rank(l) == 2 && loom_tensor_dim(l, 0) == 3 && loom_tensor_dim(l, 1) == 4);
  CHECK_TENSOR(l, w_l, 12, 0, 0);
  CHECK_TENSOR(r, w_r, 12, 0, 0);
  loom_tensor_destroy(ta);
  loom_tensor_destroy(ts);
  loom_tensor_destroy(l);
  loom_tensor_destroy(r);
  /* a rank-0 mask against a matrix, either side */
  int64_t s23[2] = {2, 3};
  double x[6] = {-1, 16, 31, -16, 255, 7}, m = 15, w_and[6] = {15, 0, 15, 0, 15, 7};
  double w_or[6] = {-1, 31, 31, -1, 255, 15};
  loom_tensor_t *tx = test_tensor(LOOM_I64, 2, s23, x), *tm = test_tensor(LOOM_I64, 0, NULL, &m);
  loom_tensor_t *y = apply2(loom_bitwise_and, tx, tm), *z = apply2(loom_bitwise_or, tm, tx);
  CHECK_TENSOR(y, w_and, 6, 0, 0);
  CHECK_TENSOR(z, w_or, 6, 0, 0);
  loom_tensor_destroy(tx);
  loom_tensor_destroy(tm);
  loom_tensor_destroy(y);
  loom_tensor_destroy(z);
}

/* ((a << 4) ^ b) >> 2 on i8, fused into one kernel when compiled: each
 * step wraps to i8 (9 << 4 is 144, -112 in i8; were it kept as 144, the
 * result would be 36, not -28). */
static void fused_chain_wraps_each_step(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[1] = {3};
  double av[3] = {7, -3, 9}, bv[3] = {1, -1, 1}, four = 4, two = 2, want[3] = {28, 11, -28};
  loom_tensor_t *in[2] = {test_tensor(LOOM_I8, 1, shape, av), test_tensor(LOOM_I8, 1, shape, bv)};
  loom_value_t a = input_like(g, "a", in[0]), b = input_like(g, "b", in[1]), t, y;
  CHECK_OK(loom_bitshift_left(g, a, test_constant(g, LOOM_I8, 0, NULL, &four), &t));
  CHECK_OK(loom_bitwise_xor(g, t, b, &t));
  CHECK_OK(loom_bitshift_right(g, t, test_constant(g, LOOM_I8, 0, NULL, &two), &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *out = test_run1(g, 2, in);
  CHECK_TENSOR(out, want, 3, 0, 0);
  loom_tensor_destroy(out);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(g);
}

/* ---- Errors, gradients and the op table --------------------------------------- */

static const char *const names[] = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
                                    "bitshift_left", "bitshift_right"};
static const binary_fn binaries[] = {loom_bitwise_and, loom_bitwise_or, loom_bitwise_xor, NULL,
                                     loom_bitshift_left, loom_bitshift_right};

static loom_status_t build(int k, loom_graph_t *g, loom_value_t a, loom_value_t b,
                           loom_value_t *y) {
  return binaries[k] ? binaries[k](g, a, b, y) : loom_bitwise_not(g, a, y);
}

/* A float input is refused at build time, the message naming the op and
 * the dtype; so is bool by the shifts, and a mix of integer dtypes. */
static void floats_refused(void) {
  static const loom_dtype_t floats[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16};
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[1] = {2}, other[1] = {3};
  loom_value_t x, i32, i64, bl, y, bad;
  CHECK_OK(loom_graph_input(g, "i32", LOOM_I32, 1, shape, &i32));
  CHECK_OK(loom_graph_input(g, "i64", LOOM_I64, 1, shape, &i64));
  CHECK_OK(loom_graph_input(g, "b", LOOM_BOOL, 1, shape, &bl));
  CHECK_OK(loom_graph_input(g, "bad", LOOM_I32, 1, other, &bad));
  char text[96];
  for (int f = 0; f < COUNT(floats); f++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", f);
    CHECK_OK(loom_graph_input(g, name, floats[f], 1, shape, &x));
    for (int k = 0; k < COUNT(names); k++) {
      snprintf(text, sizeof text, "%s: input 0 has dtype %s, which it does not accept", names[k],
               loom_dtype_name(floats[f]));
      CHECK_ERR(build(k, g, x, x, &y), LOOM_ERR_DTYPE, text);
    }
  }
  for (int k = 4; k < 6; k++) {
    snprintf(text, sizeof text, "%s: input 0 has dtype bool", names[k]);
    CHECK_ERR(build(k, g, bl, bl, &y), LOOM_ERR_DTYPE, text);
  }
  for (int k = 0; k < COUNT(names); k++) {
    if (!binaries[k]) continue;
    snprintf(text, sizeof text, "%s: input 0 is i32 and input 1 is i64; cast one", names[k]);
    CHECK_ERR(build(k, g, i32, i64, &y), LOOM_ERR_DTYPE, text);
    CHECK_ERR(build(k, g, i32, bad, &y), LOOM_ERR_SHAPE, names[k]);
  }
  CHECK(loom_graph_num_nodes(g) == 0);
  loom_graph_destroy(g);
}

/* The op table says what the ops are: no gradient flows through them (as
 * through not and argmax), the CPU back end generates code for them, and
 * which dtypes they take. */
static void table_facts(void) {
  const uint32_t integral = (1u << LOOM_I8) | (1u << LOOM_I32) | (1u << LOOM_I64);
  for (int k = 0; k < COUNT(names); k++) {
    int op = -1, gen = 0;
    CHECK_OK(loom_op_find(names[k], &op));
    loom_op_info_t info = LOOM_OP_INFO_INIT;
    CHECK_OK(loom_op_get_info(op, &info));
    CHECK(info.not_differentiable && !info.has_gradient && info.has_reference);
    CHECK(!strcmp(info.fusion_class, "elementwise"));
    CHECK(info.dtypes == (k < 4 ? integral | (1u << LOOM_BOOL) : integral));
    CHECK_OK(loom_op_generated(op, "cpu", &gen));
    CHECK(gen == 1);
  }
}

/* Gradients: an integer result is no loss (as for any integer op), and a
 * float path through the ops carries no gradient, as through argmax: the
 * gradient of sum(x + cast(~cast(x, i32))) is that of sum(x), ones. */
static void no_gradient_through(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[1] = {3};
  loom_value_t x, xi, n, nf, s, loss, il, grad;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, shape, &x));
  CHECK_OK(loom_cast(g, x, LOOM_I32, &xi));
  CHECK_OK(loom_bitwise_not(g, xi, &n));
  CHECK_OK(loom_sum(g, n, 0, NULL, 0, &il));
  CHECK_ERR(loom_grad(g, il, 1, &x, &grad), LOOM_ERR_DTYPE, "float dtype");
  CHECK_OK(loom_bitshift_left(g, n, xi, &n));
  CHECK_OK(loom_cast(g, n, LOOM_F32, &nf));
  CHECK_OK(loom_add(g, x, nf, &s));
  CHECK_OK(loom_sum(g, s, 0, NULL, 0, &loss));
  CHECK_OK(loom_grad(g, loss, 1, &x, &grad));
  CHECK_OK(loom_graph_output(g, grad));
  double xv[3] = {1, 2, -3}, ones[3] = {1, 1, 1};
  loom_tensor_t *tx = test_tensor(LOOM_F32, 1, shape, xv);
  loom_tensor_t *out = test_run1(g, 1, &tx);
  CHECK_TENSOR(out, ones, 3, 0, 0);
  loom_tensor_destroy(out);
  loom_tensor_destroy(tx);
  loom_graph_destroy(g);
}

/* Built by name (as bindings and the ONNX importer may) equals the
 * builder's node. */
static void built_by_name(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[1] = {4};
  double av[4] = {6, -2, 0, 100}, bv[4] = {3, 1, 5, 2}, want[4] = {48, -4, 0, 400};
  loom_tensor_t *in[2] = {test_tensor(LOOM_I32, 1, shape, av), test_tensor(LOOM_I32, 1, shape, bv)};
  loom_value_t a = input_like(g, "a", in[0]), b = input_like(g, "b", in[1]), y;
  loom_value_t ab[2] = {a, b};
  CHECK_OK(loom_graph_add_op(g, "bitshift_left", 2, ab, 0, NULL, 1, &y, NULL));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *out = test_run1(g, 2, in);
  CHECK_TENSOR(out, want, 4, 0, 0);
  loom_tensor_destroy(out);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(logic_ops_on_integers);
  TEST_RUN(not_on_integers);
  TEST_RUN(bool_is_one_bit);
  TEST_RUN(i64_extremes);
  TEST_RUN(shifts_by_every_amount);
  TEST_RUN(broadcasting);
  TEST_RUN(fused_chain_wraps_each_step);
  TEST_RUN(floats_refused);
  TEST_RUN(table_facts);
  TEST_RUN(no_gradient_through);
  TEST_RUN(built_by_name);
  return test_summary();
}
