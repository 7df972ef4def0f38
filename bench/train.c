/* bench train: one training step (forward, cross-entropy, loom_grad,
 * AdamW) compiled by Loom as ONE executable and replayed, against PyTorch
 * eager (forward, loss, backward, AdamW step, zero_grad) measured in the
 * same run, at 1 and 2 threads; and the peak memory of each. See
 * docs/training.md for what peak_bytes and torch_peak_bytes count.
 * A model that does not build, compile or train prints what failed on
 * stderr and null for its numbers.
 *   bench_train BENCH_DIR [MODEL...]
 * LOOM_BENCH_PEERS=0 skips PyTorch (null), LOOM_BENCH_THREADS=N measures
 * only N threads: for profiling Loom alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "loom/train.h"
#include "models.h"

enum { MAX_THREADS = 2, MAX_PARAMS = MODEL_MAX_PARAMS, SLOW_MS = 1000 };

/* The settings of the peer script: PyTorch at its best (../shared/PEERS.md). */
#define TORCH_ENV                                                          \
  "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "                          \
  "MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=100000000000 "   \
  "LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp"

/* AdamW as torch.optim.AdamW's defaults, with lr 1e-3. */
static const double LR = 1e-3, BETA1 = 0.9, BETA2 = 0.999, EPS = 1e-8, DECAY = 0.01;

typedef struct train_model {
  const char *name;
  int rank;
  int64_t shape[4]; /* of x; shape[0] is the batch */
  int64_t classes;
} train_model_t;

/* The configurations of issue 4 and ../shared/PEERS.md's training table. */
static const train_model_t models[] = {
    {"mlp", 2, {64, 784}, 10},
    {"resnet18", 4, {8, 3, 64, 64}, 1000},
    {"transformer", 3, {8, 128, 256}, 10},
    {"vit", 4, {8, 3, 64, 64}, 10},
};

static loom_status_t build_forward(loom_graph_t *g, const train_model_t *m,
                                   loom_value_t *logits) {
  const int64_t *s = m->shape;
  if (!strcmp(m->name, "mlp")) return model_mlp(g, s[0], logits);
  if (!strcmp(m->name, "resnet18")) return model_resnet18(g, s[0], s[2], logits);
  if (!strcmp(m->name, "transformer")) return model_transformer_encoder(g, s[0], s[1], logits);
  return model_vit(g, s[0], s[2], 8, 192, 6, 3, m->classes, logits);
}

/* The whole step in one graph: inputs x, labels, lr; output the loss. */
static loom_status_t build_step(loom_graph_t *g, const train_model_t *m,
                                model_params_t *p) {
  loom_value_t logits, labels, lr, loss, grads[MAX_PARAMS];
  model_train_begin(p);
  loom_status_t s = build_forward(g, m, &logits);
  model_train_end();
  if (s != LOOM_OK) return s;
  if ((s = loom_graph_input(g, "labels", LOOM_I64, 1, (loom_dim_t[]){m->shape[0]}, &labels)) ||
      (s = loom_graph_input(g, "lr", LOOM_F32, 0, NULL, &lr)) ||
      (s = loom_cross_entropy(g, logits, labels, LOOM_NO_IGNORE_INDEX, 0,
                              LOOM_REDUCTION_MEAN, &loss)) ||
      (s = loom_grad(g, loss, p->n, p->v, grads)) ||
      (s = loom_adamw(g, p->n, p->v, grads, lr, BETA1, BETA2, EPS, DECAY)))
    return s;
  return loom_graph_output(g, loss);
}

typedef struct step_ctx {
  loom_executable_t *e;
  loom_tensor_t *in[3], *loss;
  int failed;
} step_ctx_t;

static void run_step(void *arg) {
  step_ctx_t *c = arg;
  if (c->failed) return;
  if (loom_executable_run(c->e, 3, c->in, 1, &c->loss) != LOOM_OK) {
    fprintf(stderr, "bench train: step failed: %s\n", loom_last_error());
    c->failed = 1;
  }
}

static double loss_value(const loom_tensor_t *t) {
  double v = NAN;
  if (t) loom_tensor_get_f64(t, 0, &v);
  return v;
}

/* The inputs: x as bench_input (the peer draws the same values), labels
 * i * 7 mod classes, the learning rate. */
static void make_inputs(const train_model_t *m, loom_tensor_t **in) {
  int64_t batch = m->shape[0];
  float lr = (float)LR;
  in[0] = bench_input(m->rank, m->shape);
  BENCH_TRY(loom_tensor_create(LOOM_I64, 1, &batch, &in[1]));
  int64_t *labels = loom_tensor_data(in[1]);
  for (int64_t i = 0; i < batch; i++) labels[i] = i * 7 % m->classes;
  BENCH_TRY(loom_tensor_from_data(LOOM_F32, 0, NULL, &lr, sizeof lr, &in[2]));
}

typedef struct result {
  double ms, peak, loss0; /* loss0: the first step's loss */
} result_t;

/* LOOM_BENCH_EXPLAIN=1: the steps that run reference kernels, on stderr
 * (what the compiler does not generate code for yet). */
static void explain_reference_steps(const loom_executable_t *e) {
  char *text = NULL;
  if (!getenv("LOOM_BENCH_EXPLAIN") || loom_executable_explain(e, &text) != LOOM_OK) return;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
    if (strstr(line, " reference g")) fprintf(stderr, "bench train: %s\n", line);
  loom_free(text);
}

