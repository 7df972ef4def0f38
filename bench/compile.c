/* bench compile: compile time.
 *
 * First the demo CNN, cold (an empty disk cache: the C compiler runs) and
 * warm (a new process finds the module on disk and must not run the
 * compiler), and warm with the module cache's index removed first (the
 * code generator runs again to find the module by its source). Then how compile time scales with the graph (issue 15): long
 * chains, DAGs of 1,000 nodes whose values are shared many times over,
 * chains of reductions and of matmuls, and a deep MLP's training step,
 * each compiled with use_cc = 0 (Loom's own passes, fusion, schedule,
 * memory plan and code generation) and, for the smaller ones, with the C
 * compiler on a cold cache too. One line per compile (wall and CPU time,
 * time per node, peak memory, and a run's time afterwards: the reference
 * kernels' without the C compiler, the generated code's with it), then per family the CPU time per node at
 * 10k and at 100k nodes and their ratio, which stays near 1 when compile
 * time grows linearly. LOOM_BENCH_LARGE_CC=1 also compiles the 100k chain with
 * the C compiler (minutes: the compiler takes about a millisecond a node).
 * Then the training steps of the example Transformer and ResNet-18 (and
 * the MLP), compiled on a cold cache: wall and CPU time and the size of
 * the generated C. Last, SHA-256 (which keys every module and checks every
 * file the cache loads) in MB/s by each compression this CPU runs,
 * against the portable one.
 *
 *   bench_compile [cnn | scaling | models | hash | cold]
 *
 * (cold: only the lines that run the C compiler, scaling's and models'.)
 *
 * Each compile runs in its own process, so that no in-memory state helps
 * the next one and each has its own peak memory. */
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench_util.h"
#include "core/sha256.h"
#include "loom/ops.h"
#include "loom/train.h"
#include "models.h"

enum { COLD_RUNS = 3, WARM_RUNS = 5 };

/* ---- Child processes ------------------------------------------------------ */

/* Runs this program with args in a child, cache dir `dir`, and reads its
 * one line of output into line; false on failure. */
static bool run_child(const char *self, const char *dir, const char *args, char *line,
                      int cap) {
  char cmd[4096];
  if (snprintf(cmd, sizeof cmd, "LOOM_CACHE_DIR='%s' '%s' %s", dir, self, args) >=
      (int)sizeof cmd)
    return false;
  FILE *p = popen(cmd, "r");
  bool ok = p && fgets(line, cap, p) != NULL;
  if (p && pclose(p) != 0) ok = false;
  return ok;
}

/* ---- The demo CNN, cold and warm ------------------------------------------- */

/* The child: one compile, printed as "ms cc_invocations". */
static int compile_once(void) {
  loom_graph_t *g;
  loom_value_t logits;
  loom_executable_t *e;
  loom_stats_t stats = LOOM_STATS_INIT;
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

static double child_compile(const char *self, const char *dir, long long *cc_runs) {
  char line[256];
  double ms = NAN;
  if (!run_child(self, dir, "--once", line, sizeof line) ||
      sscanf(line, "%lf %lld", &ms, cc_runs) != 2)
    return NAN;
  return ms;
}

/* Removes the module cache's index entries (*.idx) from dir. */
static void remove_index(const char *dir) {
  DIR *d = opendir(dir);
  for (struct dirent *de; d && (de = readdir(d));) {
    size_t n = strlen(de->d_name);
    char path[512];
    if (n > 4 && !strcmp(de->d_name + n - 4, ".idx") &&
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name) < (int)sizeof path)
      unlink(path);
  }
  if (d) closedir(d);
}

static int bench_cnn(const char *self) {
  double cold[COLD_RUNS], warm[WARM_RUNS], unindexed[WARM_RUNS];
  long long cc_runs = 0;
  char dir[256];
  for (int i = 0; i < COLD_RUNS; i++) {
    if (i) bench_remove_dir(dir);
    if (!bench_temp_dir("cache", dir, sizeof dir)) return 1;
    cold[i] = child_compile(self, dir, &cc_runs);
  }
  for (int i = 0; i < WARM_RUNS; i++) {
    warm[i] = child_compile(self, dir, &cc_runs);
    if (cc_runs != 0) {
      fprintf(stderr, "bench compile: the warm compile ran the C compiler %lld times\n", cc_runs);
      warm[i] = NAN;
    }
  }
  for (int i = 0; i < WARM_RUNS; i++) {
    remove_index(dir);
    unindexed[i] = child_compile(self, dir, &cc_runs);
  }
  bench_remove_dir(dir);
  bench_json_t j;
  bench_json_begin(&j, "compile");
  bench_json_num(&j, "cold_ms", bench_median(cold, COLD_RUNS));
  bench_json_num(&j, "warm_ms", bench_median(warm, WARM_RUNS));
  bench_json_num(&j, "warm_without_index_ms", bench_median(unindexed, WARM_RUNS));
  bench_json_num(&j, "index_speedup",
                 bench_median(unindexed, WARM_RUNS) / bench_median(warm, WARM_RUNS));
  bench_json_end(&j);
  return 0;
}

