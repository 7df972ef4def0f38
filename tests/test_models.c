/* The example models: each builds, runs through the interpreter on a tiny
 * batch and gives logits of the right shape; the MLP's logits match a
 * plain C forward pass over the same initial values. */
#include <string.h>

#include "harness.h"
#include "models.h"

/* Runs g (one input x of shape, output logits) and checks the output's
 * shape (batch, classes) and that every logit is finite. */
static loom_tensor_t *run_model(loom_graph_t *g, loom_value_t logits, int rank,
                                const int64_t *shape, int64_t classes) {
  CHECK_OK(loom_graph_output(g, logits));
  CHECK_OK(loom_graph_verify(g));
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, rank, shape, -1, 1);
  loom_tensor_t *y = test_run1(g, 1, &x);
  loom_tensor_destroy(x);
  if (!y) return NULL;
  CHECK(loom_tensor_rank(y) == 2);
  CHECK(loom_tensor_dim(y, 0) == shape[0]);
  CHECK(loom_tensor_dim(y, 1) == classes);
  for (int64_t i = 0; i < loom_tensor_numel(y); i++) CHECK(isfinite(test_get(y, i)));
  return y;
}

/* relu(x @ W^T + b) for one row, W (out, in) from model_init_value. */
static void dense_row(const char *prefix, const double *x, int64_t in,
                      int64_t out, int relu, double *y) {
  char wname[32], bname[32];
  snprintf(wname, sizeof wname, "%s.weight", prefix);
  snprintf(bname, sizeof bname, "%s.bias", prefix);
  for (int64_t o = 0; o < out; o++) {
    double acc = model_init_value(bname, o, 1.0 / sqrt((double)in));
    for (int64_t i = 0; i < in; i++)
      acc += x[i] * model_init_value(wname, o * in + i, sqrt(6.0 / (double)in));
    y[o] = relu && acc < 0 ? 0 : acc;
  }
}

static void test_mlp_matches_plain_c(void) {
  loom_graph_t *g;
  loom_value_t logits;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(model_mlp(g, 2, &logits));
  CHECK_OK(loom_graph_output(g, logits));
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){2, 784}, -1, 1);
  loom_tensor_t *y = test_run1(g, 1, &x);
  CHECK(y && loom_tensor_dim(y, 0) == 2 && loom_tensor_dim(y, 1) == 10);
  static double row[784], h1[512], h2[512], want[10];
  for (int b = 0; y && b < 2; b++) {
    for (int i = 0; i < 784; i++) row[i] = test_get(x, b * 784 + i);
    dense_row("fc1", row, 784, 512, 1, h1);
    dense_row("fc2", h1, 512, 512, 1, h2);
    dense_row("fc3", h2, 512, 10, 0, want);
    for (int o = 0; o < 10; o++) CHECK_NEAR(test_get(y, b * 10 + o), want[o], 1e-4, 1e-4);
  }
  loom_tensor_destroy(x);
  loom_tensor_destroy(y);
  loom_graph_destroy(g);
}

static void test_lenet(void) {
  loom_graph_t *g;
  loom_value_t logits;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(model_lenet(g, 1, &logits));
  loom_tensor_destroy(run_model(g, logits, 4, (int64_t[]){1, 1, 28, 28}, 10));
  loom_graph_destroy(g);
}

static void test_transformer(void) {
  loom_graph_t *g;
  loom_value_t logits;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(model_transformer_encoder(g, 1, 8, &logits));
  loom_tensor_destroy(run_model(g, logits, 3, (int64_t[]){1, 8, 256}, 10));
  loom_graph_destroy(g);
}

static void test_resnet18(void) {
  loom_graph_t *g;
  loom_value_t logits;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(model_resnet18(g, 1, 32, &logits));
  loom_tensor_destroy(run_model(g, logits, 4, (int64_t[]){1, 3, 32, 32}, 1000));
  loom_graph_destroy(g);
}

static void test_small_cnn(void) {
  loom_graph_t *g;
  loom_value_t logits;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(model_small_cnn(g, 2, &logits));
  loom_tensor_destroy(run_model(g, logits, 4, (int64_t[]){2, 3, 16, 16}, 10));
  loom_graph_destroy(g);
}

/* The hash is fixed: values pinned here guard the PyTorch twin, which
 * reimplements it, against a silent change on either side. */
static void test_init_values(void) {
  double sum = 0, sq = 0, lo = 1, hi = -1;
  for (int64_t i = 0; i < 100000; i++) {
    double v = model_init_value("fc1.weight", i, 1.0);
    sum += v;
    sq += v * v;
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  CHECK(lo >= -1 && hi < 1);
  CHECK_NEAR(sum / 100000, 0, 0.01, 0);
  CHECK_NEAR(sq / 100000, 1.0 / 3, 0.01, 0); /* variance of U(-1, 1) */
  CHECK(model_init_value("a", 0, 1) != model_init_value("b", 0, 1));
  CHECK(model_init_value("a", 5, 2) == 2 * model_init_value("a", 5, 1));
}

int main(void) {
  test_seed(3);
  TEST_RUN(test_init_values);
  TEST_RUN(test_mlp_matches_plain_c);
  TEST_RUN(test_lenet);
  TEST_RUN(test_transformer);
  TEST_RUN(test_small_cnn);
  TEST_RUN(test_resnet18);
  return test_summary();
}
