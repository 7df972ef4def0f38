/* Runtime symbols (loom_compile_options_t.dynamic_symbols): one compiled
 * executable runs every size of its symbolic dims, reading them from the
 * inputs. Each graph runs at several sizes (growing and shrinking) and is
 * compared with the interpreter at each; the compile counter shows that
 * none of those runs compiled again. */
#include <math.h>

#include "core/alloc.h"
#include "harness.h"
#include "loom/ops.h"
#include "passes/memplan.h"

static const int64_t sizes[] = {3, 17, 5, 64, 1, 17};
#define N_SIZES ((int)(sizeof sizes / sizeof *sizes))

static loom_compile_options_t dynamic_options(void) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.dynamic_symbols = 1;
  return o;
}

static loom_value_t param(loom_graph_t *g, const char *name, int rank, const int64_t *shape) {
  loom_tensor_t *t = test_rand_tensor(LOOM_F32, rank, shape, -1, 1);
  loom_value_t v;
  CHECK_OK(loom_graph_param(g, name, LOOM_F32, rank, shape, t, &v));
  loom_tensor_destroy(t);
  return v;
}

/* Same shape and values within a float tolerance. */
static void check_same(const loom_tensor_t *got, const loom_tensor_t *want) {
  int gr = loom_tensor_rank(got), wr = loom_tensor_rank(want);
  CHECK(gr == wr);
  if (gr != wr) return;
  for (int d = 0; d < gr; d++) CHECK(loom_tensor_dim(got, d) == loom_tensor_dim(want, d));
  int64_t n = loom_tensor_numel(want);
  for (int64_t i = 0; i < n && i < loom_tensor_numel(got); i++)
    CHECK_NEAR(test_get(got, i), test_get(want, i), 1e-4, 1e-4);
}

/* Runs e and the interpreter on the same inputs; compares every output. */
static void check_run(loom_graph_t *g, loom_executable_t *e, int n_in, loom_tensor_t **in,
                      int n_out) {
  loom_tensor_t *want[8] = {0}, *got[8] = {0};
  CHECK_OK(loom_interpret(g, n_in, in, n_out, want));
  for (int i = 0; i < n_out; i++)
    CHECK_OK(loom_executable_new_output_for(e, n_in, in, i, &got[i]));
  CHECK_OK(loom_executable_run(e, n_in, in, n_out, got));
  for (int i = 0; i < n_out; i++) {
    if (got[i] && want[i]) check_same(got[i], want[i]);
    loom_tensor_destroy(got[i]);
    loom_tensor_destroy(want[i]);
  }
}

/* Makes the inputs for size n; returns how many. */
typedef int (*make_inputs_fn)(int64_t n, loom_tensor_t **in);

/* Compiles g once and runs it at every size; reports the split between
 * generated and reference steps into info. */
static void run_sizes(const char *name, loom_graph_t *g, const loom_compile_options_t *o,
                      make_inputs_fn make, int n_out, loom_executable_info_t *info) {
  loom_stats_t before = LOOM_STATS_INIT, after = LOOM_STATS_INIT;
  loom_stats_get(&before);
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, o, &e));
  if (!e) return;
  for (int k = 0; k < N_SIZES; k++) {
    loom_tensor_t *in[4] = {0};
    int n_in = make(sizes[k], in);
    check_run(g, e, n_in, in, n_out);
    for (int i = 0; i < n_in; i++) loom_tensor_destroy(in[i]);
  }
  loom_stats_get(&after);
  CHECK(after.compiles == before.compiles + 1);
  CHECK_OK(loom_executable_info(e, info));
  printf("  %s: %d groups, %d generated, %d reference%s\n", name, info->n_groups,
         info->n_generated, info->n_reference, info->interpreted ? " (interpreted)" : "");
  loom_executable_destroy(e);
}

/* ---- A CNN with a symbolic batch ------------------------------------------
 * conv2d -> relu -> max_pool2d -> strided conv2d -> avg_pool2d over a
 * runtime batch, and the loss's gradients for both weights and the input
 * (conv2d's weight gradient, conv_transpose2d): the convolutions are
 * generated code that reads the batch at run time (their epilogues
 * fused), the pools run the CPU's eager kernels behind reference steps. */

static int cnn_inputs(int64_t n, loom_tensor_t **in) {
  in[0] = test_rand_tensor(LOOM_F32, 4, (int64_t[]){n, 3, 12, 10}, -1, 1);
  return 1;
}

