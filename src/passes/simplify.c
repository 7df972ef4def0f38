/* Algebraic simplification: each rule looks at one node (and at what
 * produced its inputs in the new graph) and either replaces it or leaves
 * it to be copied. A rule that forwards a value does so only when that
 * value has exactly the node's type, so that no shape or dtype changes. */
#include <string.h>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/rewrite.h"
#include "kernels/ref.h"
#include "passes/passes.h"

/* Constants larger than this are not scanned for a uniform value. */
#define UNIFORM_SCAN_MAX 4096
/* A split into more pieces than this keeps its reference kernel. */
#define SPLIT_MAX_PIECES 64

typedef loom_status_t (*rule_fn)(ir_rewriter_t *rw, const ir_node_t *n,
                                 bool *done);

static const ir_type_t *dst_type(const ir_rewriter_t *rw, int32_t d) {
  return &rw->dst->values[d].type;
}

/* The node of dst that produces d, or NULL. */
static const ir_node_t *producer(const ir_rewriter_t *rw, int32_t d) {
  const ir_value_t *v = &rw->dst->values[d];
  return v->kind == IR_VALUE_NODE ? &rw->dst->nodes[v->node] : NULL;
}

/* Whether every element of d is one same value, found in *out: a constant
 * scanned whole, or a full node. */
static bool uniform_value(const ir_rewriter_t *rw, int32_t d, double *out) {
  const ir_value_t *v = &rw->dst->values[d];
  const ir_node_t *p = producer(rw, d);
  if (p && p->op == IR_OP_FULL) {
    *out = ir_op_float(p->op, p->attrs, "value");
    return true;
  }
  if (v->kind != IR_VALUE_CONST) return false;
  int64_t n = shape_numel(v->data->rank, v->data->shape);
  if (n == 0 || n > UNIFORM_SCAN_MAX) return false;
  double first = ref_get(v->data, 0);
  for (int64_t i = 1; i < n; i++)
    if (ref_get(v->data, i) != first) return false;
  *out = first;
  return true;
}

static bool is_uniform(const ir_rewriter_t *rw, int32_t d, double want) {
  double v = 0.0;
  return uniform_value(rw, d, &v) && v == want;
}

/* Maps the node's output to dst value x when x has its type exactly. */
static void forward(ir_rewriter_t *rw, const ir_node_t *n, int32_t x,
                    bool *done) {
  if (!ir_type_equal(dst_type(rw, x), &rw->src->values[n->out[0]].type)) return;
  ir_rewrite_map(rw, n->out[0], x);
  *done = true;
}

static int32_t in_of(const ir_rewriter_t *rw, const ir_node_t *n, int k) {
  return ir_rewrite_lookup(rw, n->in[k]);
}

/* Emits op on dst inputs and maps n's single output to the result. */
static loom_status_t replace(ir_rewriter_t *rw, const ir_node_t *n, ir_op_t op,
                             int n_in, const int32_t *in, const ir_attrs_t *a,
                             bool *done) {
  int32_t out;
  LOOM_TRY(ir_rewrite_emit(rw, op, n_in, in, a, &out, 1));
  /* A replacement of another type is left dead for DCE; the node is copied. */
  if (!ir_type_equal(dst_type(rw, out), &rw->src->values[n->out[0]].type)) return LOOM_OK;
  ir_rewrite_map(rw, n->out[0], out);
  *done = true;
  return LOOM_OK;
}

/* ---- Rules --------------------------------------------------------------- */

/* x*1, 1*x, x/1. */
static loom_status_t rule_one(ir_rewriter_t *rw, const ir_node_t *n, bool *done) {
  if (is_uniform(rw, in_of(rw, n, 1), 1.0)) forward(rw, n, in_of(rw, n, 0), done);
  if (!*done && n->op == IR_OP_MUL && is_uniform(rw, in_of(rw, n, 0), 1.0))
    forward(rw, n, in_of(rw, n, 1), done);
  return LOOM_OK;
}

