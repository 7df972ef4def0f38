/* Bucket padding with masking (src/passes/pad.h). Each case is a graph
 * builder called with the size of each padded group. The truth is the
 * unpadded graph run by the interpreter on the real inputs; the masked
 * graph runs on the same inputs padded up to the bucket with garbage (NaN,
 * infinities, huge values, zeros as integer divisors, out-of-range
 * indices), in the interpreter and compiled once per bucket for several
 * real sizes, and its outputs sliced back must equal the truth. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "harness.h"
#include "ir/ir.h"
#include "passes/pad.h"

#define MAX_IO 24
#define MAX_GROUPS 2

/* ---- Building graphs ------------------------------------------------------ */

/* The builders' calls write their result into `out_` through OUT; got()
 * checks the call and returns it (arguments are evaluated before the
 * call, so the write happens first). */
static loom_value_t out_;
#define OUT (&out_)
static loom_value_t got_at(loom_status_t s, const char *call, int line) {
  test_checks++;
  if (s != LOOM_OK)
    test_fail(__FILE__, line, "%s returned %s: %s", call, loom_status_name(s),
              loom_last_error());
  return out_;
}
#define got(call) got_at((call), #call, __LINE__)

/* Value ranges of the inputs of the graph being built (for indices). */
typedef struct range {
  double lo, hi;
} range_t;
static range_t ranges[MAX_IO];

static loom_value_t input(loom_graph_t *g, loom_dtype_t dt, int rank,
                          const loom_dim_t *dims, double lo, double hi) {
  int i = loom_graph_num_inputs(g);
  char name[16];
  snprintf(name, sizeof name, "in%d", i);
  ranges[i] = (range_t){lo, hi};
  return got(loom_graph_input(g, name, dt, rank, dims, OUT));
}

#define F32_IN(g, rank, ...) input(g, LOOM_F32, rank, (const loom_dim_t[]){__VA_ARGS__}, -2, 2)

static loom_value_t scalar(loom_graph_t *g, double v) {
  loom_tensor_t *t = test_tensor(LOOM_F32, 0, NULL, &v);
  loom_value_t y = got(loom_graph_constant(g, t, OUT));
  loom_tensor_destroy(t);
  return y;
}

static void output(loom_graph_t *g, loom_value_t v) { CHECK_OK(loom_graph_output(g, v)); }

static loom_value_t sum(loom_graph_t *g, loom_value_t x, int64_t axis, int keepdim) {
  return got(loom_sum(g, x, 1, &axis, keepdim, OUT));
}

typedef void (*build_fn)(loom_graph_t *g, const loom_dim_t *size);

/* ---- The cases --------------------------------------------------------------- */

/* Every reduction along a padded axis, and some along unpadded ones. */
static void build_reductions(loom_graph_t *g, const loom_dim_t *n) {
  loom_value_t x = F32_IN(g, 3, 3, n[0], 4);
  loom_value_t xi = input(g, LOOM_I32, 2, (const loom_dim_t[]){n[0], 3}, -5, 5);
  loom_value_t di = input(g, LOOM_I32, 2, (const loom_dim_t[]){n[0], 3}, 1, 4);
  int64_t a1 = 1, a12[2] = {1, 2};
  output(g, sum(g, x, 1, 0));
  output(g, got(loom_mean(g, x, 1, &a1, 1, OUT)));
  output(g, got(loom_max(g, x, 2, a12, 0, OUT)));
  output(g, got(loom_min(g, x, 1, &a1, 0, OUT)));
  output(g, got(loom_prod(g, got(loom_mul(g, x, scalar(g, 0.5), OUT)), 1, &a1, 0, OUT)));
  output(g, got(loom_logsumexp(g, x, 1, &a1, 0, OUT)));
  output(g, got(loom_variance(g, x, 1, &a1, 0, 1, OUT)));
  output(g, got(loom_variance(g, x, 0, NULL, 0, 0, OUT)));
  output(g, got(loom_mean(g, x, 0, NULL, 0, OUT)));
  output(g, got(loom_argmax(g, x, 1, 1, 0, OUT)));
  output(g, got(loom_argmin(g, x, 1, 1, 1, OUT)));
  output(g, sum(g, x, 2, 0)); /* along an unpadded axis: stays padded */
  output(g, got(loom_softmax(g, x, 1, OUT)));
  output(g, got(loom_log_softmax(g, x, 1, OUT)));
  output(g, got(loom_cumsum(g, x, 1, 0, 0, OUT)));
  output(g, got(loom_cumsum(g, x, 1, 1, 1, OUT)));
  loom_value_t vals, idx;
  CHECK_OK(loom_topk(g, x, 2, 1, 1, &vals, &idx));
  output(g, vals);
  output(g, idx);
  output(g, sum(g, xi, 0, 0));
  output(g, got(loom_max(g, xi, 1, (const int64_t[]){0}, 0, OUT)));
  output(g, got(loom_min(g, xi, 1, (const int64_t[]){0}, 0, OUT)));
  output(g, sum(g, got(loom_div(g, xi, di, OUT)), 0, 0));
  output(g, sum(g, got(loom_mod(g, xi, di, OUT)), 0, 0));
}

/* Attention over a padded sequence: QK^T, softmax, PV, batched by head. */
static void build_self_attention(loom_graph_t *g, const loom_dim_t *n) {
  loom_value_t q = F32_IN(g, 3, 2, n[0], 4), k = F32_IN(g, 3, 2, n[0], 4);
  loom_value_t v = F32_IN(g, 3, 2, n[0], 4);
  loom_value_t s = got(loom_mul(g, got(loom_matmul(g, q, k, 0, 1, OUT)), scalar(g, 0.5), OUT));
  loom_value_t p = got(loom_softmax(g, s, -1, OUT));
  output(g, got(loom_matmul(g, p, v, 0, 0, OUT)));
  output(g, p);
}

