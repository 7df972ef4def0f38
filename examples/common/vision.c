/* The vision examples' models: MLP, a small ResNet, a small ViT. */
#include "vision.h"

#include <math.h>
#include <stdio.h>

/* Names are short: a truncated one would still be unique enough to read,
 * and checkpoints validate them anyway. */
static void join(char *buf, size_t size, const char *a, const char *b) {
  if (snprintf(buf, size, "%s.%s", a, b) >= (int)size) buf[size - 1] = 0;
}

loom_status_t ex_mlp(ex_model_t *m, const ex_mlp_cfg_t *c, loom_value_t *logits) {
  int64_t xs[2] = {c->batch, c->in};
  loom_value_t h1, a1, h2, a2;
  EX_TRY(ex_input(m, 2, xs));
  EX_TRY(ex_linear(m, "fc1", m->x, c->in, c->hidden, &h1));
  EX_TRY(loom_relu(m->g, h1, &a1));
  EX_TRY(ex_linear(m, "fc2", a1, c->hidden, c->hidden, &h2));
  EX_TRY(loom_relu(m->g, h2, &a2));
  return ex_linear(m, "fc3", a2, c->hidden, c->classes, logits);
}

/* ---- ResNet ------------------------------------------------------------------ */

static loom_status_t conv_bn(ex_model_t *m, const char *name, loom_value_t x,
                             int64_t in, int64_t out, int64_t kernel,
                             int64_t stride, int relu, loom_value_t *y) {
  char n[96];
  loom_value_t c, b;
  join(n, sizeof n, name, "conv");
  EX_TRY(ex_conv(m, n, x, in, out, kernel, stride, kernel / 2, 0, &c));
  join(n, sizeof n, name, "bn");
  EX_TRY(ex_batch_norm(m, n, c, out, relu ? &b : y));
  return relu ? loom_relu(m->g, b, y) : LOOM_OK;
}

/* torchvision's BasicBlock: relu(bn(conv(relu(bn(conv(x))))) + shortcut). */
static loom_status_t block(ex_model_t *m, const char *name, loom_value_t x,
                           int64_t in, int64_t out, int64_t stride, loom_value_t *y) {
  char n[96];
  loom_value_t a, b, skip = x, sum;
  join(n, sizeof n, name, "1");
  EX_TRY(conv_bn(m, n, x, in, out, 3, stride, 1, &a));
  join(n, sizeof n, name, "2");
  EX_TRY(conv_bn(m, n, a, out, out, 3, 1, 0, &b));
  if (stride != 1 || in != out) {
    join(n, sizeof n, name, "downsample");
    EX_TRY(conv_bn(m, n, x, in, out, 1, stride, 0, &skip));
  }
  EX_TRY(loom_add(m->g, b, skip, &sum));
  return loom_relu(m->g, sum, y);
}

loom_status_t ex_resnet(ex_model_t *m, const ex_resnet_cfg_t *c, loom_value_t *logits) {
  int64_t xs[4] = {c->batch, c->channels, c->size, c->size}, w = c->width;
  loom_value_t stem, b1, b2, pooled, flat;
  EX_TRY(ex_input(m, 4, xs));
  EX_TRY(conv_bn(m, "stem", m->x, c->channels, w, 3, 1, 1, &stem));
  EX_TRY(block(m, "layer1", stem, w, w, 1, &b1));
  EX_TRY(block(m, "layer2", b1, w, 2 * w, 2, &b2));
  EX_TRY(loom_global_avg_pool(m->g, b2, &pooled));
  loom_dim_t fs[2] = {c->batch, 2 * w};
  EX_TRY(loom_reshape(m->g, pooled, 2, fs, &flat));
  return ex_linear(m, "fc", flat, 2 * w, c->classes, logits);
}

/* ---- ViT -------------------------------------------------------------------------- */

/* (B, T, D) -> (B, H, T, D/H). */
static loom_status_t split_heads(ex_model_t *m, const ex_vit_cfg_t *c,
                                 int64_t t, loom_value_t x, loom_value_t *y) {
  loom_dim_t s[4] = {c->batch, t, c->heads, c->dim / c->heads};
  int64_t perm[4] = {0, 2, 1, 3};
  loom_value_t r;
  EX_TRY(loom_reshape(m->g, x, 4, s, &r));
  return loom_transpose(m->g, r, perm, y);
}

