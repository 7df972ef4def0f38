/* Reverse-mode autodiff: loom_grad appends the gradient graph of a scalar
 * loss to the loss's own graph, calling each op's rule from the grad
 * column of the op table (src/passes/grad.h). */
#include <stdbool.h>

#include "core/alloc.h"
#include "core/dtype.h"
#include "core/status.h"
#include "passes/grad.h"

/* Declares every row's rule. NONE and ZERO rows declare grad_NONE and
 * grad_ZERO, which are never defined nor used: the table below maps them
 * to NULL and the op table's flags tell the two apart. */
#define LOOM_OP(ID, nm, cls, imin, imax, nout, dt, fl, shp, ref, grad, ...) \
  loom_status_t grad_##grad(grad_ctx_t *c);
#include "ir/ops.def"
#undef LOOM_OP

#define grad_NONE NULL
#define grad_ZERO NULL
static const grad_rule_fn grad_rules[IR_OP_COUNT] = {
#define LOOM_OP(ID, nm, cls, imin, imax, nout, dt, fl, shp, ref, grad, ...) \
  [IR_OP_##ID] = grad_##grad,
#include "ir/ops.def"
#undef LOOM_OP
};
#undef grad_NONE
#undef grad_ZERO

/* The state of one loom_grad call over the graph's first n_values values
 * and n_nodes nodes (those that existed before it appended anything). */
typedef struct autodiff {
  loom_graph_t *g;
  int n_ys;
  const int32_t *ys; /* the values whose gradients are seeded */
  int64_t n_values, n_nodes;
  bool *from_wrt;  /* a float value that depends on some wrt value */
  bool *to_loss;   /* a value that the loss depends on */
  int32_t *grad;   /* running gradient of each value, -1 for none yet */
} autodiff_t;

static bool carries_gradient(const loom_graph_t *g, int32_t v) {
  return dtype_is_float(g->values[v].type.dtype);
}

/* Marks the float values reachable from wrt through differentiable ops.
 * Integer and bool values carry no gradient, and ZERO ops stop it. */
static void mark_from_wrt(autodiff_t *ad, int n, const loom_value_t *wrt) {
  loom_graph_t *g = ad->g;
  for (int i = 0; i < n; i++)
    if (carries_gradient(g, wrt[i].id)) ad->from_wrt[wrt[i].id] = true;
  for (int64_t i = 0; i < ad->n_nodes; i++) {
    const ir_node_t *nd = &g->nodes[i];
    if (ir_ops[nd->op].not_differentiable) continue;
    bool any = false;
    for (int k = 0; k < nd->n_in; k++) any |= ad->from_wrt[nd->in[k]];
    for (int k = 0; any && k < nd->n_out; k++)
      ad->from_wrt[nd->out[k]] = carries_gradient(g, nd->out[k]);
  }
}

static void mark_to_loss(autodiff_t *ad) {
  loom_graph_t *g = ad->g;
  for (int k = 0; k < ad->n_ys; k++) ad->to_loss[ad->ys[k]] = true;
  for (int64_t i = ad->n_nodes - 1; i >= 0; i--) {
    const ir_node_t *nd = &g->nodes[i];
    bool any = false;
    for (int k = 0; k < nd->n_out; k++) any |= ad->to_loss[nd->out[k]];
    for (int k = 0; any && k < nd->n_in; k++) ad->to_loss[nd->in[k]] = true;
  }
}

/* A full node of v's type holding value. */
static loom_status_t fill_like(loom_graph_t *g, int32_t v, double value,
                               int32_t *out) {
  ir_type_t t = g->values[v].type;
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "shape", t.rank, t.dims);
  ir_attrs_float(&a, "value", value);
  ir_attrs_int(&a, "dtype", t.dtype);
  return ir_add_node(g, IR_OP_FULL, 0, NULL, &a, out, 1);
}

/* Adds d (of x's type) to the running gradient of x. */
static loom_status_t add_gradient(autodiff_t *ad, int32_t x, int32_t d) {
  loom_graph_t *g = ad->g;
  if (ad->grad[x] < 0) {
    ad->grad[x] = d;
    return LOOM_OK;
  }
  int32_t in[2] = {ad->grad[x], d};
  return ir_add_node(g, IR_OP_ADD, 2, in, NULL, &ad->grad[x], 1);
}

