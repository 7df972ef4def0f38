/* Forward/backward partition of a segment (see partition.h).
 *
 * The joint graph is a clone of src with one new input per float output
 * (its incoming gradient dY_i), and the gradient nodes that grad_vjp
 * appends, seeded with exactly the dY_i. Nodes before the clone's end are
 * the forward, the rest the backward. The forward values the backward
 * reads are saved (forward outputs, backward inputs), except where a
 * cheaper choice exists: an elementwise value that depends on a single
 * other value (its root) is recomputed in the backward from the root when
 * saving the root alone takes fewer bytes. Random ops are never
 * recomputed, so a dropout mask is saved, not drawn again. Parameters and
 * constants are not saved: the backward reads them itself (constants as
 * its own copies, parameters shared with src). */
#include "passes/partition.h"

#include <stdio.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/rewrite.h"
#include "passes/grad.h"
#include "passes/passes.h"

/* root[v]: the value has no root (a constant, a parameter, or computed
 * from those alone): the backward recomputes it from nothing. */
#define ROOT_FREE (-1)

typedef struct part {
  const loom_graph_t *src;
  loom_graph_t *joint;
  int64_t n_fwd_values, n_fwd_nodes; /* the clone of src, in joint */
  int n_dy;
  int32_t *dy;     /* joint ids of the dY inputs, in output order */
  int32_t *grads;  /* joint ids of the gradients, one per wrt */
  int n_wrt;
  uint8_t *live;   /* joint values that the gradients need */
  uint8_t *read;   /* forward values that the backward reads */
  int32_t *root;   /* per forward value; see choose_saved */
  uint8_t *saved;  /* forward values that the forward outputs */
  uint8_t *redo;   /* forward nodes that the backward recomputes */
  int n_saved;
} part_t;

/* ---- Arguments ----------------------------------------------------------- */

static loom_status_t check_args(const loom_graph_t *src, int n_wrt,
                                const int *wrt, partition_t *out) {
  LOOM_CHECK_ARG(src);
  LOOM_CHECK_ARG(out);
  if (n_wrt < 0 || (n_wrt > 0 && !wrt))
    return loom_fail(LOOM_ERR_INVALID, "partition: %d wrt inputs%s", n_wrt,
                     n_wrt > 0 ? " given as a null list" : "");
  for (int i = 0; i < n_wrt; i++) {
    if (wrt[i] < 0 || wrt[i] >= src->n_inputs + src->n_outputs)
      return loom_fail(LOOM_ERR_INVALID, "partition: wrt[%d] = %d is not an "
                       "input or output index (the graph has %lld inputs, %lld "
                       "outputs)", i, wrt[i], (long long)src->n_inputs,
                       (long long)src->n_outputs);
    bool in = wrt[i] < src->n_inputs;
    const ir_value_t *v = &src->values[in ? src->inputs[wrt[i]]
                                          : src->outputs[wrt[i] - src->n_inputs]];
    if (!dtype_is_float(v->type.dtype))
      return loom_fail(LOOM_ERR_DTYPE, "partition: wrt[%d] is %s %lld ('%s') "
                       "of dtype %s; gradients need a float value", i,
                       in ? "input" : "output",
                       (long long)(in ? wrt[i] : wrt[i] - src->n_inputs),
                       v->name ? v->name : "", loom_dtype_name(v->type.dtype));
  }
  for (int64_t i = 0; i < src->n_nodes; i++)
    if (ir_ops[src->nodes[i].op].flags & F_SIDE_EFFECT)
      return loom_fail(LOOM_ERR_UNSUPPORTED, "partition: node %lld ('%s') "
                       "writes state; a partitioned segment has no assigns",
                       (long long)i, ir_ops[src->nodes[i].op].name);
  return LOOM_OK;
}

/* ---- The joint graph ----------------------------------------------------- */

/* One input per float output of the clone, of that output's type. */
static loom_status_t add_output_gradients(part_t *p, int32_t *ys) {
  loom_graph_t *j = p->joint;
  for (int64_t i = 0; i < j->n_outputs; i++) {
    ir_value_t y = j->values[j->outputs[i]];
    if (!dtype_is_float(y.type.dtype)) continue;
    char name[64];
    if (y.name) snprintf(name, sizeof name, "d_%s", y.name);
    else snprintf(name, sizeof name, "d_out%lld", (long long)i);
    loom_value_t d;
    LOOM_TRY(ir_graph_input(j, name, y.type.dtype, y.type.rank, y.type.dims,
                            &d));
    ys[p->n_dy] = j->outputs[i];
    p->dy[p->n_dy++] = d.id;
  }
  return LOOM_OK;
}

