/* The interpreter: runs a graph node by node with the reference kernels,
 * or, as the fallback of traces and of executables without code
 * (rt_interpret), with a back end's eager kernels where it has them.
 * It binds symbols from the inputs' shapes, allocates each node's outputs,
 * frees values after their last use, and commits assigns at the end. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/dtype.h"
#include "core/pool.h"
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
  int64_t *last_read;   /* the same, not counting an assign's target */
  int64_t *assigned_by; /* the assign that is a value's only reader, or -1 */
  bool *index_only;     /* read only as a scatter_add's index (index_view) */
  int64_t *syms;        /* symbol values, -1 while unbound */
  const be_backend_t *fast; /* whose eager kernels to try first, or NULL */
  core_pool_t *pool;        /* lent to the eager kernels and block runs, or NULL */
  /* Block runs (run_blocks): per value, the run that makes it (id, or
   * -id for a scalar node inside it) and its buffer slot (SLOT_WHOLE,
   * SLOT_PARAM). */
  int64_t *run_of;
  int32_t *slot;
  int64_t runs;
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
  ref_call_t call = {.g = it->g, .node = n, .attrs = &n->attrs, .n_in = n->n_in,
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

/* ---- Elementwise runs in blocks (the fast interpreter) ----------------------
 * A run of elementwise nodes over one shape (an optimizer's update of a
 * parameter, an activation's chain) computes a block of BLOCK elements at
 * a time through every node, so that the values that die inside the run
 * live in buffers of one block, in cache, instead of whole tensors; the
 * values read after it are written whole. Scalar nodes between its nodes
 * (the step's bias corrections) run first: they read nothing the run
 * makes. Each element computes as it would node by node, by the same
 * kernel on a view of its block (a back end's eager kernel, or the
 * reference kernel where that declines), so the results are the same. */

enum {
  BLOCK = 4096,    /* elements: every buffer of a run fits in L2 */
  RUN_MAX = 256,   /* nodes a run computes block by block */
  RUN_SLOTS = 16,  /* block buffers; values past them are written whole */
  SLOT_WHOLE = -1, /* a value written whole, read after the run */
  SLOT_PARAM = -2, /* written into the parameter its assign commits it to */
  RUN_SPLIT = 4,   /* blocks per thread before a run is split over the pool
                      (waking it costs more than a few blocks) */
};

typedef struct block_run {
  int64_t id, end; /* end: one past its last node */
  int rank;
  int64_t shape[LOOM_MAX_RANK], numel;
  int n;           /* nodes computed in blocks, in order */
  int64_t nodes[RUN_MAX];
  int n_slots;
} block_run_t;

/* Whether n computes element by element: an elementwise op of one output
 * and some inputs that draws no random numbers and writes no state. */
static bool elementwise(const ir_node_t *n) {
  const ir_op_info_t *info = &ir_ops[n->op];
  return info->fusion_class == IR_CLASS_EW && n->n_out == 1 && n->n_in >= 1 &&
         !(info->flags & (F_RANDOM | F_SIDE_EFFECT | F_DATA_SHAPE | F_ALIAS | F_SUBGRAPH));
}

static bool same_shape(int rank, const int64_t *shape, const loom_tensor_t *x) {
  return x->rank == rank && !memcmp(x->shape, shape, sizeof *shape * (size_t)rank);
}

/* Whether node n joins run r as a node computed in blocks: elementwise,
 * of r's shape, each operand made by r, a scalar made inside r, or a
 * tensor at hand of one element or of r's shape, contiguous. */
static bool joins_blocks(interp_t *it, const block_run_t *r, const ir_node_t *n) {
  int64_t shape[LOOM_MAX_RANK];
  const ir_type_t *t = &it->g->values[n->out[0]].type;
  if (!elementwise(n) || t->rank != r->rank || output_shape(it, n, 0, shape) != LOOM_OK ||
      memcmp(shape, r->shape, sizeof *shape * (size_t)r->rank))
    return false;
  for (int k = 0; k < n->n_in; k++) {
    int32_t v = n->in[k];
    const loom_tensor_t *x = it->vals[v];
    if (it->run_of[v] == r->id || it->run_of[v] == -r->id) continue;
    if (!x || !(loom_tensor_numel(x) == 1 ||
                (tensor_is_contiguous(x) && same_shape(r->rank, r->shape, x))))
      return false;
  }
  return true;
}

/* Whether node n runs before r's blocks: its outputs are scalars, it reads
 * nothing r computes in blocks, and it neither takes over nor views an
 * input (a node of r may still read it). */
static bool runs_before(interp_t *it, const block_run_t *r, const ir_node_t *n) {
  const ir_op_info_t *info = &ir_ops[n->op];
  if (info->flags & (F_SUBGRAPH | F_DATA_SHAPE | F_SIDE_EFFECT | F_RANDOM | F_ALIAS))
    return false;
  for (int k = 0; k < n->n_in; k++)
    if (it->run_of[n->in[k]] == r->id) return false;
  for (int k = 0; k < n->n_out; k++) {
    int64_t shape[LOOM_MAX_RANK];
    const ir_type_t *t = &it->g->values[n->out[k]].type;
    if (it->index_only[n->out[k]] || output_shape(it, n, k, shape) != LOOM_OK ||
        shape_numel(t->rank, shape) != 1)
      return false;
  }
  return true;
}

/* The run that starts at node `first`, if one does (two nodes or more in
 * blocks, over more than a block): its nodes, and the scalar nodes among
 * them marked to run first. */
static bool find_run(interp_t *it, int64_t first, block_run_t *r) {
  const loom_graph_t *g = it->g;
  const ir_node_t *n = &g->nodes[first];
  if (!it->fast || !elementwise(n)) return false;
  r->id = ++it->runs;
  r->rank = g->values[n->out[0]].type.rank;
  if (output_shape(it, n, 0, r->shape) != LOOM_OK) return false;
  r->numel = shape_numel(r->rank, r->shape);
  if (r->numel <= BLOCK || !joins_blocks(it, r, n)) return false;
  r->n = 0;
  for (int64_t i = first; i < g->n_nodes && r->n < RUN_MAX; i++) {
    n = &g->nodes[i];
    if (is_assign(n)) continue; /* run_all commits them at the end */
    bool in_blocks = joins_blocks(it, r, n);
    if (!in_blocks && !runs_before(it, r, n)) break;
    if (in_blocks) {
      r->nodes[r->n++] = i;
      r->end = i + 1;
    }
    for (int k = 0; k < n->n_out; k++) it->run_of[n->out[k]] = in_blocks ? r->id : -r->id;
  }
  return r->n >= 2;
}

/* Whether node `at`'s output y, whose only reader is assign a, can be
 * written straight into a's parameter (a run's reads see parameters as
 * they were before it): of y's dtype and r's shape, contiguous, and read
 * by no node after `at` (nor as another assign's value), so that no one
 * sees its new elements early (`at` itself reads each before writing it).
 * Floats only: an integer one could be read late through an index view.
 * The assign is then done (run_all skips it). */
static bool into_param(const interp_t *it, const block_run_t *r, int64_t at, int64_t a) {
  int32_t p = it->g->nodes[a].in[0], y = it->g->nodes[at].out[0];
  const loom_tensor_t *x = it->vals[p];
  return it->g->values[p].kind == IR_VALUE_PARAM && x && dtype_is_float(x->dtype) &&
         x->dtype == it->g->values[y].type.dtype && tensor_is_contiguous(x) &&
         same_shape(r->rank, r->shape, x) && it->last_read[p] <= at;
}

/* Where each value of r goes: a buffer slot for those that die inside it,
 * reused once read for the last time (after the node that reads it last
 * wrote its own: a kernel's output never aliases its input), the
 * parameter of the assign that is its only reader, or a whole tensor. */
static void assign_slots(interp_t *it, block_run_t *r) {
  bool used[RUN_SLOTS] = {false};
  r->n_slots = 0;
  for (int k = 0; k < r->n; k++) {
    const ir_node_t *n = &it->g->nodes[r->nodes[k]];
    int32_t y = n->out[0];
    int64_t a = it->assigned_by[y];
    it->slot[y] = a >= 0 && into_param(it, r, r->nodes[k], a) ? SLOT_PARAM : SLOT_WHOLE;
    for (int s = 0; it->last_use[y] < r->end && s < RUN_SLOTS; s++)
      if (!used[s]) {
        used[s] = true;
        it->slot[y] = s;
        if (s >= r->n_slots) r->n_slots = s + 1;
        break;
      }
    for (int j = 0; j < n->n_in; j++) {
      int32_t v = n->in[j];
      if (it->run_of[v] == r->id && it->slot[v] >= 0 && it->last_use[v] == r->nodes[k])
        used[it->slot[v]] = false;
    }
  }
}

/* Value v's elements [at, at + len) in r's blocks as a contiguous view
 * (one element stays a scalar, broadcast). */
static void block_view(const interp_t *it, const block_run_t *r, int32_t v, char *bufs,
                       int64_t at, int64_t len, loom_tensor_t *view) {
  const loom_tensor_t *x = it->vals[v];
  loom_dtype_t dt = it->g->values[v].type.dtype;
  *view = (loom_tensor_t){.dtype = dt, .rank = 1, .shape = {len}, .strides = {1}};
  if (it->run_of[v] == r->id && it->slot[v] >= 0)
    view->data = bufs + (size_t)it->slot[v] * BLOCK * sizeof(int64_t);
  else if (it->run_of[v] == r->id && it->slot[v] == SLOT_PARAM)
    view->data = (char *)it->vals[it->g->nodes[it->assigned_by[v]].in[0]]->data +
                 at * (int64_t)loom_dtype_size(dt);
  else if (loom_tensor_numel(x) == 1)
    *view = (loom_tensor_t){.dtype = dt, .rank = 0, .data = x->data};
  else
    view->data = (char *)x->data + at * (int64_t)loom_dtype_size(dt);
}

/* Elements [at, at + len) through every node of r. A node that writes
 * the parameter it reads (where(take, new, p) into p) writes the spare
 * buffer, copied over after: kernels' outputs never alias their inputs. */
static loom_status_t run_block(interp_t *it, const block_run_t *r, char *bufs, int64_t at,
                               int64_t len) {
  for (int k = 0; k < r->n; k++) {
    const ir_node_t *n = &it->g->nodes[r->nodes[k]];
    loom_tensor_t views[n->n_in + 1], out;
    const loom_tensor_t *ins[n->n_in + 1];
    loom_tensor_t *outs[1] = {&out};
    for (int j = 0; j < n->n_in; j++) {
      block_view(it, r, n->in[j], bufs, at, len, &views[j]);
      ins[j] = &views[j];
    }
    block_view(it, r, n->out[0], bufs, at, len, &out);
    void *dest = out.data;
    for (int j = 0; j < n->n_in; j++)
      if (views[j].data == dest) out.data = bufs + (size_t)r->n_slots * BLOCK * sizeof(int64_t);
    ref_call_t call = {.g = it->g, .node = n, .attrs = &n->attrs,
                       .n_in = n->n_in, .in = ins, .n_out = 1, .out = outs};
    loom_status_t s = LOOM_OK;
    if (!it->fast->eager(&call, &s)) {
      memset(out.data, 0, (size_t)len * loom_dtype_size(out.dtype));
      s = ref_kernels[n->op](&call);
    }
    LOOM_TRY(s);
    if (out.data != dest) memcpy(dest, out.data, (size_t)len * loom_dtype_size(out.dtype));
  }
  return LOOM_OK;
}

/* Blocks [begin, end) of r on one thread, with buffers of its own; the
 * first failure's status and message go to *status and why. */
typedef struct block_job {
  interp_t *it;
  const block_run_t *r;
  _Atomic int status;
  char why[256];
} block_job_t;

static void run_block_range(void *ctx, int64_t begin, int64_t end) {
  block_job_t *j = ctx;
  const block_run_t *r = j->r;
  /* one buffer per slot, and a spare */
  char *bufs = core_malloc((size_t)(r->n_slots + 1) * BLOCK * sizeof(int64_t));
  loom_status_t s = bufs ? LOOM_OK
                         : loom_fail(LOOM_ERR_NOMEM, "out of memory for the interpreter's blocks");
  for (int64_t b = begin; b < end && s == LOOM_OK && atomic_load(&j->status) == LOOM_OK; b++) {
    int64_t at = b * BLOCK;
    s = run_block(j->it, r, bufs, at, r->numel - at < BLOCK ? r->numel - at : BLOCK);
  }
  core_free(bufs);
  int ok = LOOM_OK;
  if (s != LOOM_OK && atomic_compare_exchange_strong(&j->status, &ok, (int)s))
    snprintf(j->why, sizeof j->why, "%s", loom_last_error());
}

/* Runs r: its scalar nodes, then its blocks (split over the pool), the
 * values it writes whole allocated first; then frees what its nodes read
 * last. */
static loom_status_t run_blocks(interp_t *it, int64_t first, block_run_t *r) {
  const loom_graph_t *g = it->g;
  for (int64_t i = first; i < r->end; i++)
    if (!is_assign(&g->nodes[i]) && it->run_of[g->nodes[i].out[0]] == -r->id)
      LOOM_TRY(run_node(it, i));
  assign_slots(it, r);
  for (int k = 0; k < r->n; k++) {
    const ir_node_t *n = &g->nodes[r->nodes[k]];
    if (it->slot[n->out[0]] != SLOT_WHOLE) continue;
    LOOM_TRY(tensor_new_uninit(g->values[n->out[0]].type.dtype, r->rank, r->shape,
                               &it->vals[n->out[0]]));
    it->owned[n->out[0]] = true;
  }
  block_job_t job = {.it = it, .r = r, .status = LOOM_OK};
  int64_t blocks = (r->numel + BLOCK - 1) / BLOCK;
  int threads = it->pool ? core_pool_threads(it->pool) : 1;
  if (threads > 1 && blocks >= RUN_SPLIT * threads)
    core_pool_for(it->pool, blocks, (blocks + threads - 1) / threads, run_block_range, &job);
  else
    run_block_range(&job, 0, blocks);
  if (job.status != LOOM_OK) return loom_fail((loom_status_t)job.status, "%s", job.why);
  for (int64_t i = first; i < r->end; i++)
    for (int k = 0; !is_assign(&g->nodes[i]) && k < g->nodes[i].n_in; k++)
      if (it->last_use[g->nodes[i].in[k]] == i) release(it, g->nodes[i].in[k]);
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
      bool assign = is_assign(&g->nodes[i]);
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
  block_run_t run;
  for (int64_t i = 0; i < g->n_nodes; i++) {
    if (is_assign(&g->nodes[i])) continue;
    if (find_run(it, i, &run)) {
      LOOM_TRY(run_blocks(it, i, &run));
      i = run.end - 1;
      continue;
    }
    LOOM_TRY(run_node(it, i));
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (it->last_use[g->nodes[i].in[k]] == i) release(it, g->nodes[i].in[k]);
  }
  LOOM_TRY(take_outputs(it, outputs));
  LOOM_TRY(snapshot_assigned_params(it));
  for (int64_t i = 0; i < g->n_nodes; i++)
    if (is_assign(&g->nodes[i]) && it->slot[g->nodes[i].in[1]] != SLOT_PARAM)
      LOOM_TRY(run_node(it, i));
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
    for (int64_t v = 0; v < it->g->n_values; v++) release(it, (int32_t)v);
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
  LOOM_CHECK_ARG(g);
  if (n_outputs != g->n_outputs)
    return loom_fail(LOOM_ERR_BINDING, "the graph has %lld outputs, room for %d was given",
                     (long long)g->n_outputs, n_outputs);
  if (n_outputs > 0) LOOM_CHECK_ARG(outputs);
  for (int i = 0; i < n_outputs; i++) outputs[i] = NULL;
  interp_t it = {.g = g, .fast = fast && fast->eager ? fast : NULL, .pool = pool};
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
