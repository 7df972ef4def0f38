/* A program outside the source tree, built against an installed Loom (by
 * scripts/check_install.sh with pkg-config and with find_package): it
 * builds y = relu(x * 2 - 3) twice, once with the builders of ops.h and
 * once op by op by name (loom_graph_add_op), runs both compiled, and
 * compares with values computed by hand. Exits non-zero on a mismatch. */
#include <stdio.h>
#include <string.h>

#include <loom/loom.h>

#define N 4

static int fail(const char *what) {
  fprintf(stderr, "consumer: %s: %s\n", what, loom_last_error());
  return 1;
}

/* y = relu(x * two - three); by_name: through loom_graph_add_op. */
static loom_status_t build(loom_graph_t *g, int by_name) {
  loom_dim_t dims[1] = {N};
  loom_value_t x, two, three, t, u, y;
  loom_status_t s = loom_graph_input(g, "x", LOOM_F32, 1, dims, &x);
  if (s == LOOM_OK) s = loom_full(g, 0, NULL, 2.0, LOOM_F32, &two);
  if (s == LOOM_OK) s = loom_full(g, 0, NULL, 3.0, LOOM_F32, &three);
  if (s != LOOM_OK) return s;
  if (by_name) {
    loom_value_t mul_in[2] = {x, two}, sub_in[2];
    if ((s = loom_graph_add_op(g, "mul", 2, mul_in, 0, NULL, 1, &t, NULL))) return s;
    sub_in[0] = t, sub_in[1] = three;
    if ((s = loom_graph_add_op(g, "sub", 2, sub_in, 0, NULL, 1, &u, NULL))) return s;
    if ((s = loom_graph_add_op(g, "relu", 1, &u, 0, NULL, 1, &y, NULL))) return s;
  } else {
    if ((s = loom_mul(g, x, two, &t)) || (s = loom_sub(g, t, three, &u)) ||
        (s = loom_relu(g, u, &y)))
      return s;
  }
  return loom_graph_output(g, y);
}

static int run(int by_name) {
  const float x[N] = {-1, 1, 2, 3.5f}, want[N] = {0, 0, 1, 4};
  const int64_t shape[1] = {N};
  loom_graph_t *g = NULL;
  loom_executable_t *e = NULL;
  loom_tensor_t *in = NULL, *out = NULL;
  int bad = 0;
  if (loom_graph_create(&g) || build(g, by_name)) return fail("build");
  if (loom_compile(g, NULL, &e) ||
      loom_tensor_from_data(LOOM_F32, 1, shape, x, sizeof x, &in) ||
      loom_tensor_create(LOOM_F32, 1, shape, &out) || loom_executable_run(e, 1, &in, 1, &out))
    bad = fail("run");
  for (int i = 0; !bad && i < N; i++) {
    const float *y = loom_tensor_data(out);
    if (y[i] != want[i]) {
      fprintf(stderr, "consumer: y[%d] = %g, want %g\n", i, y[i], want[i]);
      bad = 1;
    }
  }
  loom_tensor_destroy(in);
  loom_tensor_destroy(out);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
  return bad;
}

int main(void) {
  /* A host callback's way of failing, public since it is in loom.h. */
  if (loom_set_error(LOOM_ERR_VALUE, "host says %d", 7) != LOOM_ERR_VALUE ||
      !strstr(loom_last_error(), "host says 7"))
    return fail("loom_set_error");
  if (run(0) || run(1)) return 1;
  printf("consumer: ok\n");
  return 0;
}