/* The gradient's failure names the op; the prefix names the pass. */
static loom_status_t differentiate(part_t *p, const int *wrt) {
  loom_graph_t *j = p->joint;
  size_t n_out = (size_t)(j->n_outputs ? j->n_outputs : 1);
  int32_t *ys = core_malloc(n_out * sizeof *ys);
  loom_value_t *w = core_malloc((size_t)(p->n_wrt ? p->n_wrt : 1) * sizeof *w);
  loom_value_t *g = core_malloc((size_t)(p->n_wrt ? p->n_wrt : 1) * sizeof *g);
  p->dy = core_malloc(n_out * sizeof *p->dy);
  p->grads = core_malloc((size_t)(p->n_wrt ? p->n_wrt : 1) * sizeof *p->grads);
  loom_status_t s = ys && w && g && p->dy && p->grads
                        ? LOOM_OK
                        : loom_fail(LOOM_ERR_NOMEM, "partition: out of memory");
  if (s == LOOM_OK) s = add_output_gradients(p, ys);
  if (s == LOOM_OK) {
    int64_t n_in = p->src->n_inputs;
    for (int i = 0; i < p->n_wrt; i++)
      w[i].id = wrt[i] < n_in ? j->inputs[wrt[i]] : j->outputs[wrt[i] - n_in];
    s = grad_vjp(j, p->n_dy, ys, p->dy, p->n_wrt, w, g);
    if (s != LOOM_OK) {
      char why[256];
      snprintf(why, sizeof why, "%s", loom_last_error());
      s = loom_fail(s, "partition: %s", why);
    }
  }
  for (int i = 0; s == LOOM_OK && i < p->n_wrt; i++) p->grads[i] = g[i].id;
  core_free(ys);
  core_free(w);
  core_free(g);
  return s;
}

/* live[v] for the values that the gradients need, walking the gradient
 * nodes backwards (rules may emit nodes that nothing reads); read[v] for
 * the forward values among them. */
static void mark_read(part_t *p) {
  const loom_graph_t *j = p->joint;
  uint8_t *live = p->live;
  for (int i = 0; i < p->n_wrt; i++) live[p->grads[i]] = 1;
  for (int64_t n = j->n_nodes - 1; n >= p->n_fwd_nodes; n--) {
    const ir_node_t *nd = &j->nodes[n];
    bool any = false;
    for (int k = 0; k < nd->n_out; k++) any |= live[nd->out[k]];
    for (int k = 0; any && k < nd->n_in; k++) live[nd->in[k]] = 1;
  }
  for (int64_t v = 0; v < p->n_fwd_values; v++) p->read[v] = live[v];
}

/* ---- What to save -------------------------------------------------------- */

/* The backward may run an op again only if it gives the same values:
 * not a random draw. Elementwise ops are cheap next to their memory. */
static bool recomputable(const loom_graph_t *g, const ir_node_t *nd) {
  const ir_op_info_t *op = &ir_ops[nd->op];
  return op->fusion_class == IR_CLASS_EW && nd->n_out == 1 &&
         !(op->flags & (F_RANDOM | F_SIDE_EFFECT | F_COLLECTIVE)) && !ir_node_data_shaped(g, nd);
}

/* root[v] = v when v can only be had by saving it; r when v is an
 * elementwise function of r alone (and constants); ROOT_FREE when it is
 * a function of constants and parameters only. */
static void find_roots(part_t *p) {
  const loom_graph_t *j = p->joint;
  for (int64_t v = 0; v < p->n_fwd_values; v++) {
    ir_value_kind_t k = j->values[v].kind;
    p->root[v] = k == IR_VALUE_CONST || k == IR_VALUE_PARAM ? ROOT_FREE
                                                             : (int32_t)v;
  }
  for (int64_t n = 0; n < p->n_fwd_nodes; n++) {
    const ir_node_t *nd = &j->nodes[n];
    if (!recomputable(j, nd)) continue;
    int32_t r = ROOT_FREE;
    for (int k = 0; k < nd->n_in && r != nd->out[0]; k++) {
      int32_t ri = p->root[nd->in[k]];
      if (ri == ROOT_FREE || ri == r) continue;
      r = r == ROOT_FREE ? ri : nd->out[0];
    }
    p->root[nd->out[0]] = r;
  }
}

