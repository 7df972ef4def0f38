/* The GPT model: parameters, forward pass and loss (see gpt.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gpt.h"

/* Large enough that exp underflows to 0 in softmax, finite so that masked
 * rows never compute inf - inf. */
#define GPT_MASK_NEG -1e9

void gpt_config_default(gpt_config_t *c, int64_t vocab) {
  *c = (gpt_config_t){.vocab = vocab, .d_model = 64, .n_layers = 2,
                      .n_heads = 4, .seq = 32, .batch = 16, .dropout = 0.1,
                      .dtype = LOOM_F32, .seed = 1234};
}

/* ---- Parameters ---------------------------------------------------------------- */

static void add_spec(gpt_param_spec_t *specs, int *n, const char *prefix,
                     const char *name, int rank, int64_t d0, int64_t d1,
                     int init) {
  gpt_param_spec_t *s = &specs[(*n)++];
  snprintf(s->name, sizeof s->name, "%s%s", prefix, name);
  s->rank = rank;
  s->shape[0] = d0;
  s->shape[1] = d1;
  s->init = init;
}

/* Per block: ln1 (2), attention qkv (2) and projection (2), ln2 (2), MLP
 * (4): 12 parameters, weights in PyTorch's (out, in) layout. */
enum { GPT_GLOBAL_PARAMS = 2, GPT_BLOCK_PARAMS = 12 };
enum { P_WTE, P_WPE };
enum { B_LN1_W, B_LN1_B, B_QKV_W, B_QKV_B, B_PROJ_W, B_PROJ_B, B_LN2_W,
       B_LN2_B, B_FC_W, B_FC_B, B_OUT_W, B_OUT_B };

int gpt_param_specs(const gpt_config_t *c, gpt_param_spec_t *specs) {
  int n = 0;
  int64_t d = c->d_model;
  add_spec(specs, &n, "", "wte", 2, c->vocab, d, 0);
  add_spec(specs, &n, "", "wpe", 2, c->seq, d, 0);
  for (int64_t l = 0; l < c->n_layers && n + GPT_BLOCK_PARAMS + 2 <= GPT_MAX_PARAMS; l++) {
    char p[16];
    snprintf(p, sizeof p, "h.%d.", (int)l);
    add_spec(specs, &n, p, "ln_1.weight", 1, d, 0, 2);
    add_spec(specs, &n, p, "ln_1.bias", 1, d, 0, 1);
    add_spec(specs, &n, p, "attn.c_attn.weight", 2, 3 * d, d, 0);
    add_spec(specs, &n, p, "attn.c_attn.bias", 1, 3 * d, 0, 1);
    add_spec(specs, &n, p, "attn.c_proj.weight", 2, d, d, 0);
    add_spec(specs, &n, p, "attn.c_proj.bias", 1, d, 0, 1);
    add_spec(specs, &n, p, "ln_2.weight", 1, d, 0, 2);
    add_spec(specs, &n, p, "ln_2.bias", 1, d, 0, 1);
    add_spec(specs, &n, p, "mlp.c_fc.weight", 2, 4 * d, d, 0);
    add_spec(specs, &n, p, "mlp.c_fc.bias", 1, 4 * d, 0, 1);
    add_spec(specs, &n, p, "mlp.c_proj.weight", 2, d, 4 * d, 0);
    add_spec(specs, &n, p, "mlp.c_proj.bias", 1, d, 0, 1);
  }
  add_spec(specs, &n, "", "ln_f.weight", 1, d, 0, 2);
  add_spec(specs, &n, "", "ln_f.bias", 1, d, 0, 1);
  return n;
}

loom_status_t gpt_param_init(const gpt_param_spec_t *spec, uint64_t seed,
                             loom_tensor_t *t) {
  if (spec->init == 1) return loom_init_zeros(t);
  if (spec->init == 2) return loom_init_ones(t);
  /* GPT-2's initialization: every weight normal with std 0.02. */
  return loom_init_normal(t, seed, 0.0, 0.02);
}