static void test_cnn_symbolic_batch(void) {
  test_seed(9);
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  loom_value_t x, c1, r1, p1, c2, p2, sq, loss, grads[3];
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, (loom_dim_t[]){n, 3, 12, 10}, &x));
  loom_value_t w1 = param(g, "w1", 4, (int64_t[]){8, 3, 3, 3});
  loom_value_t b1 = param(g, "b1", 1, (int64_t[]){8});
  loom_value_t w2 = param(g, "w2", 4, (int64_t[]){6, 8, 3, 3});
  loom_conv_params_t same = {.pads = {1, 1, 1, 1}}, down = {.stride = {2, 2}, .pads = {1, 1, 1, 1}};
  CHECK_OK(loom_conv2d(g, x, w1, 1, b1, &same, &c1));
  CHECK_OK(loom_relu(g, c1, &r1));
  CHECK_OK(loom_max_pool2d(g, r1, &(loom_pool_params_t){.kernel = {2, 2}}, &p1));
  CHECK_OK(loom_conv2d(g, p1, w2, 0, p1, &down, &c2));
  CHECK_OK(loom_avg_pool2d(g, c2, &(loom_pool_params_t){.kernel = {2, 2}, .stride = {1, 1},
                                                         .pads = {1, 1, 0, 0}}, &p2));
  CHECK_OK(loom_mul(g, p2, p2, &sq));
  CHECK_OK(loom_sum(g, sq, 0, NULL, 0, &loss));
  CHECK_OK(loom_grad(g, loss, 3, (loom_value_t[]){w1, w2, x}, grads));
  CHECK_OK(loom_graph_output(g, p2));
  for (int i = 0; i < 3; i++) CHECK_OK(loom_graph_output(g, grads[i]));
  loom_compile_options_t o = dynamic_options();
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  run_sizes("cnn and its gradients", g, &o, cnn_inputs, 4, &info);
  CHECK(info.n_generated >= 5); /* two convolutions, two weight gradients, an input gradient */
  CHECK(info.n_reference >= 2); /* the pools */
  CHECK(!info.interpreted);
  loom_graph_destroy(g);
}

/* ---- Windows larger than a symbolic input --------------------------------
 * conv2d (kernel 3) and max_pool2d (kernel 3) over x (1, 2, h, h): at
 * h = 6 both run; at h = 2 the output's height would be 0, which fails
 * the run naming the op (compiled and interpreted), not an empty result
 * (the pool's kernel checks its input; the convolution's output is). */

static void test_window_larger_than_symbolic_input(void) {
  test_seed(12);
  for (int pool = 0; pool < 2; pool++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_dim_t h;
    loom_value_t x, y;
    CHECK_OK(loom_dim_symbol(g, "h", &h));
    CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, (loom_dim_t[]){1, 2, h, h}, &x));
    if (pool) {
      CHECK_OK(loom_max_pool2d(g, x, &(loom_pool_params_t){.kernel = {3, 3}, .stride = {1, 1}},
                               &y));
    } else {
      loom_value_t w = param(g, "w", 4, (int64_t[]){4, 2, 3, 3});
      CHECK_OK(loom_conv2d(g, x, w, 0, w, &(loom_conv_params_t){0}, &y));
    }
    CHECK_OK(loom_graph_output(g, y));
    loom_compile_options_t o = dynamic_options();
    loom_executable_t *e = NULL;
    CHECK_OK(loom_compile(g, &o, &e));
    for (int64_t size = 6; e && size >= 2; size -= 4) {
      loom_tensor_t *in = test_rand_tensor(LOOM_F32, 4, (int64_t[]){1, 2, size, size}, -1, 1);
      loom_tensor_t *out = NULL, *ref = NULL;
      int64_t o_size = size - 2; /* 0: what the failing run would make */
      CHECK_OK(loom_tensor_create(LOOM_F32, 4, (int64_t[]){1, pool ? 2 : 4, o_size, o_size},
                                  &out));
      if (size == 6) {
        check_run(g, e, 1, &in, 1);
      } else {
        const char *why = pool ? "max_pool2d: input dim 2 is 2" : "too small for the kernel";
        CHECK_ERR(loom_executable_run(e, 1, &in, 1, &out), LOOM_ERR_SHAPE, why);
        CHECK_ERR(loom_interpret(g, 1, &in, 1, &ref), LOOM_ERR_SHAPE, why);
      }
      loom_tensor_destroy(in);
      loom_tensor_destroy(out);
      loom_tensor_destroy(ref);
    }
    loom_executable_destroy(e);
    loom_graph_destroy(g);
  }
}

/* ---- Slices of a symbolic axis --------------------------------------------
 * x[:, 1:], x[:, :-1], x[:, ::2], x[:, -1:] and x[:, ::-1] (as exporters
 * write it: end -INT64_MAX) of x (4, n) keep n symbolic (n - 1, n - 1,
 * (n + 1) / 2, 1, n) and match the interpreter at every size; x[:, 2:5]
 * takes 3 elements, so an axis shorter than 5 fails to bind, naming the
 * slice, instead of reading past the axis. */

static void slice_axis1(loom_graph_t *g, loom_value_t x, int64_t start, int64_t end,
                        int64_t step) {
  loom_value_t y;
  CHECK_OK(loom_slice(g, x, 1, &start, &end, (int64_t[]){1}, &step, &y));
  CHECK_OK(loom_graph_output(g, y));
}

static int slice_inputs(int64_t n, loom_tensor_t **in) {
  in[0] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){4, n}, -1, 1);
  return 1;
}

/* relu(x[2:5]) of x (n, 6): generated code reads the slice as a view of
 * x; a batch shorter than 5 fails to bind. */
