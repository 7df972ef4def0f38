/* Gradient rule of if: an if over the branches' gradients. Each gradient
 * branch is its branch with the incoming gradients dy as extra inputs,
 * differentiated (loom_grad) through sum_k sum(y_k * dy_k), whose
 * gradient with respect to an input is the vector-Jacobian product the
 * rule needs. The condition picks the same branch as the forward if. */
#include <stdio.h>

#include "core/status.h"
#include "ir/rewrite.h"
#include "passes/grad.h"

/* sum(y * dy) of branch gb, in f64 so that outputs of several float
 * dtypes add up. */
static loom_status_t dot_term(loom_graph_t *gb, int32_t y, int32_t dy, loom_value_t *out) {
  loom_value_t p, s;
  LOOM_TRY(loom_mul(gb, (loom_value_t){y}, (loom_value_t){dy}, &p));
  LOOM_TRY(loom_sum(gb, p, 0, NULL, 0, &s));
  return loom_cast(gb, s, LOOM_F64, out);
}

/* The gradient branch of `branch` (a clone, changed in place): inputs
 * (x..., dy for each output k with dout[k] set), outputs the gradients
 * of its float inputs. */
static loom_status_t grad_branch(loom_graph_t *gb, const int32_t *dout, int n_out) {
  int64_t n_x = gb->n_inputs;
  loom_value_t loss = {-1};
  for (int k = 0; k < n_out; k++) {
    if (dout[k] < 0) continue;
    ir_type_t t = gb->values[gb->outputs[k]].type;
    char name[32];
    snprintf(name, sizeof name, "dy%d", k);
    loom_value_t dy, term;
    LOOM_TRY(ir_graph_input(gb, name, t.dtype, t.rank, t.dims, &dy));
    LOOM_TRY(dot_term(gb, gb->outputs[k], dy.id, &term));
    if (loss.id < 0) loss = term;
    else LOOM_TRY(loom_add(gb, loss, term, &loss));
  }
  loom_value_t wrt[n_x > 0 ? n_x : 1], grads[n_x > 0 ? n_x : 1];
  int n_w = 0;
  for (int64_t i = 0; i < n_x; i++)
    if (dtype_is_float(gb->values[gb->inputs[i]].type.dtype)) wrt[n_w++].id = gb->inputs[i];
  LOOM_TRY(loom_grad(gb, loss, n_w, wrt, grads));
  gb->n_outputs = 0;
  for (int i = 0; i < n_w; i++) LOOM_TRY(loom_graph_output(gb, grads[i]));
  return LOOM_OK;
}

/* Adds to c->g the gradient branch of subgraph `attr`; its index in *index. */
static loom_status_t add_grad_branch(grad_ctx_t *c, const char *attr, int64_t *index) {
  loom_graph_t *branch = ir_node_subgraph(c->g, &c->node, attr), *gb;
  if (!branch) return loom_fail(LOOM_ERR_GRAPH, "if: %s names no subgraph", attr);
  LOOM_TRY(ir_graph_clone(branch, &gb));
  loom_status_t s = grad_branch(gb, c->dout, c->node.n_out);
  if (s != LOOM_OK) {
    loom_graph_destroy(gb);
    return loom_fail(s, "gradient of if, %s: %s", attr, loom_last_error());
  }
  return ir_graph_adopt(c->g, gb, index);
}

loom_status_t grad_if(grad_ctx_t *c) {
  const ir_node_t *n = &c->node;
  int n_w = 0;
  for (int i = 1; i < n->n_in; i++) n_w += dtype_is_float(c->g->values[n->in[i]].type.dtype);
  if (n_w == 0) return LOOM_OK; /* no input takes a gradient */
  int64_t then_i, else_i;
  LOOM_TRY(add_grad_branch(c, "then_graph", &then_i));
  LOOM_TRY(add_grad_branch(c, "else_graph", &else_i));
  int32_t in[n->n_in + n->n_out], dx[n->n_in];
  int n_in = 0;
  for (int i = 0; i < n->n_in; i++) in[n_in++] = n->in[i];
  for (int k = 0; k < n->n_out; k++)
    if (c->dout[k] >= 0) in[n_in++] = c->dout[k];
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "then_graph", then_i);
  ir_attrs_int(&a, "else_graph", else_i);
  LOOM_TRY(ir_add_node(c->g, IR_OP_IF, n_in, in, &a, dx, n_w));
  for (int i = 1, w = 0; i < n->n_in; i++)
    if (dtype_is_float(c->g->values[n->in[i]].type.dtype)) c->din[i] = dx[w++];
  return LOOM_OK;
}
