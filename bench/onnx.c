/* bench onnx: models exported to ONNX from PyTorch (bench/peers/
 * onnx_export.py) imported by loom_onnx_load and run compiled, against ONNX
 * Runtime on the same file (all graph optimizations, the same thread count),
 * measured in the same run at 1 and 2 threads. As in bench infer, Loom's
 * runs and ONNX Runtime's alternate in blocks, ROUNDS of each; vs_ort is
 * the median of the rounds' ratios ort / loom (> 1: Loom faster).
 *
 * Each side's first run is also measured in a fresh process: Loom's
 * load + compile + first run (this program run again with --first-run),
 * ONNX Runtime's session creation + first run. Its peak memory is the
 * growth of that process's resident memory from just before the load to
 * its high-water mark after ten more runs (/proc/self/clear_refs resets
 * the mark; VmHWM reads it): weights, packed weights, activations and what
 * the allocator keeps, on both sides alike.
 *   bench_onnx BENCH_DIR [MODEL...]
 * A model that does not export or load prints nulls, with a note on
 * stderr; LOOM_BENCH_PEERS=0 skips ONNX Runtime, LOOM_BENCH_THREADS=N
 * measures only N threads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

enum { MAX_THREADS = 2, ROUNDS = 5, BLOCK_MS = 200, MAX_BLOCK = 1000, AFTER_FIRST = 10 };

typedef struct model {
  const char *name;
  int rank;
  int64_t shape[4];
} model_t;

/* As bench/peers/onnx_export.py's table. */
static const model_t models[] = {
    {"resnet18", 4, {1, 3, 224, 224}}, {"mobilenet_v2", 4, {1, 3, 224, 224}},
    {"vit", 4, {8, 3, 64, 64}},         {"transformer", 3, {8, 128, 256}},
    {"mlp", 2, {64, 784}},              {"lstm", 3, {50, 8, 256}},
    {"resnet18_dynamic", 4, {1, 3, 224, 224}}, {"lstm_dynamic", 3, {50, 8, 256}},
};
enum { N_MODELS = sizeof models / sizeof models[0] };

typedef struct side {
  double ms, first_ms, peak_bytes;
} side_t;

typedef struct result {
  side_t loom, ort;
  double vs_ort;
} result_t;

/* ---- Loom's side --------------------------------------------------------- */

typedef struct loom_model {
  loom_graph_t *g;
  loom_executable_t *e;
  loom_tensor_t *in, *out;
} loom_model_t;

static void run_model(void *arg) {
  loom_model_t *m = arg;
  BENCH_TRY(loom_executable_run(m->e, 1, &m->in, 1, &m->out));
}

static void close_model(loom_model_t *m) {
  loom_tensor_destroy(m->out);
  loom_executable_destroy(m->e);
  loom_graph_destroy(m->g);
  *m = (loom_model_t){0};
}

/* Loads dir/model.onnx and compiles it for `threads`, with in (dir/x.npy)
 * as the input; false, with a note, when a step fails. A model exported
 * with symbolic dims compiles once for every size (dynamic_symbols), as
 * `loom run` does. */
static bool open_model(const char *dir, int threads, loom_tensor_t *in, loom_model_t *m) {
  char path[4200];
  *m = (loom_model_t){.in = in};
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  loom_compile_options_t o = bench_options(1, threads);
  o.freeze_params = 1; /* initializers are constants, as in ONNX Runtime */
  o.dynamic_symbols = 1;
  if (loom_onnx_load(path, NULL, &m->g) != LOOM_OK || loom_compile(m->g, &o, &m->e) != LOOM_OK ||
      loom_executable_new_output_for(m->e, 1, &m->in, 0, &m->out) != LOOM_OK) {
    fprintf(stderr, "bench onnx: %s: %s\n", path, loom_last_error());
    close_model(m);
    return false;
  }
  return true;
}

/* A line of /proc/self/status ("VmRSS:", "VmHWM:") in bytes; NaN if none. */
static double status_bytes(const char *key) {
  char line[256];
  double kb = NAN;
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return NAN;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, strlen(key))) kb = strtod(line + strlen(key), NULL);
  fclose(f);
  return kb * 1024;
}

/* Starts the high-water mark of resident memory afresh from now. */
static bool reset_peak(void) {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  bool ok = fputs("5", f) >= 0;
  return fclose(f) == 0 && ok;
}

/* `bench_onnx --first-run DIR THREADS`, a fresh process: load + compile +
 * first run (ms) and the peak growth of resident memory, as one line. */
