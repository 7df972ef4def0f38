/* Parameters updated in place (src/compiler/inplace.c): the group that
 * computes a parameter's new value writes it into the parameter's storage
 * when nothing reads the parameter later, and the assign's copy goes;
 * when something does read it later (a product scheduled after the
 * update, the parameter as a graph output), the copy stays. A reader
 * that does not depend on the update runs before it (the scheduler holds
 * the update back), so that the copy goes. Either way
 * every read sees the value from before the run, checked against sums
 * computed here over three runs. */
#include <math.h>
#include <stdlib.h>

#include "harness.h"
#include "loom/ops.h"

enum { RUNS = 3 };

typedef struct fixture {
  loom_graph_t *g;
  loom_value_t p, x, y;
  double *host_p; /* the parameter as the host tracks it */
} fixture_t;

static loom_value_t scalar(loom_graph_t *g, double v) {
  return test_constant(g, LOOM_F32, 0, NULL, &v);
}

static void fixture_init(fixture_t *f, int64_t rows, int64_t cols) {
  CHECK_OK(loom_graph_create(&f->g));
  test_seed(11);
  loom_tensor_t *init = test_rand_tensor(LOOM_F32, 2, (int64_t[]){rows, cols}, -1, 1);
  CHECK_OK(loom_graph_param(f->g, "p", LOOM_F32, 2, (int64_t[]){rows, cols}, init, &f->p));
  f->host_p = malloc(sizeof(double) * (size_t)(rows * cols));
  for (int64_t i = 0; i < rows * cols; i++) f->host_p[i] = test_get(init, i);
  loom_tensor_destroy(init);
}

static void fixture_free(fixture_t *f) {
  loom_graph_destroy(f->g);
  free(f->host_p);
}

/* The graph with output out, compiled; checks its count of copies. */
static loom_executable_t *compile(loom_graph_t *g, loom_value_t out, int copies) {
  loom_executable_t *e = NULL;
  CHECK_OK(loom_graph_output(g, out));
  CHECK_OK(loom_compile(g, NULL, &e));
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  CHECK_OK(loom_executable_info(e, &info));
  CHECK(info.n_copies == copies);
  return e;
}

static void check_param(const fixture_t *f) {
  loom_tensor_t *t;
  CHECK_OK(loom_graph_param_tensor(f->g, f->p, &t));
  for (int64_t i = 0; i < loom_tensor_numel(t); i++)
    CHECK_NEAR(test_get(t, i), f->host_p[i], 1e-5, 1e-5);
}

/* p <- 0.5 p + x, out = 2 new p: one elementwise group writes p (a
 * reduction over new p would take the update as its prologue, and a
 * reduction group may read its prologue's inputs more than once: not in
 * place). */
static void elementwise_update(void) {
  fixture_t f;
  fixture_init(&f, 6, 5);
  loom_value_t half, np, out;
  CHECK_OK(loom_graph_input(f.g, "x", LOOM_F32, 2, (loom_dim_t[]){6, 5}, &f.x));
  half = scalar(f.g, 0.5);
  CHECK_OK(loom_mul(f.g, f.p, half, &np));
  CHECK_OK(loom_add(f.g, np, f.x, &np));
  CHECK_OK(loom_assign(f.g, f.p, np));
  CHECK_OK(loom_mul(f.g, np, scalar(f.g, 2.0), &out));
  loom_executable_t *e = compile(f.g, out, 0);
  for (int run = 0; run < RUNS; run++) {
    loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){6, 5}, -1, 1), *y;
    CHECK_OK(loom_executable_new_output(e, 0, &y));
    CHECK_OK(loom_executable_run(e, 1, &x, 1, &y));
    for (int i = 0; i < 30; i++) {
      f.host_p[i] = 0.5 * f.host_p[i] + test_get(x, i);
      CHECK_NEAR(test_get(y, i), 2 * f.host_p[i], 1e-5, 1e-5);
    }
    check_param(&f);
    loom_tensor_destroy(x);
    loom_tensor_destroy(y);
  }
  loom_executable_destroy(e);
  fixture_free(&f);
}

/* p <- p - 0.1 x^T dy, inputs x (5 x 4) and dy (5 x 3) on p (4 x 3): a
 * weight gradient with SGD in its epilogue; returns the new p. */
static loom_value_t sgd_update(fixture_t *f, loom_value_t *dy) {
  loom_value_t prod, scaled, np;
  CHECK_OK(loom_graph_input(f->g, "x", LOOM_F32, 2, (loom_dim_t[]){5, 4}, &f->x));
  CHECK_OK(loom_graph_input(f->g, "dy", LOOM_F32, 2, (loom_dim_t[]){5, 3}, dy));
  CHECK_OK(loom_matmul(f->g, f->x, *dy, 1, 0, &prod));
  CHECK_OK(loom_mul(f->g, prod, scalar(f->g, 0.1), &scaled));
  CHECK_OK(loom_sub(f->g, f->p, scaled, &np));
  CHECK_OK(loom_assign(f->g, f->p, np));
  return np;
}

/* The host's side of sgd_update on inputs in; returns the sum of new p. */
static double host_sgd_step(fixture_t *f, loom_tensor_t *const *in) {
  double sum = 0;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) {
      double g = 0;
      for (int r = 0; r < 5; r++) g += test_get(in[0], r * 4 + i) * test_get(in[1], r * 3 + j);
      sum += f->host_p[i * 3 + j] -= 0.1 * g;
    }
  return sum;
}

/* One run of e on fresh inputs x and dy (in); returns the output. */
static loom_tensor_t *run_sgd(loom_executable_t *e, loom_tensor_t **in) {
  in[0] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){5, 4}, -1, 1);
  in[1] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){5, 3}, -1, 1);
  loom_tensor_t *y;
  CHECK_OK(loom_executable_new_output(e, 0, &y));
  CHECK_OK(loom_executable_run(e, 2, in, 1, &y));
  return y;
}