static void too_short_lead(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  loom_value_t x, s, y;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){n, 6}, &x));
  CHECK_OK(loom_slice(g, x, 1, (int64_t[]){2}, (int64_t[]){5}, (int64_t[]){0}, NULL, &s));
  CHECK_OK(loom_relu(g, s, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_compile_options_t o = dynamic_options();
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  for (int64_t len = 9; e && len >= 3; len -= 6) {
    loom_tensor_t *in = test_rand_tensor(LOOM_F32, 2, (int64_t[]){len, 6}, -1, 1), *out = NULL;
    CHECK_OK(loom_tensor_create(LOOM_F32, 2, (int64_t[]){3, 6}, &out));
    if (len == 9) check_run(g, e, 1, &in, 1);
    else CHECK_ERR(loom_executable_run(e, 1, &in, 1, &out), LOOM_ERR_BINDING, "slice node");
    loom_tensor_destroy(in);
    loom_tensor_destroy(out);
  }
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

static void test_slices_of_a_symbolic_axis(void) {
  test_seed(10);
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  loom_value_t x;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){4, n}, &x));
  slice_axis1(g, x, 1, INT64_MAX, 1);
  slice_axis1(g, x, 0, -1, 1);
  slice_axis1(g, x, 0, INT64_MAX, 2);
  slice_axis1(g, x, -1, INT64_MAX, 1);
  slice_axis1(g, x, -1, -INT64_MAX, -1);
  loom_compile_options_t o = dynamic_options();
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  run_sizes("slices", g, &o, slice_inputs, 5, &info);
  loom_graph_destroy(g);

  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){4, n}, &x));
  slice_axis1(g, x, 2, 5, 1);
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  for (int64_t len = 8; e && len >= 4; len -= 4) {
    loom_tensor_t *in, *out = NULL;
    slice_inputs(len, &in);
    CHECK_OK(loom_tensor_create(LOOM_F32, 2, (int64_t[]){4, 3}, &out));
    if (len == 8) check_run(g, e, 1, &in, 1);
    else CHECK_ERR(loom_executable_run(e, 1, &in, 1, &out), LOOM_ERR_BINDING, "slice node");
    loom_tensor_destroy(in);
    loom_tensor_destroy(out);
  }
  loom_executable_destroy(e);
  loom_graph_destroy(g);
  too_short_lead();
}

/* ---- An MLP with a symbolic batch ---------------------------------------- */

/* x (n, 16) -> relu(x @ w1 + b1) @ w2 + b2; y and the parameters out. */
static loom_graph_t *mlp_build(loom_value_t *y_out, loom_value_t *params) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  loom_value_t x, h, hb, r, y, yb;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){n, 16}, &x));
  loom_value_t w1 = param(g, "w1", 2, (int64_t[]){16, 32});
  loom_value_t b1 = param(g, "b1", 1, (int64_t[]){32});
  loom_value_t w2 = param(g, "w2", 2, (int64_t[]){32, 8});
  loom_value_t b2 = param(g, "b2", 1, (int64_t[]){8});
  CHECK_OK(loom_matmul(g, x, w1, 0, 0, &h));
  CHECK_OK(loom_add(g, h, b1, &hb));
  CHECK_OK(loom_relu(g, hb, &r));
  CHECK_OK(loom_matmul(g, r, w2, 0, 0, &y));
  CHECK_OK(loom_add(g, y, b2, &yb));
  *y_out = yb;
  if (params) {
    params[0] = w1, params[1] = b1, params[2] = w2, params[3] = b2;
  }
  return g;
}

static loom_graph_t *mlp(void) {
  loom_value_t y;
  loom_graph_t *g = mlp_build(&y, NULL);
  CHECK_OK(loom_graph_output(g, y));
  return g;
}

static int mlp_inputs(int64_t n, loom_tensor_t **in) {
  in[0] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){n, 16}, -1, 1);
  return 1;
}

static void test_mlp_symbolic_batch(void) {
  test_seed(1);
  loom_graph_t *g = mlp();
  loom_compile_options_t o = dynamic_options();
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  run_sizes("mlp", g, &o, mlp_inputs, 1, &info);
  CHECK(info.n_generated == 2); /* two matmuls with their epilogues */
  CHECK(info.n_reference == 0);
  loom_graph_destroy(g);
}

/* Without a C compiler the same executable runs every size too. */
static void test_mlp_reference_only(void) {
  test_seed(2);
  loom_graph_t *g = mlp();
  loom_compile_options_t o = dynamic_options();
  o.use_cc = 0;
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  run_sizes("mlp, no C compiler", g, &o, mlp_inputs, 1, &info);
  CHECK(info.n_generated == 0);
  loom_graph_destroy(g);
}

/* A training step's gradients over a symbolic batch: the backward's
 * matmuls fold over the batch (K = n); sums over the batch and the loss's
 * mean over everything run as reference steps. */
static loom_graph_t *mlp_grads(void) {
  loom_value_t y, wrt[4];
  loom_graph_t *g = mlp_build(&y, wrt);
  loom_dim_t n;
  loom_value_t t, d, d2, loss, grads[4];
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_graph_input(g, "target", LOOM_F32, 2, (loom_dim_t[]){n, 8}, &t));
  CHECK_OK(loom_sub(g, y, t, &d));
  CHECK_OK(loom_mul(g, d, d, &d2));
  CHECK_OK(loom_mean(g, d2, 2, (int64_t[]){0, 1}, 0, &loss));
  CHECK_OK(loom_grad(g, loss, 4, wrt, grads));
  CHECK_OK(loom_graph_output(g, loss));
  for (int i = 0; i < 4; i++) CHECK_OK(loom_graph_output(g, grads[i]));
  return g;
}

