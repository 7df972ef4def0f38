/* Generators, random numbers and data-dependent ops: shape rules and
 * builders. */
#include <math.h>

#include "core/status.h"
#include "ir/ir.h"

/* Past 2^53 the index i of start + i*delta is no longer exact in double. */
#define ARANGE_MAX_LEN 9007199254740992.0

/* The "dtype" attribute (f32 when absent), which must be in mask. */
static loom_status_t attr_dtype(ir_infer_t *c, uint32_t mask,
                                ir_type_t *out) {
  int64_t d = ir_op_int(c->op, c->attrs, "dtype");
  if (d < 0 || d >= LOOM_DTYPE_COUNT)
    return loom_fail(LOOM_ERR_DTYPE, "%s: dtype %lld is not a dtype",
                     ir_ops[c->op].name, (long long)d);
  if (!(mask & DT_BIT(d)))
    return loom_fail(LOOM_ERR_DTYPE, "%s: cannot make dtype %s",
                     ir_ops[c->op].name, loom_dtype_name((loom_dtype_t)d));
  out->dtype = (loom_dtype_t)d;
  return LOOM_OK;
}

/* The "shape" attribute: up to LOOM_MAX_RANK dims, each a non-negative
 * constant or a symbolic dim of this graph. */
static loom_status_t attr_shape(ir_infer_t *c, ir_type_t *out) {
  const int64_t *dims = NULL;
  int n = ir_attr_ints(c->attrs, "shape", &dims);
  const char *op = ir_ops[c->op].name;
  if (n < 0) return loom_fail(LOOM_ERR_INVALID, "%s: needs a shape", op);
  if (n > LOOM_MAX_RANK)
    return loom_fail(LOOM_ERR_SHAPE, "%s: rank %d is outside 0..%d", op, n,
                     LOOM_MAX_RANK);
  for (int i = 0; i < n; i++) {
    bool ok = ir_dim_is_sym(dims[i]) ? ir_dim_expr(c->g, dims[i]) != NULL
                                     : dims[i] >= 0;
    if (!ok)
      return loom_fail(LOOM_ERR_SHAPE,
                       "%s: dim %d (%lld) is neither a non-negative size nor "
                       "a symbol of this graph", op, i, (long long)dims[i]);
    out->dims[i] = dims[i];
  }
  out->rank = n;
  return LOOM_OK;
}

/* Inputs first and first+1 are the generator's seed and offset: integer
 * scalars, so that a replayed graph can feed a new offset each step. */
static loom_status_t check_seed_offset(ir_infer_t *c, int first) {
  static const char *const what[2] = {"seed", "offset"};
  for (int k = 0; k < 2; k++) {
    int i = first + k;
    LOOM_TRY(ir_check_dtype(c, i, DT_INT, what[k]));
    if (c->in[i]->rank != 0)
      return ir_shape_fail(c, "the %s (input %d) must be a scalar (rank 0), "
                           "not rank %d", what[k], i, c->in[i]->rank);
  }
  return LOOM_OK;
}

loom_status_t ir_shape_arange(ir_infer_t *c) {
  double start = ir_op_float(c->op, c->attrs, "start");
  double limit = ir_attr_float(c->attrs, "limit", 0.0);
  double delta = ir_op_float(c->op, c->attrs, "delta");
  if (!isfinite(start) || !isfinite(limit) || !isfinite(delta))
    return loom_fail(LOOM_ERR_INVALID,
                     "arange: start %g, limit %g and delta %g must be finite",
                     start, limit, delta);
  if (delta == 0)
    return loom_fail(LOOM_ERR_INVALID, "arange: delta must not be 0");
  LOOM_TRY(attr_dtype(c, DT_NUMERIC, &c->out[0]));
  double n = ceil((limit - start) / delta);
  if (!(n <= ARANGE_MAX_LEN))
    return loom_fail(LOOM_ERR_INVALID,
                     "arange: %g elements from %g to %g by %g is too many", n,
                     start, limit, delta);
  c->out[0].rank = 1;
  c->out[0].dims[0] = n > 0 ? (int64_t)n : 0;
  return LOOM_OK;
}

loom_status_t ir_shape_full(ir_infer_t *c) {
  LOOM_TRY(attr_dtype(c, DT_ALL, &c->out[0]));
  return attr_shape(c, &c->out[0]);
}

/* low < high (uniform) or std >= 0 (normal), all finite. */
static loom_status_t check_distribution(ir_infer_t *c) {
  if (c->op == IR_OP_RANDOM_UNIFORM) {
    double low = ir_op_float(c->op, c->attrs, "low");
    double high = ir_op_float(c->op, c->attrs, "high");
    if (!isfinite(low) || !isfinite(high) || !(low < high))
      return loom_fail(LOOM_ERR_INVALID,
                       "random_uniform: needs finite low < high, got [%g, %g)",
                       low, high);
    return LOOM_OK;
  }
  double mean = ir_op_float(c->op, c->attrs, "mean");
  double std = ir_op_float(c->op, c->attrs, "std");
  if (!isfinite(mean) || !isfinite(std) || !(std >= 0))
    return loom_fail(LOOM_ERR_INVALID,
                     "random_normal: needs finite mean and std >= 0, got "
                     "mean %g std %g", mean, std);
  return LOOM_OK;
}

loom_status_t ir_shape_random(ir_infer_t *c) {
  LOOM_TRY(check_seed_offset(c, 0));
  LOOM_TRY(check_distribution(c));
  LOOM_TRY(attr_dtype(c, DT_FLOAT, &c->out[0]));
  return attr_shape(c, &c->out[0]);
}

