/* The interpreter: runs a graph node by node with the reference kernels,
 * or, as the fallback of traces and of executables without code
 * (rt_interpret), with a back end's eager kernels where it has them.
 * It binds symbols from the inputs' shapes, allocates each node's outputs,
 * frees values after their last use, and commits assigns at the end. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/ir.h"
#include "kernels/ref.h"
#include "runtime/interp.h"

typedef struct interp {
  loom_graph_t *g;
  loom_tensor_t **vals; /* tensor of each value, once computed */
  bool *owned;          /* vals[i] belongs to the interpreter */
  int64_t *last_use;    /* index of the last node reading each value */
  bool *index_only;     /* read only as a scatter_add's index (index_view) */
  int64_t *syms;        /* symbol values, -1 while unbound */
  const be_backend_t *fast; /* whose eager kernels to try first, or NULL */
} interp_t;

/* Binds the plain symbols of type t (dims that are just "n") to the sizes
 * of x, where no earlier tensor bound them. */
static void bind_symbols(interp_t *it, const ir_type_t *t,
                         const loom_tensor_t *x) {
  if (x->rank != t->rank) return; /* check_dims reports it */
  for (int i = 0; i < t->rank; i++) {
    const ir_expr_t *e = ir_dim_expr(it->g, t->dims[i]);
    if (e && e->kind == IR_EXPR_SYM && it->syms[e->c] < 0)
      it->syms[e->c] = x->shape[i];
  }
}

/* Checks x against type t once the symbols are bound. */
static loom_status_t check_dims(interp_t *it, const char *what,
                                const ir_type_t *t, const loom_tensor_t *x) {
  loom_graph_t *g = it->g;
  char want[160], got[160];
  if (x->dtype != t->dtype || x->rank != t->rank)
    return loom_fail(LOOM_ERR_BINDING, "%s expects %s, got %s %s", what,
                     ir_type_str(g, t, want, sizeof want),
                     loom_dtype_name(x->dtype),
                     shape_str(x->rank, x->shape, got, sizeof got));
  for (int i = 0; i < t->rank; i++) {
    int64_t v = -1;
    loom_status_t s = ir_dim_eval(g, t->dims[i], it->syms, &v);
    if (s != LOOM_OK || v != x->shape[i]) {
      char dim[64];
      return loom_fail(LOOM_ERR_BINDING,
                       "%s expects %s, got %s %s: dim %d (%s) is %lld there",
                       what, ir_type_str(g, t, want, sizeof want),
                       loom_dtype_name(x->dtype),
                       shape_str(x->rank, x->shape, got, sizeof got), i,
                       ir_dim_str(g, t->dims[i], dim, sizeof dim),
                       s == LOOM_OK ? (long long)v : -1LL);
    }
  }
  return LOOM_OK;
}

static void release(interp_t *it, int32_t v) {
  if (it->owned[v]) loom_tensor_destroy(it->vals[v]);
  it->vals[v] = NULL;
  it->owned[v] = false;
}

/* Makes the inputs, parameters and constants available as tensors. */
static loom_status_t bind_inputs(interp_t *it, int n_inputs,
                                 loom_tensor_t *const *inputs) {
  loom_graph_t *g = it->g;
  if (n_inputs != g->n_inputs)
    return loom_fail(LOOM_ERR_BINDING, "the graph has %lld inputs, %d were given",
                     (long long)g->n_inputs, n_inputs);
  /* Symbols first, from every input, so that an input typed "n+1" may
   * come before the input that says what n is. */
  for (int64_t i = 0; i < g->n_inputs; i++) {
    int32_t v = g->inputs[i];
    if (!inputs || !inputs[i])
      return loom_fail(LOOM_ERR_INVALID, "input %lld ('%s'): tensor is null",
                       (long long)i, g->values[v].name ? g->values[v].name : "");
    bind_symbols(it, &g->values[v].type, inputs[i]);
  }
  for (int64_t i = 0; i < g->n_inputs; i++) {
    int32_t v = g->inputs[i];
    char what[96];
    snprintf(what, sizeof what, "input %lld ('%s')", (long long)i,
             g->values[v].name ? g->values[v].name : "");
    LOOM_TRY(check_dims(it, what, &g->values[v].type, inputs[i]));
  }
  for (int64_t i = 0; i < g->n_inputs; i++) {
    int32_t v = g->inputs[i];
    if (tensor_is_contiguous(inputs[i])) {
      it->vals[v] = inputs[i]; /* borrowed: no copy */
    } else {
      LOOM_TRY(tensor_contiguous_copy(inputs[i], &it->vals[v]));
      it->owned[v] = true;
    }
  }
  for (int64_t v = 0; v < g->n_values; v++)
    if (g->values[v].kind == IR_VALUE_PARAM || g->values[v].kind == IR_VALUE_CONST)
      it->vals[v] = g->values[v].data;
  return LOOM_OK;
}

