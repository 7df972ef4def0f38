/* The CPU back end's eager kernels (src/backend/cpu/eager*.c), which the
 * fallback interpreter (rt_interpret) runs where nothing is compiled:
 * every graph here runs through rt_interpret with the CPU back end and
 * through loom_interpret (reference kernels only), and the two must agree:
 * bit for bit (the sign of zero too) for data movement, elementwise
 * arithmetic, the unary ops, comparisons, where, gathers, scatter_add,
 * sum and mean; within f32 rounding for matmul (the GEMM accumulates in
 * f32, the reference in double); within a few ulp for exp, tanh and
 * sigmoid, which compute in float as compiled code does (each ISA's
 * instance that the CPU runs is tested over float's range); within f32
 * rounding for the convolutions (generated code's kernels), bit for bit
 * for the pools. An index out of range must give the
 * reference kernel's error. Each case also checks that the eager kernels
 * ran its node (or left it to the reference kernel, where they have no
 * kernel for it), so that a kernel that stops running shows. Shapes
 * cover every broadcast layout the kernels tell apart, the batch layouts
 * of matmul, negative axes, odd sizes and empty tensors; values include
 * NaN, infinities, ties, and magnitudes spread so far that the order of
 * a sum shows in its result. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/eager.h"
#include "core/pool.h"
#include "harness.h"
#include "runtime/interp.h"

/* The threads rt_interpret lends its eager kernels and block runs in
 * the cases that set it (NULL: the calling thread). */
static core_pool_t *pool;

/* Nodes of each op that the eager kernels ran (rather than declined) in
 * the last run through counting_cpu. */
static _Atomic int eager_ran[IR_OP_COUNT]; /* block runs count from the pool's threads */

/* Eager calls made on a thread other than main's (a pool's). */
static pthread_t main_thread;
static _Atomic int off_main;

static bool counting_eager(ref_call_t *c, loom_status_t *status) {
  bool ran = be_find("cpu")->eager(c, status);
  if (ran) eager_ran[c->node->op]++;
  if (!pthread_equal(pthread_self(), main_thread)) off_main++;
  return ran;
}

/* The CPU back end with its eager kernels counted in eager_ran. */
static const be_backend_t *counting_cpu(void) {
  static be_backend_t b;
  b = *be_find("cpu");
  b.eager = counting_eager;
  for (int op = 0; op < IR_OP_COUNT; op++) atomic_store(&eager_ran[op], 0);
  return &b;
}

/* Runs g both ways on in and compares every output (atol and rtol 0:
 * bitwise, the sign of zero too; NaNs equal). */
static void agree_within(loom_graph_t *g, int n_in, loom_tensor_t *const *in, double atol,
                         double rtol) {
  int n_out = loom_graph_num_outputs(g);
  loom_tensor_t *want[4] = {0}, *got[4] = {0};
  CHECK_OK(loom_interpret(g, n_in, in, n_out, want));
  CHECK_OK(rt_interpret(g, n_in, in, n_out, got, counting_cpu(), pool));
  for (int k = 0; k < n_out; k++) {
    if (!want[k] || !got[k]) continue;
    CHECK(loom_tensor_dtype(got[k]) == loom_tensor_dtype(want[k]));
    CHECK(loom_tensor_rank(got[k]) == loom_tensor_rank(want[k]));
    for (int d = 0; d < loom_tensor_rank(want[k]); d++)
      CHECK(loom_tensor_dim(got[k], d) == loom_tensor_dim(want[k], d));
    int64_t n = loom_tensor_numel(want[k]);
    CHECK(loom_tensor_numel(got[k]) == n);
    for (int64_t i = 0; i < n; i++) {
      double a = test_get(got[k], i), b = test_get(want[k], i);
      if (atol == 0 && rtol == 0)
        CHECK((a == b && signbit(a) == signbit(b)) || (isnan(a) && isnan(b)));
      else CHECK_NEAR(a, b, atol, rtol);
    }
    loom_tensor_destroy(want[k]);
    loom_tensor_destroy(got[k]);
  }
}

/* Bitwise (rtol 0) or within rtol and 1e-5. */
static void agree(loom_graph_t *g, int n_in, loom_tensor_t *const *in, double rtol) {
  agree_within(g, n_in, in, rtol == 0 ? 0 : 1e-5, rtol);
}

/* The float math's bound against the reference's double results: 8 ulp
 * (exp's is 2, tanh's 4e-7 relative, sigmoid's a division more), and a
 * few subnormal steps where results underflow. */
#define MATH_RTOL 1e-6
#define MATH_ATOL 1e-44

/* Both runs of g on in fail, with one status and one message. */
static void agree_fails(loom_graph_t *g, int n_in, loom_tensor_t *const *in) {
  int n_out = loom_graph_num_outputs(g);
  loom_tensor_t *out[4] = {0};
  loom_status_t want = loom_interpret(g, n_in, in, n_out, out);
  char message[512];
  snprintf(message, sizeof message, "%s", loom_last_error());
  loom_status_t got = rt_interpret(g, n_in, in, n_out, out, counting_cpu(), pool);
  CHECK(want != LOOM_OK);
  CHECK(got == want);
  CHECK(strcmp(loom_last_error(), message) == 0);
}

typedef loom_status_t (*binary_fn)(loom_graph_t *, loom_value_t, loom_value_t, loom_value_t *);
typedef loom_status_t (*unary_fn)(loom_graph_t *, loom_value_t, loom_value_t *);

/* Whether the eager kernels ran g's last node in the last agree(). */
static bool ran_last(const loom_graph_t *g) {
  return eager_ran[g->nodes[g->n_nodes - 1].op] > 0;
}

/* a (shape sa) op b (shape sb), broadcast as NumPy does; eager: whether
 * the eager kernels run it. Integer-valued f32 inputs (ties) make
 * comparisons meet equal pairs. */
static loom_graph_t *binary_graph(binary_fn op, loom_dtype_t dt, int ra, const int64_t *sa,
                                  int rb, const int64_t *sb) {
  loom_graph_t *g;
  loom_value_t a, b, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "a", dt, ra, sa, &a));
  CHECK_OK(loom_graph_input(g, "b", dt, rb, sb, &b));
  CHECK_OK(op(g, a, b, &y));
  CHECK_OK(loom_graph_output(g, y));
  return g;
}

static void binary_case(binary_fn op, loom_dtype_t dt, int ra, const int64_t *sa, int rb,
                        const int64_t *sb, bool ties, bool eager) {
  loom_graph_t *g = binary_graph(op, dt, ra, sa, rb, sb);
  loom_tensor_t *in[2] = {test_rand_tensor(dt, ra, sa, -3, 3), test_rand_tensor(dt, rb, sb, -3, 3)};
  for (int k = 0; k < 2 && ties && dt == LOOM_F32; k++) {
    float *p = loom_tensor_data(in[k]);
    for (int64_t i = 0; i < loom_tensor_numel(in[k]); i++) p[i] = roundf(p[i]);
  }
  /* a NaN and infinities where there is room, for max, min and the
   * comparisons */
  if (dt == LOOM_F32 && loom_tensor_numel(in[0]) > 3) {
    ((float *)loom_tensor_data(in[0]))[1] = NAN;
    ((float *)loom_tensor_data(in[0]))[2] = INFINITY;
    ((float *)loom_tensor_data(in[0]))[3] = -INFINITY;
  }
  agree(g, 2, in, 0);
  CHECK(ran_last(g) == eager);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(g);
}

/* Every broadcast layout the elementwise kernels tell apart. */
static const struct {
  int ra, rb;
  int64_t sa[4], sb[4];
} broadcasts[] = {
    {2, 2, {3, 5}, {3, 5}},          /* both step */
    {2, 0, {3, 5}, {0}},             /* b one element */
    {0, 2, {0}, {3, 5}},             /* a one element */
    {3, 1, {2, 3, 5}, {5}},          /* b a row */
    {3, 2, {2, 3, 1}, {3, 5}},       /* a a column, b a matrix */
    {3, 3, {2, 1, 5}, {1, 4, 1}},    /* outer product */
    {4, 4, {2, 1, 3, 4}, {1, 2, 3, 4}}, /* merged inner dims */
    {2, 2, {0, 5}, {1, 5}},          /* empty */
    {1, 1, {1}, {1}},                /* one element each */
    {2, 2, {37, 1}, {1, 19}},        /* odd sizes */
};
enum { N_BROADCASTS = sizeof broadcasts / sizeof *broadcasts };

static void test_binary_broadcasts(void) {
  binary_fn f32_ops[] = {loom_add, loom_sub, loom_mul, loom_div, loom_mod, loom_maximum,
                         loom_minimum};
  binary_fn i64_ops[] = {loom_add, loom_sub, loom_mul, loom_bitwise_and, loom_bitwise_or,
                         loom_bitwise_xor, loom_bitshift_left, loom_bitshift_right};
  for (size_t s = 0; s < N_BROADCASTS; s++) {
    int ra = broadcasts[s].ra, rb = broadcasts[s].rb;
    const int64_t *sa = broadcasts[s].sa, *sb = broadcasts[s].sb;
    for (size_t k = 0; k < sizeof f32_ops / sizeof *f32_ops; k++)
      binary_case(f32_ops[k], LOOM_F32, ra, sa, rb, sb, false, true);
    for (size_t k = 0; k < sizeof i64_ops / sizeof *i64_ops; k++)
      binary_case(i64_ops[k], LOOM_I64, ra, sa, rb, sb, false, true);
  }
  /* Kernels it has no loop for (f64, i32, pow) still run, by the
   * reference kernel. */
  binary_case(loom_add, LOOM_F64, 2, (int64_t[]){3, 4}, 1, (int64_t[]){4}, false, false);
  binary_case(loom_add, LOOM_I32, 2, (int64_t[]){3, 4}, 1, (int64_t[]){4}, false, false);
  binary_case(loom_pow, LOOM_F32, 2, (int64_t[]){3, 4}, 1, (int64_t[]){4}, false, false);
}

