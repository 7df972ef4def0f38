/* The op table through the public API (loom/op_table.h): introspection
 * agrees with hand-checked facts of some ops; every op of the table,
 * built by name with loom_graph_add_op, gives the very node its builder
 * of ops.h gives; every default the schema states is what the op
 * computes without the attribute (interpreted, compiled, and in its
 * gradient); and bad calls fail naming what was wrong. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/status.h"
#include "harness.h"
#include "ir/ir.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_IN 5
#define MAX_OUT 8

/* ---- Values the recipes take ------------------------------------------------- */

typedef struct arg {
  loom_dtype_t dtype;
  int rank;
  int64_t shape[4];
  double lo, hi; /* the data's range */
  bool param;    /* a parameter (assign's target), not an input */
} arg_t;

enum {
  F34, F43, F4, B34, X2344, C3, CX, CW, CB, CWT, CDY, P, PDY, I2, I34, S, SB, T, Q314, E14,
  PARAM34, ARG_COUNT
};

static const arg_t args[ARG_COUNT] = {
    [F34] = {LOOM_F32, 2, {3, 4}, -2, 2, false},     [F43] = {LOOM_F32, 2, {4, 3}, -1, 1, false},
    [F4] = {LOOM_F32, 1, {4}, 0.5, 2, false},         [B34] = {LOOM_BOOL, 2, {3, 4}, 0, 1, false},
    [X2344] = {LOOM_F32, 4, {2, 3, 4, 4}, -2, 2, false}, [C3] = {LOOM_F32, 1, {3}, 0.5, 2, false},
    [CX] = {LOOM_F32, 4, {1, 2, 5, 5}, -1, 1, false},  [CW] = {LOOM_F32, 4, {4, 2, 3, 3}, -1, 1, false},
    [CB] = {LOOM_F32, 1, {4}, -1, 1, false},          [CWT] = {LOOM_F32, 4, {2, 3, 3, 3}, -1, 1, false},
    [CDY] = {LOOM_F32, 4, {1, 4, 3, 3}, -1, 1, false}, [P] = {LOOM_F32, 4, {1, 2, 4, 4}, -2, 2, false},
    [PDY] = {LOOM_F32, 4, {1, 2, 2, 2}, -1, 1, false}, [I2] = {LOOM_I64, 1, {2}, 0, 2, false},
    [I34] = {LOOM_I64, 2, {3, 4}, 0, 2, false},       [S] = {LOOM_I64, 0, {0}, 1, 9, false},
    [SB] = {LOOM_BOOL, 0, {0}, 1, 1, false},          [T] = {LOOM_I64, 0, {0}, 3, 3, false},
    [Q314] = {LOOM_F32, 3, {3, 1, 4}, -2, 2, false},  [E14] = {LOOM_F32, 2, {1, 4}, -2, 2, false},
    [PARAM34] = {LOOM_F32, 2, {3, 4}, -1, 1, true},
};

static loom_status_t add_arg(loom_graph_t *g, int a, int i, loom_value_t *v) {
  char name[16];
  snprintf(name, sizeof name, "in%d", i);
  const arg_t *x = &args[a];
  if (x->param) return loom_graph_param(g, name, x->dtype, x->rank, x->shape, NULL, v);
  return loom_graph_input(g, name, x->dtype, x->rank, x->shape, v);
}

/* Deterministic data for arg a. */
static loom_tensor_t *arg_data(int a, uint64_t seed) {
  const arg_t *x = &args[a];
  test_seed(seed);
  return test_rand_tensor(x->dtype, x->rank, x->shape, x->lo, x->hi);
}

/* ---- Recipes: one node of each op, by its builder of ops.h ---------------- */

/* The subgraphs an op runs, made fresh for each build (g takes them). */
typedef int (*subgraphs_fn)(loom_graph_t **subs);
/* The builder of ops.h for the recipe's op: inputs in, subgraphs subs;
 * its outputs into out, their count in *n_out. */
typedef loom_status_t (*builder_fn)(loom_graph_t *g, const loom_value_t *in,
                                    loom_graph_t **subs, loom_value_t *out, int *n_out);

typedef struct recipe {
  const char *op;
  /* The attributes the builder sets, "name=value ..." (ints "1,2", dtypes
   * by name, subgraphs "@k"), for loom_graph_add_op. */
  const char *attrs;
  int n_in;
  int arg[MAX_IN];
  builder_fn build;
  subgraphs_fn subgraphs; /* NULL: none */
} recipe_t;

#define B(name, call)                                                                    \
  static loom_status_t b_##name(loom_graph_t *g, const loom_value_t *in,                 \
                                loom_graph_t **subs, loom_value_t *out, int *n_out) {    \
    (void)in, (void)subs, (void)out;                                                     \
    *n_out = 1;                                                                          \
    return call;                                                                         \
  }
#define B_UNARY(name) B(name, loom_##name(g, in[0], out))
#define B_BINARY(name) B(name, loom_##name(g, in[0], in[1], out))

B_UNARY(neg) B_UNARY(abs) B_UNARY(exp) B_UNARY(log) B_UNARY(log1p) B_UNARY(expm1) B_UNARY(sqrt) B_UNARY(rsqrt)
B_UNARY(reciprocal) B_UNARY(tanh) B_UNARY(sigmoid) B_UNARY(relu) B_UNARY(gelu)
B_UNARY(gelu_tanh) B_UNARY(silu) B_UNARY(softplus) B_UNARY(sin) B_UNARY(cos) B_UNARY(erf)
B_UNARY(tan) B_UNARY(asin) B_UNARY(acos) B_UNARY(atan) B_UNARY(sinh) B_UNARY(cosh)
B_UNARY(asinh) B_UNARY(acosh) B_UNARY(atanh)
B_UNARY(floor) B_UNARY(ceil) B_UNARY(round) B_UNARY(sign) B_UNARY(not) B_UNARY(bitwise_not) B_UNARY(isnan)
B_UNARY(identity) B_UNARY(stop_gradient) B_UNARY(global_avg_pool) B_UNARY(nonzero)
B(leaky_relu, loom_leaky_relu(g, in[0], 0.2, out))
/* The collectives' communicator: this process alone (id 1, one rank);
 * NULL in a build without MPI, whose collectives have no recipe to run. */
