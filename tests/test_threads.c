/* Loom from several threads at once. Runs of one executable, each checked
 * against the interpreter's result for its own input (runs that only read
 * their parameters may overlap; runs that write them, or whose sizes are
 * read at run time, take turns: each sees the state the one before left);
 * loom_interpret and loom_compile of one graph; and a trace, which one
 * thread records a step into at a time (another thread's call is refused
 * with LOOM_ERR_INVALID until the step ends). Lanes, the storage of
 * overlapping runs, are also tested without relying on timing: a thread
 * that holds an executable's own storage runs in a lane. The harness's
 * counters are not thread-safe: threads count their own misses, and the
 * main thread checks the counts. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "loom/trace.h"
#include "runtime/executable.h"

enum { THREADS = 4, RUNS = 24, INPUTS = 8 };

/* Whether every element of got is near want's. */
static int same_values(const loom_tensor_t *got, const loom_tensor_t *want, double tol) {
  if (!got || !want || loom_tensor_numel(got) != loom_tensor_numel(want)) return 0;
  for (int64_t i = 0; i < loom_tensor_numel(want); i++) {
    double a = test_get(got, i), b = test_get(want, i);
    if (!(fabs(a - b) <= tol * (1 + fabs(b)))) return 0;
  }
  return 1;
}

/* ---- A plain executable ---------------------------------------------------
 * x (64, 48) -> h = relu(x @ w + b); outputs h, cumsum(h, 1) (a reference
 * step) and sum(tanh(h) * 2, 0): a parallel GEMM, a fused epilogue, a
 * reference kernel with its scratch, a reduction and intermediates in the
 * arena. */

enum { ROWS = 64, COLS = 48, HID = 40 };

static loom_graph_t *plain_graph(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  test_seed(11);
  loom_tensor_t *wt = test_rand_tensor(LOOM_F32, 2, (int64_t[]){COLS, HID}, -0.5, 0.5);
  loom_tensor_t *bt = test_rand_tensor(LOOM_F32, 1, (int64_t[]){HID}, -0.5, 0.5);
  loom_tensor_t *two_t = test_tensor(LOOM_F32, 0, NULL, (double[]){2});
  loom_value_t x, w, b, two, xw, h, c, t, t2, s;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){ROWS, COLS}, &x));
  CHECK_OK(loom_graph_param(g, "w", LOOM_F32, 2, (int64_t[]){COLS, HID}, wt, &w));
  CHECK_OK(loom_graph_param(g, "b", LOOM_F32, 1, (int64_t[]){HID}, bt, &b));
  CHECK_OK(loom_graph_constant(g, two_t, &two));
  CHECK_OK(loom_matmul(g, x, w, 0, 0, &xw));
  CHECK_OK(loom_add(g, xw, b, &h));
  CHECK_OK(loom_relu(g, h, &h));
  CHECK_OK(loom_cumsum(g, h, 1, 0, 0, &c));
  CHECK_OK(loom_tanh(g, h, &t));
  CHECK_OK(loom_mul(g, t, two, &t2));
  CHECK_OK(loom_sum(g, t2, 1, (int64_t[]){0}, 0, &s));
  CHECK_OK(loom_graph_output(g, h));
  CHECK_OK(loom_graph_output(g, c));
  CHECK_OK(loom_graph_output(g, s));
  loom_tensor_destroy(wt);
  loom_tensor_destroy(bt);
  loom_tensor_destroy(two_t);
  return g;
}

/* Inputs (odd ones strided: the transpose of a (COLS, ROWS) array, which
 * the executable copies to a staging buffer) and the interpreter's
 * outputs for each. */
typedef struct cases {
  loom_tensor_t *x[INPUTS];
  float *storage[INPUTS]; /* under strided inputs */
  loom_tensor_t *want[INPUTS][3];
} cases_t;

static void make_cases(loom_graph_t *g, cases_t *c) {
  test_seed(23);
  for (int i = 0; i < INPUTS; i++) {
    loom_tensor_t *dense = test_rand_tensor(LOOM_F32, 2, (int64_t[]){ROWS, COLS}, -1, 1);
    if (i % 2 == 0) {
      c->x[i] = dense;
    } else {
      const float *d = loom_tensor_data(dense);
      c->storage[i] = malloc(sizeof(float) * ROWS * COLS);
      for (int r = 0; r < ROWS; r++)
        for (int k = 0; k < COLS; k++) c->storage[i][k * ROWS + r] = d[r * COLS + k];
      CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, (int64_t[]){ROWS, COLS},
                                (int64_t[]){1, ROWS}, c->storage[i], &c->x[i]));
      loom_tensor_destroy(dense);
    }
    CHECK_OK(loom_interpret(g, 1, &c->x[i], 3, c->want[i]));
  }
}