/* x broadcast to n's output shape, when only broadcasting tells them
 * apart (a zero of shape (1, D) added to x (E, 1), as an index is built
 * for scatter_add): an expand, whose entries a later op can see do not
 * vary along the broadcast dims. */
static loom_status_t broadcast_to(ir_rewriter_t *rw, const ir_node_t *n, int32_t x,
                                  bool *done) {
  const ir_type_t *xt = dst_type(rw, x), *t = &rw->src->values[n->out[0]].type;
  if (xt->dtype != t->dtype || xt->rank > t->rank) return LOOM_OK;
  for (int i = 0; i < xt->rank; i++) {
    ir_dim_t d = xt->dims[i], want = t->dims[t->rank - xt->rank + i];
    if (d != want && d != 1) return LOOM_OK;
  }
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "shape", t->rank, t->dims);
  return replace(rw, n, IR_OP_EXPAND, 1, &x, &a, done);
}

/* x+0, 0+x, x-0 (x broadcast by the zero). */
static loom_status_t rule_zero(ir_rewriter_t *rw, const ir_node_t *n, bool *done) {
  int32_t x = -1;
  if (is_uniform(rw, in_of(rw, n, 1), 0.0)) x = in_of(rw, n, 0);
  else if (n->op == IR_OP_ADD && is_uniform(rw, in_of(rw, n, 0), 0.0)) x = in_of(rw, n, 1);
  if (x < 0) return LOOM_OK;
  forward(rw, n, x, done);
  return *done ? LOOM_OK : broadcast_to(rw, n, x, done);
}

/* x-x is 0 for integers only: for floats inf-inf and NaN-NaN are NaN. */
static loom_status_t rule_self_sub(ir_rewriter_t *rw, const ir_node_t *n, bool *done) {
  const ir_type_t *t = &rw->src->values[n->out[0]].type;
  if (in_of(rw, n, 0) != in_of(rw, n, 1) || dtype_is_float(t->dtype)) return LOOM_OK;
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "shape", t->rank, t->dims);
  ir_attrs_float(&a, "value", 0.0);
  ir_attrs_int(&a, "dtype", t->dtype);
  return replace(rw, n, IR_OP_FULL, 0, NULL, &a, done);
}

/* cast to the same dtype, expand to the same shape, a reshape, squeeze or
 * unsqueeze that changes nothing, identity. */
static loom_status_t rule_same_type(ir_rewriter_t *rw, const ir_node_t *n, bool *done) {
  forward(rw, n, in_of(rw, n, 0), done);
  return LOOM_OK;
}

/* The permutation of a transpose node (reversal when it has none). */
static void transpose_perm(const ir_node_t *t, int rank, int64_t *perm) {
  const int64_t *p;
  int n = ir_attr_ints(t->attrs, "perm", &p);
  for (int i = 0; i < rank; i++)
    perm[i] = n == rank ? (p[i] < 0 ? p[i] + rank : p[i]) : rank - 1 - i;
}

/* A transpose by the identity permutation is x. (Equal input and output
 * types are not enough: a (4, 3, 4) reversed is a (4, 3, 4) too.) */
static loom_status_t rule_transpose_identity(ir_rewriter_t *rw, const ir_node_t *n,
                                             bool *done) {
  int rank = rw->src->values[n->out[0]].type.rank;
  int64_t p[LOOM_MAX_RANK];
  transpose_perm(n, rank, p);
  for (int i = 0; i < rank; i++)
    if (p[i] != i) return LOOM_OK; /* equal types can still hold moved data */
  forward(rw, n, in_of(rw, n, 0), done);
  return LOOM_OK;
}

/* transpose(transpose(x, p1), p2) = transpose(x, q) with q[i] = p1[p2[i]],
 * and nothing at all when q is the identity. */