static loom_comm_t *comm;
B(all_reduce, loom_all_reduce(g, comm, in[0], LOOM_COMM_MEAN, out))
B(broadcast, loom_broadcast(g, comm, in[0], 0, out))
B(all_gather, loom_all_gather(g, comm, in[0], out))
B(reduce_scatter, loom_reduce_scatter(g, comm, in[0], LOOM_COMM_SUM, out))
B(all_reduce_start, loom_all_reduce_start(g, comm, in[0], LOOM_COMM_MEAN, out))
B(all_reduce_wait, loom_all_reduce_wait(g, comm, in[0], out))
B(elu, loom_elu(g, in[0], 0.5, out))
B(cast, loom_cast(g, in[0], LOOM_F64, out))
B(clamp, loom_clamp(g, in[0], 0.7, 1.5, out))
B_BINARY(add) B_BINARY(sub) B_BINARY(mul) B_BINARY(div) B_BINARY(pow) B_BINARY(maximum)
B_BINARY(minimum) B_BINARY(mod) B_BINARY(eq) B_BINARY(ne) B_BINARY(lt) B_BINARY(le)
B_BINARY(gt) B_BINARY(ge) B_BINARY(and) B_BINARY(or) B_BINARY(xor)
B_BINARY(bitwise_and) B_BINARY(bitwise_or) B_BINARY(bitwise_xor) B_BINARY(bitshift_left)
B_BINARY(bitshift_right)
B(where, loom_where(g, in[0], in[1], in[2], out))
static const int64_t axis1[] = {1};
B(sum, loom_sum(g, in[0], 1, axis1, 1, out))
B(mean, loom_mean(g, in[0], 1, axis1, 0, out))
B(max, loom_max(g, in[0], 1, axis1, 0, out))
B(min, loom_min(g, in[0], 1, axis1, 0, out))
B(prod, loom_prod(g, in[0], 1, axis1, 0, out))
B(logsumexp, loom_logsumexp(g, in[0], 1, axis1, 0, out))
B(variance, loom_variance(g, in[0], 1, axis1, 0, 1, out))
B(argmax, loom_argmax(g, in[0], 1, 1, 0, out))
B(argmin, loom_argmin(g, in[0], 0, 0, 1, out))
B(cumsum, loom_cumsum(g, in[0], 1, 1, 0, out))
B(matmul, loom_matmul(g, in[0], in[1], 0, 0, out))
B(conv2d, loom_conv2d(g, in[0], in[1], 1, in[2], NULL, out))
B(conv_transpose2d, loom_conv_transpose2d(g, in[0], in[1], 0, in[0], NULL, out))
B(conv2d_weight_grad, loom_conv2d_weight_grad(g, in[0], in[1], (int64_t[]){3, 3}, NULL, out))
static const loom_pool_params_t pool = {.kernel = {2, 2}, .stride = {2, 2}};
B(max_pool2d, loom_max_pool2d(g, in[0], &pool, out))
B(avg_pool2d, loom_avg_pool2d(g, in[0], &pool, out))
B(max_pool2d_grad, loom_max_pool2d_grad(g, in[0], in[1], &pool, out))
B(avg_pool2d_grad, loom_avg_pool2d_grad(g, in[0], in[1], &pool, out))
B(softmax, loom_softmax(g, in[0], 1, out))
B(log_softmax, loom_log_softmax(g, in[0], -1, out))
B(layer_norm, loom_layer_norm(g, in[0], 1, in[1], 1, in[2], -1, 1e-5, out))
B(rms_norm, loom_rms_norm(g, in[0], 1, in[1], -1, 1e-6, out))
B(reshape, loom_reshape(g, in[0], 2, (loom_dim_t[]){4, 3}, out))
B(transpose, loom_transpose(g, in[0], (int64_t[]){1, 0}, out))
B(expand, loom_expand(g, in[0], 2, (loom_dim_t[]){3, 4}, out))
B(squeeze, loom_squeeze(g, in[0], 1, axis1, out))
B(unsqueeze, loom_unsqueeze(g, in[0], 1, (int64_t[]){0}, out))
B(slice, loom_slice(g, in[0], 1, (int64_t[]){1}, (int64_t[]){3}, axis1, NULL, out))
B(concat, loom_concat(g, 3, in, 0, out))
B(pad, loom_pad(g, in[0], (int64_t[]){1, 0, 0, 2}, LOOM_PAD_CONSTANT, 0, out))
B(flip, loom_flip(g, in[0], 1, (int64_t[]){0}, out))
B(tile, loom_tile(g, in[0], (int64_t[]){2, 1}, out))
B(gather, loom_gather(g, in[0], in[1], 0, out))
B(index_select, loom_index_select(g, in[0], in[1], 0, out))
B(scatter_add, loom_scatter_add(g, in[0], in[1], in[2], 0, out))
B(embedding, loom_embedding(g, in[0], in[1], out))
B(one_hot, loom_one_hot(g, in[0], 3, LOOM_I64, out))
B(arange, loom_arange(g, 0, 5, 1, LOOM_F32, out))
B(full, loom_full(g, 2, (loom_dim_t[]){3, 4}, 0, LOOM_F32, out))
B(random_uniform, loom_random_uniform(g, in[0], in[1], 2, (loom_dim_t[]){3, 4}, 0, 1,
                                      LOOM_F32, out))
B(random_normal, loom_random_normal(g, in[0], in[1], 2, (loom_dim_t[]){3, 4}, 0, 1,
                                    LOOM_F32, out))

static loom_status_t b_topk(loom_graph_t *g, const loom_value_t *in, loom_graph_t **subs,
                            loom_value_t *out, int *n_out) {
  (void)subs;
  *n_out = 2;
  return loom_topk(g, in[0], 2, -1, 1, &out[0], &out[1]);
}

static loom_status_t b_batch_norm(loom_graph_t *g, const loom_value_t *in, loom_graph_t **subs,
                                  loom_value_t *out, int *n_out) {
  (void)subs;
  *n_out = 3;
  return loom_batch_norm(g, in[0], in[1], in[2], in[3], in[4], 1e-5, 0.1, 1, &out[0], &out[1],
                         &out[2]);
}

static loom_status_t b_split(loom_graph_t *g, const loom_value_t *in, loom_graph_t **subs,
                             loom_value_t *out, int *n_out) {
  (void)subs;
  *n_out = 2;
  return loom_split(g, in[0], 0, 2, (int64_t[]){1, 2}, out);
}

static loom_status_t b_dropout(loom_graph_t *g, const loom_value_t *in, loom_graph_t **subs,
                               loom_value_t *out, int *n_out) {
  (void)subs;
  *n_out = 2;
  return loom_dropout(g, in[0], in[1], in[2], 0.5, &out[0], &out[1]);
}

static loom_status_t b_assign(loom_graph_t *g, const loom_value_t *in, loom_graph_t **subs,
                              loom_value_t *out, int *n_out) {
  (void)subs, (void)out;
  *n_out = 0;
  return loom_assign(g, in[0], in[1]);
}

