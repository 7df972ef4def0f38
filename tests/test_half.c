/* Half precision (f16, bf16) through the compiler against the interpreter.
 *
 * The interpreter's reference kernels compute each op in double and round
 * once, when they store the op's result in its dtype; compiled code must
 * give the same results: every op rounds once, however its code expands it
 * (softmax's max, sub, exp, sum, div; gelu's erfc and products), and a
 * fused chain of ops rounds at each op's output as the interpreter does.
 *
 * Every unary elementwise op of the op table runs on all 65,536 bit
 * patterns of each dtype (one graph, one compiled module per dtype), then
 * a few fused chains on them, then the reductions and normalizations of
 * the table on random values. Results must agree to within an ulp or two
 * (OP_ULP, CHAIN_ULP), NaN and infinities exactly, and most elements
 * bit for bit (RARELY). LOOM_TEST_VERBOSE=1 prints how many elements of
 * each output differ. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/ir.h"

#define PATTERNS 65536
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const loom_dtype_t halves[] = {LOOM_F16, LOOM_BF16};

/* ---- Inputs ------------------------------------------------------------------ */

/* Every bit pattern of a 16-bit float dtype, in order. */
static loom_tensor_t *all_patterns(loom_dtype_t d) {
  loom_tensor_t *t = NULL;
  CHECK_OK(loom_tensor_create(d, 1, (int64_t[]){PATTERNS}, &t));
  if (!t) return NULL;
  uint16_t *p = loom_tensor_data(t);
  for (int i = 0; i < PATTERNS; i++) p[i] = (uint16_t)i;
  return t;
}

static loom_value_t input(loom_graph_t *g, const char *name, loom_dtype_t d, int rank,
                          const int64_t *shape) {
  loom_value_t v = {-1};
  CHECK_OK(loom_graph_input(g, name, d, rank, shape, &v));
  return v;
}

/* ---- Comparing ------------------------------------------------------------------- */

/* A float's bits as an integer that orders like the float (-0 just below
 * +0), so that the distance of two is their distance in ulps. */
static int64_t ordered(const loom_tensor_t *t, int64_t i) {
  const void *p = loom_tensor_data(t);
  loom_dtype_t d = loom_tensor_dtype(t);
  int64_t bits, sign;
  if (d == LOOM_F32) {
    uint32_t u;
    memcpy(&u, (const char *)p + 4 * i, 4);
    bits = u & 0x7fffffff;
    sign = u >> 31;
  } else if (d == LOOM_F64) {
    uint64_t u;
    memcpy(&u, (const char *)p + 8 * i, 8);
    bits = (int64_t)(u & 0x7fffffffffffffffull);
    sign = (int64_t)(u >> 63);
  } else {
    uint16_t u = ((const uint16_t *)p)[i];
    bits = u & 0x7fff;
    sign = u >> 15;
  }
  return sign ? -bits - 1 : bits;
}

typedef struct diff {
  int64_t n, differ; /* elements compared; those not bit-equal */
  int64_t max_ulp, worst; /* the largest distance in ulps, and where */
  int64_t bad;       /* NaN or infinity against another value, or integers unequal */
  int64_t first_bad; /* its index, or -1 */
} diff_t;

/* got against want, element by element; NaNs of any payload are equal,
 * -0 is an ulp from +0. */
static diff_t compare(const loom_tensor_t *got, const loom_tensor_t *want) {
  diff_t r = {.n = loom_tensor_numel(want), .first_bad = -1};
  bool fl = dtype_is_float(loom_tensor_dtype(want));
  for (int64_t i = 0; i < r.n; i++) {
    double a = test_get(got, i), b = test_get(want, i);
    int64_t ulp;
    if (isnan(a) || isnan(b)) ulp = isnan(a) && isnan(b) ? 0 : -1;
    else if (!fl || isinf(a) || isinf(b)) ulp = a == b ? 0 : -1;
    else ulp = llabs(ordered(got, i) - ordered(want, i));
    if (ulp < 0) {
      if (r.first_bad < 0) r.first_bad = i;
      r.bad++;
      r.differ++;
      continue;
    }
    r.differ += ulp != 0;
    if (ulp > r.max_ulp) r.max_ulp = ulp, r.worst = i;
  }
  return r;
}