/* Cross attention: queries and keys padded in two groups. */
static void build_cross_attention(loom_graph_t *g, const loom_dim_t *n) {
  loom_value_t q = F32_IN(g, 2, n[0], 4), k = F32_IN(g, 2, n[1], 4);
  loom_value_t v = F32_IN(g, 2, n[1], 3);
  loom_value_t s = got(loom_matmul(g, q, k, 0, 1, OUT));
  loom_value_t p = got(loom_softmax(g, s, -1, OUT));
  output(g, got(loom_matmul(g, p, v, 0, 0, OUT)));
  /* The transposed form contracts a padded dim of b's rows. */
  output(g, got(loom_matmul(g, v, got(loom_transpose(g, p, NULL, OUT)), 1, 0, OUT)));
}

/* Normalizations whose statistics cross the padded feature axis. */
static void build_norms(loom_graph_t *g, const loom_dim_t *n) {
  loom_value_t x = F32_IN(g, 2, 3, n[0]), scale = F32_IN(g, 1, n[0]);
  loom_value_t bias = F32_IN(g, 1, n[0]), x3 = F32_IN(g, 3, 2, n[0], 3);
  loom_value_t none = {-1};
  output(g, got(loom_layer_norm(g, x, 1, scale, 1, bias, -1, 1e-5, OUT)));
  output(g, got(loom_rms_norm(g, x, 1, scale, -1, 1e-6, OUT)));
  output(g, got(loom_layer_norm(g, x3, 0, none, 0, none, 1, 1e-5, OUT)));
  /* Over an unpadded axis only: nothing to mask. */
  output(g, got(loom_layer_norm(g, got(loom_transpose(g, x3, (const int64_t[]){1, 0, 2}, OUT)),
                                0, none, 0, none, -1, 1e-5, OUT)));
}

/* Mean- and max-pooling over time after a projection. */
static void build_pooling(loom_graph_t *g, const loom_dim_t *n) {
  loom_value_t x = F32_IN(g, 3, 2, n[0], 4), w = F32_IN(g, 2, 4, 3);
  loom_value_t h = got(loom_tanh(g, got(loom_matmul(g, x, w, 0, 0, OUT)), OUT));
  int64_t t = 1;
  output(g, got(loom_mean(g, h, 1, &t, 0, OUT)));
  output(g, got(loom_max(g, h, 1, &t, 0, OUT)));
  output(g, got(loom_mean(g, h, 0, NULL, 0, OUT)));
}

static loom_value_t proj(loom_graph_t *g, loom_value_t x, loom_value_t w) {
  return got(loom_matmul(g, x, w, 0, 0, OUT));
}

/* A gated recurrence c_t = f_t c_(t-1) + i_t z_t without loops: with
 * F = cumsum(log f), c_t = e^F_t * sum_(s<=t) e^-F_s i_s z_s; h = o tanh(c).
 * Read out as the mean over time, the last state (index -1) and a
 * backward running sum. */
static void build_recurrence(loom_graph_t *g, const loom_dim_t *n) {
  loom_value_t x = F32_IN(g, 2, n[0], 4);
  loom_value_t wf = F32_IN(g, 2, 4, 4), wi = F32_IN(g, 2, 4, 4);
  loom_value_t wz = F32_IN(g, 2, 4, 4), wo = F32_IN(g, 2, 4, 4);
  loom_value_t half = scalar(g, 0.5);
  loom_value_t f = got(loom_sigmoid(g, proj(g, x, wf), OUT));
  f = got(loom_add(g, got(loom_mul(g, f, half, OUT)), half, OUT));
  loom_value_t i = got(loom_sigmoid(g, proj(g, x, wi), OUT));
  loom_value_t z = got(loom_tanh(g, proj(g, x, wz), OUT));
  loom_value_t F = got(loom_cumsum(g, got(loom_log(g, f, OUT)), 0, 0, 0, OUT));
  loom_value_t gate = got(loom_exp(g, got(loom_neg(g, F, OUT)), OUT));
  loom_value_t acc = got(loom_cumsum(g, got(loom_mul(g, gate, got(loom_mul(g, i, z, OUT)), OUT)),
                                     0, 0, 0, OUT));
  loom_value_t c = got(loom_mul(g, got(loom_exp(g, F, OUT)), acc, OUT));
  loom_value_t h = got(loom_mul(g, got(loom_sigmoid(g, proj(g, x, wo), OUT)),
                                got(loom_tanh(g, c, OUT)), OUT));
  int64_t t = 0;
  output(g, got(loom_mean(g, h, 1, &t, 0, OUT)));
  double last = -1;
  loom_tensor_t *li = test_tensor(LOOM_I64, 1, (const int64_t[]){1}, &last);
  loom_value_t lv = got(loom_graph_constant(g, li, OUT));
  loom_tensor_destroy(li);
  output(g, got(loom_gather(g, h, lv, 0, OUT)));
  output(g, got(loom_cumsum(g, h, 0, 0, 1, OUT)));
  output(g, c);
  /* Unrolled over 3 steps, with the batch padded instead. */
  loom_value_t xs = F32_IN(g, 3, 3, n[0], 4), u = F32_IN(g, 2, 4, 4);
  loom_value_t state = {-1};
  for (int64_t k = 0; k < 3; k++) {
    loom_value_t xk = got(loom_slice(g, xs, 1, &k, (const int64_t[]){k + 1}, (const int64_t[]){0},
                                     NULL, OUT));
    loom_value_t in = proj(g, got(loom_squeeze(g, xk, 1, (const int64_t[]){0}, OUT)), wf);
    if (k > 0) in = got(loom_add(g, in, proj(g, state, u), OUT));
    state = got(loom_tanh(g, in, OUT));
  }
  output(g, got(loom_mean(g, state, 1, &t, 0, OUT)));
}

