/* The interpreter and tensors: parameters and assigns, constants, outputs
 * that alias inputs, parameters or each other, outputs the caller keeps
 * as views of inputs (the fallback's saved inputs), symbolic sizes bound
 * per run, strided inputs, and the tensor accessors. */
#include <string.h>

#include "harness.h"
#include "runtime/interp.h"

/* A counter: c' = c + 1; outputs the value read (c) and the new one. */
static void counter_accumulates(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t c, one, next;
  int64_t shape[] = {1};
  CHECK_OK(loom_graph_param(g, "count", LOOM_I32, 1, shape, NULL, &c));
  loom_tensor_t *t_one = test_tensor(LOOM_I32, 1, shape, (double[]){1});
  CHECK_OK(loom_graph_constant(g, t_one, &one));
  CHECK_OK(loom_add(g, c, one, &next));
  CHECK_OK(loom_assign(g, c, next));
  CHECK_OK(loom_graph_output(g, c));
  CHECK_OK(loom_graph_output(g, next));
  loom_tensor_t *state;
  CHECK_OK(loom_graph_param_tensor(g, c, &state));
  for (int run = 0; run < 3; run++) {
    loom_tensor_t *outs[2] = {NULL, NULL};
    CHECK_OK(loom_interpret(g, 0, NULL, 2, outs));
    CHECK(test_get(outs[0], 0) == run);     /* reads see the old value */
    CHECK(test_get(outs[1], 0) == run + 1);
    CHECK(test_get(state, 0) == run + 1);   /* the param holds the new one */
    CHECK(outs[0] != state);
    loom_tensor_destroy(outs[0]);
    loom_tensor_destroy(outs[1]);
  }
  loom_tensor_destroy(t_one);
  loom_graph_destroy(g);
}

/* a' = b and b' = a swap: both assigns see the values from before. */
static void assigns_swap_parameters(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {2};
  loom_tensor_t *ia = test_tensor(LOOM_F64, 1, shape, (double[]){1, 2});
  loom_tensor_t *ib = test_tensor(LOOM_F64, 1, shape, (double[]){3, 4});
  loom_value_t a, b;
  CHECK_OK(loom_graph_param(g, "a", LOOM_F64, 1, shape, ia, &a));
  CHECK_OK(loom_graph_param(g, "b", LOOM_F64, 1, shape, ib, &b));
  CHECK_OK(loom_assign(g, a, b));
  CHECK_OK(loom_assign(g, b, a));
  CHECK_OK(loom_interpret(g, 0, NULL, 0, NULL));
  loom_tensor_t *ta, *tb;
  CHECK_OK(loom_graph_param_tensor(g, a, &ta));
  CHECK_OK(loom_graph_param_tensor(g, b, &tb));
  CHECK_TENSOR(ta, ((double[]){3, 4}), 2, 0, 0);
  CHECK_TENSOR(tb, ((double[]){1, 2}), 2, 0, 0);
  loom_tensor_destroy(ia);
  loom_tensor_destroy(ib);
  loom_graph_destroy(g);
}

/* Outputs that are an input, a parameter, a constant, and one value
 * twice: each a tensor of its own, with the right contents. */
static void outputs_alias(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {3};
  loom_tensor_t *k = test_tensor(LOOM_I64, 1, shape, (double[]){7, 8, 9});
  loom_value_t x, p, c, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_I64, 1, shape, &x));
  CHECK_OK(loom_graph_param(g, "p", LOOM_I64, 1, shape, k, &p));
  CHECK_OK(loom_graph_constant(g, k, &c));
  CHECK_OK(loom_mul(g, x, c, &y));
  loom_value_t outs_v[] = {x, p, c, y, y, x};
  for (int i = 0; i < 6; i++) CHECK_OK(loom_graph_output(g, outs_v[i]));
  loom_tensor_t *in = test_tensor(LOOM_I64, 1, shape, (double[]){1, 2, 3});
  loom_tensor_t *outs[6] = {0};
  CHECK_OK(loom_interpret(g, 1, &in, 6, outs));
  double xs[] = {1, 2, 3}, ks[] = {7, 8, 9}, ys[] = {7, 16, 27};
  CHECK_TENSOR(outs[0], xs, 3, 0, 0);
  CHECK_TENSOR(outs[1], ks, 3, 0, 0);
  CHECK_TENSOR(outs[2], ks, 3, 0, 0);
  CHECK_TENSOR(outs[3], ys, 3, 0, 0);
  CHECK_TENSOR(outs[4], ys, 3, 0, 0);
  CHECK_TENSOR(outs[5], xs, 3, 0, 0);
  for (int i = 0; i < 6; i++)
    for (int j = i + 1; j < 6; j++) CHECK(outs[i] != outs[j]);
  CHECK(outs[0] != in && outs[5] != in);
  /* Changing an output changes neither the input nor the parameter. */
  int64_t zeros[3] = {0};
  CHECK_OK(loom_tensor_write(outs[0], zeros, sizeof zeros));
  CHECK_OK(loom_tensor_write(outs[1], zeros, sizeof zeros));
  CHECK_TENSOR(in, xs, 3, 0, 0);
  loom_tensor_t *pt;
  CHECK_OK(loom_graph_param_tensor(g, p, &pt));
  CHECK_TENSOR(pt, ks, 3, 0, 0);
  for (int i = 0; i < 6; i++) loom_tensor_destroy(outs[i]);
  loom_tensor_destroy(in);
  loom_tensor_destroy(k);
  loom_graph_destroy(g);
}