static int grads_inputs(int64_t n, loom_tensor_t **in) {
  in[0] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){n, 16}, -1, 1);
  in[1] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){n, 8}, -1, 1);
  return 2;
}

static void test_mlp_gradients(void) {
  test_seed(14);
  loom_graph_t *g = mlp_grads();
  loom_compile_options_t o = dynamic_options();
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  run_sizes("mlp loss and gradients", g, &o, grads_inputs, 5, &info);
  CHECK(info.n_generated > info.n_reference);
  CHECK(!info.interpreted);
  loom_graph_destroy(g);
}

/* ---- Rows: elementwise, softmax, layer_norm -------------------------------- */

static loom_graph_t *rows_graph(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  loom_value_t x, t, two, t2, sm, ln, ex, s;
  CHECK_OK(loom_dim_symbol(g, "rows", &n));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){n, 40}, &x));
  loom_value_t scale = param(g, "scale", 1, (int64_t[]){40});
  loom_value_t bias = param(g, "bias", 1, (int64_t[]){40});
  loom_tensor_t *two_t = test_tensor(LOOM_F32, 0, NULL, (double[]){2});
  CHECK_OK(loom_graph_constant(g, two_t, &two));
  loom_tensor_destroy(two_t);
  CHECK_OK(loom_tanh(g, x, &t));
  CHECK_OK(loom_mul(g, t, two, &t2));
  CHECK_OK(loom_softmax(g, t2, -1, &sm));
  CHECK_OK(loom_layer_norm(g, sm, 1, scale, 1, bias, 1, 1e-5, &ln));
  CHECK_OK(loom_exp(g, x, &ex));
  CHECK_OK(loom_sum(g, ex, 1, (int64_t[]){1}, 0, &s));
  CHECK_OK(loom_graph_output(g, ln));
  CHECK_OK(loom_graph_output(g, s));
  return g;
}

static int rows_inputs(int64_t n, loom_tensor_t **in) {
  in[0] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){n, 40}, -2, 2);
  return 1;
}

static void test_rows_softmax_layer_norm(void) {
  test_seed(3);
  loom_graph_t *g = rows_graph();
  loom_compile_options_t o = dynamic_options();
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  run_sizes("softmax + layer_norm rows", g, &o, rows_inputs, 2, &info);
  CHECK(info.n_generated > 0);
  CHECK(info.n_reference == 0);
  loom_graph_destroy(g);
}

/* ---- Matmul with a symbolic M, K or batch ------------------------------------- */

static loom_graph_t *matmul_graph(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t m;
  loom_value_t x, d, z, y, dw, zy, r;
  CHECK_OK(loom_dim_symbol(g, "m", &m));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){m, 24}, &x));
  CHECK_OK(loom_graph_input(g, "d", LOOM_F32, 2, (loom_dim_t[]){m, 40}, &d));
  CHECK_OK(loom_graph_input(g, "z", LOOM_F32, 3, (loom_dim_t[]){m, 3, 24}, &z));
  loom_value_t w = param(g, "w", 2, (int64_t[]){24, 40});
  CHECK_OK(loom_matmul(g, x, w, 0, 0, &y));  /* M = m */
  CHECK_OK(loom_add(g, y, d, &r));           /* a residual in the epilogue */
  CHECK_OK(loom_matmul(g, x, d, 1, 0, &dw)); /* K = m: x^T d */
  CHECK_OK(loom_matmul(g, z, w, 0, 0, &zy)); /* batch = m */
  CHECK_OK(loom_graph_output(g, r));
  CHECK_OK(loom_graph_output(g, dw));
  CHECK_OK(loom_graph_output(g, zy));
  return g;
}

static int matmul_inputs(int64_t m, loom_tensor_t **in) {
  in[0] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){m, 24}, -1, 1);
  in[1] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){m, 40}, -1, 1);
  in[2] = test_rand_tensor(LOOM_F32, 3, (int64_t[]){m, 3, 24}, -1, 1);
  return 3;
}

static void test_matmul_symbolic_m(void) {
  test_seed(4);
  loom_graph_t *g = matmul_graph();
  loom_compile_options_t o = dynamic_options();
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  run_sizes("matmul M, K and batch", g, &o, matmul_inputs, 3, &info);
  CHECK(info.n_generated == 3);
  CHECK(info.n_reference == 0);
  loom_graph_destroy(g);
}

/* ---- Layout moves over a symbolic leading dim ------------------------------- */

static loom_graph_t *layout_graph(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n, n12;
  loom_value_t x, t, sl, cat, flat, b, be;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_mul(g, n, 12, &n12));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 3, (loom_dim_t[]){n, 3, 4}, &x));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F32, 2, (loom_dim_t[]){n, 1}, &b));
  CHECK_OK(loom_transpose(g, x, (int64_t[]){0, 2, 1}, &t));
  CHECK_OK(loom_slice(g, t, 1, (int64_t[]){1}, (int64_t[]){3}, (int64_t[]){2}, NULL, &sl));
  CHECK_OK(loom_concat(g, 2, (loom_value_t[]){x, x}, 1, &cat));
  CHECK_OK(loom_reshape(g, x, 1, (loom_dim_t[]){n12}, &flat));
  CHECK_OK(loom_expand(g, b, 2, (loom_dim_t[]){n, 5}, &be));
  CHECK_OK(loom_graph_output(g, sl));
  CHECK_OK(loom_graph_output(g, cat));
  CHECK_OK(loom_graph_output(g, flat));
  CHECK_OK(loom_graph_output(g, be));
  return g;
}