/* i64 mod (Python's: the divisor's sign) over the broadcast layouts, with
 * divisors of either sign, INT64_MIN by -1; a divisor of 0 anywhere
 * leaves the node to the reference kernel, which fails. */
static void mod_case(int ra, const int64_t *sa, int rb, const int64_t *sb, bool zero) {
  loom_graph_t *g = binary_graph(loom_mod, LOOM_I64, ra, sa, rb, sb);
  loom_tensor_t *in[2] = {test_rand_tensor(LOOM_I64, ra, sa, -50, 50),
                          test_rand_tensor(LOOM_I64, rb, sb, -7, 7)};
  int64_t *pa = loom_tensor_data(in[0]), *pb = loom_tensor_data(in[1]);
  int64_t nb = loom_tensor_numel(in[1]);
  for (int64_t i = 0; i < nb; i++) pb[i] = pb[i] ? pb[i] : -1;
  if (loom_tensor_numel(in[0]) > 0) pa[0] = INT64_MIN;
  if (zero && nb > 0) pb[nb - 1] = 0;
  if (zero) agree_fails(g, 2, in);
  else agree(g, 2, in, 0);
  CHECK(ran_last(g) == !zero);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(g);
}

static void test_mod(void) {
  for (size_t s = 0; s < N_BROADCASTS; s++) {
    mod_case(broadcasts[s].ra, broadcasts[s].sa, broadcasts[s].rb, broadcasts[s].sb, false);
    bool empty = (broadcasts[s].ra && !broadcasts[s].sa[0]) || (broadcasts[s].rb && !broadcasts[s].sb[0]);
    if (!empty) /* an empty output divides nothing */
      mod_case(broadcasts[s].ra, broadcasts[s].sa, broadcasts[s].rb, broadcasts[s].sb, true);
  }
}

/* i64 shifts at the edges the C shift leaves undefined (amounts below 0,
 * at 64 and past it) and at 63, of values with the sign bit set or not:
 * the eager kernels give the reference's results. */
static void test_shift_edges(void) {
  int64_t sa[] = {6, 1}, sb[] = {1, 8};
  int64_t av[] = {1, -1, INT64_MIN, INT64_MAX, -5, 12345};
  int64_t bv[] = {-1, 0, 1, 63, 64, 65, INT64_MIN, INT64_MAX};
  binary_fn ops[] = {loom_bitshift_left, loom_bitshift_right};
  for (size_t k = 0; k < 2; k++) {
    loom_graph_t *g = binary_graph(ops[k], LOOM_I64, 2, sa, 2, sb);
    loom_tensor_t *in[2];
    CHECK_OK(loom_tensor_from_data(LOOM_I64, 2, sa, av, sizeof av, &in[0]));
    CHECK_OK(loom_tensor_from_data(LOOM_I64, 2, sb, bv, sizeof bv, &in[1]));
    agree(g, 2, in, 0);
    CHECK(ran_last(g));
    loom_tensor_destroy(in[0]);
    loom_tensor_destroy(in[1]);
    loom_graph_destroy(g);
  }
}

/* Comparisons of f32 (NaN and infinities among them) and i64 give bool,
 * in every broadcast layout; equal pairs occur. */
static void test_compare(void) {
  binary_fn ops[] = {loom_eq, loom_ne, loom_lt, loom_le, loom_gt, loom_ge};
  for (size_t s = 0; s < N_BROADCASTS; s++)
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
      int ra = broadcasts[s].ra, rb = broadcasts[s].rb;
      const int64_t *sa = broadcasts[s].sa, *sb = broadcasts[s].sb;
      binary_case(ops[k], LOOM_F32, ra, sa, rb, sb, true, true);
      binary_case(ops[k], LOOM_I64, ra, sa, rb, sb, true, true);
    }
  /* other dtypes: the reference kernel */
  binary_case(loom_lt, LOOM_I32, 1, (int64_t[]){5}, 1, (int64_t[]){5}, true, false);
  binary_case(loom_eq, LOOM_BOOL, 1, (int64_t[]){5}, 1, (int64_t[]){5}, true, false);
  binary_case(loom_gt, LOOM_F64, 1, (int64_t[]){5}, 1, (int64_t[]){5}, true, false);
}

/* where(cond, a, b) with cond of shape sc: sides of every element size,
 * every broadcast of the three operands. */
static void where_case(loom_dtype_t dt, int rc, const int64_t *sc, int ra, const int64_t *sa,
                       int rb, const int64_t *sb) {
  loom_graph_t *g;
  loom_value_t c, a, b, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "c", LOOM_BOOL, rc, sc, &c));
  CHECK_OK(loom_graph_input(g, "a", dt, ra, sa, &a));
  CHECK_OK(loom_graph_input(g, "b", dt, rb, sb, &b));
  CHECK_OK(loom_where(g, c, a, b, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in[3] = {test_rand_tensor(LOOM_BOOL, rc, sc, 0, 1),
                          test_rand_tensor(dt, ra, sa, -9, 9),
                          test_rand_tensor(dt, rb, sb, -9, 9)};
  agree(g, 3, in, 0);
  CHECK(ran_last(g));
  /* both values of a one-element condition: a copy of either side */
  if (loom_tensor_numel(in[0]) == 1) {
    uint8_t *p = loom_tensor_data(in[0]);
    *p = !*p;
    agree(g, 3, in, 0);
  }
  for (int k = 0; k < 3; k++) loom_tensor_destroy(in[k]);
  loom_graph_destroy(g);
}

static void test_where(void) {
  static const struct {
    int rc, ra, rb;
    int64_t sc[3], sa[3], sb[3];
  } shapes[] = {
      {0, 2, 2, {0}, {4, 7}, {4, 7}},             /* one condition (the optimizer's) */
      {2, 2, 2, {1, 1}, {4, 7}, {1, 7}},          /* one condition, a side broadcast */
      {0, 0, 2, {0}, {0}, {3, 5}},                /* one condition picking a scalar */
      {2, 2, 2, {4, 7}, {4, 7}, {4, 7}},          /* all step */
      {2, 2, 0, {37, 3}, {37, 3}, {0}},           /* b one element (relu's gradient) */
      {2, 0, 2, {5, 3}, {0}, {5, 3}},             /* a one element */
      {3, 3, 2, {2, 1, 5}, {1, 4, 1}, {4, 5}},    /* everything broadcasts */
      {2, 1, 2, {3, 1}, {6}, {1, 6}},             /* condition a column */
      {2, 2, 2, {0, 3}, {0, 3}, {1, 3}},          /* empty */
      {1, 2, 2, {0}, {4, 0}, {1, 0}},             /* empty, condition too */
  };
  loom_dtype_t dts[] = {LOOM_F32, LOOM_I64, LOOM_BOOL, LOOM_F16, LOOM_I32, LOOM_F64};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (size_t k = 0; k < sizeof dts / sizeof *dts; k++)
      where_case(dts[k], shapes[s].rc, shapes[s].sc, shapes[s].ra, shapes[s].sa,
                 shapes[s].rb, shapes[s].sb);
}

static void test_unary(void) {
  unary_fn ops[] = {loom_neg, loom_abs, loom_relu, loom_sqrt, loom_exp,
                    loom_log, loom_tanh, loom_sigmoid, loom_identity};
  for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
    loom_graph_t *g;
    loom_value_t x, y;
    CHECK_OK(loom_graph_create(&g));
    CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (int64_t[]){7, 33}, &x));
    CHECK_OK(ops[k](g, x, &y));
    CHECK_OK(loom_graph_output(g, y));
    loom_tensor_t *in = test_rand_tensor(LOOM_F32, 2, (int64_t[]){7, 33}, -20, 20);
    float *p = loom_tensor_data(in);
    p[0] = NAN;
    p[1] = -INFINITY;
    p[2] = 0.0f;
    p[3] = -0.0f;
    p[4] = INFINITY;
    p[5] = 1e-30f;
    p[6] = -3e-4f;
    /* exp, tanh and sigmoid compute in float as compiled code does */
    bool math = ops[k] == loom_exp || ops[k] == loom_tanh || ops[k] == loom_sigmoid;
    if (math) agree_within(g, 1, &in, MATH_ATOL, MATH_RTOL);
    else agree(g, 1, &in, 0);
    CHECK(ran_last(g));
    loom_tensor_destroy(in);
    loom_graph_destroy(g);
  }
}

/* Every instance of the float math that this CPU runs, over float's range
 * (each function's clamps, underflow to subnormals and zero, overflow,
 * tanh's small arguments), against libm in double; lengths that leave
 * every vector tail. */
