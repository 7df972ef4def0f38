/* bench infer: inference time of the example models, compiled by Loom, in
 * PyTorch (eager and TorchScript) and in ONNX Runtime, measured in the same
 * run at 1 and 2 threads. Loom compiles with freeze_params (weights packed
 * once), as TorchScript runs torch.jit.freeze'd and ONNX Runtime treats
 * initializers as constants. Loom's runs and each peer's alternate in
 * blocks (the peers serve runs on request); ratios are peer / Loom (> 1:
 * Loom faster), the median of five rounds' ratios.
 * A peer that is not installed prints null, with a note on stderr.
 *   bench_infer BENCH_DIR [MODEL...]
 * LOOM_BENCH_PEERS=0 skips the peers (null), LOOM_BENCH_THREADS=N measures
 * only N threads: for profiling Loom alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

enum { MAX_THREADS = 2 };

typedef struct timings {
  double loom[MAX_THREADS + 1], eager[MAX_THREADS + 1], script[MAX_THREADS + 1],
      ort[MAX_THREADS + 1];
  /* peer / Loom, the median of the rounds' ratios */
  double vs_eager[MAX_THREADS + 1], vs_script[MAX_THREADS + 1], vs_ort[MAX_THREADS + 1];
} timings_t;

enum { ROUNDS = 5, BLOCK_MS = 200, MAX_BLOCK = 1000 };

typedef struct run_ctx {
  loom_executable_t *e;
  loom_tensor_t *in, *out;
} run_ctx_t;

static void run_compiled(void *arg) {
  run_ctx_t *c = arg;
  BENCH_TRY(loom_executable_run(c->e, 1, &c->in, 1, &c->out));
}

static int torch_installed(void) {
  return system("/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null") == 0;
}

/* PyTorch's ONNX export into dir and its logits (.npy). */
static void torch_export(const char *bench_dir, const char *dir, const char *model) {
  char cmd[8192];
  bench_format_cmd(cmd, sizeof cmd,
             "%s /usr/bin/python3 '%s/peers/torch_infer.py' %s "
             "--export '%s/model.onnx' --logits '%s/logits.npy' 2>/dev/null",
             bench_torch_env(), bench_dir, model, dir, dir);
  if (!cmd[0] || system(cmd) != 0) fprintf(stderr, "bench infer: peer failed: %s\n", cmd);
}

/* A peer serving timed runs: started, warmed up, "ready". 0: not started. */
static int open_peer(const char *cmd, bench_peer_t *p) {
  char line[64];
  if (!cmd[0] || bench_peer_open(cmd, p) != 0) return 0;
  if (bench_peer_line(p, NULL, line, sizeof line) == 0 && strcmp(line, "ready") == 0) return 1;
  fprintf(stderr, "bench infer: peer failed: %s\n", cmd);
  bench_peer_close(p);
  return 0;
}

static int torch_serve(const char *bench_dir, const char *model, int threads,
                       bench_peer_t *p) {
  char cmd[8192];
  bench_format_cmd(cmd, sizeof cmd,
             "%s /usr/bin/python3 '%s/peers/torch_infer.py' %s --threads %d --serve",
             bench_torch_env(), bench_dir, model, threads);
  return open_peer(cmd, p);
}

static int ort_serve(const char *bench_dir, const char *dir, const bench_model_t *m,
                     int threads, bench_peer_t *p) {
  char cmd[8192], path[4200], dims[128] = "";
  snprintf(path, sizeof path, "%s/node_modules/onnxruntime-node", bench_dir);
  if (access(path, F_OK) != 0 || system("node --version >/dev/null 2>&1") != 0) {
    if (threads == 1)
      fprintf(stderr, "bench infer: onnxruntime-node is not installed (bench/setup.sh): null\n");
    return 0;
  }
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  if (access(path, F_OK) != 0) {
    if (threads == 1)
      fprintf(stderr, "bench infer: no ONNX export of %s (needs PyTorch): null\n", m->name);
    return 0;
  }
  for (int d = 0; d < m->rank; d++)
    snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lld", d ? "," : "",
             (long long)m->shape[d]);
  bench_format_cmd(cmd, sizeof cmd, "node '%s/peers/ort_infer.js' '%s' %s %d --serve", bench_dir,
             path, dims, threads);
  return open_peer(cmd, p);
}