/* A graph of two f32 (3, 4) inputs returning op(a, b). */
static loom_graph_t *branch(loom_status_t (*op)(loom_graph_t *, loom_value_t, loom_value_t,
                                                loom_value_t *)) {
  loom_graph_t *g;
  loom_value_t a, b, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(add_arg(g, F34, 0, &a));
  CHECK_OK(add_arg(g, F34, 1, &b));
  CHECK_OK(op(g, a, b, &y));
  CHECK_OK(loom_graph_output(g, y));
  return g;
}

static int if_branches(loom_graph_t **subs) {
  subs[0] = branch(loom_add);
  subs[1] = branch(loom_sub);
  return 2;
}

static loom_status_t b_if(loom_graph_t *g, const loom_value_t *in, loom_graph_t **subs,
                          loom_value_t *out, int *n_out) {
  *n_out = 1;
  return loom_if(g, in[0], subs[0], subs[1], 2, in + 1, 1, out);
}

/* A loop body: (iteration, cond, carried c, invariant v) -> (cond, c + v). */
static int loop_body(loom_graph_t **subs) {
  loom_graph_t *b;
  loom_value_t i, cond, c, v, y;
  CHECK_OK(loom_graph_create(&b));
  CHECK_OK(add_arg(b, T, 0, &i));
  CHECK_OK(add_arg(b, SB, 1, &cond));
  CHECK_OK(add_arg(b, F34, 2, &c));
  CHECK_OK(add_arg(b, F34, 3, &v));
  CHECK_OK(loom_add(b, c, v, &y));
  CHECK_OK(loom_graph_output(b, cond));
  CHECK_OK(loom_graph_output(b, y));
  subs[0] = b;
  return 1;
}

static loom_status_t b_loop(loom_graph_t *g, const loom_value_t *in, loom_graph_t **subs,
                            loom_value_t *out, int *n_out) {
  *n_out = 1;
  return loom_loop(g, in[0], in[1], subs[0], 1, in + 2, 1, in + 3, 1, out);
}

#define R1(name, attrs, a) {#name, attrs, 1, {a}, b_##name, NULL}
#define R2(name, attrs, a, b) {#name, attrs, 2, {a, b}, b_##name, NULL}
#define R3(name, attrs, a, b, c) {#name, attrs, 3, {a, b, c}, b_##name, NULL}
#define UN(name) R1(name, "", F34)
#define BIN(name) R2(name, "", F34, F34)

static const recipe_t recipes[] = {
    UN(neg), UN(abs), UN(exp), UN(log), UN(log1p), UN(expm1), UN(sqrt), UN(rsqrt), UN(reciprocal), UN(tanh),
    UN(sigmoid), UN(relu), R1(leaky_relu, "alpha=0.2", F34), R1(elu, "alpha=0.5", F34),
    UN(gelu), UN(gelu_tanh), UN(silu), UN(softplus), UN(sin), UN(cos), UN(tan), UN(asin), UN(acos), UN(atan), UN(sinh),
    UN(cosh), UN(asinh), UN(acosh), UN(atanh), UN(erf), UN(floor),
    UN(ceil), UN(round), UN(sign), UN(not), R1(bitwise_not, "", I34), UN(isnan), UN(identity), UN(stop_gradient),
    R1(cast, "dtype=f64", F34), R1(clamp, "min=0.7 max=1.5", F34),
    BIN(add), BIN(sub), BIN(mul), BIN(div), BIN(pow), BIN(maximum), BIN(minimum), BIN(mod),
    BIN(eq), BIN(ne), BIN(lt), BIN(le), BIN(gt), BIN(ge), R2(and, "", B34, B34),
    R2(or, "", B34, B34), R2(xor, "", B34, B34), R2(bitwise_and, "", I34, I34),
    R2(bitwise_or, "", B34, B34), R2(bitwise_xor, "", I34, I34),
    R2(bitshift_left, "", I34, I34), R2(bitshift_right, "", I34, I34),
    R3(where, "", B34, F34, F34),
    R1(sum, "axes=1 keepdim=1", F34), R1(mean, "axes=1 keepdim=0", F34),
    R1(max, "axes=1 keepdim=0", F34), R1(min, "axes=1 keepdim=0", F34),
    R1(prod, "axes=1 keepdim=0", F34), R1(logsumexp, "axes=1 keepdim=0", F34),
    R1(variance, "correction=1 axes=1 keepdim=0", F34),
    R1(argmax, "axis=1 keepdim=0", F34), R1(argmin, "keepdim=1", F34),
    R1(cumsum, "axis=1 exclusive=1 reverse=0", F34), R1(topk, "k=2 axis=-1 largest=1", F34),
    R2(matmul, "trans_a=0 trans_b=0", F34, F43),
    R3(conv2d, "stride=1,1 pads=0,0,0,0 dilation=1,1 groups=1", CX, CW, CB),
    R2(conv_transpose2d, "stride=1,1 pads=0,0,0,0 dilation=1,1 groups=1 output_padding=0,0",
       CX, CWT),
    R2(conv2d_weight_grad, "stride=1,1 pads=0,0,0,0 dilation=1,1 groups=1 kernel=3,3", CX, CDY),
    R1(max_pool2d, "kernel=2,2 stride=2,2 pads=0,0,0,0 dilation=1,1", P),
    R1(avg_pool2d, "kernel=2,2 stride=2,2 pads=0,0,0,0 count_include_pad=0", P),
    R1(global_avg_pool, "", P),
    R2(max_pool2d_grad, "kernel=2,2 stride=2,2 pads=0,0,0,0 dilation=1,1", P, PDY),
    R2(avg_pool2d_grad, "kernel=2,2 stride=2,2 pads=0,0,0,0 count_include_pad=0", P, PDY),
    R1(softmax, "axis=1", F34), R1(log_softmax, "axis=-1", F34),
    R3(layer_norm, "axis=-1 eps=1e-5", F34, F4, F4), R2(rms_norm, "axis=-1 eps=1e-6", F34, F4),
    {"batch_norm", "eps=1e-5 momentum=0.1 training=1", 5, {X2344, C3, C3, C3, C3},
     b_batch_norm, NULL},
    R1(reshape, "shape=4,3", F34), R1(transpose, "perm=1,0", F34),
    R1(expand, "shape=3,4", E14), R1(squeeze, "axes=1", Q314), R1(unsqueeze, "axes=0", F34),
    R1(slice, "starts=1 ends=3 axes=1", F34), R3(concat, "axis=0", F34, F34, F34),
    R1(split, "axis=0 sizes=1,2", F34), R1(pad, "pads=1,0,0,2 mode=0 value=0", F34),
    R1(flip, "axes=0", F34), R1(tile, "repeats=2,1", F34), R2(gather, "axis=0", F34, I2),
    R2(index_select, "axis=0", F34, I2), R3(scatter_add, "axis=0", F34, I34, F34),
    R2(embedding, "", F34, I2), R1(one_hot, "depth=3 dtype=i64", I2),
    {"arange", "start=0 limit=5 delta=1 dtype=f32", 0, {0}, b_arange, NULL},
    {"full", "shape=3,4 value=0 dtype=f32", 0, {0}, b_full, NULL},
    R2(random_uniform, "shape=3,4 low=0 high=1 dtype=f32", S, S),
    R2(random_normal, "shape=3,4 mean=0 std=1 dtype=f32", S, S),
    R3(dropout, "p=0.5", F34, S, S), R1(nonzero, "", F34),
    {"if", "then_graph=@0 else_graph=@1", 3, {SB, F34, F34}, b_if, if_branches},
    {"loop", "body=@0 carried=1 use_cond=1", 4, {T, SB, F34, F34}, b_loop, loop_body},
    R2(assign, "", PARAM34, F34),
    R1(all_reduce, "comm=1 ranks=1 reduce=1", F34), R1(broadcast, "comm=1 ranks=1 root=0", F34),
    R1(all_gather, "comm=1 ranks=1", F34), R1(reduce_scatter, "comm=1 ranks=1 reduce=0", F34),
    R1(all_reduce_start, "comm=1 ranks=1 reduce=1", F34), R1(all_reduce_wait, "comm=1 ranks=1", F34),
};