/* Adds d to the running gradient of input k of node nd. */
static loom_status_t accumulate(autodiff_t *ad, const ir_node_t *nd, int k,
                                int32_t d) {
  loom_graph_t *g = ad->g;
  int32_t x = nd->in[k];
  if (!ir_value_valid(g, d) ||
      !ir_type_equal(&g->values[d].type, &g->values[x].type)) {
    char want[96] = "?", got[96] = "?";
    ir_type_str(g, &g->values[x].type, want, sizeof want);
    if (ir_value_valid(g, d))
      ir_type_str(g, &g->values[d].type, got, sizeof got);
    return loom_fail(LOOM_ERR_GRAPH, "gradient rule of '%s' is wrong: the "
                     "gradient of input %d is %s, the input is %s",
                     ir_ops[nd->op].name, k, got, want);
  }
  return add_gradient(ad, x, d);
}

static loom_status_t no_rule(autodiff_t *ad, const ir_node_t *nd) {
  char loss[64];
  return loom_fail(LOOM_ERR_UNSUPPORTED, "op '%s' has no gradient rule "
                   "(needed for the gradient of %s)", ir_ops[nd->op].name,
                   ir_value_str(ad->g, ad->ys[0], loss, sizeof loss));
}

/* Calls node i's rule if a gradient flows through it, and accumulates
 * what it gives into the inputs that lead back to a wrt value. */
static loom_status_t backprop_node(autodiff_t *ad, int64_t i) {
  ir_node_t nd = ad->g->nodes[i];
  bool flows_in = false, flows_out = false;
  for (int k = 0; k < nd.n_in; k++) flows_in |= ad->from_wrt[nd.in[k]];
  for (int k = 0; k < nd.n_out; k++) flows_out |= ad->grad[nd.out[k]] >= 0;
  if (!flows_in || !flows_out || ir_ops[nd.op].not_differentiable)
    return LOOM_OK;
  grad_rule_fn rule = grad_rules[nd.op];
  if (!rule) return no_rule(ad, &nd);
  int32_t dout[nd.n_out > 0 ? nd.n_out : 1], din[nd.n_in > 0 ? nd.n_in : 1];
  for (int k = 0; k < nd.n_out; k++) dout[k] = ad->grad[nd.out[k]];
  for (int k = 0; k < nd.n_in; k++) din[k] = -1;
  grad_ctx_t c = {.g = ad->g, .node = nd, .dout = dout, .din = din};
  LOOM_TRY(rule(&c));
  for (int k = 0; k < nd.n_in; k++)
    if (din[k] >= 0 && ad->from_wrt[nd.in[k]])
      LOOM_TRY(accumulate(ad, &nd, k, din[k]));
  return LOOM_OK;
}

static loom_status_t check_args(const char *fn, const loom_graph_t *g, loom_value_t loss,
                                int n, const loom_value_t *wrt, const void *grads) {
  LOOM_CHECK_ARG(g);
  char buf[64];
  if (!ir_value_valid(g, loss.id))
    return loom_fail(LOOM_ERR_INVALID, "%s: the loss is not a value of this graph (id %d)",
                     fn, (int)loss.id);
  const ir_type_t *t = &g->values[loss.id].type;
  ir_value_str(g, loss.id, buf, sizeof buf);
  if (t->rank != 0)
    return loom_fail(LOOM_ERR_SHAPE, "%s: the loss (%s) must be a scalar (rank 0), not rank %d",
                     fn, buf, t->rank);
  if (!dtype_is_float(t->dtype))
    return loom_fail(LOOM_ERR_DTYPE, "%s: the loss (%s) must have a float dtype, not %s", fn,
                     buf, loom_dtype_name(t->dtype));
  if (n < 0) return loom_fail(LOOM_ERR_INVALID, "%s: n is %d", fn, n);
  if (n > 0) {
    LOOM_CHECK_ARG(wrt);
    LOOM_CHECK_ARG(grads);
  }
  for (int i = 0; i < n; i++)
    if (!ir_value_valid(g, wrt[i].id))
      return loom_fail(LOOM_ERR_INVALID, "%s: wrt[%d] is not a value of this graph (id %d)", fn,
                       i, (int)wrt[i].id);
  return LOOM_OK;
}

/* Seeds grad[ys[k]] with seeds[k], then walks the nodes backwards. */
static loom_status_t run(autodiff_t *ad, const int32_t *seeds, int n,
                         const loom_value_t *wrt, loom_value_t *grads) {
  mark_from_wrt(ad, n, wrt);
  mark_to_loss(ad);
  for (int k = 0; k < ad->n_ys; k++)
    LOOM_TRY(add_gradient(ad, ad->ys[k], seeds[k]));
  for (int64_t i = ad->n_nodes - 1; i >= 0; i--) {
    const ir_node_t *nd = &ad->g->nodes[i];
    bool needed = false;
    for (int k = 0; k < nd->n_out; k++) needed |= ad->to_loss[nd->out[k]];
    if (needed) LOOM_TRY(backprop_node(ad, i));
  }
  for (int i = 0; i < n; i++) {
    int32_t d = carries_gradient(ad->g, wrt[i].id) ? ad->grad[wrt[i].id] : -1;
    if (d < 0) LOOM_TRY(fill_like(ad->g, wrt[i].id, 0.0, &d));
    grads[i].id = d;
  }
  return LOOM_OK;
}

