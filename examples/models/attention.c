/* Multi-head self-attention of any width, for the models built after the
 * Transformer encoder (which keeps its own fixed-width copy). */
#include <math.h>
#include <stdio.h>

#include "layers.h"

/* (b, s, dim) -> (b, heads, s, dim / heads). */
static loom_status_t split_heads(loom_graph_t *g, loom_value_t x, int64_t b,
                                 int64_t s, int64_t dim, int64_t heads,
                                 loom_value_t *y) {
  loom_value_t r;
  MODEL_TRY(loom_reshape(g, x, 4, (loom_dim_t[]){b, s, heads, dim / heads}, &r));
  return loom_transpose(g, r, (int64_t[]){0, 2, 1, 3}, y);
}

/* softmax(q k^T * scale) v, merged back to (b, s, dim). */
static loom_status_t attend(loom_graph_t *g, const loom_value_t *qkv, int64_t b,
                            int64_t s, int64_t dim, int64_t heads,
                            loom_value_t *y) {
  loom_value_t q, k, v, scores, scale, scaled, probs, ctx, ctx_t;
  MODEL_TRY(split_heads(g, qkv[0], b, s, dim, heads, &q));
  MODEL_TRY(split_heads(g, qkv[1], b, s, dim, heads, &k));
  MODEL_TRY(split_heads(g, qkv[2], b, s, dim, heads, &v));
  MODEL_TRY(loom_matmul(g, q, k, 0, 1, &scores));
  MODEL_TRY(layer_scalar(g, (float)(1.0 / sqrt((double)(dim / heads))), &scale));
  MODEL_TRY(loom_mul(g, scores, scale, &scaled));
  MODEL_TRY(loom_softmax(g, scaled, -1, &probs));
  MODEL_TRY(loom_matmul(g, probs, v, 0, 0, &ctx));
  MODEL_TRY(loom_transpose(g, ctx, (int64_t[]){0, 2, 1, 3}, &ctx_t));
  return loom_reshape(g, ctx_t, 3, (loom_dim_t[]){b, s, dim}, y);
}

loom_status_t layer_self_attention(loom_graph_t *g, const char *prefix,
                                   loom_value_t x, int64_t b, int64_t s,
                                   int64_t dim, int64_t heads, loom_value_t *y) {
  char name[128];
  loom_value_t w, bias, xw, packed, parts[3], merged;
  int64_t wshape[2] = {3 * dim, dim}, three_d = 3 * dim;
  MODEL_TRY(layer_param(g, prefix, "in_proj_weight", 2, wshape, sqrt(6.0 / dim), &w));
  MODEL_TRY(layer_param(g, prefix, "in_proj_bias", 1, &three_d, 1.0 / sqrt(dim), &bias));
  MODEL_TRY(loom_matmul(g, x, w, 0, 1, &xw));
  MODEL_TRY(loom_add(g, xw, bias, &packed));
  MODEL_TRY(loom_split(g, packed, -1, 3, (int64_t[]){dim, dim, dim}, parts));
  MODEL_TRY(attend(g, parts, b, s, dim, heads, &merged));
  snprintf(name, sizeof name, "%s.out_proj", prefix);
  return layer_linear(g, name, merged, dim, dim, y);
}