static const recipe_t *recipe_of(const char *op) {
  int id = -1;
  if (!comm && loom_op_find(op, &id) == LOOM_OK && (ir_ops[id].flags & F_COLLECTIVE))
    return NULL;
  for (size_t i = 0; i < COUNT(recipes); i++)
    if (!strcmp(recipes[i].op, op)) return &recipes[i];
  return NULL;
}

/* ---- Attributes from text, typed by the public introspection ------------- */

typedef struct attr_list {
  int n;
  loom_attr_t a[IR_MAX_ATTRS];
  char names[IR_MAX_ATTRS][IR_ATTR_NAME];
  int64_t ints[IR_MAX_ATTRS][LOOM_MAX_ATTR_INTS];
} attr_list_t;

/* The info of attribute name of op (LOOM_OK) through the public API. */
static loom_status_t attr_info(int op, const char *name, loom_attr_info_t *info) {
  for (int k = 0; k < loom_op_attr_count(op); k++) {
    *info = (loom_attr_info_t)LOOM_ATTR_INFO_INIT;
    LOOM_TRY(loom_op_get_attr(op, k, info));
    if (!strcmp(info->name, name)) return LOOM_OK;
  }
  return loom_set_error(LOOM_ERR_INVALID, "no attribute %s", name);
}

static loom_dtype_t dtype_named(const char *s) {
  for (int d = 0; d < LOOM_DTYPE_COUNT; d++)
    if (!strcmp(loom_dtype_name((loom_dtype_t)d), s)) return (loom_dtype_t)d;
  return LOOM_DTYPE_COUNT;
}

/* Appends attribute `name` = text (a value as recipes write it). */
static bool push_attr(attr_list_t *l, int op, const char *name, const char *text,
                      loom_graph_t **subs) {
  loom_attr_info_t info;
  if (l->n == IR_MAX_ATTRS || attr_info(op, name, &info) != LOOM_OK) return false;
  int k = l->n++;
  snprintf(l->names[k], IR_ATTR_NAME, "%s", name);
  loom_attr_t *a = &l->a[k];
  *a = (loom_attr_t){.name = l->names[k], .kind = info.kind};
  switch (info.kind) {
  case LOOM_ATTR_INT: a->i = strtoll(text, NULL, 10); break;
  case LOOM_ATTR_FLOAT: a->f = strtod(text, NULL); break;
  case LOOM_ATTR_DTYPE: a->i = dtype_named(text); break;
  case LOOM_ATTR_GRAPH: a->graph = subs[text[1] - '0']; break;
  case LOOM_ATTR_INTS:
    a->ints = l->ints[k];
    for (const char *p = text; a->n < LOOM_MAX_ATTR_INTS; p = strchr(p, ',') + 1) {
      l->ints[k][a->n++] = strtoll(p, NULL, 10);
      if (!strchr(p, ',')) break;
    }
    break;
  }
  return true;
}

/* "name=value ..." of op into l, leaving out attribute `skip` (may be
 * NULL). */
static bool parse_attrs(int op, const char *text, const char *skip, loom_graph_t **subs,
                        attr_list_t *l) {
  l->n = 0;
  for (const char *p = text; *p;) {
    size_t len = strcspn(p, "="), vlen = strcspn(p + len, " ") - 1;
    char name[IR_ATTR_NAME], value[64];
    snprintf(name, sizeof name, "%.*s", (int)len, p);
    snprintf(value, sizeof value, "%.*s", (int)vlen, p + len + 1);
    if ((!skip || strcmp(name, skip)) && !push_attr(l, op, name, value, subs)) return false;
    p += len + 1 + vlen;
    p += *p == ' ';
  }
  return true;
}

/* ---- Building a recipe both ways ---------------------------------------------- */

/* g holds the recipe's inputs; ins their values. */
static loom_graph_t *graph_with_inputs(const recipe_t *r, loom_value_t *ins) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  for (int i = 0; i < r->n_in; i++) CHECK_OK(add_arg(g, r->arg[i], i, &ins[i]));
  return g;
}

/* The recipe's node by its builder of ops.h. */
static loom_graph_t *by_builder(const recipe_t *r) {
  loom_value_t in[MAX_IN], out[MAX_OUT];
  loom_graph_t *g = graph_with_inputs(r, in), *subs[2] = {0};
  if (r->subgraphs) r->subgraphs(subs);
  int n_out = 0;
  CHECK_OK(r->build(g, in, subs, out, &n_out));
  return g;
}

/* The same node through loom_graph_add_op (by its name; every other op
 * by its number, loom_graph_add_op_index), attributes in reverse order
 * (the node's order must not depend on the caller's). */