static loom_status_t attention(ex_model_t *m, const ex_vit_cfg_t *c,
                               const char *name, int64_t t, loom_value_t x,
                               loom_value_t *y) {
  char n[96];
  int64_t d = c->dim, sizes[3] = {d, d, d}, perm[4] = {0, 2, 1, 3};
  loom_dim_t merged[3] = {c->batch, t, d};
  loom_value_t qkv, parts[3], q, k, v, scores, scale, scaled, p, o, ot, om;
  join(n, sizeof n, name, "qkv");
  EX_TRY(ex_linear(m, n, x, d, 3 * d, &qkv));
  EX_TRY(loom_split(m->g, qkv, -1, 3, sizes, parts));
  EX_TRY(split_heads(m, c, t, parts[0], &q));
  EX_TRY(split_heads(m, c, t, parts[1], &k));
  EX_TRY(split_heads(m, c, t, parts[2], &v));
  EX_TRY(loom_matmul(m->g, q, k, 0, 1, &scores));
  EX_TRY(ex_scalar(m, 1.0 / sqrt((double)(d / c->heads)), &scale));
  EX_TRY(loom_mul(m->g, scores, scale, &scaled));
  EX_TRY(loom_softmax(m->g, scaled, -1, &p));
  EX_TRY(loom_matmul(m->g, p, v, 0, 0, &o));
  EX_TRY(loom_transpose(m->g, o, perm, &ot));
  EX_TRY(loom_reshape(m->g, ot, 3, merged, &om));
  join(n, sizeof n, name, "proj");
  return ex_linear(m, n, om, d, d, y);
}

/* x + dropout(attn(ln1(x))), then + dropout(mlp(ln2(.))). */
static loom_status_t encoder(ex_model_t *m, const ex_vit_cfg_t *c, int i,
                             int64_t t, loom_value_t x, loom_value_t *y) {
  char n[96];
  loom_value_t l1, a, ad, h, l2, f1, g, f2, fd;
  snprintf(n, sizeof n, "blocks.%d.norm1", i);
  EX_TRY(ex_layer_norm(m, n, x, c->dim, &l1));
  snprintf(n, sizeof n, "blocks.%d.attn", i);
  EX_TRY(attention(m, c, n, t, l1, &a));
  EX_TRY(ex_dropout(m, a, c->dropout, &ad));
  EX_TRY(loom_add(m->g, x, ad, &h));
  snprintf(n, sizeof n, "blocks.%d.norm2", i);
  EX_TRY(ex_layer_norm(m, n, h, c->dim, &l2));
  snprintf(n, sizeof n, "blocks.%d.mlp.fc1", i);
  EX_TRY(ex_linear(m, n, l2, c->dim, c->mlp, &f1));
  EX_TRY(loom_gelu(m->g, f1, &g));
  snprintf(n, sizeof n, "blocks.%d.mlp.fc2", i);
  EX_TRY(ex_linear(m, n, g, c->mlp, c->dim, &f2));
  EX_TRY(ex_dropout(m, f2, c->dropout, &fd));
  return loom_add(m->g, h, fd, y);
}

/* Patches -> (B, P, D) tokens, the class token in front, positions added. */
static loom_status_t embed(ex_model_t *m, const ex_vit_cfg_t *c, int64_t np,
                           loom_value_t *tokens) {
  int64_t d = c->dim, perm[3] = {0, 2, 1}, one_d[3] = {1, 1, d}, pos_s[3] = {1, np + 1, d};
  loom_dim_t flat[3] = {c->batch, d, np}, cls_b[3] = {c->batch, 1, d};
  loom_value_t p, pf, pt, cls, clse, seq[2], cat, pos;
  EX_TRY(ex_conv(m, "patch_embed.proj", m->x, c->channels, d, c->patch, c->patch, 0, 1, &p));
  EX_TRY(loom_reshape(m->g, p, 3, flat, &pf));
  EX_TRY(loom_transpose(m->g, pf, perm, &pt));
  EX_TRY(ex_param(m, "cls_token", 3, one_d, EX_INIT_SMALL, &cls));
  EX_TRY(loom_expand(m->g, cls, 3, cls_b, &clse));
  seq[0] = clse, seq[1] = pt;
  EX_TRY(loom_concat(m->g, 2, seq, 1, &cat));
  EX_TRY(ex_param(m, "pos_embed", 3, pos_s, EX_INIT_SMALL, &pos));
  return loom_add(m->g, cat, pos, tokens);
}

loom_status_t ex_vit(ex_model_t *m, const ex_vit_cfg_t *c, loom_value_t *logits) {
  int64_t xs[4] = {c->batch, c->channels, c->size, c->size};
  int64_t side = c->size / c->patch, t = side * side + 1;
  int64_t start = 0, end = 1, axis = 1, step = 1;
  loom_dim_t fs[2] = {c->batch, c->dim};
  loom_value_t h, ln, first, flat;
  if (c->dim % c->heads || c->size % c->patch) return LOOM_ERR_INVALID;
  EX_TRY(ex_input(m, 4, xs));
  EX_TRY(embed(m, c, t - 1, &h));
  for (int i = 0; i < c->depth; i++) EX_TRY(encoder(m, c, i, t, h, &h));
  EX_TRY(ex_layer_norm(m, "norm", h, c->dim, &ln));
  EX_TRY(loom_slice(m->g, ln, 1, &start, &end, &axis, &step, &first));
  EX_TRY(loom_reshape(m->g, first, 2, fs, &flat));
  return ex_linear(m, "head", flat, c->dim, c->classes, logits);
}