static void test_math_instances(void) {
  enum { N = 4099 };
  static float x[N], y[N];
  for (int i = 0; i < N; i++) x[i] = -120.0f + 220.0f * (float)i / (N - 1);
  for (int i = 0; i < 400; i++) x[i] = ldexpf(i % 2 ? 1.0f : -1.0f, -i / 4) * (1 + i % 7 / 8.0f);
  x[400] = NAN;
  x[401] = INFINITY;
  x[402] = -INFINITY;
  x[403] = 0.0f;
  x[404] = -0.0f;
  ir_op_t ops[] = {IR_OP_EXP, IR_OP_TANH, IR_OP_SIGMOID};
  core_isa_t isas[] = {CORE_ISA_PORTABLE, CORE_ISA_AVX2, CORE_ISA_AVX512};
  int ran = 0;
  for (size_t o = 0; o < sizeof ops / sizeof *ops; o++)
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
      cpu_eager_math_fn f = cpu_eager_math_isa(ops[o], isas[k]);
      if (!f) continue; /* not on this CPU */
      ran++;
      for (int n = 0; n <= 33; n += 11) f(y, x + 500, n); /* short runs, tails only */
      f(y, x, N);
      for (int i = 0; i < N; i++) {
        double v = x[i];
        double want = ops[o] == IR_OP_EXP ? exp(v)
                      : ops[o] == IR_OP_TANH ? tanh(v)
                      : v >= 0 ? 1 / (1 + exp(-v)) : exp(v) / (1 + exp(v));
        CHECK_NEAR(y[i], (double)(float)want, MATH_ATOL, MATH_RTOL);
        if (want == 0) CHECK(!signbit(y[i]) == !signbit(want));
      }
    }
  CHECK(ran >= 3); /* the portable instances at least */
  CHECK(cpu_eager_math(IR_OP_LOG) == NULL);
}

/* What f32 op gives for x and z, computed in double (exact for these:
 * double carries more than twice float's bits, so one rounding to float
 * is the correctly rounded f32 result). */
static float f32_op_want(ir_op_t op, float x, float z) {
  double a = x, b = z;
  switch (op) {
    case IR_OP_ADD: return (float)(a + b);
    case IR_OP_SUB: return (float)(a - b);
    case IR_OP_MUL: return (float)(a * b);
    case IR_OP_DIV: return (float)(a / b);
    case IR_OP_MAXIMUM: return isnan(x) || isnan(z) ? NAN : x > z ? x : z;
    case IR_OP_MINIMUM: return isnan(x) || isnan(z) ? NAN : x < z ? x : z;
    case IR_OP_NEG: return (float)-a;
    case IR_OP_ABS: return (float)fabs(a);
    case IR_OP_RELU: return isnan(x) ? x : x > 0 ? x : 0.0f;
    case IR_OP_SQRT: return (float)sqrt(a);
    default: return x; /* identity */
  }
}

static bool same_f32(float got, float want) {
  return isnan(want) ? isnan(got) : !memcmp(&got, &want, sizeof got);
}

/* Every instance of the f32 arithmetic that this CPU runs, in each layout
 * (both operands stepping, either one broadcast, both), over specials
 * (NaN, infinities, signed zeros, subnormals, overflow) and lengths that
 * leave every vector tail, against the op computed in double. */
static void test_f32_instances(void) {
  enum { N = 1031 };
  static float a[N], b[N], y[N];
  uint32_t r = 12345;
  for (int i = 0; i < N; i++) {
    r = r * 1664525u + 1013904223u;
    a[i] = ldexpf((float)(r >> 8) / 16777216.0f - 0.5f, (int)(r % 61) - 30);
    r = r * 1664525u + 1013904223u;
    b[i] = ldexpf((float)(r >> 8) / 16777216.0f - 0.5f, (int)(r % 61) - 30);
  }
  const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -1e-40f, 3e38f, -3e38f, 1.0f};
  for (int i = 0; i < 10; i++)
    for (int j = 0; j < 10; j++) a[100 + 10 * i + j] = specials[i], b[100 + 10 * i + j] = specials[j];
  ir_op_t ops[] = {IR_OP_ADD,  IR_OP_SUB, IR_OP_MUL,  IR_OP_DIV,  IR_OP_MAXIMUM, IR_OP_MINIMUM,
                   IR_OP_NEG,  IR_OP_ABS, IR_OP_RELU, IR_OP_SQRT, IR_OP_IDENTITY};
  core_isa_t isas[] = {CORE_ISA_PORTABLE, CORE_ISA_AVX2, CORE_ISA_AVX512};
  int ran = 0, bad = 0;
  for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
    bool binary = ir_ops[ops[o]].in_max == 2;
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
      cpu_eager_run_fn f = cpu_eager_f32_run_isa(ops[o], isas[k]);
      if (!f) continue; /* not on this CPU */
      ran++;
      for (int layout = 0; layout < (binary ? 4 : 2); layout++) {
        int64_t step[2] = {layout & 1 ? 0 : 1, layout & 2 ? 0 : 1};
        for (int n = 0; n <= N; n += n < 70 ? 1 : 319) {
          int at = n % 7 * 13; /* broadcast elements from here and there */
          const void *in[2] = {a + (step[0] ? 0 : at), b + (step[1] ? 0 : at)};
          f(y, in, step, n);
          for (int i = 0; i < n; i++) {
            float x = step[0] ? a[i] : a[at], z = step[1] ? b[i] : b[at];
            bad += !same_f32(y[i], f32_op_want(ops[o], x, z));
          }
        }
      }
    }
  }
  CHECK(bad == 0);
  CHECK(ran >= 11); /* the portable instances at least */
  CHECK(cpu_eager_f32_run_isa(IR_OP_LOG, CORE_ISA_PORTABLE) == NULL);
}

/* Every instance of scatter_add's double loops that this CPU runs, at
 * every tail length, against the same conversions and adds done one
 * element at a time here (NaN, infinities, subnormals, doubles that do
 * not fit a float). */
static void test_sum_rows_instances(void) {
  enum { N = 203 };
  static float f[N], got_f[N];
  static double d[N], got_d[N];
  for (int i = 0; i < N; i++) {
    f[i] = ldexpf(1.0f + (float)(i % 13) / 16.0f, i % 50 - 25) * (i % 2 ? -1.0f : 1.0f);
    d[i] = ldexp(1.0 + (double)(i % 11) / 1024.0 + 1e-12, i % 300 - 150);
  }
  f[7] = NAN, f[8] = INFINITY, f[9] = 1e-42f, d[10] = NAN, d[11] = 1e300, d[12] = -1e-300;
  core_isa_t isas[] = {CORE_ISA_PORTABLE, CORE_ISA_AVX2, CORE_ISA_AVX512};
  int ran = 0, bad = 0;
  for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
    const cpu_eager_sum_rows_t *r = cpu_eager_sum_rows_isa(isas[k]);
    if (!r) continue; /* not on this CPU */
    ran++;
    for (int n = 0; n <= N; n += n < 40 ? 1 : 41) {
      r->widen(got_d, f, n);
      for (int i = 0; i < n; i++) {
        double want = f[i];
        bad += isnan(want) ? !isnan(got_d[i]) : memcmp(&got_d[i], &want, sizeof want) != 0;
      }
      memcpy(got_d, d, sizeof d);
      r->add(got_d, f, n);
      for (int i = 0; i < N; i++) {
        double want = i < n ? d[i] + (double)f[i] : d[i];
        bad += isnan(want) ? !isnan(got_d[i]) : memcmp(&got_d[i], &want, sizeof want) != 0;
      }
      r->narrow(got_f, d, n);
      for (int i = 0; i < n; i++) bad += !same_f32(got_f[i], (float)d[i]);
    }
  }
  CHECK(bad == 0);
  CHECK(ran >= 1);
}