/* Loom's runs and each peer's alternate in blocks, ROUNDS of each, about
 * BLOCK_MS of Loom a block: each figure is the median of its blocks'
 * medians and each ratio the median of the rounds' ratios, so that a
 * minute in which the machine lost a core weighs on every side. Keeps
 * Loom's logits in *logits (first call). */
static void measure(const char *bench_dir, const char *dir, const bench_model_t *m,
                    loom_graph_t *g, loom_tensor_t *in, int threads, timings_t *t,
                    loom_tensor_t **logits) {
  loom_compile_options_t o = bench_options(1, threads);
  /* Weights frozen, as the TorchScript peer's torch.jit.freeze does. */
  o.freeze_params = 1;
  run_ctx_t c = {.in = in};
  if (loom_compile(g, &o, &c.e) != LOOM_OK) {
    fprintf(stderr, "bench infer: compile failed: %s\n", loom_last_error());
    return;
  }
  BENCH_TRY(loom_executable_new_output(c.e, 0, &c.out));
  /* Warm-up past the runs that time each step on the pool and alone
   * (7, src/backend/cpu/cpu_launch.c) and a short program whole (up to 18
   * more), then 3 to size the blocks. */
  for (int i = 0; i < 40; i++) run_compiled(&c);
  double t0 = bench_now_ns();
  for (int i = 0; i < 3; i++) run_compiled(&c);
  int runs = (int)(BLOCK_MS / ((bench_now_ns() - t0) / 3e6)) + 1;
  runs = runs < 5 ? 5 : runs > MAX_BLOCK ? MAX_BLOCK : runs;
  bench_peer_t torch = {-1, NULL, NULL}, ort = {-1, NULL, NULL};
  int have_torch = dir && torch_installed() && torch_serve(bench_dir, m->name, threads, &torch);
  int have_ort = dir && ort_serve(bench_dir, dir, m, threads, &ort);
  double lm[ROUNDS], em[ROUNDS], sm[ROUNDS], om[ROUNDS], re[ROUNDS], rs[ROUNDS], ro[ROUNDS];
  char eager[32], script[32], run[32];
  snprintf(eager, sizeof eager, "eager %d", runs);
  snprintf(script, sizeof script, "script %d", runs);
  snprintf(run, sizeof run, "run %d", runs);
  for (int r = 0; r < ROUNDS; r++) {
    bench_settle();
    lm[r] = bench_time_ms(run_compiled, &c, 0, runs, 0);
    bench_settle();
    em[r] = bench_peer_ask(&torch, &have_torch, eager, "infer");
    bench_settle();
    sm[r] = bench_peer_ask(&torch, &have_torch, script, "infer");
    bench_settle();
    om[r] = bench_peer_ask(&ort, &have_ort, run, "infer");
    re[r] = em[r] / lm[r];
    rs[r] = sm[r] / lm[r];
    ro[r] = om[r] / lm[r];
  }
  bench_peer_close(&torch);
  bench_peer_close(&ort);
  t->loom[threads] = bench_median(lm, ROUNDS);
  t->eager[threads] = bench_median(em, ROUNDS);
  t->script[threads] = bench_median(sm, ROUNDS);
  t->ort[threads] = bench_median(om, ROUNDS);
  t->vs_eager[threads] = bench_median(re, ROUNDS);
  t->vs_script[threads] = bench_median(rs, ROUNDS);
  t->vs_ort[threads] = bench_median(ro, ROUNDS);
  if (!*logits) *logits = c.out;
  else loom_tensor_destroy(c.out);
  loom_executable_destroy(c.e);
}

