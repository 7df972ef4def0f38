/* Helpers shared by the benchmark programs. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "bench_util.h"

#include <ftw.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/isa.h"
#include "models.h"

void bench_check(loom_status_t s, const char *what) {
  if (s == LOOM_OK) return;
  fprintf(stderr, "bench: %s failed: %s: %s\n", what, loom_status_name(s),
          loom_last_error());
  exit(1);
}

double bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(double *samples, int n) {
  for (int i = 0; i < n; i++)
    if (!isfinite(samples[i])) return NAN; /* a failed sample fails the whole */
  qsort(samples, (size_t)n, sizeof *samples, cmp_double);
  return n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}

enum { SETTLE_MS = 100 };

void bench_settle(void) {
  struct timespec t = {0, SETTLE_MS * 1000000L};
  nanosleep(&t, NULL);
}

void bench_lock_memory(const char *bench) {
  if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0)
    fprintf(stderr, "bench %s: memory not locked (%s): timed runs after idle gaps may pay page faults\n",
            bench, strerror(errno));
}

double bench_time_ms(void (*fn)(void *), void *arg, int warmup, int min_reps,
                     double min_ms) {
  enum { MAX_REPS = 100000 };
  static double samples[MAX_REPS];
  for (int i = 0; i < warmup; i++) fn(arg);
  double start = bench_now_ns();
  int n = 0;
  while (n < MAX_REPS && (n < min_reps || bench_now_ns() - start < min_ms * 1e6)) {
    double t0 = bench_now_ns();
    fn(arg);
    samples[n++] = (bench_now_ns() - t0) / 1e6;
  }
  return bench_median(samples, n);
}

int bench_peer_open(const char *cmd, bench_peer_t *p) {
  int in[2], out[2];
  *p = (bench_peer_t){-1, NULL, NULL};
  /* Close-on-exec: a peer started later must not hold this one's stdin
   * open (it would never see the end of its input). */
  if (pipe2(in, O_CLOEXEC) != 0) return -1;
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return -1;
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    close(in[0]);
    close(in[1]);
    close(out[0]);
    close(out[1]);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  if (pid < 0) {
    close(in[1]);
    close(out[0]);
    return -1;
  }
  p->pid = (int)pid;
  p->to = fdopen(in[1], "w");
  p->from = fdopen(out[0], "r");
  if (!p->to || !p->from) {
    bench_peer_close(p);
    return -1;
  }
  return 0;
}

int bench_peer_line(bench_peer_t *p, const char *request, char *reply, int cap) {
  if (!p->to || !p->from) return -1;
  if (request && (fprintf(p->to, "%s\n", request) < 0 || fflush(p->to) != 0)) return -1;
  if (!fgets(reply, cap, p->from)) return -1;
  reply[strcspn(reply, "\n")] = 0;
  return 0;
}

int bench_peer_close(bench_peer_t *p) {
  if (p->to) fclose(p->to);
  if (p->from) fclose(p->from);
  p->to = p->from = NULL;
  int status = 0;
  if (p->pid <= 0 || waitpid((pid_t)p->pid, &status, 0) < 0) return -1;
  p->pid = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

double bench_peer_ask(bench_peer_t *p, int *open, const char *request, const char *bench) {
  char reply[64];
  double v = NAN;
  if (!*open) return NAN;
  if (bench_peer_line(p, request, reply, sizeof reply) != 0 || sscanf(reply, "%lf", &v) != 1) {
    fprintf(stderr, "bench %s: a peer stopped answering \"%s\"\n", bench, request);
    bench_peer_close(p);
    *open = 0;
    return NAN;
  }
  return v;
}

void bench_format_cmd(char *buf, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (vsnprintf(buf, size, fmt, ap) >= (int)size) buf[0] = 0;
  va_end(ap);
}

loom_tensor_t *bench_input(int rank, const int64_t *shape) {
  loom_tensor_t *t;
  BENCH_TRY(loom_tensor_create(LOOM_F32, rank, shape, &t));
  float *data = loom_tensor_data(t);
  for (int64_t i = 0; i < loom_tensor_numel(t); i++)
    data[i] = model_init_value("input", i, 1.0);
  return t;
}

const bench_model_t bench_models[] = {
    {"mlp", 2, {64, 784}},
    {"lenet", 4, {64, 1, 28, 28}},
    {"transformer", 3, {1, 128, 256}},
    {"resnet18", 4, {1, 3, 224, 224}},
    {"small_cnn", 4, {2, 3, 16, 16}},
};
const int bench_n_models = sizeof bench_models / sizeof bench_models[0];

loom_graph_t *bench_build_model(const bench_model_t *m) {
  loom_graph_t *g;
  loom_value_t y;
  const int64_t *s = m->shape;
  BENCH_TRY(loom_graph_create(&g));
  if (!strcmp(m->name, "mlp")) BENCH_TRY(model_mlp(g, s[0], &y));
  else if (!strcmp(m->name, "lenet")) BENCH_TRY(model_lenet(g, s[0], &y));
  else if (!strcmp(m->name, "transformer")) BENCH_TRY(model_transformer_encoder(g, s[0], s[1], &y));
  else if (!strcmp(m->name, "resnet18")) BENCH_TRY(model_resnet18(g, s[0], s[2], &y));
  else BENCH_TRY(model_small_cnn(g, s[0], &y));
  BENCH_TRY(loom_graph_output(g, y));
  return g;
}

int bench_peers_wanted(void) {
  const char *v = getenv("LOOM_BENCH_PEERS");
  return !v || strcmp(v, "0") != 0;
}

int bench_threads_wanted(int threads) {
  const char *v = getenv("LOOM_BENCH_THREADS");
  return !v || !*v || atoi(v) == threads;
}

int bench_name_wanted(const char *name, int argc, char **argv) {
  if (argc <= 2) return 1;
  for (int i = 2; i < argc; i++)
    if (!strcmp(argv[i], name)) return 1;
  return 0;
}

const char *bench_suite_args(int argc, char **argv, const char *const *names, int n) {
  const char *dir = argc > 1 ? argv[1] : "bench";
  char peers[4096];
  struct stat st;
  snprintf(peers, sizeof peers, "%s/peers", dir);
  bool ok = stat(peers, &st) == 0 && S_ISDIR(st.st_mode);
  if (!ok) fprintf(stderr, "%s: '%s' is not the bench directory (it has no peers/)\n", argv[0], dir);
  for (int i = 2; ok && i < argc; i++) {
    bool known = false;
    for (int k = 0; k < n && !known; k++) known = !strcmp(argv[i], names[k]);
    if (!known) fprintf(stderr, "%s: no benchmark named '%s'\n", argv[0], argv[i]);
    ok = known;
  }
  if (ok) return dir;
  fprintf(stderr, "usage: %s BENCH_DIR [NAME...]; NAME one of:", argv[0]);
  for (int k = 0; k < n; k++) fprintf(stderr, " %s", names[k]);
  fprintf(stderr, "\n");
  exit(2);
}

loom_compile_options_t bench_options(int fusion, int threads) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.fusion = fusion;
  o.num_threads = threads;
  return o;
}