/* Cross-entropy over padded tokens: logits given, and from embeddings. */
static void build_cross_entropy(loom_graph_t *g, const loom_dim_t *n) {
  loom_value_t logits = F32_IN(g, 2, n[0], 5);
  loom_value_t labels = input(g, LOOM_I64, 1, (const loom_dim_t[]){n[0]}, 0, 4);
  loom_value_t tokens = input(g, LOOM_I64, 1, (const loom_dim_t[]){n[0]}, 0, 5);
  loom_value_t emb = F32_IN(g, 2, 6, 4), w = F32_IN(g, 2, 4, 5);
  output(g, got(loom_cross_entropy(g, logits, labels, 2, 0.1, LOOM_REDUCTION_MEAN, OUT)));
  output(g, got(loom_cross_entropy(g, logits, labels, LOOM_NO_IGNORE_INDEX, 0,
                                   LOOM_REDUCTION_SUM, OUT)));
  output(g, got(loom_cross_entropy(g, logits, labels, LOOM_NO_IGNORE_INDEX, 0,
                                   LOOM_REDUCTION_NONE, OUT)));
  loom_value_t e = got(loom_embedding(g, emb, tokens, OUT));
  output(g, got(loom_cross_entropy(g, proj(g, e, w), labels, LOOM_NO_IGNORE_INDEX, 0,
                                   LOOM_REDUCTION_MEAN, OUT)));
}

/* Message passing over padded edges: gather, scatter_add, one_hot. */
static void build_graph_conv(loom_graph_t *g, const loom_dim_t *n) {
  loom_value_t h = F32_IN(g, 2, 4, 3);
  loom_value_t src = input(g, LOOM_I64, 1, (const loom_dim_t[]){n[0]}, 0, 3);
  loom_value_t dst = input(g, LOOM_I64, 1, (const loom_dim_t[]){n[0]}, 0, 3);
  loom_value_t msg = got(loom_index_select(g, h, src, 0, OUT));
  loom_value_t idx = got(loom_unsqueeze(g, dst, 1, (const int64_t[]){1}, OUT));
  idx = got(loom_expand(g, idx, 2, (const loom_dim_t[]){n[0], 3}, OUT));
  output(g, got(loom_scatter_add(g, h, idx, msg, 0, OUT)));
  loom_value_t hot = got(loom_one_hot(g, dst, 4, LOOM_F32, OUT));
  output(g, sum(g, hot, 0, 0));
  output(g, got(loom_gather(g, h, src, 0, OUT)));
}

/* A padded batch of images: convolution, training batch_norm, pooling. */
static void build_images(loom_graph_t *g, const loom_dim_t *n) {
  loom_value_t x = F32_IN(g, 4, n[0], 3, 4, 4), w = F32_IN(g, 4, 2, 3, 3, 3);
  loom_value_t scale = F32_IN(g, 1, 2), bias = F32_IN(g, 1, 2);
  loom_value_t rm = F32_IN(g, 1, 2), rv = input(g, LOOM_F32, 1, (const loom_dim_t[]){2}, 0.5, 2);
  loom_conv_params_t cp = {.pads = {1, 1, 1, 1}};
  loom_value_t y = got(loom_conv2d(g, x, w, 0, x, &cp, OUT));
  loom_value_t bn, nm, nv;
  CHECK_OK(loom_batch_norm(g, y, scale, bias, rm, rv, 1e-5, 0.1, 1, &bn, &nm, &nv));
  loom_pool_params_t pp = {.kernel = {2, 2}};
  loom_value_t p = got(loom_max_pool2d(g, bn, &pp, OUT));
  output(g, got(loom_global_avg_pool(g, p, OUT)));
  output(g, nm);
  output(g, nv);
  output(g, got(loom_argmax(g, x, 0, 0, 0, OUT))); /* flat: padding leads */
}

/* Layout ops around a padded axis, and elementwise broadcasting. */
static void build_layout(loom_graph_t *g, const loom_dim_t *n) {
  loom_value_t x = F32_IN(g, 2, n[0], 3), y = F32_IN(g, 2, 2, n[0]);
  loom_value_t xt = got(loom_transpose(g, x, NULL, OUT));
  loom_value_t c = got(loom_concat(g, 2, (const loom_value_t[]){xt, y}, 0, OUT));
  loom_value_t s = got(loom_slice(g, c, 1, (const int64_t[]){1}, (const int64_t[]){4},
                                  (const int64_t[]){0}, NULL, OUT));
  loom_value_t u = got(loom_unsqueeze(g, s, 1, (const int64_t[]){1}, OUT));
  loom_value_t e = got(loom_expand(g, u, 3, (const loom_dim_t[]){3, 2, n[0]}, OUT));
  loom_value_t r = got(loom_reshape(g, e, 2, (const loom_dim_t[]){6, n[0]}, OUT));
  loom_value_t f = got(loom_flip(g, r, 1, (const int64_t[]){0}, OUT));
  loom_value_t pd = got(loom_pad(g, f, (const int64_t[]){1, 0, 0, 0}, LOOM_PAD_CONSTANT, 0, OUT));
  loom_value_t tl = got(loom_tile(g, pd, (const int64_t[]){2, 1}, OUT));
  output(g, sum(g, tl, 1, 0));
  output(g, got(loom_softmax(g, got(loom_transpose(g, tl, NULL, OUT)), 0, OUT)));
  loom_value_t parts[2];
  CHECK_OK(loom_split(g, tl, 0, 2, (const int64_t[]){4, 10}, parts));
  loom_value_t bx = got(loom_add(g, got(loom_unsqueeze(g, x, 1, (const int64_t[]){0}, OUT)),
                                 got(loom_unsqueeze(g, xt, 1, (const int64_t[]){2}, OUT)), OUT));
  output(g, got(loom_max(g, bx, 0, NULL, 0, OUT)));
  output(g, parts[0]);
  /* Dropout draws by flat position: padding on axis 0 leaves it alone. */
  loom_value_t seed = input(g, LOOM_I64, 0, NULL, 0, 9), off = input(g, LOOM_I64, 0, NULL, 0, 9);
  loom_value_t dropped, keep;
  CHECK_OK(loom_dropout(g, x, seed, off, 0.5, &dropped, &keep));
  output(g, sum(g, dropped, 0, 0));
  output(g, keep);
}

