/* bench infer: inference time of the example models, compiled by Loom, in
 * PyTorch (eager and TorchScript) and in ONNX Runtime, measured in the same
 * run at 1 and 2 threads. Loom compiles with freeze_params (weights packed
 * once), as TorchScript runs torch.jit.freeze'd and ONNX Runtime treats
 * initializers as constants. Ratios are peer_ms / loom_ms (> 1: Loom faster).
 * A peer that is not installed prints null, with a note on stderr.
 *   bench_infer BENCH_DIR [MODEL...]
 * LOOM_BENCH_PEERS=0 skips the peers (null), LOOM_BENCH_THREADS=N measures
 * only N threads: for profiling Loom alone. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

enum { MAX_THREADS = 2 };

/* PyTorch at its best here (../shared/PEERS.md). */
#define TORCH_ENV                                                          \
  "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "                          \
  "MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=100000000000 "   \
  "LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp"

typedef struct timings {
  double loom[MAX_THREADS + 1], eager[MAX_THREADS + 1], script[MAX_THREADS + 1],
      ort[MAX_THREADS + 1];
} timings_t;

typedef struct run_ctx {
  loom_executable_t *e;
  loom_tensor_t *in, *out;
} run_ctx_t;

static void run_compiled(void *arg) {
  run_ctx_t *c = arg;
  BENCH_TRY(loom_executable_run(c->e, 1, &c->in, 1, &c->out));
}

/* Loom's time at `threads`; keeps the logits in *logits (first call). */
static double loom_ms(loom_graph_t *g, loom_tensor_t *in, int threads,
                      loom_tensor_t **logits) {
  loom_compile_options_t o = bench_options(1, threads);
  /* Weights frozen, as the TorchScript peer's torch.jit.freeze does. */
  o.freeze_params = 1;
  run_ctx_t c = {.in = in};
  if (loom_compile(g, &o, &c.e) != LOOM_OK) {
    fprintf(stderr, "bench infer: compile failed: %s\n", loom_last_error());
    return NAN;
  }
  BENCH_TRY(loom_executable_new_output(c.e, 0, &c.out));
  double ms = bench_time_ms(run_compiled, &c, 3, 10, 1000);
  if (!*logits) *logits = c.out;
  else loom_tensor_destroy(c.out);
  loom_executable_destroy(c.e);
  return ms;
}

/* Runs cmd and reads "THREADS MS [MS]" lines into a and b (b may be NULL). */
static void read_peer(const char *cmd, double *a, double *b) {
  FILE *p = cmd[0] ? popen(cmd, "r") : NULL;
  if (!p) return;
  char line[256];
  while (fgets(line, sizeof line, p)) {
    int t;
    double x, y = NAN;
    if (sscanf(line, "%d %lf %lf", &t, &x, &y) < 2 || t < 1 || t > MAX_THREADS) continue;
    a[t] = x;
    if (b) b[t] = y;
  }
  if (pclose(p) != 0) fprintf(stderr, "bench infer: peer failed: %s\n", cmd);
}

/* snprintf that leaves an empty command rather than a truncated one. */
__attribute__((format(printf, 3, 4))) static void format_cmd(char *buf, size_t size,
                                                             const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (vsnprintf(buf, size, fmt, ap) >= (int)size) buf[0] = 0;
  va_end(ap);
}

/* PyTorch's times, its ONNX export into dir, and its logits (.npy). */
static void torch_peer(const char *bench_dir, const char *dir, const char *model,
                       timings_t *t) {
  char cmd[8192];
  if (system("/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null") != 0) {
    fprintf(stderr, "bench infer: PyTorch is not installed (bench/setup.sh): null\n");
    return;
  }
  format_cmd(cmd, sizeof cmd,
             TORCH_ENV " /usr/bin/python3 '%s/peers/torch_infer.py' %s --threads 1,2 "
             "--export '%s/model.onnx' --logits '%s/logits.npy' 2>/dev/null",
             bench_dir, model, dir, dir);
  read_peer(cmd, t->eager, t->script);
}

static void ort_peer(const char *bench_dir, const char *dir, const bench_model_t *m,
                     timings_t *t) {
  char cmd[8192], path[4200], dims[128] = "";
  snprintf(path, sizeof path, "%s/node_modules/onnxruntime-node", bench_dir);
  if (access(path, F_OK) != 0 || system("node --version >/dev/null 2>&1") != 0) {
    fprintf(stderr, "bench infer: onnxruntime-node is not installed (bench/setup.sh): null\n");
    return;
  }
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  if (access(path, F_OK) != 0) {
    fprintf(stderr, "bench infer: no ONNX export of %s (needs PyTorch): null\n", m->name);
    return;
  }
  for (int d = 0; d < m->rank; d++)
    snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lld", d ? "," : "",
             (long long)m->shape[d]);
  format_cmd(cmd, sizeof cmd, "node '%s/peers/ort_infer.js' '%s' %s 1,2", bench_dir, path,
             dims);
  read_peer(cmd, t->ort, NULL);
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

static double ratio(double peer, double loom) { return peer / loom; }

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
    bench_json_num(&j, "vs_torch_eager", ratio(t->eager[th], t->loom[th]));
    bench_json_num(&j, "vs_torchscript", ratio(t->script[th], t->loom[th]));
    bench_json_num(&j, "vs_ort", ratio(t->ort[th], t->loom[th]));
    bench_json_end(&j);
  }
}

/* small_cnn (the demo's) only when named. */
static int wanted(const char *name, int argc, char **argv) {
  return (argc > 2 || strcmp(name, "small_cnn") != 0) && bench_name_wanted(name, argc, argv);
}

static void bench_model(const char *bench_dir, const bench_model_t *m) {
  timings_t t;
  for (int i = 0; i <= MAX_THREADS; i++) t.loom[i] = t.eager[i] = t.script[i] = t.ort[i] = NAN;
  loom_graph_t *g = bench_build_model(m);
  loom_tensor_t *in = bench_input(m->rank, m->shape), *logits = NULL;
  for (int th = 1; th <= MAX_THREADS; th++)
    if (bench_threads_wanted(th)) t.loom[th] = loom_ms(g, in, th, &logits);
  char dir[] = "/tmp/loom-bench-infer-XXXXXX", cmd[64];
  if (bench_peers_wanted() && mkdtemp(dir)) {
    torch_peer(bench_dir, dir, m->name, &t);
    ort_peer(bench_dir, dir, m, &t);
    compare_logits(dir, m->name, logits);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench infer: could not remove %s\n", dir);
  }
  print_lines(m->name, &t);
  loom_tensor_destroy(logits);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

int main(int argc, char **argv) {
  const char *bench_dir = argc > 1 ? argv[1] : "bench";
  for (int i = 0; i < bench_n_models; i++)
    if (wanted(bench_models[i].name, argc, argv)) bench_model(bench_dir, &bench_models[i]);
  return 0;
}