/* Loom's median step at `threads`; the graph's parameters move on. */
static result_t loom_train(loom_graph_t *g, const model_params_t *p,
                           loom_tensor_t *const *in, int threads) {
  result_t r = {NAN, NAN, NAN};
  loom_compile_options_t o = bench_options(1, threads);
  step_ctx_t c = {.in = {in[0], in[1], in[2]}};
  if (loom_compile(g, &o, &c.e) != LOOM_OK) {
    fprintf(stderr, "bench train: compile failed: %s\n", loom_last_error());
    return r;
  }
  loom_executable_info_t info;
  loom_stats_t before, after;
  BENCH_TRY(loom_executable_info(c.e, &info));
  if (threads == 1) explain_reference_steps(c.e);
  BENCH_TRY(loom_executable_new_output(c.e, 0, &c.loss));
  double t0 = bench_now_ns();
  run_step(&c);
  double first_ms = (bench_now_ns() - t0) / 1e6;
  r.loss0 = loss_value(c.loss);
  /* A step that takes seconds (reference kernels) gets fewer samples. */
  int slow = first_ms > SLOW_MS;
  if (slow)
    fprintf(stderr, "bench train: first step %.0f ms (%d generated, %d reference steps)\n",
            first_ms, info.n_generated, info.n_reference);
  loom_stats_get(&before);
  double ms = bench_time_ms(run_step, &c, slow ? 0 : 2, slow ? 3 : 5, 500);
  loom_stats_get(&after);
  if (after.compiles != before.compiles)
    fprintf(stderr, "bench train: %lld recompiles during replay\n",
            (long long)(after.compiles - before.compiles));
  if (!isfinite(loss_value(c.loss))) fprintf(stderr, "bench train: the loss is not finite\n");
  if (info.interpreted) fprintf(stderr, "bench train: the step runs in the interpreter\n");
  /* Parameters, their moments m and v, the i64 step counter, other state. */
  int64_t state = 3 * p->param_bytes + (int64_t)sizeof(int64_t) + p->state_bytes;
  if (!c.failed) {
    r.ms = ms;
    r.peak = (double)(info.arena_bytes + state);
  }
  loom_tensor_destroy(c.loss);
  loom_executable_destroy(c.e);
  return r;
}

/* PyTorch's "MS PEAK_BYTES LOSS0" at `threads`, from the peer script. */
static result_t torch_train(const char *bench_dir, const char *model, int threads) {
  result_t r = {NAN, NAN, NAN};
  char cmd[8192];
  if (!bench_peers_wanted()) return r;
  if (system("/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null") != 0) {
    fprintf(stderr, "bench train: PyTorch is not installed (bench/setup.sh): null\n");
    return r;
  }
  if (snprintf(cmd, sizeof cmd,
               TORCH_ENV " /usr/bin/python3 '%s/peers/torch_train.py' %s --threads %d",
               bench_dir, model, threads) >= (int)sizeof cmd)
    return r;
  FILE *f = popen(cmd, "r");
  char line[256];
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "%lf %lf %lf", &r.ms, &r.peak, &r.loss0) == 3) break;
  if (!f || pclose(f) != 0) fprintf(stderr, "bench train: peer failed: %s\n", cmd);
  return r;
}

static void print_line(const char *model, int threads, const result_t *l,
                       const result_t *t) {
  bench_json_t j;
  bench_json_begin(&j, "train");
  bench_json_str(&j, "model", model);
  bench_json_num(&j, "threads", threads);
  bench_json_num(&j, "loom_ms", l->ms);
  bench_json_num(&j, "torch_eager_ms", t->ms);
  bench_json_num(&j, "vs_torch_eager", t->ms / l->ms);
  bench_json_num(&j, "peak_bytes", l->peak);
  bench_json_num(&j, "torch_peak_bytes", t->peak);
  bench_json_end(&j);
}

/* Both sides start from the same weights and batch: a note if the first
 * losses differ. */
static void compare_loss(const char *model, double mine, double theirs) {
  if (!isfinite(mine) || !isfinite(theirs)) return;
  double rel = fabs(mine - theirs) / (1 + fabs(theirs));
  fprintf(stderr, "bench train: %s: first loss Loom %.6g, PyTorch %.6g%s\n", model, mine,
          theirs, rel > 1e-3 ? "  <-- MISMATCH" : "");
}

static void bench_model(const char *bench_dir, const train_model_t *m) {
  result_t loom[MAX_THREADS + 1], torch[MAX_THREADS + 1];
  model_params_t *p = calloc(1, sizeof *p);
  loom_tensor_t *in[3];
  loom_graph_t *g = NULL;
  make_inputs(m, in);
  BENCH_TRY(loom_graph_create(&g));
  int built = p && build_step(g, m, p) == LOOM_OK;
  if (!built)
    fprintf(stderr, "bench train: %s: the step does not build: %s\n", m->name,
            loom_last_error());
  for (int th = 1; th <= MAX_THREADS; th++) {
    loom[th] = torch[th] = (result_t){NAN, NAN, NAN};
    if (!bench_threads_wanted(th)) continue;
    loom[th] = built ? loom_train(g, p, in, th) : (result_t){NAN, NAN, NAN};
    torch[th] = torch_train(bench_dir, m->name, th);
  }
  compare_loss(m->name, loom[1].loss0, torch[1].loss0);
  for (int th = 1; th <= MAX_THREADS; th++) print_line(m->name, th, &loom[th], &torch[th]);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
  free(p);
}

int main(int argc, char **argv) {
  const char *bench_dir = argc > 1 ? argv[1] : "bench";
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
    if (bench_name_wanted(models[i].name, argc, argv)) bench_model(bench_dir, &models[i]);
  return 0;
}
