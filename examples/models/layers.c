/* Layers shared by the example models. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "layers.h"

static uint32_t fnv1a(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

float model_init_value(const char *name, int64_t i, double bound) {
  uint32_t h = (uint32_t)i * 2654435761u ^ fnv1a(name) * 0x9e3779b9u;
  h ^= h >> 15;
  h *= 0x2c1b3c6du;
  h ^= h >> 12;
  /* In double, then rounded once, so that NumPy reproduces it bit for bit. */
  return (float)(bound * ((double)(h & 0xffffff) / 8388608.0 - 1.0));
}

static int64_t numel(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  return n;
}

/* The training build in progress (model_train_begin), or none. Process
 * state, so that the builders' signatures stay those of inference. */
static model_params_t *training;

void model_train_begin(model_params_t *p) {
  p->n = 0;
  p->param_bytes = p->state_bytes = 0;
  training = p;
}

void model_train_end(void) { training = NULL; }

/* Notes a new parameter of the training build: trainable or other state. */
static loom_status_t record(loom_value_t v, int64_t n, int trainable) {
  if (!training) return LOOM_OK;
  int64_t bytes = n * (int64_t)sizeof(float);
  if (!trainable) {
    training->state_bytes += bytes;
    return LOOM_OK;
  }
  if (training->n == MODEL_MAX_PARAMS) {
    fprintf(stderr, "model: more than %d trainable parameters\n", MODEL_MAX_PARAMS);
    return LOOM_ERR_INVALID;
  }
  training->v[training->n++] = v;
  training->param_bytes += bytes;
  return LOOM_OK;
}

/* A new parameter called name whose element i is value(name, i). */
static loom_status_t param_from(loom_graph_t *g, const char *name, int rank,
                                const int64_t *shape, double bound, int fill,
                                float fill_value, loom_value_t *out) {
  loom_tensor_t *init;
  MODEL_TRY(loom_tensor_create(LOOM_F32, rank, shape, &init));
  float *data = loom_tensor_data(init);
  for (int64_t i = 0; i < numel(rank, shape); i++)
    data[i] = fill ? fill_value : model_init_value(name, i, bound);
  loom_status_t s = loom_graph_param(g, name, LOOM_F32, rank, shape, init, out);
  loom_tensor_destroy(init);
  /* Running statistics are filled, and the only filled non-trainables. */
  int trainable = !(fill && strstr(name, ".running_"));
  return s == LOOM_OK ? record(*out, numel(rank, shape), trainable) : s;
}

loom_status_t layer_param(loom_graph_t *g, const char *prefix,
                          const char *suffix, int rank, const int64_t *shape,
                          double bound, loom_value_t *out) {
  char name[128];
  snprintf(name, sizeof name, suffix[0] ? "%s.%s" : "%s", prefix, suffix);
  return param_from(g, name, rank, shape, bound, 0, 0, out);
}

loom_status_t layer_param_fill(loom_graph_t *g, const char *prefix,
                               const char *suffix, int64_t n, float value,
                               loom_value_t *out) {
  char name[128];
  snprintf(name, sizeof name, "%s.%s", prefix, suffix);
  return param_from(g, name, 1, &n, 0, 1, value, out);
}

loom_status_t layer_linear(loom_graph_t *g, const char *prefix, loom_value_t x,
                           int64_t in, int64_t out, loom_value_t *y) {
  loom_value_t w, b, xw;
  int64_t wshape[2] = {out, in};
  MODEL_TRY(layer_param(g, prefix, "weight", 2, wshape, sqrt(6.0 / in), &w));
  MODEL_TRY(layer_param(g, prefix, "bias", 1, &out, 1.0 / sqrt(in), &b));
  MODEL_TRY(loom_matmul(g, x, w, 0, 1, &xw));
  return loom_add(g, xw, b, y);
}

loom_status_t layer_conv(loom_graph_t *g, const char *prefix, loom_value_t x,
                         int64_t in, int64_t out, int64_t kernel,
                         int64_t stride, int64_t pad, int has_bias,
                         loom_value_t *y) {
  loom_value_t w, b = {0};
  int64_t wshape[4] = {out, in, kernel, kernel}, fan_in = in * kernel * kernel;
  MODEL_TRY(layer_param(g, prefix, "weight", 4, wshape, sqrt(6.0 / fan_in), &w));
  if (has_bias)
    MODEL_TRY(layer_param(g, prefix, "bias", 1, &out, 1.0 / sqrt(fan_in), &b));
  loom_conv_params_t p = {.stride = {stride, stride},
                          .pads = {pad, pad, pad, pad}};
  return loom_conv2d(g, x, w, has_bias, has_bias ? b : w, &p, y);
}

loom_status_t layer_batch_norm(loom_graph_t *g, const char *prefix,
                               loom_value_t x, int64_t channels,
                               loom_value_t *y) {
  loom_value_t scale, shift, mean, var, new_mean, new_var;
  MODEL_TRY(layer_param_fill(g, prefix, "weight", channels, 1, &scale));
  MODEL_TRY(layer_param_fill(g, prefix, "bias", channels, 0, &shift));
  MODEL_TRY(layer_param_fill(g, prefix, "running_mean", channels, 0, &mean));
  MODEL_TRY(layer_param_fill(g, prefix, "running_var", channels, 1, &var));
  MODEL_TRY(loom_batch_norm(g, x, scale, shift, mean, var, 1e-5, 0.1,
                            training != NULL, y, &new_mean, &new_var));
  if (!training) return LOOM_OK;
  MODEL_TRY(loom_assign(g, mean, new_mean));
  return loom_assign(g, var, new_var);
}

loom_status_t layer_layer_norm(loom_graph_t *g, const char *prefix,
                               loom_value_t x, int64_t dim, loom_value_t *y) {
  loom_value_t scale, shift;
  MODEL_TRY(layer_param_fill(g, prefix, "weight", dim, 1, &scale));
  MODEL_TRY(layer_param_fill(g, prefix, "bias", dim, 0, &shift));
  return loom_layer_norm(g, x, 1, scale, 1, shift, -1, 1e-5, y);
}

loom_status_t layer_scalar(loom_graph_t *g, float value, loom_value_t *out) {
  loom_tensor_t *t;
  MODEL_TRY(loom_tensor_from_data(LOOM_F32, 0, NULL, &value, sizeof value, &t));
  loom_status_t s = loom_graph_constant(g, t, out);
  loom_tensor_destroy(t);
  return s;
}