/* Generators of a padded symbolic size (the symbolic form only: a
 * constant size cannot be told from any other dim). */
static void build_generators(loom_graph_t *g, const loom_dim_t *n) {
  loom_value_t x = F32_IN(g, 2, n[0], 3);
  loom_value_t ones = got(loom_full(g, 1, (const loom_dim_t[]){n[0]}, 1.0, LOOM_F32, OUT));
  output(g, sum(g, ones, 0, 0));
  loom_value_t b = got(loom_expand(g, scalar(g, 2.0), 2, (const loom_dim_t[]){n[0], 3}, OUT));
  output(g, got(loom_mean(g, got(loom_mul(g, x, b, OUT)), 0, NULL, 0, OUT)));
  loom_value_t seed = input(g, LOOM_I64, 0, NULL, 0, 9), off = input(g, LOOM_I64, 0, NULL, 0, 9);
  loom_value_t noise = got(loom_random_normal(g, seed, off, 2, (const loom_dim_t[]){n[0], 3}, 0, 1,
                                              LOOM_F32, OUT));
  output(g, sum(g, got(loom_mul(g, x, noise, OUT)), 0, 0));
}

/* A training step's graph, forward and backward: the pass runs after
 * autodiff, so that the backward's reductions over the padded axis (the
 * weight gradient contracts over tokens) are masked too. Symbolic only:
 * the gradient of a mean over a constant dim scales by the bucket size,
 * a constant the pass cannot tell from others. */
static void build_training(loom_graph_t *g, const loom_dim_t *n) {
  loom_value_t x = F32_IN(g, 2, n[0], 4), w = F32_IN(g, 2, 4, 5);
  loom_value_t labels = input(g, LOOM_I64, 1, (const loom_dim_t[]){n[0]}, 0, 4);
  loom_value_t none = {-1};
  loom_value_t logits = got(loom_layer_norm(g, proj(g, x, w), 0, none, 0, none, -1, 1e-5, OUT));
  loom_value_t ce = got(loom_cross_entropy(g, logits, labels, LOOM_NO_IGNORE_INDEX, 0,
                                           LOOM_REDUCTION_MEAN, OUT));
  loom_value_t s = got(loom_softmax(g, got(loom_matmul(g, x, x, 0, 1, OUT)), -1, OUT));
  loom_value_t a = got(loom_matmul(g, s, x, 0, 0, OUT));
  loom_value_t loss = got(loom_add(g, ce, got(loom_mean(g, got(loom_mul(g, a, a, OUT)),
                                                        0, NULL, 0, OUT)), OUT));
  loom_value_t grads[2];
  CHECK_OK(loom_grad(g, loss, 2, (const loom_value_t[]){w, x}, grads));
  output(g, loss);
  output(g, grads[0]);
  output(g, grads[1]);
}

/* The backward of a padded batch of images: the weight gradient sums
 * over images (conv2d_weight_grad), pooling and normalization gradients
 * work per image. */
static void build_image_training(loom_graph_t *g, const loom_dim_t *n) {
  loom_value_t x = F32_IN(g, 4, n[0], 2, 4, 4), w = F32_IN(g, 4, 3, 2, 3, 3);
  loom_value_t scale = F32_IN(g, 1, 3), bias = F32_IN(g, 1, 3);
  loom_value_t rm = F32_IN(g, 1, 3), rv = input(g, LOOM_F32, 1, (const loom_dim_t[]){3}, 0.5, 2);
  loom_conv_params_t cp = {.pads = {1, 1, 1, 1}};
  loom_value_t y = got(loom_conv2d(g, x, w, 0, x, &cp, OUT));
  loom_value_t bn, nm, nv;
  CHECK_OK(loom_batch_norm(g, y, scale, bias, rm, rv, 1e-5, 0.1, 1, &bn, &nm, &nv));
  loom_pool_params_t pp = {.kernel = {2, 2}};
  loom_value_t p = got(loom_max_pool2d(g, got(loom_relu(g, bn, OUT)), &pp, OUT));
  loom_value_t q = got(loom_avg_pool2d(g, p, &pp, OUT));
  loom_value_t loss = got(loom_mean(g, got(loom_mul(g, q, q, OUT)), 0, NULL, 0, OUT));
  loom_value_t grads[4];
  CHECK_OK(loom_grad(g, loss, 4, (const loom_value_t[]){w, x, scale, bias}, grads));
  output(g, loss);
  for (int i = 0; i < 4; i++) output(g, grads[i]);
}

/* ---- Running a case ---------------------------------------------------------- */

typedef struct pad_case {
  const char *name;
  build_fn build;
  int n_groups;
  int64_t bucket[MAX_GROUPS];
  int64_t real[2][MAX_GROUPS]; /* two real sizes per bucket */
  bool symbolic_only;
  bool compile_constant; /* also compile the constant form (cc is slow) */
} pad_case_t;

/* Tensors of the inputs at one size: shape of each input of g, with dims
 * equal to a group's handle set to that group's size. */
static void input_shape(loom_graph_t *g, int i, const loom_dim_t *handle,
                        int n_groups, const int64_t *size, int *rank,
                        int64_t *shape, loom_dtype_t *dt) {
  loom_dim_t dims[LOOM_MAX_RANK];
  loom_value_t v = {g->inputs[i]};
  CHECK_OK(loom_value_type(g, v, dt, rank, dims));
  for (int d = 0; d < *rank; d++) {
    shape[d] = dims[d];
    for (int k = 0; k < n_groups; k++)
      if (dims[d] == handle[k]) shape[d] = size[k];
  }
}

/* Garbage for padded positions: cycles through values that break
 * unmasked reductions, divisions and index reads. */
