/* Generators (arange, full), the Philox random ops, dropout and nonzero. */
#include <stdbool.h>
#include <string.h>

#include "core/philox.h"
#include "harness.h"

static const loom_dtype_t float_dtypes[] = {LOOM_F32, LOOM_F64, LOOM_F16,
                                            LOOM_BF16};
static const loom_dtype_t numeric_dtypes[] = {LOOM_F32, LOOM_F64, LOOM_F16,
                                              LOOM_BF16, LOOM_I8, LOOM_I32,
                                              LOOM_I64};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static loom_tensor_t *scalar_i64(int64_t v) {
  loom_tensor_t *t = NULL;
  CHECK_OK(loom_tensor_from_data(LOOM_I64, 0, NULL, &v, sizeof v, &t));
  return t;
}

/* Element i of the uniform stream, straight from the raw block function
 * and the mapping documented in core/philox.h. */
static uint32_t raw_word(uint64_t seed, uint64_t offset, uint64_t i) {
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint64_t b = i / 4;
  uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)offset,
                     (uint32_t)(offset >> 32)};
  return philox4x32_10(ctr, key).w[i % 4];
}

static double raw_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  return (double)(raw_word(seed, offset, i) >> 8) / 16777216.0;
}

static double raw_normal(uint64_t seed, uint64_t offset, uint64_t i) {
  uint64_t first = i / 4 * 4 + (i / 2 % 2) * 2; /* the pair's first word */
  double u1 = 1.0 - raw_uniform(seed, offset, first);
  double u2 = raw_uniform(seed, offset, first + 1);
  double r = sqrt(-2.0 * log(u1));
  return i % 2 ? r * sin(2 * M_PI * u2) : r * cos(2 * M_PI * u2);
}

/* ---- Philox ------------------------------------------------------------- */

static void philox_known_answers(void) {
  /* Random123's kat_vectors for philox4x32_10. */
  static const uint32_t ctr[3][4] = {
      {0, 0, 0, 0},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}};
  static const uint32_t key[3][2] = {
      {0, 0}, {0xffffffff, 0xffffffff}, {0xa4093822, 0x299f31d0}};
  static const uint32_t want[3][4] = {
      {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};
  for (int k = 0; k < 3; k++) {
    philox_block_t b = philox4x32_10(ctr[k], key[k]);
    for (int w = 0; w < 4; w++) CHECK(b.w[w] == want[k][w]);
  }
}

static void philox_stream_mapping(void) {
  /* Block 2^32 + 5 of seed/offset with every half distinct. */
  uint64_t seed = 0x0123456789abcdefull, offset = 0xfedcba9876543210ull;
  uint32_t ctr[4] = {5, 1, 0x76543210u, 0xfedcba98u};
  uint32_t key[2] = {0x89abcdefu, 0x01234567u};
  philox_block_t want = philox4x32_10(ctr, key);
  philox_block_t got = philox_stream_block(seed, offset, ((uint64_t)1 << 32) + 5);
  for (int w = 0; w < 4; w++) CHECK(got.w[w] == want.w[w]);
  uint64_t i = (((uint64_t)1 << 32) + 5) * 4 + 3;
  CHECK(philox_uniform(seed, offset, i) == (double)(want.w[3] >> 8) / 16777216.0);
  CHECK(philox_word_uniform(0xffffffffu) == 1.0 - 0x1p-24);
  CHECK(philox_word_uniform(0xffu) == 0.0);
  for (uint64_t j = 0; j < 8; j++)
    CHECK_NEAR(philox_normal(seed, offset, j), raw_normal(seed, offset, j), 0, 1e-15);
}

/* ---- arange ------------------------------------------------------------- */