static void free_cases(cases_t *c) {
  for (int i = 0; i < INPUTS; i++) {
    loom_tensor_destroy(c->x[i]);
    free(c->storage[i]);
    for (int k = 0; k < 3; k++) loom_tensor_destroy(c->want[i][k]);
  }
}

typedef struct runner {
  loom_executable_t *e;
  const cases_t *cases;
  int id;
  int failed, wrong; /* calls that failed; outputs that differ */
} runner_t;

static void *run_many(void *arg) {
  runner_t *r = arg;
  loom_tensor_t *out[3] = {NULL, NULL, NULL};
  for (int k = 0; k < 3; k++) r->failed += loom_executable_new_output(r->e, k, &out[k]) != LOOM_OK;
  for (int run = 0; run < RUNS && !r->failed; run++) {
    int i = (r->id * 3 + run) % INPUTS;
    if (loom_executable_run(r->e, 1, &r->cases->x[i], 3, out) != LOOM_OK) {
      r->failed++;
      continue;
    }
    for (int k = 0; k < 3; k++) r->wrong += !same_values(out[k], r->cases->want[i][k], 1e-4);
  }
  for (int k = 0; k < 3; k++) loom_tensor_destroy(out[k]);
  return NULL;
}

/* THREADS threads run e at once, each on its own sequence of inputs. */
static void run_on_threads(loom_executable_t *e, const cases_t *c) {
  runner_t r[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) {
    r[t] = (runner_t){.e = e, .cases = c, .id = t};
    CHECK(pthread_create(&th[t], NULL, run_many, &r[t]) == 0);
  }
  int failed = 0, wrong = 0;
  for (int t = 0; t < THREADS; t++) {
    CHECK(pthread_join(th[t], NULL) == 0);
    failed += r[t].failed;
    wrong += r[t].wrong;
  }
  if (failed || wrong) printf("  %d runs failed, %d outputs wrong\n", failed, wrong);
  CHECK(failed == 0);
  CHECK(wrong == 0);
}

/* With frozen parameters too: lanes read the prepacked weights. */
static void plain_runs_overlap(void) {
  loom_graph_t *g = plain_graph();
  cases_t c = {0};
  make_cases(g, &c);
  for (int freeze = 0; freeze <= 1; freeze++) {
    loom_compile_options_t o;
    loom_compile_options_init(&o);
    o.num_threads = 2; /* runs share the executable's pool */
    o.freeze_params = freeze;
    loom_executable_t *e;
    CHECK_OK(loom_compile(g, &o, &e));
    loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
    CHECK_OK(loom_executable_info(e, &info));
    CHECK(info.n_reference > 0 && info.arena_bytes > 0);
    run_on_threads(e, &c);
    run_on_threads(e, &c); /* again, with the lanes of the first time */
    loom_executable_destroy(e);
  }
  free_cases(&c);
  loom_graph_destroy(g);
}

/* Runs e on case i into fresh outputs; 1 when they are right. */
static int run_case(loom_executable_t *e, const cases_t *c, int i) {
  loom_tensor_t *out[3] = {NULL, NULL, NULL};
  int ok = 1;
  for (int k = 0; k < 3; k++) ok &= loom_executable_new_output(e, k, &out[k]) == LOOM_OK;
  ok = ok && loom_executable_run(e, 1, &c->x[i], 3, out) == LOOM_OK;
  for (int k = 0; k < 3; k++) {
    ok = ok && same_values(out[k], c->want[i][k], 1e-4);
    loom_tensor_destroy(out[k]);
  }
  return ok;
}

/* Runs in lanes, whatever the timing: while this thread holds the
 * executable's own storage (as an overlapping run would), its runs take a
 * lane, and give the same outputs. */