static loom_graph_t *by_name(const recipe_t *r, int op) {
  loom_value_t in[MAX_IN], out[MAX_OUT];
  loom_graph_t *g = graph_with_inputs(r, in), *subs[2] = {0};
  if (r->subgraphs) r->subgraphs(subs);
  attr_list_t l;
  CHECK(parse_attrs(op, r->attrs, NULL, subs, &l));
  loom_attr_t reversed[IR_MAX_ATTRS];
  for (int k = 0; k < l.n; k++) reversed[k] = l.a[l.n - 1 - k];
  int n_out = -1;
  if (op % 2)
    CHECK_OK(loom_graph_add_op_index(g, op, r->n_in, in, l.n, reversed, MAX_OUT, out, &n_out));
  else
    CHECK_OK(loom_graph_add_op(g, r->op, r->n_in, in, l.n, reversed, MAX_OUT, out, &n_out));
  CHECK(n_out == (g->n_nodes ? g->nodes[g->n_nodes - 1].n_out : -1));
  return g;
}

static bool attr_equal(const ir_attr_t *a, const ir_attr_t *b) {
  if (strcmp(a->name, b->name) || a->kind != b->kind) return false;
  if (a->kind == IR_ATTR_FLOAT) return memcmp(&a->f, &b->f, sizeof a->f) == 0;
  int n = a->kind == IR_ATTR_INTS ? a->n : 1;
  return a->n == b->n && !memcmp(a->ints, b->ints, sizeof(int64_t) * (size_t)n);
}

static bool node_equal(const loom_graph_t *ga, const ir_node_t *a, const loom_graph_t *gb,
                       const ir_node_t *b) {
  if (a->op != b->op || a->n_in != b->n_in || a->n_out != b->n_out || a->attrs->n != b->attrs->n)
    return false;
  for (int i = 0; i < a->n_in; i++)
    if (a->in[i] != b->in[i]) return false;
  for (int i = 0; i < a->n_out; i++)
    if (a->out[i] != b->out[i] ||
        !ir_type_equal(&ga->values[a->out[i]].type, &gb->values[b->out[i]].type))
      return false;
  for (int k = 0; k < a->attrs->n; k++)
    if (!attr_equal(&a->attrs->a[k], &b->attrs->a[k])) return false;
  return true;
}

/* Same values, nodes (attributes in the same order) and subgraphs. */
static bool graphs_equal(const loom_graph_t *a, const loom_graph_t *b) {
  if (a->n_values != b->n_values || a->n_nodes != b->n_nodes ||
      a->n_subgraphs != b->n_subgraphs)
    return false;
  for (int64_t i = 0; i < a->n_values; i++)
    if (!ir_type_equal(&a->values[i].type, &b->values[i].type) ||
        a->values[i].kind != b->values[i].kind)
      return false;
  for (int64_t i = 0; i < a->n_nodes; i++)
    if (!node_equal(a, &a->nodes[i], b, &b->nodes[i])) return false;
  for (int64_t i = 0; i < a->n_subgraphs; i++)
    if (!graphs_equal(a->subgraphs[i], b->subgraphs[i])) return false;
  return true;
}

static void print_graph(const char *what, const loom_graph_t *g) {
  char *text = NULL;
  if (loom_graph_print(g, &text) == LOOM_OK) printf("  %s:\n%s", what, text);
  loom_free(text);
}

/* Every op of the table has a recipe, and its node built by name equals
 * the one its builder makes. */
static void add_op_equals_builder(void) {
  for (int op = 0; op < loom_op_count(); op++) {
    loom_op_info_t info = LOOM_OP_INFO_INIT;
    CHECK_OK(loom_op_get_info(op, &info));
    const recipe_t *r = recipe_of(info.name);
    if (!r && !comm && (info.flags & LOOM_OP_COLLECTIVE)) continue; /* built without MPI */
    if (!r) {
      test_fail(__FILE__, __LINE__, "op %s has no recipe: add one", info.name);
      continue;
    }
    loom_graph_t *a = by_builder(r), *b = by_name(r, op);
    CHECK(a->n_nodes == 1 && a->nodes[0].op == (ir_op_t)op);
    if (!graphs_equal(a, b)) {
      test_fail(__FILE__, __LINE__, "%s: loom_graph_add_op's graph differs", info.name);
      print_graph("builder", a);
      print_graph("loom_graph_add_op", b);
    }
    loom_graph_destroy(a);
    loom_graph_destroy(b);
  }
}

/* ---- Defaults: the schema's default is what the op computes without it ---- */

#define MAX_PAIRS 256
#define MAX_VALUES (4 * MAX_PAIRS)

/* One graph holding, for each default of each op, the node without the
 * attribute and the node with it set to the default, over inputs of their
 * own (so that no pass merges the two) holding the same data. */
typedef struct defaults {
  loom_graph_t *g;
  int n_in, in_arg[MAX_VALUES];
  uint64_t in_seed[MAX_VALUES];
  int n_out; /* outputs come in pairs: without, with */
  char what[MAX_VALUES / 2][64];
} defaults_t;

/* One variant of recipe r: its inputs (data seeded by seed), the node
 * with attributes l; its outputs into out. */
static int add_variant(defaults_t *d, const recipe_t *r, int op, const attr_list_t *l,
                       uint64_t seed, loom_value_t *in, loom_value_t *out) {
  for (int i = 0; i < r->n_in; i++) {
    CHECK_OK(add_arg(d->g, r->arg[i], d->n_in, &in[i]));
    d->in_arg[d->n_in] = r->arg[i];
    d->in_seed[d->n_in++] = seed + (uint64_t)i;
  }
  int n_out = 0;
  loom_status_t s = loom_graph_add_op(d->g, r->op, r->n_in, in, l->n, l->a, MAX_OUT, out, &n_out);
  if (s != LOOM_OK)
    test_fail(__FILE__, __LINE__, "%s with its defaults does not build: %s", ir_ops[op].name,
              loom_last_error());
  /* a start's value is its wait's alone to read (the verifier's rule) */
  if (s == LOOM_OK && op == IR_OP_ALL_REDUCE_START)
    CHECK_OK(loom_all_reduce_wait(d->g, comm, out[0], &out[0]));
  return s == LOOM_OK ? n_out : 0;
}

/* out0, a float output of a differentiable op, differentiated by each of
 * the variant's float inputs: grads[] receives the gradients. */
static int add_grads(defaults_t *d, const recipe_t *r, const loom_value_t *in, loom_value_t out0,
                     loom_value_t *grads) {
  loom_value_t loss, wrt[MAX_IN];
  int n = 0;
  for (int i = 0; i < r->n_in; i++)
    if (args[r->arg[i]].dtype == LOOM_F32) wrt[n++] = in[i];
  if (!n || loom_sum(d->g, out0, 0, NULL, 0, &loss) != LOOM_OK) return 0;
  CHECK_OK(loom_grad(d->g, loss, n, wrt, grads));
  return n;
}