/* Bytes of a value, a symbolic dim counted as 64 (a typical batch). */
static double value_bytes(const loom_graph_t *g, int32_t v) {
  const ir_type_t *t = &g->values[v].type;
  double n = (double)loom_dtype_size(t->dtype);
  for (int i = 0; i < t->rank; i++)
    n *= ir_dim_is_const(t->dims[i]) ? (double)t->dims[i] : 64.0;
  return n;
}

/* For each root r, the read values with root r are either all saved, or
 * r alone is saved and the others recomputed: whichever keeps fewer
 * bytes (r alone, when r is read itself). Values without a root are
 * always recomputed. group[] sums bytes per root. */
static void choose_saved(part_t *p, double *group) {
  const loom_graph_t *j = p->joint;
  find_roots(p);
  for (int64_t v = 0; v < p->n_fwd_values; v++)
    if (p->read[v] && p->root[v] >= 0) group[p->root[v]] += value_bytes(j, (int32_t)v);
  for (int64_t v = 0; v < p->n_fwd_values; v++) {
    int32_t r = p->root[v];
    if (!p->read[v] || r == ROOT_FREE) continue;
    bool root_alone = p->read[r] || value_bytes(j, r) < group[r];
    p->saved[root_alone ? r : v] = 1;
  }
  for (int64_t v = 0; v < p->n_fwd_values; v++) p->n_saved += p->saved[v];
}

/* redo[n] for the forward nodes that compute a value the backward needs
 * and does not get saved; their inputs are needed in turn. Each such
 * chain ends at saved values, constants and parameters (choose_saved). */
static void mark_recompute(part_t *p, uint8_t *need) {
  const loom_graph_t *j = p->joint;
  for (int64_t v = 0; v < p->n_fwd_values; v++) need[v] = p->read[v];
  for (int64_t n = p->n_fwd_nodes - 1; n >= 0; n--) {
    const ir_node_t *nd = &j->nodes[n];
    bool any = false;
    for (int k = 0; k < nd->n_out; k++)
      any |= need[nd->out[k]] && !p->saved[nd->out[k]];
    p->redo[n] = any;
    for (int k = 0; any && k < nd->n_in; k++) need[nd->in[k]] = 1;
  }
}

/* ---- Symbols the backward must be told ----------------------------------- */

/* Sets uses[c] for every symbol in dim d (expressions walked). */
static void symbols_of(const loom_graph_t *g, ir_dim_t d, uint8_t *uses) {
  const ir_expr_t *e = ir_dim_is_const(d) ? NULL : ir_dim_expr(g, d);
  if (!e || e->kind == IR_EXPR_CONST) return;
  if (e->kind == IR_EXPR_SYM) {
    uses[e->c] = 1;
    return;
  }
  symbols_of(g, e->a, uses);
  symbols_of(g, e->b, uses);
}

/* Sets bound[c] for the dims of v that are symbol c itself: a run binds
 * those from its inputs' sizes. */
static void symbols_bound_by(const loom_graph_t *g, int32_t v, uint8_t *bound) {
  const ir_type_t *t = &g->values[v].type;
  for (int a = 0; a < t->rank; a++) {
    const ir_expr_t *e = ir_dim_is_const(t->dims[a]) ? NULL : ir_dim_expr(g, t->dims[a]);
    if (e && e->kind == IR_EXPR_SYM) bound[e->c] = 1;
  }
}

/* A symbolic size the backward needs (a sum's gradient spread back over
 * a batch) may come from no saved value and no incoming gradient: x.sum()
 * saves nothing. Then a forward value that has it as a dim is saved too,
 * an input first (a view of memory the step has, not a copy). */
