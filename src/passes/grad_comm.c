/* Gradient rules of the collectives. The loss is taken as the sum of
 * every rank's loss, as data parallelism's is: a value sent to other
 * ranks gets back the gradients they computed for it. */
#include "core/comm.h"
#include "core/status.h"
#include "passes/grad.h"

/* The node's collective with another op and reduction, on dout. */
static loom_status_t collective(grad_ctx_t *c, ir_op_t op, int64_t reduce, int32_t dy,
                                int32_t *out) {
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "comm", ir_attr_int(c->node.attrs, "comm", 0));
  ir_attrs_int(&a, "ranks", ir_attr_int(c->node.attrs, "ranks", 0));
  if (op != IR_OP_ALL_GATHER) ir_attrs_int(&a, "reduce", reduce);
  return grad_op(c, op, 1, &dy, &a, out);
}

static int64_t reduce_of(const grad_ctx_t *c) {
  return ir_attr_int(c->node.attrs, "reduce", LOOM_COMM_SUM);
}

static loom_status_t no_max(const grad_ctx_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s with reduce max has no gradient rule",
                   ir_ops[c->node.op].name);
}

/* y = sum of every rank's x: every rank's x gets the sum of every rank's
 * dy (the mean: the mean). */
loom_status_t grad_all_reduce(grad_ctx_t *c) {
  if (reduce_of(c) == LOOM_COMM_MAX) return no_max(c);
  return collective(c, IR_OP_ALL_REDUCE, reduce_of(c), c->dout[0], &c->din[0]);
}

/* Only root's x reaches the ranks: root gets the sum of their dy, the
 * others zero. */
loom_status_t grad_broadcast(grad_ctx_t *c) {
  int64_t id = ir_attr_int(c->node.attrs, "comm", 0);
  loom_comm_t *comm = core_comm_get(id);
  if (!comm)
    return loom_fail(LOOM_ERR_INVALID, "broadcast's gradient: communicator %lld was destroyed",
                     (long long)id);
  int32_t sum, keep;
  LOOM_TRY(collective(c, IR_OP_ALL_REDUCE, LOOM_COMM_SUM, c->dout[0], &sum));
  bool root = loom_comm_rank(comm) == ir_attr_int(c->node.attrs, "root", 0);
  LOOM_TRY(grad_scalar(c, root ? 1.0 : 0.0, grad_type(c, sum)->dtype, &keep));
  return grad_binary(c, IR_OP_MUL, sum, keep, &c->din[0]);
}

/* Rank r's x is part r of every rank's y: it gets the sum of those parts
 * of their dy. */
loom_status_t grad_all_gather(grad_ctx_t *c) {
  return collective(c, IR_OP_REDUCE_SCATTER, LOOM_COMM_SUM, c->dout[0], &c->din[0]);
}

/* Part r of every rank's x reaches rank r's y alone: every rank's x gets
 * every rank's dy, gathered (over the ranks, for the mean). */
loom_status_t grad_reduce_scatter(grad_ctx_t *c) {
  if (reduce_of(c) == LOOM_COMM_MAX) return no_max(c);
  int32_t all;
  LOOM_TRY(collective(c, IR_OP_ALL_GATHER, 0, c->dout[0], &all));
  if (reduce_of(c) == LOOM_COMM_SUM) {
    c->din[0] = all;
    return LOOM_OK;
  }
  int32_t scale;
  double ranks = (double)ir_attr_int(c->node.attrs, "ranks", 1);
  LOOM_TRY(grad_scalar(c, 1.0 / ranks, grad_type(c, all)->dtype, &scale));
  return grad_binary(c, IR_OP_MUL, all, scale, &c->din[0]);
}