static void lane_runs(void) {
  loom_graph_t *g = plain_graph();
  cases_t c = {0};
  make_cases(g, &c);
  loom_executable_t *e;
  CHECK_OK(loom_compile(g, NULL, &e));
  rt_lane_t *held;
  CHECK_OK(rt_lanes_enter(e, &held));
  CHECK(held == NULL); /* the executable's own storage */
  /* A mark in the own arena, which lane runs must leave alone. */
  memset(e->arena, 0xa5, (size_t)e->arena_bytes);
  for (int i = 0; i < INPUTS; i++) CHECK(run_case(e, &c, i));
  int untouched = 1;
  for (int64_t b = 0; b < e->arena_bytes; b++) untouched &= ((unsigned char *)e->arena)[b] == 0xa5;
  CHECK(untouched);
  rt_lanes_leave(e, held);
  for (int i = 0; i < INPUTS; i++) CHECK(run_case(e, &c, i)); /* its own again */
  loom_executable_destroy(e);
  free_cases(&c);
  loom_graph_destroy(g);
}

/* A lane's run reports an index out of range found by generated code, and
 * its next run starts clean. */
static void lane_index_errors(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, i, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){4, 3}, &x));
  CHECK_OK(loom_graph_input(g, "i", LOOM_I64, 1, (loom_dim_t[]){2}, &i));
  CHECK_OK(loom_index_select(g, x, i, 0, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_executable_t *e;
  CHECK_OK(loom_compile(g, NULL, &e));
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  CHECK_OK(loom_executable_info(e, &info));
  CHECK(info.n_generated > 0);
  double xv[12];
  for (int k = 0; k < 12; k++) xv[k] = k;
  loom_tensor_t *xt = test_tensor(LOOM_F32, 2, (int64_t[]){4, 3}, xv);
  loom_tensor_t *good = test_tensor(LOOM_I64, 1, (int64_t[]){2}, (double[]){3, 1});
  loom_tensor_t *bad = test_tensor(LOOM_I64, 1, (int64_t[]){2}, (double[]){1, 7});
  loom_tensor_t *out;
  CHECK_OK(loom_executable_new_output(e, 0, &out));
  rt_lane_t *held;
  CHECK_OK(rt_lanes_enter(e, &held));
  CHECK_ERR(loom_executable_run(e, 2, (loom_tensor_t *[]){xt, bad}, 1, &out), LOOM_ERR_VALUE,
            "index 7");
  CHECK_OK(loom_executable_run(e, 2, (loom_tensor_t *[]){xt, good}, 1, &out));
  CHECK_TENSOR(out, ((double[]){9, 10, 11, 3, 4, 5}), 6, 0, 0);
  rt_lanes_leave(e, held);
  loom_tensor_destroy(out);
  loom_tensor_destroy(xt);
  loom_tensor_destroy(good);
  loom_tensor_destroy(bad);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* The interpreter fallback (no generated code) from several threads. */
static void interpreted_runs_overlap(void) {
  loom_graph_t *g = plain_graph();
  cases_t c = {0};
  make_cases(g, &c);
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.use_cc = 0;
  loom_executable_t *e;
  CHECK_OK(loom_compile(g, &o, &e));
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  CHECK_OK(loom_executable_info(e, &info));
  CHECK(info.interpreted);
  run_on_threads(e, &c);
  loom_executable_destroy(e);
  free_cases(&c);
  loom_graph_destroy(g);
}

/* ---- An executable that writes its parameter ------------------------------
 * y = x + counter, then counter = counter + 1: runs take turns, so the
 * counters they saw (y - x) are 0, 1, ..., n - 1, each once. */

typedef struct counting {
  loom_executable_t *e;
  int id;
  int failed;
  double seen[RUNS];
} counting_t;

static void *count_runs(void *arg) {
  counting_t *r = arg;
  loom_tensor_t *x = NULL, *y = NULL;
  double base = 1000.0 * r->id;
  r->failed += loom_tensor_from_data(LOOM_F32, 0, NULL, &(float){(float)base}, sizeof(float),
                                     &x) != LOOM_OK;
  r->failed += loom_executable_new_output(r->e, 0, &y) != LOOM_OK;
  for (int run = 0; run < RUNS && !r->failed; run++) {
    r->failed += loom_executable_run(r->e, 1, &x, 1, &y) != LOOM_OK;
    r->seen[run] = test_get(y, 0) - base;
  }
  loom_tensor_destroy(x);
  loom_tensor_destroy(y);
  return NULL;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void state_runs_take_turns(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, counter, one, y, next;
  loom_tensor_t *one_t = test_tensor(LOOM_F32, 0, NULL, (double[]){1});
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 0, NULL, &x));
  CHECK_OK(loom_graph_param(g, "counter", LOOM_F32, 0, NULL, NULL, &counter));
  CHECK_OK(loom_graph_constant(g, one_t, &one));
  CHECK_OK(loom_add(g, x, counter, &y));
  CHECK_OK(loom_add(g, counter, one, &next));
  CHECK_OK(loom_assign(g, counter, next));
  CHECK_OK(loom_graph_output(g, y));
  loom_executable_t *e;
  CHECK_OK(loom_compile(g, NULL, &e));
  counting_t r[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) {
    r[t] = (counting_t){.e = e, .id = t};
    CHECK(pthread_create(&th[t], NULL, count_runs, &r[t]) == 0);
  }
  double all[THREADS * RUNS];
  int failed = 0;
  for (int t = 0; t < THREADS; t++) {
    CHECK(pthread_join(th[t], NULL) == 0);
    failed += r[t].failed;
    memcpy(all + t * RUNS, r[t].seen, sizeof r[t].seen);
  }
  CHECK(failed == 0);
  qsort(all, THREADS * RUNS, sizeof *all, compare_doubles);
  int in_order = 1;
  for (int i = 0; i < THREADS * RUNS; i++) in_order &= all[i] == i;
  CHECK(in_order);
  loom_tensor_t *state;
  CHECK_OK(loom_graph_param_tensor(g, counter, &state));
  CHECK_NEAR(test_get(state, 0), THREADS * RUNS, 0, 0);
  loom_executable_destroy(e);
  loom_tensor_destroy(one_t);
  loom_graph_destroy(g);
}

/* ---- Runtime symbols --------------------------------------------------------
 * x (n, 8) with n read at each run: threads bind different sizes, so the
 * executable is resized between their runs. */

enum { SIZES = 3 };

typedef struct sized {
  loom_executable_t *e;
  loom_tensor_t *x[SIZES], *want[SIZES];
  int failed, wrong;
} sized_t;

static void *run_sizes(void *arg) {
  sized_t *r = arg;
  for (int run = 0; run < RUNS; run++) {
    int i = run % SIZES;
    loom_tensor_t *y = NULL;
    if (loom_executable_new_output_for(r->e, 1, &r->x[i], 0, &y) != LOOM_OK ||
        loom_executable_run(r->e, 1, &r->x[i], 1, &y) != LOOM_OK)
      r->failed++;
    else
      r->wrong += !same_values(y, r->want[i], 1e-5);
    loom_tensor_destroy(y);
  }
  return NULL;
}

static void sized_runs_take_turns(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  loom_value_t x, ex, p, y;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){n, 8}, &x));
  CHECK_OK(loom_exp(g, x, &ex));
  CHECK_OK(loom_mul(g, ex, x, &p));
  CHECK_OK(loom_sum(g, p, 1, (int64_t[]){1}, 0, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.dynamic_symbols = 1;
  loom_executable_t *e;
  CHECK_OK(loom_compile(g, &o, &e));
  sized_t r[THREADS];
  pthread_t th[THREADS];
  test_seed(31);
  for (int t = 0; t < THREADS; t++) {
    r[t] = (sized_t){.e = e};
    for (int i = 0; i < SIZES; i++) {
      r[t].x[i] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){3 + 7 * t + 2 * i, 8}, -1, 1);
      CHECK_OK(loom_interpret(g, 1, &r[t].x[i], 1, &r[t].want[i]));
    }
  }
  for (int t = 0; t < THREADS; t++) CHECK(pthread_create(&th[t], NULL, run_sizes, &r[t]) == 0);
  int failed = 0, wrong = 0;
  for (int t = 0; t < THREADS; t++) {
    CHECK(pthread_join(th[t], NULL) == 0);
    failed += r[t].failed;
    wrong += r[t].wrong;
    for (int i = 0; i < SIZES; i++) {
      loom_tensor_destroy(r[t].x[i]);
      loom_tensor_destroy(r[t].want[i]);
    }
  }
  CHECK(failed == 0);
  CHECK(wrong == 0);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* ---- One graph, interpreted and compiled on several threads ------------------ */