/* p <- p - 0.1 x^T dy: the update is the epilogue of the product, which
 * keeps a buffer of its own; out = sum(new p). */
static void contraction_update(void) {
  fixture_t f;
  fixture_init(&f, 4, 3);
  loom_value_t dy, out, np = sgd_update(&f, &dy);
  CHECK_OK(loom_sum(f.g, np, 2, (int64_t[]){0, 1}, 0, &out));
  loom_executable_t *e = compile(f.g, out, 0);
  for (int run = 0; run < RUNS; run++) {
    loom_tensor_t *in[2], *y = run_sgd(e, in);
    CHECK_NEAR(test_get(y, 0), host_sgd_step(&f, in), 1e-4, 1e-5);
    check_param(&f);
    for (int i = 0; i < 2; i++) loom_tensor_destroy(in[i]);
    loom_tensor_destroy(y);
  }
  loom_executable_destroy(e);
  fixture_free(&f);
}

/* p <- 0.9 p, out = (x * sum(new p)) @ p: the product reads p after the
 * update (it needs the sum), so p keeps its old value until the end. */
static void later_reader_keeps_copy(void) {
  fixture_t f;
  fixture_init(&f, 4, 3);
  loom_value_t np, s, xs, out;
  CHECK_OK(loom_graph_input(f.g, "x", LOOM_F32, 2, (loom_dim_t[]){2, 4}, &f.x));
  CHECK_OK(loom_mul(f.g, f.p, scalar(f.g, 0.9), &np));
  CHECK_OK(loom_assign(f.g, f.p, np));
  CHECK_OK(loom_sum(f.g, np, 2, (int64_t[]){0, 1}, 0, &s));
  CHECK_OK(loom_mul(f.g, f.x, s, &xs));
  CHECK_OK(loom_matmul(f.g, xs, f.p, 0, 0, &out));
  loom_executable_t *e = compile(f.g, out, 1);
  for (int run = 0; run < RUNS; run++) {
    loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){2, 4}, -1, 1), *y;
    CHECK_OK(loom_executable_new_output(e, 0, &y));
    CHECK_OK(loom_executable_run(e, 1, &x, 1, &y));
    double sum = 0;
    for (int i = 0; i < 12; i++) sum += 0.9 * f.host_p[i];
    for (int r = 0; r < 2; r++)
      for (int j = 0; j < 3; j++) {
        double want = 0;
        for (int k = 0; k < 4; k++) want += test_get(x, r * 4 + k) * sum * f.host_p[k * 3 + j];
        CHECK_NEAR(test_get(y, r * 3 + j), want, 1e-4, 1e-4);
      }
    for (int i = 0; i < 12; i++) f.host_p[i] *= 0.9;
    check_param(&f);
    loom_tensor_destroy(x);
    loom_tensor_destroy(y);
  }
  loom_executable_destroy(e);
  fixture_free(&f);
}

/* p <- p - 0.1 x^T dy (a weight gradient with SGD in its epilogue), out
 * = tanh(dy) @ p^T (reading the old p): built update first,
 * but the product does not need the update, so it runs before it and p
 * is written in place. */
static void independent_reader_runs_first(void) {
  fixture_t f;
  fixture_init(&f, 4, 3);
  loom_value_t dy, t, out;
  sgd_update(&f, &dy);
  CHECK_OK(loom_tanh(f.g, dy, &t));
  CHECK_OK(loom_matmul(f.g, t, f.p, 0, 1, &out));
  loom_executable_t *e = compile(f.g, out, 0);
  for (int run = 0; run < RUNS; run++) {
    loom_tensor_t *in[2], *y = run_sgd(e, in);
    for (int r = 0; r < 5; r++)
      for (int i = 0; i < 4; i++) {
        double want = 0;
        for (int j = 0; j < 3; j++) want += tanh(test_get(in[1], r * 3 + j)) * f.host_p[i * 3 + j];
        CHECK_NEAR(test_get(y, r * 4 + i), want, 1e-5, 1e-5);
      }
    host_sgd_step(&f, in);
    check_param(&f);
    for (int i = 0; i < 2; i++) loom_tensor_destroy(in[i]);
    loom_tensor_destroy(y);
  }
  loom_executable_destroy(e);
  fixture_free(&f);
}

/* The parameter itself is an output: it reads its value from before the
 * run, so the update cannot land before the output's copy. */
static void param_output_keeps_copy(void) {
  fixture_t f;
  fixture_init(&f, 3, 2);
  loom_value_t np;
  CHECK_OK(loom_add(f.g, f.p, scalar(f.g, 1.0), &np));
  CHECK_OK(loom_assign(f.g, f.p, np));
  loom_executable_t *e = compile(f.g, f.p, 2); /* the output, then the assign */
  for (int run = 0; run < RUNS; run++) {
    loom_tensor_t *y;
    CHECK_OK(loom_executable_new_output(e, 0, &y));
    CHECK_OK(loom_executable_run(e, 0, NULL, 1, &y));
    for (int i = 0; i < 6; i++) CHECK_NEAR(test_get(y, i), f.host_p[i], 1e-6, 1e-6);
    for (int i = 0; i < 6; i++) f.host_p[i] += 1.0;
    check_param(&f);
    loom_tensor_destroy(y);
  }
  loom_executable_destroy(e);
  fixture_free(&f);
}

int main(void) {
  TEST_RUN(elementwise_update);
  TEST_RUN(contraction_update);
  TEST_RUN(later_reader_keeps_copy);
  TEST_RUN(independent_reader_runs_first);
  TEST_RUN(param_output_keeps_copy);
  return test_summary();
}