static int layout_inputs(int64_t n, loom_tensor_t **in) {
  in[0] = test_rand_tensor(LOOM_F32, 3, (int64_t[]){n, 3, 4}, -1, 1);
  in[1] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){n, 1}, -1, 1);
  return 2;
}

static void test_layout_symbolic_lead(void) {
  test_seed(5);
  loom_graph_t *g = layout_graph();
  loom_compile_options_t o = dynamic_options();
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  run_sizes("layout moves", g, &o, layout_inputs, 4, &info);
  CHECK(info.n_generated >= 4);
  CHECK(info.n_reference == 0);
  loom_graph_destroy(g);
}

/* ---- Folds over the whole of a symbolic lead: one row of runtime length ------------
 * (a loss summed over a trace's items: the count of labels that are not
 * ignored, a masked sum, a mean over every element). */

static loom_graph_t *whole_graph(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  loom_value_t x, lab, ignore, valid, count_f, count, twice, mean, e, masked, msum, pos;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){n, 3}, &x));
  CHECK_OK(loom_graph_input(g, "labels", LOOM_I64, 1, (loom_dim_t[]){n}, &lab));
  loom_tensor_t *ignore_t = test_tensor(LOOM_I64, 0, NULL, (double[]){-1});
  CHECK_OK(loom_graph_constant(g, ignore_t, &ignore));
  loom_tensor_destroy(ignore_t);
  CHECK_OK(loom_ne(g, lab, ignore, &valid));
  CHECK_OK(loom_cast(g, valid, LOOM_F32, &count_f));
  CHECK_OK(loom_sum(g, count_f, 1, (int64_t[]){0}, 0, &count));
  CHECK_OK(loom_add(g, x, x, &twice));
  CHECK_OK(loom_mean(g, twice, 2, (int64_t[]){0, 1}, 0, &mean)); /* count n * 3 */
  CHECK_OK(loom_exp(g, x, &e));
  CHECK_OK(loom_relu(g, e, &pos));
  CHECK_OK(loom_sum(g, pos, 2, (int64_t[]){0, 1}, 0, &msum));
  CHECK_OK(loom_where(g, valid, count_f, count_f, &masked));
  CHECK_OK(loom_graph_output(g, count));
  CHECK_OK(loom_graph_output(g, mean));
  CHECK_OK(loom_graph_output(g, msum));
  CHECK_OK(loom_graph_output(g, masked));
  return g;
}

static int whole_inputs(int64_t n, loom_tensor_t **in) {
  in[0] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){n, 3}, -1, 1);
  in[1] = test_rand_tensor(LOOM_I64, 1, (int64_t[]){n}, -1, 3);
  return 2;
}

static void test_whole_symbolic_folds(void) {
  test_seed(8);
  loom_graph_t *g = whole_graph();
  loom_compile_options_t o = dynamic_options();
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  run_sizes("folds over a whole symbolic dim", g, &o, whole_inputs, 4, &info);
  CHECK(info.n_generated >= 2);
  CHECK(info.n_reference == 0);
  loom_graph_destroy(g);
}

/* ---- A symbolic dim that is not leading: reference steps -------------------------- */

static loom_graph_t *inner_graph(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  loom_value_t x, e, one, y, s, sm, t;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){4, n}, &x));
  loom_tensor_t *one_t = test_tensor(LOOM_F32, 0, NULL, (double[]){1});
  CHECK_OK(loom_graph_constant(g, one_t, &one));
  loom_tensor_destroy(one_t);
  CHECK_OK(loom_exp(g, x, &e));
  CHECK_OK(loom_add(g, e, one, &y));
  CHECK_OK(loom_sum(g, y, 1, (int64_t[]){1}, 0, &s));  /* folds over n */
  CHECK_OK(loom_softmax(g, x, 1, &sm));                /* a fused group, split */
  CHECK_OK(loom_transpose(g, x, NULL, &t));            /* n moves to the front */
  CHECK_OK(loom_graph_output(g, s));
  CHECK_OK(loom_graph_output(g, sm));
  CHECK_OK(loom_graph_output(g, t));
  return g;
}

static int inner_inputs(int64_t n, loom_tensor_t **in) {
  in[0] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){4, n}, -1, 1);
  return 1;
}

static void test_symbolic_inner_dim_falls_back(void) {
  test_seed(6);
  loom_graph_t *g = inner_graph();
  loom_compile_options_t o = dynamic_options();
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  run_sizes("symbolic inner dim", g, &o, inner_inputs, 3, &info);
  CHECK(info.n_reference > 0);
  CHECK(!info.interpreted);
  loom_graph_destroy(g);
}

/* ---- softmax, log_softmax and logsumexp over a symbolic axis --------------
 * Their decompositions subtract the axis's maximum; a run that finds the
 * axis empty gives empty results and logsumexp's -inf (PyTorch's), as the
 * interpreter does, where the maximum alone would have failed. */