typedef struct graph_user {
  loom_graph_t *g;
  const cases_t *cases;
  int id;
  int compile; /* 0: loom_interpret; 1: loom_compile, then runs */
  int passes;  /* the compile's option: 0 compiles the user's graph itself */
  int failed, wrong;
} graph_user_t;

static void check_outputs(graph_user_t *u, int i, loom_tensor_t **out) {
  for (int k = 0; k < 3; k++) u->wrong += !same_values(out[k], u->cases->want[i][k], 1e-4);
}

static void *use_graph(void *arg) {
  graph_user_t *u = arg;
  loom_executable_t *e = NULL;
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.passes = u->passes;
  if (u->compile && loom_compile(u->g, &o, &e) != LOOM_OK) {
    u->failed++;
    return NULL;
  }
  for (int run = 0; run < 4; run++) {
    int i = (u->id + run) % INPUTS;
    loom_tensor_t *out[3] = {NULL, NULL, NULL};
    loom_status_t s = LOOM_OK;
    if (e) {
      for (int k = 0; k < 3 && s == LOOM_OK; k++) s = loom_executable_new_output(e, k, &out[k]);
      if (s == LOOM_OK) s = loom_executable_run(e, 1, &u->cases->x[i], 3, out);
    } else {
      s = loom_interpret(u->g, 1, &u->cases->x[i], 3, out);
    }
    if (s == LOOM_OK) check_outputs(u, i, out);
    else u->failed++;
    for (int k = 0; k < 3; k++) loom_tensor_destroy(out[k]);
  }
  loom_executable_destroy(e);
  return NULL;
}

