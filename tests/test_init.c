/* Initializers: sample statistics against the distributions' closed
 * forms, the bounds of uniform, Kaiming and Xavier (with PyTorch's fans),
 * determinism per seed, strided tensors, and the error paths. */
#include <string.h>

#include "harness.h"

static const loom_dtype_t floats[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16};

typedef struct stats {
  double mean, std, lo, hi;
} stats_t;

static stats_t stats_of(const loom_tensor_t *t) {
  int64_t n = loom_tensor_numel(t);
  stats_t s = {0, 0, INFINITY, -INFINITY};
  double sq = 0;
  for (int64_t i = 0; i < n; i++) {
    double v = test_get(t, i);
    s.mean += v;
    sq += v * v;
    if (v < s.lo) s.lo = v;
    if (v > s.hi) s.hi = v;
  }
  s.mean /= (double)n;
  s.std = sqrt(sq / (double)n - s.mean * s.mean);
  return s;
}

static loom_tensor_t *make(loom_dtype_t dt, int rank, const int64_t *shape) {
  loom_tensor_t *t = NULL;
  CHECK_OK(loom_tensor_create(dt, rank, shape, &t));
  return t;
}

/* Mean within 4 standard errors, std within 3 percent. */
static void check_moments(stats_t s, double mean, double std, int64_t n) {
  CHECK_NEAR(s.mean, mean, 4 * std / sqrt((double)n), 0);
  CHECK_NEAR(s.std, std, 0, 0.03);
}

static void test_normal(void) {
  int64_t n = 20000;
  for (size_t k = 0; k < sizeof floats / sizeof *floats; k++) {
    loom_tensor_t *t = make(floats[k], 1, &n);
    CHECK_OK(loom_init_normal(t, 7, 2.0, 3.0));
    check_moments(stats_of(t), 2.0, 3.0, n);
    loom_tensor_destroy(t);
  }
}

static void test_uniform(void) {
  int64_t n = 20000;
  for (size_t k = 0; k < sizeof floats / sizeof *floats; k++) {
    loom_tensor_t *t = make(floats[k], 1, &n);
    CHECK_OK(loom_init_uniform(t, 3, -1.0, 3.0));
    stats_t s = stats_of(t);
    check_moments(s, 1.0, 4.0 / sqrt(12.0), n);
    CHECK(s.lo >= -1.0 && s.hi <= 3.0);
    CHECK(s.lo < -0.99 && s.hi > 2.99); /* the whole range is used */
    loom_tensor_destroy(t);
  }
}

/* A conv weight (out 64, in 32, 3, 3): fan_in 288, fan_out 576. */
static const int64_t conv_shape[4] = {64, 32, 3, 3};

static void test_kaiming_uniform(void) {
  int64_t n = 64 * 32 * 9;
  for (size_t k = 0; k < sizeof floats / sizeof *floats; k++) {
    loom_tensor_t *t = make(floats[k], 4, conv_shape);
    /* ReLU, fan in: bound sqrt(6 / fan_in). */
    double bound = sqrt(6.0 / 288);
    CHECK_OK(loom_init_kaiming_uniform(t, 1, 0.0, LOOM_FAN_IN));
    stats_t s = stats_of(t);
    CHECK(s.lo >= -bound * 1.004 && s.hi <= bound * 1.004);
    CHECK(s.hi > 0.99 * bound && s.lo < -0.99 * bound);
    check_moments(s, 0, bound / sqrt(3.0), n);
    /* fan out */
    bound = sqrt(6.0 / 576);
    CHECK_OK(loom_init_kaiming_uniform(t, 1, 0.0, LOOM_FAN_OUT));
    s = stats_of(t);
    CHECK(s.lo >= -bound * 1.004 && s.hi <= bound * 1.004 && s.hi > 0.99 * bound);
    /* nn.Linear / nn.Conv2d's default, a = sqrt(5): bound 1/sqrt(fan_in). */
    bound = 1.0 / sqrt(288.0);
    CHECK_OK(loom_init_kaiming_uniform(t, 1, sqrt(5.0), LOOM_FAN_IN));
    s = stats_of(t);
    CHECK(s.lo >= -bound * 1.004 && s.hi <= bound * 1.004 && s.hi > 0.99 * bound);
    loom_tensor_destroy(t);
  }
}

static void test_kaiming_normal(void) {
  int64_t n = 64 * 32 * 9;
  for (size_t k = 0; k < sizeof floats / sizeof *floats; k++) {
    loom_tensor_t *t = make(floats[k], 4, conv_shape);
    CHECK_OK(loom_init_kaiming_normal(t, 2, 0.0, LOOM_FAN_IN));
    check_moments(stats_of(t), 0, sqrt(2.0 / 288), n);
    CHECK_OK(loom_init_kaiming_normal(t, 2, 1.0, LOOM_FAN_OUT));
    check_moments(stats_of(t), 0, 1.0 / sqrt(576.0), n);
    loom_tensor_destroy(t);
  }
}

static void test_xavier(void) {
  int64_t shape[2] = {150, 90}, n = 150 * 90; /* fan_in 90, fan_out 150 */
  for (size_t k = 0; k < sizeof floats / sizeof *floats; k++) {
    loom_tensor_t *t = make(floats[k], 2, shape);
    double bound = 2.0 * sqrt(6.0 / 240);
    CHECK_OK(loom_init_xavier_uniform(t, 5, 2.0));
    stats_t s = stats_of(t);
    CHECK(s.lo >= -bound * 1.004 && s.hi <= bound * 1.004 && s.hi > 0.99 * bound);
    check_moments(s, 0, bound / sqrt(3.0), n);
    CHECK_OK(loom_init_xavier_normal(t, 5, 1.0));
    check_moments(stats_of(t), 0, sqrt(2.0 / 240), n);
    loom_tensor_destroy(t);
  }
}

