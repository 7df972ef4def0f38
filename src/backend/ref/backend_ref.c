/* The reference back end: each wanted single-node group runs its node's
 * reference kernel (src/kernels/ref.h) over the slots, with tensors
 * prebuilt at build time as templates (dtype and shape) that a launch
 * copies and points at the run's slots, so that overlapping runs share
 * nothing they write. It generates no code and fuses nothing: as a
 * target ("ref") every node is a group of its own; behind another target
 * it runs the single nodes that target did not build, through that
 * target's eager kernels where they take the node (a vectorized conv2d
 * over a batch known only at run time) and the reference kernel
 * elsewhere. Kernels expect host memory: its device is the CPU. */
#include <string.h>

#include "backend/ref/backend_ref.h"
#include "core/alloc.h"
#include "core/pool.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/ref.h"

/* One node's kernel call, its tensors prebuilt. */
typedef struct ref_kernel {
  const ir_node_t *node;     /* NULL: the group is not built */
  loom_tensor_t **in, **out; /* templates: dtype and shape */
  int32_t *in_slot, *out_slot;
} ref_kernel_t;

struct be_program {
  const loom_graph_t *graph;
  const bool *sym_runtime;   /* the request's: sizes change with runs */
  int n_groups;
  ref_kernel_t *kernel;      /* per group */
  bool (*eager)(ref_call_t *c, loom_status_t *status); /* the request's */
  core_pool_t *pool;         /* the eager kernels' threads, or NULL */
};

/* Per group, the scratch its kernel keeps between launches of one run. */
struct be_run {
  ref_scratch_t *scratch;
};

static bool none(const loom_graph_t *g, int64_t node) {
  (void)g;
  (void)node;
  return false;
}

/* No fused forms: every node a FUSE_REFERENCE group. */
static const fuse_caps_t ref_fuse_caps = {.supports = none};

static bool ref_generates(ir_op_t op) {
  (void)op;
  return false;
}

/* v's shape for syms; a runtime size that overflows its nominal value
 * gives zeros: the first run's resize sets the real one. */
static loom_status_t template_shape(const be_program_t *p, const int64_t *syms, int32_t v,
                                    int64_t *shape) {
  const ir_type_t *t = &p->graph->values[v].type;
  for (int d = 0; d < t->rank; d++) LOOM_TRY(ir_dim_eval(p->graph, t->dims[d], syms, &shape[d]));
  if (p->sym_runtime && !shape_size(t->rank, shape, loom_dtype_size(t->dtype), NULL, NULL))
    memset(shape, 0, sizeof(int64_t) * LOOM_MAX_RANK);
  return LOOM_OK;
}

/* Tensors over the slots of node `node`, for its reference kernel. */
static loom_status_t build_kernel(be_program_t *p, const be_request_t *req, int32_t node,
                                  ref_kernel_t *k) {
  const ir_node_t *n = &p->graph->nodes[node];
  k->node = n;
  k->in = core_calloc((size_t)n->n_in + 1, sizeof *k->in);
  k->out = core_calloc((size_t)n->n_out + 1, sizeof *k->out);
  k->in_slot = core_malloc(sizeof(int32_t) * (size_t)(n->n_in + 1));
  k->out_slot = core_malloc(sizeof(int32_t) * (size_t)(n->n_out + 1));
  if (!k->in || !k->out || !k->in_slot || !k->out_slot)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  for (int i = 0; i < n->n_in + n->n_out; i++) {
    bool is_in = i < n->n_in;
    int32_t v = is_in ? n->in[i] : n->out[i - n->n_in];
    int64_t shape[LOOM_MAX_RANK];
    LOOM_TRY(template_shape(p, req->syms, v, shape));
    int32_t slot = req->slot_of_value[v];
    if (slot < 0)
      return loom_fail(LOOM_ERR_GRAPH, "compile: %s of node %d has no storage",
                       is_in ? "an input" : "an output", node);
    /* A placeholder pointer: the launch points it at the slot. */
    static char placeholder;
    const ir_type_t *t = &p->graph->values[v].type;
    loom_tensor_t **t_out = is_in ? &k->in[i] : &k->out[i - n->n_in];
    LOOM_TRY(loom_tensor_wrap(t->dtype, t->rank, shape, NULL, &placeholder, t_out));
    if (is_in) k->in_slot[i] = slot;
    else k->out_slot[i - n->n_in] = slot;
  }
  return LOOM_OK;
}