/* a (ra dims) @ b (rb dims), optionally transposed. */
static void matmul_case(int ra, const int64_t *sa, int rb, const int64_t *sb, int ta, int tb) {
  loom_graph_t *g;
  loom_value_t a, b, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "a", LOOM_F32, ra, sa, &a));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F32, rb, sb, &b));
  CHECK_OK(loom_matmul(g, a, b, ta, tb, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in[2] = {test_rand_tensor(LOOM_F32, ra, sa, -1, 1),
                          test_rand_tensor(LOOM_F32, rb, sb, -1, 1)};
  agree(g, 2, in, 1e-5);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(g);
}

static void test_matmul(void) {
  matmul_case(2, (int64_t[]){5, 7}, 2, (int64_t[]){7, 9}, 0, 0);
  matmul_case(2, (int64_t[]){7, 5}, 2, (int64_t[]){9, 7}, 1, 1);
  matmul_case(3, (int64_t[]){4, 5, 70}, 2, (int64_t[]){70, 33}, 0, 0); /* b shared */
  matmul_case(2, (int64_t[]){5, 7}, 3, (int64_t[]){3, 7, 6}, 0, 0);    /* a shared */
  matmul_case(3, (int64_t[]){3, 5, 7}, 3, (int64_t[]){3, 6, 7}, 0, 1); /* batches line up */
  /* batch dims that broadcast both ways: one GEMM per item */
  matmul_case(4, (int64_t[]){2, 1, 5, 7}, 4, (int64_t[]){1, 3, 7, 4}, 0, 0);
  matmul_case(3, (int64_t[]){1, 5, 7}, 4, (int64_t[]){2, 3, 7, 4}, 0, 0);
  /* ranks differ, items line up: one call */
  matmul_case(3, (int64_t[]){3, 5, 7}, 4, (int64_t[]){1, 3, 7, 4}, 0, 0);
  matmul_case(2, (int64_t[]){5, 0}, 2, (int64_t[]){0, 4}, 0, 0); /* k = 0: zeros */
  matmul_case(2, (int64_t[]){0, 3}, 2, (int64_t[]){3, 4}, 0, 0);
  matmul_case(1, (int64_t[]){7}, 2, (int64_t[]){7, 4}, 0, 0); /* a vector: the reference */
}

static void test_movement(void) {
  loom_dtype_t dts[] = {LOOM_F32, LOOM_F64, LOOM_I32, LOOM_BOOL};
  for (size_t k = 0; k < sizeof dts / sizeof *dts; k++) {
    loom_dtype_t dt = dts[k];
    loom_graph_t *g;
    loom_value_t a, b, cat, parts[3], sl, sl2;
    CHECK_OK(loom_graph_create(&g));
    CHECK_OK(loom_graph_input(g, "a", dt, 3, (int64_t[]){2, 3, 4}, &a));
    CHECK_OK(loom_graph_input(g, "b", dt, 3, (int64_t[]){2, 5, 4}, &b));
    CHECK_OK(loom_concat(g, 2, (loom_value_t[]){a, b}, 1, &cat)); /* (2, 8, 4) */
    CHECK_OK(loom_split(g, cat, 2, 3, (int64_t[]){1, 0, 3}, parts));
    CHECK_OK(loom_slice(g, cat, 2, (int64_t[]){1, 1}, (int64_t[]){7, 3},
                        (int64_t[]){1, 2}, NULL, &sl));
    /* a step of 2: the reference kernel */
    CHECK_OK(loom_slice(g, cat, 1, (int64_t[]){0}, (int64_t[]){8}, (int64_t[]){1},
                        (int64_t[]){2}, &sl2));
    CHECK_OK(loom_graph_output(g, cat));
    CHECK_OK(loom_graph_output(g, parts[0]));
    CHECK_OK(loom_graph_output(g, parts[2]));
    CHECK_OK(loom_graph_output(g, sl));
    loom_tensor_t *in[2] = {test_rand_tensor(dt, 3, (int64_t[]){2, 3, 4}, -9, 9),
                            test_rand_tensor(dt, 3, (int64_t[]){2, 5, 4}, -9, 9)};
    agree(g, 2, in, 0);
    loom_tensor_destroy(in[0]);
    loom_tensor_destroy(in[1]);
    loom_graph_destroy(g);
    (void)sl2;
  }
}

/* expand of any dtype: rank added, ones broadcast, a dim kept; and an
 * expand of one element. */
static void test_expand(void) {
  loom_dtype_t dts[] = {LOOM_F32, LOOM_I64, LOOM_BOOL, LOOM_F16};
  for (size_t k = 0; k < sizeof dts / sizeof *dts; k++) {
    loom_graph_t *g;
    loom_value_t a, one, ya, yone;
    CHECK_OK(loom_graph_create(&g));
    CHECK_OK(loom_graph_input(g, "a", dts[k], 2, (int64_t[]){3, 1}, &a));
    CHECK_OK(loom_graph_input(g, "one", dts[k], 1, (int64_t[]){1}, &one));
    CHECK_OK(loom_expand(g, a, 3, (loom_dim_t[]){2, 3, 5}, &ya));
    CHECK_OK(loom_expand(g, one, 2, (loom_dim_t[]){4, 7}, &yone));
    CHECK_OK(loom_graph_output(g, ya));
    CHECK_OK(loom_graph_output(g, yone));
    loom_tensor_t *in[2] = {test_rand_tensor(dts[k], 2, (int64_t[]){3, 1}, -9, 9),
                            test_rand_tensor(dts[k], 1, (int64_t[]){1}, -9, 9)};
    agree(g, 2, in, 0);
    CHECK(eager_ran[IR_OP_EXPAND] == 2);
    loom_tensor_destroy(in[0]);
    loom_tensor_destroy(in[1]);
    loom_graph_destroy(g);
  }
}

/* A reshape (or squeeze, unsqueeze) takes over its input's tensor where
 * the interpreter made it and reads it last there; elsewhere it copies:
 * of a graph input (the caller's tensor keeps its shape), of a value read
 * again later, and of a graph output. */
static void test_reshape_takes_over(void) {
  loom_graph_t *g;
  loom_value_t x, t, r, u, rx, keep, rk, back, total, sq, unsq;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (int64_t[]){3, 4}, &x));
  CHECK_OK(loom_mul(g, x, x, &t));
  CHECK_OK(loom_reshape(g, t, 2, (loom_dim_t[]){6, 2}, &r)); /* t dies here */
  CHECK_OK(loom_neg(g, r, &u));
  CHECK_OK(loom_reshape(g, x, 1, (loom_dim_t[]){12}, &rx)); /* an input */
  CHECK_OK(loom_abs(g, x, &keep));
  CHECK_OK(loom_reshape(g, keep, 2, (loom_dim_t[]){2, 6}, &rk)); /* keep read again */
  CHECK_OK(loom_reshape(g, rk, 2, (loom_dim_t[]){3, 4}, &back));
  CHECK_OK(loom_add(g, back, keep, &total));
  CHECK_OK(loom_unsqueeze(g, total, 1, (int64_t[]){0}, &unsq));
  CHECK_OK(loom_squeeze(g, unsq, 1, (int64_t[]){0}, &sq));
  CHECK_OK(loom_graph_output(g, u));
  CHECK_OK(loom_graph_output(g, rx));
  CHECK_OK(loom_graph_output(g, sq));
  CHECK_OK(loom_graph_output(g, rk));
  loom_tensor_t *in = test_rand_tensor(LOOM_F32, 2, (int64_t[]){3, 4}, -9, 9);
  agree(g, 1, &in, 0);
  CHECK(loom_tensor_rank(in) == 2 && loom_tensor_dim(in, 0) == 3 && loom_tensor_dim(in, 1) == 4);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* ---- Indexing ------------------------------------------------------------- */

/* What a case expects of the eager kernels: to run the node, to leave it
 * to the reference kernel, or (an index out of range) to leave it to the
 * reference kernel, which fails. */
typedef enum { RUNS, DECLINES, FAILS } expect_t;

/* Runs g on in both ways and checks what expect says. */
static void expect(loom_graph_t *g, int n_in, loom_tensor_t *const *in, expect_t e) {
  if (e == FAILS) agree_fails(g, n_in, in);
  else agree(g, n_in, in, 0);
  CHECK(ran_last(g) == (e == RUNS));
}

/* Sets entry i of an index tensor to v. */
static void set_index(loom_tensor_t *t, int64_t i, double v) {
  loom_tensor_t *one = test_tensor(loom_tensor_dtype(t), 0, NULL, &v);
  size_t es = loom_dtype_size(loom_tensor_dtype(t));
  memcpy((char *)loom_tensor_data(t) + i * (int64_t)es, loom_tensor_data(one), es);
  loom_tensor_destroy(one);
}

/* op (gather, index_select or embedding) of data (dtype dt, shape sd)
 * at indices (dtype it, shape si) drawn from [lo, hi], along axis. */
