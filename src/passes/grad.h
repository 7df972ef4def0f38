/* Reverse-mode autodiff on the IR. loom_grad appends to a graph the nodes
 * that compute d loss / d x for chosen values x, walking the nodes between
 * them backwards and calling each op's gradient rule (the `grad` column of
 * src/ir/ops.def names it: grad_<name>, defined in src/passes/grad_*.c).
 * Gradients reaching a value from several uses are summed. A rule is
 * written on the IR with ordinary ops, so gradients of gradients work
 * where the rules' own ops have rules.
 *
 * The grad column holds a rule name, ZERO (the op is not differentiable:
 * no gradient flows through it, e.g. argmax, comparisons, random
 * numbers), or NONE (no rule yet: loom_grad fails naming the op when a
 * gradient must flow through it). */
#ifndef LOOM_PASSES_GRAD_H
#define LOOM_PASSES_GRAD_H

#include "ir/ir.h"

/* One call of a gradient rule. The node is a copy (emitting nodes may
 * move the graph's node array); in/out are its value ids. */
typedef struct grad_ctx {
  loom_graph_t *g;
  ir_node_t node;
  /* dout[k]: the gradient flowing into output k (same type), or -1 when
   * none flows (the output does not reach the loss). At least one is set. */
  const int32_t *dout;
  /* din[k]: the rule sets the gradient of input k (exactly input k's type:
   * use grad_unbroadcast for broadcast operands), or leaves -1 for none
   * (an index input, or an input that gets zero). Starts all -1. */
  int32_t *din;
} grad_ctx_t;

typedef loom_status_t (*grad_rule_fn)(grad_ctx_t *c);

/* The vector-Jacobian product behind loom_grad: appends to g the nodes of
 * grads[i] = sum_k seeds[k] . d ys[k] / d wrt[i], each ys[k] (a float
 * value, repeats allowed) seeded with seeds[k] (a value of its type) as
 * its incoming gradient. The rest is as loom_grad: zeros for a wrt value
 * that no ys[k] depends on, failure naming an op without a rule. */
loom_status_t grad_vjp(loom_graph_t *g, int n_ys, const int32_t *ys,
                       const int32_t *seeds, int n, const loom_value_t *wrt,
                       loom_value_t *grads);

/* ---- Helpers for writing rules (src/passes/grad_util.c) ---------------- */

/* Appends a node with one output (inputs are value ids). */
loom_status_t grad_op(grad_ctx_t *c, ir_op_t op, int n_in, const int32_t *in,
                      const ir_attrs_t *attrs, int32_t *out);
loom_status_t grad_unary(grad_ctx_t *c, ir_op_t op, int32_t x, int32_t *out);
loom_status_t grad_binary(grad_ctx_t *c, ir_op_t op, int32_t a, int32_t b,
                          int32_t *out);
/* A rank-0 constant of dtype with value v (broadcasts in binary ops). */
loom_status_t grad_scalar(grad_ctx_t *c, double v, loom_dtype_t dtype,
                          int32_t *out);
/* dx summed over the dims along which a value of type `target` was
 * broadcast to dx's shape, then reshaped to target's dims. */
loom_status_t grad_unbroadcast(grad_ctx_t *c, int32_t dx,
                               const ir_type_t *target, int32_t *out);
/* The type of value v. The pointer is into the graph's value array,
 * which moves when nodes are added: copy the type before emitting. */
const ir_type_t *grad_type(const grad_ctx_t *c, int32_t v);

#endif
