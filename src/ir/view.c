/* Strided views: a chain of slices, transposes and reshape-like ops that
 * a matmul reads in place, through its operand's offset and strides,
 * instead of through a copy. Attention's head split is the case: q, k
 * and v are slices of one QKV product, reshaped to (batch, seq, heads,
 * d) and transposed to (batch, heads, seq, d); as views, the batched
 * products read them where the projection wrote them. The other way
 * round, a matmul's product that a chain of transposes and reshapes
 * turns into the next operand (the heads merged back into rows) is
 * written where that chain's result lies in order. Fusion
 * (src/passes/fuse.c) asks which chains qualify; the C emitter's matmul
 * (src/backend/cpu/codegen/c_contract.c) walks the same chains for its addressing. */
#include <string.h>

#include "ir/view.h"

bool ir_view_op(const loom_graph_t *g, const ir_node_t *n) {
  if (!ir_op_has(n->op, F_VIEW)) return false;
  const ir_type_t *t[2] = {&g->values[n->in[0]].type, &g->values[n->out[0]].type};
  for (int i = 0; i < 2; i++)
    for (int d = 0; d < t[i]->rank; d++)
      if (!ir_dim_is_const(t[i]->dims[d])) return false;
  return true;
}

/* y = transpose(x, perm): y's dim i is x's dim perm[i]. Forward, v goes
 * from x's view to y's; back, from y's to x's. */
static void transpose(const ir_node_t *n, bool back, ir_view_t *v) {
  const int64_t *perm;
  bool given = ir_attr_ints(n->attrs, "perm", &perm) >= 0;
  ir_view_t from = *v;
  for (int i = 0; i < from.rank; i++) {
    int64_t p = given ? (perm[i] < 0 ? perm[i] + from.rank : perm[i]) : from.rank - 1 - i;
    int64_t to = back ? p : i, src = back ? i : p;
    v->dim[to] = from.dim[src];
    v->stride[to] = from.stride[src];
  }
}

/* Whether view v has type t's dims. */
static bool has_dims(const ir_view_t *v, const ir_type_t *t) {
  if (v->rank != t->rank) return false;
  for (int d = 0; d < t->rank; d++)
    if (v->dim[d] != t->dims[d]) return false;
  return true;
}

/* Forward steps only: a negative stride is no GEMM operand. */
static bool slice(const ir_node_t *n, ir_view_t *v) {
  ir_slice_bound_t b[IR_MAX_ATTR_INTS];
  int count = ir_slice_bounds(n->attrs, v->rank, b);
  for (int i = 0; i < count; i++) {
    int d = b[i].axis;
    int64_t first, taken;
    if (b[i].step <= 0 || d < 0 || d >= v->rank) return false;
    ir_slice_range(v->dim[d], b[i].start, b[i].end, b[i].step, &first, &taken);
    v->offset += first * v->stride[d];
    v->stride[d] *= b[i].step;
    v->dim[d] = taken;
  }
  return true;
}

/* The strides of the same elements seen with the dims `dim`: each run of
 * input dims that lie one inside the next in memory (a chunk) is cut
 * into output dims; false when an output dim would span two chunks. */
static bool reshape(ir_view_t *v, int rank, const int64_t *dim) {
  int64_t stride[LOOM_MAX_RANK];
  int out = rank - 1;
  int64_t base = v->rank ? v->stride[v->rank - 1] : 1, chunk = 1, made = 1;
  for (int d = v->rank - 1; d >= 0; d--) {
    chunk *= v->dim[d];
    bool ends = d == 0 || (v->dim[d - 1] != 1 && v->stride[d - 1] != chunk * base);
    if (!ends) continue;
    while (out >= 0 && (made < chunk || dim[out] == 1)) {
      stride[out] = made * base;
      made *= dim[out--];
    }
    if (made != chunk) return false;
    if (d > 0) {
      base = v->stride[d - 1];
      chunk = made = 1;
    }
  }
  for (; out >= 0; out--) { /* size-1 dims left over */
    if (dim[out] != 1) return false;
    stride[out] = 1;
  }
  v->rank = rank;
  memcpy(v->dim, dim, sizeof(int64_t) * (size_t)rank);
  memcpy(v->stride, stride, sizeof(int64_t) * (size_t)rank);
  return true;
}

static bool apply(const loom_graph_t *g, const ir_node_t *n, ir_view_t *v) {
  const ir_type_t *y = &g->values[n->out[0]].type;
  bool ok = true;
  if (n->op == IR_OP_TRANSPOSE) transpose(n, false, v);
  else if (n->op == IR_OP_SLICE) ok = slice(n, v);
  else ok = reshape(v, y->rank, y->dims);
  return ok && has_dims(v, y);
}

enum { MAX_CHAIN = 16 };

bool ir_view_of(const loom_graph_t *g, int32_t v, ir_view_shares_fn shares, const void *ctx,
                ir_view_t *out) {
  const ir_node_t *chain[MAX_CHAIN];
  int n = 0;
  while (g->values[v].kind == IR_VALUE_NODE) {
    const ir_node_t *node = &g->nodes[g->values[v].node];
    if (!shares(ctx, g->values[v].node) || !ir_view_op(g, node)) break;
    if (n == MAX_CHAIN) return false;
    chain[n++] = node;
    v = node->in[0];
  }
  if (!ir_view_plain(g, v, out)) return false;
  while (n > 0)
    if (!apply(g, chain[--n], out)) return false;
  return true;
}

bool ir_view_plain(const loom_graph_t *g, int32_t v, ir_view_t *out) {
  const ir_type_t *t = &g->values[v].type;
  *out = (ir_view_t){.root = v, .rank = t->rank};
  int64_t step = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    if (!ir_dim_is_const(t->dims[d]) || t->dims[d] == 0) return false;
    out->dim[d] = t->dims[d];
    out->stride[d] = step;
    step *= t->dims[d];
  }
  return true;
}

bool ir_view_back(const loom_graph_t *g, int n, const ir_node_t *const *chain, ir_view_t *v) {
  for (int i = n - 1; i >= 0; i--) {
    const ir_node_t *node = chain[i];
    const ir_type_t *x = &g->values[node->in[0]].type;
    if (!ir_view_op(g, node) || node->op == IR_OP_SLICE) return false;
    if (node->op == IR_OP_TRANSPOSE) transpose(node, true, v);
    else if (!reshape(v, x->rank, x->dims)) return false;
    if (!has_dims(v, x)) return false;
  }
  return true;
}

bool ir_view_is_plain(const ir_view_t *v) {
  int64_t step = 1;
  for (int d = v->rank - 1; d >= 0; d--) {
    if (v->dim[d] != 1 && v->stride[d] != step) return false;
    step *= v->dim[d];
  }
  return v->offset == 0;
}