static void json_add(bench_json_t *j, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(j->text + j->len, sizeof j->text - j->len, fmt, ap);
  va_end(ap);
  if (n > 0) j->len += (size_t)n;
  if (j->len >= sizeof j->text) j->len = sizeof j->text - 1;
}

void bench_json_begin(bench_json_t *j, const char *bench) {
  j->len = 0;
  json_add(j, "{\"bench\":\"%s\"", bench);
  /* Which kernels produced the figures: machines differ (AVX2, AVX-512). */
  const char *isa = loom_target_isa(NULL);
  json_add(j, ",\"isa\":\"%s\"", isa ? isa : "?");
  /* Under a cap, PyTorch and OpenBLAS are capped too; ONNX Runtime has
   * no such setting and runs its widest. */
  if (core_isa_cap_name()) json_add(j, ",\"peers_isa\":\"%s\"", core_isa_cap_name());
}

const char *bench_torch_env(void) {
  static char env[512];
  const char *cap = core_isa_cap_name();
  snprintf(env, sizeof env,
           "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "
           "MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=100000000000 "
           "LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp%s%s%s%s",
           cap ? " ATEN_CPU_CAPABILITY=" : "", cap ? (strcmp(cap, "avx2") ? "default" : "avx2") : "",
           cap ? (strcmp(cap, "avx2") ? " ONEDNN_MAX_CPU_ISA=SSE41" : " ONEDNN_MAX_CPU_ISA=AVX2") : "",
           cap ? (strcmp(cap, "avx2") ? " OPENBLAS_CORETYPE=Nehalem" : " OPENBLAS_CORETYPE=Haswell")
               : "");
  return env;
}

void bench_json_str(bench_json_t *j, const char *key, const char *value) {
  json_add(j, ",\"%s\":\"%s\"", key, value);
}

void bench_json_num(bench_json_t *j, const char *key, double value) {
  if (!isfinite(value))
    json_add(j, ",\"%s\":null", key);
  else if (value == floor(value) && fabs(value) < 1e15)
    json_add(j, ",\"%s\":%.0f", key, value);
  else
    json_add(j, ",\"%s\":%.5g", key, value);
}

void bench_json_end(bench_json_t *j) {
  printf("%s}\n", j->text);
  fflush(stdout);
}

bool bench_temp_dir(const char *name, char *dir, size_t size) {
  const char *tmp = getenv("TMPDIR");
  int n = snprintf(dir, size, "%s/loom-bench-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
  if (n > 0 && (size_t)n < size && mkdtemp(dir)) return true;
  fprintf(stderr, "bench %s: cannot make a temporary directory (%s)\n", name, strerror(errno));
  return false;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st, (void)type, (void)ftw;
  return remove(path);
}

void bench_remove_dir(const char *dir) {
  if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
    fprintf(stderr, "bench: could not remove %s\n", dir);
}
