/* The interpreter's step for one node (interp.c walks the graph, runs in
 * blocks go through interp_blocks.c): its outputs allocated at their
 * evaluated shapes, a back end's eager kernel offered first, the
 * reference kernel otherwise; an alias op taking over its dying input,
 * an index read only by scatter_add seen as a strided view. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/ir.h"
#include "kernels/ref.h"
#include "runtime/interp_internal.h"

/* Binds the plain symbols of type t (dims that are just "n") to the sizes
 * of x, where no earlier tensor bound them. */
void interp_bind_symbols(interp_t *it, const ir_type_t *t,
                         const loom_tensor_t *x) {
  if (x->rank != t->rank) return; /* check_dims reports it */
  for (int i = 0; i < t->rank; i++) {
    const ir_expr_t *e = ir_dim_expr(it->g, t->dims[i]);
    if (e && e->kind == IR_EXPR_SYM && it->syms[e->c] < 0)
      it->syms[e->c] = x->shape[i];
  }
}

/* Checks x against type t once the symbols are bound. */
loom_status_t interp_check_dims(interp_t *it, const ir_type_t *t, const loom_tensor_t *x,
                                const char *what, ...) {
  loom_graph_t *g = it->g;
  int bad = x->dtype != t->dtype || x->rank != t->rank ? -2 : -1; /* or the dim */
  int64_t v = -1;
  loom_status_t s = LOOM_OK;
  for (int i = 0; bad == -1 && i < t->rank; i++) {
    s = ir_dim_eval(g, t->dims[i], it->syms, &v);
    if (s != LOOM_OK || v != x->shape[i]) bad = i;
  }
  if (bad == -1) return LOOM_OK;
  char name[96], want[160], got[160], dim[64];
  va_list ap;
  va_start(ap, what);
  vsnprintf(name, sizeof name, what, ap);
  va_end(ap);
  ir_type_str(g, t, want, sizeof want);
  shape_str(x->rank, x->shape, got, sizeof got);
  if (bad == -2)
    return loom_fail(LOOM_ERR_BINDING, "%s expects %s, got %s %s", name, want,
                     loom_dtype_name(x->dtype), got);
  return loom_fail(LOOM_ERR_BINDING, "%s expects %s, got %s %s: dim %d (%s) is %lld there",
                   name, want, loom_dtype_name(x->dtype), got, bad,
                   ir_dim_str(g, t->dims[bad], dim, sizeof dim),
                   s == LOOM_OK ? (long long)v : -1LL);
}

void interp_release(interp_t *it, int32_t v) {
  if (it->owned[v]) loom_tensor_destroy(it->vals[v]);
  it->vals[v] = NULL;
  it->owned[v] = false;
}

/* The shape of output k of n for the bound symbols. */
loom_status_t interp_output_shape(interp_t *it, const ir_node_t *n, int k, int64_t *shape) {
  const ir_type_t *t = &it->g->values[n->out[k]].type;
  for (int d = 0; d < t->rank; d++) {
    LOOM_TRY(ir_dim_eval(it->g, t->dims[d], it->syms, &shape[d]));
    if (shape[d] < 0) {
      char dim[64];
      return loom_fail(LOOM_ERR_SHAPE, "%s: output %d dim %d (%s) is %lld for these inputs",
                       ir_ops[n->op].name, k, d,
                       ir_dim_str(it->g, t->dims[d], dim, sizeof dim), (long long)shape[d]);
    }
  }
  LOOM_TRY(ir_check_window_output(it->g, "loom_interpret", n->out[k], shape));
  return ir_value_bytes(it->g, "loom_interpret", n->out[k], shape, NULL);
}

/* Allocates the outputs of node n with their evaluated shapes: zeroed
 * for the reference kernels, unset for a back end's eager kernels, which
 * write every element (zeroed by zero_outputs when one declines). */
static loom_status_t alloc_outputs(interp_t *it, const ir_node_t *n,
                                   loom_tensor_t **outs) {
  for (int k = 0; k < n->n_out; k++) {
    const ir_type_t *t = &it->g->values[n->out[k]].type;
    int64_t shape[LOOM_MAX_RANK];
    LOOM_TRY(interp_output_shape(it, n, k, shape));
    LOOM_TRY(it->fast ? tensor_new_uninit(t->dtype, t->rank, shape, &outs[k])
                      : tensor_new(t->dtype, t->rank, shape, &outs[k]));
  }
  return LOOM_OK;
}

static void zero_outputs(const ir_node_t *n, loom_tensor_t **outs) {
  for (int k = 0; k < n->n_out; k++)
    if (outs[k] && outs[k]->data)
      memset(outs[k]->data, 0,
             (size_t)loom_tensor_numel(outs[k]) * loom_dtype_size(outs[k]->dtype));
}

/* After a data-dependent op: binds the fresh symbols in its output types
 * to the sizes the kernel produced. */
static loom_status_t bind_outputs(interp_t *it, const ir_node_t *n,
                                  loom_tensor_t **outs) {
  for (int k = 0; k < n->n_out; k++) {
    interp_bind_symbols(it, &it->g->values[n->out[k]].type, outs[k]);
    LOOM_TRY(interp_check_dims(it, &it->g->values[n->out[k]].type, outs[k], "%s output %d",
                               ir_ops[n->op].name, k));
  }
  return LOOM_OK;
}

/* An op whose output is its input's elements in order (reshape,
 * squeeze, unsqueeze, identity) takes over its input's tensor where the
 * input is the interpreter's, contiguous, and read last here: no copy
 * (the fast interpreter only: the reference one runs every kernel). */