/* Runs arange and checks it against want (n values). */
static void check_arange(double start, double limit, double delta,
                         loom_dtype_t dtype, const double *want, int64_t n) {
  loom_graph_t *g;
  loom_value_t y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_arange(g, start, limit, delta, dtype, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_dim_t dim = -1;
  int rank = -1;
  CHECK_OK(loom_value_type(g, y, NULL, &rank, &dim));
  CHECK(rank == 1 && dim == n);
  loom_tensor_t *out = test_run1(g, 0, NULL);
  CHECK(loom_tensor_dtype(out) == dtype);
  CHECK_TENSOR(out, want, n, 0, test_rtol(dtype, 1));
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

static void arange_values(void) {
  double ints[] = {-2, -1, 0, 1, 2};
  for (int k = 0; k < COUNT(numeric_dtypes); k++)
    check_arange(-2, 3, 1, numeric_dtypes[k], ints, 5);
  double quarters[] = {1, 1.25, 1.5, 1.75};
  check_arange(1, 2, 0.25, LOOM_F64, quarters, 4);
  check_arange(1, 2, 0.25, LOOM_BF16, quarters, 4);
  double down[] = {5, 3, 1};
  check_arange(5, 0, -2, LOOM_I32, down, 3);
  check_arange(5, 0.5, -2, LOOM_I8, down, 3);
  /* ceil((1 - 0) / 0.3) = 4 elements; the last is 0.9 (< limit). */
  double tenths[] = {0, 0.3, 0.6, 0.9};
  check_arange(0, 1, 0.3, LOOM_F64, tenths, 4);
  /* Computed in double, then converted: integers truncate. */
  double trunc[] = {0, 0, 1, 2};
  check_arange(0, 3, 0.75, LOOM_I32, trunc, 4);
  double neg_trunc[] = {0, 0, -1, -2};
  check_arange(0, -3, -0.75, LOOM_I64, neg_trunc, 4);
}

static void arange_empty(void) {
  check_arange(0, 0, 1, LOOM_F32, NULL, 0);
  check_arange(3, 1, 1, LOOM_F32, NULL, 0);   /* clamped at 0 */
  check_arange(1, 3, -1, LOOM_I64, NULL, 0);
}

static void arange_errors(void) {
  loom_graph_t *g;
  loom_value_t y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_ERR(loom_arange(g, 0, 5, 0, LOOM_F32, &y), LOOM_ERR_INVALID, "delta");
  CHECK_ERR(loom_arange(g, 0, INFINITY, 1, LOOM_F32, &y), LOOM_ERR_INVALID, "finite");
  CHECK_ERR(loom_arange(g, NAN, 1, 1, LOOM_F32, &y), LOOM_ERR_INVALID, "arange");
  CHECK_ERR(loom_arange(g, 0, 1e300, 1e-300, LOOM_F32, &y), LOOM_ERR_INVALID, "too many");
  CHECK_ERR(loom_arange(g, 0, 5, 1, LOOM_BOOL, &y), LOOM_ERR_DTYPE, "bool");
  CHECK_ERR(loom_arange(g, 0, 5, 1, (loom_dtype_t)99, &y), LOOM_ERR_DTYPE, "99");
  CHECK_ERR(loom_arange(NULL, 0, 5, 1, LOOM_F32, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_arange(g, 0, 5, 1, LOOM_F32, NULL), LOOM_ERR_INVALID, "null");
  CHECK(loom_graph_num_nodes(g) == 0);
  loom_graph_destroy(g);
}

/* ---- full --------------------------------------------------------------- */

static void full_every_dtype(void) {
  static const loom_dtype_t all[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16,
                                     LOOM_I8,  LOOM_I32, LOOM_I64, LOOM_BOOL};
  for (int k = 0; k < COUNT(all); k++) {
    loom_graph_t *g;
    loom_value_t y;
    CHECK_OK(loom_graph_create(&g));
    loom_dim_t shape[] = {2, 3};
    CHECK_OK(loom_full(g, 2, shape, 7, all[k], &y));
    CHECK_OK(loom_graph_output(g, y));
    loom_tensor_t *out = test_run1(g, 0, NULL);
    double v = all[k] == LOOM_BOOL ? 1 : 7;
    double want[6] = {v, v, v, v, v, v};
    CHECK(loom_tensor_dtype(out) == all[k]);
    CHECK(loom_tensor_rank(out) == 2 && loom_tensor_dim(out, 1) == 3);
    CHECK_TENSOR(out, want, 6, 0, 0);
    loom_tensor_destroy(out);
    loom_graph_destroy(g);
  }
}

/* Runs a one-node graph with no inputs and returns its output. */
static loom_tensor_t *run_full(int rank, const loom_dim_t *shape, double value,
                               loom_dtype_t dtype) {
  loom_graph_t *g;
  loom_value_t y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_full(g, rank, shape, value, dtype, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *out = test_run1(g, 0, NULL);
  loom_graph_destroy(g);
  return out;
}

static void full_conversions(void) {
  loom_dim_t shape[] = {1};
  struct { double value; loom_dtype_t dtype; double want; } cases[] = {
      {2.75, LOOM_I32, 2},     {-2.75, LOOM_I8, -2},   {1000, LOOM_I8, 127},
      {0.5, LOOM_BOOL, 1},     {0, LOOM_BOOL, 0},      {NAN, LOOM_I64, 0},
      {1.0 / 3, LOOM_BF16, 0.333984375}, {65520, LOOM_F16, INFINITY},
      {-INFINITY, LOOM_F32, -INFINITY},  {NAN, LOOM_F64, NAN},
  };
  for (int k = 0; k < COUNT(cases); k++) {
    loom_tensor_t *out = run_full(1, shape, cases[k].value, cases[k].dtype);
    CHECK_TENSOR(out, &cases[k].want, 1, 0, 0);
    loom_tensor_destroy(out);
  }
  loom_tensor_t *s = run_full(0, NULL, -4.5, LOOM_F32);
  double want = -4.5;
  CHECK(loom_tensor_rank(s) == 0);
  CHECK_TENSOR(s, &want, 1, 0, 0);
  loom_tensor_destroy(s);
  loom_dim_t zero[] = {3, 0};
  loom_tensor_t *e = run_full(2, zero, 1, LOOM_F32);
  CHECK(loom_tensor_numel(e) == 0 && loom_tensor_dim(e, 0) == 3);
  loom_tensor_destroy(e);
}

static void full_symbolic_shape(void) {
  loom_graph_t *g;
  loom_value_t x, y;
  loom_dim_t n, n1;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_add(g, n, 1, &n1));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, &n, &x));
  loom_dim_t shape[] = {n1, 2};
  CHECK_OK(loom_full(g, 2, shape, 1.5, LOOM_F64, &y));
  loom_dim_t dims[2];
  CHECK_OK(loom_value_type(g, y, NULL, NULL, dims));
  CHECK(dims[0] == n1 && dims[1] == 2);
  CHECK_OK(loom_graph_output(g, y));
  int64_t xs[] = {3};
  loom_tensor_t *in = test_rand_tensor(LOOM_F32, 1, xs, -1, 1);
  loom_tensor_t *out = test_run1(g, 1, &in);
  double want[8] = {1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5};
  CHECK(loom_tensor_dim(out, 0) == 4 && loom_tensor_dim(out, 1) == 2);
  CHECK_TENSOR(out, want, 8, 0, 0);
  loom_tensor_destroy(in);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

static void full_errors(void) {
  loom_graph_t *g;
  loom_value_t y;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t shape[LOOM_MAX_RANK + 1] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  CHECK_ERR(loom_full(g, LOOM_MAX_RANK + 1, shape, 0, LOOM_F32, &y), LOOM_ERR_SHAPE, "rank 9");
  CHECK_ERR(loom_full(g, -1, shape, 0, LOOM_F32, &y), LOOM_ERR_SHAPE, "rank -1");
  CHECK_ERR(loom_full(g, 2, NULL, 0, LOOM_F32, &y), LOOM_ERR_INVALID, "null");
  loom_dim_t bad[] = {2, -3};
  CHECK_ERR(loom_full(g, 2, bad, 0, LOOM_F32, &y), LOOM_ERR_SHAPE, "-3");
  /* A handle that is no symbol of this graph. */
  loom_dim_t stranger[] = {(loom_dim_t)(INT64_MIN / 2 + 12345)};
  CHECK_ERR(loom_full(g, 1, stranger, 0, LOOM_F32, &y), LOOM_ERR_SHAPE, "symbol");
  CHECK_ERR(loom_full(g, 2, shape, 0, (loom_dtype_t)-1, &y), LOOM_ERR_DTYPE, "full");
  CHECK_ERR(loom_full(NULL, 2, shape, 0, LOOM_F32, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_full(g, 2, shape, 0, LOOM_F32, NULL), LOOM_ERR_INVALID, "null");
  loom_graph_destroy(g);
}

/* ---- random_uniform / random_normal ------------------------------------- */

typedef struct random_spec {
  bool normal;
  int rank;
  loom_dim_t shape[4];
  double a, b; /* low, high or mean, std */
  loom_dtype_t dtype;
} random_spec_t;

/* Builds seed, offset -> random op, runs it with (seed, offset). */
static loom_tensor_t *run_random(const random_spec_t *r, int64_t seed,
                                 int64_t offset) {
  loom_graph_t *g;
  loom_value_t s, o, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "seed", LOOM_I64, 0, NULL, &s));
  CHECK_OK(loom_graph_input(g, "offset", LOOM_I64, 0, NULL, &o));
  if (r->normal)
    CHECK_OK(loom_random_normal(g, s, o, r->rank, r->shape, r->a, r->b, r->dtype, &y));
  else
    CHECK_OK(loom_random_uniform(g, s, o, r->rank, r->shape, r->a, r->b, r->dtype, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in[2] = {scalar_i64(seed), scalar_i64(offset)};
  loom_tensor_t *out = test_run1(g, 2, in);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(g);
  return out;
}

static bool same_bytes(const loom_tensor_t *a, const loom_tensor_t *b) {
  size_t n = (size_t)loom_tensor_numel(a) * loom_dtype_size(loom_tensor_dtype(a));
  return a && b && loom_tensor_numel(a) == loom_tensor_numel(b) &&
         memcmp(loom_tensor_data(a), loom_tensor_data(b), n) == 0;
}

/* Fraction of elements that differ. */
static double differ_fraction(const loom_tensor_t *a, const loom_tensor_t *b) {
  int64_t n = loom_tensor_numel(a), d = 0;
  for (int64_t i = 0; i < n; i++) d += test_get(a, i) != test_get(b, i);
  return n ? (double)d / (double)n : 0;
}

static void random_matches_philox(void) {
  random_spec_t u = {false, 2, {3, 5}, -2, 3, LOOM_F64};
  loom_tensor_t *t = run_random(&u, 42, 7);
  for (int64_t i = 0; i < 15; i++)
    CHECK_NEAR(test_get(t, i), -2 + 5 * raw_uniform(42, 7, (uint64_t)i), 0, 1e-15);
  loom_tensor_destroy(t);
  random_spec_t n = {true, 1, {9}, 3, 2, LOOM_F64};
  t = run_random(&n, -1, 1LL << 40);
  for (int64_t i = 0; i < 9; i++)
    CHECK_NEAR(test_get(t, i), 3 + 2 * raw_normal(UINT64_MAX, 1ull << 40, (uint64_t)i), 1e-12, 1e-12);
  loom_tensor_destroy(t);
}

static void random_replay(void) {
  for (int normal = 0; normal < 2; normal++) {
    random_spec_t r = {normal, 2, {16, 16}, 0, 1, LOOM_F32};
    loom_tensor_t *a = run_random(&r, 1234, 0);
    loom_tensor_t *b = run_random(&r, 1234, 0);
    loom_tensor_t *c = run_random(&r, 1234, 1);
    loom_tensor_t *d = run_random(&r, 1235, 0);
    CHECK(same_bytes(a, b));
    CHECK(differ_fraction(a, c) > 0.99);
    CHECK(differ_fraction(a, d) > 0.99);
    loom_tensor_destroy(a);
    loom_tensor_destroy(b);
    loom_tensor_destroy(c);
    loom_tensor_destroy(d);
  }
}

/* Sample mean and (population) variance of t. */
static void moments(const loom_tensor_t *t, double *mean, double *var) {
  int64_t n = loom_tensor_numel(t);
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < n; i++) s += test_get(t, i);
  *mean = s / (double)n;
  for (int64_t i = 0; i < n; i++) {
    double d = test_get(t, i) - *mean;
    s2 += d * d;
  }
  *var = s2 / (double)n;
}

static void uniform_statistics(void) {
  const double n = 100000;
  random_spec_t r = {false, 2, {400, 250}, 0, 1, LOOM_F64};
  loom_tensor_t *t = run_random(&r, 2024, 3);
  double mean, var;
  moments(t, &mean, &var);
  /* 5 sigma: Var(U) = 1/12; Var((U - 1/2)^2) = 1/80 - 1/144 = 1/180. */
  CHECK_NEAR(mean, 0.5, 5 * sqrt(1.0 / 12 / n), 0);
  CHECK_NEAR(var, 1.0 / 12, 5 * sqrt(1.0 / 180 / n), 0);
  loom_tensor_destroy(t);
}

static void normal_statistics(void) {
  const double n = 100000;
  random_spec_t r = {true, 1, {100000}, 0, 1, LOOM_F64};
  loom_tensor_t *t = run_random(&r, 99, 0);
  double mean, var;
  moments(t, &mean, &var);
  /* 5 sigma: Var(Z) = 1; Var(Z^2) = 2. */
  CHECK_NEAR(mean, 0, 5 * sqrt(1 / n), 0);
  CHECK_NEAR(var, 1, 5 * sqrt(2 / n), 0);
  int64_t beyond = 0; /* P(|Z| > 2) = 0.0455 */
  for (int64_t i = 0; i < 100000; i++) beyond += fabs(test_get(t, i)) > 2;
  CHECK_NEAR(beyond / n, 0.0455003, 5 * sqrt(0.0455 * 0.9545 / n), 0);
  loom_tensor_destroy(t);
  random_spec_t s = {true, 1, {100000}, 3, 2, LOOM_F32};
  t = run_random(&s, 5, 5);
  moments(t, &mean, &var);
  CHECK_NEAR(mean, 3, 5 * 2 * sqrt(1 / n), 0);
  CHECK_NEAR(sqrt(var), 2, 2 * 5 * sqrt(2 / n) / 2, 0);
  loom_tensor_destroy(t);
}

static void random_every_float_dtype(void) {
  for (int k = 0; k < COUNT(float_dtypes); k++) {
    loom_dtype_t dt = float_dtypes[k];
    random_spec_t u = {false, 1, {20000}, -2, 3, dt};
    loom_tensor_t *t = run_random(&u, 11, 0);
    CHECK(loom_tensor_dtype(t) == dt);
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < 20000; i++) {
      double v = test_get(t, i);
      lo = fmin(lo, v);
      hi = fmax(hi, v);
    }
    CHECK(lo >= -2 && hi < 3);
    CHECK(lo < -1.9 && hi > 2.9); /* and they fill the interval */
    for (int64_t i = 0; i < 8; i++)
      CHECK_NEAR(test_get(t, i), -2 + 5 * raw_uniform(11, 0, (uint64_t)i), 1e-7,
                 test_rtol(dt, 1));
    loom_tensor_destroy(t);
    random_spec_t n = {true, 1, {64}, 1, 0.5, dt};
    t = run_random(&n, 11, 0);
    for (int64_t i = 0; i < 64; i++)
      CHECK_NEAR(test_get(t, i), 1 + 0.5 * raw_normal(11, 0, (uint64_t)i), 1e-6,
                 test_rtol(dt, 2));
    loom_tensor_destroy(t);
  }
}

/* In [0, 1), u = 1 - 2^-24 rounds up to 1 in f16 and bf16: the kernel
 * must still stay below high. */
static void uniform_narrow_dtype_bounds(void) {
  loom_dtype_t narrow[] = {LOOM_F16, LOOM_BF16};
  for (int k = 0; k < 2; k++) {
    random_spec_t r = {false, 1, {100000}, 0, 1, narrow[k]};
    loom_tensor_t *t = run_random(&r, 77, 0);
    double hi = 0;
    for (int64_t i = 0; i < 100000; i++) hi = fmax(hi, test_get(t, i));
    CHECK(hi < 1);
    CHECK(hi == (narrow[k] == LOOM_F16 ? 1 - 0x1p-11 : 1 - 0x1p-8));
    loom_tensor_destroy(t);
  }
}

static void random_symbolic_shape(void) {
  loom_graph_t *g;
  loom_value_t s, o, x, y;
  loom_dim_t n;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_graph_input(g, "seed", LOOM_I32, 0, NULL, &s));
  CHECK_OK(loom_graph_input(g, "offset", LOOM_I8, 0, NULL, &o));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, &n, &x));
  loom_dim_t shape[] = {2, n};
  CHECK_OK(loom_random_uniform(g, s, o, 2, shape, 0, 1, LOOM_F32, &y));
  CHECK_OK(loom_graph_output(g, y));
  int32_t seed = 42;
  int8_t offset = 7;
  int64_t xs[] = {5};
  loom_tensor_t *in[3];
  CHECK_OK(loom_tensor_from_data(LOOM_I32, 0, NULL, &seed, sizeof seed, &in[0]));
  CHECK_OK(loom_tensor_from_data(LOOM_I8, 0, NULL, &offset, sizeof offset, &in[1]));
  in[2] = test_rand_tensor(LOOM_F32, 1, xs, 0, 1);
  loom_tensor_t *out = test_run1(g, 3, in);
  CHECK(loom_tensor_dim(out, 0) == 2 && loom_tensor_dim(out, 1) == 5);
  for (int64_t i = 0; i < 10; i++)
    CHECK_NEAR(test_get(out, i), raw_uniform(42, 7, (uint64_t)i), 0, 1e-7);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(in[i]);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