/* The tolerances: single ops within an ulp (f32 evaluation of exp, erf or
 * tanh may fall on the other side of a rounding boundary than double);
 * fused chains within two (such an ulp, carried by one more op); at most
 * one element in 64 not bit-equal, which a wrong rounding mode (about
 * half) or rounding between the steps of one op would exceed. */
#define OP_ULP 1
#define CHAIN_ULP 2
#define RARELY 64

/* Checks one output: no NaN, infinity or integer disagreeing, at most
 * max_ulp apart, and at most one element in `rarely` (rounded up) not
 * bit-equal. */
static void check_output(const char *what, const loom_tensor_t *input, const loom_tensor_t *got,
                         const loom_tensor_t *want, int64_t max_ulp, int64_t rarely) {
  diff_t r = compare(got, want);
  bool ok = r.bad == 0 && r.max_ulp <= max_ulp && r.differ <= (r.n + rarely - 1) / rarely;
  test_checks++;
  if (getenv("LOOM_TEST_VERBOSE"))
    printf("  %-28s %-5s %6lld of %lld differ, max %lld ulp\n", what,
           loom_dtype_name(loom_tensor_dtype(want)), (long long)r.differ, (long long)r.n,
           (long long)r.max_ulp);
  if (ok) return;
  int64_t i = r.first_bad >= 0 ? r.first_bad : r.worst;
  char at[160] = "";
  if (r.differ && input)
    snprintf(at, sizeof at, "; at element %lld (x = %.6g) compiled %.6g, interpreter %.6g",
             (long long)i, test_get(input, i), test_get(got, i), test_get(want, i));
  else if (r.differ)
    snprintf(at, sizeof at, "; at element %lld compiled %.6g, interpreter %.6g", (long long)i,
             test_get(got, i), test_get(want, i));
  test_fail(__FILE__, __LINE__, "%s (%s): %lld of %lld differ, max %lld ulp, %lld NaN, "
            "infinity or integer mismatches%s",
            what, loom_dtype_name(loom_tensor_dtype(want)), (long long)r.differ, (long long)r.n,
            (long long)r.max_ulp, (long long)r.bad, at);
}

/* ---- Running ----------------------------------------------------------------------- */

/* The graph's outputs from the interpreter (want) and from compiled code
 * (got); false after a failure, which is recorded. The executable must
 * run generated code, not the interpreter (ops without a codegen rule,
 * such as argmax or cumsum, run their reference kernels and agree
 * trivially). */
static bool run_both(loom_graph_t *g, int n_in, loom_tensor_t *const *in, int n_out,
                     loom_tensor_t **want, loom_tensor_t **got) {
  for (int i = 0; i < n_out; i++) want[i] = got[i] = NULL;
  loom_status_t s = loom_interpret(g, n_in, in, n_out, want);
  CHECK_OK(s);
  if (s != LOOM_OK) return false;
  loom_executable_t *e = NULL;
  CHECK_OK(s = loom_compile(g, NULL, &e));
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  if (s == LOOM_OK) CHECK_OK(s = loom_executable_info(e, &info));
  CHECK(s == LOOM_OK && !info.interpreted && info.n_generated > 0);
  for (int i = 0; i < n_out && s == LOOM_OK; i++) CHECK_OK(s = loom_executable_new_output(e, i, &got[i]));
  if (s == LOOM_OK) CHECK_OK(s = loom_executable_run(e, n_in, in, n_out, got));
  loom_executable_destroy(e);
  return s == LOOM_OK;
}