/* Two threads interpret g while two others compile it (with and without
 * the passes), at once. */
static void one_graph_many_threads(void) {
  loom_graph_t *g = plain_graph();
  cases_t c = {0};
  make_cases(g, &c);
  graph_user_t u[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) {
    u[t] = (graph_user_t){.g = g, .cases = &c, .id = t, .compile = t % 2, .passes = t < 2};
    CHECK(pthread_create(&th[t], NULL, use_graph, &u[t]) == 0);
  }
  int failed = 0, wrong = 0;
  for (int t = 0; t < THREADS; t++) {
    CHECK(pthread_join(th[t], NULL) == 0);
    failed += u[t].failed;
    wrong += u[t].wrong;
  }
  CHECK(failed == 0);
  CHECK(wrong == 0);
  free_cases(&c);
  loom_graph_destroy(g);
}

/* ---- A trace, one thread at a time ------------------------------------------
 * y = tanh(x) * 2 + 1 recorded step by step: its truth in C. */

static void trace_program(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  loom_value_t t, two, one;
  loom_tensor_t *two_t = NULL, *one_t = NULL;
  loom_tensor_from_data(LOOM_F32, 0, NULL, &(float){2}, sizeof(float), &two_t);
  loom_tensor_from_data(LOOM_F32, 0, NULL, &(float){1}, sizeof(float), &one_t);
  y->id = -1;
  if (loom_tanh(g, x, &t) == LOOM_OK && loom_graph_constant(g, two_t, &two) == LOOM_OK &&
      loom_graph_constant(g, one_t, &one) == LOOM_OK && loom_mul(g, t, two, &t) == LOOM_OK)
    loom_add(g, t, one, y);
  loom_tensor_destroy(two_t);
  loom_tensor_destroy(one_t);
}

/* Whether y holds tanh(x) * 2 + 1 for x's elements. */
static int trace_result_right(const loom_tensor_t *x, const loom_tensor_t *y) {
  if (!y || loom_tensor_numel(y) != loom_tensor_numel(x)) return 0;
  for (int64_t i = 0; i < loom_tensor_numel(x); i++) {
    double want = tanh(test_get(x, i)) * 2 + 1;
    if (!(fabs(test_get(y, i) - want) <= 1e-5)) return 0;
  }
  return 1;
}

/* Whether a call was refused because another thread holds the step. */
static int refused(loom_status_t s) {
  return s == LOOM_ERR_INVALID && strstr(loom_last_error(), "in use by another thread");
}

typedef struct intruder {
  loom_trace_t *t;
  loom_value_t x; /* a value of the step the main thread holds */
  loom_tensor_t *mine;
  int refusals, calls;
} intruder_t;

