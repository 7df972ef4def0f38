/* Decomposition: composite ops become the primitives that fusion joins
 * (a reduction with elementwise work around it). Each rule builds its
 * replacement with a small builder that stops at the first failure, so
 * that the formulas read as formulas. Constants are rank-0 tensors of
 * the dtype the rule computes in, broadcast by the binary ops.
 *
 * The reference kernel of a composite computes in double and rounds once,
 * to the output's dtype. Half-precision (f16, bf16) rules therefore compute
 * in f32: their inputs are cast up, their result cast down, so that the
 * primitives between round to f32 and the whole op rounds to half once. */
#include "core/status.h"
#include "core/tensor.h"
#include "ir/rewrite.h"
#include "kernels/ref.h"
#include "passes/passes.h"

typedef struct builder {
  ir_rewriter_t *rw;
  const ir_node_t *n;  /* the src node being replaced */
  loom_dtype_t dtype;  /* computed in: input 0's, f32 for f16 and bf16 */
  loom_status_t s;     /* the first failure */
} builder_t;

/* An axis list; n -1 means "all axes" (the attribute left out). */
typedef struct axes {
  int n;
  int64_t v[LOOM_MAX_RANK];
} axes_t;

static bool half_dtype(loom_dtype_t d) { return d == LOOM_F16 || d == LOOM_BF16; }

static const ir_type_t *type_of(builder_t *b, int32_t d) {
  return &b->rw->dst->values[d].type;
}

/* Input k as the node has it; rules decide from its type before they emit. */
static int32_t raw_in(builder_t *b, int k) { return ir_rewrite_lookup(b->rw, b->n->in[k]); }
static const ir_type_t *in_type(builder_t *b, int k) { return type_of(b, raw_in(b, k)); }

static int32_t emit(builder_t *b, ir_op_t op, int n_in, const int32_t *ins,
                    const ir_attrs_t *a) {
  int32_t out = -1;
  if (b->s == LOOM_OK) b->s = ir_rewrite_emit(b->rw, op, n_in, ins, a, &out, 1);
  return b->s == LOOM_OK ? out : -1;
}

static int32_t op1(builder_t *b, ir_op_t op, int32_t x) {
  return emit(b, op, 1, &x, NULL);
}

static int32_t cast_to(builder_t *b, int32_t x, loom_dtype_t d) {
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "dtype", d);
  return emit(b, IR_OP_CAST, 1, &x, &a);
}

/* Input k in the dtype the rule computes in (a half one cast to f32). */
static int32_t in(builder_t *b, int k) {
  int32_t x = raw_in(b, k);
  return half_dtype(type_of(b, x)->dtype) ? cast_to(b, x, LOOM_F32) : x;
}

static int32_t op2(builder_t *b, ir_op_t op, int32_t x, int32_t y) {
  return emit(b, op, 2, (int32_t[]){x, y}, NULL);
}

static int32_t scalar(builder_t *b, double v) {
  loom_tensor_t *t = NULL;
  int32_t out = -1;
  if (b->s == LOOM_OK) b->s = tensor_new(b->dtype, 0, NULL, &t);
  if (b->s != LOOM_OK) return -1;
  ref_set(t, 0, v);
  b->s = ir_rewrite_constant(b->rw, t, &out);
  return b->s == LOOM_OK ? out : -1;
}

static int32_t reduce(builder_t *b, ir_op_t op, int32_t x, const axes_t *ax,
                      bool keepdim) {
  ir_attrs_t a = {0};
  if (ax->n >= 0) ir_attrs_ints(&a, "axes", ax->n, ax->v);
  ir_attrs_int(&a, "keepdim", keepdim);
  return emit(b, op, 1, &x, &a);
}

/* The maximum over ax with keepdim, which softmax and logsumexp subtract:
 * -inf over an axis that a run finds empty (empty_ok; nothing reads it
 * then but an empty result or logsumexp's -inf), where max would fail. */
static int32_t shift_max(builder_t *b, int32_t x, const axes_t *ax) {
  ir_attrs_t a = {0};
  if (ax->n >= 0) ir_attrs_ints(&a, "axes", ax->n, ax->v);
  ir_attrs_int(&a, "keepdim", 1);
  ir_attrs_int(&a, "empty_ok", 1);
  return emit(b, IR_OP_MAX, 1, &x, &a);
}