static int first_run_main(const char *dir, int threads) {
  loom_model_t m;
  loom_tensor_t *in;
  char path[4200];
  snprintf(path, sizeof path, "%s/x.npy", dir);
  BENCH_TRY(loom_tensor_load_npy(path, &in));
  double base = reset_peak() ? status_bytes("VmRSS:") : NAN;
  double t0 = bench_now_ns();
  if (!open_model(dir, threads, in, &m)) return 1;
  run_model(&m);
  double first_ms = (bench_now_ns() - t0) / 1e6;
  for (int i = 0; i < AFTER_FIRST; i++) run_model(&m);
  printf("%.6f %.0f\n", first_ms, status_bytes("VmHWM:") - base);
  close_model(&m);
  loom_tensor_destroy(in);
  return 0;
}

static side_t loom_first_run(const char *dir, int threads) {
  side_t s = {NAN, NAN, NAN};
  char cmd[4400];
  bench_format_cmd(cmd, sizeof cmd, "/proc/%d/exe --first-run '%s' %d", (int)getpid(), dir, threads);
  FILE *p = cmd[0] ? popen(cmd, "r") : NULL;
  if (!p) return s;
  if (fscanf(p, "%lf %lf", &s.first_ms, &s.peak_bytes) != 2) s.first_ms = s.peak_bytes = NAN;
  if (pclose(p) != 0) s.first_ms = s.peak_bytes = NAN;
  return s;
}

/* Loom's output against PyTorch's (dir/y.npy): a note on stderr. */
static void compare_output(const char *dir, const char *name, const loom_tensor_t *mine) {
  char path[4200];
  loom_tensor_t *theirs;
  snprintf(path, sizeof path, "%s/y.npy", dir);
  if (loom_tensor_load_npy(path, &theirs) != LOOM_OK) return;
  double worst = loom_tensor_numel(theirs) == loom_tensor_numel(mine) ? 0 : INFINITY, a, b;
  for (int64_t i = 0; isfinite(worst) && i < loom_tensor_numel(mine); i++) {
    loom_tensor_get_f64(mine, i, &a);
    loom_tensor_get_f64(theirs, i, &b);
    worst = fmax(worst, fabs(a - b) / (1 + fabs(b)));
  }
  fprintf(stderr, "bench onnx: %s: Loom vs PyTorch output, max rel diff %.3g%s\n", name, worst,
          worst > 1e-3 ? "  <-- MISMATCH" : "");
  loom_tensor_destroy(theirs);
}

/* ---- ONNX Runtime's side ------------------------------------------------- */

static bool ort_installed(const char *bench_dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/node_modules/onnxruntime-node", bench_dir);
  return access(path, F_OK) == 0 && system("node --version >/dev/null 2>&1") == 0;
}

/* bench/peers/ort_infer.js serving runs of dir/model.onnx; its "stats"
 * answer is the first run and peak memory of its fresh process. */
static int ort_open(const char *bench_dir, const char *dir, const model_t *m, int threads,
                    bench_peer_t *p, side_t *s) {
  char cmd[8192], dims[128] = "", line[128];
  for (int d = 0; d < m->rank; d++)
    snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lld", d ? "," : "",
             (long long)m->shape[d]);
  bench_format_cmd(cmd, sizeof cmd, "node '%s/peers/ort_infer.js' '%s/model.onnx' %s %d --serve",
             bench_dir, dir, dims, threads);
  if (!cmd[0] || bench_peer_open(cmd, p) != 0) return 0;
  if (bench_peer_line(p, NULL, line, sizeof line) != 0 || strcmp(line, "ready") != 0 ||
      bench_peer_line(p, "stats", line, sizeof line) != 0 ||
      sscanf(line, "%lf %lf", &s->first_ms, &s->peak_bytes) != 2) {
    fprintf(stderr, "bench onnx: peer failed: %s\n", cmd);
    bench_peer_close(p);
    return 0;
  }
  return 1;
}

/* ---- Both ---------------------------------------------------------------- */