/* Every kind of call from a thread that does not hold the step. */
static void *intrude(void *arg) {
  intruder_t *r = arg;
  loom_graph_t *g = loom_trace_graph(r->t);
  loom_value_t v;
  const loom_tensor_t *got;
  double d;
  int64_t shape[LOOM_MAX_RANK];
  int rank;
  loom_trace_stats_t stats = LOOM_TRACE_STATS_INIT;
  char *text = NULL;
  loom_cache_keys_t *keys = NULL;
  int64_t n_keys = 0;
  loom_tensor_t *c = NULL;
  loom_tensor_from_data(LOOM_F32, 0, NULL, &(float){3}, sizeof(float), &c);
  loom_status_t s[] = {
      loom_trace_input(r->t, r->mine, NULL, &v), loom_trace_param(r->t, r->mine, &v),
      loom_tanh(g, r->x, &v), loom_add(g, r->x, r->x, &v), loom_graph_constant(g, c, &v),
      loom_graph_output(g, r->x), loom_trace_read(r->t, r->x, &got),
      loom_trace_scalar(r->t, r->x, &d), loom_trace_sync(r->t), loom_trace_branch(r->t, 1),
      loom_trace_shape(r->t, r->x, &rank, shape), loom_trace_get_stats(r->t, &stats),
      loom_trace_explain(r->t, &text), loom_trace_list_keys(r->t, &keys, &n_keys),
      loom_trace_backward(r->t, r->x),
      loom_trace_step_end(r->t)};
  r->calls = (int)(sizeof s / sizeof s[0]);
  for (int i = 0; i < r->calls; i++) r->refusals += refused(s[i]);
  loom_free(text);
  loom_cache_keys_destroy(keys);
  loom_tensor_destroy(c);
  return NULL;
}

/* One full step on the calling thread; 1 when it ran and was right. */
static int trace_step(loom_trace_t *t, loom_tensor_t *x) {
  loom_value_t xv, y;
  const loom_tensor_t *got = NULL;
  if (loom_trace_input(t, x, NULL, &xv) != LOOM_OK) return 0;
  trace_program(loom_trace_graph(t), xv, &y);
  int ok = y.id >= 0 && loom_trace_read(t, y, &got) == LOOM_OK && trace_result_right(x, got);
  return loom_trace_step_end(t) == LOOM_OK && ok;
}

static void *step_once(void *arg) {
  intruder_t *r = arg;
  r->calls = trace_step(r->t, r->mine);
  return NULL;
}

/* While the main thread's step is open, another thread's calls are all
 * refused and change nothing: the step finishes with the right values.
 * After it ends, the other thread runs a step of its own. */
static void trace_refuses_other_threads(void) {
  loom_trace_t *t;
  CHECK_OK(loom_trace_create(NULL, &t));
  test_seed(41);
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 1, (int64_t[]){6}, -2, 2);
  loom_tensor_t *other = test_rand_tensor(LOOM_F32, 1, (int64_t[]){6}, -2, 2);
  loom_value_t xv, y;
  CHECK_OK(loom_trace_input(t, x, NULL, &xv));
  intruder_t r = {.t = t, .x = xv, .mine = other};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, intrude, &r) == 0);
  CHECK(pthread_join(th, NULL) == 0);
  CHECK(r.calls > 0 && r.refusals == r.calls);
  loom_trace_stats_t stats = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &stats));
  CHECK(stats.recorded_ops == 0); /* the refused builders recorded nothing */
  trace_program(loom_trace_graph(t), xv, &y);
  const loom_tensor_t *got = NULL;
  CHECK_OK(loom_trace_read(t, y, &got));
  CHECK(trace_result_right(x, got));
  CHECK_OK(loom_trace_step_end(t));
  r.calls = 0;
  CHECK(pthread_create(&th, NULL, step_once, &r) == 0);
  CHECK(pthread_join(th, NULL) == 0);
  CHECK(r.calls == 1);
  CHECK(trace_step(t, x)); /* and the trace comes back */
  loom_tensor_destroy(x);
  loom_tensor_destroy(other);
  loom_trace_destroy(t);
}

/* A worker that begins a step, records y and ends (or, with release,
 * gives the trace up and stays alive): the main thread goes on with that
 * step and reads y, where the trace stayed the worker's for good. */
typedef struct handoff {
  loom_trace_t *t;
  loom_tensor_t *x;
  loom_value_t y;
  bool release;
  _Atomic int released;  /* the worker has recorded y and given the trace up */
  pthread_mutex_t lock;  /* with release: held until the main thread has read */
} handoff_t;