/* Both sides load the same weights and input: a note if the logits differ. */
static void compare_logits(const char *dir, const char *model, const loom_tensor_t *mine) {
  char path[4200];
  loom_tensor_t *theirs;
  snprintf(path, sizeof path, "%s/logits.npy", dir);
  if (!mine || access(path, F_OK) != 0 || loom_tensor_load_npy(path, &theirs) != LOOM_OK)
    return;
  double worst = loom_tensor_numel(theirs) == loom_tensor_numel(mine) ? 0 : INFINITY, a, b;
  for (int64_t i = 0; isfinite(worst) && i < loom_tensor_numel(mine); i++) {
    loom_tensor_get_f64(mine, i, &a);
    loom_tensor_get_f64(theirs, i, &b);
    worst = fmax(worst, fabs(a - b) / (1 + fabs(b)));
  }
  fprintf(stderr, "bench infer: %s: Loom vs PyTorch logits, max rel diff %.3g%s\n", model,
          worst, worst > 1e-3 ? "  <-- MISMATCH" : "");
  loom_tensor_destroy(theirs);
}

static void print_lines(const char *model, const timings_t *t) {
  for (int th = 1; th <= MAX_THREADS; th++) {
    bench_json_t j;
    bench_json_begin(&j, "infer");
    bench_json_str(&j, "model", model);
    bench_json_num(&j, "threads", th);
    bench_json_num(&j, "loom_ms", t->loom[th]);
    bench_json_num(&j, "torch_eager_ms", t->eager[th]);
    bench_json_num(&j, "torchscript_ms", t->script[th]);
    bench_json_num(&j, "ort_ms", t->ort[th]);
    bench_json_num(&j, "vs_torch_eager", t->vs_eager[th]);
    bench_json_num(&j, "vs_torchscript", t->vs_script[th]);
    bench_json_num(&j, "vs_ort", t->vs_ort[th]);
    bench_json_end(&j);
  }
}

/* small_cnn (the demo's) only when named. */
static int wanted(const char *name, int argc, char **argv) {
  return (argc > 2 || strcmp(name, "small_cnn") != 0) && bench_name_wanted(name, argc, argv);
}

static void bench_model(const char *bench_dir, const bench_model_t *m) {
  timings_t t;
  for (int i = 0; i <= MAX_THREADS; i++)
    t.loom[i] = t.eager[i] = t.script[i] = t.ort[i] = t.vs_eager[i] = t.vs_script[i] =
        t.vs_ort[i] = NAN;
  loom_graph_t *g = bench_build_model(m);
  loom_tensor_t *in = bench_input(m->rank, m->shape), *logits = NULL;
  char dir[256];
  const char *peers = NULL;
  if (bench_peers_wanted() && bench_temp_dir("infer", dir, sizeof dir)) {
    peers = dir;
    if (torch_installed()) torch_export(bench_dir, dir, m->name);
    else fprintf(stderr, "bench infer: PyTorch is not installed (bench/setup.sh): null\n");
  }
  for (int th = 1; th <= MAX_THREADS; th++)
    if (bench_threads_wanted(th)) measure(bench_dir, peers, m, g, in, th, &t, &logits);
  if (peers) {
    compare_logits(dir, m->name, logits);
    bench_remove_dir(dir);
  }
  print_lines(m->name, &t);
  loom_tensor_destroy(logits);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

int main(int argc, char **argv) {
  const char *names[16] = {0};
  int n = bench_n_models < 16 ? bench_n_models : 16;
  for (int i = 0; i < n; i++) names[i] = bench_models[i].name;
  const char *bench_dir = bench_suite_args(argc, argv, names, n);
  for (int i = 0; i < bench_n_models; i++)
    if (wanted(bench_models[i].name, argc, argv)) bench_model(bench_dir, &bench_models[i]);
  return 0;
}
