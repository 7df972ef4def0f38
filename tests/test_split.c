/* Steps timed on the pool and alone in their first runs (cpu_launch.c):
 * every run of a two-thread executable, those that time its steps, those
 * that time it whole with its steps' ways and all alone, and those after,
 * gives the reference interpreter's values, and an index
 * error is reported by every run whose input holds one, whichever way its
 * steps run: timed (the default), all on the pool or all alone
 * (LOOM_SPLIT); a program whose steps are all tiny runs alone as a whole
 * (LOOM_LOG=steps says so). */
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "loom/loom.h"
#include "loom/ops.h"

enum { RUNS = 12, INPUTS = 4, LONG_RUNS = 64 /* past the whole-program timing */ };

static loom_executable_t *compile_on(loom_graph_t *g, const char *target, int threads) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.num_threads = threads;
  o.target = target;
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  return e;
}

/* y = relu(x @ w) (a step worth splitting: tens of microseconds, so
 * that the program is timed whole too), s = sum(y, 1) and t = s * s
 * (steps too small to split). */
enum { ROWS = 128, K = 512, COLS = 256 };
static loom_graph_t *mixed_graph(void) {
  int64_t sx[2] = {ROWS, K}, sw[2] = {K, COLS};
  loom_graph_t *g = NULL;
  loom_value_t x, w, xw, y, s, t;
  loom_tensor_t *tw = test_rand_tensor(LOOM_F32, 2, sw, -0.1, 0.1);
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, sx, &x));
  CHECK_OK(loom_graph_param(g, "w", LOOM_F32, 2, sw, tw, &w));
  CHECK_OK(loom_matmul(g, x, w, 0, 0, &xw));
  CHECK_OK(loom_relu(g, xw, &y));
  int64_t axis = 1;
  CHECK_OK(loom_sum(g, y, 1, &axis, 0, &s));
  CHECK_OK(loom_mul(g, s, s, &t));
  CHECK_OK(loom_graph_output(g, y));
  CHECK_OK(loom_graph_output(g, t));
  loom_tensor_destroy(tw);
  return g;
}

/* Runs e LONG_RUNS times over INPUTS inputs in turn, each run against
 * the interpreter's outputs for its input. */
static void runs_match_the_interpreter(void) {
  test_seed(11);
  loom_graph_t *g = mixed_graph();
  loom_executable_t *e = compile_on(g, NULL, 2), *ref = compile_on(g, "ref", 1);
  int64_t sx[2] = {ROWS, K};
  loom_tensor_t *x[INPUTS], *want[INPUTS][2] = {{NULL}}, *got[2] = {NULL};
  for (int i = 0; i < INPUTS; i++) {
    x[i] = test_rand_tensor(LOOM_F32, 2, sx, -1, 1);
    for (int k = 0; ref && k < 2; k++) CHECK_OK(loom_executable_new_output(ref, k, &want[i][k]));
    if (ref) CHECK_OK(loom_executable_run(ref, 1, &x[i], 2, want[i]));
  }
  for (int k = 0; e && k < 2; k++) CHECK_OK(loom_executable_new_output(e, k, &got[k]));
  for (int run = 0; e && ref && run < LONG_RUNS; run++) {
    int i = run % INPUTS;
    CHECK_OK(loom_executable_run(e, 1, &x[i], 2, got));
    for (int k = 0; k < 2; k++) {
      const float *a = loom_tensor_data(got[k]), *b = loom_tensor_data(want[i][k]);
      int64_t n = k == 0 ? ROWS * COLS : ROWS;
      int wrong = 0;
      for (int64_t j = 0; j < n; j++)
        wrong += !(fabs(a[j] - b[j]) <= 1e-4 * (1 + fabs(b[j])));
      if (wrong) test_fail(__FILE__, __LINE__, "run %d, output %d: %d wrong", run, k, wrong);
      test_checks++;
    }
  }
  for (int i = 0; i < INPUTS; i++) {
    loom_tensor_destroy(x[i]);
    for (int k = 0; k < 2; k++) loom_tensor_destroy(want[i][k]);
  }
  for (int k = 0; k < 2; k++) loom_tensor_destroy(got[k]);
  loom_executable_destroy(e);
  loom_executable_destroy(ref);
  loom_graph_destroy(g);
}

/* out = gather(data, idx, 0): runs alternate good and out-of-range
 * indices. */
