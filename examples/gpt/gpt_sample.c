/* Sampling from a trained GPT through a compiled batch-1 inference graph,
 * and the example's whole run (train, print, sample). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpt.h"

struct gpt_sampler {
  gpt_trainer_t *trainer;
  loom_graph_t *g;
  loom_executable_t *exe;
  int n_in;                 /* tokens, then the parameters */
  loom_tensor_t **in;       /* in[0]: tokens; the rest: the trainer's */
  loom_tensor_t *logits;    /* output (1, seq, vocab) */
};

/* The parameters are graph inputs bound to the trainer's parameter
 * tensors at every run: the sampler sees the latest weights, uncopied. */
static loom_status_t build_sampler(gpt_sampler_t *s) {
  const gpt_config_t *c = gpt_trainer_config(s->trainer);
  gpt_param_spec_t specs[GPT_MAX_PARAMS];
  loom_value_t params[GPT_MAX_PARAMS], tokens, offset, logits;
  int n = gpt_param_specs(c, specs);
  GPT_TRY(loom_graph_create(&s->g));
  GPT_TRY(loom_graph_input(s->g, "tokens", LOOM_I32, 2, (loom_dim_t[]){1, c->seq}, &tokens));
  for (int i = 0; i < n; i++)
    GPT_TRY(loom_graph_input(s->g, specs[i].name, c->dtype, specs[i].rank,
                             specs[i].shape, &params[i]));
  GPT_TRY(loom_full(s->g, 0, NULL, 0, LOOM_I64, &offset));
  GPT_TRY(gpt_forward(s->g, c, 1, params, tokens, offset, 0, &logits));
  GPT_TRY(loom_graph_output(s->g, logits));
  s->n_in = n + 1;
  s->in = calloc((size_t)s->n_in, sizeof *s->in);
  if (!s->in) return LOOM_ERR_NOMEM;
  GPT_TRY(loom_tensor_create(LOOM_I32, 2, (int64_t[]){1, c->seq}, &s->in[0]));
  for (int i = 0; i < n; i++) s->in[i + 1] = gpt_trainer_param(s->trainer, i);
  return LOOM_OK;
}

loom_status_t gpt_sampler_create(gpt_trainer_t *t, int threads,
                                 gpt_sampler_t **out) {
  if (!t || !out) return LOOM_ERR_INVALID;
  gpt_sampler_t *s = calloc(1, sizeof *s);
  if (!s) return LOOM_ERR_NOMEM;
  s->trainer = t;
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.num_threads = threads;
  loom_status_t st = build_sampler(s);
  if (st == LOOM_OK) st = loom_compile(s->g, &o, &s->exe);
  if (st == LOOM_OK) st = loom_executable_new_output(s->exe, 0, &s->logits);
  if (st != LOOM_OK) {
    gpt_sampler_destroy(s);
    return st;
  }
  *out = s;
  return LOOM_OK;
}

void gpt_sampler_destroy(gpt_sampler_t *s) {
  if (!s) return;
  if (s->in) loom_tensor_destroy(s->in[0]);
  free(s->in);
  loom_tensor_destroy(s->logits);
  loom_executable_destroy(s->exe);
  loom_graph_destroy(s->g);
  free(s);
}

/* The next id from row `row` of the logits. */
static int pick(const float *row, int64_t vocab, double temperature,
                uint64_t *rng) {
  int best = 0;
  for (int64_t v = 1; v < vocab; v++)
    if (row[v] > row[best]) best = (int)v;
  if (temperature <= 0) return best;
  double total = 0, u;
  for (int64_t v = 0; v < vocab; v++) total += exp((row[v] - row[best]) / temperature);
  u = (double)(gpt_rng_next(rng) >> 11) * 0x1p-53 * total;
  for (int64_t v = 0; v < vocab; v++) {
    u -= exp((row[v] - row[best]) / temperature);
    if (u <= 0) return (int)v;
  }
  return best;
}

loom_status_t gpt_sample(gpt_sampler_t *s, const int32_t *prompt, int len,
                         int n, double temperature, uint64_t seed,
                         int32_t *out) {
  if (!s || !prompt || !out || len < 1 || n < 0) return LOOM_ERR_INVALID;
  const gpt_config_t *c = gpt_trainer_config(s->trainer);
  if (c->dtype != LOOM_F32) return LOOM_ERR_UNSUPPORTED;
  int32_t *ctx = loom_tensor_data(s->in[0]);
  const float *logits = loom_tensor_data(s->logits);
  memcpy(out, prompt, (size_t)len * sizeof *out);
  for (int k = 0; k < n; k++) {
    int total = len + k;
    int used = total < c->seq ? total : (int)c->seq;
    /* The last `used` ids; causal attention leaves the zero padding after
     * them without effect on row used - 1. */
    memset(ctx, 0, (size_t)c->seq * sizeof *ctx);
    memcpy(ctx, out + total - used, (size_t)used * sizeof *ctx);
    GPT_TRY(loom_executable_run(s->exe, s->n_in, s->in, 1, &s->logits));
    out[total] = pick(logits + (int64_t)(used - 1) * c->vocab, c->vocab,
                      temperature, &seed);
  }
  return LOOM_OK;
}

