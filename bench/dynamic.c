/* bench dynamic: the dynamic workloads of examples/dynamic trained through
 * traces, against their PyTorch eager twins (bench/peers/torch_dynamic.py)
 * run in the same run on the same data and initial weights, at 1 and 2
 * threads, under every shape policy (exact, bucket, symbolic, auto), each
 * with an empty module cache (cold: every segment compiles, while the
 * trace runs it in the fallback: traces are tiered by default) and then
 * with every segment's module on disk (warm: an untimed run with tiered
 * off compiles what the cold run's 100 steps left compiling, so that
 * the warm lines give the steady state of a long run). Each run is RUN_STEPS
 * steps; a line gives the steady-state throughput (items per second over
 * the steps after the warm-up), the wall time of every step (compiles
 * included) on both sides, and the cache's compiles, hits and misses.
 * Both sides' first losses are compared (a note on stderr either way).
 * Then, per workload at one thread, the fallback: every segment in the
 * fallback interpreter, as with no C compiler, against the compiled run.
 *   bench_dynamic BENCH_DIR [WORKLOAD...]
 * LOOM_BENCH_PEERS=0 skips PyTorch (null), LOOM_BENCH_THREADS=N measures
 * only N threads, LOOM_BENCH_POLICIES=symbolic,auto only those policies. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "dynamic.h"

enum { MAX_THREADS = 2, RUN_STEPS = 100 };

typedef struct workload {
  const char *name;
  dyn_run_fn run;
  int form;   /* treelstm: 0 per node, 1 per level */
  int warmup; /* of the RUN_STEPS, the same on both sides */
} workload_t;

static const workload_t workloads[] = {
    {"lstm", dyn_lstm_run, 0, 5},
    {"gnn", dyn_gnn_run, 0, 5},
    {"moe", dyn_moe_run, 0, 5},
    {"treelstm", dyn_treelstm_run, 1, 5}, /* level form */
};

static const char *const policy_names[] = {"exact", "bucket", "symbolic", "auto"};
static const loom_dim_policy_kind_t policies[] = {LOOM_DIM_EXACT, LOOM_DIM_BUCKET,
                                                  LOOM_DIM_SYMBOLIC, LOOM_DIM_AUTO};
enum { N_POLICIES = 4, SYMBOLIC = 2 };

typedef struct peer {
  double items_per_s, first_loss, last_loss, wall_s;
} peer_t;

static peer_t torch_run(const char *bench_dir, const workload_t *w, int threads) {
  peer_t r = {NAN, NAN, NAN, NAN};
  if (!bench_peers_wanted()) return r;
  if (system("/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null") != 0) {
    fprintf(stderr, "bench dynamic: PyTorch is not installed (bench/setup.sh): null\n");
    return r;
  }
  char cmd[1024];
  if (snprintf(cmd, sizeof cmd,
               "%s /usr/bin/python3 '%s/peers/torch_dynamic.py' %s --threads %d "
               "--steps %d --warmup %d",
               bench_torch_env(), bench_dir, w->name, threads, RUN_STEPS - w->warmup,
               w->warmup) >= (int)sizeof cmd)
    return r;
  FILE *f = popen(cmd, "r");
  char line[256];
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "%lf %lf %lf %lf", &r.items_per_s, &r.first_loss, &r.last_loss,
               &r.wall_s) == 4)
      break;
  if (!f || pclose(f) != 0 || !isfinite(r.items_per_s)) {
    fprintf(stderr, "bench dynamic: peer failed: %s\n", cmd);
    r = (peer_t){NAN, NAN, NAN, NAN};
  }
  return r;
}

/* PyTorch's best of two runs (its throughput and its wall time each). */
static peer_t torch_best(const char *bench_dir, const workload_t *w, int threads) {
  peer_t a = torch_run(bench_dir, w, threads), b = torch_run(bench_dir, w, threads);
  if (!isfinite(a.items_per_s)) return b;
  if (isfinite(b.items_per_s)) {
    a.items_per_s = fmax(a.items_per_s, b.items_per_s);
    a.wall_s = fmin(a.wall_s, b.wall_s);
  }
  return a;
}

static int loom_run(const workload_t *w, int threads, int policy, int compile, int wait,
                    dyn_result_t *r) {
  dyn_config_t c = {.threads = threads, .policy = policies[policy], .compile = compile,
                    .wait_compiles = wait, .form = w->form};
  memset(r, 0, sizeof *r);
  if (w->run(&c, w->warmup, RUN_STEPS - w->warmup, r) == LOOM_OK) return 1;
  fprintf(stderr, "bench dynamic: %s (%s, %d threads) failed: %s\n", w->name,
          policy_names[policy], threads, loom_last_error());
  return 0;
}

/* Both sides start from the same weights and batch. */
static void compare_loss(const char *name, double mine, double theirs) {
  if (!isfinite(mine) || !isfinite(theirs)) return;
  double rel = fabs(mine - theirs) / fabs(theirs);
  fprintf(stderr, "bench dynamic: %s: first loss Loom %.8g, PyTorch %.8g (relative "
          "difference %.1e)%s\n", name, mine, theirs, rel,
          rel > 1e-5 ? "  <-- MISMATCH" : ": agree");
}

