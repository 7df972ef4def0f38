/* `loom demo`: builds a small MLP and a small CNN with the C API, runs
 * them on deterministic data through the interpreter and the compiler,
 * and prints their graphs, checksums, the speed ratio and the memory plan.
 * `loom explain` shows what the compiler made of them. */
#include <math.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "demo.h"
#include "gpt.h"
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

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Median time of one call of run(ctx), in ms, over a few repetitions. */
static double time_ms(loom_status_t (*run)(void *), void *ctx, int reps) {
  double t[16];
  if (reps > 16) reps = 16;
  for (int i = 0; i < reps; i++) {
    double t0 = now_ms();
    run(ctx);
    t[i] = now_ms() - t0;
  }
  for (int i = 1; i < reps; i++) /* insertion sort: a handful of values */
    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
      double x = t[j];
      t[j] = t[j - 1];
      t[j - 1] = x;
    }
  return t[reps / 2];
}

typedef struct model_run {
  loom_graph_t *g;
  loom_executable_t *e;
  loom_tensor_t *input, *output;
} model_run_t;

static loom_status_t run_interpreted(void *ctx) {
  model_run_t *m = ctx;
  loom_tensor_t *out = NULL;
  loom_status_t s = loom_interpret(m->g, 1, &m->input, 1, &out);
  loom_tensor_destroy(out);
  return s;
}

static loom_status_t run_compiled(void *ctx) {
  model_run_t *m = ctx;
  return loom_executable_run(m->e, 1, &m->input, 1, &m->output);
}

/* Compiles the model, checks the compiled output against the
 * interpreter's, and prints the speed ratio and the memory plan. */
static loom_status_t compile_and_compare(model_run_t *m, const char *sym_name,
                                         int64_t sym_value, const loom_tensor_t *want) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  const char *names[1] = {sym_name};
  int64_t values[1] = {sym_value};
  if (sym_name) {
    o.n_symbols = 1;
    o.symbol_names = names;
    o.symbol_values = values;
  }
  DEMO_TRY(loom_compile(m->g, &o, &m->e));
  DEMO_TRY(loom_executable_new_output(m->e, 0, &m->output));
  DEMO_TRY(run_compiled(m));
  double max_diff = 0, a, b;
  for (int64_t i = 0; i < loom_tensor_numel(want); i++) {
    loom_tensor_get_f64(want, i, &a);
    loom_tensor_get_f64(m->output, i, &b);
    if (fabs(a - b) > max_diff) max_diff = fabs(a - b);
  }
  double interp = time_ms(run_interpreted, m, 5);
  double compiled = time_ms(run_compiled, m, 15);
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  DEMO_TRY(loom_executable_info(m->e, &info));
  printf("compiled: %d nodes -> %d steps (%d generated, %d reference)%s, %.1f ms to compile\n",
         info.n_nodes, info.n_generated + info.n_reference, info.n_generated,
         info.n_reference, info.interpreted ? " [interpreter fallback]" : "",
         info.compile_ms);
  printf("compiled vs interpreter: max |diff| %.2g; %.3f ms vs %.3f ms per run: %.1fx faster\n",
         max_diff, compiled, interp, interp / compiled);
  printf("memory plan: arena %lld bytes, lower bound %lld, every buffer separate %lld\n",
         (long long)info.arena_bytes, (long long)info.lower_bound_bytes,
         (long long)info.naive_bytes);
  return LOOM_OK;
}

/* Builds a model, prints its graph, runs it on one input through the
 * interpreter and the compiler, and prints sums, speeds and memory. */
static loom_status_t run_model(const char *title,
                               loom_status_t (*build)(loom_graph_t *), int rank,
                               const int64_t *in_shape, const char *sym_name) {
  model_run_t m = {0};
  DEMO_TRY(loom_graph_create(&m.g));
  loom_status_t s = build(m.g);
  char *text = NULL;
  loom_tensor_t *want = NULL;
  if (s == LOOM_OK) s = loom_graph_print(m.g, &text);
  if (s == LOOM_OK) {
    printf("== %s ==\n%s", title, text);
    s = det_tensor(7, rank, in_shape, 1.0f, &m.input);
  }
  if (s == LOOM_OK) s = loom_interpret(m.g, 1, &m.input, 1, &want);
  if (s == LOOM_OK) print_checksums(title, want);
  if (s == LOOM_OK) s = compile_and_compare(&m, sym_name, in_shape[0], want);
  if (s != LOOM_OK)
    fprintf(stderr, "demo: %s: %s: %s\n", title, loom_status_name(s), loom_last_error());
  loom_free(text);
  loom_tensor_destroy(want);
  loom_tensor_destroy(m.input);
  loom_tensor_destroy(m.output);
  loom_executable_destroy(m.e);
  loom_graph_destroy(m.g);
  return s;
}

/* `loom explain [mlp|cnn]`: what the compiler makes of a demo model. */
int loom_explain_main(const char *model) {
  bool cnn = model && !strcmp(model, "cnn");
  if (model && !cnn && strcmp(model, "mlp")) {
    fprintf(stderr, "loom explain: unknown model '%s' (mlp or cnn)\n", model);
    return 2;
  }
  loom_graph_t *g;
  if (loom_graph_create(&g) != LOOM_OK) return 1;
  loom_status_t s = cnn ? build_cnn(g) : build_mlp(g);
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  const char *names[1] = {"batch"};
  int64_t values[1] = {4};
  o.n_symbols = cnn ? 0 : 1;
  o.symbol_names = names;
  o.symbol_values = values;
  loom_executable_t *e = NULL;
  char *text = NULL;
  if (s == LOOM_OK) s = loom_compile(g, &o, &e);
  if (s == LOOM_OK) s = loom_executable_explain(e, &text);
  if (s == LOOM_OK) fputs(text, stdout);
  else fprintf(stderr, "loom explain: %s: %s\n", loom_status_name(s), loom_last_error());
  loom_free(text);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
  return s == LOOM_OK ? 0 : 1;
}

int loom_demo_main(void) {
  int64_t mlp_in[2] = {4, 64};
  int64_t cnn_in[4] = {2, 3, 16, 16};
  printf("Loom demo: two models built with the C API, interpreted and compiled\n\n");
  if (run_model("MLP 64-128-128-10 (batch is symbolic; compiled for 4)", build_mlp, 2, mlp_in,
                "batch") != LOOM_OK)
    return 1;
  printf("\n");
  if (run_model("CNN conv-relu-pool-conv-bn-relu-gap-linear", build_cnn, 4, cnn_in, NULL) != LOOM_OK)
    return 1;
  printf("\n== Training: a GPT-style character model, one compiled executable per step ==\n");
  fflush(stdout);
  if (gpt_demo(80, 0) != 0) return 1;
  return 0;
}
