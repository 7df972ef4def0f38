/* Collectives (include/loom/comm.h): shape rules and builders. A node
 * names its communicator by id ("comm") and carries the number of ranks
 * ("ranks"), so that its shape follows from the graph alone. */
#include "core/comm.h"
#include "core/dtype.h"
#include "core/status.h"
#include "ir/ir.h"

static loom_status_t check_common(ir_infer_t *c, bool reduces) {
  int64_t ranks = ir_attr_int(c->attrs, "ranks", 0);
  if (ranks < 1 || ranks > INT32_MAX)
    return ir_shape_fail(c, "ranks = %lld is not a number of processes", (long long)ranks);
  if (!reduces) return LOOM_OK;
  int64_t r = ir_attr_int(c->attrs, "reduce", 0);
  if (r < LOOM_COMM_SUM || r > LOOM_COMM_MAX)
    return ir_shape_fail(c, "reduce = %lld is not sum (0), mean (1) or max (2)", (long long)r);
  if (r == LOOM_COMM_MEAN) LOOM_TRY(ir_check_dtype(c, 0, DT_FLOAT, "a float (the mean)"));
  return LOOM_OK;
}

/* all_reduce (and its start and wait), broadcast: x's type. */
loom_status_t ir_shape_collective(ir_infer_t *c) {
  bool reduces = c->op == IR_OP_ALL_REDUCE || c->op == IR_OP_ALL_REDUCE_START;
  LOOM_TRY(check_common(c, reduces));
  if (c->op == IR_OP_BROADCAST) {
    int64_t root = ir_attr_int(c->attrs, "root", 0);
    if (root < 0 || root >= ir_attr_int(c->attrs, "ranks", 0))
      return ir_shape_fail(c, "root %lld is not one of the %lld ranks", (long long)root,
                           (long long)ir_attr_int(c->attrs, "ranks", 0));
  }
  c->out[0] = *c->in[0];
  return LOOM_OK;
}

loom_status_t ir_shape_all_gather(ir_infer_t *c) {
  LOOM_TRY(check_common(c, false));
  if (c->in[0]->rank < 1) return ir_shape_fail(c, "a scalar has no dim 0 to gather along");
  c->out[0] = *c->in[0];
  return ir_dim_mul(c->g, c->in[0]->dims[0], ir_attr_int(c->attrs, "ranks", 1),
                    &c->out[0].dims[0]);
}

loom_status_t ir_shape_reduce_scatter(ir_infer_t *c) {
  LOOM_TRY(check_common(c, true));
  if (c->in[0]->rank < 1) return ir_shape_fail(c, "a scalar has no dim 0 to scatter along");
  int64_t ranks = ir_attr_int(c->attrs, "ranks", 1);
  ir_dim_t d0 = c->in[0]->dims[0];
  if (ir_dim_is_const(d0) && d0 % ranks != 0)
    return ir_shape_fail(c, "dim 0 (%lld) does not split into %lld equal parts",
                         (long long)d0, (long long)ranks);
  c->out[0] = *c->in[0];
  return ir_dim_floordiv(c->g, d0, ranks, &c->out[0].dims[0]);
}

/* ---- Builders ------------------------------------------------------------ */

static loom_status_t build(loom_graph_t *g, ir_op_t op, loom_comm_t *comm, loom_value_t x,
                           const char *key, int64_t value, loom_value_t *out) {
  if (!comm)
    return loom_fail(LOOM_ERR_INVALID, "loom_%s: the communicator is null", ir_ops[op].name);
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "comm", core_comm_id(comm));
  ir_attrs_int(&a, "ranks", loom_comm_size(comm));
  if (key) ir_attrs_int(&a, key, value);
  return ir_build1(g, op, 1, &x, &a, out);
}

loom_status_t loom_all_reduce(loom_graph_t *g, loom_comm_t *comm, loom_value_t x,
                              loom_comm_reduce_t op, loom_value_t *out) {
  return build(g, IR_OP_ALL_REDUCE, comm, x, "reduce", op, out);
}

loom_status_t loom_all_reduce_start(loom_graph_t *g, loom_comm_t *comm, loom_value_t x,
                                    loom_comm_reduce_t op, loom_value_t *out) {
  return build(g, IR_OP_ALL_REDUCE_START, comm, x, "reduce", op, out);
}

loom_status_t loom_all_reduce_wait(loom_graph_t *g, loom_comm_t *comm, loom_value_t started,
                                   loom_value_t *out) {
  return build(g, IR_OP_ALL_REDUCE_WAIT, comm, started, NULL, 0, out);
}

loom_status_t loom_broadcast(loom_graph_t *g, loom_comm_t *comm, loom_value_t x, int root,
                             loom_value_t *out) {
  return build(g, IR_OP_BROADCAST, comm, x, "root", root, out);
}

loom_status_t loom_all_gather(loom_graph_t *g, loom_comm_t *comm, loom_value_t x,
                              loom_value_t *out) {
  return build(g, IR_OP_ALL_GATHER, comm, x, NULL, 0, out);
}

loom_status_t loom_reduce_scatter(loom_graph_t *g, loom_comm_t *comm, loom_value_t x,
                                  loom_comm_reduce_t op, loom_value_t *out) {
  return build(g, IR_OP_REDUCE_SCATTER, comm, x, "reduce", op, out);
}