/* ---- Forward ------------------------------------------------------------------------- */

typedef struct fwd {
  loom_graph_t *g;
  const gpt_config_t *c;
  int64_t batch;
  loom_value_t offset;
  int train;
  int n_dropouts; /* dropout sites so far: each gets its own seed */
} fwd_t;

static loom_status_t scalar(fwd_t *f, double v, loom_value_t *out) {
  return loom_full(f->g, 0, NULL, v, f->c->dtype, out);
}

/* Dropout with a seed per site and the shared, per-step offset. */
static loom_status_t dropout(fwd_t *f, loom_value_t x, loom_value_t *y) {
  if (!f->train || f->c->dropout <= 0) {
    *y = x;
    return LOOM_OK;
  }
  loom_value_t seed, mask;
  double s = (double)((f->c->seed * 7919 + (uint64_t)f->n_dropouts++) & 0xffffffffu);
  GPT_TRY(loom_full(f->g, 0, NULL, s, LOOM_I64, &seed));
  return loom_dropout(f->g, x, seed, f->offset, f->c->dropout, y, &mask);
}

/* y = x @ w^T + b for x (..., in). */
static loom_status_t linear(fwd_t *f, loom_value_t x, loom_value_t w,
                            loom_value_t b, loom_value_t *y) {
  loom_value_t xw;
  GPT_TRY(loom_matmul(f->g, x, w, 0, 1, &xw));
  return loom_add(f->g, xw, b, y);
}

static loom_status_t layer_norm(fwd_t *f, loom_value_t x, const loom_value_t *p,
                                loom_value_t *y) {
  return loom_layer_norm(f->g, x, 1, p[0], 1, p[1], -1, 1e-5, y);
}

/* (b, s, d) -> (b, heads, s, d / heads). */
static loom_status_t split_heads(fwd_t *f, loom_value_t x, loom_value_t *y) {
  const gpt_config_t *c = f->c;
  loom_value_t r;
  loom_dim_t dims[4] = {f->batch, c->seq, c->n_heads, c->d_model / c->n_heads};
  GPT_TRY(loom_reshape(f->g, x, 4, dims, &r));
  return loom_transpose(f->g, r, (int64_t[]){0, 2, 1, 3}, y);
}

/* The additive causal mask (seq, seq): 0 on and below the diagonal, a
 * large negative number above it, so position i attends to j <= i. */
static loom_status_t causal_mask(fwd_t *f, loom_value_t *out) {
  int64_t s = f->c->seq, shape[2] = {s, s};
  loom_tensor_t *m;
  GPT_TRY(loom_tensor_create(LOOM_F64, 2, shape, &m));
  double *data = loom_tensor_data(m);
  for (int64_t i = 0; i < s; i++)
    for (int64_t j = 0; j < s; j++) data[i * s + j] = j > i ? GPT_MASK_NEG : 0.0;
  loom_value_t v;
  loom_status_t st = loom_graph_constant(f->g, m, &v);
  loom_tensor_destroy(m);
  if (st != LOOM_OK) return st;
  return f->c->dtype == LOOM_F64 ? (*out = v, LOOM_OK) : loom_cast(f->g, v, f->c->dtype, out);
}