static double garbage(loom_dtype_t dt, int64_t i, int pattern) {
  static const double floats[2][6] = {{NAN, INFINITY, -INFINITY, 1e30, -1e30, 3.0},
                                      {-INFINITY, NAN, 7.0, 1e30, INFINITY, -2.5}};
  static const double ints[2][5] = {{0, -9, 1000000, -1, 7}, {99, 0, -100000, 5, -3}};
  if (dt == LOOM_F32 || dt == LOOM_F64) return floats[pattern][i % 6];
  if (dt == LOOM_BOOL) return (double)(i % 2);
  return ints[pattern][i % 5];
}

/* real copied into the leading block of a tensor of shape `shape`. */
static loom_tensor_t *padded_copy(const loom_tensor_t *real, const int64_t *shape,
                                  int pattern) {
  int rank = loom_tensor_rank(real);
  loom_dtype_t dt = loom_tensor_dtype(real);
  int64_t n = 1, idx[LOOM_MAX_RANK];
  for (int d = 0; d < rank; d++) n *= shape[d];
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) {
    int64_t rest = i, at = 0;
    for (int d = rank - 1; d >= 0; d--) idx[d] = rest % shape[d], rest /= shape[d];
    bool inside = true;
    for (int d = 0; d < rank; d++) {
      inside &= idx[d] < loom_tensor_dim(real, d);
      at = at * loom_tensor_dim(real, d) + idx[d];
    }
    v[i] = inside ? test_get(real, at) : garbage(dt, i, pattern);
  }
  loom_tensor_t *t = test_tensor(dt, rank, shape, v);
  free(v);
  return t;
}

/* got (bucket-sized) sliced back must equal want (real-sized); axes of
 * out_group carry padding and must have the bucket size. */
static void compare(const loom_tensor_t *want, const loom_tensor_t *gotv,
                    const int8_t *groups, const int64_t *bucket, const char *what) {
  int rank = loom_tensor_rank(want);
  CHECK(rank == loom_tensor_rank(gotv));
  for (int d = 0; d < rank; d++) {
    int64_t expect = groups[d] >= 0 ? bucket[groups[d]] : loom_tensor_dim(want, d);
    CHECK(loom_tensor_dim(gotv, d) == expect);
    if (loom_tensor_dim(gotv, d) != expect) {
      printf("  %s: dim %d is %lld, expected %lld\n", what, d,
             (long long)loom_tensor_dim(gotv, d), (long long)expect);
      return;
    }
  }
  int64_t n = loom_tensor_numel(want), idx[LOOM_MAX_RANK];
  int before = test_failures;
  for (int64_t i = 0; i < n && test_failures == before; i++) {
    int64_t rest = i, at = 0;
    for (int d = rank - 1; d >= 0; d--)
      idx[d] = rest % loom_tensor_dim(want, d), rest /= loom_tensor_dim(want, d);
    for (int d = 0; d < rank; d++) at = at * loom_tensor_dim(gotv, d) + idx[d];
    CHECK_NEAR(test_get(gotv, at), test_get(want, i), 2e-5, 2e-4);
  }
  if (test_failures != before) printf("  in %s\n", what);
}

/* Everything about one size: real inputs, their padded copies, the truth. */
typedef struct run_set {
  int n_in, n_out;
  loom_tensor_t *real_in[MAX_IO], *pad_in[MAX_IO + MAX_GROUPS], *want[MAX_IO];
} run_set_t;

static void make_inputs(loom_graph_t *g_real, loom_graph_t *g_pad, const pad_case_t *pc,
                        const loom_dim_t *h_real, const loom_dim_t *h_pad,
                        const int64_t *real, int pattern, run_set_t *rs) {
  rs->n_in = loom_graph_num_inputs(g_real);
  rs->n_out = loom_graph_num_outputs(g_real);
  CHECK(rs->n_in <= MAX_IO && rs->n_out <= MAX_IO);
  if (rs->n_in > MAX_IO || rs->n_out > MAX_IO) rs->n_in = rs->n_out = 0;
  for (int i = 0; i < rs->n_in; i++) {
    int rank;
    int64_t shape[LOOM_MAX_RANK], pshape[LOOM_MAX_RANK];
    loom_dtype_t dt;
    input_shape(g_real, i, h_real, pc->n_groups, real, &rank, shape, &dt);
    input_shape(g_pad, i, h_pad, pc->n_groups, pc->bucket, &rank, pshape, &dt);
    rs->real_in[i] = test_rand_tensor(dt, rank, shape, ranges[i].lo, ranges[i].hi);
    rs->pad_in[i] = padded_copy(rs->real_in[i], pshape, pattern);
  }
  for (int k = 0; k < pc->n_groups; k++) {
    double r = (double)real[k];
    rs->pad_in[rs->n_in + k] = test_tensor(LOOM_I64, 0, NULL, &r);
  }
  for (int k = 0; k < rs->n_out; k++) rs->want[k] = NULL;
  CHECK_OK(loom_interpret(g_real, rs->n_in, rs->real_in, rs->n_out, rs->want));
}

static void free_set(run_set_t *rs, int n_groups) {
  for (int i = 0; i < rs->n_in; i++) {
    loom_tensor_destroy(rs->real_in[i]);
    loom_tensor_destroy(rs->pad_in[i]);
  }
  for (int k = 0; k < n_groups; k++) loom_tensor_destroy(rs->pad_in[rs->n_in + k]);
  for (int k = 0; k < rs->n_out; k++) loom_tensor_destroy(rs->want[k]);
}

static void check_outputs(const run_set_t *rs, const pad_result_t *r, const pad_case_t *pc,
                          loom_tensor_t *const *outs, const char *how) {
  for (int k = 0; k < rs->n_out; k++) {
    char what[96];
    snprintf(what, sizeof what, "%s, %s, output %d", pc->name, how, k);
    if (rs->want[k] && outs[k]) compare(rs->want[k], outs[k], r->out_group[k], pc->bucket, what);
  }
}