loom_status_t ir_shape_dropout(ir_infer_t *c) {
  LOOM_TRY(check_seed_offset(c, 1));
  double p = ir_attr_float(c->attrs, "p", 0.0);
  if (!(p >= 0 && p < 1))
    return loom_fail(LOOM_ERR_INVALID, "dropout: p must be in [0, 1), got %g",
                     p);
  c->out[0] = *c->in[0];
  c->out[1] = *c->in[0];
  c->out[1].dtype = LOOM_BOOL;
  return LOOM_OK;
}

loom_status_t ir_shape_nonzero(ir_infer_t *c) {
  ir_type_t *t = &c->out[0];
  t->dtype = LOOM_I64;
  t->rank = 2;
  LOOM_TRY(ir_dim_fresh_symbol(c->g, "nnz", &t->dims[0]));
  t->dims[1] = c->in[0]->rank;
  return LOOM_OK;
}

/* ---- Builders ------------------------------------------------------------ */

/* Stores a public shape argument as the "shape" attribute. */
static loom_status_t shape_attr(const char *op, int rank,
                                const loom_dim_t *shape, ir_attrs_t *a) {
  if (rank < 0 || rank > LOOM_MAX_RANK)
    return loom_fail(LOOM_ERR_SHAPE, "%s: rank %d is outside 0..%d", op, rank,
                     LOOM_MAX_RANK);
  if (rank > 0 && !shape)
    return loom_fail(LOOM_ERR_INVALID, "%s: shape is null for rank %d", op,
                     rank);
  ir_attrs_ints(a, "shape", rank, shape);
  return LOOM_OK;
}

loom_status_t loom_arange(loom_graph_t *g, double start, double limit,
                          double delta, loom_dtype_t dtype,
                          loom_value_t *out) {
  ir_attrs_t a = {0};
  ir_attrs_float(&a, "start", start);
  ir_attrs_float(&a, "limit", limit);
  ir_attrs_float(&a, "delta", delta);
  ir_attrs_int(&a, "dtype", dtype);
  return ir_build1(g, IR_OP_ARANGE, 0, NULL, &a, out);
}

loom_status_t loom_full(loom_graph_t *g, int rank, const loom_dim_t *shape,
                        double value, loom_dtype_t dtype, loom_value_t *out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  ir_attrs_t a = {0};
  LOOM_TRY(shape_attr("full", rank, shape, &a));
  ir_attrs_float(&a, "value", value);
  ir_attrs_int(&a, "dtype", dtype);
  return ir_build1(g, IR_OP_FULL, 0, NULL, &a, out);
}

loom_status_t loom_random_uniform(loom_graph_t *g, loom_value_t seed,
                                  loom_value_t offset, int rank,
                                  const loom_dim_t *shape, double low,
                                  double high, loom_dtype_t dtype,
                                  loom_value_t *out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  ir_attrs_t a = {0};
  LOOM_TRY(shape_attr("random_uniform", rank, shape, &a));
  ir_attrs_float(&a, "low", low);
  ir_attrs_float(&a, "high", high);
  ir_attrs_int(&a, "dtype", dtype);
  loom_value_t in[2] = {seed, offset};
  return ir_build1(g, IR_OP_RANDOM_UNIFORM, 2, in, &a, out);
}

loom_status_t loom_random_normal(loom_graph_t *g, loom_value_t seed,
                                 loom_value_t offset, int rank,
                                 const loom_dim_t *shape, double mean,
                                 double std, loom_dtype_t dtype,
                                 loom_value_t *out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  ir_attrs_t a = {0};
  LOOM_TRY(shape_attr("random_normal", rank, shape, &a));
  ir_attrs_float(&a, "mean", mean);
  ir_attrs_float(&a, "std", std);
  ir_attrs_int(&a, "dtype", dtype);
  loom_value_t in[2] = {seed, offset};
  return ir_build1(g, IR_OP_RANDOM_NORMAL, 2, in, &a, out);
}

loom_status_t loom_dropout(loom_graph_t *g, loom_value_t x, loom_value_t seed,
                           loom_value_t offset, double p, loom_value_t *out,
                           loom_value_t *mask) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  LOOM_CHECK_ARG(mask);
  ir_attrs_t a = {0};
  ir_attrs_float(&a, "p", p);
  int32_t in[3] = {x.id, seed.id, offset.id}, ids[2];
  LOOM_TRY(ir_add_node(g, IR_OP_DROPOUT, 3, in, &a, ids, 2));
  out->id = ids[0];
  mask->id = ids[1];
  return LOOM_OK;
}

/* Whether value v is zeros by construction. */
static bool made_zeros(const loom_graph_t *g, int32_t v) {
  const ir_value_t *val = &g->values[v];
  if (val->kind == IR_VALUE_NODE) {
    const ir_node_t *n = &g->nodes[val->node];
    return n->op == IR_OP_FULL && ir_attr_float(n->attrs, "value", 0) == 0;
  }
  if (val->kind != IR_VALUE_CONST || !val->data) return false;
  const unsigned char *b = loom_tensor_data(val->data);
  size_t bytes = (size_t)loom_tensor_numel(val->data) * loom_dtype_size(val->type.dtype);
  for (size_t i = 0; i < bytes; i++)
    if (b[i]) return false;
  return true;
}

int32_t ir_broadcast_source(const loom_graph_t *g, const ir_node_t *n) {
  if (n->op == IR_OP_EXPAND) return n->in[0];
  /* x + 0.0 is not x for x = -0.0: integers only */
  if (n->op != IR_OP_ADD || !dtype_is_int(g->values[n->out[0]].type.dtype)) return -1;
  if (made_zeros(g, n->in[1])) return n->in[0];
  return made_zeros(g, n->in[0]) ? n->in[1] : -1;
}