/* ---- Graphs for scaling ------------------------------------------------------ */

/* A graph being built: x (4, 64) and the values so far, with a flag per
 * value that some node reads it. */
typedef struct build {
  loom_graph_t *g;
  loom_value_t x;
  loom_value_t *vals;
  bool *read;
  int n, cap;
  uint64_t rng;
} build_t;

static uint64_t next_rand(build_t *b) {
  b->rng ^= b->rng << 13;
  b->rng ^= b->rng >> 7;
  b->rng ^= b->rng << 17;
  return b->rng;
}

static void push(build_t *b, loom_value_t v) {
  if (b->n < b->cap) b->vals[b->n++] = v;
}

/* The value `back` places from the newest, read. */
static loom_value_t recent(build_t *b, int back) {
  int i = b->n - 1 - (back < b->n ? back : b->n - 1);
  b->read[i] = true;
  return b->vals[i];
}

static loom_value_t last(build_t *b) { return recent(b, 0); }

/* neg, tanh, neg, tanh, ... */
static void grow_chain(build_t *b, int i) {
  loom_value_t y, x = last(b);
  BENCH_TRY(i % 2 ? loom_tanh(b->g, x, &y) : loom_neg(b->g, x, &y));
  push(b, y);
}

/* y = y + y: each value read twice by the next (the 31-node graph
 * that took 17.8 s). */
static void grow_shared(build_t *b, int i) {
  (void)i;
  loom_value_t y, x = last(b);
  BENCH_TRY(loom_add(b->g, x, x, &y));
  push(b, y);
}

/* y = tanh(y) + sigmoid(y): diamonds, paths doubling per level. */
static void grow_diamond(build_t *b, int i) {
  loom_value_t t, s, y, x = last(b);
  if (i % 3) return;
  BENCH_TRY(loom_tanh(b->g, x, &t));
  BENCH_TRY(loom_sigmoid(b->g, x, &s));
  BENCH_TRY(loom_add(b->g, t, s, &y));
  push(b, y);
}

/* A random DAG: each node reads one of the last 8 values and, for binary
 * ops, one of the last 64 (the one 63 back when nothing read it yet, so
 * that every value is read within 64 nodes, as in a model's layers). */
static void grow_dag(build_t *b, int i) {
  (void)i;
  bool unread = b->n > 63 && !b->read[b->n - 64];
  int op = (int)(next_rand(b) % (unread ? 3 : 4));
  loom_value_t y, x = recent(b, (int)(next_rand(b) % 8));
  if (op == 3) {
    BENCH_TRY(loom_tanh(b->g, x, &y));
    push(b, y);
    return;
  }
  loom_value_t z = recent(b, unread ? 63 : (int)(next_rand(b) % 64));
  BENCH_TRY(op == 0 ? loom_add(b->g, x, z, &y) : op == 1 ? loom_mul(b->g, x, z, &y)
                    : loom_sub(b->g, x, z, &y));
  push(b, y);
}

/* A random DAG reading any earlier value: values stay live across the
 * graph, the memory planner's hardest case. */
static void grow_wide_dag(build_t *b, int i) {
  (void)i;
  loom_value_t y, x = last(b), z = recent(b, (int)(next_rand(b) % (uint64_t)b->n));
  BENCH_TRY(next_rand(b) % 2 ? loom_add(b->g, x, z, &y) : loom_mul(b->g, x, z, &y));
  push(b, y);
}