static void interpret_masked(const run_set_t *rs, const pad_result_t *r, const pad_case_t *pc) {
  loom_tensor_t *outs[MAX_IO] = {0};
  CHECK_OK(loom_interpret(r->graph, rs->n_in + pc->n_groups, rs->pad_in, rs->n_out, outs));
  check_outputs(rs, r, pc, outs, "interpreted");
  for (int k = 0; k < rs->n_out; k++) loom_tensor_destroy(outs[k]);
}

static void run_compiled(loom_executable_t *e, const run_set_t *rs, const pad_result_t *r,
                         const pad_case_t *pc) {
  loom_tensor_t *outs[MAX_IO] = {0};
  for (int k = 0; k < rs->n_out; k++) CHECK_OK(loom_executable_new_output(e, k, &outs[k]));
  CHECK_OK(loom_executable_run(e, rs->n_in + pc->n_groups, rs->pad_in, rs->n_out, outs));
  check_outputs(rs, r, pc, outs, "compiled");
  for (int k = 0; k < rs->n_out; k++) loom_tensor_destroy(outs[k]);
}

/* The padded axes of g's inputs: dims equal to a group's handle. */
static int padded_dims(loom_graph_t *g, const loom_dim_t *handle, int n_groups,
                       pad_dim_t *dims) {
  int n = 0;
  for (int i = 0; i < loom_graph_num_inputs(g); i++) {
    const ir_type_t *t = &g->values[g->inputs[i]].type;
    for (int d = 0; d < t->rank; d++)
      for (int k = 0; k < n_groups; k++)
        if (t->dims[d] == handle[k]) dims[n++] = (pad_dim_t){i, d, k};
  }
  return n;
}

static const char *const sym_names[MAX_GROUPS] = {"t0", "t1"};

/* Symbolic form: one graph; the truth is that graph at the real sizes,
 * the masked graph compiled once for the bucket serves both real sizes. */
static void run_symbolic(const pad_case_t *pc) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t sym[MAX_GROUPS];
  for (int k = 0; k < pc->n_groups; k++) CHECK_OK(loom_dim_symbol(g, sym_names[k], &sym[k]));
  pc->build(g, sym);
  pad_dim_t dims[4 * MAX_IO];
  int nd = padded_dims(g, sym, pc->n_groups, dims);
  pad_result_t r;
  CHECK_OK(pass_mask_padding(g, nd, dims, &r));
  loom_executable_t *e = NULL;
  if (r.graph) {
    loom_compile_options_t o;
    loom_compile_options_init(&o);
    o.n_symbols = pc->n_groups, o.symbol_names = sym_names, o.symbol_values = pc->bucket;
    CHECK_OK(loom_compile(r.graph, &o, &e));
  }
  for (int s = 0; r.graph && s < 2; s++) {
    run_set_t rs;
    make_inputs(g, g, pc, sym, sym, pc->real[s], s, &rs);
    interpret_masked(&rs, &r, pc);
    if (e) run_compiled(e, &rs, &r, pc);
    free_set(&rs, pc->n_groups);
  }
  loom_executable_destroy(e);
  pad_result_free(&r);
  loom_graph_destroy(g);
}

/* Constant form: the graph built at the real sizes and at the bucket. */
static void run_constant(const pad_case_t *pc) {
  loom_graph_t *g_real, *g_pad;
  CHECK_OK(loom_graph_create(&g_real));
  CHECK_OK(loom_graph_create(&g_pad));
  pc->build(g_real, pc->real[0]);
  pc->build(g_pad, pc->bucket);
  pad_dim_t dims[4 * MAX_IO];
  int nd = padded_dims(g_pad, pc->bucket, pc->n_groups, dims);
  pad_result_t r;
  CHECK_OK(pass_mask_padding(g_pad, nd, dims, &r));
  if (r.graph) {
    run_set_t rs;
    make_inputs(g_real, g_pad, pc, pc->real[0], pc->bucket, pc->real[0], 0, &rs);
    interpret_masked(&rs, &r, pc);
    loom_executable_t *e = NULL;
    if (pc->compile_constant) CHECK_OK(loom_compile(r.graph, NULL, &e));
    if (e) run_compiled(e, &rs, &r, pc);
    loom_executable_destroy(e);
    free_set(&rs, pc->n_groups);
  }
  pad_result_free(&r);
  loom_graph_destroy(g_real);
  loom_graph_destroy(g_pad);
}

/* Bucket and real sizes differ from every other dim of the cases, so
 * that the constant form can find its padded axes by size. */
static const pad_case_t cases[] = {
    {"reductions", build_reductions, 1, {11}, {{5}, {2}}, false, true},
    {"self attention", build_self_attention, 1, {11}, {{7}, {1}}, false, true},
    {"cross attention", build_cross_attention, 2, {11, 13}, {{5, 7}, {9, 1}}, false, false},
    {"norms", build_norms, 1, {11}, {{7}, {5}}, false, false},
    {"pooling", build_pooling, 1, {11}, {{5}, {11}}, false, false}, /* no padding */
    {"recurrence", build_recurrence, 1, {11}, {{7}, {1}}, false, false},
    {"cross entropy", build_cross_entropy, 1, {11}, {{7}, {9}}, false, false},
    {"graph conv", build_graph_conv, 1, {11}, {{7}, {1}}, false, false},
    {"images", build_images, 1, {11}, {{5}, {1}}, false, true},
    {"layout", build_layout, 1, {11}, {{7}, {1}}, false, false},
    {"generators", build_generators, 1, {11}, {{7}, {1}}, true, false},
    {"training", build_training, 1, {11}, {{7}, {2}}, true, false},
    {"image training", build_image_training, 1, {11}, {{5}, {1}}, true, false},
};

static void test_cases(void) {
  test_seed(5);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int before = test_failures;
    run_symbolic(&cases[i]);
    if (!cases[i].symbolic_only) run_constant(&cases[i]);
    if (test_failures != before) printf("  case: %s\n", cases[i].name);
  }
}

/* ---- Unsupported graphs and bad arguments ------------------------------------- */

