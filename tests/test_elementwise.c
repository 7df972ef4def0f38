#include "harness.h"

static void relu_f32(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, y;
  int64_t shape[] = {4};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, shape, &x));
  CHECK_OK(loom_relu(g, x, &y));
  CHECK_OK(loom_graph_output(g, y));
  double xv[] = {-1, 0, 2, -3};
  loom_tensor_t *in = test_tensor(LOOM_F32, 1, shape, xv);
  loom_tensor_t *out = test_run1(g, 1, &in);
  double want[] = {0, 0, 2, 0};
  CHECK_TENSOR(out, want, 4, 0, 0);
  loom_tensor_destroy(in);
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(relu_f32);
  return test_summary();
}