static loom_status_t rule_transpose(ir_rewriter_t *rw, const ir_node_t *n, bool *done) {
  int32_t y = in_of(rw, n, 0);
  const ir_node_t *inner = producer(rw, y);
  if (!inner || inner->op != IR_OP_TRANSPOSE) return LOOM_OK;
  int32_t x = inner->in[0];
  int rank = dst_type(rw, y)->rank;
  int64_t p1[LOOM_MAX_RANK], p2[LOOM_MAX_RANK], q[LOOM_MAX_RANK];
  transpose_perm(inner, rank, p1);
  transpose_perm(n, rank, p2);
  bool identity = true;
  for (int i = 0; i < rank; i++) {
    q[i] = p1[p2[i]];
    identity &= q[i] == i;
  }
  if (identity) {
    forward(rw, n, x, done);
    return LOOM_OK;
  }
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "perm", rank, q);
  return replace(rw, n, IR_OP_TRANSPOSE, 1, &x, &a, done);
}

/* Whether transpose node t only swaps its last two dims. */
static bool swaps_last_two(const ir_node_t *t, int rank) {
  int64_t p[LOOM_MAX_RANK];
  if (rank < 2) return false;
  transpose_perm(t, rank, p);
  for (int i = 0; i < rank - 2; i++)
    if (p[i] != i) return false;
  return p[rank - 2] == rank - 1 && p[rank - 1] == rank - 2;
}

/* matmul(transpose(a), b) = matmul(a, b) with trans_a flipped (and so
 * for b) when the transpose swaps the matrix dims: the GEMM reads the
 * operand transposed, and no copy is made. */
static loom_status_t rule_matmul_transpose(ir_rewriter_t *rw, const ir_node_t *n,
                                           bool *done) {
  int32_t in[2] = {in_of(rw, n, 0), in_of(rw, n, 1)};
  int64_t trans[2] = {ir_attr_int(n->attrs, "trans_a", 0) != 0,
                      ir_attr_int(n->attrs, "trans_b", 0) != 0};
  bool changed = false;
  for (int k = 0; k < 2; k++) {
    const ir_node_t *p = producer(rw, in[k]);
    if (!p || p->op != IR_OP_TRANSPOSE || !swaps_last_two(p, dst_type(rw, in[k])->rank))
      continue;
    in[k] = p->in[0];
    trans[k] = !trans[k];
    changed = true;
  }
  if (!changed) return LOOM_OK;
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "trans_a", trans[0]);
  ir_attrs_int(&a, "trans_b", trans[1]);
  return replace(rw, n, IR_OP_MATMUL, 2, in, &a, done);
}

/* reshape(reshape(x)) = reshape(x): squeeze and unsqueeze are reshapes
 * too (the ops both viewed and aliased: their elements in order). */
static loom_status_t rule_reshape(ir_rewriter_t *rw, const ir_node_t *n, bool *done) {
  const ir_node_t *inner = producer(rw, in_of(rw, n, 0));
  if (!inner || !ir_op_has(inner->op, F_VIEW | F_ALIAS)) return LOOM_OK;
  int32_t x = inner->in[0];
  if (ir_type_equal(dst_type(rw, x), &rw->src->values[n->out[0]].type)) {
    forward(rw, n, x, done);
    return LOOM_OK;
  }
  return replace(rw, n, IR_OP_RESHAPE, 1, &x, n->attrs, done);
}

static bool same_dims(const ir_type_t *a, const ir_type_t *b) {
  return a->rank == b->rank && !memcmp(a->dims, b->dims, sizeof(ir_dim_t) * (size_t)a->rank);
}

/* op(expand(y), z) = op(y, z) when z already has the result's shape: y
 * broadcasts to it as the expanded value did. */
static loom_status_t rule_broadcast(ir_rewriter_t *rw, const ir_node_t *n, bool *done) {
  const ir_type_t *t = &rw->src->values[n->out[0]].type;
  for (int k = 0; k < 2 && !*done; k++) {
    int32_t in[2] = {in_of(rw, n, 0), in_of(rw, n, 1)};
    const ir_node_t *p = producer(rw, in[k]);
    if (!p || p->op != IR_OP_EXPAND || !same_dims(dst_type(rw, in[1 - k]), t)) continue;
    in[k] = p->in[0];
    LOOM_TRY(replace(rw, n, n->op, 2, in, n->attrs, done));
  }
  return LOOM_OK;
}

