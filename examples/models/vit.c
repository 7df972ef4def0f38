/* A Vision Transformer as torchvision's VisionTransformer, parameter names
 * included (conv_proj, class_token, encoder.pos_embedding,
 * encoder.layers.encoder_layer_<i>.{ln_1,self_attention,ln_2,mlp.0,mlp.3},
 * encoder.ln, heads.head), so that bench/peers can load the same weights.
 * Dropout is 0, as torchvision's default. */
#include <math.h>
#include <stdio.h>

#include "layers.h"

typedef struct vit_shape {
  int64_t batch, tokens, dim, heads;
} vit_shape_t;

/* torchvision's ViT uses LayerNorm eps 1e-6, not nn.LayerNorm's 1e-5. */
static loom_status_t norm(loom_graph_t *g, const char *prefix, loom_value_t x,
                          int64_t dim, loom_value_t *y) {
  loom_value_t scale, shift;
  MODEL_TRY(layer_param_fill(g, prefix, "weight", dim, 1, &scale));
  MODEL_TRY(layer_param_fill(g, prefix, "bias", dim, 0, &shift));
  return loom_layer_norm(g, x, 1, scale, 1, shift, -1, 1e-6, y);
}

/* (batch, 3, size, size) -> (batch, patches, dim): a strided conv. */
static loom_status_t patch_embed(loom_graph_t *g, loom_value_t x, int64_t patch,
                                 const vit_shape_t *v, loom_value_t *y) {
  loom_value_t c, flat;
  MODEL_TRY(layer_conv(g, "conv_proj", x, 3, v->dim, patch, patch, 0, 1, &c));
  MODEL_TRY(loom_reshape(g, c, 3, (loom_dim_t[]){v->batch, v->dim, v->tokens - 1}, &flat));
  return loom_transpose(g, flat, (int64_t[]){0, 2, 1}, y);
}

/* [class token; patches] + position embedding. */
static loom_status_t tokens(loom_graph_t *g, loom_value_t patches,
                            const vit_shape_t *v, loom_value_t *y) {
  loom_value_t cls, cls_b, seq[2], cat, pos;
  int64_t d = v->dim, cls_shape[3] = {1, 1, d}, pos_shape[3] = {1, v->tokens, d};
  /* The fan-in bounds bench/peers' loader gives rank >= 2 tensors. */
  MODEL_TRY(layer_param(g, "class_token", "", 3, cls_shape, sqrt(6.0 / d), &cls));
  MODEL_TRY(loom_expand(g, cls, 3, (loom_dim_t[]){v->batch, 1, d}, &cls_b));
  seq[0] = cls_b;
  seq[1] = patches;
  MODEL_TRY(loom_concat(g, 2, seq, 1, &cat));
  MODEL_TRY(layer_param(g, "encoder", "pos_embedding", 3, pos_shape,
                        sqrt(6.0 / (double)(v->tokens * d)), &pos));
  return loom_add(g, cat, pos, y);
}

/* x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)). */
static loom_status_t block(loom_graph_t *g, int i, loom_value_t x,
                           const vit_shape_t *v, loom_value_t *y) {
  char prefix[64], name[96];
  loom_value_t h1, attn, res, h2, m1, act, m2;
  int64_t d = v->dim;
  snprintf(prefix, sizeof prefix, "encoder.layers.encoder_layer_%d", i);
  snprintf(name, sizeof name, "%s.ln_1", prefix);
  MODEL_TRY(norm(g, name, x, d, &h1));
  snprintf(name, sizeof name, "%s.self_attention", prefix);
  MODEL_TRY(layer_self_attention(g, name, h1, v->batch, v->tokens, d, v->heads, &attn));
  MODEL_TRY(loom_add(g, x, attn, &res));
  snprintf(name, sizeof name, "%s.ln_2", prefix);
  MODEL_TRY(norm(g, name, res, d, &h2));
  snprintf(name, sizeof name, "%s.mlp.0", prefix);
  MODEL_TRY(layer_linear(g, name, h2, d, 4 * d, &m1));
  MODEL_TRY(loom_gelu(g, m1, &act));
  snprintf(name, sizeof name, "%s.mlp.3", prefix);
  MODEL_TRY(layer_linear(g, name, act, 4 * d, d, &m2));
  return loom_add(g, res, m2, y);
}

loom_status_t model_vit(loom_graph_t *g, int64_t batch, int64_t size,
                        int64_t patch, int64_t dim, int depth, int64_t heads,
                        int64_t classes, loom_value_t *logits) {
  int64_t side = size / patch;
  vit_shape_t v = {batch, side * side + 1, dim, heads};
  loom_value_t x, p, h, ln, first, cls;
  MODEL_TRY(loom_graph_input(g, "x", LOOM_F32, 4, (loom_dim_t[]){batch, 3, size, size}, &x));
  MODEL_TRY(patch_embed(g, x, patch, &v, &p));
  MODEL_TRY(tokens(g, p, &v, &h));
  for (int i = 0; i < depth; i++) MODEL_TRY(block(g, i, h, &v, &h));
  MODEL_TRY(norm(g, "encoder.ln", h, dim, &ln));
  MODEL_TRY(loom_slice(g, ln, 1, (int64_t[]){0}, (int64_t[]){1}, (int64_t[]){1}, NULL, &first));
  MODEL_TRY(loom_reshape(g, first, 2, (loom_dim_t[]){batch, dim}, &cls));
  return layer_linear(g, "heads.head", cls, dim, classes, logits);
}