/* rt_interpret_keeping: an output kept by the caller as a view of the
 * input it is stays that tensor, unwritten, beside the outputs the run
 * hands out; a kept output that is not such a view fails the run, which
 * then hands nothing out and leaves the kept tensor to its caller, and
 * a kept output that is NULL is refused. */
static void kept_outputs_stay(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {3};
  loom_value_t x, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, shape, &x));
  CHECK_OK(loom_add(g, x, x, &y));
  CHECK_OK(loom_graph_output(g, y));
  CHECK_OK(loom_graph_output(g, x));
  loom_tensor_t *in = test_tensor(LOOM_F32, 1, shape, (double[]){1, 2, 3});
  loom_tensor_t *view, *other = test_tensor(LOOM_F32, 1, shape, (double[]){0, 0, 0});
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 1, shape, NULL, loom_tensor_data(in), &view));
  bool kept[2] = {false, true};
  loom_tensor_t *outs[2] = {(loom_tensor_t *)&kept, view}; /* outs[0] not kept: any value */
  CHECK_OK(rt_interpret_keeping(g, 1, &in, 2, outs, kept, NULL, NULL));
  double ys[] = {2, 4, 6}, xs[] = {1, 2, 3};
  CHECK_TENSOR(outs[0], ys, 3, 0, 0);
  CHECK(outs[1] == view && loom_tensor_data(view) == loom_tensor_data(in));
  CHECK_TENSOR(view, xs, 3, 0, 0);
  loom_tensor_destroy(outs[0]);
  outs[0] = NULL;
  outs[1] = other;
  CHECK_ERR(rt_interpret_keeping(g, 1, &in, 2, outs, kept, NULL, NULL), LOOM_ERR_BINDING,
            "output 1 was kept by the caller, but is not a view");
  CHECK(outs[0] == NULL && outs[1] == other);
  outs[1] = NULL;
  CHECK_ERR(rt_interpret_keeping(g, 1, &in, 2, outs, kept, NULL, NULL), LOOM_ERR_INVALID,
            "output 1 is marked kept but is null");
  double zs[] = {0, 0, 0};
  CHECK_TENSOR(other, zs, 3, 0, 0);
  loom_tensor_destroy(other);
  loom_tensor_destroy(view);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* y = x * x + b over x: f32[n, 3]; one graph, two sizes. */
static void symbolic_sizes_per_run(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_dim_t dims[] = {n, 3}, bdims[] = {3};
  loom_value_t x, b, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, dims, &x));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F32, 1, bdims, &b));
  CHECK_OK(loom_mul(g, x, x, &y));
  CHECK_OK(loom_add(g, y, b, &y));
  CHECK_OK(loom_graph_output(g, y));
  int64_t bshape[] = {3};
  loom_tensor_t *tb = test_tensor(LOOM_F32, 1, bshape, (double[]){0, 10, 100});
  for (int64_t rows = 2; rows <= 5; rows += 3) {
    int64_t shape[] = {rows, 3};
    double xv[15], want[15];
    for (int i = 0; i < rows * 3; i++) {
      xv[i] = i;
      want[i] = i * i + (i % 3 == 0 ? 0 : i % 3 == 1 ? 10 : 100);
    }
    loom_tensor_t *tx = test_tensor(LOOM_F32, 2, shape, xv);
    loom_tensor_t *in[] = {tx, tb};
    loom_tensor_t *out = test_run1(g, 2, in);
    CHECK(loom_tensor_rank(out) == 2 && loom_tensor_dim(out, 0) == rows &&
          loom_tensor_dim(out, 1) == 3);
    CHECK_TENSOR(out, want, rows * 3, 0, 0);
    loom_tensor_destroy(tx);
    loom_tensor_destroy(out);
  }
  loom_tensor_destroy(tb);
  loom_graph_destroy(g);
}

/* A transposed view and a broadcast (stride 0) view give what their
 * contiguous copies give. */
