/* The vision examples' models, each at any size (tiny for tests, small for
 * the example programs) and in f32 or f64. Each adds the input "x" and
 * its parameters to m and returns the logits (batch, classes). */
#ifndef LOOM_EXAMPLES_VISION_H
#define LOOM_EXAMPLES_VISION_H

#include "train.h"

/* x (batch, in): linear-ReLU-linear-ReLU-linear. */
typedef struct ex_mlp_cfg {
  int64_t batch, in, hidden, classes;
} ex_mlp_cfg_t;
loom_status_t ex_mlp(ex_model_t *m, const ex_mlp_cfg_t *c, loom_value_t *logits);

/* x (batch, channels, size, size): a 3x3 conv stem to width, batch norm,
 * ReLU; a basic residual block at width; a block at 2 * width with stride
 * 2 and a 1x1 projection shortcut; global average pool; linear head. */
typedef struct ex_resnet_cfg {
  int64_t batch, channels, size, width, classes;
} ex_resnet_cfg_t;
loom_status_t ex_resnet(ex_model_t *m, const ex_resnet_cfg_t *c, loom_value_t *logits);

/* x (batch, channels, size, size): patches of patch x patch embedded by a
 * conv of that stride, a class token, learned position embeddings, depth
 * pre-LN encoder blocks (multi-head self-attention, GELU MLP of width
 * mlp, dropout after each), final layer norm, linear head on the class
 * token. */
typedef struct ex_vit_cfg {
  int64_t batch, channels, size, patch, dim, heads, depth, mlp, classes;
  double dropout;
} ex_vit_cfg_t;
loom_status_t ex_vit(ex_model_t *m, const ex_vit_cfg_t *c, loom_value_t *logits);

#endif