static void measure(const char *bench_dir, const char *dir, const model_t *m,
                    loom_tensor_t *in, int threads, result_t *r) {
  r->loom = loom_first_run(dir, threads);
  loom_model_t lm;
  if (!open_model(dir, threads, in, &lm)) return;
  /* Warm-up past the runs that time each step (src/backend/cpu/
   * cpu_launch.c), then 3 to size the blocks. */
  for (int i = 0; i < 40; i++) run_model(&lm);
  double t0 = bench_now_ns();
  for (int i = 0; i < 3; i++) run_model(&lm);
  int runs = (int)(BLOCK_MS / ((bench_now_ns() - t0) / 3e6)) + 1;
  runs = runs < 5 ? 5 : runs > MAX_BLOCK ? MAX_BLOCK : runs;
  if (threads == 1) compare_output(dir, m->name, lm.out);
  bench_peer_t ort = {-1, NULL, NULL};
  int have_ort = bench_peers_wanted() && ort_installed(bench_dir) &&
                 ort_open(bench_dir, dir, m, threads, &ort, &r->ort);
  double lms[ROUNDS], oms[ROUNDS], ratio[ROUNDS];
  char run[32];
  snprintf(run, sizeof run, "run %d", runs);
  for (int k = 0; k < ROUNDS; k++) {
    bench_settle();
    lms[k] = bench_time_ms(run_model, &lm, 0, runs, 0);
    bench_settle();
    oms[k] = bench_peer_ask(&ort, &have_ort, run, "onnx");
    ratio[k] = oms[k] / lms[k];
  }
  bench_peer_close(&ort);
  r->loom.ms = bench_median(lms, ROUNDS);
  r->ort.ms = bench_median(oms, ROUNDS);
  r->vs_ort = bench_median(ratio, ROUNDS);
  close_model(&lm);
}

static void print_line(const char *name, int threads, const result_t *r) {
  bench_json_t j;
  bench_json_begin(&j, "onnx");
  bench_json_str(&j, "model", name);
  bench_json_num(&j, "threads", threads);
  bench_json_num(&j, "loom_ms", r->loom.ms);
  bench_json_num(&j, "ort_ms", r->ort.ms);
  bench_json_num(&j, "vs_ort", r->vs_ort);
  bench_json_num(&j, "loom_peak_bytes", r->loom.peak_bytes);
  bench_json_num(&j, "ort_peak_bytes", r->ort.peak_bytes);
  bench_json_num(&j, "loom_first_run_ms", r->loom.first_ms);
  bench_json_num(&j, "ort_first_run_ms", r->ort.first_ms);
  bench_json_num(&j, "first_run_vs_ort", r->ort.first_ms / r->loom.first_ms);
  bench_json_end(&j);
}

/* PyTorch's export of m into dir; false, with a note, when it fails. */
static bool export_model(const char *bench_dir, const char *dir, const model_t *m) {
  char cmd[8192];
  bench_format_cmd(cmd, sizeof cmd, "%s /usr/bin/python3 '%s/peers/onnx_export.py' %s '%s' 2>&1",
             bench_torch_env(), bench_dir, m->name, dir);
  FILE *p = cmd[0] ? popen(cmd, "r") : NULL;
  char out[4096] = "";
  size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
  out[n] = 0;
  if (p && pclose(p) == 0) return true;
  fprintf(stderr, "bench onnx: %s: the export failed (PyTorch and ONNX from bench/setup.sh?)%s%s\n",
          m->name, n ? ":\n" : "", out);
  return false;
}

static void bench_model(const char *bench_dir, const model_t *m) {
  result_t r[MAX_THREADS + 1];
  for (int th = 0; th <= MAX_THREADS; th++)
    r[th] = (result_t){{NAN, NAN, NAN}, {NAN, NAN, NAN}, NAN};
  char dir[256];
  if (bench_temp_dir("onnx", dir, sizeof dir)) {
    if (export_model(bench_dir, dir, m)) {
      loom_tensor_t *in;
      char path[4200];
      snprintf(path, sizeof path, "%s/x.npy", dir);
      BENCH_TRY(loom_tensor_load_npy(path, &in));
      for (int th = 1; th <= MAX_THREADS; th++)
        if (bench_threads_wanted(th)) measure(bench_dir, dir, m, in, th, &r[th]);
      loom_tensor_destroy(in);
    }
    bench_remove_dir(dir);
  }
  for (int th = 1; th <= MAX_THREADS; th++)
    if (bench_threads_wanted(th)) print_line(m->name, th, &r[th]);
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--first-run")) return first_run_main(argv[2], atoi(argv[3]));
  const char *names[N_MODELS];
  for (int i = 0; i < N_MODELS; i++) names[i] = models[i].name;
  const char *bench_dir = bench_suite_args(argc, argv, names, N_MODELS);
  if (bench_peers_wanted() && !ort_installed(bench_dir))
    fprintf(stderr, "bench onnx: onnxruntime-node is not installed (bench/setup.sh): null\n");
  for (int i = 0; i < N_MODELS; i++)
    if (bench_name_wanted(models[i].name, argc, argv)) bench_model(bench_dir, &models[i]);
  return 0;
}