static bool take_over_input(interp_t *it, int64_t index, const ir_node_t *n) {
  if (!it->fast || !(ir_ops[n->op].flags & F_ALIAS) || n->n_in != 1 || n->n_out != 1)
    return false;
  int32_t v = n->in[0], y = n->out[0];
  loom_tensor_t *x = it->vals[v];
  int64_t shape[LOOM_MAX_RANK];
  const ir_type_t *t = &it->g->values[y].type;
  if (!it->owned[v] || it->last_use[v] != index || !x || t->dtype != x->dtype ||
      !tensor_is_contiguous(x) || interp_output_shape(it, n, 0, shape) != LOOM_OK ||
      shape_numel(t->rank, shape) != loom_tensor_numel(x))
    return false; /* the kernel runs, and reports what is wrong */
  tensor_reshape_in_place(x, t->rank, shape);
  it->vals[y] = x;
  it->owned[y] = true;
  it->vals[v] = NULL;
  it->owned[v] = false;
  return true;
}

/* An expand, or an integer add of zeros, whose output is read only as a
 * scatter_add's index: its input (contiguous) seen through the output's
 * shape with stride 0 along the broadcast dims, not copied (the eager
 * scatter_add reads an index that repeats a column along every dim but
 * the axis, a graph network's edge index spread over the features, a row
 * at a time). The view takes over an input that dies here, borrows one
 * that lives as long as the view (the run's inputs, parameters and
 * constants, or a value read as late), and is not made of any other. The
 * interpreter never writes a tensor it has handed to a later node, so a
 * borrowed view reads what its input holds. */
static bool index_view(interp_t *it, int64_t index, const ir_node_t *n) {
  const loom_graph_t *g = it->g;
  if (!it->fast || n->n_out != 1 || !it->index_only[n->out[0]]) return false;
  const ir_type_t *t = &g->values[n->out[0]].type;
  int32_t v = ir_broadcast_source(g, n);
  loom_tensor_t *x = v >= 0 ? it->vals[v] : NULL;
  int64_t shape[LOOM_MAX_RANK], strides[LOOM_MAX_RANK];
  /* taken over where it dies here, borrowed where it lives as long */
  bool take = v >= 0 && it->owned[v] && it->last_use[v] == index;
  if (!x || x->dtype != t->dtype || x->rank > t->rank || !tensor_is_contiguous(x) ||
      (it->owned[v] && !take && it->last_use[v] < it->last_use[n->out[0]]) ||
      interp_output_shape(it, n, 0, shape) != LOOM_OK)
    return false;
  int64_t step = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    int dx = d - (t->rank - x->rank);
    int64_t size = dx >= 0 ? x->shape[dx] : 1;
    if (size != 1 && size != shape[d]) return false; /* the kernel reports it */
    strides[d] = size == 1 ? 0 : step;
    step *= size;
  }
  loom_tensor_t *y = x;
  if (take) {
    y->rank = t->rank;
    memcpy(y->shape, shape, sizeof(int64_t) * (size_t)t->rank);
    memcpy(y->strides, strides, sizeof(int64_t) * (size_t)t->rank);
    it->vals[v] = NULL;
    it->owned[v] = false;
  } else if (loom_tensor_wrap(t->dtype, t->rank, shape, strides, x->data, &y) != LOOM_OK) {
    return false;
  }
  it->vals[n->out[0]] = y;
  it->owned[n->out[0]] = true;
  return true;
}

loom_status_t interp_run_node(interp_t *it, int64_t index) {
  const ir_node_t *n = &it->g->nodes[index];
  if (take_over_input(it, index, n) || index_view(it, index, n)) return LOOM_OK;
  const loom_tensor_t *ins[n->n_in > 0 ? n->n_in : 1];
  loom_tensor_t *outs[n->n_out > 0 ? n->n_out : 1];
  memset(outs, 0, sizeof outs);
  for (int i = 0; i < n->n_in; i++) ins[i] = it->vals[n->in[i]];
  /* An assign writes the parameter's storage, not the snapshot that
   * other assigns read (see snapshot_assigned_params). */
  if (interp_is_assign(n)) ins[0] = it->g->values[n->in[0]].data;
  loom_status_t s = LOOM_OK;
  bool data_shaped = ir_node_data_shaped(it->g, n);
  if (!data_shaped) s = alloc_outputs(it, n, outs);
  ref_call_t call = {.g = it->g, .node = n, .attrs = n->attrs, .n_in = n->n_in,
                     .in = ins, .n_out = n->n_out, .out = outs, .pool = it->pool};
  bool taken = s == LOOM_OK && it->fast && it->fast->eager(&call, &s);
  loom_tensor_t *dense = NULL; /* an index view, for a reference kernel */
  if (s == LOOM_OK && !taken && n->op == IR_OP_SCATTER_ADD && !tensor_is_contiguous(ins[1])) {
    s = tensor_contiguous_copy(ins[1], &dense);
    ins[1] = dense;
  }
  if (s == LOOM_OK && !taken) {
    if (it->fast && !data_shaped) zero_outputs(n, outs);
    s = ref_kernels[n->op](&call);
  }
  loom_tensor_destroy(dense);
  if (s == LOOM_OK && data_shaped) s = bind_outputs(it, n, outs);
  if (s != LOOM_OK) {
    for (int k = 0; k < n->n_out; k++) loom_tensor_destroy(outs[k]);
    return s;
  }
  for (int k = 0; k < n->n_out; k++) {
    it->vals[n->out[k]] = outs[k];
    it->owned[n->out[k]] = true;
  }
  return LOOM_OK;
}
