/* Elementwise runs in blocks (the fast interpreter): a run of elementwise
 * nodes over one shape (an optimizer's update of a parameter, an
 * activation's chain) computes a block of BLOCK elements at a time through
 * every node, so that the values that die inside the run live in buffers
 * of one block, in cache, instead of whole tensors; the values read after
 * it are written whole. Scalar nodes between its nodes
 * (the step's bias corrections) run first: they read nothing the run
 * makes. Each element computes as it would node by node, by the same
 * kernel on a view of its block (a back end's eager kernel, or the
 * reference kernel where that declines), so the results are the same. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/ref.h"
#include "runtime/interp_internal.h"


enum {
  BLOCK = 4096,    /* elements: every buffer of a run fits in L2 */
  RUN_MAX = 256,   /* nodes a run computes block by block */
  RUN_SLOTS = 16,  /* block buffers; values past them are written whole */
  RUN_SPLIT = 4,   /* blocks per thread before a run is split over the pool
                      (waking it costs more than a few blocks) */
};

typedef struct block_run {
  int64_t id, end; /* end: one past its last node */
  int rank;
  int64_t shape[LOOM_MAX_RANK], numel;
  int64_t block;   /* elements per block buffer: BLOCK, or numel if fewer */
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
  if (!elementwise(n) || t->rank != r->rank || interp_output_shape(it, n, 0, shape) != LOOM_OK ||
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
  if (info->flags & (F_SUBGRAPH | F_DATA_SHAPE | F_SIDE_EFFECT | F_RANDOM | F_ALIAS | F_COLLECTIVE))
    return false;
  for (int k = 0; k < n->n_in; k++)
    if (it->run_of[n->in[k]] == r->id) return false;
  for (int k = 0; k < n->n_out; k++) {
    int64_t shape[LOOM_MAX_RANK];
    const ir_type_t *t = &it->g->values[n->out[k]].type;
    if (it->index_only[n->out[k]] || interp_output_shape(it, n, k, shape) != LOOM_OK ||
        shape_numel(t->rank, shape) != 1)
      return false;
  }
  return true;
}

/* The run that starts at node `first`, if one does (two nodes or more in
 * blocks, over more than one element): its nodes, and the scalar nodes
 * among them marked to run first. A run of one block still gains: the
 * values that die inside it take no tensors of their own. */
static bool find_run(interp_t *it, int64_t first, block_run_t *r) {
  const loom_graph_t *g = it->g;
  const ir_node_t *n = &g->nodes[first];
  if (!it->fast || !elementwise(n)) return false;
  r->id = ++it->runs;
  r->rank = g->values[n->out[0]].type.rank;
  if (interp_output_shape(it, n, 0, r->shape) != LOOM_OK) return false;
  r->numel = shape_numel(r->rank, r->shape);
  if (r->numel <= 1 || !joins_blocks(it, r, n)) return false;
  r->block = r->numel < BLOCK ? r->numel : BLOCK;
  r->n = 0;
  for (int64_t i = first; i < g->n_nodes && r->n < RUN_MAX; i++) {
    n = &g->nodes[i];
    if (interp_is_assign(n)) continue; /* run_all commits them at the end */
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
    view->data = bufs + (size_t)(it->slot[v] * r->block) * sizeof(int64_t);
  else if (it->run_of[v] == r->id && it->slot[v] == SLOT_PARAM)
    view->data = (char *)it->vals[it->g->nodes[it->assigned_by[v]].in[0]]->data +
                 at * (int64_t)loom_dtype_size(dt);
  else if (loom_tensor_numel(x) == 1)
    *view = (loom_tensor_t){.dtype = dt, .rank = 0, .data = x->data};
  else
    view->data = (char *)x->data + at * (int64_t)loom_dtype_size(dt);
}

/* Elements [at, at + len) through every node of r. A node that writes
 * the parameter it reads writes the spare buffer, copied over after:
 * kernels' outputs never alias their inputs. A where of one condition
 * (an optimizer's where(take, new, p) into p) copies the side it picks,
 * or nothing where that side is the output already. */
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
    if (n->op == IR_OP_WHERE && views[0].rank == 0) { /* one condition: a side, as it is */
      const loom_tensor_t *side = &views[*(const uint8_t *)views[0].data ? 1 : 2];
      size_t es = loom_dtype_size(out.dtype);
      if (side->rank == 0)
        for (int64_t i = 0; i < len; i++) memcpy((char *)dest + i * (int64_t)es, side->data, es);
      else if (side->data != dest)
        memcpy(dest, side->data, (size_t)len * es);
      continue;
    }
    for (int j = 0; j < n->n_in; j++)
      if (views[j].data == dest) out.data = bufs + (size_t)(r->n_slots * r->block) * sizeof(int64_t);
    ref_call_t call = {.g = it->g, .node = n, .attrs = n->attrs,
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
  char *bufs = core_malloc((size_t)((r->n_slots + 1) * r->block) * sizeof(int64_t));
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
    if (!interp_is_assign(&g->nodes[i]) && it->run_of[g->nodes[i].out[0]] == -r->id)
      LOOM_TRY(interp_run_node(it, i));
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
    for (int k = 0; !interp_is_assign(&g->nodes[i]) && k < g->nodes[i].n_in; k++)
      if (it->last_use[g->nodes[i].in[k]] == i) interp_release(it, g->nodes[i].in[k]);
  return LOOM_OK;
}

loom_status_t interp_blocks(interp_t *it, int64_t first, int64_t *end) {
  block_run_t r;
  *end = first;
  if (!find_run(it, first, &r)) return LOOM_OK;
  LOOM_TRY(run_blocks(it, first, &r));
  *end = r.end;
  return LOOM_OK;
}
