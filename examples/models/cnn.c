/* The demo's small CNN (the `compile` benchmark compiles it). */
#include "layers.h"

loom_status_t model_small_cnn(loom_graph_t *g, int64_t batch,
                              loom_value_t *logits) {
  loom_value_t x, c1, r1, p1, c2, bn, r2, gp, flat;
  loom_pool_params_t pool = {.kernel = {2, 2}};
  MODEL_TRY(loom_graph_input(g, "x", LOOM_F32, 4, (loom_dim_t[]){batch, 3, 16, 16}, &x));
  MODEL_TRY(layer_conv(g, "conv1", x, 3, 8, 3, 1, 1, 1, &c1));
  MODEL_TRY(loom_relu(g, c1, &r1));
  MODEL_TRY(loom_max_pool2d(g, r1, &pool, &p1));
  MODEL_TRY(layer_conv(g, "conv2", p1, 8, 16, 3, 1, 1, 0, &c2));
  MODEL_TRY(layer_batch_norm(g, "bn", c2, 16, &bn));
  MODEL_TRY(loom_relu(g, bn, &r2));
  MODEL_TRY(loom_global_avg_pool(g, r2, &gp));
  MODEL_TRY(loom_reshape(g, gp, 2, (loom_dim_t[]){batch, 16}, &flat));
  return layer_linear(g, "head", flat, 16, 10, logits);
}