static void test_softmax_over_an_axis_found_empty(void) {
  test_seed(9);
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t m;
  loom_value_t x, y[3];
  CHECK_OK(loom_dim_symbol(g, "m", &m));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){2, m}, &x));
  CHECK_OK(loom_softmax(g, x, -1, &y[0]));
  CHECK_OK(loom_log_softmax(g, x, 1, &y[1]));
  CHECK_OK(loom_logsumexp(g, x, 1, (int64_t[]){1}, 0, &y[2]));
  for (int i = 0; i < 3; i++) CHECK_OK(loom_graph_output(g, y[i]));
  loom_compile_options_t o = dynamic_options();
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  const int64_t widths[] = {3, 0, 5, 0, 1};
  for (int k = 0; k < 5; k++) {
    loom_tensor_t *in = test_rand_tensor(LOOM_F32, 2, (int64_t[]){2, widths[k]}, -3, 3);
    if (widths[k]) {
      check_run(g, e, 1, &in, 3);
    } else {
      loom_tensor_t *got[3] = {0};
      for (int i = 0; i < 3; i++) CHECK_OK(loom_executable_new_output_for(e, 1, &in, i, &got[i]));
      CHECK_OK(loom_executable_run(e, 1, &in, 3, got));
      CHECK(loom_tensor_numel(got[0]) == 0 && loom_tensor_numel(got[1]) == 0);
      CHECK(loom_tensor_numel(got[2]) == 2);
      for (int64_t i = 0; i < loom_tensor_numel(got[2]); i++)
        CHECK(isinf(test_get(got[2], i)) && test_get(got[2], i) < 0);
      for (int i = 0; i < 3; i++) loom_tensor_destroy(got[i]);
    }
    loom_tensor_destroy(in);
  }
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* ---- Dims n*4 and n+1 read through their expressions ----------------------
 * (the interpreter, the truth here, reads n from z's dim). */

static loom_graph_t *expr_graph(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n, n4, n1;
  loom_value_t x, y, z, s, y2, two;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_mul(g, n, 4, &n4));
  CHECK_OK(loom_dim_add(g, n, 1, &n1));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){n4, 8}, &x));
  CHECK_OK(loom_graph_input(g, "y", LOOM_F32, 2, (loom_dim_t[]){n1, 3}, &y));
  CHECK_OK(loom_graph_input(g, "z", LOOM_F32, 1, (loom_dim_t[]){n}, &z));
  loom_tensor_t *two_t = test_tensor(LOOM_F32, 0, NULL, (double[]){2});
  CHECK_OK(loom_graph_constant(g, two_t, &two));
  loom_tensor_destroy(two_t);
  CHECK_OK(loom_sum(g, x, 1, (int64_t[]){1}, 0, &s));
  CHECK_OK(loom_mul(g, y, two, &y2));
  CHECK_OK(loom_graph_output(g, s));
  CHECK_OK(loom_graph_output(g, y2));
  return g;
}

static int expr_inputs(int64_t n, loom_tensor_t **in) {
  in[0] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){n * 4, 8}, -1, 1);
  in[1] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){n + 1, 3}, -1, 1);
  in[2] = test_rand_tensor(LOOM_F32, 1, (int64_t[]){n}, -1, 1);
  return 3;
}

static void test_expression_dims(void) {
  test_seed(7);
  loom_graph_t *g = expr_graph();
  loom_compile_options_t o = dynamic_options();
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  run_sizes("dims n*4 and n+1", g, &o, expr_inputs, 2, &info);
  CHECK(info.n_reference == 0);
  loom_graph_destroy(g);
}

/* ---- Bad bindings ------------------------------------------------------------ */

