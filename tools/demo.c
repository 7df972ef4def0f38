/* `loom demo`: builds a small MLP and a small CNN with the C API, runs
 * them on deterministic data, and prints their graphs and checksums. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "demo.h"
#include "loom/loom.h"

/* Reports a failed call and leaves the demo. */
#define DEMO_TRY(call)                                                     \
  do {                                                                     \
    loom_status_t demo_s_ = (call);                                        \
    if (demo_s_ != LOOM_OK) {                                              \
      fprintf(stderr, "demo: %s failed: %s: %s\n", #call,                  \
              loom_status_name(demo_s_), loom_last_error());               \
      return demo_s_;                                                      \
    }                                                                      \
  } while (0)

/* Deterministic values in [-scale, scale): a fixed hash of (seed, i), so
 * that every machine prints the same checksums. */
static float det_value(uint32_t seed, int64_t i, float scale) {
  uint32_t h = (uint32_t)i * 2654435761u ^ seed * 0x9e3779b9u;
  h ^= h >> 15;
  h *= 0x2c1b3c6du;
  h ^= h >> 12;
  return scale * ((float)(h & 0xffffff) / 8388608.0f - 1.0f);
}

static loom_status_t det_tensor(uint32_t seed, int rank, const int64_t *shape,
                                float scale, loom_tensor_t **out) {
  DEMO_TRY(loom_tensor_create(LOOM_F32, rank, shape, out));
  float *data = loom_tensor_data(*out);
  for (int64_t i = 0; i < loom_tensor_numel(*out); i++)
    data[i] = det_value(seed, i, scale);
  return LOOM_OK;
}

/* A parameter of the given shape with deterministic values scaled by
 * 1/sqrt(fan_in), as a Kaiming-style initializer would. */
static loom_status_t det_param(loom_graph_t *g, const char *name, uint32_t seed,
                               int rank, const int64_t *shape, int64_t fan_in,
                               loom_value_t *out) {
  loom_tensor_t *init;
  DEMO_TRY(det_tensor(seed, rank, shape, 1.0f / sqrtf((float)fan_in), &init));
  loom_status_t s = loom_graph_param(g, name, LOOM_F32, rank, shape, init, out);
  loom_tensor_destroy(init);
  return s;
}

/* y = x @ w + b for x (.., in), with parameters named prefix.w, prefix.b. */
static loom_status_t linear(loom_graph_t *g, const char *prefix, uint32_t seed,
                            loom_value_t x, int64_t in, int64_t out_features,
                            loom_value_t *y) {
  char name[64];
  loom_value_t w, b, xw;
  int64_t wshape[2] = {in, out_features};
  snprintf(name, sizeof name, "%s.w", prefix);
  DEMO_TRY(det_param(g, name, seed, 2, wshape, in, &w));
  snprintf(name, sizeof name, "%s.b", prefix);
  DEMO_TRY(det_param(g, name, seed + 1, 1, &out_features, in, &b));
  DEMO_TRY(loom_matmul(g, x, w, 0, 0, &xw));
  return loom_add(g, xw, b, y);
}

/* MLP 64-128-128-10 on a batch of n (a symbolic dim), GELU, softmax. */
static loom_status_t build_mlp(loom_graph_t *g) {
  loom_dim_t batch;
  loom_value_t x, h1, a1, h2, a2, logits, probs;
  DEMO_TRY(loom_dim_symbol(g, "batch", &batch));
  loom_dim_t dims[2] = {batch, 64};
  DEMO_TRY(loom_graph_input(g, "x", LOOM_F32, 2, dims, &x));
  DEMO_TRY(linear(g, "fc1", 10, x, 64, 128, &h1));
  DEMO_TRY(loom_gelu(g, h1, &a1));
  DEMO_TRY(linear(g, "fc2", 20, a1, 128, 128, &h2));
  DEMO_TRY(loom_relu(g, h2, &a2));
  DEMO_TRY(linear(g, "fc3", 30, a2, 128, 10, &logits));
  DEMO_TRY(loom_softmax(g, logits, -1, &probs));
  return loom_graph_output(g, probs);
}

/* conv(3->8) + bias, ReLU, max pool, conv(8->16), batch norm, ReLU, global
 * average pool, linear head to 10 classes. */
