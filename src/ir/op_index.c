/* Indexing ops: gather, scatter, embedding, one-hot: shape rules and builders. */
#include "core/status.h"
#include "ir/ir.h"

/* Fails unless a result of `rank` dims fits in a type. */
static loom_status_t check_out_rank(ir_infer_t *c, int rank) {
  if (rank > LOOM_MAX_RANK)
    return ir_shape_fail(c, "the result would have rank %d (at most %d)", rank,
                         LOOM_MAX_RANK);
  return LOOM_OK;
}

/* ONNX Gather: data.dims[:axis] + indices.dims + data.dims[axis+1:]. */
loom_status_t ir_shape_gather(ir_infer_t *c) {
  const ir_type_t *data = c->in[0], *ind = c->in[1];
  LOOM_TRY(ir_check_dtype(c, 1, DT_INT, "indices"));
  if (data->rank < 1) return ir_shape_fail(c, "data must have rank >= 1");
  int axis;
  LOOM_TRY(ir_axis(c, ir_op_int(c->op, c->attrs, "axis"), data->rank, &axis));
  int rank = data->rank - 1 + ind->rank;
  LOOM_TRY(check_out_rank(c, rank));
  ir_type_t *out = &c->out[0];
  out->dtype = data->dtype;
  out->rank = 0;
  for (int d = 0; d < axis; d++) out->dims[out->rank++] = data->dims[d];
  for (int d = 0; d < ind->rank; d++) out->dims[out->rank++] = ind->dims[d];
  for (int d = axis + 1; d < data->rank; d++) out->dims[out->rank++] = data->dims[d];
  return LOOM_OK;
}

/* torch.index_select: a gather whose index is 1-D. */
loom_status_t ir_shape_index_select(ir_infer_t *c) {
  LOOM_TRY(ir_check_dtype(c, 1, DT_INT, "index"));
  if (c->in[1]->rank != 1)
    return ir_shape_fail(c, "index must be 1-D, not rank %d", c->in[1]->rank);
  return ir_shape_gather(c);
}

/* a <= b when both are known; dims that only a run can compare pass here
 * and are checked by the kernel. */
static bool dim_may_be_le(ir_dim_t a, ir_dim_t b) {
  if (a == b || !ir_dim_is_const(a) || !ir_dim_is_const(b)) return true;
  return a <= b;
}

/* torch.scatter_add: index fits in src everywhere and in self off the axis. */
static loom_status_t check_scatter_dims(ir_infer_t *c, int axis) {
  const ir_type_t *self = c->in[0], *index = c->in[1], *src = c->in[2];
  for (int d = 0; d < self->rank; d++) {
    char a[64], b[64];
    if (!dim_may_be_le(index->dims[d], src->dims[d]))
      return ir_shape_fail(c, "dim %d of index (%s) exceeds dim %d of src (%s)",
                           d, ir_dim_str(c->g, index->dims[d], a, sizeof a), d,
                           ir_dim_str(c->g, src->dims[d], b, sizeof b));
    if (d != axis && !dim_may_be_le(index->dims[d], self->dims[d]))
      return ir_shape_fail(c, "dim %d of index (%s) exceeds dim %d of self (%s)",
                           d, ir_dim_str(c->g, index->dims[d], a, sizeof a), d,
                           ir_dim_str(c->g, self->dims[d], b, sizeof b));
  }
  return LOOM_OK;
}

loom_status_t ir_shape_scatter_add(ir_infer_t *c) {
  const ir_type_t *self = c->in[0], *index = c->in[1], *src = c->in[2];
  LOOM_TRY(ir_check_dtype(c, 1, DT_INT, "index"));
  if (src->dtype != self->dtype)
    return loom_fail(LOOM_ERR_DTYPE, "scatter_add: src (input 2) is %s and self is %s; cast one of them",
                     loom_dtype_name(src->dtype), loom_dtype_name(self->dtype));
  if (self->rank < 1) return ir_shape_fail(c, "self must have rank >= 1");
  if (index->rank != self->rank || src->rank != self->rank)
    return ir_shape_fail(c, "self, index and src must have the same rank");
  int axis;
  LOOM_TRY(ir_axis(c, ir_attr_int(c->attrs, "axis", 0), self->rank, &axis));
  LOOM_TRY(check_scatter_dims(c, axis));
  c->out[0] = *self;
  return LOOM_OK;
}

/* weight (V, D), indices q -> q + (D). */
loom_status_t ir_shape_embedding(ir_infer_t *c) {
  const ir_type_t *weight = c->in[0], *ind = c->in[1];
  LOOM_TRY(ir_check_dtype(c, 1, DT_INT, "indices"));
  if (weight->rank != 2)
    return ir_shape_fail(c, "weight must be 2-D (V, D), not rank %d", weight->rank);
  LOOM_TRY(check_out_rank(c, ind->rank + 1));
  c->out[0] = *ind;
  c->out[0].dtype = weight->dtype;
  c->out[0].dims[c->out[0].rank++] = weight->dims[1];
  return LOOM_OK;
}

loom_status_t ir_shape_one_hot(ir_infer_t *c) {
  int64_t depth = ir_attr_int(c->attrs, "depth", 0);
  int64_t dtype = ir_op_int(c->op, c->attrs, "dtype");
  if (depth <= 0)
    return loom_fail(LOOM_ERR_INVALID, "one_hot: depth must be > 0, got %lld",
                     (long long)depth);
  if (!dtype_valid((loom_dtype_t)dtype))
    return loom_fail(LOOM_ERR_DTYPE, "one_hot: result dtype %lld is not a dtype",
                     (long long)dtype);
  LOOM_TRY(check_out_rank(c, c->in[0]->rank + 1));
  c->out[0] = *c->in[0];
  c->out[0].dtype = (loom_dtype_t)dtype;
  c->out[0].dims[c->out[0].rank++] = depth;
  return LOOM_OK;
}

/* ---- Builders ------------------------------------------------------------ */

static loom_status_t build_axis_op(loom_graph_t *g, ir_op_t op, int n_in,
                                   const loom_value_t *in, int64_t axis,
                                   loom_value_t *out) {
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "axis", axis);
  return ir_build1(g, op, n_in, in, &a, out);
}

loom_status_t loom_gather(loom_graph_t *g, loom_value_t data,
                          loom_value_t indices, int64_t axis,
                          loom_value_t *out) {
  loom_value_t in[2] = {data, indices};
  return build_axis_op(g, IR_OP_GATHER, 2, in, axis, out);
}

loom_status_t loom_index_select(loom_graph_t *g, loom_value_t data,
                                loom_value_t index, int64_t axis,
                                loom_value_t *out) {
  loom_value_t in[2] = {data, index};
  return build_axis_op(g, IR_OP_INDEX_SELECT, 2, in, axis, out);
}

loom_status_t loom_scatter_add(loom_graph_t *g, loom_value_t self,
                               loom_value_t index, loom_value_t src,
                               int64_t axis, loom_value_t *out) {
  loom_value_t in[3] = {self, index, src};
  return build_axis_op(g, IR_OP_SCATTER_ADD, 3, in, axis, out);
}

loom_status_t loom_one_hot(loom_graph_t *g, loom_value_t indices,
                           int64_t depth, loom_dtype_t dtype,
                           loom_value_t *out) {
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "depth", depth);
  ir_attrs_int(&a, "dtype", dtype);
  return ir_build1(g, IR_OP_ONE_HOT, 1, &indices, &a, out);
}