static void print_line(const workload_t *w, int threads, int policy, const char *cache,
                       int ok, const dyn_result_t *l, const peer_t *t) {
  bench_json_t j;
  double mine = ok ? l->items_per_s : NAN, wall = ok ? l->wall_s : NAN;
  bench_json_begin(&j, "dynamic");
  bench_json_str(&j, "workload", w->name);
  bench_json_num(&j, "threads", threads);
  bench_json_str(&j, "policy", policy_names[policy]);
  bench_json_str(&j, "cache", cache);
  bench_json_num(&j, "loom_items_per_s", mine);
  bench_json_num(&j, "torch_eager_items_per_s", t->items_per_s);
  bench_json_num(&j, "vs_torch_eager", mine / t->items_per_s);
  bench_json_num(&j, "compiles", ok ? (double)l->stats.cache.compiles : NAN);
  bench_json_num(&j, "hits", ok ? (double)l->stats.hits : NAN);
  bench_json_num(&j, "misses", ok ? (double)l->stats.misses : NAN);
  bench_json_num(&j, "interpreted", ok ? (double)l->stats.interpreted : NAN);
  bench_json_num(&j, "compile_ms_total", ok ? l->stats.cache.compile_ms : NAN);
  bench_json_num(&j, "loom_wall_s", wall);
  bench_json_num(&j, "torch_wall_s", t->wall_s);
  bench_json_num(&j, "torch_wall_over_loom", t->wall_s / wall);
  bench_json_end(&j);
}

/* The workload with nothing compiled (as with no C compiler): every
 * segment runs in the fallback interpreter, on the CPU back end's eager
 * kernels where it has them (src/backend/cpu/eager.c), at one thread,
 * symbolic, its best of two runs against the compiled run's best. */
static void print_fallback(const workload_t *w, const dyn_result_t *compiled) {
  dyn_result_t f, again; /* the best of two, as the compiled run's */
  int ok = loom_run(w, 1, SYMBOLIC, 0, 0, &f);
  if (ok && loom_run(w, 1, SYMBOLIC, 0, 0, &again) && again.items_per_s > f.items_per_s) f = again;
  bench_json_t j;
  bench_json_begin(&j, "fallback");
  bench_json_str(&j, "workload", w->name);
  bench_json_num(&j, "threads", 1);
  bench_json_num(&j, "fallback_items_per_s", ok ? f.items_per_s : NAN);
  bench_json_num(&j, "compiled_items_per_s", compiled->items_per_s);
  bench_json_num(&j, "vs_compiled", ok ? f.items_per_s / compiled->items_per_s : NAN);
  bench_json_end(&j);
}

/* A fresh, empty module cache directory as LOOM_CACHE_DIR (dir gets its
 * path), so that the next run compiles every segment. */
static int fresh_module_cache(char *dir, size_t size) {
  return bench_temp_dir("dynamic", dir, size) && setenv("LOOM_CACHE_DIR", dir, 1) == 0;
}

static int policy_wanted(int p) {
  const char *list = getenv("LOOM_BENCH_POLICIES");
  if (!list || !*list) return 1;
  const char *at = strstr(list, policy_names[p]);
  size_t n = strlen(policy_names[p]);
  return at && (at == list || at[-1] == ',') && (at[n] == '\0' || at[n] == ',');
}

/* Cold, then warm, runs of one policy; the warm one's best of two (this
 * shared VM's runs swing). Returns the warm result of the symbolic policy
 * at one thread through *symbolic. */
static void bench_policy(const workload_t *w, int th, int p, const peer_t *t,
                         dyn_result_t *symbolic) {
  char dir[256];
  if (!fresh_module_cache(dir, sizeof dir)) return;
  dyn_result_t cold, fill, warm, again;
  int ok = loom_run(w, th, p, 1, 0, &cold);
  if (th == 1 && p == SYMBOLIC) compare_loss(w->name, ok ? cold.first_loss : NAN, t->first_loss);
  print_line(w, th, p, "cold", ok, &cold, t);
  ok = loom_run(w, th, p, 1, 1, &fill) && loom_run(w, th, p, 1, 0, &warm);
  if (ok && loom_run(w, th, p, 1, 0, &again) && again.items_per_s > warm.items_per_s) warm = again;
  print_line(w, th, p, "warm", ok, &warm, t);
  if (ok && th == 1 && p == SYMBOLIC) *symbolic = warm;
  bench_remove_dir(dir);
}

static void bench_workload(const char *bench_dir, const workload_t *w) {
  dyn_result_t symbolic = {0};
  for (int th = 1; th <= MAX_THREADS; th++) {
    if (!bench_threads_wanted(th)) continue;
    peer_t t = torch_best(bench_dir, w, th);
    for (int p = 0; p < N_POLICIES; p++)
      if (policy_wanted(p)) bench_policy(w, th, p, &t, &symbolic);
  }
  if (symbolic.items_per_s > 0) print_fallback(w, &symbolic);
}

int main(int argc, char **argv) {
  const char *names[sizeof workloads / sizeof workloads[0]];
  for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++) names[i] = workloads[i].name;
  const char *bench_dir = bench_suite_args(argc, argv, names, (int)(sizeof workloads / sizeof workloads[0]));
  bench_lock_memory("dynamic");
  for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++)
    if (bench_name_wanted(workloads[i].name, argc, argv)) bench_workload(bench_dir, &workloads[i]);
  return 0;
}
