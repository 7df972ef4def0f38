/* Loom from several threads at once. Runs of one executable, each checked
 * against the interpreter's result for its own input (runs that only read
 * their parameters may overlap; runs that write them, or whose sizes are
 * read at run time, take turns: each sees the state the one before left);
 * loom_interpret and loom_compile of one graph; and a trace, which one
 * thread records a step into at a time (another thread's call is refused
 * with LOOM_ERR_INVALID until the step ends). The harness's counters are
 * not thread-safe: threads count their own misses, and the main thread
 * checks the counts. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "loom/trace.h"

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

static void plain_runs_overlap(void) {
  loom_graph_t *g = plain_graph();
  cases_t c = {0};
  make_cases(g, &c);
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.num_threads = 2; /* runs share the executable's pool */
  loom_executable_t *e;
  CHECK_OK(loom_compile(g, &o, &e));
  loom_executable_info_t info;
  CHECK_OK(loom_executable_info(e, &info));
  CHECK(info.n_reference > 0 && info.arena_bytes > 0);
  run_on_threads(e, &c);
  run_on_threads(e, &c); /* again, with the arenas of the first time */
  loom_executable_destroy(e);
  free_cases(&c);
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
  loom_executable_info_t info;
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
  int failed, wrong;
} graph_user_t;

static void check_outputs(graph_user_t *u, int i, loom_tensor_t **out) {
  for (int k = 0; k < 3; k++) u->wrong += !same_values(out[k], u->cases->want[i][k], 1e-4);
}

static void *use_graph(void *arg) {
  graph_user_t *u = arg;
  loom_executable_t *e = NULL;
  if (u->compile && loom_compile(u->g, NULL, &e) != LOOM_OK) {
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

/* Two threads interpret g while two others compile it, at once. */
static void one_graph_many_threads(void) {
  loom_graph_t *g = plain_graph();
  cases_t c = {0};
  make_cases(g, &c);
  graph_user_t u[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) {
    u[t] = (graph_user_t){.g = g, .cases = &c, .id = t, .compile = t % 2};
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

int main(void) {
  TEST_RUN(plain_runs_overlap);
  TEST_RUN(interpreted_runs_overlap);
  TEST_RUN(state_runs_take_turns);
  TEST_RUN(sized_runs_take_turns);
  TEST_RUN(one_graph_many_threads);
  return test_summary();
}