static void save_symbol_carriers(part_t *p, const uint8_t *need, uint8_t *uses,
                                 uint8_t *bound) {
  const loom_graph_t *j = p->joint;
  for (int64_t v = 0; v < j->n_values; v++) {
    bool in_backward = v < p->n_fwd_values ? need[v] : p->live[v];
    const ir_type_t *t = &j->values[v].type;
    for (int a = 0; in_backward && a < t->rank; a++) symbols_of(j, t->dims[a], uses);
  }
  for (int64_t v = 0; v < p->n_fwd_values; v++)
    if (p->saved[v]) symbols_bound_by(j, (int32_t)v, bound);
  for (int k = 0; k < p->n_dy; k++) symbols_bound_by(j, p->dy[k], bound);
  /* the inputs, then every forward value: saved when it has a missing one */
  for (int64_t i = 0; i < p->src->n_inputs + p->n_fwd_values; i++) {
    int32_t v = i < p->src->n_inputs ? j->inputs[i] : (int32_t)(i - p->src->n_inputs);
    const ir_type_t *t = &j->values[v].type;
    bool carries = false;
    for (int a = 0; a < t->rank; a++) {
      const ir_expr_t *e = ir_dim_is_const(t->dims[a]) ? NULL : ir_dim_expr(j, t->dims[a]);
      carries |= e && e->kind == IR_EXPR_SYM && uses[e->c] && !bound[e->c];
    }
    if (!carries || p->saved[v]) continue;
    p->saved[v] = 1;
    p->n_saved++;
    symbols_bound_by(j, v, bound);
  }
}

/* ---- The two graphs ------------------------------------------------------ */

/* The constant of joint (NULL: none) that owns data. */
static ir_value_t *owner(loom_graph_t *joint, const loom_tensor_t *data) {
  for (int64_t u = 0; joint && u < joint->n_values; u++) {
    ir_value_t *jv = &joint->values[u];
    if (jv->kind == IR_VALUE_CONST && jv->data == data && !jv->borrowed) return jv;
  }
  return NULL;
}

/* g's borrowed constants become its own: those the joint graph owns (made
 * by gradient rules) change owner, src's are copied. Callers may then
 * drop src and keep the halves (the tracer replaces a segment's graph by
 * one of them). */
static loom_status_t own_constants(loom_graph_t *g, loom_graph_t *joint) {
  for (int64_t v = 0; v < g->n_values; v++) {
    ir_value_t *gv = &g->values[v];
    if (gv->kind != IR_VALUE_CONST || !gv->borrowed) continue;
    ir_value_t *jv = owner(joint, gv->data);
    if (jv) {
      jv->borrowed = true;
    } else {
      loom_tensor_t *copy;
      LOOM_TRY(tensor_contiguous_copy(gv->data, &copy));
      gv->data = copy;
    }
    gv->borrowed = false;
  }
  return LOOM_OK;
}

/* src with outputs (src's, then the saved values), dead nodes removed.
 * A second clone of src has the same value ids as the joint graph's
 * clone, so saved ids carry over. */
static loom_status_t build_forward(const part_t *p, loom_graph_t **out) {
  loom_graph_t *f = NULL;
  LOOM_TRY(ir_graph_clone(p->src, &f));
  loom_status_t s = LOOM_OK;
  if (f->n_values < p->n_fwd_values)
    s = loom_fail(LOOM_ERR_GRAPH, "internal: partition: two clones differ");
  for (int64_t v = 0; s == LOOM_OK && v < p->n_fwd_values; v++)
    if (p->saved[v]) s = loom_graph_output(f, (loom_value_t){(int32_t)v});
  if (s == LOOM_OK) s = pass_dce(f, out);
  loom_graph_destroy(f);
  return s == LOOM_OK ? own_constants(*out, NULL) : s;
}

/* A backward input standing for joint value v. */
static loom_status_t backward_input(ir_rewriter_t *rw, int32_t v,
                                    const char *prefix, int64_t i) {
  const ir_value_t *jv = &rw->src->values[v];
  char name[64];
  if (jv->name) snprintf(name, sizeof name, "%s%s", prefix, jv->name);
  else snprintf(name, sizeof name, "%s%lld", prefix, (long long)i);
  loom_value_t d;
  LOOM_TRY(ir_graph_input(rw->dst, name, jv->type.dtype, jv->type.rank,
                          jv->type.dims, &d));
  ir_rewrite_map(rw, v, d.id);
  return LOOM_OK;
}

static loom_status_t backward_nodes(part_t *p, ir_rewriter_t *rw) {
  loom_graph_t *j = p->joint;
  int64_t i = 0;
  for (int64_t v = 0; v < p->n_fwd_values; v++)
    if (p->saved[v]) LOOM_TRY(backward_input(rw, (int32_t)v, "saved_", i++));
  for (int k = 0; k < p->n_dy; k++)
    LOOM_TRY(backward_input(rw, p->dy[k], "", k));
  for (int64_t n = 0; n < p->n_fwd_nodes; n++)
    if (p->redo[n]) LOOM_TRY(ir_rewrite_copy(rw, n));
  for (int64_t n = p->n_fwd_nodes; n < j->n_nodes; n++) {
    bool any = false;
    for (int k = 0; k < j->nodes[n].n_out; k++) any |= p->live[j->nodes[n].out[k]];
    if (any) LOOM_TRY(ir_rewrite_copy(rw, n));
  }
  return LOOM_OK;
}

