/* Example models built with Loom's C API: the benchmark models, reused by
 * the demo, the training work and the examples.
 *
 * Each builder adds one input named "x" (f32) and the model's parameters
 * to g, and returns the logits without marking them as an output (a caller
 * may add a loss first). Parameters carry PyTorch's state-dict names and
 * layouts (linear weight (out, in), conv weight (O, C, kh, kw)), and their
 * values come from model_init_value, so that a PyTorch twin can load the
 * very same weights (bench/peers/models.py does). */
#ifndef LOOM_EXAMPLES_MODELS_H
#define LOOM_EXAMPLES_MODELS_H

#include <stdint.h>

#include "loom/loom.h"

/* MLP 784-512-512-10 with ReLU: x (batch, 784). */
loom_status_t model_mlp(loom_graph_t *g, int64_t batch, loom_value_t *logits);

/* LeNet-5 (x (batch, 1, 28, 28)): conv 6 5x5 pad 2, ReLU, max pool 2,
 * conv 16 5x5, ReLU, max pool 2, flatten, fc 120, ReLU, fc 84, ReLU,
 * fc 10. */
loom_status_t model_lenet(loom_graph_t *g, int64_t batch, loom_value_t *logits);

/* Post-LN Transformer encoder as torch.nn.TransformerEncoderLayer(
 * d_model 256, nhead 4, dim_feedforward 1024, ReLU, batch_first) x 4
 * layers, then a mean over the sequence and a linear head to 10:
 * x (batch, seq, 256). */
loom_status_t model_transformer_encoder(loom_graph_t *g, int64_t batch,
                                        int64_t seq, loom_value_t *logits);

/* torchvision's resnet18 (BasicBlocks 64-128-256-512, batch norm in
 * inference mode, fc 1000): x (batch, 3, size, size), size a multiple of
 * 32 (224 for ImageNet). */
loom_status_t model_resnet18(loom_graph_t *g, int64_t batch, int64_t size,
                             loom_value_t *logits);

/* The demo's small CNN: x (batch, 3, 16, 16), conv 3->8 3x3 + bias, ReLU,
 * max pool 2, conv 8->16 3x3, batch norm, ReLU, global average pool,
 * linear to 10. */
loom_status_t model_small_cnn(loom_graph_t *g, int64_t batch,
                              loom_value_t *logits);

/* A Vision Transformer as torchvision's VisionTransformer (pre-LN encoder
 * blocks, LayerNorm eps 1e-6, MLP dim 4 * dim with exact GELU, a class
 * token and a learned position embedding, the head on the class token):
 * x (batch, 3, size, size), size a multiple of patch, dim a multiple of
 * heads. The benchmark's ViT-Tiny: dim 192, depth 6, 3 heads, patch 8. */
loom_status_t model_vit(loom_graph_t *g, int64_t batch, int64_t size,
                        int64_t patch, int64_t dim, int depth, int64_t heads,
                        int64_t classes, loom_value_t *logits);

/* Training builds. Between model_train_begin(p) and model_train_end(), the
 * builders record their trainable parameters in p (what loom_grad and an
 * optimizer take), count the bytes of the other state (running
 * statistics), and build batch norm in training mode: batch statistics,
 * with assigns that update the running ones. One training build at a
 * time (the recorder is process state). */
enum { MODEL_MAX_PARAMS = 512 };
typedef struct model_params {
  int n;
  loom_value_t v[MODEL_MAX_PARAMS];
  int64_t param_bytes; /* of the trainable parameters */
  int64_t state_bytes; /* of the other parameters */
} model_params_t;
void model_train_begin(model_params_t *p);
void model_train_end(void);

/* Element i of the initial value of the parameter called name, uniform in
 * [-bound, bound): a fixed hash of (FNV-1a(name), i), easy to reproduce in
 * any language. Weights use bound sqrt(6 / fan_in) (Kaiming uniform),
 * biases 1 / sqrt(fan_in) (PyTorch's default); norm scales start at 1,
 * shifts and running means at 0, running variances at 1. */
float model_init_value(const char *name, int64_t i, double bound);

#endif
