/* The errors a user meets: null handles and out pointers across the API,
 * tensors bound to the wrong inputs, bad ids, dtypes and ranks, and an
 * allocation failure injected at every allocation of a small session. */
#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/status.h"
#include "harness.h"
#include "ir/ir.h"
#include "ir/rewrite.h"
#include "loom/trace.h"

typedef loom_status_t (*unary_fn)(loom_graph_t *, loom_value_t, loom_value_t *);
typedef loom_status_t (*binary_fn)(loom_graph_t *, loom_value_t, loom_value_t,
                                   loom_value_t *);

static const unary_fn unary_builders[] = {
    loom_neg,  loom_abs,   loom_exp,     loom_log,      loom_sqrt,
    loom_rsqrt, loom_reciprocal, loom_tanh, loom_sigmoid, loom_relu,
    loom_gelu, loom_gelu_tanh, loom_silu, loom_softplus, loom_sin,
    loom_cos,  loom_erf,   loom_floor,   loom_ceil,     loom_round,
    loom_sign, loom_not,   loom_isnan,   loom_identity, loom_bitwise_not,
};
static const binary_fn binary_builders[] = {
    loom_add, loom_sub, loom_mul, loom_div, loom_pow, loom_maximum,
    loom_minimum, loom_mod, loom_eq, loom_ne, loom_lt, loom_le,
    loom_gt, loom_ge, loom_and, loom_or, loom_xor,
    loom_bitwise_and, loom_bitwise_or, loom_bitwise_xor, loom_bitshift_left, loom_bitshift_right,
};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void null_tensor_calls(void) {
  int64_t shape[] = {2};
  float data[2] = {1, 2};
  loom_tensor_t *t;
  double x;
  CHECK_ERR(loom_tensor_create(LOOM_F32, 1, shape, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_tensor_create(LOOM_F32, 1, NULL, &t), LOOM_ERR_INVALID, "shape");
  CHECK_ERR(loom_tensor_wrap(LOOM_F32, 1, shape, NULL, data, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_tensor_wrap(LOOM_F32, 1, shape, NULL, NULL, &t), LOOM_ERR_INVALID, "data");
  CHECK(t == NULL);
  CHECK_ERR(loom_tensor_from_data(LOOM_F32, 1, shape, data, 8, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_tensor_from_data(LOOM_F32, 1, shape, NULL, 8, &t), LOOM_ERR_INVALID, "src");
  CHECK_ERR(loom_tensor_from_data(LOOM_F32, 1, shape, data, 4, &t), LOOM_ERR_INVALID, "bytes");
  CHECK(t == NULL);
  loom_tensor_destroy(NULL);
  CHECK(loom_tensor_rank(NULL) == -1 && loom_tensor_dim(NULL, 0) == -1);
  CHECK(loom_tensor_numel(NULL) == 0 && loom_tensor_data(NULL) == NULL);
  CHECK_ERR(loom_tensor_read(NULL, data, 8), LOOM_ERR_INVALID, "t");
  t = (loom_tensor_t *)data; /* the copy's out is cleared first */
  CHECK_ERR(loom_tensor_copy(NULL, &t), LOOM_ERR_INVALID, "t");
  CHECK(t == NULL);
  CHECK_ERR(loom_tensor_copy(NULL, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_tensor_write(NULL, data, 8), LOOM_ERR_INVALID, "t");
  CHECK_ERR(loom_tensor_get_f64(NULL, 0, &x), LOOM_ERR_INVALID, "t");
  CHECK_OK(loom_tensor_create(LOOM_F32, 1, shape, &t));
  CHECK_ERR(loom_tensor_read(t, NULL, 8), LOOM_ERR_INVALID, "dst");
  CHECK_ERR(loom_tensor_write(t, NULL, 8), LOOM_ERR_INVALID, "src");
  CHECK_ERR(loom_tensor_get_f64(t, 0, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_tensor_save_npy(NULL, "/tmp/x.npy"), LOOM_ERR_INVALID, "t");
  CHECK_ERR(loom_tensor_save_npy(t, NULL), LOOM_ERR_INVALID, "path");
  loom_tensor_t *loaded = t;
  CHECK_ERR(loom_tensor_load_npy(NULL, &loaded), LOOM_ERR_INVALID, "path");
  CHECK(loaded == NULL);
  CHECK_ERR(loom_tensor_load_npy("/tmp/x.npy", NULL), LOOM_ERR_INVALID, "out");
  loom_tensor_destroy(t);
  CHECK(strcmp(loom_status_name((loom_status_t)99), "LOOM_ERR_?") == 0);
  CHECK(strcmp(loom_status_name(LOOM_ERR_BINDING), "LOOM_ERR_BINDING") == 0);
  CHECK(strcmp(loom_dtype_name((loom_dtype_t)99), "?") == 0);
  CHECK(loom_dtype_size((loom_dtype_t)-1) == 0);
}

static void null_graph_calls(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, y;
  loom_dim_t d, n;
  int64_t shape[] = {2};
  char buf[16];
  loom_tensor_t *t, *pt;
  CHECK_OK(loom_tensor_create(LOOM_F32, 1, shape, &t));
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, shape, &x));
  CHECK_ERR(loom_graph_create(NULL), LOOM_ERR_INVALID, "out");
  loom_graph_destroy(NULL);
  CHECK_ERR(loom_dim_symbol(NULL, "n", &d), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_dim_symbol(g, "n", NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_dim_add(NULL, 1, 2, &d), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_dim_add(g, 1, 2, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_dim_mul(NULL, 1, 2, &d), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_dim_mul(g, 1, 2, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_dim_floordiv(NULL, 1, 2, &d), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_dim_floordiv(g, 1, 2, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_dim_format(NULL, n, buf, sizeof buf), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_dim_format(g, n, NULL, 16), LOOM_ERR_INVALID, "buf");
  CHECK_ERR(loom_dim_format(g, n, buf, 0), LOOM_ERR_INVALID, "size");
  CHECK_ERR(loom_graph_input(NULL, "x", LOOM_F32, 1, shape, &y), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_graph_input(g, "x", LOOM_F32, 1, shape, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_graph_input(g, "x", LOOM_F32, 1, NULL, &y), LOOM_ERR_INVALID, "dims");
  CHECK_ERR(loom_graph_param(NULL, "p", LOOM_F32, 1, shape, NULL, &y), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_graph_param(g, "p", LOOM_F32, 1, shape, NULL, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_graph_param(g, "p", LOOM_F32, 1, NULL, NULL, &y), LOOM_ERR_INVALID, "dims");
  CHECK_ERR(loom_graph_param(g, "p", LOOM_F32, 1, &n, NULL, &y), LOOM_ERR_SHAPE, "symbolic");
  CHECK_ERR(loom_graph_param(g, "p", LOOM_F64, 1, shape, t, &y), LOOM_ERR_SHAPE, "initial value");
  CHECK_ERR(loom_graph_constant(NULL, t, &y), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_graph_constant(g, NULL, &y), LOOM_ERR_INVALID, "t");
  CHECK_ERR(loom_graph_constant(g, t, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_graph_output(NULL, x), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_assign(NULL, x, x), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_graph_param_tensor(NULL, x, &pt), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_graph_param_tensor(g, x, NULL), LOOM_ERR_INVALID, "out");
  CHECK(loom_graph_num_inputs(NULL) == 0 && loom_graph_num_outputs(NULL) == 0 &&
        loom_graph_num_nodes(NULL) == 0);
  CHECK_ERR(loom_value_type(NULL, x, NULL, NULL, NULL), LOOM_ERR_INVALID, "g");
  CHECK_OK(loom_value_type(g, x, NULL, NULL, NULL));
  CHECK_ERR(loom_graph_verify(NULL), LOOM_ERR_INVALID, "g");
  char *text;
  CHECK_ERR(loom_graph_print(NULL, &text), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_graph_print(g, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_graph_dot(NULL, &text), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_graph_dot(g, NULL), LOOM_ERR_INVALID, "out");
  loom_free(NULL);
  loom_op_info_t info = LOOM_OP_INFO_INIT;
  CHECK_ERR(loom_op_get_info(0, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_op_get_info(-1, &info), LOOM_ERR_INVALID, "op index");
  CHECK_ERR(loom_op_get_info(loom_op_count(), &info), LOOM_ERR_INVALID, "op index");
  loom_tensor_destroy(t);
  loom_graph_destroy(g);
}

/* Every elementwise builder with a null graph or out pointer. */
static void null_builder_calls(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {2};
  loom_value_t x, b, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, shape, &x));
  CHECK_OK(loom_graph_input(g, "b", LOOM_BOOL, 1, shape, &b));
  for (size_t i = 0; i < COUNT(unary_builders); i++) {
    CHECK_ERR(unary_builders[i](NULL, x, &y), LOOM_ERR_INVALID, "g");
    CHECK_ERR(unary_builders[i](g, x, NULL), LOOM_ERR_INVALID, "out");
  }
  for (size_t i = 0; i < COUNT(binary_builders); i++) {
    CHECK_ERR(binary_builders[i](NULL, x, x, &y), LOOM_ERR_INVALID, "g");
    CHECK_ERR(binary_builders[i](g, x, x, NULL), LOOM_ERR_INVALID, "out");
  }
  /* named as the call the user made, not an internal one */
  CHECK_ERR(loom_relu(g, x, NULL), LOOM_ERR_INVALID, "relu: out is null");
  CHECK_ERR(loom_relu(NULL, x, &y), LOOM_ERR_INVALID, "relu: the graph is null");
  CHECK_ERR(loom_leaky_relu(NULL, x, 0.1, &y), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_leaky_relu(g, x, 0.1, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_elu(NULL, x, 1, &y), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_elu(g, x, 1, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_cast(NULL, x, LOOM_F64, &y), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_cast(g, x, LOOM_F64, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_clamp(NULL, x, 0, 1, &y), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_clamp(g, x, 0, 1, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(loom_where(NULL, b, x, x, &y), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_where(g, b, x, x, NULL), LOOM_ERR_INVALID, "out");
  CHECK(loom_graph_num_nodes(g) == 0);
  loom_graph_destroy(g);
}

/* Value ids that are not values of the graph. */
static void invalid_value_ids(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {2};
  loom_value_t x, y, bad = {99}, neg = {-1};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, shape, &x));
  CHECK_ERR(loom_relu(g, bad, &y), LOOM_ERR_INVALID, "%99");
  CHECK_ERR(loom_add(g, x, neg, &y), LOOM_ERR_INVALID, "input 1");
  CHECK_ERR(loom_where(g, bad, x, x, &y), LOOM_ERR_INVALID, "no such value");
  CHECK_ERR(loom_graph_output(g, bad), LOOM_ERR_INVALID, "%99");
  CHECK_ERR(loom_assign(g, bad, x), LOOM_ERR_INVALID, "assign");
  CHECK_ERR(loom_value_type(g, neg, NULL, NULL, NULL), LOOM_ERR_INVALID, "%-1");
  loom_tensor_t *t;
  CHECK_ERR(loom_graph_param_tensor(g, bad, &t), LOOM_ERR_INVALID, "parameter");
  CHECK(loom_graph_num_nodes(g) == 0 && loom_graph_num_outputs(g) == 0);
  CHECK_OK(loom_graph_verify(g));
  loom_graph_destroy(g);
}

static void bad_dtypes_and_ranks(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, shape[] = {2};
  loom_tensor_t *t = NULL;
  loom_value_t x, y;
  CHECK_ERR(loom_tensor_create((loom_dtype_t)LOOM_DTYPE_COUNT, 1, shape, &t),
            LOOM_ERR_DTYPE, "invalid dtype");
  CHECK_ERR(loom_tensor_create((loom_dtype_t)-1, 1, shape, &t), LOOM_ERR_DTYPE, "dtype -1");
  CHECK_ERR(loom_tensor_create(LOOM_F32, 9, nine, &t), LOOM_ERR_SHAPE, "rank 9");
  CHECK_ERR(loom_tensor_create(LOOM_F32, -1, nine, &t), LOOM_ERR_SHAPE, "rank -1");
  int64_t negative[] = {2, -3};
  CHECK_ERR(loom_tensor_create(LOOM_F32, 2, negative, &t), LOOM_ERR_SHAPE, "negative");
  int64_t huge[] = {1LL << 40, 1LL << 40};
  CHECK_ERR(loom_tensor_create(LOOM_F32, 2, huge, &t), LOOM_ERR_SHAPE, "too large");
  CHECK_ERR(loom_tensor_wrap(LOOM_F32, 9, nine, NULL, shape, &t), LOOM_ERR_SHAPE, "rank 9");
  CHECK(t == NULL);
  CHECK_ERR(loom_graph_input(g, "x", (loom_dtype_t)42, 1, shape, &x), LOOM_ERR_DTYPE, "'x'");
  CHECK_ERR(loom_graph_input(g, "x", LOOM_F32, 9, nine, &x), LOOM_ERR_SHAPE, "rank 9");
  CHECK_ERR(loom_graph_input(g, "x", LOOM_F32, 2, negative, &x), LOOM_ERR_SHAPE, "dim 1");
  CHECK_ERR(loom_graph_param(g, "p", (loom_dtype_t)42, 1, shape, NULL, &x), LOOM_ERR_DTYPE, "'p'");
  CHECK_ERR(loom_graph_param(g, "p", LOOM_F32, 9, nine, NULL, &x), LOOM_ERR_SHAPE, "rank 9");
  CHECK(loom_graph_num_inputs(g) == 0);
  CHECK_OK(loom_graph_input(g, "x", LOOM_I32, 1, shape, &x));
  CHECK_ERR(loom_cast(g, x, (loom_dtype_t)42, &y), LOOM_ERR_DTYPE, "cast");
  CHECK_ERR(loom_cast(g, x, (loom_dtype_t)-1, &y), LOOM_ERR_DTYPE, "cast");
  CHECK_ERR(loom_exp(g, x, &y), LOOM_ERR_DTYPE, "i32");
  CHECK(loom_graph_num_nodes(g) == 0);
  loom_graph_destroy(g);
}

/* x: f32[n, 3] and y: f32[n, 3], out = x + y. */
static loom_graph_t *binding_graph(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_dim_t dims[] = {n, 3};
  loom_value_t x, y, s;
  CHECK_OK(loom_graph_input(g, "xin", LOOM_F32, 2, dims, &x));
  CHECK_OK(loom_graph_input(g, "yin", LOOM_F32, 2, dims, &y));
  CHECK_OK(loom_add(g, x, y, &s));
  CHECK_OK(loom_graph_output(g, s));
  return g;
}

static loom_tensor_t *zeros(loom_dtype_t dtype, int rank, int64_t d0, int64_t d1) {
  int64_t shape[] = {d0, d1};
  loom_tensor_t *t = NULL;
  CHECK_OK(loom_tensor_create(dtype, rank, shape, &t));
  return t;
}

static void binding_errors(void) {
  loom_graph_t *g = binding_graph();
  loom_tensor_t *good = zeros(LOOM_F32, 2, 2, 3);
  loom_tensor_t *bad[] = {
      zeros(LOOM_F64, 2, 2, 3), /* wrong dtype */
      zeros(LOOM_F32, 1, 6, 0), /* wrong rank */
      zeros(LOOM_F32, 2, 2, 4), /* wrong constant dim */
      zeros(LOOM_F32, 2, 5, 3), /* n = 5 against n = 2 */
  };
  const char *words[] = {"f64", "(6)", "dim 1", "dim 0"};
  loom_tensor_t *out = (loom_tensor_t *)&out;
  for (int i = 0; i < 4; i++) {
    loom_tensor_t *in[] = {good, bad[i]};
    CHECK_ERR(loom_interpret(g, 2, in, 1, &out), LOOM_ERR_BINDING, "'yin'");
    CHECK_ERR(loom_interpret(g, 2, in, 1, &out), LOOM_ERR_BINDING, words[i]);
    CHECK(out == NULL);
  }
  for (int i = 0; i < 3; i++) {
    loom_tensor_t *in[] = {bad[i], good};
    CHECK_ERR(loom_interpret(g, 2, in, 1, &out), LOOM_ERR_BINDING, "'xin'");
  }
  loom_tensor_t *in[] = {good, good};
  CHECK_ERR(loom_interpret(g, 1, in, 1, &out), LOOM_ERR_BINDING, "2 inputs, 1");
  CHECK_ERR(loom_interpret(g, 3, in, 1, &out), LOOM_ERR_BINDING, "2 inputs, 3");
  loom_tensor_t *outs[2];
  CHECK_ERR(loom_interpret(g, 2, in, 2, outs), LOOM_ERR_BINDING, "1 outputs");
  CHECK_ERR(loom_interpret(g, 2, in, 0, NULL), LOOM_ERR_BINDING, "outputs");
  CHECK_ERR(loom_interpret(g, 2, NULL, 1, &out), LOOM_ERR_INVALID, "'xin'");
  loom_tensor_t *with_null[] = {good, NULL};
  CHECK_ERR(loom_interpret(g, 2, with_null, 1, &out), LOOM_ERR_INVALID, "'yin'");
  CHECK_ERR(loom_interpret(g, 2, in, 1, NULL), LOOM_ERR_INVALID, "outputs");
  CHECK_ERR(loom_interpret(NULL, 2, in, 1, &out), LOOM_ERR_INVALID, "g");
  CHECK_OK(loom_interpret(g, 2, in, 1, &out)); /* and the good case runs */
  loom_tensor_destroy(out);
  for (int i = 0; i < 4; i++) loom_tensor_destroy(bad[i]);
  loom_tensor_destroy(good);
  loom_graph_destroy(g);
}

/* An input typed by an expression (n+1) checks it against the symbol
 * bound by another input, in either order of the inputs. */
static void binding_expressions(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n, n1;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_add(g, n, 1, &n1));
  loom_value_t a, b;
  CHECK_OK(loom_graph_input(g, "longer", LOOM_F32, 1, &n1, &a));
  CHECK_OK(loom_graph_input(g, "base", LOOM_F32, 1, &n, &b));
  CHECK_OK(loom_graph_output(g, a));
  loom_tensor_t *t3 = zeros(LOOM_F32, 1, 3, 0), *t2 = zeros(LOOM_F32, 1, 2, 0);
  loom_tensor_t *out = NULL;
  loom_tensor_t *ok_in[] = {t3, t2}, *bad_in[] = {t3, t3};
  CHECK_OK(loom_interpret(g, 2, ok_in, 1, &out));
  loom_tensor_destroy(out);
  CHECK_ERR(loom_interpret(g, 2, bad_in, 1, &out), LOOM_ERR_BINDING, "'longer'");
  CHECK_ERR(loom_interpret(g, 2, bad_in, 1, &out), LOOM_ERR_BINDING, "n+1");
  loom_tensor_destroy(t3);
  loom_tensor_destroy(t2);
  loom_graph_destroy(g);
}

/* Arithmetic on dims that would overflow int64 fails instead. */
static void dim_overflow(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n, m, d, big = (loom_dim_t)1 << 40;
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_symbol(g, "m", &m));
  CHECK_ERR(loom_dim_add(g, INT64_MAX, 1, &d), LOOM_ERR_SHAPE, "overflow");
  CHECK_ERR(loom_dim_mul(g, big, big, &d), LOOM_ERR_SHAPE, "overflow");
  CHECK_OK(loom_dim_mul(g, n, big, &d));
  CHECK_ERR(loom_dim_mul(g, d, big, &d), LOOM_ERR_SHAPE, "overflow");
  CHECK_OK(loom_dim_add(g, n, INT64_MAX, &d));
  CHECK_ERR(loom_dim_add(g, d, 1, &d), LOOM_ERR_SHAPE, "overflow");
  /* n * m with n = m = 2^32 at run time (stride-0 views need no memory). */
  loom_dim_t nm;
  CHECK_OK(loom_dim_mul(g, n, m, &nm));
  loom_dim_t dn[] = {n}, dm[] = {m}, dnm[] = {nm};
  loom_value_t a, b, c;
  CHECK_OK(loom_graph_input(g, "a", LOOM_F32, 1, dn, &a));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F32, 1, dm, &b));
  CHECK_OK(loom_graph_input(g, "c", LOOM_F32, 1, dnm, &c));
  CHECK_OK(loom_graph_output(g, c));
  float one = 1;
  int64_t huge[] = {(int64_t)1 << 32}, zero_stride[] = {0};
  loom_tensor_t *t, *out = NULL;
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 1, huge, zero_stride, &one, &t));
  loom_tensor_t *in[] = {t, t, t};
  CHECK_ERR(loom_interpret(g, 3, in, 1, &out), LOOM_ERR_BINDING, "'c'");
  loom_tensor_destroy(t);
  loom_graph_destroy(g);
}

/* Internal guards: null or huge lists, overlapping messages, huge arrays. */
static void internal_guards(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {2};
  loom_value_t x;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, shape, &x));
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "shape", 2, NULL);
  CHECK_ERR(ir_add_node(g, IR_OP_RESHAPE, 1, &x.id, &a, NULL, 0), LOOM_ERR_INVALID, "null");
  CHECK_ERR(ir_add_node(g, IR_OP_RELU, 1, NULL, NULL, NULL, 0), LOOM_ERR_INVALID, "null");
  ir_attrs_t axis = {0};
  ir_attrs_int(&axis, "axis", 0);
  loom_value_t y;
  CHECK_ERR(ir_build1(g, IR_OP_CONCAT, 100000, &x, &axis, &y), LOOM_ERR_INVALID, "inputs");
  CHECK_ERR(ir_build1(g, IR_OP_CONCAT, 3, NULL, &axis, &y), LOOM_ERR_INVALID, "null");
  CHECK(loom_graph_num_nodes(g) == 0);
  CHECK_OK(loom_graph_verify(g));
  /* A message may quote the previous one. */
  loom_fail(LOOM_ERR_IO, "first");
  CHECK_ERR(loom_fail(LOOM_ERR_IO, "second after %s", loom_last_error()),
            LOOM_ERR_IO, "second after first");
  void *items = NULL;
  int64_t cap = 0;
  CHECK_ERR(core_grow(&items, &cap, INT64_MAX / 2, 16), LOOM_ERR_NOMEM, "too large");
  CHECK_ERR(core_grow(&items, &cap, INT64_MAX, 1), LOOM_ERR_NOMEM, "too large");
  CHECK(items == NULL && cap == 0);
  CHECK(core_aligned_alloc(SIZE_MAX) == NULL);
  /* Reading an empty tensor needs no buffer. */
  int64_t empty[] = {0};
  loom_tensor_t *t;
  CHECK_OK(loom_tensor_create(LOOM_F32, 1, empty, &t));
  CHECK_OK(loom_tensor_read(t, NULL, 0));
  loom_tensor_destroy(t);
  loom_graph_destroy(g);
}

/* ---- Allocation failure injection ---------------------------------------- */

/* A session's state, so that a failure part way leaves things to free. */
typedef struct session {
  loom_graph_t *g;
  loom_tensor_t *in, *init, *outs[3], *loaded;
  char *text, *dot;
} session_t;

static char npy_path[64];

/* Status of one step: OK, or NOMEM with a message; anything else fails
 * the test. Returns whether to go on. */
static bool step(loom_status_t s, const char *what, int64_t n) {
  if (s == LOOM_OK) return true;
  test_checks++;
  if (s != LOOM_ERR_NOMEM || !loom_last_error()[0])
    test_fail(__FILE__, __LINE__, "fail_after %lld: %s returned %s: %s",
              (long long)n, what, loom_status_name(s), loom_last_error());
  return false;
}

/* Builds, runs, prints; true when every step succeeded. */
static bool session_run(session_t *ss, int64_t n) {
  int64_t wshape[] = {4}, xshape[] = {3, 4}, xstrides[] = {1, 3};
  float wv[4] = {1, -2, 3, -4};
  static float xdata[12];
  loom_value_t x, w, c, y, z;
  loom_dim_t sym;
#define STEP(call) \
  if (!step((call), #call, n)) return false
  STEP(loom_graph_create(&ss->g));
  STEP(loom_dim_symbol(ss->g, "n", &sym));
  loom_dim_t dims[] = {sym, 4};
  STEP(loom_graph_input(ss->g, "x", LOOM_F32, 2, dims, &x));
  STEP(loom_tensor_from_data(LOOM_F32, 1, wshape, wv, sizeof wv, &ss->init));
  STEP(loom_graph_param(ss->g, "w", LOOM_F32, 1, wshape, ss->init, &w));
  STEP(loom_graph_constant(ss->g, ss->init, &c));
  STEP(loom_add(ss->g, x, w, &y));
  STEP(loom_relu(ss->g, y, &y));
  STEP(loom_mul(ss->g, y, c, &z));
  STEP(loom_add(ss->g, w, c, &c));
  STEP(loom_assign(ss->g, w, c));
  STEP(loom_graph_output(ss->g, z));
  STEP(loom_graph_output(ss->g, x));
  STEP(loom_graph_output(ss->g, z));
  /* A transposed view, which the interpreter copies. */
  STEP(loom_tensor_wrap(LOOM_F32, 2, xshape, xstrides, xdata, &ss->in));
  STEP(loom_interpret(ss->g, 1, &ss->in, 3, ss->outs));
  STEP(loom_tensor_save_npy(ss->outs[0], npy_path));
  STEP(loom_tensor_load_npy(npy_path, &ss->loaded));
  STEP(loom_graph_print(ss->g, &ss->text));
  STEP(loom_graph_dot(ss->g, &ss->dot));
  STEP(loom_graph_verify(ss->g));
#undef STEP
  return true;
}

static void session_free(session_t *ss) {
  loom_free(ss->text);
  loom_free(ss->dot);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(ss->outs[i]);
  loom_tensor_destroy(ss->loaded);
  loom_tensor_destroy(ss->in);
  loom_tensor_destroy(ss->init);
  loom_graph_destroy(ss->g);
}

/* A failed interpret leaves the parameter as it was and hands out nothing. */
static bool session_consistent(const session_t *ss) {
  if (!ss->g || loom_graph_num_outputs(ss->g) < 2 || !ss->in) return true;
  bool ran = ss->outs[0] != NULL;
  loom_tensor_t *w;
  if (loom_graph_param_tensor(ss->g, (loom_value_t){1}, &w) != LOOM_OK) return false;
  double w0 = test_get(w, 0);
  if (!ran) return ss->outs[1] == NULL && ss->outs[2] == NULL && w0 == 1;
  return w0 == 2;
}

static void allocation_failures(void) {
  snprintf(npy_path, sizeof npy_path, "/tmp/loom_errors_%ld.npy", (long)getpid());
  int64_t n;
  for (n = 0; n < 100000; n++) {
    session_t ss = {0};
    core_alloc_fail_after(n);
    bool done = session_run(&ss, n);
    core_alloc_fail_after(-1);
    CHECK(session_consistent(&ss));
    session_free(&ss);
    if (done) break;
  }
  CHECK(n > 20 && n < 100000);
  printf("note: the session makes %lld allocations\n", (long long)n);
  char tmp[96];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", npy_path, (long)getpid());
  CHECK(access(tmp, F_OK) != 0); /* no failed save left a temporary */
  unlink(npy_path);
}

/* A node with two outputs whose second output cannot be made leaves the
 * graph as it was (no value pointing at a node that was never added). */
static void multi_output_node_rollback(void) {
  int64_t n;
  for (n = 0; n < 100; n++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    int64_t shape[] = {6};
    loom_value_t x, v, i;
    /* Seven values fill the first block of the value array, so that the
     * second output needs it to grow. */
    for (int k = 0; k < 7; k++)
      CHECK_OK(loom_graph_input(g, NULL, LOOM_F32, 1, shape, &x));
    core_alloc_fail_after(n);
    loom_status_t s = loom_topk(g, x, 2, 0, 1, &v, &i);
    core_alloc_fail_after(-1);
    CHECK(s == LOOM_OK || s == LOOM_ERR_NOMEM);
    CHECK_OK(loom_graph_verify(g));
    CHECK(loom_graph_num_nodes(g) == (s == LOOM_OK));
    loom_graph_destroy(g);
    if (s == LOOM_OK) break;
  }
  /* the node array, the block of node ids, then the value array as the
   * second output grows it, each failed in turn */
  CHECK(n >= 3 && n < 100);
}

/* loom_set_error: the public way for code outside Loom (a host callback)
 * to fail with a message; it may quote the last one, and a long message
 * is cut, not overrun. */
static void public_set_error(void) {
  CHECK_ERR(loom_set_error(LOOM_ERR_VALUE, "tree %d has no root", 7), LOOM_ERR_VALUE,
            "tree 7 has no root");
  CHECK(!strcmp(loom_last_error(), "tree 7 has no root"));
  CHECK_ERR(loom_set_error(LOOM_ERR_IO, "after: %s", loom_last_error()), LOOM_ERR_IO,
            "after: tree 7 has no root");
  char long_text[3000];
  memset(long_text, 'x', sizeof long_text - 1);
  long_text[sizeof long_text - 1] = '\0';
  CHECK(loom_set_error(LOOM_ERR_INVALID, "%s", long_text) == LOOM_ERR_INVALID);
  CHECK(strlen(loom_last_error()) == 1023);
}

/* Input and parameter names are one namespace, checked when a leaf is
 * made: the second of a name fails naming it and the leaf that has it.
 * Unnamed leaves (NULL or "") never clash. */
static void duplicate_names(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {2};
  loom_value_t x, w, v, gw, lr;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, shape, &x));
  CHECK_OK(loom_graph_param(g, "w", LOOM_F32, 1, shape, NULL, &w));
  CHECK_ERR(loom_graph_input(g, "x", LOOM_F32, 1, shape, &v), LOOM_ERR_INVALID,
            "the name 'x' is taken by input 0");
  CHECK_ERR(loom_graph_input(g, "w", LOOM_F32, 1, shape, &v), LOOM_ERR_INVALID,
            "the name 'w' is taken by parameter 0");
  CHECK_ERR(loom_graph_param(g, "x", LOOM_F32, 1, shape, NULL, &v), LOOM_ERR_INVALID,
            "loom_graph_param: the name 'x' is taken by input 0");
  CHECK(loom_graph_num_inputs(g) == 1);
  for (int k = 0; k < 3; k++) {
    CHECK_OK(loom_graph_input(g, k % 2 ? "" : NULL, LOOM_F32, 1, shape, &v));
    CHECK_OK(loom_graph_param(g, k % 2 ? "" : NULL, LOOM_F32, 1, shape, NULL, &v));
  }
  /* An optimizer's state is named after its parameter: a second call
   * over the same parameter clashes now, not at a checkpoint save. */
  CHECK_OK(loom_graph_input(g, "gw", LOOM_F32, 1, shape, &gw));
  CHECK_OK(loom_graph_input(g, "lr", LOOM_F32, 0, NULL, &lr));
  CHECK_OK(loom_sgd(g, 1, &w, &gw, lr, 0.9, 0, 0));
  CHECK_ERR(loom_sgd(g, 1, &w, &gw, lr, 0.9, 0, 0), LOOM_ERR_INVALID, "'w.momentum'");
  loom_graph_destroy(g);
}

/* Many parameters (the index grows), and a graph whose leaves were made
 * behind the index's back (a clone): its names are still checked. */
static void duplicate_names_many(void) {
  loom_graph_t *g, *c;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t v;
  char name[32];
  for (int k = 0; k < 3000; k++) {
    snprintf(name, sizeof name, "p%d", k);
    CHECK_OK(loom_graph_param(g, name, LOOM_F32, 0, NULL, NULL, &v));
  }
  CHECK_ERR(loom_graph_param(g, "p2999", LOOM_F32, 0, NULL, NULL, &v), LOOM_ERR_INVALID,
            "'p2999' is taken by parameter 2999");
  CHECK_OK(ir_graph_clone(g, &c));
  CHECK_ERR(loom_graph_input(c, "p17", LOOM_F32, 0, NULL, &v), LOOM_ERR_INVALID,
            "'p17' is taken by parameter 17");
  CHECK_OK(loom_graph_input(c, "q", LOOM_F32, 0, NULL, &v));
  loom_graph_destroy(c);
  loom_graph_destroy(g);
}

/* NULL conv params are PyTorch's defaults: stride 1, no padding,
 * dilation 1, groups 1, the same as explicit ones. */
static void null_conv_params(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t xs[] = {1, 2, 5, 6}, ws[] = {3, 2, 3, 2};
  loom_value_t x, w, y, z, d;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, xs, &x));
  CHECK_OK(loom_graph_input(g, "w", LOOM_F32, 4, ws, &w));
  CHECK_OK(loom_conv2d(g, x, w, 0, x, NULL, &y));
  loom_conv_params_t p = {.stride = {1, 1}, .dilation = {1, 1}, .groups = 1};
  CHECK_OK(loom_conv2d(g, x, w, 0, x, &p, &z));
  int rank;
  loom_dim_t dims[LOOM_MAX_RANK];
  CHECK_OK(loom_value_type(g, y, NULL, &rank, dims));
  CHECK(rank == 4 && dims[0] == 1 && dims[1] == 3 && dims[2] == 3 && dims[3] == 5);
  CHECK_OK(loom_sub(g, y, z, &d));
  CHECK_OK(loom_graph_output(g, d));
  loom_tensor_t *in[2] = {test_rand_tensor(LOOM_F32, 4, xs, -1, 1),
                          test_rand_tensor(LOOM_F32, 4, ws, -1, 1)};
  loom_tensor_t *out = test_run1(g, 2, in);
  double zeros[45] = {0};
  if (out) CHECK_TENSOR(out, zeros, 45, 0, 0);
  loom_tensor_destroy(out);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(g);
}

/* ---- Compile options ----------------------------------------------------------- */

static loom_status_t compile_with(loom_graph_t *g, int n, const char *const *names,
                                  const int64_t *values) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.n_symbols = n;
  o.symbol_names = names;
  o.symbol_values = values;
  loom_executable_t *e = NULL;
  loom_status_t s = loom_compile(g, &o, &e);
  loom_executable_destroy(e);
  return s;
}

/* Every symbol the options name is the graph's and gets a size >= 0. */
static void compile_symbol_options(void) {
  loom_graph_t *g, *plain;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t n, b, dims[2];
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_dim_symbol(g, "batch", &b));
  dims[0] = b, dims[1] = n;
  loom_value_t x, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, dims, &x));
  CHECK_OK(loom_relu(g, x, &y));
  CHECK_OK(loom_graph_output(g, y));
  const char *names[2] = {"batch", "n"}, *typo[2] = {"batch", "m"};
  int64_t good[2] = {2, 3}, negative[2] = {2, -3};
  CHECK_OK(compile_with(g, 2, names, good));
  CHECK_ERR(compile_with(g, 2, names, negative), LOOM_ERR_INVALID,
            "symbol 'n' is given the negative size -3 (symbol_values[1])");
  CHECK_ERR(compile_with(g, 2, typo, good), LOOM_ERR_INVALID,
            "symbol_names[1] 'm' is not a symbol of the graph (its symbols: 'n', 'batch')");
  const char *null_name[1] = {NULL};
  CHECK_ERR(compile_with(g, 1, null_name, good), LOOM_ERR_INVALID, "symbol_names[0] is null");
  CHECK_ERR(compile_with(g, 2, NULL, good), LOOM_ERR_INVALID, "n_symbols is 2");
  CHECK_ERR(compile_with(g, -1, names, good), LOOM_ERR_INVALID, "n_symbols is -1");
  CHECK_OK(loom_graph_create(&plain));
  int64_t shape[1] = {4};
  CHECK_OK(loom_graph_input(plain, "x", LOOM_F32, 1, shape, &x));
  CHECK_OK(loom_graph_output(plain, x));
  CHECK_ERR(compile_with(plain, 1, names, good), LOOM_ERR_INVALID,
            "'batch' is not a symbol of the graph (it has none)");
  loom_graph_destroy(plain);
  loom_graph_destroy(g);
}

