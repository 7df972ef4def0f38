/* bench compile: compile time of the demo CNN, cold (an empty disk cache:
 * the C compiler runs) and warm (a new process finds the module on disk
 * and must not run the compiler). Each compile runs in its own process so
 * that no in-memory state helps the warm one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "models.h"

enum { COLD_RUNS = 3, WARM_RUNS = 5 };

/* The child: one compile, printed as "ms cc_invocations". */
static int compile_once(void) {
  loom_graph_t *g;
  loom_value_t logits;
  loom_executable_t *e;
  loom_stats_t stats;
  BENCH_TRY(loom_graph_create(&g));
  BENCH_TRY(model_small_cnn(g, 2, &logits));
  BENCH_TRY(loom_graph_output(g, logits));
  double t0 = bench_now_ns();
  BENCH_TRY(loom_compile(g, NULL, &e));
  double ms = (bench_now_ns() - t0) / 1e6;
  loom_stats_get(&stats);
  printf("%.6f %lld\n", ms, (long long)stats.cc_invocations);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
  return 0;
}

/* Runs this program as a child compiling with cache dir; NaN on failure. */
static double child_compile(const char *self, const char *dir, long long *cc_runs) {
  char cmd[4096];
  double ms = NAN;
  if (snprintf(cmd, sizeof cmd, "LOOM_CACHE_DIR='%s' '%s' --once", dir, self) >=
      (int)sizeof cmd)
    return NAN;
  FILE *p = popen(cmd, "r");
  if (!p || fscanf(p, "%lf %lld", &ms, cc_runs) != 2) ms = NAN;
  if (p && pclose(p) != 0) ms = NAN;
  return ms;
}

static void remove_dir(const char *dir) {
  char cmd[4096];
  if (snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir) >= (int)sizeof cmd ||
      system(cmd) != 0) fprintf(stderr, "bench compile: could not remove %s\n", dir);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--once")) return compile_once();
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return fprintf(stderr, "bench compile: no /proc/self/exe\n"), 1;
  self[n] = 0;
  double cold[COLD_RUNS], warm[WARM_RUNS];
  long long cc_runs = 0;
  char dir[] = "/tmp/loom-bench-cache-XXXXXX";
  for (int i = 0; i < COLD_RUNS; i++) {
    if (i) remove_dir(dir);
    if (!mkdtemp(strcpy(dir, "/tmp/loom-bench-cache-XXXXXX"))) return perror("mkdtemp"), 1;
    cold[i] = child_compile(self, dir, &cc_runs);
  }
  for (int i = 0; i < WARM_RUNS; i++) {
    warm[i] = child_compile(self, dir, &cc_runs);
    if (cc_runs != 0) {
      fprintf(stderr, "bench compile: the warm compile ran the C compiler %lld times\n", cc_runs);
      warm[i] = NAN;
    }
  }
  remove_dir(dir);
  bench_json_t j;
  bench_json_begin(&j, "compile");
  bench_json_num(&j, "cold_ms", bench_median(cold, COLD_RUNS));
  bench_json_num(&j, "warm_ms", bench_median(warm, WARM_RUNS));
  bench_json_end(&j);
  return 0;
}
