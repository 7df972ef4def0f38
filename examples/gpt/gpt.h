/* A GPT-style character language model built with Loom's C API: token and
 * learned position embeddings, pre-LN blocks of causal multi-head
 * self-attention and a GELU MLP, dropout, a final layer norm and a head
 * tied to the token embedding. The training step (forward, cross-entropy,
 * loom_grad, gradient clipping, AdamW with a runtime learning rate) is one
 * graph compiled once and replayed; a separate batch-1 inference graph
 * takes the training graph's parameter tensors as inputs, so sampling
 * shares the weights without copying them. */
#ifndef LOOM_EXAMPLES_GPT_H
#define LOOM_EXAMPLES_GPT_H

#include <stdint.h>

#include "loom/loom.h"

/* Returns from the calling function when call fails. */
#define GPT_TRY(call)                                                      \
  do {                                                                     \
    loom_status_t gpt_s_ = (call);                                         \
    if (gpt_s_ != LOOM_OK) return gpt_s_;                                  \
  } while (0)

typedef struct gpt_config {
  int64_t vocab;    /* distinct characters */
  int64_t d_model;  /* embedding width */
  int64_t n_layers; /* transformer blocks */
  int64_t n_heads;  /* attention heads; d_model % n_heads == 0 */
  int64_t seq;      /* context length */
  int64_t batch;    /* sequences per training step */
  double dropout;   /* drop probability after embeddings, attention, MLP */
  loom_dtype_t dtype; /* F32 for training; F64 for gradient checks */
  uint64_t seed;    /* parameter initialization and dropout streams */
  /* Data parallelism: NULL trains in one process; else each rank trains
   * on its own batches, the gradients averaged across the ranks, every
   * rank starting from rank 0's parameters. */
  loom_comm_t *comm;
  int shard_optimizer_state; /* with comm: ZeRO-1, each rank 1 / ranks of AdamW's state */
} gpt_config_t;

/* d 64, 2 layers, 4 heads, seq 32, batch 16, dropout 0.1, f32. */
void gpt_config_default(gpt_config_t *c, int64_t vocab);

/* ---- The model ------------------------------------------------------------- */

#define GPT_MAX_PARAMS 64

/* The parameters' names and shapes, in a fixed order. */
typedef struct gpt_param_spec {
  char name[64];
  int rank;
  int64_t shape[2];
  int init; /* 0: normal(0, 0.02), 1: zeros, 2: ones */
} gpt_param_spec_t;

/* Fills specs (GPT_MAX_PARAMS entries) and returns their count. */
int gpt_param_specs(const gpt_config_t *c, gpt_param_spec_t *specs);
/* Fills t (of spec's shape) with spec's initial values from seed. */
loom_status_t gpt_param_init(const gpt_param_spec_t *spec, uint64_t seed,
                             loom_tensor_t *t);

/* The logits (batch, seq, vocab) of tokens (batch, seq) (i32), the
 * parameters being values of g in gpt_param_specs's order (parameters or
 * inputs). offset (an i64 scalar) selects the dropout masks; train 0
 * leaves dropout out. */
loom_status_t gpt_forward(loom_graph_t *g, const gpt_config_t *c,
                          int64_t batch, const loom_value_t *params,
                          loom_value_t tokens, loom_value_t offset, int train,
                          loom_value_t *logits);
/* Mean cross-entropy of logits (batch, seq, vocab) against targets
 * (batch * seq) (i32). */
loom_status_t gpt_loss(loom_graph_t *g, const gpt_config_t *c, int64_t batch,
                       loom_value_t logits, loom_value_t targets,
                       loom_value_t *loss);

/* ---- Training --------------------------------------------------------------- */

typedef struct gpt_trainer gpt_trainer_t;

/* Builds the training step and initializes the parameters. compile 0:
 * the steps run in the interpreter; threads 0: the default. */
loom_status_t gpt_trainer_create(const gpt_config_t *c, int compile,
                                 int threads, gpt_trainer_t **out);
void gpt_trainer_destroy(gpt_trainer_t *t);
/* One step on tokens and targets (batch * seq each) at learning rate lr;
 * loss (may be NULL) receives the batch's loss before the update. */
loom_status_t gpt_trainer_step(gpt_trainer_t *t, const int32_t *tokens,
                               const int32_t *targets, float lr, float *loss);
/* Parameter i (gpt_param_specs order) and the dropout offset. */
loom_tensor_t *gpt_trainer_param(gpt_trainer_t *t, int i);
int64_t gpt_trainer_offset(gpt_trainer_t *t);
loom_graph_t *gpt_trainer_graph(gpt_trainer_t *t);
const gpt_config_t *gpt_trainer_config(gpt_trainer_t *t);
int gpt_trainer_num_params(gpt_trainer_t *t);

/* Linear warm-up to base over warmup steps, then constant. */
float gpt_lr_at(int step, float base, int warmup);

/* ---- Data -------------------------------------------------------------------- */

typedef struct gpt_text {
  int32_t *ids;   /* the text as character ids */
  int64_t n;      /* characters */
  int vocab;      /* distinct characters */
  unsigned char chars[256]; /* id -> character */
} gpt_text_t;

/* Reads a text file (LOOM_ERR_IO naming it when missing or unreadable). */
loom_status_t gpt_text_load(const char *path, gpt_text_t *out);
/* The text from memory. */
loom_status_t gpt_text_from_string(const char *s, int64_t n, gpt_text_t *out);
void gpt_text_free(gpt_text_t *t);
/* splitmix64: the next number of a small host generator. */
uint64_t gpt_rng_next(uint64_t *state);
/* A random batch: batch windows of seq + 1 characters, split into inputs
 * and next-character targets; *rng is advanced. */
void gpt_text_batch(const gpt_text_t *t, int64_t batch, int64_t seq,
                    uint64_t *rng, int32_t *tokens, int32_t *targets);

/* ---- Sampling ----------------------------------------------------------------- */

typedef struct gpt_sampler gpt_sampler_t;

/* A compiled batch-1 inference graph over the trainer's parameters. */
loom_status_t gpt_sampler_create(gpt_trainer_t *t, int threads,
                                 gpt_sampler_t **out);
void gpt_sampler_destroy(gpt_sampler_t *s);
/* Appends n characters to prompt (ids, len >= 1) into out (len + n ids):
 * temperature 0 is greedy, else sampling from softmax(logits / T). */
loom_status_t gpt_sample(gpt_sampler_t *s, const int32_t *prompt, int len,
                         int n, double temperature, uint64_t seed,
                         int32_t *out);

/* ---- Demo -------------------------------------------------------------------- */

/* Trains the default model on /usr/share/common-licenses/GPL-3 for steps
 * steps (0: 150), printing the loss falling, then a sample. 0: success. */
int gpt_demo(int steps, int threads);
/* The example's whole run: train on path for steps, print every
 * print_every steps, then sample n_sample characters. 0: success. */
int gpt_run(const char *path, int steps, int print_every, int threads,
            int n_sample);
/* gpt_run on every process of an MPI job (mpirun -np N): each rank its
 * own batches, rank 0 printing and sampling; zero: the optimizer's state
 * split across the ranks (ZeRO-1). */
int gpt_run_data_parallel(const char *path, int steps, int print_every, int threads,
                          int n_sample, int zero);

#endif
