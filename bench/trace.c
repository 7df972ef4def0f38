/* The tracer's own costs (issue 5's trace line):
 *   ns_per_recorded_op: recording one op into a trace (the builder call,
 *     ir_add_node and the trace's node hook), over steps of 1000 ops;
 *   ns_per_cache_hit: a cut of a small segment (4 ops on 8 floats) whose
 *     executable is cached: extraction, key hashing, the lookup (or the
 *     hot path), binding, output allocation and the run;
 *   ns_exec_run: the same executable run alone, for reference, so that
 *     ns_per_cache_hit - ns_exec_run is the tracer's overhead per hit;
 *   ns_per_lookup_hit: a hit when the hot path predicts wrong (two
 *     segments alternate after the step start), so the table is looked up.
 * Best of several repetitions (the machine is shared).
 * And a first_run line (issue 18's first-run target: a segment never seen
 * runs its first time within 5 ms plus 3x its compiled time, up to 100
 * nodes): a step of a 100-node segment never seen, with an empty module
 * cache, in a tiered trace (the default: the fallback runs it while a
 * worker compiles) and in an untiered one (the step waits for the
 * compile), against the compiled step once the executable is ready. */
#include <stdlib.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>

#include "bench_util.h"
#include "loom/trace.h"

enum { OPS_PER_STEP = 1000, REPS = 7 };

static loom_trace_t *new_trace(int compile) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.compile = compile;
  o.spec_workers = 0;
  o.num_threads = 1;
  loom_trace_t *t;
  BENCH_TRY(loom_trace_create(&o, &t));
  return t;
}

/* Nanoseconds per recorded op: the recording loop alone is timed; the
 * step then ends in the interpreter. */
static double record_ns(void) {
  loom_trace_t *t = new_trace(0);
  loom_graph_t *g = loom_trace_graph(t);
  int64_t shape[1] = {4};
  loom_tensor_t *xt = bench_input(1, shape);
  double best = 1e30;
  for (int rep = 0; rep < REPS; rep++) {
    loom_value_t x, y;
    BENCH_TRY(loom_trace_input(t, xt, NULL, &x));
    y = x;
    double t0 = bench_now_ns();
    for (int i = 0; i < OPS_PER_STEP / 2; i++) {
      BENCH_TRY(loom_mul(g, y, x, &y));
      BENCH_TRY(loom_tanh(g, y, &y));
    }
    double ns = (bench_now_ns() - t0) / OPS_PER_STEP;
    if (ns < best) best = ns;
    BENCH_TRY(loom_trace_step_end(t));
  }
  loom_tensor_destroy(xt);
  loom_trace_destroy(t);
  return best;
}

/* One step: record the small segment, then time the read (the cut). */
static double cut_ns(loom_trace_t *t, loom_tensor_t *xt, int variant) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_value_t x, a, b, c, d;
  BENCH_TRY(loom_trace_input(t, xt, NULL, &x));
  BENCH_TRY(loom_mul(g, x, x, &a));
  BENCH_TRY(loom_add(g, a, x, &b));
  BENCH_TRY(variant ? loom_sigmoid(g, b, &c) : loom_tanh(g, b, &c));
  BENCH_TRY(loom_sub(g, c, x, &d));
  const loom_tensor_t *out;
  double t0 = bench_now_ns();
  BENCH_TRY(loom_trace_read(t, d, &out));
  double ns = bench_now_ns() - t0;
  BENCH_TRY(loom_trace_step_end(t));
  return ns;
}

static double hit_ns(int alternate, int64_t *stitched) {
  loom_trace_t *t = new_trace(1);
  int64_t shape[1] = {8};
  loom_tensor_t *xt = bench_input(1, shape);
  for (int i = 0; i < 20; i++) cut_ns(t, xt, alternate & i); /* compile, warm */
  double best = 1e30;
  for (int rep = 0; rep < REPS; rep++) {
    double sum = 0;
    const int n = 2000;
    for (int i = 0; i < n; i++) sum += cut_ns(t, xt, alternate & i);
    if (sum / n < best) best = sum / n;
  }
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  BENCH_TRY(loom_trace_get_stats(t, &s));
  *stitched = s.stitched;
  loom_tensor_destroy(xt);
  loom_trace_destroy(t);
  return best;
}

/* The executable of the same segment, run alone. */
static double exec_ns(void) {
  loom_graph_t *g;
  BENCH_TRY(loom_graph_create(&g));
  int64_t shape[1] = {8};
  loom_value_t x, a, b, c, d;
  BENCH_TRY(loom_graph_input(g, "x", LOOM_F32, 1, shape, &x));
  BENCH_TRY(loom_mul(g, x, x, &a));
  BENCH_TRY(loom_add(g, a, x, &b));
  BENCH_TRY(loom_tanh(g, b, &c));
  BENCH_TRY(loom_sub(g, c, x, &d));
  BENCH_TRY(loom_graph_output(g, d));
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.num_threads = 1;
  loom_executable_t *e;
  BENCH_TRY(loom_compile(g, &o, &e));
  loom_tensor_t *xt = bench_input(1, shape), *y;
  BENCH_TRY(loom_executable_new_output(e, 0, &y));
  double best = 1e30;
  for (int rep = 0; rep < REPS; rep++) {
    const int n = 20000;
    double t0 = bench_now_ns();
    for (int i = 0; i < n; i++) BENCH_TRY(loom_executable_run(e, 1, &xt, 1, &y));
    double ns = (bench_now_ns() - t0) / n;
    if (ns < best) best = ns;
  }
  loom_tensor_destroy(xt);
  loom_tensor_destroy(y);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
  return best;
}