static void test_bad_bindings(void) {
  test_seed(8);
  loom_graph_t *g = expr_graph();
  loom_compile_options_t o = dynamic_options();
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  if (!e) return;
  loom_tensor_t *out[2] = {0};
  /* Before any run, the outputs' sizes are not known. */
  CHECK_ERR(loom_executable_new_output(e, 0, &out[0]), LOOM_ERR_INVALID, "runtime symbols");
  loom_tensor_t *x10 = test_rand_tensor(LOOM_F32, 2, (int64_t[]){10, 8}, -1, 1);
  loom_tensor_t *x12 = test_rand_tensor(LOOM_F32, 2, (int64_t[]){12, 8}, -1, 1);
  loom_tensor_t *x12b = test_rand_tensor(LOOM_F32, 2, (int64_t[]){12, 9}, -1, 1);
  loom_tensor_t *y4 = test_rand_tensor(LOOM_F32, 2, (int64_t[]){4, 3}, -1, 1);
  loom_tensor_t *y5 = test_rand_tensor(LOOM_F32, 2, (int64_t[]){5, 3}, -1, 1);
  loom_tensor_t *z3 = test_rand_tensor(LOOM_F32, 1, (int64_t[]){3}, -1, 1);
  loom_tensor_t *in[3] = {x12, y4, z3};
  CHECK_OK(loom_executable_new_output_for(e, 3, in, 0, &out[0]));
  CHECK_OK(loom_executable_new_output_for(e, 3, in, 1, &out[1]));
  CHECK_OK(loom_executable_run(e, 3, in, 2, out));
  /* 10 is not n*4 for any n. */
  in[0] = x10;
  CHECK_ERR(loom_executable_run(e, 3, in, 2, out), LOOM_ERR_BINDING, "input 0 dim 0");
  /* x says n = 3, y (n+1 = 5) says n = 4. */
  in[0] = x12;
  in[1] = y5;
  CHECK_ERR(loom_executable_run(e, 3, in, 2, out), LOOM_ERR_BINDING, "input 1 dim 0");
  CHECK_ERR(loom_executable_new_output_for(e, 3, in, 0, &out[0]), LOOM_ERR_BINDING,
            "input 1 dim 0");
  /* A constant dim that differs. */
  in[0] = x12b;
  in[1] = y4;
  CHECK_ERR(loom_executable_run(e, 3, in, 2, out), LOOM_ERR_BINDING, "input 0");
  loom_tensor_t *o_bad = NULL;
  CHECK_ERR(loom_executable_new_output_for(e, 3, in, 0, &o_bad), LOOM_ERR_BINDING,
            "input 0 dim 1 is 9");
  /* and another dtype */
  loom_tensor_t *xi = test_rand_tensor(LOOM_I64, 2, (int64_t[]){12, 8}, -1, 1);
  in[0] = xi;
  CHECK_ERR(loom_executable_new_output_for(e, 3, in, 0, &o_bad), LOOM_ERR_BINDING, "i64");
  loom_tensor_destroy(xi);
  /* An output whose size is not the one the inputs give. */
  loom_tensor_t *big = test_rand_tensor(LOOM_F32, 1, (int64_t[]){16}, -1, 1);
  loom_tensor_t *bad_out[2] = {big, out[1]};
  in[0] = x12;
  CHECK_ERR(loom_executable_run(e, 3, in, 2, bad_out), LOOM_ERR_BINDING, "output 0");
  /* Still good after the errors. */
  CHECK_OK(loom_executable_run(e, 3, in, 2, out));
  loom_tensor_t *want[2];
  CHECK_OK(loom_interpret(g, 3, in, 2, want));
  check_same(out[0], want[0]);
  check_same(out[1], want[1]);
  /* loom_executable_new_output now has the last run's shapes. */
  loom_tensor_t *o0;
  CHECK_OK(loom_executable_new_output(e, 0, &o0));
  CHECK(loom_tensor_numel(o0) == 12);
  loom_tensor_destroy(o0);
  for (int i = 0; i < 2; i++) {
    loom_tensor_destroy(want[i]);
    loom_tensor_destroy(out[i]);
  }
  loom_tensor_destroy(big);
  loom_tensor_destroy(x10);
  loom_tensor_destroy(x12);
  loom_tensor_destroy(x12b);
  loom_tensor_destroy(y4);
  loom_tensor_destroy(y5);
  loom_tensor_destroy(z3);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* ---- Memory: the arena grows only for larger sizes ------------------------------ */

static void test_replans_allocate_only_to_grow(void) {
  test_seed(9);
  loom_graph_t *g = mlp();
  loom_compile_options_t o = dynamic_options();
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  if (!e) return;
  const int64_t order[] = {200, 3, 17, 200, 1, 300};
  int64_t arena[6];
  for (int k = 0; k < 6; k++) {
    loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){order[k], 16}, -1, 1);
    loom_tensor_t *out, *want;
    CHECK_OK(loom_executable_new_output_for(e, 1, &x, 0, &out));
    core_alloc_fail_after(-1);
    CHECK_OK(loom_executable_run(e, 1, &x, 1, &out));
    /* After the largest size, no run allocates. */
    if (k > 0 && k < 5) CHECK(core_alloc_count() == 0);
    loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
    CHECK_OK(loom_executable_info(e, &info));
    arena[k] = info.arena_bytes;
    CHECK_OK(loom_interpret(g, 1, &x, 1, &want));
    check_same(out, want);
    loom_tensor_destroy(out);
    loom_tensor_destroy(want);
    loom_tensor_destroy(x);
  }
  /* Smaller sizes fit the plan made for the largest: it stays (runs
   * whose sizes vary every time do not replan once it has seen their
   * largest). */
  CHECK(arena[1] == arena[0]);
  CHECK(arena[3] == arena[0]);
  CHECK(arena[4] == arena[0]);
  CHECK(arena[5] > arena[0]); /* a larger size plans again */
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* A failed allocation while growing leaves the executable usable: the
 * next run plans again. */
static void test_failed_growth_recovers(void) {
  test_seed(12);
  loom_graph_t *g = mlp();
  loom_compile_options_t o = dynamic_options();
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  if (!e) return;
  loom_tensor_t *small = test_rand_tensor(LOOM_F32, 2, (int64_t[]){3, 16}, -1, 1);
  loom_tensor_t *big = test_rand_tensor(LOOM_F32, 2, (int64_t[]){300, 16}, -1, 1);
  check_run(g, e, 1, &small, 1);
  loom_tensor_t *out;
  CHECK_OK(loom_executable_new_output_for(e, 1, &big, 0, &out));
  core_alloc_fail_after(0);
  CHECK_ERR(loom_executable_run(e, 1, &big, 1, &out), LOOM_ERR_NOMEM, "arena");
  core_alloc_fail_after(-1);
  loom_tensor_destroy(out);
  check_run(g, e, 1, &big, 1);
  check_run(g, e, 1, &small, 1);
  /* A strided input's staging buffer grows when first needed. */
  loom_tensor_t *view;
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, (int64_t[]){150, 16}, (int64_t[]){32, 1},
                            loom_tensor_data(big), &view));
  CHECK_OK(loom_executable_new_output_for(e, 1, &view, 0, &out));
  core_alloc_fail_after(0);
  CHECK_ERR(loom_executable_run(e, 1, &view, 1, &out), LOOM_ERR_NOMEM, "strided input 0");
  core_alloc_fail_after(-1);
  loom_tensor_destroy(out);
  check_run(g, e, 1, &view, 1);
  loom_tensor_destroy(view);
  loom_tensor_destroy(small);
  loom_tensor_destroy(big);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* mem_replan gives what a fresh mem_plan_build gives for the same
 * requests, and allocates nothing. */
