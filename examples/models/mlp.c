/* MLP 784-512-512-10 with ReLU. */
#include "layers.h"

loom_status_t model_mlp(loom_graph_t *g, int64_t batch, loom_value_t *logits) {
  loom_value_t x, h, a;
  MODEL_TRY(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){batch, 784}, &x));
  MODEL_TRY(layer_linear(g, "fc1", x, 784, 512, &h));
  MODEL_TRY(loom_relu(g, h, &a));
  MODEL_TRY(layer_linear(g, "fc2", a, 512, 512, &h));
  MODEL_TRY(loom_relu(g, h, &a));
  return layer_linear(g, "fc3", a, 512, 10, logits);
}
