/* torchvision's resnet18, batch norm in inference mode. */
#include <stdio.h>

#include "layers.h"

/* conv (no bias) + batch norm, named <prefix>.conv<i> / <prefix>.bn<i>. */
static loom_status_t conv_bn(loom_graph_t *g, const char *prefix, int i,
                             loom_value_t x, int64_t in, int64_t out,
                             int64_t kernel, int64_t stride, loom_value_t *y) {
  char name[96];
  loom_value_t c;
  snprintf(name, sizeof name, "%s.conv%d", prefix, i);
  MODEL_TRY(layer_conv(g, name, x, in, out, kernel, stride, kernel / 2, 0, &c));
  snprintf(name, sizeof name, "%s.bn%d", prefix, i);
  return layer_batch_norm(g, name, c, out, y);
}

/* The 1x1 strided projection of a block that changes shape. */
static loom_status_t downsample(loom_graph_t *g, const char *prefix,
                                loom_value_t x, int64_t in, int64_t out,
                                int64_t stride, loom_value_t *y) {
  char name[96];
  loom_value_t c;
  snprintf(name, sizeof name, "%s.downsample.0", prefix);
  MODEL_TRY(layer_conv(g, name, x, in, out, 1, stride, 0, 0, &c));
  snprintf(name, sizeof name, "%s.downsample.1", prefix);
  return layer_batch_norm(g, name, c, out, y);
}

/* relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)). */
static loom_status_t basic_block(loom_graph_t *g, const char *prefix,
                                 loom_value_t x, int64_t in, int64_t out,
                                 int64_t stride, loom_value_t *y) {
  loom_value_t b1, r1, b2, shortcut = x, sum;
  MODEL_TRY(conv_bn(g, prefix, 1, x, in, out, 3, stride, &b1));
  MODEL_TRY(loom_relu(g, b1, &r1));
  MODEL_TRY(conv_bn(g, prefix, 2, r1, out, out, 3, 1, &b2));
  if (stride != 1 || in != out)
    MODEL_TRY(downsample(g, prefix, x, in, out, stride, &shortcut));
  MODEL_TRY(loom_add(g, b2, shortcut, &sum));
  return loom_relu(g, sum, y);
}

loom_status_t model_resnet18(loom_graph_t *g, int64_t batch, int64_t size,
                             loom_value_t *logits) {
  static const int64_t widths[4] = {64, 128, 256, 512};
  loom_value_t x, c, b, r, h, pooled, flat;
  loom_pool_params_t pool = {.kernel = {3, 3}, .stride = {2, 2}, .pads = {1, 1, 1, 1}};
  MODEL_TRY(loom_graph_input(g, "x", LOOM_F32, 4, (loom_dim_t[]){batch, 3, size, size}, &x));
  MODEL_TRY(layer_conv(g, "conv1", x, 3, 64, 7, 2, 3, 0, &c));
  MODEL_TRY(layer_batch_norm(g, "bn1", c, 64, &b));
  MODEL_TRY(loom_relu(g, b, &r));
  MODEL_TRY(loom_max_pool2d(g, r, &pool, &h));
  int64_t in = 64;
  for (int stage = 0; stage < 4; stage++) {
    for (int block = 0; block < 2; block++) {
      char prefix[32];
      snprintf(prefix, sizeof prefix, "layer%d.%d", stage + 1, block);
      int64_t stride = stage > 0 && block == 0 ? 2 : 1;
      MODEL_TRY(basic_block(g, prefix, h, in, widths[stage], stride, &h));
      in = widths[stage];
    }
  }
  MODEL_TRY(loom_global_avg_pool(g, h, &pooled));
  MODEL_TRY(loom_reshape(g, pooled, 2, (loom_dim_t[]){batch, 512}, &flat));
  return layer_linear(g, "fc", flat, 512, 1000, logits);
}