static void *record_and_leave(void *arg) {
  handoff_t *h = arg;
  loom_value_t xv;
  h->y.id = -1;
  if (loom_trace_input(h->t, h->x, NULL, &xv) == LOOM_OK)
    trace_program(loom_trace_graph(h->t), xv, &h->y);
  if (h->release && loom_trace_release(h->t) == LOOM_OK) {
    atomic_store(&h->released, 1);
    pthread_mutex_lock(&h->lock); /* alive while the main thread reads */
    pthread_mutex_unlock(&h->lock);
  }
  return NULL;
}

static void trace_handed_over(void) {
  loom_trace_t *t;
  CHECK_OK(loom_trace_create(NULL, &t));
  test_seed(47);
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 1, (int64_t[]){5}, -2, 2);
  for (int release = 0; release < 2; release++) {
    handoff_t h = {.t = t, .x = x, .release = release, .lock = PTHREAD_MUTEX_INITIALIZER};
    pthread_mutex_lock(&h.lock);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, record_and_leave, &h) == 0);
    const loom_tensor_t *got = NULL;
    loom_status_t s = LOOM_ERR_INVALID;
    if (release) { /* the worker lives on: its release alone hands the step over */
      while (!atomic_load(&h.released)) sched_yield();
      s = loom_trace_read(t, h.y, &got);
    }
    pthread_mutex_unlock(&h.lock);
    CHECK(pthread_join(th, NULL) == 0);
    if (!release) s = loom_trace_read(t, h.y, &got);
    CHECK_OK(s);
    CHECK(trace_result_right(x, got));
    CHECK_OK(loom_trace_step_end(t));
  }
  CHECK(trace_step(t, x));
  CHECK(loom_trace_release(NULL) == LOOM_ERR_INVALID);
  CHECK_OK(loom_trace_release(t)); /* not held: nothing to give up */
  loom_tensor_destroy(x);
  loom_trace_destroy(t);
}

/* Two threads step one trace as fast as they can: each step is refused
 * (retried later) or runs whole and right. */
typedef struct racer {
  loom_trace_t *t;
  loom_tensor_t *x;
  int steps, refusals, wrong;
} racer_t;

static void *race_steps(void *arg) {
  racer_t *r = arg;
  while (r->steps < RUNS) {
    loom_value_t xv, y;
    loom_status_t s = loom_trace_input(r->t, r->x, NULL, &xv);
    if (s != LOOM_OK) {
      if (refused(s)) r->refusals++;
      else r->wrong++;
      sched_yield();
      continue;
    }
    /* The step is this thread's until step_end: nothing below is refused. */
    trace_program(loom_trace_graph(r->t), xv, &y);
    const loom_tensor_t *got = NULL;
    int ok = y.id >= 0 && loom_trace_read(r->t, y, &got) == LOOM_OK &&
             trace_result_right(r->x, got);
    ok &= loom_trace_step_end(r->t) == LOOM_OK;
    r->wrong += !ok;
    r->steps++;
  }
  return NULL;
}

static void trace_two_threads_take_turns(void) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.num_threads = 1;
  loom_trace_t *t;
  CHECK_OK(loom_trace_create(&o, &t));
  test_seed(43);
  racer_t r[2];
  pthread_t th[2];
  for (int i = 0; i < 2; i++) {
    r[i] = (racer_t){.t = t, .x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){3, 5 + i}, -2, 2)};
    CHECK(pthread_create(&th[i], NULL, race_steps, &r[i]) == 0);
  }
  for (int i = 0; i < 2; i++) {
    CHECK(pthread_join(th[i], NULL) == 0);
    CHECK(r[i].steps == RUNS);
    CHECK(r[i].wrong == 0);
    loom_tensor_destroy(r[i].x);
  }
  printf("  %d and %d steps refused while the other thread held the trace\n", r[0].refusals,
         r[1].refusals);
  loom_trace_stats_t stats = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &stats));
  CHECK(stats.segments == 2 * RUNS);
  loom_trace_destroy(t);
}

int main(void) {
  TEST_RUN(plain_runs_overlap);
  TEST_RUN(lane_runs);
  TEST_RUN(lane_index_errors);
  TEST_RUN(interpreted_runs_overlap);
  TEST_RUN(state_runs_take_turns);
  TEST_RUN(sized_runs_take_turns);
  TEST_RUN(one_graph_many_threads);
  TEST_RUN(trace_refuses_other_threads);
  TEST_RUN(trace_two_threads_take_turns);
  TEST_RUN(trace_handed_over);
  return test_summary();
}