/* Builds x (t, 3) padded in group 0, lets `tail` add ops, and expects
 * the pass to refuse, naming `op`. */
typedef void (*tail_fn)(loom_graph_t *g, loom_value_t x, loom_dim_t t);

static void expect_unsupported(tail_fn tail, const char *op) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t t;
  CHECK_OK(loom_dim_symbol(g, "t", &t));
  loom_value_t x = F32_IN(g, 2, t, 3);
  tail(g, x, t);
  pad_result_t r;
  char text[64];
  snprintf(text, sizeof text, "%s (node", op);
  CHECK_ERR(pass_mask_padding(g, 1, (const pad_dim_t[]){{0, 0, 0}}, &r), LOOM_ERR_UNSUPPORTED,
            text);
  CHECK(r.graph == NULL);
  loom_graph_destroy(g);
}

static void merge_reshape(loom_graph_t *g, loom_value_t x, loom_dim_t t) {
  loom_dim_t n3;
  CHECK_OK(loom_dim_mul(g, t, 3, &n3));
  output(g, got(loom_reshape(g, x, 1, &n3, OUT)));
}
static void concat_padded(loom_graph_t *g, loom_value_t x, loom_dim_t t) {
  (void)t;
  output(g, got(loom_concat(g, 2, (const loom_value_t[]){x, x}, 0, OUT)));
}
static void flip_padded(loom_graph_t *g, loom_value_t x, loom_dim_t t) {
  (void)t;
  output(g, got(loom_flip(g, x, 1, (const int64_t[]){0}, OUT)));
}
static void pad_padded(loom_graph_t *g, loom_value_t x, loom_dim_t t) {
  (void)t;
  output(g, got(loom_pad(g, x, (const int64_t[]){0, 0, 1, 0}, LOOM_PAD_CONSTANT, 0, OUT)));
}
static void flat_argmax(loom_graph_t *g, loom_value_t x, loom_dim_t t) {
  (void)t;
  output(g, got(loom_argmax(g, got(loom_transpose(g, x, NULL, OUT)), 0, 0, 0, OUT)));
}
static void nonzero_padded(loom_graph_t *g, loom_value_t x, loom_dim_t t) {
  (void)t;
  output(g, got(loom_nonzero(g, x, OUT)));
}
static void conv_spatial(loom_graph_t *g, loom_value_t x, loom_dim_t t) {
  loom_value_t x4 = got(loom_reshape(g, x, 4, (const loom_dim_t[]){1, 1, t, 3}, OUT));
  loom_value_t w = F32_IN(g, 4, 1, 1, 3, 3);
  loom_conv_params_t cp = {.pads = {1, 1, 1, 1}};
  output(g, got(loom_conv2d(g, x4, w, 0, w, &cp, OUT)));
}
static void random_inner(loom_graph_t *g, loom_value_t x, loom_dim_t t) {
  (void)x;
  loom_value_t seed = input(g, LOOM_I64, 0, NULL, 0, 9);
  loom_value_t off = input(g, LOOM_I64, 0, NULL, 0, 9);
  output(g, got(loom_random_uniform(g, seed, off, 2, (const loom_dim_t[]){3, t}, 0, 1,
                                    LOOM_F32, OUT)));
}

/* Graphs symbolic sizes cannot express, in the constant form: a part
 * of a padded axis, and two groups' axes added (t and u would not
 * broadcast). */
static void expect_constant_unsupported(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = F32_IN(g, 2, 8, 3), y = F32_IN(g, 2, 8, 3);
  output(g, got(loom_slice(g, x, 1, (const int64_t[]){0}, (const int64_t[]){4}, NULL, NULL, OUT)));
  pad_result_t r;
  CHECK_ERR(pass_mask_padding(g, 1, (const pad_dim_t[]){{0, 0, 0}}, &r), LOOM_ERR_UNSUPPORTED,
            "slice (node");
  loom_graph_destroy(g);
  CHECK_OK(loom_graph_create(&g));
  x = F32_IN(g, 2, 8, 3), y = F32_IN(g, 2, 8, 3);
  output(g, got(loom_add(g, x, y, OUT)));
  CHECK_ERR(pass_mask_padding(g, 2, (const pad_dim_t[]){{0, 0, 0}, {1, 0, 1}}, &r),
            LOOM_ERR_UNSUPPORTED, "add (node");
  loom_graph_destroy(g);
}

static void test_unsupported(void) {
  expect_unsupported(merge_reshape, "reshape");
  expect_unsupported(concat_padded, "concat");
  expect_unsupported(flip_padded, "flip");
  expect_unsupported(pad_padded, "pad");
  expect_unsupported(flat_argmax, "argmax");
  expect_unsupported(nonzero_padded, "nonzero");
  expect_unsupported(conv_spatial, "conv2d");
  expect_unsupported(random_inner, "random_uniform");
  expect_constant_unsupported();
}