/* tanh, then a softmax by hand (max, sub, exp, sum, div), repeated. */
static void grow_softmax(build_t *b, int i) {
  int64_t axis[] = {-1};
  loom_value_t t, y, x = last(b);
  switch (i % 6) {
  case 0: BENCH_TRY(loom_tanh(b->g, x, &y)); break;
  case 1: BENCH_TRY(loom_max(b->g, x, 1, axis, 1, &t)); BENCH_TRY(loom_sub(b->g, x, t, &y)); break;
  case 3: BENCH_TRY(loom_exp(b->g, x, &y)); break;
  case 4: BENCH_TRY(loom_sum(b->g, x, 1, axis, 1, &t)); BENCH_TRY(loom_div(b->g, x, t, &y)); break;
  default: return;
  }
  push(b, y);
}

/* y = tanh(y @ x^T @ x): a contraction group per matmul. */
static void grow_matmul(build_t *b, int i) {
  loom_value_t t, y, x = last(b);
  if (i % 3) return;
  BENCH_TRY(loom_matmul(b->g, x, b->x, 0, 1, &t));
  BENCH_TRY(loom_matmul(b->g, t, b->x, 0, 0, &y));
  BENCH_TRY(loom_tanh(b->g, y, &y));
  push(b, y);
}

typedef void (*grow_fn)(build_t *b, int i);

typedef struct family {
  const char *name;
  grow_fn grow;
} family_t;

static const family_t families[] = {
    {"chain", grow_chain},     {"shared", grow_shared},   {"diamonds", grow_diamond},
    {"dag", grow_dag},         {"wide_dag", grow_wide_dag}, {"softmax", grow_softmax},
    {"matmul", grow_matmul},   {"train", NULL},
};

/* Ends the graph: every value nobody read added to the last (so that no
 * node is dead), then a sum as the output. */
static void finish(build_t *b) {
  loom_value_t y = b->vals[b->n - 1], out;
  for (int i = 1; i < b->n - 1; i++)
    if (!b->read[i]) BENCH_TRY(loom_add(b->g, y, b->vals[i], &y));
  BENCH_TRY(loom_sum(b->g, y, 0, NULL, 0, &out));
  BENCH_TRY(loom_graph_output(b->g, out));
}

/* A deep MLP's training step: layers of matmul and tanh (16 wide, so
 * that 4,000 layers' weights and AdamW state stay small) until the step
 * has about `nodes` nodes, a sum as the loss, its gradient and AdamW
 * (about 25 nodes a layer in all). */
static loom_graph_t *build_train(int nodes) {
  loom_graph_t *g;
  loom_value_t x, y, loss, lr;
  int64_t shape[] = {16, 16};
  int layers = nodes / 25 > 0 ? nodes / 25 : 1;
  loom_value_t *params = malloc(sizeof *params * (size_t)layers);
  loom_value_t *grads = malloc(sizeof *grads * (size_t)layers);
  if (!params || !grads) exit(1);
  BENCH_TRY(loom_graph_create(&g));
  BENCH_TRY(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){4, 16}, &x));
  BENCH_TRY(loom_graph_input(g, "lr", LOOM_F32, 0, NULL, &lr));
  y = x;
  for (int l = 0; l < layers; l++) {
    char name[32];
    snprintf(name, sizeof name, "w%d", l);
    BENCH_TRY(loom_graph_param(g, name, LOOM_F32, 2, shape, NULL, &params[l]));
    BENCH_TRY(loom_matmul(g, y, params[l], 0, 0, &y));
    BENCH_TRY(loom_tanh(g, y, &y));
  }
  BENCH_TRY(loom_sum(g, y, 0, NULL, 0, &loss));
  BENCH_TRY(loom_grad(g, loss, layers, params, grads));
  BENCH_TRY(loom_adamw(g, layers, params, grads, lr, 0.9, 0.999, 1e-8, 0.01));
  BENCH_TRY(loom_graph_output(g, loss));
  free(params);
  free(grads);
  return g;
}

/* Family f's graph of about `nodes` nodes. */
static loom_graph_t *build_family(const family_t *f, int nodes) {
  if (!f->grow) return build_train(nodes);
  build_t b = {.cap = nodes + 2, .rng = 88172645463325252ull};
  b.vals = malloc(sizeof *b.vals * (size_t)b.cap);
  b.read = calloc((size_t)b.cap, sizeof *b.read);
  if (!b.vals || !b.read) exit(1);
  BENCH_TRY(loom_graph_create(&b.g));
  BENCH_TRY(loom_graph_input(b.g, "x", LOOM_F32, 2, (loom_dim_t[]){4, 64}, &b.x));
  push(&b, b.x);
  for (int i = 0; loom_graph_num_nodes(b.g) < nodes - 1; i++) f->grow(&b, i);
  finish(&b);
  free(b.vals);
  free(b.read);
  return b.g;
}

