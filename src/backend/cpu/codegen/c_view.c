/* Matmuls reading their operands and writing their products through
 * strided views (src/ir/view.c has the view algebra): which views the
 * generated GEMM calls can address (rows or columns one element apart,
 * steps forward), and how the matmul's emitter (c_contract.c) finds the
 * view of an operand or of its product from the fusion plan. */
#include "backend/cpu/codegen/cg.h"

static bool alias_shares(const void *ctx, int32_t node) {
  const cg_ctx_t *c = ctx;
  const fuse_group_t *grp = &c->plan->groups[c->plan->group_of_node[node]];
  return grp->kind == FUSE_ALIAS && !grp->into;
}

bool cg_matmul_writes_view(const loom_graph_t *g, const ir_node_t *n, const ir_view_t *v) {
  if (!cg_matmul_reads_view(g, n, v)) return false;
  int r = v->rank - 2, col = v->rank - 1;
  return v->stride[col] == 1 && (v->dim[r] == 1 || v->stride[r] >= v->dim[col]);
}

bool cg_product_view(const cg_ctx_t *c, int32_t y, ir_view_t *out) {
  const loom_graph_t *g = c->g;
  const ir_node_t *chain[LOOM_MAX_RANK * 2];
  int n = 0;
  for (int32_t v = y, next = 0; next >= 0 && n < LOOM_MAX_RANK * 2;) {
    next = -1;
    for (int64_t u = 0; u < g->n_nodes && next < 0; u++)
      if (g->nodes[u].n_in == 1 && g->nodes[u].in[0] == v &&
          c->plan->groups[c->plan->group_of_node[u]].into)
        next = (int32_t)u;
    if (next >= 0) {
      chain[n++] = &g->nodes[next];
      v = g->nodes[next].out[0];
    }
  }
  int32_t end = n ? chain[n - 1]->out[0] : y;
  return ir_view_plain(g, end, out) && ir_view_back(g, n, chain, out);
}

bool cg_operand_view(const cg_ctx_t *c, int32_t v, ir_view_t *out) {
  if (ir_view_of(c->g, v, alias_shares, c, out)) return true;
  const ir_value_t *val = &c->g->values[v];
  if (val->kind == IR_VALUE_NODE && c->plan->groups[c->plan->group_of_node[val->node]].strided)
    return false;
  cg_shape_t s;
  if (!cg_value_shape(c, v, &s)) return false;
  *out = (ir_view_t){.root = v, .rank = s.rank};
  int64_t step = 1;
  for (int d = s.rank - 1; d >= 0; d--) {
    out->dim[d] = s.dim[d];
    out->stride[d] = step;
    step *= s.dim[d];
  }
  return true;
}

bool cg_matmul_reads_view(const loom_graph_t *g, const ir_node_t *n, const ir_view_t *v) {
  if (n->op != IR_OP_MATMUL || v->rank < 2 || v->offset < 0 ||
      g->values[n->out[0]].type.dtype != LOOM_F32)
    return false;
  for (int i = 0; i < n->n_in; i++)
    for (int d = 0; d < g->values[n->in[i]].type.rank; d++)
      if (!ir_dim_is_const(g->values[n->in[i]].type.dims[d])) return false;
  for (int d = 0; d < v->rank; d++)
    if (v->stride[d] < 0) return false;
  int r = v->rank - 2, col = v->rank - 1;
  return v->stride[col] == 1 || v->dim[col] == 1 || v->stride[r] == 1 || v->dim[r] == 1;
}