/* ---- First run ------------------------------------------------------------ */

enum { FR_N = 64, FR_BLOCKS = 25 }; /* 4 nodes a block: 100 */

/* One step of y = 0.5 * tanh(y @ w + y), FR_BLOCKS times, read back:
 * milliseconds, recording and the read included. */
static double first_run_step(loom_trace_t *t, loom_tensor_t *xt, loom_tensor_t *wt) {
  loom_graph_t *g = loom_trace_graph(t);
  double t0 = bench_now_ns();
  loom_value_t y, w, half;
  BENCH_TRY(loom_trace_input(t, xt, NULL, &y));
  BENCH_TRY(loom_trace_param(t, wt, &w));
  BENCH_TRY(loom_full(g, 0, NULL, 0.5, LOOM_F32, &half));
  for (int b = 0; b < FR_BLOCKS; b++) {
    loom_value_t m, a, h;
    BENCH_TRY(loom_matmul(g, y, w, 0, 0, &m));
    BENCH_TRY(loom_add(g, m, y, &a));
    BENCH_TRY(loom_tanh(g, a, &h));
    BENCH_TRY(loom_mul(g, h, half, &y));
  }
  const loom_tensor_t *out;
  BENCH_TRY(loom_trace_read(t, y, &out));
  double ms = (bench_now_ns() - t0) / 1e6;
  BENCH_TRY(loom_trace_step_end(t));
  return ms;
}

/* The first step's and the compiled steps' times, in a fresh trace over
 * an empty module cache; tiered or not. */
static void first_run(int tiered, double *first_ms, double *compiled_ms) {
  char dir[256];
  if (!bench_temp_dir("first-run", dir, sizeof dir) || setenv("LOOM_CACHE_DIR", dir, 1) != 0) {
    *first_ms = *compiled_ms = NAN;
    return;
  }
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.tiered = tiered;
  o.num_threads = 1;
  loom_trace_t *t;
  BENCH_TRY(loom_trace_create(&o, &t));
  int64_t shape[2] = {FR_N, FR_N};
  loom_tensor_t *xt = bench_input(2, shape), *wt = bench_input(2, shape);
  *first_ms = first_run_step(t, xt, wt);
  /* until the compiled executable serves (a tiered trace's worker is done) */
  loom_trace_stats_t st = LOOM_TRACE_STATS_INIT;
  for (int k = 0; k < 100000; k++) {
    BENCH_TRY(loom_trace_get_stats(t, &st));
    if (st.hits > 0) break;
    if (tiered) usleep(1000);
    first_run_step(t, xt, wt);
  }
  *compiled_ms = 1e30;
  for (int rep = 0; rep < 20; rep++) {
    double ms = first_run_step(t, xt, wt);
    if (ms < *compiled_ms) *compiled_ms = ms;
  }
  loom_trace_destroy(t);
  loom_tensor_destroy(xt);
  loom_tensor_destroy(wt);
  bench_remove_dir(dir);
}

static void print_first_run(void) {
  double tiered_ms, waited_ms, compiled_ms, again_ms;
  first_run(1, &tiered_ms, &compiled_ms);
  first_run(0, &waited_ms, &again_ms);
  if (again_ms < compiled_ms) compiled_ms = again_ms;
  bench_json_t j;
  bench_json_begin(&j, "first_run");
  bench_json_num(&j, "nodes", 4 * FR_BLOCKS);
  bench_json_num(&j, "first_run_ms_tiered", tiered_ms);
  bench_json_num(&j, "first_run_ms_waiting", waited_ms);
  bench_json_num(&j, "compiled_step_ms", compiled_ms);
  bench_json_num(&j, "target_ms", 5 + 3 * compiled_ms);
  bench_json_end(&j);
}

int main(void) {
  int64_t stitched = 0, unstitched = 0;
  double rec = record_ns();
  double hit = hit_ns(0, &stitched);
  double lookup = hit_ns(1, &unstitched);
  double run = exec_ns();
  bench_json_t j;
  bench_json_begin(&j, "trace");
  bench_json_num(&j, "ns_per_recorded_op", rec);
  bench_json_num(&j, "ns_per_cache_hit", hit);
  bench_json_num(&j, "ns_exec_run", run);
  bench_json_num(&j, "ns_per_lookup_hit", lookup);
  bench_json_num(&j, "stitched", (double)stitched);
  bench_json_end(&j);
  print_first_run();
  return 0;
}