static void take_case(ir_op_t op, loom_dtype_t dt, int rd, const int64_t *sd, loom_dtype_t it,
                      int ri, const int64_t *si, int64_t axis, int64_t lo, int64_t hi,
                      expect_t e) {
  loom_graph_t *g;
  loom_value_t data, ind, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "data", dt, rd, sd, &data));
  CHECK_OK(loom_graph_input(g, "ind", it, ri, si, &ind));
  if (op == IR_OP_GATHER) CHECK_OK(loom_gather(g, data, ind, axis, &y));
  else if (op == IR_OP_INDEX_SELECT) CHECK_OK(loom_index_select(g, data, ind, axis, &y));
  else CHECK_OK(loom_embedding(g, data, ind, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in[2] = {test_rand_tensor(dt, rd, sd, -9, 9),
                          test_rand_tensor(it, ri, si, (double)lo, (double)hi)};
  /* both ends of the range, where there is room */
  int64_t n = loom_tensor_numel(in[1]);
  if (n > 1) {
    set_index(in[1], 0, (double)lo);
    set_index(in[1], n - 1, (double)hi);
  }
  expect(g, 2, in, e);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(g);
}

static void test_gather(void) {
  const int64_t d3[3] = {4, 5, 6}, i2[2] = {3, 7};
  /* every axis, negative ones too; negative indices count from the end */
  for (int64_t axis = -3; axis < 3; axis++) {
    int64_t size = d3[axis < 0 ? axis + 3 : axis];
    take_case(IR_OP_GATHER, LOOM_F32, 3, d3, LOOM_I64, 2, i2, axis, -size, size - 1, RUNS);
    take_case(IR_OP_GATHER, LOOM_F32, 3, d3, LOOM_I32, 2, i2, axis, -size, size - 1, RUNS);
  }
  /* rows of 1, 2, 4, 8 and 24 bytes: every element size, inner rows */
  loom_dtype_t dts[] = {LOOM_BOOL, LOOM_F16, LOOM_F32, LOOM_I64, LOOM_F64, LOOM_I32};
  for (size_t k = 0; k < sizeof dts / sizeof *dts; k++) {
    take_case(IR_OP_GATHER, dts[k], 1, (int64_t[]){11}, LOOM_I64, 2, i2, 0, -11, 10, RUNS);
    take_case(IR_OP_GATHER, dts[k], 2, (int64_t[]){7, 3}, LOOM_I64, 1, (int64_t[]){9}, 0, 0, 6,
              RUNS);
  }
  /* a scalar index drops the axis; empty indices, empty data */
  take_case(IR_OP_GATHER, LOOM_F32, 2, (int64_t[]){5, 3}, LOOM_I64, 0, NULL, 1, -3, 2, RUNS);
  take_case(IR_OP_GATHER, LOOM_F32, 2, (int64_t[]){5, 3}, LOOM_I64, 1, (int64_t[]){0}, 0, 0, 4,
            RUNS);
  take_case(IR_OP_GATHER, LOOM_F32, 2, (int64_t[]){0, 3}, LOOM_I64, 1, (int64_t[]){4}, 1, 0, 2,
            RUNS);
  take_case(IR_OP_GATHER, LOOM_F32, 2, (int64_t[]){5, 0}, LOOM_I64, 1, (int64_t[]){4}, 0, 0, 4,
            RUNS);
  /* i8 indices: the reference kernel */
  take_case(IR_OP_GATHER, LOOM_F32, 2, (int64_t[]){5, 3}, LOOM_I8, 1, (int64_t[]){4}, 0, 0, 4,
            DECLINES);
  /* out of range either way, and in an empty result: the reference's error */
  take_case(IR_OP_GATHER, LOOM_F32, 2, (int64_t[]){5, 3}, LOOM_I64, 1, (int64_t[]){40}, 0, 0, 5,
            FAILS);
  take_case(IR_OP_GATHER, LOOM_F32, 2, (int64_t[]){5, 3}, LOOM_I32, 1, (int64_t[]){40}, 1, -4, 2,
            FAILS);
  take_case(IR_OP_GATHER, LOOM_F32, 2, (int64_t[]){0, 3}, LOOM_I64, 1, (int64_t[]){4}, 1, 3, 3,
            FAILS);
}

static void test_index_select_embedding(void) {
  const int64_t d2[2] = {7, 5}, i1[1] = {9};
  take_case(IR_OP_INDEX_SELECT, LOOM_F32, 2, d2, LOOM_I64, 1, i1, 0, -7, 6, RUNS);
  take_case(IR_OP_INDEX_SELECT, LOOM_F32, 2, d2, LOOM_I64, 1, i1, -1, -5, 4, RUNS);
  take_case(IR_OP_INDEX_SELECT, LOOM_I64, 2, d2, LOOM_I32, 1, i1, 1, 0, 4, RUNS);
  take_case(IR_OP_INDEX_SELECT, LOOM_F32, 2, d2, LOOM_I64, 1, i1, 0, 0, 7, FAILS);
  /* embedding: rows of the weight, no negative indices */
  take_case(IR_OP_EMBEDDING, LOOM_F32, 2, (int64_t[]){10, 4}, LOOM_I64, 2, (int64_t[]){2, 3}, 0,
            0, 9, RUNS);
  take_case(IR_OP_EMBEDDING, LOOM_F32, 2, (int64_t[]){10, 1}, LOOM_I32, 1, (int64_t[]){13}, 0,
            0, 9, RUNS);
  take_case(IR_OP_EMBEDDING, LOOM_F32, 2, (int64_t[]){10, 4}, LOOM_I64, 1, (int64_t[]){13}, 0,
            -1, 9, FAILS);
}

/* scatter_add(self, index, src) along axis: self (ss) f32 from
 * [-100, 100], src (sx) of widely spread magnitudes, so that the order
 * and the precision of the sums show in the result; index (si, dtype it)
 * drawn from [lo, hi], or, rows, holding one value per row of the dims
 * after axis (torch's index_add written as scatter_add). */
static void scatter_case(loom_dtype_t dt, int rank, const int64_t *ss, const int64_t *si,
                         const int64_t *sx, loom_dtype_t it, int64_t axis, int64_t lo,
                         int64_t hi, bool rows, expect_t e) {
  loom_graph_t *g;
  loom_value_t self, index, src, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "self", dt, rank, ss, &self));
  CHECK_OK(loom_graph_input(g, "index", it, rank, si, &index));
  CHECK_OK(loom_graph_input(g, "src", dt, rank, sx, &src));
  CHECK_OK(loom_scatter_add(g, self, index, src, axis, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in[3] = {test_rand_tensor(dt, rank, ss, -100, 100),
                          test_rand_tensor(it, rank, si, (double)lo, (double)hi),
                          test_rand_tensor(dt, rank, sx, -1, 1)};
  /* Every fifth entry +-2^60, so that where a sum cancels them depends
   * on the order of the adds. */
  if (dt == LOOM_F32) {
    float *x = loom_tensor_data(in[2]);
    for (int64_t i = 0; i < loom_tensor_numel(in[2]); i++)
      x[i] = i % 5 ? ldexpf(x[i], (int)test_rand_int(-20, 20)) : ldexpf(i % 2 ? 1 : -1, 60);
  }
  int64_t a = axis < 0 ? axis + rank : axis, inner = 1, n = loom_tensor_numel(in[1]);
  for (int d = (int)a + 1; d < rank; d++) inner *= si[d];
  /* both ends of the range, in the first row and the last */
  if (n > inner) {
    set_index(in[1], 0, (double)lo);
    set_index(in[1], n - inner, (double)hi);
  }
  for (int64_t p = 0; rows && p < n; p++) set_index(in[1], p, test_get(in[1], p - p % inner));
  expect(g, 3, in, e);
  for (int k = 0; k < 3; k++) loom_tensor_destroy(in[k]);
  loom_graph_destroy(g);
}

static void test_scatter_add(void) {
  const int64_t self2[2] = {6, 33}, big2[2] = {40, 33};
  /* axis 0, many entries into few rows: whole rows (the GNN's) and not */
  for (int rows = 0; rows < 2; rows++) {
    scatter_case(LOOM_F32, 2, self2, big2, big2, LOOM_I64, 0, 0, 5, rows, RUNS);
    scatter_case(LOOM_F32, 2, self2, big2, big2, LOOM_I32, 0, 0, 5, rows, RUNS);
    scatter_case(LOOM_F32, 2, (int64_t[]){2, 33}, big2, big2, LOOM_I64, -2, 0, 1, rows, RUNS);
  }
  /* the last axis (rows of one), a middle one, odd sizes */
  scatter_case(LOOM_F32, 2, (int64_t[]){5, 3}, (int64_t[]){5, 17}, (int64_t[]){5, 17},
               LOOM_I64, 1, 0, 2, false, RUNS);
  scatter_case(LOOM_F32, 2, (int64_t[]){5, 3}, (int64_t[]){5, 17}, (int64_t[]){5, 17},
               LOOM_I64, -1, 0, 2, false, RUNS);
  const int64_t s3[3] = {3, 4, 7}, i3[3] = {3, 9, 7};
  scatter_case(LOOM_F32, 3, s3, i3, i3, LOOM_I64, 1, 0, 3, false, RUNS);
  scatter_case(LOOM_F32, 3, s3, i3, i3, LOOM_I64, 1, 0, 3, true, RUNS);
  /* gather's gradient: (1, n, inner), rows */
  scatter_case(LOOM_F32, 3, (int64_t[]){1, 7, 64}, (int64_t[]){1, 50, 64},
               (int64_t[]){1, 50, 64}, LOOM_I64, 1, 0, 6, true, RUNS);
  /* empty: no entries, or nothing to add into */
  scatter_case(LOOM_F32, 2, self2, (int64_t[]){0, 33}, (int64_t[]){0, 33}, LOOM_I64, 0, 0, 5,
               false, RUNS);
  scatter_case(LOOM_F32, 2, (int64_t[]){6, 0}, (int64_t[]){9, 0}, (int64_t[]){9, 0}, LOOM_I64,
               0, 0, 5, false, RUNS);
  scatter_case(LOOM_F32, 1, (int64_t[]){6}, (int64_t[]){1}, (int64_t[]){1}, LOOM_I64, 0, 0, 5,
               false, RUNS);
  /* index smaller than src or self off the axis, other dtypes: the
   * reference kernel */
  scatter_case(LOOM_F32, 2, (int64_t[]){6, 5}, (int64_t[]){4, 3}, (int64_t[]){5, 4}, LOOM_I64,
               0, 0, 5, false, DECLINES);
  scatter_case(LOOM_F64, 2, self2, big2, big2, LOOM_I64, 0, 0, 5, false, DECLINES);
  scatter_case(LOOM_I64, 2, self2, big2, big2, LOOM_I64, 0, 0, 5, false, DECLINES);
  scatter_case(LOOM_F32, 2, self2, big2, big2, LOOM_I8, 0, 0, 5, false, DECLINES);
  /* out of range (negative, or the size): the reference's error */
  scatter_case(LOOM_F32, 2, self2, big2, big2, LOOM_I64, 0, -1, 5, false, FAILS);
  scatter_case(LOOM_F32, 2, self2, big2, big2, LOOM_I32, 0, 0, 6, true, FAILS);
  scatter_case(LOOM_F32, 2, (int64_t[]){0, 3}, (int64_t[]){2, 3}, (int64_t[]){2, 3}, LOOM_I64,
               0, 0, 0, false, FAILS);
}

/* scatter_add whose index is a column (col, (E, 1), entries in [0, N))
 * spread over d features: by an add of zeros (make 0) or an expand (1);
 * an entry `bad` planted where the case FAILS.
 * The fallback interpreter gives the eager kernel a view of the column
 * (no (E, d) index written): taken over where the column dies there
 * (computed: col + 0 by a mul with ones, read once), borrowed where it
 * lives on (a graph output; `keep`) or is the run's input (`input`).
 * Where the index is also a graph output no view is made. Results, and
 * an out-of-range entry's error, are the reference's. */
static void column_case(int make, bool input, bool keep, bool index_out, int64_t bad,
                        expect_t e) {
  enum { E = 37, N = 6, D = 33 };
  loom_graph_t *g;
  loom_value_t col_in, src, ones, col, zeros, zf, self, idx, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "col", LOOM_I64, 2, (int64_t[]){E, 1}, &col_in));
  CHECK_OK(loom_graph_input(g, "src", LOOM_F32, 2, (int64_t[]){E, D}, &src));
  if (input) {
    col = col_in;
  } else {
    CHECK_OK(loom_full(g, 2, (loom_dim_t[]){1, 1}, 1.0, LOOM_I64, &ones));
    CHECK_OK(loom_mul(g, col_in, ones, &col));
  }
  if (make == 0) {
    CHECK_OK(loom_full(g, 2, (loom_dim_t[]){1, D}, 0.0, LOOM_I64, &zeros));
    CHECK_OK(loom_add(g, col, zeros, &idx));
  } else {
    CHECK_OK(loom_expand(g, col, 2, (loom_dim_t[]){E, D}, &idx));
  }
  CHECK_OK(loom_full(g, 2, (loom_dim_t[]){N, D}, 0.0, LOOM_F32, &zf));
  CHECK_OK(loom_neg(g, zf, &self));
  CHECK_OK(loom_scatter_add(g, self, idx, src, 0, &y));
  CHECK_OK(loom_graph_output(g, y));
  if (keep) CHECK_OK(loom_graph_output(g, col));
  if (index_out) CHECK_OK(loom_graph_output(g, idx));
  loom_tensor_t *in[2] = {test_rand_tensor(LOOM_I64, 2, (int64_t[]){E, 1}, 0, N - 1),
                          test_rand_tensor(LOOM_F32, 2, (int64_t[]){E, D}, -3, 3)};
  if (e == FAILS) ((int64_t *)loom_tensor_data(in[0]))[E - 3] = bad;
  expect(g, 2, in, e);
  /* a view runs no kernel for the expand or the add */
  if (e == RUNS) CHECK(eager_ran[make == 0 ? IR_OP_ADD : IR_OP_EXPAND] == (index_out ? 1 : 0));
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(g);
}