/* The axes attribute of the node, normalized, or all of rank. */
static axes_t node_axes(const ir_node_t *n, int rank) {
  axes_t ax = {.n = -1};
  const int64_t *v;
  int count = ir_attr_ints(n->attrs, "axes", &v);
  if (count < 0) return ax;
  ax.n = count;
  for (int i = 0; i < count; i++) ax.v[i] = v[i] < 0 ? v[i] + rank : v[i];
  return ax;
}

/* Axes from..rank-1. */
static axes_t trailing_axes(int from, int rank) {
  axes_t ax = {.n = 0};
  for (int d = from; d < rank; d++) ax.v[ax.n++] = d;
  return ax;
}

static int node_axis(const ir_node_t *n, int rank) {
  int64_t axis = ir_attr_int(n->attrs, "axis", -1);
  return (int)(axis < 0 ? axis + rank : axis);
}

/* The count of elements reduced over ax in t; -1 when symbolic. */
static int64_t reduced_count(const ir_type_t *t, const axes_t *ax) {
  int64_t count = 1;
  for (int d = 0; d < t->rank; d++) {
    bool red = ax->n < 0;
    for (int i = 0; i < ax->n; i++) red |= ax->v[i] == d;
    if (!red) continue;
    if (!ir_dim_is_const(t->dims[d])) return -1;
    count *= t->dims[d];
  }
  return count;
}

/* sum * (1/n) when n is known and positive; else the mean op. */
static int32_t mean_of(builder_t *b, int32_t x, const axes_t *ax, bool keepdim) {
  if (b->s != LOOM_OK) return -1;
  int64_t count = reduced_count(type_of(b, x), ax);
  if (count <= 0) return reduce(b, IR_OP_MEAN, x, ax, keepdim);
  int32_t sum = reduce(b, IR_OP_SUM, x, ax, keepdim);
  return op2(b, IR_OP_MUL, sum, scalar(b, 1.0 / (double)count));
}

/* Max over a dim of size 0 has no value: such nodes stay whole. */
static bool has_empty_axis(const ir_type_t *t, const axes_t *ax) {
  return reduced_count(t, ax) == 0;
}

/* ---- Rules: each returns the replacement of output 0, or -1 to keep the
 * node as it is (deciding before it emits anything). */

typedef int32_t (*decompose_fn)(builder_t *b);

static int32_t softmax_like(builder_t *b, bool log_form) {
  const ir_type_t *t = in_type(b, 0);
  if (t->rank == 0) return -1;
  axes_t ax = {.n = 1, .v = {node_axis(b->n, t->rank)}};
  if (has_empty_axis(t, &ax)) return -1;
  int32_t x = in(b, 0);
  int32_t shifted = op2(b, IR_OP_SUB, x, shift_max(b, x, &ax));
  int32_t e = op1(b, IR_OP_EXP, shifted);
  int32_t sum = reduce(b, IR_OP_SUM, e, &ax, true);
  if (log_form) return op2(b, IR_OP_SUB, shifted, op1(b, IR_OP_LOG, sum));
  return op2(b, IR_OP_DIV, e, sum);
}

static int32_t dec_softmax(builder_t *b) { return softmax_like(b, false); }
static int32_t dec_log_softmax(builder_t *b) { return softmax_like(b, true); }

/* x * rsqrt(mean(x*x) + eps), x centered first for layer_norm; then the
 * optional scale and bias. */
static int32_t norm(builder_t *b, bool centered) {
  int rank = in_type(b, 0)->rank;
  int32_t x = in(b, 0);
  axes_t ax = trailing_axes(node_axis(b->n, rank), rank);
  if (centered) x = op2(b, IR_OP_SUB, x, mean_of(b, x, &ax, true));
  int32_t var = mean_of(b, op2(b, IR_OP_MUL, x, x), &ax, true);
  double eps = ir_op_float(b->n->op, b->n->attrs, "eps");
  int32_t inv = op1(b, IR_OP_RSQRT, op2(b, IR_OP_ADD, var, scalar(b, eps)));
  int32_t y = op2(b, IR_OP_MUL, x, inv);
  if (b->n->n_in > 1) y = op2(b, IR_OP_MUL, y, in(b, 1));
  if (b->n->n_in > 2) y = op2(b, IR_OP_ADD, y, in(b, 2));
  return y;
}