static void destroy_all(loom_tensor_t **t, int n) {
  for (int i = 0; i < n; i++) loom_tensor_destroy(t[i]);
}

/* ---- Unary ops of the op table ----------------------------------------------------- */

/* Attribute i of op's schema: its name, kind (its first letter) and
 * whether it is optional; false past the last. */
static bool schema_attr(ir_op_t op, int i, char *name, size_t size, char *kind, bool *optional) {
  const ir_schema_t *schema = ir_op_schema(op);
  if (i >= schema->n) return false;
  snprintf(name, size, "%s", schema->a[i].name);
  *kind = ir_attr_kind_name(schema->a[i].kind)[0];
  *optional = schema->a[i].optional;
  return true;
}

#define MAX_OUTS 64

typedef struct sweep {
  loom_graph_t *g;
  loom_value_t x;
  int n;
  char what[MAX_OUTS][48];
  loom_value_t out[MAX_OUTS];
  int64_t max_ulp[MAX_OUTS]; /* its tolerance */
} sweep_t;

/* y, an output of the graph named `what`, within max_ulp. */
static void add_value(sweep_t *s, const char *what, loom_value_t y, int64_t max_ulp) {
  if (s->n == MAX_OUTS) {
    test_fail(__FILE__, __LINE__, "more than %d outputs: raise MAX_OUTS", MAX_OUTS);
    return;
  }
  snprintf(s->what[s->n], sizeof s->what[0], "%s", what);
  s->max_ulp[s->n] = max_ulp;
  s->out[s->n++] = y;
  CHECK_OK(loom_graph_output(s->g, y));
}

/* op(x) with attributes a, an output within OP_ULP. */
static void add_output(sweep_t *s, ir_op_t op, const ir_attrs_t *a, const char *note) {
  int32_t y = -1;
  loom_status_t st = ir_add_node(s->g, op, 1, &s->x.id, a, &y, 1);
  if (st != LOOM_OK) {
    test_fail(__FILE__, __LINE__, "%s %s: %s", ir_ops[op].name, note, loom_last_error());
    return;
  }
  char what[48];
  snprintf(what, sizeof what, "%s%s", ir_ops[op].name, note);
  add_value(s, what, (loom_value_t){y}, OP_ULP);
}

/* The nodes testing op: with its default attributes, and with every
 * optional float attribute set; an op that needs a dtype, once per dtype.
 * An op needing some other attribute is a failure: this test must learn
 * to build it. */
static void add_op(sweep_t *s, ir_op_t op) {
  static const double values[] = {-0.75, 1.5, 0.25};
  ir_attrs_t set = {0};
  char name[32], kind;
  bool optional, needs_dtype = false;
  int n_set = 0;
  for (int i = 0; schema_attr(op, i, name, sizeof name, &kind, &optional); i++) {
    if (optional && kind == 'f' && n_set < COUNT(values)) ir_attrs_float(&set, name, values[n_set++]);
    else if (!optional && !strcmp(name, "dtype")) needs_dtype = true;
    else if (!optional)
      test_fail(__FILE__, __LINE__, "%s needs attribute %s: teach this test to set it",
                ir_ops[op].name, name);
  }
  if (needs_dtype) {
    for (int d = 0; d < LOOM_DTYPE_COUNT; d++) {
      ir_attrs_t a = {0};
      ir_attrs_int(&a, "dtype", d);
      char note[24];
      snprintf(note, sizeof note, " to %s", loom_dtype_name((loom_dtype_t)d));
      add_output(s, op, &a, note);
    }
    return;
  }
  add_output(s, op, NULL, "");
  if (n_set) add_output(s, op, &set, " (attributes set)");
}

