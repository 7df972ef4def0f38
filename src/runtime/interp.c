/* The interpreter: runs a graph node by node with the reference kernels,
 * or, as the fallback of traces and of executables without code
 * (rt_interpret), with a back end's eager kernels where it has them.
 * It binds symbols from the inputs' shapes, allocates each node's outputs,
 * frees values after their last use, and commits assigns at the end; each
 * node's step is interp_node.c's, runs of elementwise nodes in blocks
 * interp_blocks.c's. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/ir.h"
#include "kernels/ref.h"
#include "runtime/interp.h"
#include "runtime/interp_internal.h"

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
    interp_bind_symbols(it, &g->values[v].type, inputs[i]);
  }
  for (int64_t i = 0; i < g->n_inputs; i++) {
    int32_t v = g->inputs[i];
    LOOM_TRY(interp_check_dims(it, &g->values[v].type, inputs[i], "input %lld ('%s')",
                               (long long)i, g->values[v].name ? g->values[v].name : ""));
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

/* last_use[v]: the last node reading v, counting assigns (which run after
 * every other node) as reading at the end; graph outputs live longest.
 * index_only[v]: v is read, and only as a scatter_add's index. */
static void compute_last_use(interp_t *it) {
  loom_graph_t *g = it->g;
  for (int64_t v = 0; v < g->n_values; v++) {
    it->last_use[v] = it->last_read[v] = it->assigned_by[v] = -1;
    it->index_only[v] = true;
    it->slot[v] = SLOT_WHOLE;
  }
  for (int64_t i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int32_t v = g->nodes[i].in[k];
      bool assign = interp_is_assign(&g->nodes[i]);
      int64_t at = assign ? g->n_nodes : i;
      if (at > it->last_use[v]) it->last_use[v] = at;
      if (!(assign && k == 0) && at > it->last_read[v]) it->last_read[v] = at;
      it->assigned_by[v] = assign && k == 1 && it->assigned_by[v] == -1 ? i : -2;
      it->index_only[v] &= g->nodes[i].op == IR_OP_SCATTER_ADD && k == 1;
    }
  for (int64_t i = 0; i < g->n_outputs; i++) {
    int32_t v = g->outputs[i];
    it->last_use[v] = it->last_read[v] = INT64_MAX;
    it->assigned_by[v] = -2;
    it->index_only[v] = false;
  }
  for (int64_t v = 0; v < g->n_values; v++) it->index_only[v] &= it->last_use[v] >= 0;
}

/* Whether out, an output the caller set, views value v's own storage. */
static bool views_value(const interp_t *it, int32_t v, const loom_tensor_t *out) {
  const loom_tensor_t *x = it->vals[v];
  return out->data == x->data && out->dtype == x->dtype && out->rank == x->rank &&
         !memcmp(out->shape, x->shape, sizeof *x->shape * (size_t)x->rank) &&
         tensor_is_contiguous(out) && tensor_is_contiguous(x);
}

/* Hands each graph output to the caller: the tensor itself when the
 * interpreter owns it and no other output shares it, else a copy; an
 * output the caller kept (a view of an input's storage) stays as it is. */