static void random_errors(void) {
  loom_graph_t *g;
  loom_value_t s, o, f, v, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "seed", LOOM_I64, 0, NULL, &s));
  CHECK_OK(loom_graph_input(g, "offset", LOOM_I64, 0, NULL, &o));
  CHECK_OK(loom_graph_input(g, "f", LOOM_F32, 0, NULL, &f));
  int64_t one = 1;
  CHECK_OK(loom_graph_input(g, "v", LOOM_I64, 1, &one, &v));
  loom_dim_t shape[] = {4};
  CHECK_ERR(loom_random_uniform(g, s, o, 1, shape, 0, 1, LOOM_I32, &y), LOOM_ERR_DTYPE, "i32");
  CHECK_ERR(loom_random_normal(g, s, o, 1, shape, 0, 1, LOOM_BOOL, &y), LOOM_ERR_DTYPE, "bool");
  CHECK_ERR(loom_random_uniform(g, f, o, 1, shape, 0, 1, LOOM_F32, &y), LOOM_ERR_DTYPE, "f32");
  CHECK_ERR(loom_random_uniform(g, s, f, 1, shape, 0, 1, LOOM_F32, &y), LOOM_ERR_DTYPE, "offset");
  CHECK_ERR(loom_random_normal(g, v, o, 1, shape, 0, 1, LOOM_F32, &y), LOOM_ERR_SHAPE, "seed");
  CHECK_ERR(loom_random_normal(g, s, v, 1, shape, 0, 1, LOOM_F32, &y), LOOM_ERR_SHAPE, "scalar");
  CHECK_ERR(loom_random_uniform(g, s, o, 1, shape, 1, 1, LOOM_F32, &y), LOOM_ERR_INVALID, "low < high");
  CHECK_ERR(loom_random_uniform(g, s, o, 1, shape, 0, INFINITY, LOOM_F32, &y), LOOM_ERR_INVALID, "finite");
  CHECK_ERR(loom_random_normal(g, s, o, 1, shape, 0, -1, LOOM_F32, &y), LOOM_ERR_INVALID, "std");
  CHECK_ERR(loom_random_normal(g, s, o, 1, shape, NAN, 1, LOOM_F32, &y), LOOM_ERR_INVALID, "mean");
  loom_dim_t bad[] = {-2};
  CHECK_ERR(loom_random_uniform(g, s, o, 1, bad, 0, 1, LOOM_F32, &y), LOOM_ERR_SHAPE, "-2");
  CHECK_ERR(loom_random_uniform(g, s, o, 9, shape, 0, 1, LOOM_F32, &y), LOOM_ERR_SHAPE, "rank");
  CHECK_ERR(loom_random_uniform(g, s, o, 1, NULL, 0, 1, LOOM_F32, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_random_uniform(NULL, s, o, 1, shape, 0, 1, LOOM_F32, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_random_normal(g, s, o, 1, shape, 0, 1, LOOM_F32, NULL), LOOM_ERR_INVALID, "null");
  CHECK(loom_graph_num_nodes(g) == 0);
  /* std 0 is allowed: every element is the mean. */
  random_spec_t r = {true, 1, {5}, 2.5, 0, LOOM_F32};
  loom_tensor_t *t = run_random(&r, 1, 1);
  double want[5] = {2.5, 2.5, 2.5, 2.5, 2.5};
  CHECK_TENSOR(t, want, 5, 0, 0);
  loom_tensor_destroy(t);
  loom_graph_destroy(g);
}

/* ---- dropout ------------------------------------------------------------ */

/* Runs dropout(x) with (seed, offset); returns y and the mask. */
static void run_dropout(loom_tensor_t *x, double p, int64_t seed,
                        int64_t offset, loom_tensor_t **y,
                        loom_tensor_t **mask) {
  loom_graph_t *g;
  loom_value_t xv, s, o, yv, mv;
  int64_t dims[LOOM_MAX_RANK];
  int rank = loom_tensor_rank(x);
  for (int i = 0; i < rank; i++) dims[i] = loom_tensor_dim(x, i);
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", loom_tensor_dtype(x), rank, dims, &xv));
  CHECK_OK(loom_graph_input(g, "seed", LOOM_I64, 0, NULL, &s));
  CHECK_OK(loom_graph_input(g, "offset", LOOM_I64, 0, NULL, &o));
  CHECK_OK(loom_dropout(g, xv, s, o, p, &yv, &mv));
  CHECK_OK(loom_graph_output(g, yv));
  CHECK_OK(loom_graph_output(g, mv));
  loom_tensor_t *in[3] = {x, scalar_i64(seed), scalar_i64(offset)};
  loom_tensor_t *out[2] = {NULL, NULL};
  CHECK_OK(loom_interpret(g, 3, in, 2, out));
  *y = out[0];
  *mask = out[1];
  loom_tensor_destroy(in[1]);
  loom_tensor_destroy(in[2]);
  loom_graph_destroy(g);
}

static void dropout_semantics(void) {
  const int64_t n = 100000;
  const double p = 0.3;
  for (int k = 0; k < COUNT(float_dtypes); k++) {
    loom_dtype_t dt = float_dtypes[k];
    int64_t shape[] = {n / 100, 100};
    loom_tensor_t *x = test_rand_tensor(dt, 2, shape, -4, 4), *y, *mask;
    run_dropout(x, p, 8, 9, &y, &mask);
    CHECK(loom_tensor_dtype(y) == dt && loom_tensor_dtype(mask) == LOOM_BOOL);
    int64_t kept = 0, bad_y = 0, bad_mask = 0;
    for (int64_t i = 0; i < n; i++) {
      bool m = test_get(mask, i) != 0;
      kept += m;
      bad_mask += m != (raw_uniform(8, 9, (uint64_t)i) >= p);
      double want = m ? test_get(x, i) / (1 - p) : 0;
      /* atol: f16 subnormals near 0 have spacing 2^-24. */
      bad_y += fabs(test_get(y, i) - want) > 1e-7 + test_rtol(dt, 2) * fabs(want);
    }
    CHECK(bad_mask == 0);
    CHECK(bad_y == 0);
    CHECK_NEAR((double)kept / (double)n, 1 - p, 5 * sqrt(p * (1 - p) / (double)n), 0);
    loom_tensor_destroy(x);
    loom_tensor_destroy(y);
    loom_tensor_destroy(mask);
  }
}

static void dropout_replay(void) {
  int64_t shape[] = {64, 64};
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, shape, 1, 2), *y[3], *m[3];
  run_dropout(x, 0.5, 3, 100, &y[0], &m[0]);
  run_dropout(x, 0.5, 3, 100, &y[1], &m[1]);
  run_dropout(x, 0.5, 3, 101, &y[2], &m[2]);
  CHECK(same_bytes(y[0], y[1]) && same_bytes(m[0], m[1]));
  /* Independent masks at p = 1/2 agree on about half the elements. */
  CHECK(differ_fraction(m[0], m[2]) > 0.4);
  for (int i = 0; i < 3; i++) {
    loom_tensor_destroy(y[i]);
    loom_tensor_destroy(m[i]);
  }
  loom_tensor_destroy(x);
}