/* Outputs a (without) and b (with) as the next pair, labelled what. */
static void add_pair(defaults_t *d, loom_value_t a, loom_value_t b, const char *what) {
  snprintf(d->what[d->n_out / 2], sizeof d->what[0], "%s", what);
  CHECK_OK(loom_graph_output(d->g, a));
  CHECK_OK(loom_graph_output(d->g, b));
  d->n_out += 2;
}

/* The pair for default `info` of recipe r. */
static void add_default(defaults_t *d, const recipe_t *r, int op, const loom_attr_info_t *info) {
  attr_list_t without, with;
  CHECK(parse_attrs(op, r->attrs, info->name, NULL, &without));
  CHECK(parse_attrs(op, r->attrs, info->name, NULL, &with));
  CHECK(push_attr(&with, op, info->name, info->default_text, NULL));
  if (d->n_in + 2 * MAX_IN > MAX_VALUES) {
    test_fail(__FILE__, __LINE__, "too many defaults: raise MAX_PAIRS");
    return;
  }
  uint64_t seed = 100 + 10 * (uint64_t)d->n_out;
  loom_value_t in_a[MAX_IN], in_b[MAX_IN], a[MAX_OUT], b[MAX_OUT];
  int n = add_variant(d, r, op, &without, seed, in_a, a);
  if (add_variant(d, r, op, &with, seed, in_b, b) != n || d->n_out + 2 * (n + MAX_IN) > MAX_VALUES)
    return;
  char what[64];
  for (int k = 0; k < n; k++) {
    snprintf(what, sizeof what, "%s %s=%s output %d", r->op, info->name, info->default_text, k);
    add_pair(d, a[k], b[k], what);
  }
  loom_dtype_t dtype;
  loom_op_info_t oi = LOOM_OP_INFO_INIT;
  CHECK_OK(loom_op_get_info(op, &oi));
  if (!n || !(oi.flags & LOOM_OP_DIFFERENTIABLE)) return;
  CHECK_OK(loom_value_type(d->g, a[0], &dtype, NULL, NULL));
  loom_value_t ga[MAX_IN], gb[MAX_IN];
  if (dtype != LOOM_F32) return;
  int n_grads = add_grads(d, r, in_a, a[0], ga);
  CHECK(add_grads(d, r, in_b, b[0], gb) == n_grads);
  for (int k = 0; k < n_grads; k++) {
    snprintf(what, sizeof what, "%s %s=%s gradient %d", r->op, info->name, info->default_text, k);
    add_pair(d, ga[k], gb[k], what);
  }
}

/* Whether two tensors hold the same bytes. */
static bool same_bits(const loom_tensor_t *a, const loom_tensor_t *b) {
  size_t bytes = (size_t)loom_tensor_numel(a) * loom_dtype_size(loom_tensor_dtype(a));
  if (loom_tensor_numel(b) != loom_tensor_numel(a) || loom_tensor_dtype(b) != loom_tensor_dtype(a))
    return false;
  char *x = malloc(bytes + 1), *y = malloc(bytes + 1);
  bool same = loom_tensor_read(a, x, bytes) == LOOM_OK && loom_tensor_read(b, y, bytes) == LOOM_OK &&
              !memcmp(x, y, bytes);
  free(x);
  free(y);
  return same;
}

static void check_pairs(const defaults_t *d, loom_tensor_t **out, const char *how) {
  for (int k = 0; k < d->n_out; k += 2)
    if (out[k] && out[k + 1] && !same_bits(out[k], out[k + 1]))
      test_fail(__FILE__, __LINE__, "%s (%s): without the attribute it computes otherwise",
                d->what[k / 2], how);
}

/* Runs d's graph interpreted and compiled; each pair must agree bit for
 * bit in both. */
static void run_defaults(defaults_t *d) {
  loom_tensor_t *in[MAX_VALUES], *out[MAX_VALUES] = {0};
  for (int i = 0; i < d->n_in; i++) in[i] = arg_data(d->in_arg[i], d->in_seed[i]);
  CHECK_OK(loom_interpret(d->g, d->n_in, in, d->n_out, out));
  check_pairs(d, out, "interpreted");
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(d->g, NULL, &e));
  for (int k = 0; e && k < d->n_out; k++) {
    loom_tensor_destroy(out[k]);
    out[k] = NULL;
    CHECK_OK(loom_executable_new_output_for(e, d->n_in, in, k, &out[k]));
  }
  if (e) {
    test_check_no_lost_code(e);
    CHECK_OK(loom_executable_run(e, d->n_in, in, d->n_out, out));
    check_pairs(d, out, "compiled");
  }
  loom_executable_destroy(e);
  for (int i = 0; i < d->n_in; i++) loom_tensor_destroy(in[i]);
  for (int k = 0; k < d->n_out; k++) loom_tensor_destroy(out[k]);
}

static void defaults_are_computed(void) {
  defaults_t d = {0};
  CHECK_OK(loom_graph_create(&d.g));
  int n_defaults = 0;
  for (int op = 0; op < loom_op_count(); op++) {
    const recipe_t *r = recipe_of(ir_ops[op].name);
    for (int k = 0; r && k < loom_op_attr_count(op); k++) {
      loom_attr_info_t info = LOOM_ATTR_INFO_INIT;
      CHECK_OK(loom_op_get_attr(op, k, &info));
      if (!info.has_default) continue;
      n_defaults++;
      add_default(&d, r, op, &info);
    }
  }
  printf("  %d defaults, %d pairs of values\n", n_defaults, d.n_out / 2);
  CHECK(n_defaults >= 40);
  run_defaults(&d);
  loom_graph_destroy(d.g);
}

/* ---- Introspection: facts checked by hand -------------------------------- */

static int op_named(const char *name) {
  int op = -1;
  CHECK_OK(loom_op_find(name, &op));
  return op;
}

static loom_op_info_t info_of(const char *name) {
  loom_op_info_t info = LOOM_OP_INFO_INIT;
  CHECK_OK(loom_op_get_info(op_named(name), &info));
  return info;
}

static loom_attr_info_t attr_of(const char *op, int k) {
  loom_attr_info_t a = LOOM_ATTR_INFO_INIT;
  CHECK_OK(loom_op_get_attr(op_named(op), k, &a));
  return a;
}

