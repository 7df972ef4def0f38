/* Loom: building graphs, one call per op of the op table.
 *
 * Each call appends a node to g and returns its output value in *out.
 * Shapes are checked and inferred at once: a call whose inputs do not fit
 * fails with a message naming the op and the inputs' types. Axes may be
 * negative (counting from the end). Binary ops broadcast like NumPy and
 * need both operands in one dtype (cast first). */
#ifndef LOOM_OPS_H
#define LOOM_OPS_H

#include "loom/loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Elementwise, unary ------------------------------------------------ */
LOOM_API loom_status_t loom_neg(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_abs(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_exp(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_log(loom_graph_t *g, loom_value_t x, loom_value_t *out);
/* log(1 + x), without the cancellation of log(1 + x) when |x| is small. */
LOOM_API loom_status_t loom_log1p(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_expm1(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_sqrt(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_rsqrt(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_reciprocal(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_tanh(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_sigmoid(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_relu(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_leaky_relu(loom_graph_t *g, loom_value_t x, double alpha, loom_value_t *out);
LOOM_API loom_status_t loom_elu(loom_graph_t *g, loom_value_t x, double alpha, loom_value_t *out);
LOOM_API loom_status_t loom_gelu(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_gelu_tanh(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_silu(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_softplus(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_sin(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_cos(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_tan(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_asin(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_acos(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_atan(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_sinh(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_cosh(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_asinh(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_acosh(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_atanh(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_erf(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_floor(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_ceil(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_round(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_sign(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_not(loom_graph_t *g, loom_value_t x, loom_value_t *out);
/* ~x on integers; on bool, logical not. Float dtypes are refused. */
LOOM_API loom_status_t loom_bitwise_not(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_isnan(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_identity(loom_graph_t *g, loom_value_t x, loom_value_t *out);
/* x, through which no gradient flows. */
LOOM_API loom_status_t loom_stop_gradient(loom_graph_t *g, loom_value_t x, loom_value_t *out);
LOOM_API loom_status_t loom_cast(loom_graph_t *g, loom_value_t x, loom_dtype_t dtype, loom_value_t *out);
/* Either bound may be +-INFINITY for none. */
LOOM_API loom_status_t loom_clamp(loom_graph_t *g, loom_value_t x, double lo, double hi, loom_value_t *out);

/* ---- Elementwise, binary (broadcasting) -------------------------------- */
LOOM_API loom_status_t loom_add(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_sub(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_mul(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
/* Integers: floor division. */
LOOM_API loom_status_t loom_div(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_pow(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_maximum(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_minimum(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
/* The sign of b, as Python's %. */
LOOM_API loom_status_t loom_mod(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_eq(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_ne(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_lt(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_le(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_gt(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_ge(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_and(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_or(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_xor(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
/* a & b, a | b, a ^ b bit by bit, on integers and bool (float dtypes are
 * refused). */
LOOM_API loom_status_t loom_bitwise_and(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_bitwise_or(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_bitwise_xor(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
/* a << b and a >> b on integers, b of a's dtype. Left shifts wrap like the
 * dtype; right shifts are arithmetic (they copy the sign bit). A negative
 * b, or one of the dtype's bit width or more, gives 0 for a left shift and
 * a's sign (0 or -1) for a right one, as PyTorch 2 defines them (C leaves
 * such shifts undefined). */
LOOM_API loom_status_t loom_bitshift_left(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
LOOM_API loom_status_t loom_bitshift_right(loom_graph_t *g, loom_value_t a, loom_value_t b, loom_value_t *out);
/* cond (bool) ? a : b, all three broadcast together. */
LOOM_API loom_status_t loom_where(loom_graph_t *g, loom_value_t cond, loom_value_t a, loom_value_t b, loom_value_t *out);

/* ---- Reductions ----------------------------------------------------------
 * axes: n_axes entries (n_axes 0 and axes NULL: all axes). keepdim keeps
 * reduced dims with size 1. As in PyTorch, sum, prod and cumsum of
 * integers and bool give i64 (a sum of bools counts), and mean,
 * logsumexp and variance accept float dtypes only (cast first). */
LOOM_API loom_status_t loom_sum(loom_graph_t *g, loom_value_t x, int n_axes, const int64_t *axes, int keepdim, loom_value_t *out);
LOOM_API loom_status_t loom_mean(loom_graph_t *g, loom_value_t x, int n_axes, const int64_t *axes, int keepdim, loom_value_t *out);
LOOM_API loom_status_t loom_max(loom_graph_t *g, loom_value_t x, int n_axes, const int64_t *axes, int keepdim, loom_value_t *out);
LOOM_API loom_status_t loom_min(loom_graph_t *g, loom_value_t x, int n_axes, const int64_t *axes, int keepdim, loom_value_t *out);
LOOM_API loom_status_t loom_prod(loom_graph_t *g, loom_value_t x, int n_axes, const int64_t *axes, int keepdim, loom_value_t *out);
LOOM_API loom_status_t loom_logsumexp(loom_graph_t *g, loom_value_t x, int n_axes, const int64_t *axes, int keepdim, loom_value_t *out);
/* sum((x - mean)^2) / (n - correction). */
LOOM_API loom_status_t loom_variance(loom_graph_t *g, loom_value_t x, int n_axes, const int64_t *axes, int keepdim, int correction, loom_value_t *out);
/* Index (i64) of the first extreme along axis; has_axis 0: over the
 * flattened tensor. */
LOOM_API loom_status_t loom_argmax(loom_graph_t *g, loom_value_t x, int has_axis, int64_t axis, int keepdim, loom_value_t *out);
LOOM_API loom_status_t loom_argmin(loom_graph_t *g, loom_value_t x, int has_axis, int64_t axis, int keepdim, loom_value_t *out);
LOOM_API loom_status_t loom_cumsum(loom_graph_t *g, loom_value_t x, int64_t axis, int exclusive, int reverse, loom_value_t *out);
/* The k largest (largest 1) or smallest entries along axis, sorted, and
 * their i64 indices. */
LOOM_API loom_status_t loom_topk(loom_graph_t *g, loom_value_t x, int64_t k, int64_t axis, int largest, loom_value_t *values, loom_value_t *indices);

/* ---- Contractions -------------------------------------------------------- */
/* a @ b with NumPy semantics (1-D operands promoted, batch dims broadcast);
 * trans_a / trans_b swap the last two dims of a / b first. */
LOOM_API loom_status_t loom_matmul(loom_graph_t *g, loom_value_t a, loom_value_t b, int trans_a, int trans_b, loom_value_t *out);

typedef struct loom_conv_params {
  int64_t stride[2];         /* 0: 1 */
  int64_t pads[4];           /* top, left, bottom, right */
  int64_t dilation[2];       /* 0: 1 */
  int64_t output_padding[2]; /* conv_transpose2d only */
  int64_t groups;            /* 0: 1 */
} loom_conv_params_t;
/* x (N, C, H, W), w (O, C/groups, kh, kw); has_bias 0: bias is ignored.
 * p NULL: PyTorch's defaults, stride 1, no padding, dilation 1, groups 1
 * (as do zeros in *p); the same for the two calls below. */
LOOM_API loom_status_t loom_conv2d(loom_graph_t *g, loom_value_t x, loom_value_t w, int has_bias, loom_value_t bias, const loom_conv_params_t *p, loom_value_t *out);
/* x (N, C, H, W), w (C, O/groups, kh, kw). */
LOOM_API loom_status_t loom_conv_transpose2d(loom_graph_t *g, loom_value_t x, loom_value_t w, int has_bias, loom_value_t bias, const loom_conv_params_t *p, loom_value_t *out);
/* The gradient of conv2d's weight: x (N, C, H, W) and dy (N, O, Ho, Wo),
 * the gradient of conv2d's output, give (O, C/groups, kernel[0], kernel[1]). */
LOOM_API loom_status_t loom_conv2d_weight_grad(loom_graph_t *g, loom_value_t x, loom_value_t dy, const int64_t *kernel, const loom_conv_params_t *p, loom_value_t *out);

/* ---- Pooling and normalization ------------------------------------------- */
typedef struct loom_pool_params {
  int64_t kernel[2];
  int64_t stride[2];   /* 0: the kernel size */
  int64_t pads[4];     /* top, left, bottom, right */
  int64_t dilation[2]; /* max pool only; 0: 1 */
  int count_include_pad; /* avg pool only */
} loom_pool_params_t;
LOOM_API loom_status_t loom_max_pool2d(loom_graph_t *g, loom_value_t x, const loom_pool_params_t *p, loom_value_t *out);
LOOM_API loom_status_t loom_avg_pool2d(loom_graph_t *g, loom_value_t x, const loom_pool_params_t *p, loom_value_t *out);
LOOM_API loom_status_t loom_global_avg_pool(loom_graph_t *g, loom_value_t x, loom_value_t *out);
/* Gradients of the pools: x, the pool's input, and dy, the gradient of its
 * output, give the gradient of x (max: routed to each window's first
 * maximum, or its last NaN, as PyTorch; avg: spread over the window). */
LOOM_API loom_status_t loom_max_pool2d_grad(loom_graph_t *g, loom_value_t x, loom_value_t dy, const loom_pool_params_t *p, loom_value_t *out);
LOOM_API loom_status_t loom_avg_pool2d_grad(loom_graph_t *g, loom_value_t x, loom_value_t dy, const loom_pool_params_t *p, loom_value_t *out);
LOOM_API loom_status_t loom_softmax(loom_graph_t *g, loom_value_t x, int64_t axis, loom_value_t *out);
LOOM_API loom_status_t loom_log_softmax(loom_graph_t *g, loom_value_t x, int64_t axis, loom_value_t *out);
/* Normalizes over dims axis..rank-1; scale and bias (shape of those dims)
 * are optional: pass has_scale / has_bias 0. */
LOOM_API loom_status_t loom_layer_norm(loom_graph_t *g, loom_value_t x, int has_scale, loom_value_t scale, int has_bias, loom_value_t bias, int64_t axis, double eps, loom_value_t *out);
LOOM_API loom_status_t loom_rms_norm(loom_graph_t *g, loom_value_t x, int has_scale, loom_value_t scale, int64_t axis, double eps, loom_value_t *out);
/* x (N, C, ...); scale, bias, mean, var (C). training 0: normalizes with
 * the running statistics, which come back unchanged; training 1: with the
 * batch's, and new_mean / new_var are the updated running statistics
 * (momentum weights the batch: new = (1-m)*old + m*batch, unbiased var). */
LOOM_API loom_status_t loom_batch_norm(loom_graph_t *g, loom_value_t x, loom_value_t scale, loom_value_t bias, loom_value_t mean, loom_value_t var, double eps, double momentum, int training, loom_value_t *out, loom_value_t *new_mean, loom_value_t *new_var);

/* ---- Layout and indexing --------------------------------------------------- */
/* One entry may be -1 (inferred); entries may be symbolic dims. */
LOOM_API loom_status_t loom_reshape(loom_graph_t *g, loom_value_t x, int rank, const loom_dim_t *shape, loom_value_t *out);
/* perm NULL: reverse the dims. */
LOOM_API loom_status_t loom_transpose(loom_graph_t *g, loom_value_t x, const int64_t *perm, loom_value_t *out);
LOOM_API loom_status_t loom_expand(loom_graph_t *g, loom_value_t x, int rank, const loom_dim_t *shape, loom_value_t *out);
/* n_axes 0: every dim of size 1. */
LOOM_API loom_status_t loom_squeeze(loom_graph_t *g, loom_value_t x, int n_axes, const int64_t *axes, loom_value_t *out);
/* axes are positions in the output. */
LOOM_API loom_status_t loom_unsqueeze(loom_graph_t *g, loom_value_t x, int n_axes, const int64_t *axes, loom_value_t *out);
/* Python slicing per listed axis; steps NULL: 1; steps may be negative. */
LOOM_API loom_status_t loom_slice(loom_graph_t *g, loom_value_t x, int n, const int64_t *starts, const int64_t *ends, const int64_t *axes, const int64_t *steps, loom_value_t *out);
LOOM_API loom_status_t loom_concat(loom_graph_t *g, int n, const loom_value_t *xs, int64_t axis, loom_value_t *out);
/* outs receives n values. */
LOOM_API loom_status_t loom_split(loom_graph_t *g, loom_value_t x, int64_t axis, int n, const int64_t *sizes, loom_value_t *outs);
typedef enum loom_pad_mode { LOOM_PAD_CONSTANT, LOOM_PAD_REFLECT, LOOM_PAD_EDGE } loom_pad_mode_t;
/* pads: rank begins, then rank ends. A negative pad crops, as PyTorch's
 * F.pad: a dim becomes size + begin + end, which must not be negative;
 * crops apply after the positive pads (reflect and edge mirror or repeat
 * the uncropped input's edges). */
LOOM_API loom_status_t loom_pad(loom_graph_t *g, loom_value_t x, const int64_t *pads, loom_pad_mode_t mode, double value, loom_value_t *out);
LOOM_API loom_status_t loom_flip(loom_graph_t *g, loom_value_t x, int n_axes, const int64_t *axes, loom_value_t *out);
LOOM_API loom_status_t loom_tile(loom_graph_t *g, loom_value_t x, const int64_t *repeats, loom_value_t *out);
/* ONNX Gather: out = data indexed by indices (any rank) along axis. */
LOOM_API loom_status_t loom_gather(loom_graph_t *g, loom_value_t data, loom_value_t indices, int64_t axis, loom_value_t *out);
LOOM_API loom_status_t loom_index_select(loom_graph_t *g, loom_value_t data, loom_value_t index, int64_t axis, loom_value_t *out);
/* self with src added at positions index along axis (torch.scatter_add). */
LOOM_API loom_status_t loom_scatter_add(loom_graph_t *g, loom_value_t self, loom_value_t index, loom_value_t src, int64_t axis, loom_value_t *out);
LOOM_API loom_status_t loom_embedding(loom_graph_t *g, loom_value_t weight, loom_value_t indices, loom_value_t *out);
LOOM_API loom_status_t loom_one_hot(loom_graph_t *g, loom_value_t indices, int64_t depth, loom_dtype_t dtype, loom_value_t *out);

/* ---- Generators and random numbers ---------------------------------------- */
LOOM_API loom_status_t loom_arange(loom_graph_t *g, double start, double limit, double delta, loom_dtype_t dtype, loom_value_t *out);
LOOM_API loom_status_t loom_full(loom_graph_t *g, int rank, const loom_dim_t *shape, double value, loom_dtype_t dtype, loom_value_t *out);
/* Counter-based (Philox4x32-10): seed and offset are i64 scalar values, so
 * that a replayed graph draws new numbers when the offset changes. */
LOOM_API loom_status_t loom_random_uniform(loom_graph_t *g, loom_value_t seed, loom_value_t offset, int rank, const loom_dim_t *shape, double low, double high, loom_dtype_t dtype, loom_value_t *out);
LOOM_API loom_status_t loom_random_normal(loom_graph_t *g, loom_value_t seed, loom_value_t offset, int rank, const loom_dim_t *shape, double mean, double std, loom_dtype_t dtype, loom_value_t *out);
/* y = x * mask / (1 - p); mask (bool) keeps each element with prob 1-p. */
LOOM_API loom_status_t loom_dropout(loom_graph_t *g, loom_value_t x, loom_value_t seed, loom_value_t offset, double p, loom_value_t *out, loom_value_t *mask);
/* i64 (count, rank) indices of non-zero elements; count is known only
 * when the graph runs. */
LOOM_API loom_status_t loom_nonzero(loom_graph_t *g, loom_value_t x, loom_value_t *out);

/* ---- Control flow ------------------------------------------------------------
 * Branches and bodies are graphs of their own: a subgraph sees only its
 * inputs (pass the outer values it needs), its symbols match the outer
 * graph's by name, and it may not assign. g takes ownership of the
 * subgraphs passed here, also when the call fails (they are destroyed),
 * except one that already belongs to a graph, which is left alone; a
 * subgraph is destroyed with its owner (loom_graph_destroy on it does
 * nothing). Both run in the interpreter or, compiled, as executables of
 * their subgraphs built once. */

/* An absent optional input (loom_loop's max_trip or cond). */
#define LOOM_NO_VALUE ((loom_value_t){.id = -1})

/* out[0..n_out-1] = cond ? then_g(in...) : else_g(in...). cond: rank-0 bool
 * or integer (non-zero is true). Both branches take n_in inputs typed as
 * in[] and return n_out outputs of identical types. */
LOOM_API loom_status_t loom_if(loom_graph_t *g, loom_value_t cond, loom_graph_t *then_g, loom_graph_t *else_g, int n_in, const loom_value_t *in, int n_out, loom_value_t *out);
/* ONNX Loop. max_trip: rank-0 integer or LOOM_NO_VALUE; cond: rank-0 bool
 * or LOOM_NO_VALUE (then the body's cond output is ignored). Iteration i
 * runs while i < max_trip and cond holds. body inputs: (i64 iteration,
 * bool cond, carried..., invariants...); body outputs: (bool cond,
 * carried..., scan...), carried types equal to init's. out: the final
 * carried values, then each scan output stacked along a new leading
 * axis; that length is constant when max_trip is a constant and there
 * is no cond, else known only when the graph runs. */
LOOM_API loom_status_t loom_loop(loom_graph_t *g, loom_value_t max_trip, loom_value_t cond, loom_graph_t *body, int n_carried, const loom_value_t *init, int n_invariant, const loom_value_t *invariants, int n_out, loom_value_t *out);

#ifdef __cplusplus
}
#endif

#endif
