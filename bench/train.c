/* bench train: one training step (forward, cross-entropy, loom_grad,
 * AdamW) compiled by Loom as ONE executable and replayed, against PyTorch
 * eager (forward, loss, backward, AdamW step, zero_grad) measured in the
 * same run, in alternating blocks of steps, at 1 and 2 threads; and the
 * peak memory of each. See
 * docs/training.md for what peak_bytes and torch_peak_bytes count.
 * Beside them: the step's GFLOP/s in its contractions (loom_executable_info's
 * flops), the FMA peak measured after each block, and the ceiling, the
 * ratio to PyTorch of a step that ran its contractions at that peak.
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
#include "fma_peak.h"
#include "loom/train.h"
#include "models.h"
#include "train_step.h"

/* SHORT_MS: a first step under it may be a program short enough to be
 * timed whole (under 1 ms of steps alone, cpu_launch.c). */
enum { MAX_THREADS = 2, SLOW_MS = 1000, SHORT_MS = 20 };

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
typedef struct result {
  double ms, peak, loss0; /* loss0: the first step's loss */
  /* Loom only: the step's contraction flops, and the FMA peak (GFLOP/s)
   * measured after each block of steps (the median) */
  double flops, fma_gflops;
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

/* The compiled step at `threads`, run once (r->loss0) and warmed up;
 * r->peak: the arena and the persistent state. 0: it did not compile. */
static int loom_setup(loom_graph_t *g, const model_params_t *p, loom_tensor_t *const *in,
                      int threads, step_ctx_t *c, result_t *r, double *first_ms) {
  loom_compile_options_t o = bench_options(1, threads);
  *c = (step_ctx_t){.in = {in[0], in[1], in[2]}};
  if (loom_compile(g, &o, &c->e) != LOOM_OK) {
    fprintf(stderr, "bench train: compile failed: %s\n", loom_last_error());
    return 0;
  }
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  BENCH_TRY(loom_executable_info(c->e, &info));
  r->flops = info.flops;
  if (threads == 1) explain_reference_steps(c->e);
  BENCH_TRY(loom_executable_new_output(c->e, 0, &c->loss));
  double t0 = bench_now_ns();
  run_step(c);
  *first_ms = (bench_now_ns() - t0) / 1e6;
  r->loss0 = loss_value(c->loss);
  if (*first_ms > SLOW_MS)
    fprintf(stderr, "bench train: first step %.0f ms (%d generated, %d reference steps)\n",
            *first_ms, info.n_generated, info.n_reference);
  else /* past the steps that time each step on the pool and alone, and a
        * short program whole (cpu_launch.c: 7 and up to 18 runs) */
    for (int i = 0; i < (*first_ms < SHORT_MS ? 40 : 7); i++) run_step(c);
  if (info.interpreted) fprintf(stderr, "bench train: the step runs in the interpreter\n");
  /* Parameters, their moments m and v, the i64 step counter, other state. */
  r->peak = (double)(info.arena_bytes + 3 * p->param_bytes + (int64_t)sizeof(int64_t) +
                     p->state_bytes);
  return 1;
}

/* PyTorch's step at `threads`, served by the peer script: 0 when it is
 * not wanted, not installed, or did not start (a note on stderr). */
static int torch_open(const char *bench_dir, const char *model, int threads,
                      bench_peer_t *peer, result_t *r) {
  char cmd[8192], line[256];
  if (!bench_peers_wanted()) return 0;
  if (system("/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null") != 0) {
    fprintf(stderr, "bench train: PyTorch is not installed (bench/setup.sh): null\n");
    return 0;
  }
  if (snprintf(cmd, sizeof cmd,
               "%s /usr/bin/python3 '%s/peers/torch_train.py' %s --threads %d --serve",
               bench_torch_env(), bench_dir, model, threads) >= (int)sizeof cmd)
    return 0;
  if (bench_peer_open(cmd, peer) != 0 || bench_peer_line(peer, NULL, line, sizeof line) != 0 ||
      sscanf(line, "ready %lf", &r->loss0) != 1) {
    fprintf(stderr, "bench train: peer failed: %s\n", cmd);
    bench_peer_close(peer);
    return 0;
  }
  return 1;
}

/* Blocks of Loom's steps and PyTorch's alternate, ROUNDS of each, about
 * BLOCK_MS of Loom a block; each side's figure is the median of its
 * blocks' medians, and the ratio the median of the rounds' ratios: a
 * minute in which the machine lost a core then weighs on both. */
enum { ROUNDS = 5, BLOCK_MS = 300 };
/* FMA steps of a peak measurement: about 5 ms here. */
enum { PEAK_ITERS = 2500000 };

static void measure(const char *bench_dir, const char *model, loom_graph_t *g,
                    const model_params_t *p, loom_tensor_t *const *in, int threads,
                    result_t *loom, result_t *torch, double *ratio) {
  step_ctx_t c;
  double first_ms = NAN, lm[ROUNDS], tm[ROUNDS], rt[ROUNDS], pk[ROUNDS];
  char reply[256], request[64];
  if (!loom_setup(g, p, in, threads, &c, loom, &first_ms)) return;
  bench_peer_t peer = {-1, NULL, NULL};
  int have_peer = torch_open(bench_dir, model, threads, &peer, torch);
  int steps = first_ms > SLOW_MS ? 1 : (int)(BLOCK_MS / first_ms) + 1;
  if (steps > 64) steps = 64;
  if (steps < 3 && first_ms <= SLOW_MS) steps = 3;
  int rounds = first_ms > SLOW_MS ? 3 : ROUNDS;
  loom_stats_t before = LOOM_STATS_INIT, after = LOOM_STATS_INIT;
  loom_stats_get(&before);
  snprintf(request, sizeof request, "steps %d", steps);
  for (int i = 0; i < rounds; i++) {
    bench_settle();
    lm[i] = bench_time_ms(run_step, &c, 0, steps, 0);
    pk[i] = bench_fma_peak(threads, PEAK_ITERS);
    tm[i] = NAN;
    bench_settle();
    if (have_peer && (bench_peer_line(&peer, request, reply, sizeof reply) != 0 ||
                      sscanf(reply, "%lf", &tm[i]) != 1)) {
      fprintf(stderr, "bench train: %s: the peer stopped answering\n", model);
      have_peer = 0;
    }
    rt[i] = tm[i] / lm[i];
  }
  loom_stats_get(&after);
  if (after.compiles != before.compiles)
    fprintf(stderr, "bench train: %lld recompiles during replay\n",
            (long long)(after.compiles - before.compiles));
  if (!isfinite(loss_value(c.loss))) fprintf(stderr, "bench train: the loss is not finite\n");
  if (!c.failed) loom->ms = bench_median(lm, rounds);
  loom->fma_gflops = bench_median(pk, rounds);
  if (have_peer) {
    torch->ms = bench_median(tm, rounds);
    *ratio = bench_median(rt, rounds);
    if (bench_peer_line(&peer, "peak", reply, sizeof reply) == 0)
      sscanf(reply, "%lf", &torch->peak);
  }
  bench_peer_close(&peer);
  loom_tensor_destroy(c.loss);
  loom_executable_destroy(c.e);
}

static void print_line(const char *model, int threads, const result_t *l,
                       const result_t *t, double ratio) {
  bench_json_t j;
  bench_json_begin(&j, "train");
  bench_json_str(&j, "model", model);
  bench_json_num(&j, "threads", threads);
  bench_json_num(&j, "loom_ms", l->ms);
  bench_json_num(&j, "torch_eager_ms", t->ms);
  bench_json_num(&j, "vs_torch_eager", ratio);
  bench_json_num(&j, "peak_bytes", l->peak);
  bench_json_num(&j, "torch_peak_bytes", t->peak);
  /* The step's contractions against the FMA peak; the ceiling is the ratio
   * a step would reach that ran them at the peak and did nothing else. */
  double gflops = l->flops > 0 ? l->flops / l->ms * 1e-6 : NAN;
  bench_json_num(&j, "gflops", gflops);
  bench_json_num(&j, "fma_peak_gflops", l->fma_gflops);
  bench_json_num(&j, "fraction_of_peak", gflops / l->fma_gflops);
  bench_json_num(&j, "ceiling_vs_torch_eager",
                 l->flops > 0 ? t->ms / (l->flops / l->fma_gflops * 1e-6) : NAN);
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
  double ratio[MAX_THREADS + 1];
  model_params_t *p = calloc(1, sizeof *p);
  loom_tensor_t *in[3];
  loom_graph_t *g = NULL;
  train_make_inputs(m, in);
  BENCH_TRY(loom_graph_create(&g));
  int built = p && train_build_step(g, m, p, NULL, 0) == LOOM_OK;
  if (!built)
    fprintf(stderr, "bench train: %s: the step does not build: %s\n", m->name,
            loom_last_error());
  for (int th = 1; th <= MAX_THREADS; th++) {
    loom[th] = torch[th] = (result_t){NAN, NAN, NAN, NAN, NAN};
    ratio[th] = NAN;
    if (built && bench_threads_wanted(th))
      measure(bench_dir, m->name, g, p, in, th, &loom[th], &torch[th], &ratio[th]);
  }
  compare_loss(m->name, loom[1].loss0, torch[1].loss0);
  for (int th = 1; th <= MAX_THREADS; th++)
    print_line(m->name, th, &loom[th], &torch[th], ratio[th]);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
  free(p);
}

int main(int argc, char **argv) {
  const char *names[8] = {0};
  for (int i = 0; i < train_n_models; i++) names[i] = train_models[i].name;
  const char *bench_dir = bench_suite_args(argc, argv, names, train_n_models);
  bench_lock_memory("train");
  for (int i = 0; i < train_n_models; i++)
    if (bench_name_wanted(train_models[i].name, argc, argv)) bench_model(bench_dir, &train_models[i]);
  return 0;
}