static void test_replan_matches_fresh_plan(void) {
  test_seed(13);
  enum { N = 40 };
  mem_request_t req[N];
  for (int i = 0; i < N; i++) {
    int32_t first = (int32_t)test_rand_int(0, 30);
    req[i] = (mem_request_t){.first = first, .last = first + (int32_t)test_rand_int(0, 8),
                             .inplace_of = -1};
  }
  mem_replanner_t *r = NULL;
  CHECK_OK(mem_replanner_create(N, &r));
  mem_plan_t plan = {.offsets = core_calloc(N, sizeof(int64_t))};
  for (int round = 0; round < 5 && r && plan.offsets; round++) {
    for (int i = 0; i < N; i++) req[i].bytes = test_rand_int(0, 5000) * (round + 1);
    core_alloc_fail_after(-1);
    CHECK_OK(mem_replan(r, req, &plan));
    CHECK(core_alloc_count() == 0);
    mem_plan_t fresh;
    CHECK_OK(mem_plan_build(req, N, &fresh));
    CHECK(plan.arena_bytes == fresh.arena_bytes);
    CHECK(plan.lower_bound_bytes == fresh.lower_bound_bytes);
    CHECK(plan.naive_bytes == fresh.naive_bytes);
    for (int i = 0; i < N; i++) CHECK(plan.offsets[i] == fresh.offsets[i]);
    mem_plan_free(&fresh);
  }
  mem_plan_free(&plan);
  mem_replanner_destroy(r);
}

/* ---- Strided inputs are staged into buffers that grow with the size -------- */

static void test_strided_inputs(void) {
  test_seed(10);
  loom_graph_t *g = mlp();
  loom_compile_options_t o = dynamic_options();
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  if (!e) return;
  for (int k = 0; k < N_SIZES; k++) {
    int64_t n = sizes[k];
    /* x[i][j] at j * n + i: a transposed view. */
    loom_tensor_t *base = test_rand_tensor(LOOM_F32, 2, (int64_t[]){16, n}, -1, 1);
    loom_tensor_t *x;
    CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, (int64_t[]){n, 16}, (int64_t[]){1, n},
                              loom_tensor_data(base), &x));
    check_run(g, e, 1, &x, 1);
    loom_tensor_destroy(x);
    loom_tensor_destroy(base);
  }
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* ---- Given values and graphs without symbols stay specialized --------------- */

static void test_given_values_stay_fixed(void) {
  test_seed(11);
  loom_graph_t *g = mlp();
  loom_compile_options_t o = dynamic_options();
  const char *names[] = {"n"};
  int64_t values[] = {5};
  o.n_symbols = 1;
  o.symbol_names = names;
  o.symbol_values = values;
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  if (!e) return;
  loom_tensor_t *x5 = test_rand_tensor(LOOM_F32, 2, (int64_t[]){5, 16}, -1, 1);
  loom_tensor_t *x6 = test_rand_tensor(LOOM_F32, 2, (int64_t[]){6, 16}, -1, 1);
  check_run(g, e, 1, &x5, 1);
  loom_tensor_t *out;
  CHECK_OK(loom_executable_new_output(e, 0, &out));
  CHECK_ERR(loom_executable_run(e, 1, &x6, 1, &out), LOOM_ERR_BINDING, "compiled for");
  loom_tensor_destroy(out);
  loom_tensor_destroy(x5);
  loom_tensor_destroy(x6);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(test_mlp_symbolic_batch);
  TEST_RUN(test_mlp_reference_only);
  TEST_RUN(test_cnn_symbolic_batch);
  TEST_RUN(test_slices_of_a_symbolic_axis);
  TEST_RUN(test_window_larger_than_symbolic_input);
  TEST_RUN(test_mlp_gradients);
  TEST_RUN(test_rows_softmax_layer_norm);
  TEST_RUN(test_matmul_symbolic_m);
  TEST_RUN(test_layout_symbolic_lead);
  TEST_RUN(test_whole_symbolic_folds);
  TEST_RUN(test_symbolic_inner_dim_falls_back);
  TEST_RUN(test_softmax_over_an_axis_found_empty);
  TEST_RUN(test_expression_dims);
  TEST_RUN(test_bad_bindings);
  TEST_RUN(test_replans_allocate_only_to_grow);
  TEST_RUN(test_failed_growth_recovers);
  TEST_RUN(test_replan_matches_fresh_plan);
  TEST_RUN(test_strided_inputs);
  TEST_RUN(test_given_values_stay_fixed);
  return test_summary();
}