/* ---- Scaling: one compile per child ------------------------------------------ */

static double cpu_ms(void) {
  struct rusage self, kids;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &kids);
  return (self.ru_utime.tv_sec + kids.ru_utime.tv_sec + self.ru_stime.tv_sec +
          kids.ru_stime.tv_sec) * 1e3 +
         (self.ru_utime.tv_usec + kids.ru_utime.tv_usec + self.ru_stime.tv_usec +
          kids.ru_stime.tv_usec) / 1e3;
}

typedef struct run_arg {
  loom_executable_t *e;
  loom_tensor_t *x, *y;
} run_arg_t;

static void run_once(void *arg) {
  run_arg_t *r = arg;
  BENCH_TRY(loom_executable_run(r->e, 1, &r->x, 1, &r->y));
}

/* Microseconds per run of e on x (4, 64); NaN for a graph with other
 * inputs (the training step). */
static double run_us(loom_executable_t *e, const family_t *f) {
  if (!f->grow) return NAN;
  run_arg_t r = {.e = e, .x = bench_input(2, (int64_t[]){4, 64})};
  BENCH_TRY(loom_executable_new_output(e, 0, &r.y));
  double ms = bench_time_ms(run_once, &r, 2, 5, 50);
  loom_tensor_destroy(r.x);
  loom_tensor_destroy(r.y);
  return ms * 1e3;
}

/* The child: builds family `name` at `nodes`, compiles it (the C compiler
 * on when cc), and prints "wall_ms cpu_ms nodes_after_passes groups
 * generated peak_rss_kb kernels run_us". CPU time counts the C compiler's
 * processes; run_us is a run's time afterwards, so that the cost of a
 * faster compile to the code shows beside it. */
static int scale_once(const char *name, int nodes, int cc) {
  const family_t *f = NULL;
  for (size_t i = 0; i < sizeof families / sizeof *families; i++)
    if (!strcmp(families[i].name, name)) f = &families[i];
  if (!f) return fprintf(stderr, "bench compile: no graph family %s\n", name), 2;
  loom_graph_t *g = build_family(f, nodes);
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.use_cc = cc;
  loom_executable_t *e;
  double t0 = bench_now_ns(), c0 = cpu_ms();
  BENCH_TRY(loom_compile(g, &o, &e));
  double ms = (bench_now_ns() - t0) / 1e6, cpu = cpu_ms() - c0;
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  BENCH_TRY(loom_executable_info(e, &info));
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double run = nodes <= 10000 ? run_us(e, f) : NAN;
  printf("%.3f %.3f %d %d %d %ld %d %.3f\n", ms, cpu, info.n_nodes, info.n_groups,
         info.n_generated, ru.ru_maxrss, info.n_kernels, run);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
  return 0;
}

/* Compiles family at nodes in a child (a fresh cache when cc) and prints
 * its line; the CPU time per node in *us_per_node (NaN on failure), which
 * a shared machine's load disturbs less than wall time. */
static void scale_line(const char *self, const char *family, int nodes, int cc,
                       double *us_per_node) {
  char dir[256], args[128], line[256];
  double ms = NAN, cpu = NAN;
  int after = 0, groups = 0, generated = 0, kernels = 0;
  long rss = 0;
  double run = NAN;
  bool ok = bench_temp_dir("cache", dir, sizeof dir);
  snprintf(args, sizeof args, "--scale %s %d %d", family, nodes, cc);
  if (ok && (!run_child(self, dir, args, line, sizeof line) ||
             sscanf(line, "%lf %lf %d %d %d %ld %d %lf", &ms, &cpu, &after, &groups, &generated,
                    &rss, &kernels, &run) != 8))
    ms = cpu = NAN;
  if (ok) bench_remove_dir(dir);
  *us_per_node = cpu * 1e3 / nodes;
  bench_json_t j;
  bench_json_begin(&j, "compile_scaling");
  bench_json_str(&j, "graph", family);
  bench_json_num(&j, "nodes", nodes);
  bench_json_num(&j, "use_cc", cc);
  bench_json_num(&j, "compile_ms", ms);
  bench_json_num(&j, "cpu_ms", cpu);
  bench_json_num(&j, "us_per_node", ms * 1e3 / nodes);
  bench_json_num(&j, "cpu_us_per_node", *us_per_node);
  bench_json_num(&j, "nodes_after_passes", after);
  bench_json_num(&j, "groups", groups);
  bench_json_num(&j, "kernels", kernels);
  bench_json_num(&j, "peak_rss_mb", rss / 1024.0);
  bench_json_num(&j, "run_us", run);
  bench_json_end(&j);
}