static bool unary_elementwise(ir_op_t op, loom_dtype_t d) {
  const ir_op_info_t *o = &ir_ops[op];
  return o->fusion_class == IR_CLASS_EW && o->in_min == 1 && o->in_max == 1 && o->n_out == 1 &&
         (o->dtypes & DT_BIT(d)) && !(o->flags & (F_RANDOM | F_SIDE_EFFECT));
}

/* Every unary elementwise op on every bit pattern, in one graph. */
static void unary_ops(void) {
  for (int k = 0; k < COUNT(halves); k++) {
    loom_dtype_t d = halves[k];
    sweep_t s = {0};
    CHECK_OK(loom_graph_create(&s.g));
    s.x = input(s.g, "x", d, 1, (int64_t[]){PATTERNS});
    for (int op = 0; op < IR_OP_COUNT; op++)
      if (unary_elementwise((ir_op_t)op, d)) add_op(&s, (ir_op_t)op);
    CHECK(s.n >= 25); /* the table's unary ops were found */
    loom_tensor_t *x = all_patterns(d), *want[MAX_OUTS], *got[MAX_OUTS];
    if (run_both(s.g, 1, &x, s.n, want, got))
      for (int i = 0; i < s.n; i++) check_output(s.what[i], x, got[i], want[i], s.max_ulp[i], RARELY);
    destroy_all(want, s.n);
    destroy_all(got, s.n);
    loom_tensor_destroy(x);
    loom_graph_destroy(s.g);
  }
}

/* ---- Fused chains ------------------------------------------------------------------- */

static loom_value_t scalar(loom_graph_t *g, loom_dtype_t d, double v) {
  return test_constant(g, d, 0, NULL, &v);
}

typedef loom_status_t (*unary_fn)(loom_graph_t *, loom_value_t, loom_value_t *);
typedef loom_status_t (*binary_fn)(loom_graph_t *, loom_value_t, loom_value_t, loom_value_t *);

static loom_value_t un(loom_graph_t *g, unary_fn f, loom_value_t x) {
  loom_value_t y = {-1};
  CHECK_OK(f(g, x, &y));
  return y;
}

static loom_value_t bin(loom_graph_t *g, binary_fn f, loom_value_t a, loom_value_t b) {
  loom_value_t y = {-1};
  CHECK_OK(f(g, a, b, &y));
  return y;
}

static loom_value_t cast(loom_graph_t *g, loom_value_t x, loom_dtype_t d) {
  loom_value_t y = {-1};
  CHECK_OK(loom_cast(g, x, d, &y));
  return y;
}

typedef loom_value_t (*chain_fn)(loom_graph_t *g, loom_value_t x, loom_dtype_t d);

/* x sigmoid(x) + x */
static loom_value_t chain_swish_residual(loom_graph_t *g, loom_value_t x, loom_dtype_t d) {
  (void)d;
  return bin(g, loom_add, bin(g, loom_mul, x, un(g, loom_sigmoid, x)), x);
}

/* tanh(x / 2 + 1/4) x */
static loom_value_t chain_tanh(loom_graph_t *g, loom_value_t x, loom_dtype_t d) {
  loom_value_t h = bin(g, loom_mul, x, scalar(g, d, 0.5));
  return bin(g, loom_mul, un(g, loom_tanh, bin(g, loom_add, h, scalar(g, d, 0.25))), x);
}

/* x > 0 ? sqrt(x) : -3x, exact ops only */
static loom_value_t chain_where(loom_graph_t *g, loom_value_t x, loom_dtype_t d) {
  loom_value_t pos = bin(g, loom_gt, x, scalar(g, d, 0));
  loom_value_t neg = bin(g, loom_mul, un(g, loom_neg, x), scalar(g, d, 3));
  loom_value_t y = {-1};
  CHECK_OK(loom_where(g, pos, un(g, loom_sqrt, x), neg, &y));
  return y;
}

