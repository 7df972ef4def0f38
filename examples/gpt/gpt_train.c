/* The GPT training step as one graph, compiled once and replayed, and the
 * host side of training: text, batches, the learning-rate schedule. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"

/* Optimizer settings of nanoGPT's character model. */
#define GPT_BETA1 0.9
#define GPT_BETA2 0.99
#define GPT_EPS 1e-8
#define GPT_WEIGHT_DECAY 0.1
#define GPT_CLIP 1.0

struct gpt_trainer {
  gpt_config_t cfg;
  loom_graph_t *g;
  int n_params;
  gpt_param_spec_t specs[GPT_MAX_PARAMS];
  loom_value_t params[GPT_MAX_PARAMS];
  loom_value_t offset;             /* the dropout offset parameter */
  loom_tensor_t *tokens, *targets; /* inputs, rewritten each step */
  loom_tensor_t *lr;               /* input: this step's learning rate */
  loom_tensor_t *loss;             /* output */
  loom_executable_t *exe;          /* NULL: interpreted */
};

static loom_status_t add_params(gpt_trainer_t *t) {
  t->n_params = gpt_param_specs(&t->cfg, t->specs);
  for (int i = 0; i < t->n_params; i++) {
    gpt_param_spec_t *s = &t->specs[i];
    loom_tensor_t *storage;
    GPT_TRY(loom_graph_param(t->g, s->name, t->cfg.dtype, s->rank, s->shape,
                             NULL, &t->params[i]));
    GPT_TRY(loom_graph_param_tensor(t->g, t->params[i], &storage));
    GPT_TRY(gpt_param_init(s, t->cfg.seed + (uint64_t)i, storage));
  }
  return loom_graph_param(t->g, "gpt.dropout_offset", LOOM_I64, 0, NULL, NULL,
                          &t->offset);
}

/* The gradients averaged across the ranks, clipped, and AdamW: the
 * state whole on every rank, or split across them. */
static loom_status_t data_parallel_update(gpt_trainer_t *t, const loom_value_t *grads,
                                          loom_value_t lr) {
  const gpt_config_t *c = &t->cfg;
  loom_optimizer_t adamw;
  loom_data_parallel_options_t o;
  GPT_TRY(loom_optimizer_init(&adamw, LOOM_OPTIMIZER_ADAMW));
  adamw.beta1 = GPT_BETA1, adamw.beta2 = GPT_BETA2, adamw.eps = GPT_EPS;
  adamw.weight_decay = GPT_WEIGHT_DECAY;
  GPT_TRY(loom_data_parallel_options_init(&o));
  o.shard_optimizer_state = c->shard_optimizer_state;
  o.max_grad_norm = GPT_CLIP;
  return loom_data_parallel_step(t->g, c->comm, &adamw, t->n_params, t->params, grads, lr, &o);
}

/* forward, loss, gradients, clipping, AdamW, and offset += 1, so that the
 * next replay draws new dropout masks. */
static loom_status_t build_step(gpt_trainer_t *t) {
  const gpt_config_t *c = &t->cfg;
  loom_graph_t *g = t->g;
  loom_value_t tokens, targets, lr, logits, loss, one, next;
  loom_value_t grads[GPT_MAX_PARAMS], clipped[GPT_MAX_PARAMS];
  GPT_TRY(loom_graph_input(g, "tokens", LOOM_I32, 2, (loom_dim_t[]){c->batch, c->seq}, &tokens));
  GPT_TRY(loom_graph_input(g, "targets", LOOM_I32, 1, (loom_dim_t[]){c->batch * c->seq}, &targets));
  GPT_TRY(loom_graph_input(g, "lr", LOOM_F32, 0, NULL, &lr));
  GPT_TRY(add_params(t));
  GPT_TRY(gpt_forward(g, c, c->batch, t->params, tokens, t->offset, 1, &logits));
  GPT_TRY(gpt_loss(g, c, c->batch, logits, targets, &loss));
  GPT_TRY(loom_grad(g, loss, t->n_params, t->params, grads));
  if (c->dtype != LOOM_F32) GPT_TRY(loom_cast(g, lr, c->dtype, &lr));
  if (c->comm) {
    GPT_TRY(data_parallel_update(t, grads, lr));
  } else {
    GPT_TRY(loom_clip_grad_norm(g, t->n_params, grads, GPT_CLIP, clipped, NULL));
    GPT_TRY(loom_adamw(g, t->n_params, t->params, clipped, lr, GPT_BETA1,
                       GPT_BETA2, GPT_EPS, GPT_WEIGHT_DECAY));
  }
  GPT_TRY(loom_full(g, 0, NULL, 1, LOOM_I64, &one));
  GPT_TRY(loom_add(g, t->offset, one, &next));
  GPT_TRY(loom_assign(g, t->offset, next));
  return loom_graph_output(g, loss);
}

static loom_status_t create_io(gpt_trainer_t *t) {
  const gpt_config_t *c = &t->cfg;
  GPT_TRY(loom_tensor_create(LOOM_I32, 2, (int64_t[]){c->batch, c->seq}, &t->tokens));
  GPT_TRY(loom_tensor_create(LOOM_I32, 1, (int64_t[]){c->batch * c->seq}, &t->targets));
  GPT_TRY(loom_tensor_create(LOOM_F32, 0, NULL, &t->lr));
  return loom_tensor_create(c->dtype, 0, NULL, &t->loss);
}

static loom_status_t trainer_init(gpt_trainer_t *t, int compile, int threads) {
  GPT_TRY(loom_graph_create(&t->g));
  GPT_TRY(build_step(t));
  if (t->cfg.comm) GPT_TRY(loom_comm_broadcast_params(t->cfg.comm, t->g, 0));
  GPT_TRY(create_io(t));
  if (!compile) return LOOM_OK;
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.num_threads = threads;
  return loom_compile(t->g, &o, &t->exe);
}

