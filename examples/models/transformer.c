/* A post-LN Transformer encoder with a mean-pool linear head, as
 * torch.nn.TransformerEncoder(TransformerEncoderLayer(256, 4, 1024,
 * dropout=0, batch_first=True), 4) followed by mean(dim=1) and a Linear. */
#include <math.h>
#include <stdio.h>

#include "layers.h"

enum { D_MODEL = 256, N_HEADS = 4, D_HEAD = D_MODEL / N_HEADS, D_FF = 1024, N_LAYERS = 4 };

/* (b, s, d) -> (b, heads, s, d_head). */
static loom_status_t split_heads(loom_graph_t *g, loom_value_t x, int64_t b,
                                 int64_t s, loom_value_t *y) {
  loom_value_t r;
  MODEL_TRY(loom_reshape(g, x, 4, (loom_dim_t[]){b, s, N_HEADS, D_HEAD}, &r));
  return loom_transpose(g, r, (int64_t[]){0, 2, 1, 3}, y);
}

/* Multi-head self-attention: nn.MultiheadAttention's packed in_proj
 * (q, k, v stacked in one (3d, d) weight) and out_proj. */
static loom_status_t self_attention(loom_graph_t *g, const char *prefix,
                                    loom_value_t x, int64_t b, int64_t s,
                                    loom_value_t *y) {
  char name[128];
  loom_value_t w, bias, xw, qkv, parts[3], q, k, v, scores, scale, scaled;
  loom_value_t probs, ctx, ctx_t, merged;
  int64_t wshape[2] = {3 * D_MODEL, D_MODEL}, three_d = 3 * D_MODEL;
  MODEL_TRY(layer_param(g, prefix, "in_proj_weight", 2, wshape, sqrt(6.0 / D_MODEL), &w));
  MODEL_TRY(layer_param(g, prefix, "in_proj_bias", 1, &three_d, 1.0 / sqrt(D_MODEL), &bias));
  MODEL_TRY(loom_matmul(g, x, w, 0, 1, &xw));
  MODEL_TRY(loom_add(g, xw, bias, &qkv));
  MODEL_TRY(loom_split(g, qkv, -1, 3, (int64_t[]){D_MODEL, D_MODEL, D_MODEL}, parts));
  MODEL_TRY(split_heads(g, parts[0], b, s, &q));
  MODEL_TRY(split_heads(g, parts[1], b, s, &k));
  MODEL_TRY(split_heads(g, parts[2], b, s, &v));
  MODEL_TRY(loom_matmul(g, q, k, 0, 1, &scores));
  MODEL_TRY(layer_scalar(g, (float)(1.0 / sqrt(D_HEAD)), &scale));
  MODEL_TRY(loom_mul(g, scores, scale, &scaled));
  MODEL_TRY(loom_softmax(g, scaled, -1, &probs));
  MODEL_TRY(loom_matmul(g, probs, v, 0, 0, &ctx));
  MODEL_TRY(loom_transpose(g, ctx, (int64_t[]){0, 2, 1, 3}, &ctx_t));
  MODEL_TRY(loom_reshape(g, ctx_t, 3, (loom_dim_t[]){b, s, D_MODEL}, &merged));
  snprintf(name, sizeof name, "%s.out_proj", prefix);
  return layer_linear(g, name, merged, D_MODEL, D_MODEL, y);
}

/* x = norm1(x + attn(x)); x = norm2(x + linear2(relu(linear1(x)))). */
static loom_status_t encoder_layer(loom_graph_t *g, int layer, loom_value_t x,
                                   int64_t b, int64_t s, loom_value_t *y) {
  char prefix[64], name[96];
  loom_value_t attn, res1, h1, ff1, act, ff2, res2;
  snprintf(prefix, sizeof prefix, "encoder.layers.%d", layer);
  snprintf(name, sizeof name, "%s.self_attn", prefix);
  MODEL_TRY(self_attention(g, name, x, b, s, &attn));
  MODEL_TRY(loom_add(g, x, attn, &res1));
  snprintf(name, sizeof name, "%s.norm1", prefix);
  MODEL_TRY(layer_layer_norm(g, name, res1, D_MODEL, &h1));
  snprintf(name, sizeof name, "%s.linear1", prefix);
  MODEL_TRY(layer_linear(g, name, h1, D_MODEL, D_FF, &ff1));
  MODEL_TRY(loom_relu(g, ff1, &act));
  snprintf(name, sizeof name, "%s.linear2", prefix);
  MODEL_TRY(layer_linear(g, name, act, D_FF, D_MODEL, &ff2));
  MODEL_TRY(loom_add(g, h1, ff2, &res2));
  snprintf(name, sizeof name, "%s.norm2", prefix);
  return layer_layer_norm(g, name, res2, D_MODEL, y);
}

loom_status_t model_transformer_encoder(loom_graph_t *g, int64_t batch,
                                        int64_t seq, loom_value_t *logits) {
  loom_value_t h, pooled;
  MODEL_TRY(loom_graph_input(g, "x", LOOM_F32, 3, (loom_dim_t[]){batch, seq, D_MODEL}, &h));
  for (int layer = 0; layer < N_LAYERS; layer++)
    MODEL_TRY(encoder_layer(g, layer, h, batch, seq, &h));
  MODEL_TRY(loom_mean(g, h, 1, (int64_t[]){1}, 0, &pooled));
  return layer_linear(g, "head", pooled, D_MODEL, 10, logits);
}
