/* Retained gradients of values that are not parameters
 * (loom_trace_retain_grad): the whole gradient of y = w * x, whatever
 * segments read it (the one that computes it, later ones, both), against
 * closed forms, interpreted and compiled, over several steps (replays);
 * a value no backward reaches has none; each backward gives its own; and
 * the refusals: a value without gradient, one read inside its own
 * segment before it was retained, an unretained value. */
#include <string.h>

#include "harness.h"
#include "loom/trace.h"

enum { N = 5, STEPS = 3 };

typedef struct fixture {
  loom_tensor_t *w, *x;
  loom_trace_t *t;
  loom_graph_t *g;
  loom_value_t wv, xv, y; /* y = w * x */
} fixture_t;

static void begin(fixture_t *f, int compile) {
  int64_t n = N;
  f->w = test_rand_tensor(LOOM_F64, 1, &n, -1, 1);
  f->x = test_rand_tensor(LOOM_F64, 1, &n, -1, 1);
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.compile = compile;
  o.spec_workers = 0;
  CHECK_OK(loom_trace_create(&o, &f->t));
  f->g = loom_trace_graph(f->t);
}

static void enter(fixture_t *f) {
  CHECK_OK(loom_trace_param(f->t, f->w, &f->wv));
  CHECK_OK(loom_trace_input(f->t, f->x, NULL, &f->xv));
  CHECK_OK(loom_mul(f->g, f->wv, f->xv, &f->y));
}

static void end(fixture_t *f) {
  loom_trace_destroy(f->t);
  loom_tensor_destroy(f->w);
  loom_tensor_destroy(f->x);
}

static double y_at(const fixture_t *f, int i) { return test_get(f->w, i) * test_get(f->x, i); }

/* The retained gradient of f->y equals a * y + b, elementwise. */
static void check_kept(fixture_t *f, double a, double b) {
  const loom_tensor_t *g = NULL;
  CHECK_OK(loom_trace_retained_grad(f->t, f->y, &g));
  CHECK(g != NULL);
  if (!g) return;
  CHECK(loom_tensor_numel(g) == N);
  for (int i = 0; i < N; i++) CHECK_NEAR(test_get(g, i), a * y_at(f, i) + b, 1e-12, 1e-12);
}

static loom_value_t sum(fixture_t *f, loom_value_t v) {
  loom_value_t s;
  CHECK_OK(loom_sum(f->g, v, 0, NULL, 0, &s));
  return s;
}

/* Retained before any read: loss = sum(y * y), dL/dy = 2y. */
static void check_before_reads(int compile) {
  fixture_t f;
  begin(&f, compile);
  for (int step = 0; step < STEPS; step++) {
    enter(&f);
    CHECK_OK(loom_trace_retain_grad(f.t, f.y));
    CHECK_OK(loom_trace_retain_grad(f.t, f.y)); /* twice: the same */
    loom_value_t sq;
    CHECK_OK(loom_mul(f.g, f.y, f.y, &sq));
    CHECK_OK(loom_trace_backward(f.t, sum(&f, sq)));
    check_kept(&f, 2, 0);
    CHECK_OK(loom_trace_step_end(f.t));
  }
  end(&f);
}

/* Read inside its segment before it was retained (the segment still
 * pending): loss = sum(y * y) + sum(y), dL/dy = 2y + 1, through the
 * segment's own reads. */
static void check_read_then_retained(int compile) {
  fixture_t f;
  begin(&f, compile);
  for (int step = 0; step < STEPS; step++) {
    enter(&f);
    loom_value_t sq, l;
    CHECK_OK(loom_mul(f.g, f.y, f.y, &sq));
    CHECK_OK(loom_trace_retain_grad(f.t, f.y));
    CHECK_OK(loom_add(f.g, sum(&f, sq), sum(&f, f.y), &l));
    CHECK_OK(loom_trace_backward(f.t, l));
    check_kept(&f, 2, 1);
    CHECK_OK(loom_trace_step_end(f.t));
  }
  end(&f);
}

/* Read on both sides of a cut: a = 2y (read back to the host, a cut), b
 * = a * y in the next segment; loss = sum(b) = sum(2 y^2), dL/dy = 4y:
 * 2y through a's segment, 2y through b's. */
static void check_across_a_cut(int compile) {
  fixture_t f;
  begin(&f, compile);
  for (int step = 0; step < STEPS; step++) {
    enter(&f);
    CHECK_OK(loom_trace_retain_grad(f.t, f.y));
    loom_value_t two, a, b;
    CHECK_OK(loom_full(f.g, 0, NULL, 2.0, LOOM_F64, &two));
    CHECK_OK(loom_mul(f.g, f.y, two, &a));
    const loom_tensor_t *real = NULL;
    CHECK_OK(loom_trace_read(f.t, a, &real));
    CHECK_OK(loom_mul(f.g, a, f.y, &b));
    CHECK_OK(loom_trace_backward(f.t, sum(&f, b)));
    check_kept(&f, 4, 0);
    CHECK_OK(loom_trace_step_end(f.t));
  }
  end(&f);
}