static int32_t dec_layer_norm(builder_t *b) { return norm(b, true); }
static int32_t dec_rms_norm(builder_t *b) { return norm(b, false); }

/* gelu and gelu_tanh stay whole: written with erf or tanh they lose all
 * their digits for x < 0 (1 + erf(x / sqrt 2) cancels), and their own
 * codegen rules compute forms that do not (c_expr.c). */

static int32_t dec_silu(builder_t *b) {
  int32_t x = in(b, 0);
  return op2(b, IR_OP_MUL, x, op1(b, IR_OP_SIGMOID, x));
}

/* Inference: y = x*k + c per channel, k = scale * rsqrt(var + eps) and
 * c = bias - mean*k shaped (C, 1, ...) to broadcast over (N, C, ...).
 * The running statistics pass through unchanged. */
static int32_t dec_batch_norm(builder_t *b) {
  if (ir_attr_int(b->n->attrs, "training", 0) != 0) return -1;
  int rank = in_type(b, 0)->rank;
  int32_t x = in(b, 0), scale = in(b, 1), bias = in(b, 2), mean = in(b, 3), var = in(b, 4);
  double eps = ir_op_float(b->n->op, b->n->attrs, "eps");
  int32_t k = op2(b, IR_OP_MUL, scale,
                  op1(b, IR_OP_RSQRT, op2(b, IR_OP_ADD, var, scalar(b, eps))));
  int32_t c = op2(b, IR_OP_SUB, bias, op2(b, IR_OP_MUL, mean, k));
  if (rank > 2) {
    axes_t ax = trailing_axes(1, rank - 1);
    ir_attrs_t a = {0};
    ir_attrs_ints(&a, "axes", ax.n, ax.v);
    k = emit(b, IR_OP_UNSQUEEZE, 1, &k, &a);
    c = emit(b, IR_OP_UNSQUEEZE, 1, &c, &a);
  }
  ir_rewrite_map(b->rw, b->n->out[1], raw_in(b, 3));
  ir_rewrite_map(b->rw, b->n->out[2], raw_in(b, 4));
  return op2(b, IR_OP_ADD, op2(b, IR_OP_MUL, x, k), c);
}

/* m + log(sum(e^(x - m))), m the maximum with keepdim. An infinite or NaN
 * m is replaced by 0 (m - m is NaN exactly then), so that a line of -inf
 * gives -inf and one holding +inf gives +inf, as the kernel does. */
static int32_t dec_logsumexp(builder_t *b) {
  int rank = in_type(b, 0)->rank; /* emits move dst's values: no pointer kept */
  axes_t ax = node_axes(b->n, rank);
  if (has_empty_axis(in_type(b, 0), &ax)) return -1;
  int32_t x = in(b, 0);
  bool keepdim = ir_attr_int(b->n->attrs, "keepdim", 0) != 0;
  int32_t m = shift_max(b, x, &ax);
  int32_t bad = op1(b, IR_OP_ISNAN, op2(b, IR_OP_SUB, m, m));
  m = emit(b, IR_OP_WHERE, 3, (int32_t[]){bad, scalar(b, 0.0), m}, NULL);
  int32_t sum = reduce(b, IR_OP_SUM, op1(b, IR_OP_EXP, op2(b, IR_OP_SUB, x, m)), &ax, true);
  int32_t y = op2(b, IR_OP_ADD, op1(b, IR_OP_LOG, sum), m);
  if (keepdim) return y;
  axes_t drop = ax.n < 0 ? trailing_axes(0, rank) : ax;
  if (drop.n == 0) return y;
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "axes", drop.n, drop.v);
  return emit(b, IR_OP_SQUEEZE, 1, &y, &a);
}

