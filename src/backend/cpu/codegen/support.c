/* What the C emitter can generate: fusion asks before it groups a node,
 * and a node refused here runs its reference kernel. */
#include "backend/cpu/codegen/cg.h"

typedef bool (*support_fn)(const loom_graph_t *g, const ir_node_t *n);

static loom_dtype_t in_dtype(const loom_graph_t *g, const ir_node_t *n, int i) {
  return g->values[n->in[i]].type.dtype;
}

static int in_rank(const loom_graph_t *g, const ir_node_t *n, int i) {
  return g->values[n->in[i]].type.rank;
}

/* Random ops would need Philox in the module; generators have no inputs
 * to broadcast from. */
static bool elementwise(const loom_graph_t *g, const ir_node_t *n) {
  if (ir_ops[n->op].flags & F_RANDOM) return false;
  return cg_expr_supported(g, n);
}

/* Moves copy element bytes, so every dtype is fine; only pad's constant
 * mode is generated (reflect and edge stay with the reference). */
static bool layout(const loom_graph_t *g, const ir_node_t *n) {
  (void)g;
  return n->op != IR_OP_PAD || ir_attr_int(n->attrs, "mode", LOOM_PAD_CONSTANT) ==
                                   LOOM_PAD_CONSTANT;
}

/* Reductions over trailing axes, the shape a reduction group takes, or
 * over axes that keep the last dim (a group of its own: bias gradients). */
static bool reduction(const loom_graph_t *g, const ir_node_t *n) {
  /* f32 sums and means over every dim but the channel (c_pool.c). */
  if (cg_is_channel_reduction(g, n)) return in_dtype(g, n, 0) == LOOM_F32;
  int rank = in_rank(g, n, 0);
  const int64_t *axes;
  int na = ir_attr_ints(n->attrs, "axes", &axes);
  /* All axes, or a scalar (whose one pseudo-axis is 0 or -1). */
  if (na < 0 || rank == 0) return true;
  bool red[LOOM_MAX_RANK] = {false};
  for (int i = 0; i < na; i++) red[axes[i] < 0 ? axes[i] + rank : axes[i]] = true;
  if (!red[rank - 1]) return true;
  int first = rank - na;
  for (int dd = 0; dd < rank; dd++)
    if (red[dd] != (dd >= first)) return false;
  return true;
}

/* f32 through the runtime's fast kernels; 1-D matmul operands stay with
 * the reference. */
static bool matmul(const loom_graph_t *g, const ir_node_t *n) {
  return in_dtype(g, n, 0) == LOOM_F32 && in_dtype(g, n, 1) == LOOM_F32 &&
         in_rank(g, n, 0) >= 2 && in_rank(g, n, 1) >= 2;
}

static bool conv2d(const loom_graph_t *g, const ir_node_t *n) {
  for (int i = 0; i < n->n_in; i++)
    if (in_dtype(g, n, i) != LOOM_F32) return false;
  return n->n_in < 3 || in_rank(g, n, 2) == 1;
}

/* The weight gradient's x and dy, f32 through the runtime's kernel. */
static bool conv2d_weight_grad(const loom_graph_t *g, const ir_node_t *n) {
  return in_dtype(g, n, 0) == LOOM_F32 && in_dtype(g, n, 1) == LOOM_F32;
}

/* batch_norm in f32 (c_pool.c). */
static bool batch_norm(const loom_graph_t *g, const ir_node_t *n) {
  for (int i = 0; i < n->n_in; i++)
    if (in_dtype(g, n, i) != LOOM_F32) return false;
  return in_rank(g, n, 0) >= 2;
}

/* max_pool2d_grad over NCHW in f32 (c_pool.c). */
static bool max_pool_grad(const loom_graph_t *g, const ir_node_t *n) {
  return in_dtype(g, n, 0) == LOOM_F32 && in_dtype(g, n, 1) == LOOM_F32 &&
         in_rank(g, n, 0) == 4 && in_rank(g, n, 1) == 4;
}

/* Pooling over NCHW in every float dtype (the op table admits no other). */
static bool pool2d(const loom_graph_t *g, const ir_node_t *n) {
  return dtype_is_float(in_dtype(g, n, 0)) && in_rank(g, n, 0) == 4;
}

/* Index ops (c_index.c): any data dtype is copied as bytes; scatter_add
 * adds in f32, f64, i32 and i64 (half precision keeps the reference). */
static bool index_op(const loom_graph_t *g, const ir_node_t *n) {
  int ind = n->op == IR_OP_ONE_HOT ? 0 : 1;
  if (!(DT_BIT(in_dtype(g, n, ind)) & DT_INT)) return false;
  if (n->op != IR_OP_SCATTER_ADD) return true;
  loom_dtype_t d = in_dtype(g, n, 0);
  return in_dtype(g, n, 2) == d &&
         (d == LOOM_F32 || d == LOOM_F64 || d == LOOM_I32 || d == LOOM_I64);
}

static const support_fn rules[IR_OP_COUNT] = {
#define LOOM_OP(ID, name, cls, ...) [IR_OP_##ID] = cls##_RULE,
#define EW_RULE elementwise
#define LAYOUT_RULE layout
#define REDUCE_RULE NULL
#define CONTRACT_RULE NULL
#define HOST_RULE NULL
#include "ir/ops.def"
#undef LOOM_OP
#undef EW_RULE
#undef LAYOUT_RULE
#undef REDUCE_RULE
#undef CONTRACT_RULE
#undef HOST_RULE
};

/* Rules by the op's row: contractions and the nodes with an emitter of
 * their own by name; generators (no inputs to broadcast from) and ops of
 * several outputs (split) not at all; folds, windows and index ops by
 * their flags; otherwise the class rule. */
static const struct {
  ir_op_t op;
  support_fn fn;
} own_rules[] = {
    {IR_OP_MATMUL, matmul},
    {IR_OP_CONV2D, conv2d},
    {IR_OP_CONV_TRANSPOSE2D, conv2d},
    {IR_OP_CONV2D_WEIGHT_GRAD, conv2d_weight_grad},
    {IR_OP_BATCH_NORM, batch_norm},
    {IR_OP_MAX_POOL2D_GRAD, max_pool_grad},
};

static support_fn rule_of(ir_op_t op) {
  for (size_t i = 0; i < sizeof own_rules / sizeof *own_rules; i++)
    if (own_rules[i].op == op) return own_rules[i].fn;
  if (ir_ops[op].in_max == 0 || ir_ops[op].n_out != 1) return NULL;
  if (ir_op_has(op, F_FOLD)) return reduction;
  if (ir_op_has(op, F_WINDOW)) return pool2d;
  if (ir_op_has(op, F_INDEX)) return index_op;
  return rules[op];
}

bool cg_op_generated(ir_op_t op) {
  if ((unsigned)op >= IR_OP_COUNT) return false;
  support_fn f = rule_of(op);
  if (f == elementwise) return !(ir_ops[op].flags & F_RANDOM) && cg_expr_has_rule(op);
  return f != NULL;
}

bool cg_supports(const loom_graph_t *g, int64_t node) {
  if (!g || node < 0 || node >= g->n_nodes) return false;
  const ir_node_t *n = &g->nodes[node];
  support_fn f = rule_of(n->op);
  return f && f(g, n);
}