static void free_kernel(ref_kernel_t *k) {
  if (!k->node) return;
  for (int i = 0; i < k->node->n_in; i++) loom_tensor_destroy(k->in ? k->in[i] : NULL);
  for (int i = 0; i < k->node->n_out; i++) loom_tensor_destroy(k->out ? k->out[i] : NULL);
  core_free(k->in);
  core_free(k->out);
  core_free(k->in_slot);
  core_free(k->out_slot);
}

static void ref_destroy(be_program_t *p) {
  if (!p) return;
  for (int i = 0; p->kernel && i < p->n_groups; i++) free_kernel(&p->kernel[i]);
  core_free(p->kernel);
  core_pool_release(p->pool);
  core_free(p);
}

/* Every single-node group can run: its node's reference kernel. */
static loom_status_t ref_build(const be_request_t *req, be_result_t *res, be_program_t **out) {
  int n_groups = req->plan->n_groups;
  *out = NULL;
  *res = (be_result_t){.generated = res->generated};
  for (int gi = 0; gi < n_groups; gi++)
    res->generated[gi] = req->plan->groups[gi].n_nodes == 1 && (!req->want || req->want[gi]);
  if (req->trial || !req->want) return LOOM_OK;
  be_program_t *p = core_calloc(1, sizeof *p);
  if (p) p->kernel = core_calloc((size_t)n_groups + 1, sizeof *p->kernel);
  if (!p || !p->kernel) {
    ref_destroy(p);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  }
  *p = (be_program_t){.graph = req->graph, .sym_runtime = req->sym_runtime,
                      .n_groups = n_groups, .kernel = p->kernel, .eager = req->eager};
  loom_status_t s = LOOM_OK;
  for (int gi = 0; gi < n_groups && s == LOOM_OK; gi++)
    if (res->generated[gi]) s = build_kernel(p, req, req->plan->groups[gi].nodes[0], &p->kernel[gi]);
  if (s != LOOM_OK) {
    ref_destroy(p);
    return s;
  }
  res->n_kernels = 0; /* no code: nothing is shared */
  *out = p;
  return LOOM_OK;
}

/* Threads only for the eager kernels (the reference ones run on the
 * calling thread). */
static loom_status_t ref_start(be_program_t *p, int threads) {
  if (!p->eager || threads == 1) return LOOM_OK;
  return core_pool_acquire(threads, &p->pool);
}

static int ref_threads(const be_program_t *p) {
  return p->pool ? core_pool_threads(p->pool) : 1;
}

/* The templates take the runtime symbols' new sizes. */
static loom_status_t ref_resize(be_program_t *p, const int64_t *syms) {
  for (int gi = 0; gi < p->n_groups; gi++) {
    const ref_kernel_t *k = &p->kernel[gi];
    const ir_node_t *n = k->node;
    for (int i = 0; n && i < n->n_in + n->n_out; i++) {
      loom_tensor_t *t = i < n->n_in ? k->in[i] : k->out[i - n->n_in];
      int32_t v = i < n->n_in ? n->in[i] : n->out[i - n->n_in];
      int64_t shape[LOOM_MAX_RANK];
      const ir_type_t *ty = &p->graph->values[v].type;
      for (int d = 0; d < ty->rank; d++) {
        LOOM_TRY(ir_dim_eval(p->graph, ty->dims[d], syms, &shape[d]));
        if (shape[d] < 0)
          return loom_fail(LOOM_ERR_BINDING, "the inputs' sizes give value %%%d dim %d a "
                           "negative size", (int)v, d);
      }
      tensor_view_init(t, t->dtype, t->rank, shape, t->data);
    }
  }
  return LOOM_OK;
}

static int64_t ref_bytes(const be_program_t *p) {
  (void)p;
  return 0;
}