static void op_facts(void) {
  loom_op_info_t i = info_of("matmul");
  CHECK(i.in_min == 2 && i.in_max == 2 && i.n_out == 1 && i.n_attrs == 2);
  CHECK(i.flags == LOOM_OP_DIFFERENTIABLE && i.has_gradient && !strcmp(i.name, "matmul"));
  CHECK(i.dtypes & (1u << LOOM_F32) && i.dtypes & (1u << LOOM_I64) && !(i.dtypes & (1u << LOOM_BOOL)));
  i = info_of("exp");
  CHECK(i.dtypes == ((1u << LOOM_F32) | (1u << LOOM_F64) | (1u << LOOM_F16) | (1u << LOOM_BF16)));
  i = info_of("concat");
  CHECK(i.in_min == 1 && i.in_max == -1);
  CHECK(info_of("split").n_out == -1 && info_of("if").n_out == -2 && info_of("topk").n_out == 2);
  CHECK(info_of("dropout").flags == (LOOM_OP_RANDOM | LOOM_OP_DIFFERENTIABLE));
  CHECK(info_of("random_normal").flags == LOOM_OP_RANDOM);
  CHECK(info_of("nonzero").flags == LOOM_OP_DATA_SHAPE && info_of("nonzero").data_dependent_shape);
  CHECK(info_of("assign").flags == LOOM_OP_SIDE_EFFECT && info_of("assign").n_out == 0);
  CHECK(info_of("loop").flags == (LOOM_OP_SUBGRAPH | LOOM_OP_DATA_SHAPE | LOOM_OP_DIFFERENTIABLE));
  CHECK(info_of("argmax").flags == 0 && info_of("argmax").not_differentiable);
  CHECK(info_of("neg").n_attrs == 0 && loom_op_attr_count(op_named("neg")) == 0);
}

static void attr_facts(void) {
  loom_attr_info_t a = attr_of("leaky_relu", 0);
  CHECK(!strcmp(a.name, "alpha") && a.kind == LOOM_ATTR_FLOAT && a.optional && a.has_default);
  CHECK(a.default_float == 0.01 && !strcmp(a.default_text, "0.01"));
  a = attr_of("clamp", 0);
  CHECK(!strcmp(a.name, "min") && a.default_float == -INFINITY);
  a = attr_of("conv2d", 0);
  CHECK(!strcmp(a.name, "stride") && a.kind == LOOM_ATTR_INTS && a.n_default_ints == 2);
  CHECK(a.default_ints[0] == 1 && a.default_ints[1] == 1);
  a = attr_of("conv2d", 1);
  CHECK(!strcmp(a.name, "pads") && a.n_default_ints == 4 && a.default_ints[3] == 0);
  a = attr_of("sum", 0);
  CHECK(!strcmp(a.name, "axes") && a.optional && !a.has_default && !strcmp(a.default_text, ""));
  a = attr_of("sum", 1);
  CHECK(!strcmp(a.name, "keepdim") && a.kind == LOOM_ATTR_INT && a.default_int == 0);
  a = attr_of("one_hot", 1);
  CHECK(a.kind == LOOM_ATTR_DTYPE && a.default_int == LOOM_I64 && !strcmp(a.default_text, "i64"));
  a = attr_of("cast", 0);
  CHECK(a.kind == LOOM_ATTR_DTYPE && !a.optional && !a.has_default);
  a = attr_of("rms_norm", 1);
  CHECK(!strcmp(a.name, "eps") && a.default_float == 1e-6);
  a = attr_of("if", 1);
  CHECK(!strcmp(a.name, "else_graph") && a.kind == LOOM_ATTR_GRAPH && !a.optional);
  CHECK(!strcmp(loom_attr_kind_name(LOOM_ATTR_INTS), "ints"));
  CHECK(!strcmp(loom_attr_kind_name((loom_attr_kind_t)99), "?"));
}

/* Every op's schema parses, and the public view of it matches the table. */
static void schemas_parse(void) {
  for (int op = 0; op < loom_op_count(); op++) {
    const ir_schema_t *s = ir_op_schema((ir_op_t)op);
    if (s->error[0]) test_fail(__FILE__, __LINE__, "%s: %s", ir_ops[op].name, s->error);
    int found = -1;
    CHECK_OK(loom_op_find(ir_ops[op].name, &found));
    CHECK(found == op && loom_op_attr_count(op) == s->n);
    for (int k = 0; k < s->n; k++) {
      loom_attr_info_t a = LOOM_ATTR_INFO_INIT;
      CHECK_OK(loom_op_get_attr(op, k, &a));
      CHECK(!strcmp(a.name, s->a[k].name) && a.has_default == s->a[k].has_default);
      CHECK(a.has_default ? a.optional : !strcmp(a.default_text, ""));
    }
  }
}

/* ---- Errors ------------------------------------------------------------------- */