loom_status_t gpt_trainer_create(const gpt_config_t *c, int compile,
                                 int threads, gpt_trainer_t **out) {
  if (!c || !out) return LOOM_ERR_INVALID;
  *out = NULL;
  gpt_trainer_t *t = calloc(1, sizeof *t);
  if (!t) return LOOM_ERR_NOMEM;
  t->cfg = *c;
  loom_status_t s = trainer_init(t, compile, threads);
  if (s != LOOM_OK) {
    gpt_trainer_destroy(t);
    return s;
  }
  *out = t;
  return LOOM_OK;
}

void gpt_trainer_destroy(gpt_trainer_t *t) {
  if (!t) return;
  loom_executable_destroy(t->exe);
  loom_tensor_destroy(t->tokens);
  loom_tensor_destroy(t->targets);
  loom_tensor_destroy(t->lr);
  loom_tensor_destroy(t->loss);
  loom_graph_destroy(t->g);
  free(t);
}

loom_status_t gpt_trainer_step(gpt_trainer_t *t, const int32_t *tokens,
                               const int32_t *targets, float lr, float *loss) {
  size_t n = (size_t)(t->cfg.batch * t->cfg.seq) * sizeof(int32_t);
  GPT_TRY(loom_tensor_write(t->tokens, tokens, n));
  GPT_TRY(loom_tensor_write(t->targets, targets, n));
  GPT_TRY(loom_tensor_write(t->lr, &lr, sizeof lr));
  loom_tensor_t *in[3] = {t->tokens, t->targets, t->lr};
  double value;
  if (t->exe) {
    GPT_TRY(loom_executable_run(t->exe, 3, in, 1, &t->loss));
    GPT_TRY(loom_tensor_get_f64(t->loss, 0, &value));
  } else {
    loom_tensor_t *out = NULL;
    GPT_TRY(loom_interpret(t->g, 3, in, 1, &out));
    loom_status_t s = loom_tensor_get_f64(out, 0, &value);
    loom_tensor_destroy(out);
    GPT_TRY(s);
  }
  if (loss) *loss = (float)value;
  return LOOM_OK;
}

loom_tensor_t *gpt_trainer_param(gpt_trainer_t *t, int i) {
  loom_tensor_t *storage = NULL;
  if (i < 0 || i >= t->n_params) return NULL;
  loom_graph_param_tensor(t->g, t->params[i], &storage);
  return storage;
}

int64_t gpt_trainer_offset(gpt_trainer_t *t) {
  loom_tensor_t *storage = NULL;
  double v = -1;
  if (loom_graph_param_tensor(t->g, t->offset, &storage) == LOOM_OK)
    loom_tensor_get_f64(storage, 0, &v);
  return (int64_t)v;
}

loom_graph_t *gpt_trainer_graph(gpt_trainer_t *t) { return t->g; }
const gpt_config_t *gpt_trainer_config(gpt_trainer_t *t) { return &t->cfg; }
int gpt_trainer_num_params(gpt_trainer_t *t) { return t->n_params; }

float gpt_lr_at(int step, float base, int warmup) {
  if (warmup <= 0 || step >= warmup) return base;
  return base * (float)(step + 1) / (float)warmup;
}

/* ---- Text ---------------------------------------------------------------------- */

loom_status_t gpt_text_from_string(const char *s, int64_t n, gpt_text_t *out) {
  if (!s || !out || n < 2) return LOOM_ERR_INVALID;
  memset(out, 0, sizeof *out);
  int id_of[256];
  int seen[256] = {0};
  for (int64_t i = 0; i < n; i++) seen[(unsigned char)s[i]] = 1;
  /* Ids in byte order, so that a text always maps the same way. */
  for (int ch = 0; ch < 256; ch++)
    if (seen[ch]) {
      id_of[ch] = out->vocab;
      out->chars[out->vocab++] = (unsigned char)ch;
    }
  out->ids = malloc((size_t)n * sizeof *out->ids);
  if (!out->ids) return LOOM_ERR_NOMEM;
  for (int64_t i = 0; i < n; i++) out->ids[i] = id_of[(unsigned char)s[i]];
  out->n = n;
  return LOOM_OK;
}

loom_status_t gpt_text_load(const char *path, gpt_text_t *out) {
  FILE *f = path ? fopen(path, "rb") : NULL;
  if (!f) return LOOM_ERR_IO;
  char *buf = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
  if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n)))
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) n = -1;
  fclose(f);
  loom_status_t s = buf && n > 1 ? gpt_text_from_string(buf, n, out) : LOOM_ERR_IO;
  free(buf);
  return s;
}

void gpt_text_free(gpt_text_t *t) {
  if (t) free(t->ids);
}

/* splitmix64: a small host generator for batch positions and sampling. */
uint64_t gpt_rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void gpt_text_batch(const gpt_text_t *t, int64_t batch, int64_t seq,
                    uint64_t *rng, int32_t *tokens, int32_t *targets) {
  int64_t span = t->n - seq; /* starts with seq + 1 characters after them */
  for (int64_t b = 0; b < batch; b++) {
    int64_t start = span > 0 ? (int64_t)(gpt_rng_next(rng) % (uint64_t)span) : 0;
    for (int64_t i = 0; i < seq; i++) {
      tokens[b * seq + i] = t->ids[(start + i) % t->n];
      targets[b * seq + i] = t->ids[(start + i + 1) % t->n];
    }
  }
}