static void test_zeros_ones_every_dtype(void) {
  int64_t shape[2] = {2, 3};
  for (int d = 0; d < LOOM_DTYPE_COUNT; d++) {
    loom_tensor_t *t = make((loom_dtype_t)d, 2, shape);
    double ones[6] = {1, 1, 1, 1, 1, 1}, zeros[6] = {0};
    CHECK_OK(loom_init_ones(t));
    CHECK_TENSOR(t, ones, 6, 0, 0);
    CHECK_OK(loom_init_zeros(t));
    CHECK_TENSOR(t, zeros, 6, 0, 0);
    loom_tensor_destroy(t);
  }
}

/* Same seed: the same bytes; another seed: other numbers. The numbers are
 * those of the random_uniform op at offset 0. */
static void test_determinism(void) {
  int64_t n = 64;
  loom_tensor_t *a = make(LOOM_F32, 1, &n), *b = make(LOOM_F32, 1, &n),
                *c = make(LOOM_F32, 1, &n);
  CHECK_OK(loom_init_uniform(a, 42, 0, 1));
  CHECK_OK(loom_init_uniform(b, 42, 0, 1));
  CHECK_OK(loom_init_uniform(c, 43, 0, 1));
  CHECK(memcmp(loom_tensor_data(a), loom_tensor_data(b), 64 * 4) == 0);
  CHECK(memcmp(loom_tensor_data(a), loom_tensor_data(c), 64 * 4) != 0);

  loom_graph_t *g;
  loom_value_t seed, off, r;
  int64_t none = 0;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "seed", LOOM_I64, 0, &none, &seed));
  CHECK_OK(loom_graph_input(g, "offset", LOOM_I64, 0, &none, &off));
  CHECK_OK(loom_random_uniform(g, seed, off, 1, &n, 0, 1, LOOM_F32, &r));
  CHECK_OK(loom_graph_output(g, r));
  int64_t sv = 42, ov = 0;
  loom_tensor_t *in[2], *out = NULL;
  CHECK_OK(loom_tensor_from_data(LOOM_I64, 0, NULL, &sv, 8, &in[0]));
  CHECK_OK(loom_tensor_from_data(LOOM_I64, 0, NULL, &ov, 8, &in[1]));
  CHECK_OK(loom_interpret(g, 2, in, 1, &out));
  if (out) CHECK(memcmp(loom_tensor_data(a), loom_tensor_data(out), 64 * 4) == 0);
  loom_tensor_destroy(out);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(g);
  loom_tensor_destroy(a);
  loom_tensor_destroy(b);
  loom_tensor_destroy(c);
}

/* A transposed view gets, element by element in its own row-major order,
 * what a contiguous tensor of its shape gets. */
static void test_strided(void) {
  float mem[12];
  int64_t shape[2] = {3, 4}, strides[2] = {1, 3};
  loom_tensor_t *view, *flat = make(LOOM_F32, 2, shape);
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, shape, strides, mem, &view));
  CHECK_OK(loom_init_xavier_normal(view, 9, 1.0));
  CHECK_OK(loom_init_xavier_normal(flat, 9, 1.0));
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++)
      CHECK(mem[i + 3 * j] == (float)test_get(flat, i * 4 + j));
  loom_tensor_destroy(view);
  loom_tensor_destroy(flat);
}

static void test_errors(void) {
  int64_t n = 4, shape[2] = {2, 2}, empty[2] = {0, 3};
  loom_tensor_t *ints = make(LOOM_I32, 2, shape), *vec = make(LOOM_F32, 1, &n),
                *w = make(LOOM_F32, 2, shape), *z = make(LOOM_F32, 2, empty);
  CHECK_ERR(loom_init_normal(ints, 1, 0, 1), LOOM_ERR_DTYPE, "float");
  CHECK_ERR(loom_init_uniform(ints, 1, 0, 1), LOOM_ERR_DTYPE, "i32");
  CHECK_ERR(loom_init_kaiming_uniform(vec, 1, 0, LOOM_FAN_IN), LOOM_ERR_SHAPE, "rank");
  CHECK_ERR(loom_init_xavier_normal(vec, 1, 1), LOOM_ERR_SHAPE, "fan");
  CHECK_ERR(loom_init_xavier_uniform(z, 1, 1), LOOM_ERR_SHAPE, "zero");
  CHECK_ERR(loom_init_kaiming_normal(w, 1, 0, (loom_fan_mode_t)7), LOOM_ERR_INVALID, "mode");
  CHECK_ERR(loom_init_normal(vec, 1, 0, -1), LOOM_ERR_INVALID, "std");
  CHECK_ERR(loom_init_uniform(vec, 1, 2, 1), LOOM_ERR_INVALID, "low");
  CHECK_ERR(loom_init_zeros(NULL), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_init_kaiming_uniform(NULL, 1, 0, LOOM_FAN_IN), LOOM_ERR_INVALID, "null");
  loom_tensor_destroy(ints);
  loom_tensor_destroy(vec);
  loom_tensor_destroy(w);
  loom_tensor_destroy(z);
}

int main(void) {
  TEST_RUN(test_normal);
  TEST_RUN(test_uniform);
  TEST_RUN(test_kaiming_uniform);
  TEST_RUN(test_kaiming_normal);
  TEST_RUN(test_xavier);
  TEST_RUN(test_zeros_ones_every_dtype);
  TEST_RUN(test_determinism);
  TEST_RUN(test_strided);
  TEST_RUN(test_errors);
  return test_summary();
}