/* ---- Errors of losses at run time ---------------------------------------------- */

/* loss = cross_entropy(logits (2, 3), labels (2)) */
static loom_graph_t *ce_graph(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t xs[2] = {2, 3}, ys[1] = {2};
  loom_value_t x, y, loss;
  CHECK_OK(loom_graph_input(g, "logits", LOOM_F32, 2, xs, &x));
  CHECK_OK(loom_graph_input(g, "labels", LOOM_I64, 1, ys, &y));
  CHECK_OK(loom_cross_entropy(g, x, y, -100, 0, LOOM_REDUCTION_MEAN, &loss));
  CHECK_OK(loom_graph_output(g, loss));
  return g;
}

/* The same loss through a trace: its segment is a copy of the nodes. */
static loom_status_t ce_traced(loom_tensor_t *x, loom_tensor_t *y) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.spec_workers = 0;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  loom_value_t vx, vy, loss;
  const loom_tensor_t *lt;
  loom_status_t s = loom_trace_input(t, x, NULL, &vx);
  if (s == LOOM_OK) s = loom_trace_input(t, y, NULL, &vy);
  if (s == LOOM_OK)
    s = loom_cross_entropy(loom_trace_graph(t), vx, vy, -100, 0, LOOM_REDUCTION_MEAN, &loss);
  if (s == LOOM_OK) s = loom_trace_read(t, loss, &lt);
  loom_trace_destroy(t);
  return s;
}