static void test_scatter_add_column(void) {
  for (int make = 0; make < 2; make++) {
    column_case(make, false, false, false, 0, RUNS); /* taken over */
    column_case(make, false, true, false, 0, RUNS);  /* borrowed, lives on */
    column_case(make, true, false, false, 0, RUNS);  /* borrowed, an input */
    column_case(make, false, false, true, 0, RUNS);  /* the index an output too */
    column_case(make, true, false, false, 6, FAILS); /* out of range */
    column_case(make, false, false, false, -1, FAILS);
  }
}

/* ---- Reductions ----------------------------------------------------------- */

typedef loom_status_t (*reduce_fn)(loom_graph_t *, loom_value_t, int, const int64_t *, int,
                                   loom_value_t *);

/* op (sum or mean) of x (shape sx, dtype dt) over axes (n_axes < 0: all),
 * x of widely spread magnitudes with +-2^60 among them, so that the
 * order and the precision of the sums show in the result. */
static void reduce_case(reduce_fn op, loom_dtype_t dt, int rank, const int64_t *sx, int n_axes,
                        const int64_t *axes, int keepdim, expect_t e) {
  loom_graph_t *g;
  loom_value_t x, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", dt, rank, sx, &x));
  CHECK_OK(op(g, x, n_axes < 0 ? 0 : n_axes, n_axes < 0 ? NULL : axes, keepdim, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in = test_rand_tensor(dt, rank, sx, -1, 1);
  if (dt == LOOM_F32) {
    float *p = loom_tensor_data(in);
    for (int64_t i = 0; i < loom_tensor_numel(in); i++)
      p[i] = i % 7 ? ldexpf(p[i], (int)test_rand_int(-20, 20)) : ldexpf(i % 2 ? 1 : -1, 60);
  }
  expect(g, 1, &in, e);
  /* -0 everywhere: the sums start from +0, as the reference's */
  if (dt == LOOM_F32) {
    float *p = loom_tensor_data(in);
    for (int64_t i = 0; i < loom_tensor_numel(in); i++) p[i] = -0.0f;
    expect(g, 1, &in, e);
  }
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

static void test_reduce(void) {
  static const struct {
    int n_axes;
    int64_t axes[3];
    expect_t e;
  } cases[] = {
      {1, {0}, RUNS}, {1, {1}, RUNS}, {1, {2}, RUNS}, {1, {-1}, RUNS},
      {2, {0, 1}, RUNS}, {2, {1, -1}, RUNS}, {3, {0, 1, 2}, RUNS}, {-1, {0}, RUNS},
      {2, {0, 2}, DECLINES}, /* not adjacent */
  };
  reduce_fn ops[] = {loom_sum, loom_mean};
  const int64_t x3[3] = {4, 5, 300}; /* inner rows longer than a block */
  for (size_t k = 0; k < 2; k++) {
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
      for (int keepdim = 0; keepdim < 2; keepdim++)
        reduce_case(ops[k], LOOM_F32, 3, x3, cases[i].n_axes, cases[i].axes, keepdim,
                    cases[i].e);
    /* adjacent once dims of 1 are set aside */
    reduce_case(ops[k], LOOM_F32, 3, (int64_t[]){3, 1, 5}, 2, (int64_t[]){0, 2}, 0, RUNS);
    reduce_case(ops[k], LOOM_F32, 3, (int64_t[]){1, 7, 1}, 1, (int64_t[]){0}, 0, RUNS);
    /* odd sizes; nothing to sum (0, or NaN for mean); no outputs; a scalar */
    reduce_case(ops[k], LOOM_F32, 2, (int64_t[]){37, 19}, 1, (int64_t[]){0}, 0, RUNS);
    reduce_case(ops[k], LOOM_F32, 2, (int64_t[]){0, 5}, 1, (int64_t[]){0}, 0, RUNS);
    reduce_case(ops[k], LOOM_F32, 2, (int64_t[]){3, 0}, 1, (int64_t[]){0}, 0, RUNS);
    reduce_case(ops[k], LOOM_F32, 0, NULL, -1, NULL, 0, RUNS);
    /* other dtypes: the reference kernel */
    reduce_case(ops[k], LOOM_F64, 2, (int64_t[]){4, 5}, 1, (int64_t[]){0}, 0, DECLINES);
  }
  reduce_case(loom_sum, LOOM_I64, 2, (int64_t[]){4, 5}, 1, (int64_t[]){0}, 0, DECLINES);
}

/* pad with a constant runs eager for any dtype (zero and nonzero fills,
 * -0.0 and NaN fills bit for bit, pads of 0 on some sides, ranks 1-4, an
 * empty input); a crop and the reflect and edge modes are the reference
 * kernel's. */
static void pad_case(loom_dtype_t dt, int rank, const int64_t *shape, const int64_t *pads,
                     loom_pad_mode_t mode, double value, expect_t e) {
  loom_graph_t *g;
  loom_value_t x, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", dt, rank, shape, &x));
  CHECK_OK(loom_pad(g, x, pads, mode, value, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in = test_rand_tensor(dt, rank, shape, -9, 9);
  expect(g, 1, &in, e);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

static void test_pad(void) {
  const loom_dtype_t dts[3] = {LOOM_F32, LOOM_I64, LOOM_BOOL};
  for (int k = 0; k < 3; k++) {
    pad_case(dts[k], 1, (int64_t[]){5}, (int64_t[]){2, 3}, LOOM_PAD_CONSTANT, 0, RUNS);
    pad_case(dts[k], 2, (int64_t[]){3, 4}, (int64_t[]){1, 0, 2, 5}, LOOM_PAD_CONSTANT, 1, RUNS);
  }
  pad_case(LOOM_F32, 3, (int64_t[]){2, 3, 4}, (int64_t[]){0, 1, 2, 1, 0, 3}, LOOM_PAD_CONSTANT,
           -0.0, RUNS);
  pad_case(LOOM_F32, 4, (int64_t[]){2, 1, 3, 2}, (int64_t[]){1, 0, 0, 1, 0, 2, 1, 0},
           LOOM_PAD_CONSTANT, NAN, RUNS);
  pad_case(LOOM_F32, 2, (int64_t[]){3, 0}, (int64_t[]){1, 1, 1, 1}, LOOM_PAD_CONSTANT, 2.5, RUNS);
  pad_case(LOOM_F64, 2, (int64_t[]){4, 3}, (int64_t[]){0, 0, 0, 0}, LOOM_PAD_CONSTANT, 7, RUNS);
  pad_case(LOOM_F32, 2, (int64_t[]){4, 5}, (int64_t[]){-1, 2, 0, 1}, LOOM_PAD_CONSTANT, 0,
           DECLINES);
  pad_case(LOOM_F32, 2, (int64_t[]){4, 5}, (int64_t[]){1, 2, 1, 2}, LOOM_PAD_REFLECT, 0, DECLINES);
  pad_case(LOOM_F32, 2, (int64_t[]){4, 5}, (int64_t[]){1, 2, 1, 2}, LOOM_PAD_EDGE, 0, DECLINES);
}

/* softmax and log_softmax of f32 along each axis (negative ones too),
 * bit for bit: lines with NaN, +inf, a line of -inf (NaN out), values
 * far apart; f64 is the reference kernel's. */
static void softmax_case(bool log_form, loom_dtype_t dt, int rank, const int64_t *shape,
                         int64_t axis, bool eager) {
  loom_graph_t *g;
  loom_value_t x, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", dt, rank, shape, &x));
  CHECK_OK(log_form ? loom_log_softmax(g, x, axis, &y) : loom_softmax(g, x, axis, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in = test_rand_tensor(dt, rank, shape, -30, 30);
  int64_t n = loom_tensor_numel(in);
  if (dt == LOOM_F32 && n >= 12) {
    float *p = loom_tensor_data(in);
    p[1] = NAN;
    p[5] = INFINITY;
    p[7] = 80.0f;
  }
  if (dt == LOOM_F32 && rank == 2 && shape[1] >= 2 && shape[0] >= 3 && axis == 1)
    for (int64_t j = 0; j < shape[1]; j++) ((float *)loom_tensor_data(in))[2 * shape[1] + j] = -INFINITY;
  agree(g, 1, &in, 0);
  CHECK(ran_last(g) == eager);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

static void test_softmax(void) {
  for (int lf = 0; lf < 2; lf++) {
    softmax_case(lf, LOOM_F32, 2, (int64_t[]){5, 7}, 1, true);
    softmax_case(lf, LOOM_F32, 2, (int64_t[]){5, 7}, 0, true);
    softmax_case(lf, LOOM_F32, 3, (int64_t[]){3, 4, 6}, -2, true);
    softmax_case(lf, LOOM_F32, 3, (int64_t[]){3, 4, 6}, -1, true);
    softmax_case(lf, LOOM_F32, 1, (int64_t[]){9}, 0, true);
    softmax_case(lf, LOOM_F32, 2, (int64_t[]){0, 4}, 1, true);
    softmax_case(lf, LOOM_F64, 2, (int64_t[]){5, 7}, 1, false);
  }
}

/* ---- Elementwise runs in blocks --------------------------------------------- */

/* Parameter p's elements, copied. */
static float *param_copy(loom_graph_t *g, loom_value_t p, int64_t n) {
  loom_tensor_t *t;
  CHECK_OK(loom_graph_param_tensor(g, p, &t));
  float *c = malloc(sizeof *c * (size_t)n);
  memcpy(c, loom_tensor_data(t), sizeof *c * (size_t)n);
  return c;
}

static void param_set(loom_graph_t *g, loom_value_t p, const float *v, int64_t n) {
  loom_tensor_t *t;
  CHECK_OK(loom_graph_param_tensor(g, p, &t));
  memcpy(loom_tensor_data(t), v, sizeof *v * (size_t)n);
}

/* A run of elementwise nodes over rows x 300 elements (several blocks of
 * the fast interpreter's, the last one short, or one when small): scalar
 * nodes among them, nodes the eager kernels decline (pow, a cast to
 * f64: the reference kernel's, on the block), values read after the run
 * (outputs, and a sum, which ends it), a bool value, and three
 * parameters: one assigned a value that its producer computes from it
 * (written in place), one assigned a value read again, one read after
 * its value is made (neither in place). Both interpreters must give the
 * same bits, parameters included; each block runs through the nodes. */
static void block_case(int64_t rows, bool take) {
  const int64_t shape[2] = {rows, 300}, n = rows * 300;
  loom_graph_t *g;
  loom_value_t a, b, s, flag, p, q, r, c, sc, t[16];
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "a", LOOM_F32, 2, shape, &a));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F32, 2, shape, &b));
  CHECK_OK(loom_graph_input(g, "s", LOOM_F32, 0, NULL, &s));
  CHECK_OK(loom_graph_input(g, "flag", LOOM_BOOL, 0, NULL, &flag));
  loom_tensor_t *init = test_rand_tensor(LOOM_F32, 2, shape, -3, 3);
  CHECK_OK(loom_graph_param(g, "p", LOOM_F32, 2, shape, init, &p));
  CHECK_OK(loom_graph_param(g, "q", LOOM_F32, 2, shape, init, &q));
  CHECK_OK(loom_graph_param(g, "r", LOOM_F32, 2, shape, init, &r));
  CHECK_OK(loom_mul(g, a, b, &t[0]));
  CHECK_OK(loom_full(g, 0, NULL, 2.0, LOOM_F32, &c)); /* scalar nodes inside */
  CHECK_OK(loom_mul(g, s, c, &sc));
  CHECK_OK(loom_add(g, t[0], sc, &t[1]));
  CHECK_OK(loom_div(g, t[1], c, &t[2]));              /* an output */
  CHECK_OK(loom_abs(g, t[2], &t[3]));
  CHECK_OK(loom_sqrt(g, t[3], &t[4]));
  CHECK_OK(loom_where(g, flag, t[4], a, &t[5]));
  CHECK_OK(loom_pow(g, t[5], c, &t[6]));              /* the reference's kernel */
  CHECK_OK(loom_maximum(g, t[6], b, &t[7]));
  CHECK_OK(loom_gt(g, t[7], a, &t[8]));               /* bool, an output */
  CHECK_OK(loom_where(g, t[8], t[7], p, &t[9]));
  CHECK_OK(loom_assign(g, p, t[9]));                  /* read p later: not in place */
  CHECK_OK(loom_assign(g, q, t[6]));                  /* read again: not in place */
  CHECK_OK(loom_add(g, p, a, &t[10]));
  CHECK_OK(loom_mul(g, r, t[10], &t[11]));
  CHECK_OK(loom_where(g, flag, t[11], r, &t[12]));
  CHECK_OK(loom_assign(g, r, t[12]));                 /* in place, from r itself */
  CHECK_OK(loom_cast(g, t[7], LOOM_F64, &t[13]));
  CHECK_OK(loom_sum(g, t[13], 0, NULL, 0, &t[14]));   /* reads t[13] after the run */
  CHECK_OK(loom_graph_output(g, t[2]));
  CHECK_OK(loom_graph_output(g, t[8]));
  CHECK_OK(loom_graph_output(g, t[14]));
  loom_tensor_t *in[4] = {test_rand_tensor(LOOM_F32, 2, shape, -3, 3),
                          test_rand_tensor(LOOM_F32, 2, shape, -3, 3),
                          test_tensor(LOOM_F32, 0, NULL, (double[]){0.75}),
                          test_tensor(LOOM_BOOL, 0, NULL, (double[]){take})};
  loom_value_t params[3] = {p, q, r};
  float *start = param_copy(g, p, n), *want[3];
  loom_tensor_t *out_want[3], *out_got[3];
  CHECK_OK(loom_interpret(g, 4, in, 3, out_want));
  for (int k = 0; k < 3; k++) {
    want[k] = param_copy(g, params[k], n);
    param_set(g, params[k], start, n);
  }
  CHECK_OK(rt_interpret(g, 4, in, 3, out_got, counting_cpu(), pool));
  int64_t blocks = (n + 4095) / 4096;
  CHECK(eager_ran[IR_OP_DIV] == (n > 4096 ? blocks : 1)); /* each block through the node */
  CHECK(eager_ran[IR_OP_MUL] == (n > 4096 ? 2 * blocks : 2) + 1); /* and s * 2 once */
  for (int k = 0; k < 3; k++) {
    int64_t m = loom_tensor_numel(out_want[k]);
    CHECK(loom_tensor_numel(out_got[k]) == m && loom_tensor_dtype(out_got[k]) == loom_tensor_dtype(out_want[k]));
    for (int64_t i = 0; i < m; i++) {
      double x = test_get(out_got[k], i), y = test_get(out_want[k], i);
      CHECK((x == y && signbit(x) == signbit(y)) || (isnan(x) && isnan(y)));
    }
    float *got = param_copy(g, params[k], n);
    CHECK(!memcmp(got, want[k], sizeof *got * (size_t)n));
    free(got);
    free(want[k]);
    loom_tensor_destroy(out_want[k]);
    loom_tensor_destroy(out_got[k]);
  }
  free(start);
  for (int k = 0; k < 4; k++) loom_tensor_destroy(in[k]);
  loom_tensor_destroy(init);
  loom_graph_destroy(g);
}

static void test_block_runs(void) {
  for (int take = 0; take < 2; take++) {
    block_case(37, take); /* 11100 elements: blocks of 4096, 4096, 2908 */
    block_case(13, take); /* 3900: one block */
    block_case(1, take);  /* 300: one block of its size */
    block_case(82, take); /* 24600: a short last block of 24 */
  }
}

/* With threads lent (2 and 3: blocks split unevenly), the block runs and
 * matmuls give the same results as on one thread; a run of 15 blocks is
 * split (some blocks run on the pool's threads, in one of a few tries),
 * short ones are not. */
/* ---- Convolutions and pools ---------------------------------------------- */

typedef enum { CONV, CONV_T, CONV_WGRAD } conv_kind_t;

/* One convolution node over random inputs (x, then w or dy, then a bias
 * when has_bias), against the reference within f32 rounding. */
static void conv_case(conv_kind_t kind, const int64_t *xs, const int64_t *ws, bool has_bias,
                      const loom_conv_params_t *p) {
  loom_graph_t *g;
  loom_value_t x, w, b = {0}, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, xs, &x));
  CHECK_OK(loom_graph_input(g, "w", LOOM_F32, 4, ws, &w));
  int64_t nb = kind == CONV ? ws[0] : ws[1] * (p->groups ? p->groups : 1);
  if (has_bias) CHECK_OK(loom_graph_input(g, "b", LOOM_F32, 1, &nb, &b));
  if (kind == CONV) CHECK_OK(loom_conv2d(g, x, w, has_bias, b, p, &y));
  else if (kind == CONV_T) CHECK_OK(loom_conv_transpose2d(g, x, w, has_bias, b, p, &y));
  else CHECK_OK(loom_conv2d_weight_grad(g, x, w, (int64_t[]){3, 3}, p, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in[3] = {test_rand_tensor(LOOM_F32, 4, xs, -1, 1),
                          test_rand_tensor(LOOM_F32, 4, ws, -1, 1),
                          has_bias ? test_rand_tensor(LOOM_F32, 1, &nb, -1, 1) : NULL};
  agree_within(g, has_bias ? 3 : 2, in, 1e-4, 1e-4);
  CHECK(ran_last(g));
  for (int i = 0; i < 3; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}

static void test_conv(void) {
  loom_conv_params_t plain = {0}, strided = {.stride = {2, 2}, .pads = {1, 0, 2, 1}},
                     dilated = {.pads = {2, 2, 2, 2}, .dilation = {2, 2}},
                     grouped = {.stride = {2, 1}, .pads = {1, 1, 1, 1}, .groups = 2};
  conv_case(CONV, (int64_t[]){2, 3, 9, 11}, (int64_t[]){5, 3, 3, 3}, true, &plain);
  conv_case(CONV, (int64_t[]){3, 4, 13, 8}, (int64_t[]){6, 4, 3, 3}, false, &strided);
  conv_case(CONV, (int64_t[]){1, 3, 10, 10}, (int64_t[]){4, 3, 3, 3}, true, &dilated);
  conv_case(CONV, (int64_t[]){2, 4, 7, 9}, (int64_t[]){6, 2, 3, 3}, true, &grouped);
  conv_case(CONV, (int64_t[]){0, 3, 9, 11}, (int64_t[]){5, 3, 3, 3}, true, &plain); /* empty */
  loom_conv_params_t up = {.stride = {2, 2}, .pads = {1, 1, 1, 1}, .output_padding = {1, 0}};
  conv_case(CONV_T, (int64_t[]){2, 4, 5, 6}, (int64_t[]){4, 3, 3, 3}, true, &up);
  loom_conv_params_t up_grouped = {.stride = {1, 2}, .groups = 2};
  conv_case(CONV_T, (int64_t[]){1, 4, 5, 5}, (int64_t[]){4, 2, 3, 3}, false, &up_grouped);
  /* dy (2, 5, 4, 5) of a stride-2 conv2d of x (2, 3, 9, 11) with pads 1 */
  loom_conv_params_t wg = {.stride = {2, 2}, .pads = {1, 1, 1, 1}};
  conv_case(CONV_WGRAD, (int64_t[]){2, 3, 9, 11}, (int64_t[]){2, 5, 5, 6}, false, &wg);
}

/* A pool over x (2, 3, 7, 9) holding a NaN, infinities and ties, bit for
 * bit the reference's. */
static void pool_case(bool max, const loom_pool_params_t *p) {
  int64_t xs[4] = {2, 3, 7, 9};
  loom_graph_t *g;
  loom_value_t x, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, xs, &x));
  CHECK_OK(max ? loom_max_pool2d(g, x, p, &y) : loom_avg_pool2d(g, x, p, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in = test_rand_tensor(LOOM_F32, 4, xs, -3, 3);
  float *v = loom_tensor_data(in);
  for (int64_t i = 0; i < loom_tensor_numel(in); i += 7) v[i] = roundf(v[i]);
  v[10] = NAN, v[70] = INFINITY, v[100] = -INFINITY;
  agree(g, 1, &in, 0);
  CHECK(ran_last(g));
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

static void test_pools(void) {
  for (int max = 0; max < 2; max++) {
    pool_case(max, &(loom_pool_params_t){.kernel = {2, 2}});
    pool_case(max, &(loom_pool_params_t){.kernel = {3, 2}, .stride = {2, 3}, .pads = {1, 1, 1, 0}});
    pool_case(max, &(loom_pool_params_t){.kernel = {3, 3}, .stride = {1, 1},
                                         .pads = {1, 1, 1, 1}, .count_include_pad = 1});
  }
  pool_case(true, &(loom_pool_params_t){.kernel = {2, 3}, .stride = {1, 2}, .dilation = {2, 2}});
  /* taps that fall on padding at both ends of a row, a stride past the kernel */
  for (int max = 0; max < 2; max++)
    pool_case(max, &(loom_pool_params_t){.kernel = {5, 4}, .stride = {4, 5},
                                         .pads = {2, 2, 2, 2}});
}

static void test_pooled(void) {
  for (int threads = 2; threads <= 3; threads++) {
    CHECK_OK(core_pool_create(threads, &pool));
    test_block_runs();
    CHECK(off_main == 0);
    /* 60000 elements; a worker that wakes late finds the blocks taken (a
     * loaded machine), so a few tries */
    for (int i = 0; i < 50 && off_main == 0; i++) block_case(200, true);
    CHECK(off_main > 0);
    test_matmul();
    test_conv();
    test_pools();
    matmul_case(2, (int64_t[]){300, 256}, 2, (int64_t[]){256, 300}, 0, 0); /* split */
    matmul_case(3, (int64_t[]){4, 130, 96}, 3, (int64_t[]){4, 130, 70}, 1, 0);
    off_main = 0;
    core_pool_destroy(pool);
    pool = NULL;
  }
}

/* cast between bool, i32, i64 and f32 (and f32 to itself) runs eagerly,
 * byte for byte the reference's: NaN, infinities and values past int64's
 * range (saturated), fractions both sides of zero (truncated), an int64
 * that rounds differently through double on the way to f32 (2^62 + 2^38
 * + 1: the reference rounds twice), and integers
 * that wrap into i32; other pairs (f64 here) stay the reference's. */
static void test_cast(void) {
  const loom_dtype_t dts[] = {LOOM_BOOL, LOOM_I32, LOOM_I64, LOOM_F32, LOOM_F64};
  const double floats[] = {0.0, -0.0, 1.5, -1.5, -0.7, 2.5e9, -3e19, 3e19, NAN, INFINITY,
                           -INFINITY, 1e-40, 7, 16777217};
  const int64_t ints[] = {0, 1, -1, 2, 255, -129, INT64_C(2147483648), INT64_C(-2147483649),
                          (INT64_C(1) << 53) + 1, INT64_MAX, INT64_MIN, 16777217,
                          (INT64_C(1) << 62) + (INT64_C(1) << 38) + 1, -5};
  enum { N = 14 };
  for (size_t a = 0; a < sizeof dts / sizeof *dts; a++)
    for (size_t b = 0; b < sizeof dts / sizeof *dts; b++) {
      loom_dtype_t from = dts[a], to = dts[b];
      loom_graph_t *g;
      loom_value_t x, y;
      CHECK_OK(loom_graph_create(&g));
      CHECK_OK(loom_graph_input(g, "x", from, 1, (loom_dim_t[]){N}, &x));
      CHECK_OK(loom_cast(g, x, to, &y));
      CHECK_OK(loom_graph_output(g, y));
      loom_tensor_t *in;
      CHECK_OK(loom_tensor_create(from, 1, (int64_t[]){N}, &in));
      void *d = loom_tensor_data(in);
      for (int i = 0; i < N; i++) {
        switch (from) {
          case LOOM_BOOL: ((uint8_t *)d)[i] = (uint8_t)(i % 3 == 1); break;
          case LOOM_I32: ((int32_t *)d)[i] = (int32_t)ints[i]; break;
          case LOOM_I64: ((int64_t *)d)[i] = ints[i]; break;
          case LOOM_F32: ((float *)d)[i] = (float)floats[i]; break;
          default: ((double *)d)[i] = floats[i]; break;
        }
      }
      loom_tensor_t *want = NULL, *got = NULL;
      CHECK_OK(loom_interpret(g, 1, &in, 1, &want));
      CHECK_OK(rt_interpret(g, 1, &in, 1, &got, counting_cpu(), pool));
      size_t bytes = (size_t)N * loom_dtype_size(to);
      CHECK(want && got && memcmp(loom_tensor_data(want), loom_tensor_data(got), bytes) == 0);
      bool fast = from != LOOM_F64 && to != LOOM_F64 && !(from == to && from != LOOM_F32) &&
                  !(from == LOOM_BOOL && to == LOOM_I32) && !(from == LOOM_I32 && to == LOOM_BOOL) &&
                  !(from == LOOM_F32 && to == LOOM_I32);
      CHECK(ran_last(g) == fast);
      loom_tensor_destroy(want);
      loom_tensor_destroy(got);
      loom_tensor_destroy(in);
      loom_graph_destroy(g);
    }
}

int main(void) {
  test_seed(17);
  main_thread = pthread_self();
  TEST_RUN(test_binary_broadcasts);
  TEST_RUN(test_mod);
  TEST_RUN(test_shift_edges);
  TEST_RUN(test_compare);
  TEST_RUN(test_where);
  TEST_RUN(test_unary);
  TEST_RUN(test_math_instances);
  TEST_RUN(test_f32_instances);
  TEST_RUN(test_sum_rows_instances);
  TEST_RUN(test_matmul);
  TEST_RUN(test_conv);
  TEST_RUN(test_pools);
  TEST_RUN(test_movement);
  TEST_RUN(test_expand);
  TEST_RUN(test_cast);
  TEST_RUN(test_reshape_takes_over);
  TEST_RUN(test_gather);
  TEST_RUN(test_index_select_embedding);
  TEST_RUN(test_scatter_add);
  TEST_RUN(test_scatter_add_column);
  TEST_RUN(test_reduce);
  TEST_RUN(test_pad);
  TEST_RUN(test_softmax);
  TEST_RUN(test_block_runs);
  TEST_RUN(test_pooled);
  return test_summary();
}