/* ---- Runs ------------------------------------------------------------------ */

static loom_status_t ref_run_new(be_program_t *p, be_run_t **out) {
  be_run_t *r = core_calloc(1, sizeof *r);
  if (r) r->scratch = core_calloc((size_t)p->n_groups + 1, sizeof *r->scratch);
  *out = r && r->scratch ? r : NULL;
  if (*out) return LOOM_OK;
  core_free(r);
  return loom_fail(LOOM_ERR_NOMEM, "out of memory for a run's storage");
}

static void ref_run_free(be_program_t *p, be_run_t *r) {
  if (!r) return;
  for (int i = 0; i < p->n_groups; i++) core_free(r->scratch[i].data);
  core_free(r->scratch);
  core_free(r);
}

/* The kernel over the run's slots. The templates are copied here so that
 * overlapping runs share nothing they write. */
static loom_status_t ref_launch(be_program_t *p, int32_t group, void *const *slots,
                                const int64_t *syms, be_run_t *r) {
  (void)syms;
  const ref_kernel_t *k = &p->kernel[group];
  const ir_node_t *n = k->node;
  loom_tensor_t in[n->n_in + 1], out[n->n_out + 1];
  const loom_tensor_t *in_p[n->n_in + 1];
  loom_tensor_t *out_p[n->n_out + 1];
  for (int i = 0; i < n->n_in; i++) {
    in[i] = *k->in[i];
    in[i].data = slots[k->in_slot[i]];
    in_p[i] = &in[i];
  }
  bool over_input[n->n_out + 1], any_over = false;
  for (int i = 0; i < n->n_out; i++) {
    out[i] = *k->out[i];
    out[i].data = slots[k->out_slot[i]];
    out_p[i] = &out[i];
    over_input[i] = false;
    for (int j = 0; j < n->n_in; j++) over_input[i] |= in[j].data == out[i].data;
    any_over |= over_input[i];
  }
  ref_call_t call = {.g = p->graph, .node = n, .attrs = n->attrs, .n_in = n->n_in,
                     .in = in_p, .n_out = n->n_out, .out = out_p, .scratch = &r->scratch[group],
                     .pool = p->pool};
  /* Eager kernels write outputs apart from their inputs. */
  loom_status_t s = LOOM_OK;
  if (p->eager && !any_over && p->eager(&call, &s)) return s;
  /* Reference kernels expect zeroed outputs (some accumulate). An empty
   * one may have no storage (a null slot): nothing to clear; one placed
   * over its input (an F_INPLACE op, compile.c) keeps the input. */
  for (int i = 0; i < n->n_out; i++) {
    size_t bytes = (size_t)loom_tensor_numel(&out[i]) * loom_dtype_size(out[i].dtype);
    if (bytes && !over_input[i]) memset(out[i].data, 0, bytes);
  }
  return ref_kernels[n->op](&call);
}

/* ---- Memory: the host's ------------------------------------------------------ */

static void *ref_alloc(int64_t bytes) {
  void *p = core_aligned_alloc((size_t)(bytes > 0 ? bytes : 1));
  if (p && bytes > 0) memset(p, 0, (size_t)bytes);
  return p;
}

static void ref_free(void *p) { core_free(p); }

static loom_status_t ref_copy(void *dst, const void *src, int64_t bytes) {
  if (bytes > 0) memcpy(dst, src, (size_t)bytes);
  return LOOM_OK;
}

const be_backend_t be_ref = {
    .name = "ref",
    .device = LOOM_DEVICE_CPU,
    .fuse = &ref_fuse_caps,
    .generates = ref_generates,
    .build = ref_build,
    .start = ref_start,
    .threads = ref_threads,
    .resize = ref_resize,
    .bytes = ref_bytes,
    .destroy = ref_destroy,
    .run_new = ref_run_new,
    .run_free = ref_run_free,
    .launch = ref_launch,
    .sync = NULL, /* kernels return when done */
    .alloc = ref_alloc,
    .free = ref_free,
    .to_host = ref_copy,
    .from_host = ref_copy,
};