/* The nodes after the first n_nodes (the seeds' and those that run
 * appends) are not walked. */
static loom_status_t vjp(loom_graph_t *g, int64_t n_nodes, int n_ys,
                         const int32_t *ys, const int32_t *seeds, int n,
                         const loom_value_t *wrt, loom_value_t *grads) {
  autodiff_t ad = {.g = g, .n_ys = n_ys, .ys = ys, .n_values = g->n_values,
                   .n_nodes = n_nodes};
  size_t nv = (size_t)g->n_values;
  ad.from_wrt = core_calloc(nv ? nv : 1, sizeof *ad.from_wrt);
  ad.to_loss = core_calloc(nv ? nv : 1, sizeof *ad.to_loss);
  ad.grad = core_malloc((nv ? nv : 1) * sizeof *ad.grad);
  loom_status_t s = LOOM_ERR_NOMEM;
  if (ad.from_wrt && ad.to_loss && ad.grad) {
    for (size_t i = 0; i < nv; i++) ad.grad[i] = -1;
    s = run(&ad, seeds, n, wrt, grads);
  } else {
    loom_fail(s, "loom_grad: out of memory for %zu values", nv);
  }
  core_free(ad.from_wrt);
  core_free(ad.to_loss);
  core_free(ad.grad);
  if (s == LOOM_OK) loom_clear_error();
  return s;
}

loom_status_t loom_grad(loom_graph_t *g, loom_value_t loss, int n,
                        const loom_value_t *wrt, loom_value_t *grads) {
  LOOM_TRY(check_args(__func__, g, loss, n, wrt, grads));
  int64_t n_nodes = g->n_nodes;
  int32_t seed;
  LOOM_TRY(fill_like(g, loss.id, 1.0, &seed));
  return vjp(g, n_nodes, 1, &loss.id, &seed, n, wrt, grads);
}

loom_status_t loom_grad_reaches(const loom_graph_t *g, loom_value_t loss, int n,
                                const loom_value_t *wrt, int *reached) {
  LOOM_TRY(check_args(__func__, g, loss, n, wrt, reached));
  uint8_t *to = core_calloc((size_t)g->n_values + 1, 1);
  if (!to) return loom_fail(LOOM_ERR_NOMEM, "loom_grad_reaches: out of memory");
  to[loss.id] = 1;
  for (int64_t i = g->n_nodes - 1; i >= 0; i--) { /* backwards: nodes are in order */
    const ir_node_t *nd = &g->nodes[i];
    if (ir_op_blocks_gradient(nd->op)) continue;
    bool any = false;
    for (int k = 0; k < nd->n_out; k++) any |= to[nd->out[k]] && carries_gradient(g, nd->out[k]);
    for (int k = 0; any && k < nd->n_in; k++) to[nd->in[k]] = 1;
  }
  for (int i = 0; i < n; i++) reached[i] = to[wrt[i].id] && carries_gradient(g, wrt[i].id);
  core_free(to);
  return LOOM_OK;
}

loom_status_t grad_vjp(loom_graph_t *g, int n_ys, const int32_t *ys,
                       const int32_t *seeds, int n, const loom_value_t *wrt,
                       loom_value_t *grads) {
  LOOM_CHECK_ARG(g);
  if (n_ys < 0 || n < 0 || (n_ys > 0 && (!ys || !seeds)) ||
      (n > 0 && (!wrt || !grads)))
    return loom_fail(LOOM_ERR_INVALID, "grad_vjp: %d values with %d wrt "
                     "(or a null list)", n_ys, n);
  for (int k = 0; k < n_ys; k++) {
    bool ok = ir_value_valid(g, ys[k]) && ir_value_valid(g, seeds[k]) &&
              dtype_is_float(g->values[ys[k]].type.dtype) &&
              ir_type_equal(&g->values[ys[k]].type, &g->values[seeds[k]].type);
    if (!ok)
      return loom_fail(LOOM_ERR_INVALID, "grad_vjp: value %d and its seed %d "
                       "must be float values of one type", (int)ys[k],
                       (int)seeds[k]);
  }
  for (int i = 0; i < n; i++)
    if (!ir_value_valid(g, wrt[i].id))
      return loom_fail(LOOM_ERR_INVALID, "grad_vjp: wrt[%d] is not a value "
                       "of this graph (id %d)", i, (int)wrt[i].id);
  return vjp(g, g->n_nodes, n_ys, ys, seeds, n, wrt, grads);
}