/* The shape of output k of n for the bound symbols. */
static loom_status_t output_shape(interp_t *it, const ir_node_t *n, int k, int64_t *shape) {
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
    LOOM_TRY(output_shape(it, n, k, shape));
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
    char what[64];
    snprintf(what, sizeof what, "%s output %d", ir_ops[n->op].name, k);
    bind_symbols(it, &it->g->values[n->out[k]].type, outs[k]);
    LOOM_TRY(check_dims(it, what, &it->g->values[n->out[k]].type, outs[k]));
  }
  return LOOM_OK;
}

static bool is_assign(const ir_node_t *n) {
  return ir_ops[n->op].flags & F_SIDE_EFFECT;
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
      !tensor_is_contiguous(x) || output_shape(it, n, 0, shape) != LOOM_OK ||
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
      output_shape(it, n, 0, shape) != LOOM_OK)
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

static loom_status_t run_node(interp_t *it, int64_t index) {
  const ir_node_t *n = &it->g->nodes[index];
  if (take_over_input(it, index, n) || index_view(it, index, n)) return LOOM_OK;
  const loom_tensor_t *ins[n->n_in > 0 ? n->n_in : 1];
  loom_tensor_t *outs[n->n_out > 0 ? n->n_out : 1];
  memset(outs, 0, sizeof outs);
  for (int i = 0; i < n->n_in; i++) ins[i] = it->vals[n->in[i]];
  /* An assign writes the parameter's storage, not the snapshot that
   * other assigns read (see snapshot_assigned_params). */
  if (is_assign(n)) ins[0] = it->g->values[n->in[0]].data;
  loom_status_t s = LOOM_OK;
  bool data_shaped = ir_node_data_shaped(it->g, n);
  if (!data_shaped) s = alloc_outputs(it, n, outs);
  ref_call_t call = {.g = it->g, .node = n, .attrs = &n->attrs,
                     .n_in = n->n_in, .in = ins, .n_out = n->n_out, .out = outs};
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

/* last_use[v]: the last node reading v, counting assigns (which run after
 * every other node) as reading at the end; graph outputs live longest.
 * index_only[v]: v is read, and only as a scatter_add's index. */
static void compute_last_use(interp_t *it) {
  loom_graph_t *g = it->g;
  for (int64_t v = 0; v < g->n_values; v++) {
    it->last_use[v] = -1;
    it->index_only[v] = true;
  }
  for (int64_t i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int32_t v = g->nodes[i].in[k];
      int64_t at = is_assign(&g->nodes[i]) ? g->n_nodes : i;
      if (at > it->last_use[v]) it->last_use[v] = at;
      it->index_only[v] &= g->nodes[i].op == IR_OP_SCATTER_ADD && k == 1;
    }
  for (int64_t i = 0; i < g->n_outputs; i++) {
    it->last_use[g->outputs[i]] = INT64_MAX;
    it->index_only[g->outputs[i]] = false;
  }
  for (int64_t v = 0; v < g->n_values; v++) it->index_only[v] &= it->last_use[v] >= 0;
}

/* Hands each graph output to the caller: the tensor itself when the
 * interpreter owns it and no other output shares it, else a copy. */
static loom_status_t take_outputs(interp_t *it, loom_tensor_t **outputs) {
  loom_graph_t *g = it->g;
  for (int64_t i = 0; i < g->n_outputs; i++) {
    int32_t v = g->outputs[i];
    bool shared = false;
    for (int64_t j = i + 1; j < g->n_outputs; j++) shared |= g->outputs[j] == v;
    if (it->owned[v] && !shared) {
      outputs[i] = it->vals[v];
      it->owned[v] = false;
    } else {
      LOOM_TRY(tensor_contiguous_copy(it->vals[v], &outputs[i]));
    }
  }
  return LOOM_OK;
}

/* Copies the parameters that assigns read, so that a swap of two
 * parameters sees both old values. */
static loom_status_t snapshot_assigned_params(interp_t *it) {
  loom_graph_t *g = it->g;
  for (int64_t i = 0; i < g->n_nodes; i++) {
    if (!is_assign(&g->nodes[i])) continue;
    int32_t v = g->nodes[i].in[1];
    if (g->values[v].kind != IR_VALUE_PARAM || it->owned[v]) continue;
    LOOM_TRY(tensor_contiguous_copy(it->vals[v], &it->vals[v]));
    it->owned[v] = true;
  }
  return LOOM_OK;
}

static loom_status_t run_all(interp_t *it, loom_tensor_t **outputs) {
  loom_graph_t *g = it->g;
  compute_last_use(it);
  for (int64_t i = 0; i < g->n_nodes; i++) {
    if (is_assign(&g->nodes[i])) continue;
    LOOM_TRY(run_node(it, i));
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (it->last_use[g->nodes[i].in[k]] == i) release(it, g->nodes[i].in[k]);
  }
  LOOM_TRY(take_outputs(it, outputs));
  LOOM_TRY(snapshot_assigned_params(it));
  for (int64_t i = 0; i < g->n_nodes; i++)
    if (is_assign(&g->nodes[i])) LOOM_TRY(run_node(it, i));
  return LOOM_OK;
}

/* Allocates the per-run tables; on failure interp_end still applies. */
static loom_status_t interp_start(interp_t *it) {
  loom_graph_t *g = it->g;
  int64_t nv = g->n_values ? g->n_values : 1;
  it->vals = core_calloc((size_t)nv, sizeof *it->vals);
  it->owned = core_calloc((size_t)nv, sizeof *it->owned);
  it->last_use = core_calloc((size_t)nv, sizeof *it->last_use);
  it->index_only = core_calloc((size_t)nv, sizeof *it->index_only);
  it->syms = core_malloc(sizeof *it->syms * (size_t)(g->n_symbols + 1));
  if (!it->vals || !it->owned || !it->last_use || !it->index_only || !it->syms)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory starting the interpreter");
  for (int i = 0; i < g->n_symbols; i++) it->syms[i] = -1;
  return LOOM_OK;
}

static void interp_end(interp_t *it) {
  if (it->vals && it->owned)
    for (int64_t v = 0; v < it->g->n_values; v++) release(it, (int32_t)v);
  core_free(it->vals);
  core_free(it->owned);
  core_free(it->last_use);
  core_free(it->index_only);
  core_free(it->syms);
}

loom_status_t loom_interpret(loom_graph_t *g, int n_inputs,
                             loom_tensor_t *const *inputs, int n_outputs,
                             loom_tensor_t **outputs) {
  return rt_interpret(g, n_inputs, inputs, n_outputs, outputs, NULL);
}

loom_status_t rt_interpret(loom_graph_t *g, int n_inputs, loom_tensor_t *const *inputs,
                           int n_outputs, loom_tensor_t **outputs, const be_backend_t *fast) {
  LOOM_CHECK_ARG(g);
  if (n_outputs != g->n_outputs)
    return loom_fail(LOOM_ERR_BINDING, "the graph has %lld outputs, room for %d was given",
                     (long long)g->n_outputs, n_outputs);
  if (n_outputs > 0) LOOM_CHECK_ARG(outputs);
  for (int i = 0; i < n_outputs; i++) outputs[i] = NULL;
  LOOM_TRY(ir_verify(g));
  interp_t it = {.g = g, .fast = fast && fast->eager ? fast : NULL};
  loom_status_t s = interp_start(&it);
  if (s == LOOM_OK) s = bind_inputs(&it, n_inputs, inputs);
  if (s == LOOM_OK) s = run_all(&it, outputs);
  if (s != LOOM_OK)
    for (int i = 0; i < n_outputs; i++) {
      /* A failed run hands nothing out; take_outputs gave these up. */
      loom_tensor_destroy(outputs[i]);
      outputs[i] = NULL;
    }
  interp_end(&it);
  if (s == LOOM_OK) loom_clear_error();
  return s;
}
