/* LeNet-5 on 28x28 images, as the PyTorch twin in bench/peers/models.py. */
#include "layers.h"

/* conv, ReLU, 2x2 max pool. */
static loom_status_t conv_block(loom_graph_t *g, const char *name, loom_value_t x,
                                int64_t in, int64_t out, int64_t pad,
                                loom_value_t *y) {
  loom_value_t c, r;
  loom_pool_params_t pool = {.kernel = {2, 2}};
  MODEL_TRY(layer_conv(g, name, x, in, out, 5, 1, pad, 1, &c));
  MODEL_TRY(loom_relu(g, c, &r));
  return loom_max_pool2d(g, r, &pool, y);
}

loom_status_t model_lenet(loom_graph_t *g, int64_t batch, loom_value_t *logits) {
  loom_value_t x, p1, p2, flat, h, a;
  MODEL_TRY(loom_graph_input(g, "x", LOOM_F32, 4, (loom_dim_t[]){batch, 1, 28, 28}, &x));
  MODEL_TRY(conv_block(g, "conv1", x, 1, 6, 2, &p1));  /* 6x14x14 */
  MODEL_TRY(conv_block(g, "conv2", p1, 6, 16, 0, &p2)); /* 16x5x5 */
  MODEL_TRY(loom_reshape(g, p2, 2, (loom_dim_t[]){batch, 16 * 5 * 5}, &flat));
  MODEL_TRY(layer_linear(g, "fc1", flat, 400, 120, &h));
  MODEL_TRY(loom_relu(g, h, &a));
  MODEL_TRY(layer_linear(g, "fc2", a, 120, 84, &h));
  MODEL_TRY(loom_relu(g, h, &a));
  return layer_linear(g, "fc3", a, 84, 10, logits);
}