/* ---- The run ------------------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void print_ids(const gpt_text_t *text, const int32_t *ids, int n) {
  for (int i = 0; i < n; i++) putchar(text->chars[ids[i]]);
  putchar('\n');
}

static loom_status_t sample_text(gpt_trainer_t *t, const gpt_text_t *text,
                                 int threads, int n_sample) {
  gpt_sampler_t *s;
  GPT_TRY(gpt_sampler_create(t, threads, &s));
  int32_t *out = malloc((size_t)(n_sample + 1) * sizeof *out);
  loom_status_t st = out ? LOOM_OK : LOOM_ERR_NOMEM;
  if (st == LOOM_OK) st = gpt_sample(s, text->ids, 1, n_sample, 0.8, 7, out);
  if (st == LOOM_OK) {
    printf("sample (temperature 0.8):\n");
    print_ids(text, out, n_sample + 1);
  }
  free(out);
  gpt_sampler_destroy(s);
  return st;
}

static loom_status_t train_loop(gpt_trainer_t *t, const gpt_text_t *text,
                                int steps, int print_every) {
  const gpt_config_t *c = gpt_trainer_config(t);
  int64_t n = c->batch * c->seq;
  int32_t *tokens = malloc((size_t)n * sizeof *tokens);
  int32_t *targets = malloc((size_t)n * sizeof *targets);
  int rank = c->comm ? loom_comm_rank(c->comm) : 0;
  uint64_t rng = 42 + 7919 * (uint64_t)rank; /* each rank its own batches */
  double start = now_s(), sum = 0;
  loom_status_t st = tokens && targets ? LOOM_OK : LOOM_ERR_NOMEM;
  for (int k = 0; k < steps && st == LOOM_OK; k++) {
    float loss;
    gpt_text_batch(text, c->batch, c->seq, &rng, tokens, targets);
    st = gpt_trainer_step(t, tokens, targets, gpt_lr_at(k, 3e-3f, 50), &loss);
    sum += loss;
    if (st == LOOM_OK && rank == 0 && ((k + 1) % print_every == 0 || k == 0)) {
      int count = k == 0 ? 1 : ((k + 1) % print_every ? (k + 1) % print_every : print_every);
      printf("step %4d  loss %.4f  %.1f steps/s\n", k + 1, sum / count,
             (k + 1) / (now_s() - start));
      fflush(stdout);
      sum = 0;
    }
  }
  free(tokens);
  free(targets);
  return st;
}

static int run(const char *path, int steps, int print_every, int threads, int n_sample,
               loom_comm_t *comm, int zero) {
  int rank = comm ? loom_comm_rank(comm) : 0;
  gpt_text_t text;
  if (gpt_text_load(path, &text) != LOOM_OK) {
    fprintf(stderr, "gpt: cannot read the text file '%s' (name one on the command line)\n",
            path ? path : "(null)");
    return 1;
  }
  gpt_config_t c;
  gpt_config_default(&c, text.vocab);
  c.comm = comm;
  c.shard_optimizer_state = zero;
  if (rank == 0) {
    printf("gpt: %s, %lld characters, vocab %d; d %lld, %lld layers, %lld heads, seq %lld, batch %lld",
           path, (long long)text.n, text.vocab, (long long)c.d_model, (long long)c.n_layers,
           (long long)c.n_heads, (long long)c.seq, (long long)c.batch);
    if (comm) printf(" per rank, %d ranks%s", loom_comm_size(comm),
                     zero ? ", AdamW's state split across them" : "");
    printf("\n");
  }
  gpt_trainer_t *t = NULL;
  double t0 = now_s();
  loom_status_t st = gpt_trainer_create(&c, 1, threads, &t);
  if (st == LOOM_OK && rank == 0) printf("compiled the training step in %.1f s\n", now_s() - t0);
  if (st == LOOM_OK) st = train_loop(t, &text, steps, print_every > 0 ? print_every : 10);
  if (st == LOOM_OK && n_sample > 0 && rank == 0) st = sample_text(t, &text, threads, n_sample);
  if (st != LOOM_OK)
    fprintf(stderr, "gpt: rank %d: %s: %s\n", rank, loom_status_name(st), loom_last_error());
  gpt_trainer_destroy(t);
  gpt_text_free(&text);
  return st == LOOM_OK ? 0 : 1;
}

int gpt_run(const char *path, int steps, int print_every, int threads, int n_sample) {
  return run(path, steps, print_every, threads, n_sample, NULL, 0);
}

int gpt_run_data_parallel(const char *path, int steps, int print_every, int threads,
                          int n_sample, int zero) {
  loom_comm_t *comm = NULL;
  if (loom_comm_world(&comm) != LOOM_OK) {
    fprintf(stderr, "gpt: --data-parallel: %s\n", loom_last_error());
    return 1;
  }
  int rc = run(path, steps, print_every, threads, n_sample, comm, zero);
  loom_comm_destroy(comm);
  return rc;
}

int gpt_demo(int steps, int threads) {
  return gpt_run("/usr/share/common-licenses/GPL-3", steps > 0 ? steps : 150,
                 steps > 0 && steps < 100 ? 10 : 25, threads, 120);
}