/* mean((x - mean(x))^2) * n / (n - correction). */
static int32_t dec_variance(builder_t *b) {
  const ir_type_t *t = in_type(b, 0);
  axes_t ax = node_axes(b->n, t->rank);
  int64_t count = reduced_count(t, &ax);
  int64_t correction = ir_attr_int(b->n->attrs, "correction", 0);
  if (count <= correction || (correction != 0 && count < 0)) return -1;
  int32_t x = in(b, 0);
  bool keepdim = ir_attr_int(b->n->attrs, "keepdim", 0) != 0;
  int32_t centered = op2(b, IR_OP_SUB, x, mean_of(b, x, &ax, true));
  int32_t var = mean_of(b, op2(b, IR_OP_MUL, centered, centered), &ax, keepdim);
  if (correction == 0) return var;
  return op2(b, IR_OP_MUL, var, scalar(b, (double)count / (double)(count - correction)));
}

static int32_t dec_mean(builder_t *b) {
  axes_t ax = node_axes(b->n, in_type(b, 0)->rank);
  if (reduced_count(in_type(b, 0), &ax) <= 0) return -1;
  return mean_of(b, in(b, 0), &ax, ir_attr_int(b->n->attrs, "keepdim", 0) != 0);
}

/* The mean over the spatial dims, kept as size-1 dims: a reduction over
 * trailing axes, which fuses and has generated code. The mean op (not
 * sum * 1/n) divides the double sum as the reference kernel does. */
static int32_t dec_global_avg_pool(builder_t *b) {
  const ir_type_t *t = in_type(b, 0);
  axes_t ax = trailing_axes(2, t->rank);
  if (has_empty_axis(t, &ax)) return -1;
  return reduce(b, IR_OP_MEAN, in(b, 0), &ax, true);
}

/* Each op's decomposition, named by the decomp column of its row. */
#define dec_NONE NULL
static const decompose_fn decomposers[IR_OP_COUNT] = {
#define LOOM_OP(ID, nm, cls, imin, imax, nout, dt, fl, shp, ref, grad, dec, ...) \
  [IR_OP_##ID] = dec_##dec,
#include "ir/ops.def"
#undef LOOM_OP
};
#undef dec_NONE

static loom_status_t decompose_node(ir_rewriter_t *rw, int64_t i) {
  const ir_node_t *n = &rw->src->nodes[i];
  decompose_fn fn = decomposers[n->op];
  for (int k = 0; fn && k < n->n_in; k++)
    if (ir_rewrite_lookup(rw, n->in[k]) < 0) fn = NULL; /* copy reports it */
  if (!fn) return ir_rewrite_copy(rw, i);
  loom_dtype_t d = rw->src->values[n->in[0]].type.dtype;
  builder_t b = {.rw = rw, .n = n, .dtype = half_dtype(d) ? LOOM_F32 : d};
  int32_t y = fn(&b);
  const ir_type_t *want = &rw->src->values[n->out[0]].type;
  if (y >= 0 && type_of(&b, y)->dtype != want->dtype) y = cast_to(&b, y, want->dtype);
  LOOM_TRY(b.s);
  if (y < 0) return ir_rewrite_copy(rw, i);
  if (!ir_type_equal(type_of(&b, y), want)) {
    char got_s[96], want_s[96];
    return loom_fail(LOOM_ERR_GRAPH, "internal: decomposing %s made %s, not %s",
                     ir_ops[n->op].name, ir_type_str(rw->dst, type_of(&b, y), got_s, sizeof got_s),
                     ir_type_str(rw->dst, want, want_s, sizeof want_s));
  }
  ir_rewrite_map(rw, n->out[0], y);
  return LOOM_OK;
}

loom_status_t pass_decompose(const loom_graph_t *src, loom_graph_t **out) {
  LOOM_CHECK_ARG(src);
  LOOM_CHECK_ARG(out);
  ir_rewriter_t rw;
  LOOM_TRY(ir_rewrite_begin(src, &rw));
  for (int64_t i = 0; i < src->n_nodes; i++) {
    loom_status_t s = decompose_node(&rw, i);
    if (s != LOOM_OK) {
      ir_rewrite_abort(&rw);
      return s;
    }
  }
  return ir_rewrite_finish(&rw, out);
}