static loom_status_t build_cnn(loom_graph_t *g) {
  loom_value_t x, w1, b1, c1, r1, p1, w2, c2, r2, gp, flat, logits;
  loom_value_t scale, shift, mean, var, bn, new_mean, new_var;
  int64_t xshape[4] = {2, 3, 16, 16};
  DEMO_TRY(loom_graph_input(g, "image", LOOM_F32, 4, xshape, &x));
  int64_t w1shape[4] = {8, 3, 3, 3}, c8 = 8, c16 = 16;
  DEMO_TRY(det_param(g, "conv1.w", 40, 4, w1shape, 27, &w1));
  DEMO_TRY(det_param(g, "conv1.b", 41, 1, &c8, 27, &b1));
  loom_conv_params_t same = {.pads = {1, 1, 1, 1}};
  DEMO_TRY(loom_conv2d(g, x, w1, 1, b1, &same, &c1));
  DEMO_TRY(loom_relu(g, c1, &r1));
  loom_pool_params_t pool = {.kernel = {2, 2}};
  DEMO_TRY(loom_max_pool2d(g, r1, &pool, &p1));
  int64_t w2shape[4] = {16, 8, 3, 3};
  DEMO_TRY(det_param(g, "conv2.w", 50, 4, w2shape, 72, &w2));
  DEMO_TRY(loom_conv2d(g, p1, w2, 0, w2, &same, &c2));
  DEMO_TRY(det_param(g, "bn.scale", 60, 1, &c16, 1, &scale));
  DEMO_TRY(det_param(g, "bn.shift", 61, 1, &c16, 1, &shift));
  DEMO_TRY(det_param(g, "bn.mean", 62, 1, &c16, 100, &mean));
  float ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  loom_tensor_t *var_init;
  DEMO_TRY(loom_tensor_from_data(LOOM_F32, 1, &c16, ones, sizeof ones, &var_init));
  loom_status_t s = loom_graph_param(g, "bn.var", LOOM_F32, 1, &c16, var_init, &var);
  loom_tensor_destroy(var_init);
  DEMO_TRY(s);
  DEMO_TRY(loom_batch_norm(g, c2, scale, shift, mean, var, 1e-5, 0.1, 0, &bn,
                           &new_mean, &new_var));
  DEMO_TRY(loom_relu(g, bn, &r2));
  DEMO_TRY(loom_global_avg_pool(g, r2, &gp));
  loom_dim_t flat_shape[2] = {2, 16};
  DEMO_TRY(loom_reshape(g, gp, 2, flat_shape, &flat));
  DEMO_TRY(linear(g, "head", 70, flat, 16, 10, &logits));
  return loom_graph_output(g, logits);
}

static void print_checksums(const char *what, const loom_tensor_t *t) {
  double sum = 0, abs_sum = 0, v;
  int64_t n = loom_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    loom_tensor_get_f64(t, i, &v);
    sum += v;
    abs_sum += fabs(v);
  }
  printf("%s: output (", what);
  for (int d = 0; d < loom_tensor_rank(t); d++)
    printf("%s%lld", d ? ", " : "", (long long)loom_tensor_dim(t, d));
  printf(")  sum %.6f  sum|.| %.6f  first %.6f\n", sum, abs_sum,
         n ? (loom_tensor_get_f64(t, 0, &v), v) : 0.0);
}

/* Builds a model, prints its graph, runs it on one input, prints sums. */
static loom_status_t run_model(const char *title,
                               loom_status_t (*build)(loom_graph_t *),
                               int rank, const int64_t *in_shape) {
  loom_graph_t *g;
  DEMO_TRY(loom_graph_create(&g));
  loom_status_t s = build(g);
  char *text = NULL;
  loom_tensor_t *input = NULL, *output = NULL;
  if (s == LOOM_OK) s = loom_graph_print(g, &text);
  if (s == LOOM_OK) {
    printf("== %s ==\n%s", title, text);
    s = det_tensor(7, rank, in_shape, 1.0f, &input);
  }
  if (s == LOOM_OK) s = loom_interpret(g, 1, &input, 1, &output);
  if (s == LOOM_OK) print_checksums(title, output);
  else fprintf(stderr, "demo: %s: %s: %s\n", title, loom_status_name(s), loom_last_error());
  loom_free(text);
  loom_tensor_destroy(input);
  loom_tensor_destroy(output);
  loom_graph_destroy(g);
  return s;
}

int loom_demo_main(void) {
  int64_t mlp_in[2] = {4, 64};
  int64_t cnn_in[4] = {2, 3, 16, 16};
  printf("Loom demo: two models built with the C API, run by the interpreter\n\n");
  if (run_model("MLP 64-128-128-10 (batch is symbolic; run with 4)", build_mlp, 2, mlp_in) != LOOM_OK)
    return 1;
  printf("\n");
  if (run_model("CNN conv-relu-pool-conv-bn-relu-gap-linear", build_cnn, 4, cnn_in) != LOOM_OK)
    return 1;
  return 0;
}