/* Inputs: saved values, then dY; nodes: the recomputed forward nodes,
 * then the gradient nodes; outputs: the gradients. */
static loom_status_t build_backward(part_t *p, loom_graph_t **out) {
  loom_graph_t *j = p->joint;
  ir_rewriter_t rw;
  LOOM_TRY(ir_rewrite_begin_no_inputs(j, &rw));
  loom_status_t s = backward_nodes(p, &rw);
  /* The joint graph is this pass's own: its outputs become the gradients,
   * which the rewrite maps into the backward's outputs. */
  j->n_outputs = 0;
  for (int i = 0; s == LOOM_OK && i < p->n_wrt; i++)
    s = loom_graph_output(j, (loom_value_t){p->grads[i]});
  if (s != LOOM_OK) {
    ir_rewrite_abort(&rw);
    return s;
  }
  LOOM_TRY(ir_rewrite_finish(&rw, out));
  return own_constants(*out, j);
}

/* ---- The pass ------------------------------------------------------------ */

static loom_status_t alloc_marks(part_t *p) {
  size_t nv = (size_t)(p->n_fwd_values ? p->n_fwd_values : 1);
  p->live = core_calloc((size_t)(p->joint->n_values ? p->joint->n_values : 1), 1);
  p->read = core_calloc(nv, 1);
  p->saved = core_calloc(nv, 1);
  p->root = core_malloc(nv * sizeof *p->root);
  p->redo = core_calloc((size_t)(p->n_fwd_nodes ? p->n_fwd_nodes : 1), 1);
  return p->live && p->read && p->saved && p->root && p->redo
             ? LOOM_OK
             : loom_fail(LOOM_ERR_NOMEM, "partition: out of memory");
}

/* The saved set and the recomputed nodes, from the joint graph. */
static loom_status_t plan(part_t *p) {
  size_t nv = (size_t)(p->n_fwd_values ? p->n_fwd_values : 1);
  size_t n_syms = (size_t)ir_num_symbols(p->joint) + 1;
  uint8_t *need = core_calloc(nv, 1);
  double *group = core_calloc(nv, sizeof *group);
  uint8_t *uses = core_calloc(n_syms, 1), *bound = core_calloc(n_syms, 1);
  loom_status_t s = need && group && uses && bound
                        ? LOOM_OK
                        : loom_fail(LOOM_ERR_NOMEM, "partition: out of memory");
  if (s == LOOM_OK) {
    mark_read(p);
    choose_saved(p, group);
    mark_recompute(p, need);
    save_symbol_carriers(p, need, uses, bound);
  }
  core_free(need);
  core_free(group);
  core_free(uses);
  core_free(bound);
  return s;
}

static loom_status_t partition(part_t *p, const int *wrt, partition_t *out) {
  LOOM_TRY(ir_graph_clone(p->src, &p->joint));
  p->n_fwd_values = p->joint->n_values;
  p->n_fwd_nodes = p->joint->n_nodes;
  LOOM_TRY(differentiate(p, wrt));
  LOOM_TRY(alloc_marks(p));
  LOOM_TRY(plan(p));
  LOOM_TRY(build_forward(p, &out->forward));
  LOOM_TRY(build_backward(p, &out->backward));
  out->n_saved = p->n_saved;
  out->n_grad_inputs = p->n_dy;
  return LOOM_OK;
}

loom_status_t pass_partition(const loom_graph_t *src, int n_wrt,
                             const int *wrt, partition_t *out) {
  LOOM_TRY(check_args(src, n_wrt, wrt, out));
  *out = (partition_t){0};
  part_t p = {.src = src, .n_wrt = n_wrt};
  loom_status_t s = partition(&p, wrt, out);
  loom_graph_destroy(p.joint);
  core_free(p.dy);
  core_free(p.grads);
  core_free(p.live);
  core_free(p.read);
  core_free(p.root);
  core_free(p.saved);
  core_free(p.redo);
  if (s != LOOM_OK) partition_free(out);
  else loom_clear_error();
  return s;
}

void partition_free(partition_t *p) {
  if (!p) return;
  loom_graph_destroy(p->forward);
  loom_graph_destroy(p->backward);
  *p = (partition_t){0};
}