static void bad_calls(void) {
  loom_graph_t *g;
  loom_value_t x, y[2];
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(add_arg(g, F34, 0, &x));
  int op;
  CHECK_ERR(loom_op_find("nope", &op), LOOM_ERR_INVALID, "no op is called 'nope'");
  CHECK_ERR(loom_op_find("", &op), LOOM_ERR_INVALID, "no op is called ''");
  CHECK_ERR(loom_op_find("mu", &op), LOOM_ERR_INVALID, "'mu'"); /* a prefix of mul */
  CHECK_ERR(loom_op_find("mull", &op), LOOM_ERR_INVALID, "'mull'");
  CHECK_ERR(loom_graph_add_op(g, "nope", 1, &x, 0, NULL, 1, y, NULL), LOOM_ERR_INVALID, "nope");
  loom_attr_t a = loom_attr_float("alpha", 0.1);
  CHECK_ERR(loom_graph_add_op(g, "neg", 1, &x, 1, &a, 1, y, NULL), LOOM_ERR_INVALID,
            "neg: unknown attribute 'alpha' (takes: none)");
  CHECK_ERR(loom_graph_add_op(g, "cumsum", 1, &x, 0, NULL, 1, y, NULL), LOOM_ERR_INVALID,
            "cumsum: attribute 'axis' is required");
  a = loom_attr_float("axis", 1);
  CHECK_ERR(loom_graph_add_op(g, "cumsum", 1, &x, 1, &a, 1, y, NULL), LOOM_ERR_INVALID,
            "cumsum: attribute 'axis' must be int, not float");
  loom_attr_t twice[] = {loom_attr_int("axis", 1), loom_attr_int("axis", 0)};
  CHECK_ERR(loom_graph_add_op(g, "cumsum", 1, &x, 2, twice, 1, y, NULL), LOOM_ERR_INVALID,
            "'axis' is given twice");
  a = loom_attr_int("dtype", LOOM_F64);
  CHECK_ERR(loom_graph_add_op(g, "cast", 1, &x, 1, &a, 1, y, NULL), LOOM_ERR_INVALID,
            "cast: attribute 'dtype' must be dtype, not int");
  a = loom_attr_dtype("dtype", (loom_dtype_t)42);
  CHECK_ERR(loom_graph_add_op(g, "cast", 1, &x, 1, &a, 1, y, NULL), LOOM_ERR_DTYPE,
            "cast: attribute 'dtype' is 42, not a dtype");
  int64_t many[LOOM_MAX_ATTR_INTS + 1] = {0};
  a = loom_attr_ints("axes", LOOM_MAX_ATTR_INTS + 1, many);
  CHECK_ERR(loom_graph_add_op(g, "sum", 1, &x, 1, &a, 1, y, NULL), LOOM_ERR_INVALID,
            "sum: attribute 'axes' has 17 entries");
  CHECK_ERR(loom_graph_add_op(g, "add", 1, &x, 0, NULL, 1, y, NULL), LOOM_ERR_INVALID,
            "add: takes 2 to 2 inputs, got 1");
  CHECK_ERR(loom_graph_add_op(g, "exp", 1, (loom_value_t[]){{99}}, 0, NULL, 1, y, NULL),
            LOOM_ERR_INVALID, "exp: input 0");
  loom_value_t b;
  CHECK_OK(add_arg(g, B34, 1, &b));
  CHECK_ERR(loom_graph_add_op(g, "exp", 1, &b, 0, NULL, 1, y, NULL), LOOM_ERR_DTYPE,
            "exp: input 0 has dtype bool");
  a = loom_attr_int("k", 2);
  CHECK_ERR(loom_graph_add_op(g, "topk", 1, &x, 1, &a, 1, y, NULL), LOOM_ERR_INVALID,
            "topk: makes 2 outputs, room for 1");
  CHECK_ERR(loom_graph_add_op(g, "exp", 1, &x, 0, NULL, 1, NULL, NULL), LOOM_ERR_INVALID,
            "room for 1 outputs at NULL");
  CHECK_ERR(loom_graph_add_op(NULL, "exp", 1, &x, 0, NULL, 1, y, NULL), LOOM_ERR_INVALID,
            "the graph is null");
  CHECK_ERR(loom_graph_add_op_index(g, -1, 1, &x, 0, NULL, 1, y, NULL), LOOM_ERR_INVALID,
            "op index -1");
  CHECK_ERR(loom_graph_add_op_index(g, loom_op_count(), 1, &x, 0, NULL, 1, y, NULL),
            LOOM_ERR_INVALID, "loom_graph_add_op_index: op index");
  CHECK_ERR(loom_graph_add_op_index(g, op_named("add"), 1, &x, 0, NULL, 1, y, NULL),
            LOOM_ERR_INVALID, "add: takes");
  CHECK(loom_graph_num_nodes(g) == 0);
  int n_out = 0;
  CHECK_OK(loom_graph_add_op(g, "topk", 1, &x, 1, &a, 2, y, &n_out));
  CHECK(n_out == 2 && loom_graph_num_nodes(g) == 1);
  CHECK(loom_op_attr_count(-1) == -1 && loom_op_attr_count(loom_op_count()) == -1);
  loom_attr_info_t info = LOOM_ATTR_INFO_INIT;
  CHECK_ERR(loom_op_get_attr(op_named("neg"), 0, &info), LOOM_ERR_INVALID,
            "neg has 0 attributes");
  CHECK_ERR(loom_op_get_attr(-1, 0, &info), LOOM_ERR_INVALID, "op index -1");
  loom_graph_destroy(g);
}

/* Subgraphs passed to a failing call are destroyed (ASan would report a
 * leak otherwise), one owned by another graph is left to it, and the
 * graph keeps no subgraph of a failed call. */
static void subgraph_ownership(void) {
  loom_graph_t *g, *subs[2];
  loom_value_t in[3], y;
  const recipe_t *r = recipe_of("if");
  g = graph_with_inputs(r, in);
  if_branches(subs);
  loom_attr_t a[] = {loom_attr_graph("then_graph", subs[0]), loom_attr_graph("else_graph", subs[1])};
  CHECK_ERR(loom_graph_add_op(g, "if", 2, in, 2, a, 1, &y, NULL), LOOM_ERR_SHAPE,
            "then_graph takes 2 inputs, the node passes 1");
  CHECK(g->n_subgraphs == 0);
  if_branches(subs);
  a[0].graph = subs[0], a[1].graph = subs[1];
  loom_attr_t bad[] = {a[0], a[1], loom_attr_int("nope", 1)};
  CHECK_ERR(loom_graph_add_op(g, "if", 3, in, 3, bad, 1, &y, NULL), LOOM_ERR_INVALID,
            "unknown attribute 'nope'");
  if_branches(subs);
  a[0].graph = subs[0], a[1].graph = subs[0];
  CHECK_ERR(loom_graph_add_op(g, "if", 3, in, 2, a, 1, &y, NULL), LOOM_ERR_INVALID,
            "else_graph' is a subgraph another attribute passes too");
  loom_graph_destroy(subs[1]);
  if_branches(subs);
  a[0].graph = subs[0], a[1].graph = subs[1];
  CHECK_OK(loom_graph_add_op(g, "if", 3, in, 2, a, 1, &y, NULL));
  CHECK(g->n_subgraphs == 2);
  /* subs[0] now belongs to g: another call may not take it. */
  loom_graph_t *h;
  loom_value_t hin[3];
  h = graph_with_inputs(r, hin);
  loom_graph_t *other[2];
  if_branches(other);
  a[0].graph = subs[0], a[1].graph = other[1];
  loom_graph_destroy(other[0]);
  CHECK_ERR(loom_graph_add_op(h, "if", 3, hin, 2, a, 1, &y, NULL), LOOM_ERR_INVALID,
            "already belongs to a graph");
  CHECK(h->n_subgraphs == 0 && g->n_subgraphs == 2 && subs[0]->owner == g);
  loom_graph_destroy(h);
  loom_graph_destroy(g);
}

int main(void) {
  if (loom_comm_world(&comm) != LOOM_OK) {
    printf("no communicator (%s): the collectives are left out\n", loom_last_error());
    comm = NULL;
  }
  CHECK(!comm || core_comm_id(comm) == 1);
  TEST_RUN(schemas_parse);
  TEST_RUN(op_facts);
  TEST_RUN(attr_facts);
  TEST_RUN(add_op_equals_builder);
  TEST_RUN(defaults_are_computed);
  TEST_RUN(bad_calls);
  TEST_RUN(subgraph_ownership);
  loom_comm_destroy(comm);
  return test_summary();
}