static void test_bad_arguments(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t t;
  CHECK_OK(loom_dim_symbol(g, "t", &t));
  loom_value_t x = F32_IN(g, 2, t, 3), y = F32_IN(g, 2, t, 4);
  output(g, got(loom_concat(g, 2, (const loom_value_t[]){x, y}, 1, OUT)));
  pad_result_t r;
  CHECK_ERR(pass_mask_padding(g, 1, (const pad_dim_t[]){{2, 0, 0}}, &r), LOOM_ERR_INVALID,
            "names input 2");
  CHECK_ERR(pass_mask_padding(g, 1, (const pad_dim_t[]){{0, 2, 0}}, &r), LOOM_ERR_AXIS,
            "axis 2");
  CHECK_ERR(pass_mask_padding(g, 2, (const pad_dim_t[]){{0, 0, 1}, {1, 0, 1}}, &r),
            LOOM_ERR_INVALID, "group 0 pads no dim");
  CHECK_ERR(pass_mask_padding(g, 2, (const pad_dim_t[]){{0, 0, 0}, {0, 1, 0}}, &r),
            LOOM_ERR_SHAPE, "one group has one size");
  CHECK_ERR(pass_mask_padding(g, 1, (const pad_dim_t[]){{0, 0, 0}}, &r), LOOM_ERR_INVALID,
            "input 1 has an axis");
  CHECK_ERR(pass_mask_padding(g, 2, (const pad_dim_t[]){{0, 0, 0}, {1, 0, 1}}, &r),
            LOOM_ERR_INVALID, "same symbolic size");
  CHECK_ERR(pass_mask_padding(g, -1, NULL, &r), LOOM_ERR_INVALID, "padded dims");
  /* Nothing padded: a copy with no extra input. */
  CHECK_OK(pass_mask_padding(g, 0, NULL, &r));
  CHECK(r.graph && loom_graph_num_inputs(r.graph) == 2 && r.n_groups == 0);
  pad_result_free(&r);
  /* Both inputs in one group: one real-size input, concat output padded. */
  CHECK_OK(pass_mask_padding(g, 2, (const pad_dim_t[]){{0, 0, 0}, {1, -2, 0}}, &r));
  CHECK(r.graph && loom_graph_num_inputs(r.graph) == 3 && r.n_groups == 1);
  CHECK(r.n_outputs == 1 && r.out_group[0][0] == 0 && r.out_group[0][1] == -1);
  pad_result_free(&r);
  loom_graph_destroy(g);
}

/* Ops along unpadded axes only need no mask: the graph keeps its nodes. */
static void test_nothing_to_mask(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t t;
  CHECK_OK(loom_dim_symbol(g, "t", &t));
  loom_value_t x = F32_IN(g, 3, 2, t, 3), w = F32_IN(g, 2, 3, 5);
  loom_value_t y = got(loom_softmax(g, proj(g, got(loom_relu(g, x, OUT)), w), -1, OUT));
  output(g, got(loom_max(g, y, 1, (const int64_t[]){2}, 1, OUT)));
  pad_result_t r;
  CHECK_OK(pass_mask_padding(g, 1, (const pad_dim_t[]){{0, 1, 0}}, &r));
  CHECK(r.graph && loom_graph_num_nodes(r.graph) == loom_graph_num_nodes(g));
  CHECK(r.out_group[0][0] == -1 && r.out_group[0][1] == 0 && r.out_group[0][2] == -1);
  pad_result_free(&r);
  loom_graph_destroy(g);
}

/* A mean over a padded axis and an unpadded symbolic one: the mean over
 * the latter comes first (its size is known only at run time). With a
 * correction, the variance would need that size as a number: refused. */
static void test_symbolic_unpadded_dims(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t t, b;
  CHECK_OK(loom_dim_symbol(g, "t", &t));
  CHECK_OK(loom_dim_symbol(g, "b", &b));
  loom_value_t x = F32_IN(g, 3, b, t, 2);
  output(g, got(loom_mean(g, x, 0, NULL, 0, OUT)));
  output(g, got(loom_variance(g, x, 2, (const int64_t[]){0, 1}, 1, 0, OUT)));
  pad_result_t r;
  CHECK_OK(pass_mask_padding(g, 1, (const pad_dim_t[]){{0, 1, 0}}, &r));
  loom_tensor_t *real = test_rand_tensor(LOOM_F32, 3, (const int64_t[]){3, 4, 2}, -2, 2);
  loom_tensor_t *in[2] = {padded_copy(real, (const int64_t[]){3, 8, 2}, 0), NULL};
  double four = 4;
  in[1] = test_tensor(LOOM_I64, 0, NULL, &four);
  loom_tensor_t *want[2] = {0}, *gotv[2] = {0};
  CHECK_OK(loom_interpret(g, 1, &real, 2, want));
  if (r.graph) CHECK_OK(loom_interpret(r.graph, 2, in, 2, gotv));
  for (int k = 0; k < 2 && want[k] && gotv[k]; k++)
    compare(want[k], gotv[k], r.out_group[k], (const int64_t[]){8}, "symbolic unpadded dims");
  for (int k = 0; k < 2; k++) {
    loom_tensor_destroy(want[k]);
    loom_tensor_destroy(gotv[k]);
    loom_tensor_destroy(in[k]);
  }
  loom_tensor_destroy(real);
  pad_result_free(&r);
  output(g, got(loom_variance(g, x, 2, (const int64_t[]){0, 1}, 1, 1, OUT)));
  CHECK_ERR(pass_mask_padding(g, 1, (const pad_dim_t[]){{0, 1, 0}}, &r), LOOM_ERR_UNSUPPORTED,
            "variance (node");
  loom_graph_destroy(g);
}

/* Every allocation of the pass may fail: it reports LOOM_ERR_NOMEM and
 * leaves nothing behind (the sanitizer build checks for leaks). */
static void test_fails_cleanly_at_every_allocation(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t t;
  CHECK_OK(loom_dim_symbol(g, "t", &t));
  build_training(g, &t);
  pad_dim_t dims[4 * MAX_IO];
  int nd = padded_dims(g, &t, 1, dims);
  loom_status_t s = LOOM_ERR_NOMEM;
  int n = 0, wrong = 0;
  pad_result_t r;
  for (; n < 100000 && s != LOOM_OK; n++) {
    core_alloc_fail_after(n);
    s = pass_mask_padding(g, nd, dims, &r);
    core_alloc_fail_after(-1);
    if (s != LOOM_OK && (s != LOOM_ERR_NOMEM || r.graph || r.out_group)) wrong++;
  }
  CHECK(wrong == 0 && n > 10 && s == LOOM_OK);
  pad_result_free(&r);
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(test_bad_arguments);
  TEST_RUN(test_unsupported);
  TEST_RUN(test_nothing_to_mask);
  TEST_RUN(test_symbolic_unpadded_dims);
  TEST_RUN(test_fails_cleanly_at_every_allocation);
  TEST_RUN(test_cases);
  return test_summary();
}