static loom_status_t take_outputs(interp_t *it, loom_tensor_t **outputs) {
  loom_graph_t *g = it->g;
  for (int64_t i = 0; i < g->n_outputs; i++) {
    int32_t v = g->outputs[i];
    if (outputs[i]) {
      if (!views_value(it, v, outputs[i]))
        return loom_fail(LOOM_ERR_BINDING, "output %lld was kept by the caller, but is not "
                         "a view of the value's own storage", (long long)i);
      continue;
    }
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
    if (!interp_is_assign(&g->nodes[i])) continue;
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
    if (interp_is_assign(&g->nodes[i])) continue;
    int64_t end = i;
    LOOM_TRY(interp_blocks(it, i, &end));
    if (end > i) { /* a run in blocks took nodes [i, end) */
      i = end - 1;
      continue;
    }
    LOOM_TRY(interp_run_node(it, i));
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (it->last_use[g->nodes[i].in[k]] == i) interp_release(it, g->nodes[i].in[k]);
  }
  LOOM_TRY(take_outputs(it, outputs));
  LOOM_TRY(snapshot_assigned_params(it));
  for (int64_t i = 0; i < g->n_nodes; i++)
    if (interp_is_assign(&g->nodes[i]) && it->slot[g->nodes[i].in[1]] != SLOT_PARAM)
      LOOM_TRY(interp_run_node(it, i));
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
  it->last_read = core_malloc(sizeof *it->last_read * (size_t)nv);
  it->assigned_by = core_malloc(sizeof *it->assigned_by * (size_t)nv);
  it->run_of = core_calloc((size_t)nv, sizeof *it->run_of);
  it->slot = core_malloc(sizeof *it->slot * (size_t)nv);
  if (!it->vals || !it->owned || !it->last_use || !it->index_only || !it->syms ||
      !it->last_read || !it->assigned_by || !it->run_of || !it->slot)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory starting the interpreter");
  for (int i = 0; i < g->n_symbols; i++) it->syms[i] = -1;
  return LOOM_OK;
}

static void interp_end(interp_t *it) {
  if (it->vals && it->owned)
    for (int64_t v = 0; v < it->g->n_values; v++) interp_release(it, (int32_t)v);
  core_free(it->vals);
  core_free(it->owned);
  core_free(it->last_use);
  core_free(it->index_only);
  core_free(it->syms);
  core_free(it->last_read);
  core_free(it->assigned_by);
  core_free(it->run_of);
  core_free(it->slot);
}

loom_status_t loom_interpret(loom_graph_t *g, int n_inputs,
                             loom_tensor_t *const *inputs, int n_outputs,
                             loom_tensor_t **outputs) {
  LOOM_CHECK_ARG(g);
  LOOM_TRY(ir_verify(g));
  return rt_interpret(g, n_inputs, inputs, n_outputs, outputs, NULL, NULL);
}

loom_status_t rt_interpret(loom_graph_t *g, int n_inputs, loom_tensor_t *const *inputs,
                           int n_outputs, loom_tensor_t **outputs, const be_backend_t *fast,
                           core_pool_t *pool) {
  return rt_interpret_keeping(g, n_inputs, inputs, n_outputs, outputs, NULL, fast, pool);
}

loom_status_t rt_interpret_keeping(loom_graph_t *g, int n_inputs, loom_tensor_t *const *inputs,
                                   int n_outputs, loom_tensor_t **outputs, const bool *kept,
                                   const be_backend_t *fast, core_pool_t *pool) {
  LOOM_CHECK_ARG(g);
  if (n_outputs != g->n_outputs)
    return loom_fail(LOOM_ERR_BINDING, "the graph has %lld outputs, room for %d was given",
                     (long long)g->n_outputs, n_outputs);
  if (n_outputs > 0) LOOM_CHECK_ARG(outputs);
  for (int i = 0; kept && i < n_outputs; i++)
    if (kept[i] && !outputs[i])
      return loom_fail(LOOM_ERR_INVALID, "output %d is marked kept but is null", i);
  for (int i = 0; i < n_outputs; i++)
    if (!kept || !kept[i]) outputs[i] = NULL;
  interp_t it = {.g = g, .fast = fast && fast->eager ? fast : NULL, .pool = pool};
  loom_status_t s = interp_start(&it);
  if (s == LOOM_OK) s = bind_inputs(&it, n_inputs, inputs);
  if (s == LOOM_OK) s = run_all(&it, outputs);
  if (s != LOOM_OK)
    for (int i = 0; i < n_outputs; i++) {
      /* A failed run hands nothing out; take_outputs gave these up. */
      if (kept && kept[i]) continue;
      loom_tensor_destroy(outputs[i]);
      outputs[i] = NULL;
    }
  interp_end(&it);
  if (s == LOOM_OK) loom_clear_error();
  return s;
}