static void strided_inputs(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {3, 2};
  loom_value_t x, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 2, shape, &x));
  CHECK_OK(loom_neg(g, x, &y));
  CHECK_OK(loom_graph_output(g, y));
  double data[6] = {0, 1, 2, 3, 4, 5}; /* a 2x3 matrix */
  int64_t strides[] = {1, 3};
  loom_tensor_t *view, *dense;
  CHECK_OK(loom_tensor_wrap(LOOM_F64, 2, shape, strides, data, &view));
  double tdata[6] = {0, 3, 1, 4, 2, 5};
  CHECK_OK(loom_tensor_from_data(LOOM_F64, 2, shape, tdata, sizeof tdata, &dense));
  loom_tensor_t *a = test_run1(g, 1, &view), *b = test_run1(g, 1, &dense);
  double want[] = {0, -3, -1, -4, -2, -5};
  CHECK_TENSOR(a, want, 6, 0, 0);
  CHECK_TENSOR(b, want, 6, 0, 0);
  CHECK(data[1] == 1); /* the input is not modified */
  loom_tensor_destroy(a);
  loom_tensor_destroy(b);
  loom_tensor_destroy(view);
  double row[2] = {5, 6};
  int64_t bstrides[] = {0, 1};
  CHECK_OK(loom_tensor_wrap(LOOM_F64, 2, shape, bstrides, row, &view));
  a = test_run1(g, 1, &view);
  double want_b[] = {-5, -6, -5, -6, -5, -6};
  CHECK_TENSOR(a, want_b, 6, 0, 0);
  loom_tensor_destroy(a);
  loom_tensor_destroy(view);
  loom_tensor_destroy(dense);
  loom_graph_destroy(g);
}

static void tensor_wrap_shares_memory(void) {
  float data[4] = {1, 2, 3, 4};
  int64_t shape[] = {2, 2};
  loom_tensor_t *t;
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, shape, NULL, data, &t));
  CHECK(loom_tensor_data(t) == data);
  data[3] = 40;
  CHECK(test_get(t, 3) == 40);
  float src[4] = {5, 6, 7, 8};
  CHECK_OK(loom_tensor_write(t, src, sizeof src));
  CHECK(data[0] == 5 && data[3] == 8);
  loom_tensor_destroy(t); /* does not free data */
  CHECK(data[2] == 7);
}

static void tensor_accessors(void) {
  int64_t shape[] = {2, 3};
  loom_tensor_t *t;
  CHECK_OK(loom_tensor_create(LOOM_I32, 2, shape, &t));
  CHECK(loom_tensor_dtype(t) == LOOM_I32 && loom_tensor_rank(t) == 2);
  CHECK(loom_tensor_dim(t, 1) == 3 && loom_tensor_dim(t, 2) == -1 &&
        loom_tensor_dim(t, -1) == -1 && loom_tensor_numel(t) == 6);
  int32_t zero[6], v[6] = {1, -2, 3, -4, 5, -6}, back[6];
  CHECK_OK(loom_tensor_read(t, zero, sizeof zero));
  CHECK(zero[0] == 0 && zero[5] == 0); /* created zero-filled */
  CHECK_OK(loom_tensor_write(t, v, sizeof v));
  CHECK_OK(loom_tensor_read(t, back, sizeof back));
  CHECK(memcmp(v, back, sizeof v) == 0);
  double x;
  CHECK_OK(loom_tensor_get_f64(t, 3, &x));
  CHECK(x == -4);
  CHECK_ERR(loom_tensor_get_f64(t, 6, &x), LOOM_ERR_VALUE, "index 6");
  CHECK_ERR(loom_tensor_get_f64(t, -1, &x), LOOM_ERR_VALUE, "index");
  CHECK_ERR(loom_tensor_read(t, back, sizeof back - 1), LOOM_ERR_INVALID, "smaller");
  CHECK_ERR(loom_tensor_write(t, v, sizeof v + 4), LOOM_ERR_INVALID, "bytes");
  loom_tensor_destroy(t);
  /* Strided read and write go through the strides. */
  int32_t mem[6] = {0, 1, 2, 3, 4, 5};
  int64_t tshape[] = {3, 2}, strides[] = {1, 3};
  CHECK_OK(loom_tensor_wrap(LOOM_I32, 2, tshape, strides, mem, &t));
  CHECK_OK(loom_tensor_read(t, back, sizeof back));
  int32_t want[6] = {0, 3, 1, 4, 2, 5};
  CHECK(memcmp(back, want, sizeof want) == 0);
  CHECK_OK(loom_tensor_get_f64(t, 1, &x));
  CHECK(x == 3);
  int32_t w[6] = {10, 13, 11, 14, 12, 15};
  CHECK_OK(loom_tensor_write(t, w, sizeof w));
  CHECK(mem[0] == 10 && mem[1] == 11 && mem[3] == 13 && mem[5] == 15);
  loom_tensor_destroy(t);
  /* A scalar and an empty tensor. */
  CHECK_OK(loom_tensor_create(LOOM_F16, 0, NULL, &t));
  CHECK(loom_tensor_numel(t) == 1 && loom_tensor_rank(t) == 0);
  loom_tensor_destroy(t);
  int64_t empty[] = {4, 0};
  CHECK_OK(loom_tensor_create(LOOM_BOOL, 2, empty, &t));
  CHECK(loom_tensor_numel(t) == 0);
  CHECK_OK(loom_tensor_write(t, NULL, 0));
  loom_tensor_destroy(t);
}

int main(void) {
  TEST_RUN(counter_accumulates);
  TEST_RUN(assigns_swap_parameters);
  TEST_RUN(outputs_alias);
  TEST_RUN(kept_outputs_stay);
  TEST_RUN(symbolic_sizes_per_run);
  TEST_RUN(strided_inputs);
  TEST_RUN(tensor_wrap_shares_memory);
  TEST_RUN(tensor_accessors);
  return test_summary();
}
