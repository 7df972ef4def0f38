/* The step's small tensors, kept for the next step's (src/trace/
 * recycle.c): outputs of the same bytes in another shape (4 x 6, then
 * 6 x 4, then 24) take them and hold their own values, each value read
 * in a step stays as read until the step ends, and steps whose sizes
 * all change (no kept tensor fits) run as well. Values are checked
 * against plain C. */
#include <math.h>

#include "harness.h"
#include "loom/loom.h"
#include "loom/ops.h"
#include "loom/trace.h"

/* A trace with the default options, as a program would make it. */
static loom_trace_t *make_trace(void) {
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(NULL, &t));
  return t;
}

/* One step: x of shape (rank, shape) filled from step, four tanh in a
 * row, each read; checked against plain C. */
static void tanh_step(loom_trace_t *t, int step, int rank, const int64_t *shape) {
  loom_tensor_t *x;
  CHECK_OK(loom_tensor_create(LOOM_F32, rank, shape, &x));
  int64_t n = loom_tensor_numel(x);
  float *px = x ? loom_tensor_data(x) : NULL;
  for (int64_t i = 0; px && i < n; i++) px[i] = (float)(0.1 * (double)i - step);
  loom_graph_t *g = loom_trace_graph(t);
  loom_value_t v;
  CHECK_OK(loom_trace_input(t, x, NULL, &v));
  const loom_tensor_t *reads[4] = {NULL};
  for (int k = 0; k < 4; k++) {
    CHECK_OK(loom_tanh(g, v, &v));
    CHECK_OK(loom_trace_read(t, v, &reads[k]));
    CHECK(reads[k] && loom_tensor_rank(reads[k]) == rank &&
          loom_tensor_dim(reads[k], 0) == shape[0]);
  }
  for (int64_t i = 0; px && i < n; i++) {
    double want = px[i];
    for (int k = 0; k < 4; k++) {
      want = tanh(want);
      const float *p = reads[k] ? loom_tensor_data(reads[k]) : NULL;
      if (p) CHECK_NEAR(p[i], want, 1e-6, 1e-6);
    }
  }
  CHECK_OK(loom_trace_step_end(t));
  loom_tensor_destroy(x);
}

static void test_same_bytes_other_shapes(void) {
  loom_trace_t *t = make_trace();
  const int64_t shapes[3][2] = {{4, 6}, {6, 4}, {24, 1}};
  for (int step = 0; step < 9; step++)
    tanh_step(t, step, step % 3 == 2 ? 1 : 2, shapes[step % 3]);
  loom_trace_destroy(t);
}

/* Sizes that change every step (each step's tensors unlike the last's),
 * then a size seen before: right values throughout. */
static void test_changing_sizes(void) {
  loom_trace_t *t = make_trace();
  for (int step = 0; step < 12; step++) {
    int64_t shape[1] = {step < 10 ? 3 + 5 * step : 8};
    tanh_step(t, step, 1, shape);
  }
  loom_trace_destroy(t);
}

int main(void) {
  TEST_RUN(test_same_bytes_other_shapes);
  TEST_RUN(test_changing_sizes);
  return test_summary();
}