static void dropout_p_zero_keeps_all(void) {
  int64_t shape[] = {3, 7};
  loom_tensor_t *x = test_rand_tensor(LOOM_F64, 2, shape, -1, 1), *y, *mask;
  run_dropout(x, 0, 1, 2, &y, &mask);
  for (int64_t i = 0; i < 21; i++) {
    CHECK(test_get(mask, i) == 1);
    CHECK(test_get(y, i) == test_get(x, i));
  }
  loom_tensor_destroy(x);
  loom_tensor_destroy(y);
  loom_tensor_destroy(mask);
}

/* A dropped NaN is 0: the mask selects rather than multiplies. */
static void dropout_nan_dropped(void) {
  int64_t shape[] = {256};
  double v[256];
  for (int i = 0; i < 256; i++) v[i] = i % 2 ? NAN : INFINITY;
  loom_tensor_t *x = test_tensor(LOOM_F32, 1, shape, v), *y, *mask;
  run_dropout(x, 0.5, 4, 4, &y, &mask);
  for (int64_t i = 0; i < 256; i++) {
    double want = test_get(mask, i) ? v[i] : 0;
    CHECK_NEAR(test_get(y, i), want, 0, 0);
  }
  loom_tensor_destroy(x);
  loom_tensor_destroy(y);
  loom_tensor_destroy(mask);
}