/* cc_only: only the lines that run the C compiler. */
static int bench_scaling(const char *self, bool cc_only) {
  static const char *const dags[] = {"shared", "diamonds", "dag", "wide_dag", "softmax",
                                     "matmul", "train", "chain"};
  static const char *const long_ones[] = {"chain", "dag", "softmax", "matmul", "train"};
  double us;
  for (size_t i = 0; i < sizeof dags / sizeof *dags; i++)
    for (int cc = cc_only; cc < 2; cc++) scale_line(self, dags[i], 1000, cc, &us);
  for (size_t i = 0; !cc_only && i < sizeof long_ones / sizeof *long_ones; i++) {
    double small, large;
    scale_line(self, long_ones[i], 10000, 0, &small);
    scale_line(self, long_ones[i], 100000, 0, &large);
    bench_json_t j;
    bench_json_begin(&j, "compile_linearity");
    bench_json_str(&j, "graph", long_ones[i]);
    bench_json_num(&j, "cpu_us_per_node_10k", small);
    bench_json_num(&j, "cpu_us_per_node_100k", large);
    bench_json_num(&j, "ratio", large / small);
    bench_json_end(&j);
  }
  scale_line(self, "chain", 10000, 1, &us);
  const char *large_cc = getenv("LOOM_BENCH_LARGE_CC");
  if (large_cc && !strcmp(large_cc, "1")) scale_line(self, "chain", 100000, 1, &us);
  return 0;
}

/* ---- Example models' training steps, cold ------------------------------------- */

/* The step of model `name` (the configurations of bench train): forward,
 * cross-entropy, gradient and AdamW in one graph. */
static loom_graph_t *build_model_step(const char *name) {
  loom_graph_t *g;
  loom_value_t logits, labels, lr, loss, grads[MODEL_MAX_PARAMS];
  model_params_t p;
  int64_t batch = 8;
  BENCH_TRY(loom_graph_create(&g));
  model_train_begin(&p);
  if (!strcmp(name, "transformer")) {
    BENCH_TRY(model_transformer_encoder(g, batch, 128, &logits));
  } else if (!strcmp(name, "resnet18")) {
    BENCH_TRY(model_resnet18(g, batch, 64, &logits));
  } else {
    BENCH_TRY(model_mlp(g, 64, &logits));
    batch = 64;
  }
  model_train_end();
  BENCH_TRY(loom_graph_input(g, "labels", LOOM_I64, 1, (loom_dim_t[]){batch}, &labels));
  BENCH_TRY(loom_graph_input(g, "lr", LOOM_F32, 0, NULL, &lr));
  BENCH_TRY(loom_cross_entropy(g, logits, labels, LOOM_NO_IGNORE_INDEX, 0,
                               LOOM_REDUCTION_MEAN, &loss));
  BENCH_TRY(loom_grad(g, loss, p.n, p.v, grads));
  BENCH_TRY(loom_adamw(g, p.n, p.v, grads, lr, 0.9, 0.999, 1e-8, 0.01));
  BENCH_TRY(loom_graph_output(g, loss));
  return g;
}

/* The bytes of generated C in e's explain text. */
static long long source_bytes(const loom_executable_t *e) {
  char *text = NULL;
  long long n = -1;
  if (loom_executable_explain(e, &text) != LOOM_OK) return -1;
  const char *c = strstr(text, "== generated C");
  if (c && (c = strchr(c, '\n'))) n = (long long)strlen(c + 1);
  loom_free(text);
  return n;
}

/* The child: compiles model `name`'s step and prints "wall_ms cpu_ms
 * groups generated source_bytes cc_invocations". */
static int model_once(const char *name) {
  loom_graph_t *g = build_model_step(name);
  loom_executable_t *e;
  loom_stats_t stats = LOOM_STATS_INIT;
  double t0 = bench_now_ns(), c0 = cpu_ms();
  BENCH_TRY(loom_compile(g, NULL, &e));
  double ms = (bench_now_ns() - t0) / 1e6, cpu = cpu_ms() - c0;
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  BENCH_TRY(loom_executable_info(e, &info));
  BENCH_TRY(loom_stats_get(&stats));
  printf("%.3f %.3f %d %d %lld %lld %d\n", ms, cpu, info.n_groups, info.n_generated,
         source_bytes(e), (long long)stats.cc_invocations, info.n_kernels);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
  return 0;
}