/* A label outside [0, C) is the loss's error, with the label's position
 * and value and the number of classes, interpreted, compiled and traced;
 * one_hot called by the user keeps its own name. */
static void ce_label_out_of_range(void) {
  static const struct {
    double labels[2];
    const char *want;
  } cases[] = {
      {{1, 3}, "loom_cross_entropy: label 3 (at position 1) is out of range for 3 classes (0 to 2)"},
      {{-1, 0}, "loom_cross_entropy: label -1 (at position 0) is out of range for 3 classes"},
  };
  int64_t xs[2] = {2, 3}, ys[1] = {2};
  for (size_t c = 0; c < COUNT(cases); c++) {
    loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, xs, -1, 1);
    loom_tensor_t *y = test_tensor(LOOM_I64, 1, ys, cases[c].labels);
    loom_graph_t *g = ce_graph();
    loom_tensor_t *in[2] = {x, y}, *out = NULL;
    CHECK_ERR(loom_interpret(g, 2, in, 1, &out), LOOM_ERR_VALUE, cases[c].want);
    loom_executable_t *e = NULL;
    CHECK_OK(loom_compile(g, NULL, &e));
    if (e) {
      CHECK_OK(loom_executable_new_output(e, 0, &out));
      CHECK_ERR(loom_executable_run(e, 2, in, 1, &out), LOOM_ERR_VALUE, cases[c].want);
    }
    CHECK_ERR(ce_traced(x, y), LOOM_ERR_VALUE, cases[c].want);
    loom_tensor_destroy(out);
    loom_executable_destroy(e);
    loom_graph_destroy(g);
    loom_tensor_destroy(x);
    loom_tensor_destroy(y);
  }
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t y, hot;
  CHECK_OK(loom_graph_input(g, "y", LOOM_I64, 1, ys, &y));
  CHECK_OK(loom_one_hot(g, y, 3, LOOM_F32, &hot));
  CHECK_OK(loom_graph_output(g, hot));
  loom_tensor_t *yt = test_tensor(LOOM_I64, 1, ys, (double[]){0, 5}), *out = NULL;
  CHECK_ERR(loom_interpret(g, 1, &yt, 1, &out), LOOM_ERR_VALUE,
            "one_hot: index 5 (at position 1) is out of range for a dim of size 3");
  loom_tensor_destroy(yt);
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(null_tensor_calls);
  TEST_RUN(null_graph_calls);
  TEST_RUN(null_builder_calls);
  TEST_RUN(invalid_value_ids);
  TEST_RUN(bad_dtypes_and_ranks);
  TEST_RUN(binding_errors);
  TEST_RUN(binding_expressions);
  TEST_RUN(dim_overflow);
  TEST_RUN(internal_guards);
  TEST_RUN(allocation_failures);
  TEST_RUN(multi_output_node_rollback);
  TEST_RUN(public_set_error);
  TEST_RUN(duplicate_names);
  TEST_RUN(duplicate_names_many);
  TEST_RUN(null_conv_params);
  TEST_RUN(compile_symbol_options);
  TEST_RUN(ce_label_out_of_range);
  return test_summary();
}