static void index_errors_in_every_run(void) {
  int64_t sd[2] = {16, 8}, si[1] = {4};
  loom_graph_t *g = NULL;
  loom_value_t data, idx, out;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "data", LOOM_F32, 2, sd, &data));
  CHECK_OK(loom_graph_input(g, "idx", LOOM_I64, 1, si, &idx));
  CHECK_OK(loom_gather(g, data, idx, 0, &out));
  CHECK_OK(loom_graph_output(g, out));
  loom_executable_t *e = compile_on(g, NULL, 2);
  loom_tensor_t *in[2] = {NULL, NULL}, *res = NULL;
  CHECK_OK(loom_tensor_create(LOOM_F32, 2, sd, &in[0]));
  CHECK_OK(loom_tensor_create(LOOM_I64, 1, si, &in[1]));
  float *d = loom_tensor_data(in[0]);
  for (int i = 0; i < 16 * 8; i++) d[i] = (float)i;
  if (e) CHECK_OK(loom_executable_new_output(e, 0, &res));
  for (int run = 0; e && run < 2 * RUNS; run++) {
    int64_t *ix = loom_tensor_data(in[1]);
    int bad = run % 2;
    for (int i = 0; i < 4; i++) ix[i] = bad && i == 2 ? 16 : 15 - 3 * i;
    loom_status_t s = loom_executable_run(e, 2, in, 1, &res);
    if (bad) {
      CHECK(s == LOOM_ERR_VALUE);
      continue;
    }
    CHECK_OK(s);
    const float *o = loom_tensor_data(res);
    for (int i = 0; i < 4; i++) CHECK(o[i * 8 + 3] == (float)((15 - 3 * i) * 8 + 3));
  }
  loom_tensor_destroy(res);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* y = relu(x * 2 + 1) and sum(y) over 256 floats: microseconds a step.
 * Once its steps are timed, the program is decided whole: on one thread
 * where every step was faster alone, else by timing whole runs each way
 * (which of the two depends on the machine's timings); either way every
 * run's results are right. */
static void tiny_program_is_decided_whole(void) {
  int64_t sx[1] = {256};
  loom_graph_t *g = NULL;
  loom_value_t x, two, one, a, b, y, s;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, sx, &x));
  CHECK_OK(loom_full(g, 0, NULL, 2, LOOM_F32, &two));
  CHECK_OK(loom_full(g, 0, NULL, 1, LOOM_F32, &one));
  CHECK_OK(loom_mul(g, x, two, &a));
  CHECK_OK(loom_add(g, a, one, &b));
  CHECK_OK(loom_relu(g, b, &y));
  CHECK_OK(loom_sum(g, y, 0, NULL, 0, &s));
  CHECK_OK(loom_graph_output(g, y));
  CHECK_OK(loom_graph_output(g, s));
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.num_threads = 2;
  o.fusion = 0; /* several steps */
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  test_capture_begin("steps");
  loom_tensor_t *xt = test_rand_tensor(LOOM_F32, 1, sx, -1, 1), *out[2] = {NULL, NULL};
  for (int k = 0; e && k < 2; k++) CHECK_OK(loom_executable_new_output(e, k, &out[k]));
  const float *xs = loom_tensor_data(xt);
  double want = 0;
  for (int i = 0; i < sx[0]; i++) want += xs[i] * 2 + 1 > 0 ? xs[i] * 2 + 1 : 0;
  for (int run = 0; e && run < LONG_RUNS; run++) {
    CHECK_OK(loom_executable_run(e, 1, &xt, 2, out));
    const float *ys = loom_tensor_data(out[0]);
    for (int i = 0; i < sx[0]; i++) CHECK(ys[i] == (xs[i] * 2 + 1 > 0 ? xs[i] * 2 + 1 : 0));
    CHECK(fabs(*(const float *)loom_tensor_data(out[1]) - want) < 1e-3 * (1 + fabs(want)));
  }
  char *text = test_capture_end();
  /* (one CPU: the pool has one thread and nothing is timed) */
  if (sysconf(_SC_NPROCESSORS_ONLN) > 1)
    CHECK(text && (strstr(text, "steps runs on 1 thread") ||
                   strstr(text, "steps runs with its steps' ways")));
  free(text);
  for (int k = 0; k < 2; k++) loom_tensor_destroy(out[k]);
  loom_tensor_destroy(xt);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

int main(void) {
  static const char *const splits[] = {NULL, "pool", "alone"};
  for (int i = 0; i < 3; i++) {
    if (splits[i]) setenv("LOOM_SPLIT", splits[i], 1);
    printf("LOOM_SPLIT=%s\n", splits[i] ? splits[i] : "(timed)");
    TEST_RUN(runs_match_the_interpreter);
    TEST_RUN(index_errors_in_every_run);
  }
  unsetenv("LOOM_SPLIT");
  TEST_RUN(tiny_program_is_decided_whole);
  unsetenv("LOOM_SPLIT");
  return test_summary();
}