/* Made real by a read before any other read, then retained: its reads
 * are all later segments'; loss = sum(3 y^2), dL/dy = 6y. */
static void check_real_then_retained(int compile) {
  fixture_t f;
  begin(&f, compile);
  for (int step = 0; step < STEPS; step++) {
    enter(&f);
    const loom_tensor_t *real = NULL;
    CHECK_OK(loom_trace_read(f.t, f.y, &real));
    CHECK_OK(loom_trace_retain_grad(f.t, f.y));
    loom_value_t three, sq, l;
    CHECK_OK(loom_full(f.g, 0, NULL, 3.0, LOOM_F64, &three));
    CHECK_OK(loom_mul(f.g, f.y, f.y, &sq));
    CHECK_OK(loom_mul(f.g, sq, three, &l));
    CHECK_OK(loom_trace_backward(f.t, sum(&f, l)));
    check_kept(&f, 6, 0);
    CHECK_OK(loom_trace_step_end(f.t));
  }
  end(&f);
}

/* Two backwards: each gives its own (the second's loss is sum(y), its
 * gradient ones); one that does not reach y gives none. */
static void check_each_backward(int compile) {
  fixture_t f;
  begin(&f, compile);
  enter(&f);
  CHECK_OK(loom_trace_retain_grad(f.t, f.y));
  loom_value_t sq, ww;
  CHECK_OK(loom_mul(f.g, f.y, f.y, &sq));
  CHECK_OK(loom_trace_backward(f.t, sum(&f, sq)));
  check_kept(&f, 2, 0);
  CHECK_OK(loom_trace_backward(f.t, sum(&f, f.y)));
  check_kept(&f, 0, 1);
  CHECK_OK(loom_mul(f.g, f.wv, f.wv, &ww));
  CHECK_OK(loom_trace_backward(f.t, sum(&f, ww)));
  const loom_tensor_t *g = (const loom_tensor_t *)1;
  CHECK_OK(loom_trace_retained_grad(f.t, f.y, &g));
  CHECK(g == NULL);
  CHECK_OK(loom_trace_step_end(f.t));
  end(&f);
}

static void test_refusals(void) {
  fixture_t f;
  begin(&f, 0);
  enter(&f);
  loom_value_t xx, sq, l;
  CHECK_OK(loom_mul(f.g, f.xv, f.xv, &xx)); /* no parameter in it */
  CHECK_ERR(loom_trace_retain_grad(f.t, xx), LOOM_ERR_INVALID, "no gradient flows");
  CHECK_ERR(loom_trace_retain_grad(f.t, (loom_value_t){99999}), LOOM_ERR_INVALID,
            "not a value");
  CHECK_OK(loom_trace_retain_grad(f.t, f.wv)); /* a parameter: nothing to do */
  const loom_tensor_t *g = NULL;
  CHECK_ERR(loom_trace_retained_grad(f.t, f.y, &g), LOOM_ERR_INVALID, "not a retained");
  /* y read by y * y, then the cut ran them without keeping y */
  CHECK_OK(loom_mul(f.g, f.y, f.y, &sq));
  const loom_tensor_t *real = NULL;
  CHECK_OK(loom_trace_read(f.t, sq, &real));
  CHECK_ERR(loom_trace_retain_grad(f.t, f.y), LOOM_ERR_INVALID, "before it was retained");
  /* z read by z + z, then both made real by a read of z */
  loom_value_t z, zz;
  CHECK_OK(loom_mul(f.g, f.wv, f.wv, &z));
  CHECK_OK(loom_add(f.g, z, z, &zz));
  CHECK_OK(loom_trace_read(f.t, z, &real));
  CHECK_ERR(loom_trace_retain_grad(f.t, z), LOOM_ERR_INVALID, "before it was retained");
  CHECK_OK(loom_add(f.g, sum(&f, sq), sum(&f, zz), &l));
  CHECK_OK(loom_trace_backward(f.t, l)); /* the step goes on */
  CHECK_OK(loom_trace_step_end(f.t));
  CHECK_ERR(loom_trace_retain_grad(NULL, f.y), LOOM_ERR_INVALID, "");
  end(&f);
}

static void test_interpreted(void) {
  check_before_reads(0);
  check_read_then_retained(0);
  check_across_a_cut(0);
  check_real_then_retained(0);
  check_each_backward(0);
}

static void test_compiled(void) {
  check_before_reads(1);
  check_read_then_retained(1);
  check_across_a_cut(1);
  check_real_then_retained(1);
  check_each_backward(1);
}

int main(void) {
  TEST_RUN(test_interpreted);
  TEST_RUN(test_compiled);
  TEST_RUN(test_refusals);
  return test_summary();
}