static loom_status_t attention(fwd_t *f, loom_value_t x, const loom_value_t *p,
                               loom_value_t mask, loom_value_t *y) {
  const gpt_config_t *c = f->c;
  int64_t d = c->d_model;
  loom_value_t qkv, parts[3], q, k, v, scores, scale, scaled, masked, probs;
  loom_value_t ctx, ctx_t, merged, proj;
  GPT_TRY(linear(f, x, p[B_QKV_W], p[B_QKV_B], &qkv));
  GPT_TRY(loom_split(f->g, qkv, -1, 3, (int64_t[]){d, d, d}, parts));
  GPT_TRY(split_heads(f, parts[0], &q));
  GPT_TRY(split_heads(f, parts[1], &k));
  GPT_TRY(split_heads(f, parts[2], &v));
  GPT_TRY(loom_matmul(f->g, q, k, 0, 1, &scores));
  GPT_TRY(scalar(f, 1.0 / sqrt((double)(d / c->n_heads)), &scale));
  GPT_TRY(loom_mul(f->g, scores, scale, &scaled));
  GPT_TRY(loom_add(f->g, scaled, mask, &masked));
  GPT_TRY(loom_softmax(f->g, masked, -1, &probs));
  GPT_TRY(dropout(f, probs, &probs));
  GPT_TRY(loom_matmul(f->g, probs, v, 0, 0, &ctx));
  GPT_TRY(loom_transpose(f->g, ctx, (int64_t[]){0, 2, 1, 3}, &ctx_t));
  GPT_TRY(loom_reshape(f->g, ctx_t, 3, (loom_dim_t[]){f->batch, c->seq, d}, &merged));
  GPT_TRY(linear(f, merged, p[B_PROJ_W], p[B_PROJ_B], &proj));
  return dropout(f, proj, y);
}

static loom_status_t mlp(fwd_t *f, loom_value_t x, const loom_value_t *p,
                         loom_value_t *y) {
  loom_value_t h, act, out;
  GPT_TRY(linear(f, x, p[B_FC_W], p[B_FC_B], &h));
  GPT_TRY(loom_gelu(f->g, h, &act));
  GPT_TRY(linear(f, act, p[B_OUT_W], p[B_OUT_B], &out));
  return dropout(f, out, y);
}

/* Pre-LN (GPT-2): x + attn(ln_1(x)), then + mlp(ln_2(x)). */
static loom_status_t block(fwd_t *f, loom_value_t x, const loom_value_t *p,
                           loom_value_t mask, loom_value_t *y) {
  loom_value_t h, a, r, h2, m;
  GPT_TRY(layer_norm(f, x, &p[B_LN1_W], &h));
  GPT_TRY(attention(f, h, p, mask, &a));
  GPT_TRY(loom_add(f->g, x, a, &r));
  GPT_TRY(layer_norm(f, r, &p[B_LN2_W], &h2));
  GPT_TRY(mlp(f, h2, p, &m));
  return loom_add(f->g, r, m, y);
}

loom_status_t gpt_forward(loom_graph_t *g, const gpt_config_t *c,
                          int64_t batch, const loom_value_t *params,
                          loom_value_t tokens, loom_value_t offset, int train,
                          loom_value_t *logits) {
  if (!g || !c || !params || !logits || c->n_heads <= 0 || c->d_model % c->n_heads)
    return LOOM_ERR_INVALID;
  fwd_t f = {.g = g, .c = c, .batch = batch, .offset = offset, .train = train};
  loom_value_t tok, h, mask;
  GPT_TRY(loom_embedding(g, params[P_WTE], tokens, &tok));
  /* wpe (seq, d) broadcasts over the batch: position t gets row t. */
  GPT_TRY(loom_add(g, tok, params[P_WPE], &h));
  GPT_TRY(dropout(&f, h, &h));
  GPT_TRY(causal_mask(&f, &mask));
  const loom_value_t *p = params + GPT_GLOBAL_PARAMS;
  for (int64_t l = 0; l < c->n_layers; l++, p += GPT_BLOCK_PARAMS)
    GPT_TRY(block(&f, h, p, mask, &h));
  GPT_TRY(layer_norm(&f, h, p, &h));
  /* The head is tied to the token embedding, as in GPT-2. */
  return loom_matmul(g, h, params[P_WTE], 0, 1, logits);
}

loom_status_t gpt_loss(loom_graph_t *g, const gpt_config_t *c, int64_t batch,
                       loom_value_t logits, loom_value_t targets,
                       loom_value_t *loss) {
  loom_value_t flat;
  GPT_TRY(loom_reshape(g, logits, 2, (loom_dim_t[]){batch * c->seq, c->vocab}, &flat));
  return loom_cross_entropy(g, flat, targets, LOOM_NO_IGNORE_INDEX, 0.0,
                            LOOM_REDUCTION_MEAN, loss);
}