/* gelu(x / 2) + relu(x), a composite inside a chain */
static loom_value_t chain_gelu(loom_graph_t *g, loom_value_t x, loom_dtype_t d) {
  loom_value_t a = un(g, loom_gelu, bin(g, loom_mul, x, scalar(g, d, 0.5)));
  return bin(g, loom_add, a, un(g, loom_relu, x));
}

/* (f32(x) 3 - 1) back to x's dtype: the user's own upcast */
static loom_value_t chain_upcast(loom_graph_t *g, loom_value_t x, loom_dtype_t d) {
  loom_value_t w = bin(g, loom_mul, cast(g, x, LOOM_F32), scalar(g, LOOM_F32, 3));
  return cast(g, bin(g, loom_sub, w, scalar(g, LOOM_F32, 1)), d);
}

/* A few fused chains on every bit pattern, in one graph per dtype: each
 * op rounds to the dtype at its output, as in the interpreter (and in
 * PyTorch's eager mode). */
static void fused_chains(void) {
  static const struct {
    const char *name;
    chain_fn build;
  } chains[] = {{"x sigmoid(x) + x", chain_swish_residual},
                {"tanh(x/2 + 1/4) x", chain_tanh},
                {"x > 0 ? sqrt(x) : -3x", chain_where},
                {"gelu(x/2) + relu(x)", chain_gelu},
                {"f32(x) 3 - 1", chain_upcast}};
  for (int k = 0; k < COUNT(halves); k++) {
    loom_dtype_t d = halves[k];
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_value_t x = input(g, "x", d, 1, (int64_t[]){PATTERNS});
    for (int c = 0; c < COUNT(chains); c++) CHECK_OK(loom_graph_output(g, chains[c].build(g, x, d)));
    loom_tensor_t *in = all_patterns(d), *want[COUNT(chains)], *got[COUNT(chains)];
    if (run_both(g, 1, &in, COUNT(chains), want, got))
      for (int c = 0; c < COUNT(chains); c++)
        check_output(chains[c].name, in, got[c], want[c], CHAIN_ULP, RARELY);
    destroy_all(want, COUNT(chains));
    destroy_all(got, COUNT(chains));
    loom_tensor_destroy(in);
    loom_graph_destroy(g);
  }
}

/* ---- Reductions and normalizations ------------------------------------------------- */

static bool one_input_reduction(ir_op_t op, loom_dtype_t d) {
  const ir_op_info_t *o = &ir_ops[op];
  return o->fusion_class == IR_CLASS_REDUCE && o->in_min == 1 && o->n_out == 1 &&
         (o->dtypes & DT_BIT(d));
}

/* The nodes testing op on x: with its default attributes and, when it
 * takes axes or an axis, over the last one. A required axis is the last
 * one, a required kernel 3x3; another required attribute is a failure:
 * this test must learn to set it. */
static void add_reduction(sweep_t *s, ir_op_t op) {
  char name[32], kind;
  bool optional, axes = false;
  ir_attrs_t need = {0};
  for (int i = 0; schema_attr(op, i, name, sizeof name, &kind, &optional); i++) {
    axes |= optional && (!strcmp(name, "axes") || !strcmp(name, "axis"));
    if (optional) continue;
    if (!strcmp(name, "axis")) ir_attrs_int(&need, "axis", -1);
    else if (!strcmp(name, "kernel")) ir_attrs_ints(&need, "kernel", 2, (int64_t[]){3, 3});
    else test_fail(__FILE__, __LINE__, "%s needs attribute %s: teach this test to set it",
                   ir_ops[op].name, name);
  }
  add_output(s, op, &need, "");
  if (!axes) return;
  ir_attrs_t a = need;
  if (strstr(ir_ops[op].attrs, "axes:")) ir_attrs_ints(&a, "axes", 1, (int64_t[]){-1});
  else ir_attrs_int(&a, "axis", -1);
  add_output(s, op, &a, " (last axis)");
}

/* The user's own softmax over the last axis, from primitives: a reduction
 * group whose prologue and epilogue round at each op's output. */