static int bench_models_cold(const char *self) {
  static const char *const names[] = {"transformer", "resnet18", "mlp"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    char dir[256], args[128], line[256];
    double ms = NAN, cpu = NAN;
    int groups = 0, generated = 0, kernels = 0;
    long long bytes = -1, cc_runs = 0;
    bool ok = bench_temp_dir("cache", dir, sizeof dir);
    snprintf(args, sizeof args, "--model %s", names[i]);
    if (ok && (!run_child(self, dir, args, line, sizeof line) ||
               sscanf(line, "%lf %lf %d %d %lld %lld %d", &ms, &cpu, &groups, &generated,
                      &bytes, &cc_runs, &kernels) != 7))
      ms = cpu = NAN;
    if (ok) bench_remove_dir(dir);
    bench_json_t j;
    bench_json_begin(&j, "compile_model");
    bench_json_str(&j, "model", names[i]);
    bench_json_str(&j, "graph", "training step");
    bench_json_num(&j, "compile_ms", ms);
    bench_json_num(&j, "cpu_ms", cpu);
    bench_json_num(&j, "groups", groups);
    bench_json_num(&j, "generated", generated);
    bench_json_num(&j, "kernels", kernels);
    bench_json_num(&j, "source_kb", bytes / 1024.0);
    bench_json_num(&j, "cc_invocations", (double)cc_runs);
    bench_json_end(&j);
  }
  return 0;
}

/* ---- SHA-256 --------------------------------------------------------------------- */

/* MB/s of blocks over 1 MB, the best of 7 rounds of 8 passes. */
static double hash_rate(core_sha256_blocks_fn blocks, const uint8_t *data, size_t size) {
  double best = INFINITY;
  for (int round = 0; round < 7; round++) {
    uint32_t state[8] = {0};
    double t0 = bench_now_ns();
    for (int pass = 0; pass < 8; pass++) blocks(state, data, size / 64);
    double ns = (bench_now_ns() - t0) / 8;
    if (ns < best && state[0] != 1) best = ns; /* the state is used */
  }
  return (double)size / best * 1e3;
}

static int bench_hash(void) {
  enum { SIZE = 1 << 20 };
  uint8_t *data = malloc(SIZE);
  if (!data) return fprintf(stderr, "bench compile: out of memory\n"), 1;
  for (size_t i = 0; i < SIZE; i++) data[i] = (uint8_t)(i * 2654435761u >> 13);
  const core_sha256_impl_t *impls;
  int n = core_sha256_impls(&impls);
  double portable = hash_rate(impls[0].blocks, data, SIZE);
  for (int k = 0; k < n; k++) {
    double rate = k == 0 ? portable : hash_rate(impls[k].blocks, data, SIZE);
    bench_json_t j;
    bench_json_begin(&j, "compile_hash");
    bench_json_str(&j, "sha256", impls[k].name);
    bench_json_num(&j, "mb_per_s", rate);
    bench_json_num(&j, "vs_portable", rate / portable);
    bench_json_end(&j);
  }
  free(data);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--once")) return compile_once();
  if (argc == 5 && !strcmp(argv[1], "--scale"))
    return scale_once(argv[2], atoi(argv[3]), atoi(argv[4]));
  if (argc == 3 && !strcmp(argv[1], "--model")) return model_once(argv[2]);
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return fprintf(stderr, "bench compile: no /proc/self/exe\n"), 1;
  self[n] = 0;
  const char *what = argc > 1 ? argv[1] : "";
  bool all = argc < 2, cold = !strcmp(what, "cold");
  bool cnn = all || !strcmp(what, "cnn"), scaling = all || cold || !strcmp(what, "scaling");
  bool models = all || cold || !strcmp(what, "models"), hash = all || !strcmp(what, "hash");
  if (!cnn && !scaling && !models && !hash)
    return fprintf(stderr, "usage: %s [cnn | scaling | models | hash | cold]\n", argv[0]), 2;
  if (cnn && bench_cnn(self) != 0) return 1;
  if (scaling && bench_scaling(self, cold) != 0) return 1;
  if (models && bench_models_cold(self) != 0) return 1;
  return hash ? bench_hash() : 0;
}