static void dropout_non_contiguous(void) {
  /* A transposed view of a 3x4 buffer, and its contiguous copy. */
  float buf[12];
  for (int i = 0; i < 12; i++) buf[i] = (float)(i + 1);
  int64_t shape[] = {4, 3}, strides[] = {1, 4};
  loom_tensor_t *view, *copy, *y1, *m1, *y2, *m2;
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, shape, strides, buf, &view));
  double t[12];
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 3; c++) t[r * 3 + c] = buf[c * 4 + r];
  copy = test_tensor(LOOM_F32, 2, shape, t);
  run_dropout(view, 0.25, 6, 6, &y1, &m1);
  run_dropout(copy, 0.25, 6, 6, &y2, &m2);
  CHECK(same_bytes(y1, y2) && same_bytes(m1, m2));
  for (int64_t i = 0; i < 12; i++)
    CHECK_NEAR(test_get(y1, i), test_get(m1, i) ? t[i] / 0.75 : 0, 0, 1e-7);
  loom_tensor_destroy(view);
  loom_tensor_destroy(copy);
  loom_tensor_destroy(y1);
  loom_tensor_destroy(m1);
  loom_tensor_destroy(y2);
  loom_tensor_destroy(m2);
}

static void dropout_errors(void) {
  loom_graph_t *g;
  loom_value_t x, xi, s, o, f, y, m;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {4};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, shape, &x));
  CHECK_OK(loom_graph_input(g, "xi", LOOM_I32, 1, shape, &xi));
  CHECK_OK(loom_graph_input(g, "seed", LOOM_I64, 0, NULL, &s));
  CHECK_OK(loom_graph_input(g, "offset", LOOM_I64, 0, NULL, &o));
  CHECK_OK(loom_graph_input(g, "f", LOOM_F64, 0, NULL, &f));
  CHECK_ERR(loom_dropout(g, x, s, o, 1, &y, &m), LOOM_ERR_INVALID, "[0, 1)");
  CHECK_ERR(loom_dropout(g, x, s, o, -0.1, &y, &m), LOOM_ERR_INVALID, "p");
  CHECK_ERR(loom_dropout(g, x, s, o, NAN, &y, &m), LOOM_ERR_INVALID, "dropout");
  CHECK_ERR(loom_dropout(g, xi, s, o, 0.5, &y, &m), LOOM_ERR_DTYPE, "i32");
  CHECK_ERR(loom_dropout(g, x, f, o, 0.5, &y, &m), LOOM_ERR_DTYPE, "seed");
  CHECK_ERR(loom_dropout(g, x, s, x, 0.5, &y, &m), LOOM_ERR_DTYPE, "offset");
  CHECK_ERR(loom_dropout(g, x, s, o, 0.5, &y, NULL), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_dropout(g, x, s, o, 0.5, NULL, &m), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_dropout(NULL, x, s, o, 0.5, &y, &m), LOOM_ERR_INVALID, "null");
  CHECK(loom_graph_num_nodes(g) == 0);
  loom_graph_destroy(g);
}