/* split(x) = one slice per piece: slices are generated copies (a strided
 * loop each), where split has no codegen rule and would run its
 * reference kernel element by element. */
static loom_status_t rule_split(ir_rewriter_t *rw, const ir_node_t *n, bool *done) {
  const int64_t *sizes;
  int np = ir_attr_ints(n->attrs, "sizes", &sizes);
  int64_t axis = ir_attr_int(n->attrs, "axis", 0), start = 0;
  int32_t x = in_of(rw, n, 0), out[SPLIT_MAX_PIECES];
  if (np != n->n_out || np > SPLIT_MAX_PIECES) return LOOM_OK;
  for (int k = 0; k < np; k++) {
    ir_attrs_t a = {0};
    int64_t end = start + sizes[k];
    ir_attrs_ints(&a, "starts", 1, &start);
    ir_attrs_ints(&a, "ends", 1, &end);
    ir_attrs_ints(&a, "axes", 1, &axis);
    LOOM_TRY(ir_rewrite_emit(rw, IR_OP_SLICE, 1, &x, &a, &out[k], 1));
    /* A piece of another type leaves the slices dead for DCE. */
    if (!ir_type_equal(dst_type(rw, out[k]), &rw->src->values[n->out[k]].type)) return LOOM_OK;
    start = end;
  }
  for (int k = 0; k < np; k++) ir_rewrite_map(rw, n->out[k], out[k]);
  *done = true;
  return LOOM_OK;
}

typedef struct rule {
  ir_op_t op;
  rule_fn fn;
} rule_t;

/* Tried in order; the first that replaces the node wins. */
static const rule_t rules[] = {
    {IR_OP_MUL, rule_one},           {IR_OP_DIV, rule_one},
    {IR_OP_ADD, rule_zero},          {IR_OP_SUB, rule_zero},
    {IR_OP_SUB, rule_self_sub},      {IR_OP_CAST, rule_same_type},
    {IR_OP_EXPAND, rule_same_type},  {IR_OP_RESHAPE, rule_same_type},
    {IR_OP_SQUEEZE, rule_same_type}, {IR_OP_UNSQUEEZE, rule_same_type},
    {IR_OP_IDENTITY, rule_same_type}, {IR_OP_TRANSPOSE, rule_transpose_identity},
    {IR_OP_TRANSPOSE, rule_transpose}, {IR_OP_RESHAPE, rule_reshape},
    {IR_OP_SPLIT, rule_split},       {IR_OP_MATMUL, rule_matmul_transpose},
};

static bool is_binary_ew(ir_op_t op) {
  return ir_ops[op].fusion_class == IR_CLASS_EW && ir_ops[op].in_min == 2 &&
         ir_ops[op].in_max == 2 && ir_ops[op].n_out == 1 && !ir_ops[op].flags;
}

static loom_status_t simplify_node(ir_rewriter_t *rw, int64_t i) {
  const ir_node_t *n = &rw->src->nodes[i];
  bool done = false;
  for (int k = 0; k < n->n_in; k++)
    if (in_of(rw, n, k) < 0) return ir_rewrite_copy(rw, i); /* reports it */
  for (size_t r = 0; r < sizeof rules / sizeof rules[0] && !done; r++)
    if (rules[r].op == n->op) LOOM_TRY(rules[r].fn(rw, n, &done));
  if (!done && is_binary_ew(n->op)) LOOM_TRY(rule_broadcast(rw, n, &done));
  return done ? LOOM_OK : ir_rewrite_copy(rw, i);
}

loom_status_t pass_simplify(const loom_graph_t *src, loom_graph_t **out) {
  LOOM_CHECK_ARG(src);
  LOOM_CHECK_ARG(out);
  ir_rewriter_t rw;
  LOOM_TRY(ir_rewrite_begin(src, &rw));
  for (int64_t i = 0; i < src->n_nodes; i++) {
    loom_status_t s = simplify_node(&rw, i);
    if (s != LOOM_OK) {
      ir_rewrite_abort(&rw);
      return s;
    }
  }
  return ir_rewrite_finish(&rw, out);
}
