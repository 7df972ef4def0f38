/* Layers shared by the example models: parameters with deterministic
 * values, linear, conv2d and batch norm, named as in PyTorch. */
#ifndef LOOM_EXAMPLES_LAYERS_H
#define LOOM_EXAMPLES_LAYERS_H

#include "models.h"

/* Returns from the calling function when call fails. */
#define MODEL_TRY(call)                                                    \
  do {                                                                     \
    loom_status_t model_s_ = (call);                                       \
    if (model_s_ != LOOM_OK) return model_s_;                              \
  } while (0)

/* A parameter prefix.suffix ("fc1" + "weight"), uniform in +-bound;
 * suffix "": called prefix. */
loom_status_t layer_param(loom_graph_t *g, const char *prefix,
                          const char *suffix, int rank, const int64_t *shape,
                          double bound, loom_value_t *out);
/* A parameter prefix.suffix filled with one value. */
loom_status_t layer_param_fill(loom_graph_t *g, const char *prefix,
                               const char *suffix, int64_t n, float value,
                               loom_value_t *out);

/* y = x @ weight^T + bias, for x (..., in): nn.Linear. */
loom_status_t layer_linear(loom_graph_t *g, const char *prefix, loom_value_t x,
                           int64_t in, int64_t out, loom_value_t *y);
/* nn.Conv2d (groups 1, dilation 1), square kernel; has_bias 0: none. */
loom_status_t layer_conv(loom_graph_t *g, const char *prefix, loom_value_t x,
                         int64_t in, int64_t out, int64_t kernel,
                         int64_t stride, int64_t pad, int has_bias,
                         loom_value_t *y);
/* nn.BatchNorm2d (eps 1e-5, momentum 0.1): in inference mode, or in
 * training mode inside a training build (model_train_begin). */
loom_status_t layer_batch_norm(loom_graph_t *g, const char *prefix,
                               loom_value_t x, int64_t channels,
                               loom_value_t *y);
/* nn.LayerNorm over the last dim (eps 1e-5). */
loom_status_t layer_layer_norm(loom_graph_t *g, const char *prefix,
                               loom_value_t x, int64_t dim, loom_value_t *y);
/* nn.MultiheadAttention(dim, heads, batch_first) as self-attention on x
 * (b, s, dim): packed in_proj (q, k, v stacked in one (3 dim, dim)
 * weight), softmax(q k^T / sqrt(dim / heads)) v, out_proj. */
loom_status_t layer_self_attention(loom_graph_t *g, const char *prefix,
                                   loom_value_t x, int64_t b, int64_t s,
                                   int64_t dim, int64_t heads, loom_value_t *y);
/* A scalar f32 constant. */
loom_status_t layer_scalar(loom_graph_t *g, float value, loom_value_t *out);

#endif