/* ---- nonzero ------------------------------------------------------------ */

/* Runs nonzero on x; checks the (count, rank) result against want. */
static void check_nonzero(loom_tensor_t *x, const double *want, int64_t count) {
  loom_graph_t *g;
  loom_value_t xv, y;
  int rank = loom_tensor_rank(x);
  int64_t dims[LOOM_MAX_RANK];
  for (int i = 0; i < rank; i++) dims[i] = loom_tensor_dim(x, i);
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", loom_tensor_dtype(x), rank, dims, &xv));
  CHECK_OK(loom_nonzero(g, xv, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *out = test_run1(g, 1, &x);
  CHECK(loom_tensor_dtype(out) == LOOM_I64 && loom_tensor_rank(out) == 2);
  CHECK(loom_tensor_dim(out, 0) == count && loom_tensor_dim(out, 1) == rank);
  CHECK_TENSOR(out, want, count * rank, 0, 0);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

static void nonzero_hand_cases(void) {
  static const loom_dtype_t all[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16,
                                     LOOM_I8,  LOOM_I32, LOOM_I64, LOOM_BOOL};
  int64_t s2[] = {2, 3};
  double v2[] = {0, 1, 0, 2, 0, -1};
  double w2[] = {0, 1, 1, 0, 1, 2};
  for (int k = 0; k < COUNT(all); k++) {
    loom_tensor_t *x = test_tensor(all[k], 2, s2, v2);
    check_nonzero(x, w2, 3);
    loom_tensor_destroy(x);
  }
  int64_t s1[] = {5};
  double v1[] = {0, 5, 0, -7, 0};
  double w1[] = {1, 3};
  loom_tensor_t *x = test_tensor(LOOM_I32, 1, s1, v1);
  check_nonzero(x, w1, 2);
  loom_tensor_destroy(x);
  int64_t s3[] = {2, 2, 2};
  double v3[] = {1, 0, 0, 0, 0, 0, 1, 1};
  double w3[] = {0, 0, 0, 1, 1, 0, 1, 1, 1};
  x = test_tensor(LOOM_BOOL, 3, s3, v3);
  check_nonzero(x, w3, 3);
  loom_tensor_destroy(x);
  /* NaN is not zero; -0.0 is. */
  double vn[] = {NAN, -0.0, 0.5};
  double wn[] = {0, 2};
  int64_t s3b[] = {3};
  x = test_tensor(LOOM_F32, 1, s3b, vn);
  check_nonzero(x, wn, 2);
  loom_tensor_destroy(x);
  /* A scalar: (1, 0) or (0, 0). */
  double five = 5, zero = 0;
  x = test_tensor(LOOM_F64, 0, NULL, &five);
  check_nonzero(x, NULL, 1);
  loom_tensor_destroy(x);
  x = test_tensor(LOOM_I64, 0, NULL, &zero);
  check_nonzero(x, NULL, 0);
  loom_tensor_destroy(x);
}

static void nonzero_empty(void) {
  int64_t s[] = {2, 2};
  double v[] = {0, 0, 0, 0};
  loom_tensor_t *x = test_tensor(LOOM_F32, 2, s, v);
  check_nonzero(x, NULL, 0);
  loom_tensor_destroy(x);
  int64_t none[] = {0, 3};
  CHECK_OK(loom_tensor_create(LOOM_I8, 2, none, &x));
  check_nonzero(x, NULL, 0);
  loom_tensor_destroy(x);
}

static void nonzero_non_contiguous(void) {
  /* The transpose of [[0, 1, 0], [2, 0, 3]] is [[0, 2], [1, 0], [0, 3]]. */
  int32_t buf[] = {0, 1, 0, 2, 0, 3};
  int64_t shape[] = {3, 2}, strides[] = {1, 3};
  loom_tensor_t *x;
  CHECK_OK(loom_tensor_wrap(LOOM_I32, 2, shape, strides, buf, &x));
  double want[] = {0, 1, 1, 0, 2, 1};
  check_nonzero(x, want, 3);
  loom_tensor_destroy(x);
  /* A broadcast view (stride 0) of one row. */
  float row[] = {0, 4};
  int64_t bshape[] = {3, 2}, bstrides[] = {0, 1};
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, bshape, bstrides, row, &x));
  double bwant[] = {0, 1, 1, 1, 2, 1};
  check_nonzero(x, bwant, 3);
  loom_tensor_destroy(x);
}

/* nonzero -> cast -> add: later ops run on the count found at run time,
 * and a second run with other data binds the count afresh. */
static void nonzero_feeds_later_ops(void) {
  loom_graph_t *g;
  loom_value_t x, idx, f, y;
  int64_t shape[] = {4};
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, shape, &x));
  CHECK_OK(loom_nonzero(g, x, &idx));
  loom_dim_t dims[2];
  CHECK_OK(loom_value_type(g, idx, NULL, NULL, dims));
  char name[32];
  CHECK_OK(loom_dim_format(g, dims[0], name, sizeof name));
  CHECK(strncmp(name, "nnz", 3) == 0 && dims[1] == 1);
  CHECK_OK(loom_cast(g, idx, LOOM_F32, &f));
  CHECK_OK(loom_add(g, f, f, &y));
  CHECK_OK(loom_graph_output(g, y));
  double v1[] = {0, 3, 0, 3}, v2[] = {1, 1, 0, 1};
  double w1[] = {2, 6}, w2[] = {0, 2, 6};
  loom_tensor_t *in = test_tensor(LOOM_F32, 1, shape, v1);
  loom_tensor_t *out = test_run1(g, 1, &in);
  CHECK(loom_tensor_dim(out, 0) == 2 && loom_tensor_dim(out, 1) == 1);
  CHECK_TENSOR(out, w1, 2, 0, 0);
  loom_tensor_destroy(in);
  loom_tensor_destroy(out);
  in = test_tensor(LOOM_F32, 1, shape, v2);
  out = test_run1(g, 1, &in);
  CHECK(loom_tensor_dim(out, 0) == 3);
  CHECK_TENSOR(out, w2, 3, 0, 0);
  loom_tensor_destroy(in);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