static void add_user_softmax(sweep_t *s) {
  loom_graph_t *g = s->g;
  int64_t last = -1;
  loom_value_t m, e, sum, y;
  CHECK_OK(loom_max(g, s->x, 1, &last, 1, &m));
  CHECK_OK(loom_exp(g, bin(g, loom_sub, s->x, m), &e));
  CHECK_OK(loom_sum(g, e, 1, &last, 1, &sum));
  CHECK_OK(loom_div(g, e, sum, &y));
  add_value(s, "exp(x - max) / sum (user's)", y, CHAIN_ULP);
}

/* layer_norm with scale and bias, batch_norm for inference: the inputs
 * beyond x, as values of x's dtype. */
static void add_norms(sweep_t *s, loom_dtype_t d, const int64_t *shape) {
  loom_graph_t *g = s->g;
  loom_value_t w = input(g, "w", d, 1, &shape[3]), b = input(g, "b", d, 1, &shape[3]);
  loom_value_t c[4];
  for (int i = 0; i < 4; i++) c[i] = input(g, (const char *[]){"cs", "cb", "cm", "cv"}[i], d, 1, &shape[1]);
  loom_value_t y, m, v;
  CHECK_OK(loom_layer_norm(g, s->x, 1, w, 1, b, -1, 1e-5, &y));
  add_value(s, "layer_norm (scale, bias)", y, OP_ULP);
  CHECK_OK(loom_batch_norm(g, s->x, c[0], c[1], c[2], c[3], 1e-5, 0.1, 0, &y, &m, &v));
  add_value(s, "batch_norm (inference)", y, OP_ULP);
}

/* Every reduction and normalization that takes x alone, on random values
 * in [-4, 4] shaped (8, 8, 32, 32) (softmax, norms: over rows of 32), in
 * one graph per dtype. The compiler expands most of them into reductions
 * and elementwise steps, which compute in f32 and round once. */
static void reductions(void) {
  static const int64_t shape[] = {8, 8, 32, 32};
  for (int k = 0; k < COUNT(halves); k++) {
    loom_dtype_t d = halves[k];
    sweep_t s = {0};
    CHECK_OK(loom_graph_create(&s.g));
    s.x = input(s.g, "x", d, 4, shape);
    for (int op = 0; op < IR_OP_COUNT; op++)
      if (one_input_reduction((ir_op_t)op, d)) add_reduction(&s, (ir_op_t)op);
    add_norms(&s, d, shape);
    add_user_softmax(&s);
    CHECK(s.n >= 20);
    test_seed(15 + (uint64_t)k);
    loom_tensor_t *in[6] = {test_rand_tensor(d, 4, shape, -4, 4),
                            test_rand_tensor(d, 1, &shape[3], 0.5, 2),
                            test_rand_tensor(d, 1, &shape[3], -1, 1),
                            test_rand_tensor(d, 1, &shape[1], 0.5, 2),
                            test_rand_tensor(d, 1, &shape[1], -1, 1),
                            test_rand_tensor(d, 1, &shape[1], -1, 1)};
    loom_tensor_t *var = test_rand_tensor(d, 1, &shape[1], 0.25, 4);
    loom_tensor_t *all[7] = {in[0], in[1], in[2], in[3], in[4], in[5], var};
    loom_tensor_t *want[MAX_OUTS], *got[MAX_OUTS];
    if (run_both(s.g, 7, all, s.n, want, got))
      for (int i = 0; i < s.n; i++) check_output(s.what[i], NULL, got[i], want[i], s.max_ulp[i], RARELY);
    destroy_all(want, s.n);
    destroy_all(got, s.n);
    destroy_all(all, 7);
    loom_graph_destroy(s.g);
  }
}

int main(void) {
  TEST_RUN(unary_ops);
  TEST_RUN(fused_chains);
  TEST_RUN(reductions);
  return test_summary();
}