static void nonzero_errors(void) {
  loom_graph_t *g;
  loom_value_t x, y;
  int64_t shape[] = {2};
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, shape, &x));
  CHECK_ERR(loom_nonzero(NULL, x, &y), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_nonzero(g, x, NULL), LOOM_ERR_INVALID, "null");
  loom_value_t stranger = {99};
  CHECK_ERR(loom_nonzero(g, stranger, &y), LOOM_ERR_INVALID, "nonzero");
  loom_graph_destroy(g);
}

int main(void) {
  test_seed(20261130);
  TEST_RUN(philox_known_answers);
  TEST_RUN(philox_stream_mapping);
  TEST_RUN(arange_values);
  TEST_RUN(arange_empty);
  TEST_RUN(arange_errors);
  TEST_RUN(full_every_dtype);
  TEST_RUN(full_conversions);
  TEST_RUN(full_symbolic_shape);
  TEST_RUN(full_errors);
  TEST_RUN(random_matches_philox);
  TEST_RUN(random_replay);
  TEST_RUN(uniform_statistics);
  TEST_RUN(normal_statistics);
  TEST_RUN(random_every_float_dtype);
  TEST_RUN(uniform_narrow_dtype_bounds);
  TEST_RUN(random_symbolic_shape);
  TEST_RUN(random_errors);
  TEST_RUN(dropout_semantics);
  TEST_RUN(dropout_replay);
  TEST_RUN(dropout_p_zero_keeps_all);
  TEST_RUN(dropout_nan_dropped);
  TEST_RUN(dropout_non_contiguous);
  TEST_RUN(dropout_errors);
  TEST_RUN(nonzero_hand_cases);
  TEST_RUN(nonzero_empty);
  TEST_RUN(nonzero_non_contiguous);
  TEST_RUN(nonzero_feeds_later_ops);
  TEST_RUN(nonzero_errors);
  return test_summary();
}
