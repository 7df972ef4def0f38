/* Runtime symbols: reading them from the inputs, and resizing an
 * executable when they change (see symbols.h). */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/symbols.h"

/* Input dim `dim` of input `input` is sym * mul + add. */
typedef struct rt_binder {
  int input, dim;
  int32_t sym;
  int64_t mul, add;
} rt_binder_t;

struct rt_symbols {
  int n_syms;
  bool *runtime;          /* per symbol: read from the inputs at each run */
  int64_t *read;          /* per symbol: the value read this run, or -1 */
  int32_t *read_from;     /* per symbol: the binder that read it */
  int n_binders;
  rt_binder_t *binders;
  bool planned;           /* every size matches e->syms (false: replan) */
  int n_req;
  mem_request_t *req;     /* the memory plan's requests; bytes change */
  int64_t *req_planned;   /* per request: its bytes when last planned, or
                             -1 before the first plan */
  int32_t *req_of_slot;   /* per slot: its request, or -1 */
  int32_t *slot_value;    /* per slot: a value it holds (sizes), or -1 */
  int64_t *staging_cap;   /* per input: bytes of its staging buffer */
  mem_replanner_t *replanner;
  int n_slices;
  int32_t *slices;        /* the slice nodes over a symbolic axis (check_slices) */
};

/* ---- Compile time ------------------------------------------------------ */

loom_status_t rt_sym_mark(loom_executable_t *e, int32_t k) {
  const loom_graph_t *g = e->source;
  if (!e->dyn) {
    int n = g->n_symbols + 1;
    rt_symbols_t *d = core_calloc(1, sizeof *d);
    if (!d) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
    e->dyn = d;
    d->n_syms = g->n_symbols;
    d->runtime = core_calloc((size_t)n, sizeof *d->runtime);
    d->read = core_calloc((size_t)n, sizeof *d->read);
    d->read_from = core_calloc((size_t)n, sizeof *d->read_from);
    if (!d->runtime || !d->read || !d->read_from)
      return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  }
  e->dyn->runtime[k] = true;
  e->syms[k] = RT_SYM_NOMINAL;
  return LOOM_OK;
}

/* Fills b when dim d of an input is k, k*c or k+c for a symbol k. */
static bool binder_of(const loom_graph_t *g, ir_dim_t d, rt_binder_t *b) {
  const ir_expr_t *x = ir_dim_expr(g, d);
  if (!x) return false;
  const ir_expr_t *a = x->kind == IR_EXPR_SYM ? x : ir_dim_expr(g, x->a);
  if (!a || a->kind != IR_EXPR_SYM) return false;
  b->sym = (int32_t)a->c;
  b->mul = 1;
  b->add = 0;
  if (x->kind == IR_EXPR_SYM) return true;
  if (!ir_dim_is_const(x->b)) return false;
  if (x->kind == IR_EXPR_MUL && x->b > 0) b->mul = x->b;
  else if (x->kind == IR_EXPR_ADD) b->add = x->b;
  else return false;
  return true;
}

bool rt_sym_readable(const loom_graph_t *g, int32_t k) {
  for (int64_t i = 0; i < g->n_inputs; i++) {
    const ir_type_t *t = &g->values[g->inputs[i]].type;
    rt_binder_t b;
    for (int d = 0; d < t->rank; d++)
      if (binder_of(g, t->dims[d], &b) && b.sym == k) return true;
  }
  return false;
}

/* Every input dim that tells a runtime symbol's value. */
static loom_status_t build_binders(loom_executable_t *e) {
  rt_symbols_t *d = e->dyn;
  const loom_graph_t *g = e->source;
  int most = 0;
  for (int64_t i = 0; i < g->n_inputs; i++) most += g->values[g->inputs[i]].type.rank;
  d->binders = core_calloc((size_t)most + 1, sizeof *d->binders);
  if (!d->binders) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  for (int64_t i = 0; i < g->n_inputs; i++) {
    const ir_type_t *t = &g->values[g->inputs[i]].type;
    for (int k = 0; k < t->rank; k++) {
      rt_binder_t b = {.input = (int)i, .dim = k};
      if (binder_of(g, t->dims[k], &b) && d->runtime[b.sym]) d->binders[d->n_binders++] = b;
    }
  }
  return LOOM_OK;
}

const bool *rt_sym_runtime(const loom_executable_t *e) {
  return e->dyn ? e->dyn->runtime : NULL;
}

/* The plan with group gi replaced by one reference group per node, in
 * graph order (which respects every dependency). */
static loom_status_t split_group(fuse_plan_t *p, const loom_graph_t *g, int gi) {
  fuse_group_t old = p->groups[gi];
  int n = p->n_groups + old.n_nodes - 1;
  fuse_group_t *groups = core_calloc((size_t)n, sizeof *groups);
  if (!groups) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  memcpy(groups, p->groups, sizeof *groups * (size_t)gi);
  memcpy(groups + gi + old.n_nodes, p->groups + gi + 1,
         sizeof *groups * (size_t)(p->n_groups - gi - 1));
  loom_status_t s = LOOM_OK;
  for (int k = 0; k < old.n_nodes; k++) {
    const ir_node_t *node = &g->nodes[old.nodes[k]];
    fuse_group_t *r = &groups[gi + k];
    *r = (fuse_group_t){.kind = FUSE_REFERENCE, .anchor = -1, .n_nodes = 1};
    r->nodes = core_malloc(sizeof(int32_t));
    r->inputs = core_malloc(sizeof(int32_t) * (size_t)(node->n_in + 1));
    r->outputs = core_malloc(sizeof(int32_t) * (size_t)(node->n_out + 1));
    if (!r->nodes || !r->inputs || !r->outputs) {
      s = loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
      continue;
    }
    r->nodes[0] = old.nodes[k];
    for (int i = 0; i < node->n_in; i++) {
      bool seen = false;
      for (int j = 0; j < r->n_inputs; j++) seen |= r->inputs[j] == node->in[i];
      if (!seen) r->inputs[r->n_inputs++] = node->in[i];
    }
    for (int o = 0; o < node->n_out; o++) r->outputs[r->n_outputs++] = node->out[o];
  }
  /* The new plan owns the new groups, the old ones' arrays go. */
  core_free(old.nodes);
  core_free(old.inputs);
  core_free(old.outputs);
  core_free(p->groups);
  p->groups = groups;
  p->n_groups = n;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < groups[i].n_nodes; k++)
      if (groups[i].nodes) p->group_of_node[groups[i].nodes[k]] = i;
  return s;
}

loom_status_t rt_sym_split_groups(loom_executable_t *e) {
  const loom_graph_t *g = e->graph;
  const be_backend_t *b = e->parts[0].backend;
  /* A trial build tells which groups the target takes. */
  bool *generated = core_calloc((size_t)e->plan.n_groups + 1, sizeof *generated);
  if (!generated) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  be_request_t req = {.graph = g, .plan = &e->plan, .syms = e->syms,
                      .sym_runtime = rt_sym_runtime(e), .trial = true};
  be_result_t res = {.generated = generated};
  be_program_t *none = NULL;
  loom_status_t s = b->build(&req, &res, &none);
  core_free(res.lost_reason);
  for (int gi = e->plan.n_groups - 1; gi >= 0 && s == LOOM_OK; gi--) {
    const fuse_group_t *grp = &e->plan.groups[gi];
    if (generated[gi] || grp->n_nodes < 2 || grp->kind == FUSE_REFERENCE) continue;
    s = split_group(&e->plan, g, gi);
  }
  core_free(generated);
  return s;
}

void rt_sym_keep_requests(loom_executable_t *e, mem_request_t *req, int n_req,
                          int32_t *req_of_slot) {
  e->dyn->req = req;
  e->dyn->n_req = n_req;
  e->dyn->req_of_slot = req_of_slot;
}

/* Kept sizes of each request's last plan (none yet). */
static loom_status_t new_planned(rt_symbols_t *d) {
  d->req_planned = core_malloc(sizeof(int64_t) * (size_t)(d->n_req + 1));
  if (!d->req_planned) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  for (int r = 0; r < d->n_req; r++) d->req_planned[r] = -1;
  return LOOM_OK;
}

/* Which value sizes each slot: node values and inputs (an alias shares
 * its source's slot and bytes), then the outputs' own slots. */
static loom_status_t map_slots(loom_executable_t *e) {
  rt_symbols_t *d = e->dyn;
  const loom_graph_t *g = e->graph;
  d->slot_value = core_malloc(sizeof(int32_t) * (size_t)(e->n_slots + 1));
  if (!d->slot_value) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  for (int s = 0; s < e->n_slots; s++) d->slot_value[s] = -1;
  for (int64_t v = 0; v < g->n_values; v++) {
    ir_value_kind_t kind = g->values[v].kind;
    int32_t s = e->slot_of_value[v];
    if (s >= 0 && kind != IR_VALUE_PARAM && kind != IR_VALUE_CONST && d->slot_value[s] < 0)
      d->slot_value[s] = (int32_t)v;
  }
  for (int64_t i = 0; i < g->n_outputs; i++) d->slot_value[e->output_slot[i]] = g->outputs[i];
  return LOOM_OK;
}

/* The slice nodes that slice an axis of symbolic size, which each new
 * binding checks (check_slices). */
static loom_status_t list_slices(loom_executable_t *e) {
  const loom_graph_t *g = e->graph;
  rt_symbols_t *d = e->dyn;
  d->slices = core_malloc(sizeof *d->slices * (size_t)(g->n_nodes + 1));
  if (!d->slices) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  for (int64_t i = 0; i < g->n_nodes; i++) {
    const ir_node_t *n = &g->nodes[i];
    if (n->op != IR_OP_SLICE) continue;
    const ir_type_t *x = &g->values[n->in[0]].type;
    ir_slice_bound_t b[IR_MAX_ATTR_INTS];
    int k = ir_slice_bounds(n->attrs, x->rank, b);
    bool symbolic = false;
    for (int j = 0; j < k; j++) symbolic |= !ir_dim_is_const(x->dims[b[j].axis]);
    if (symbolic) d->slices[d->n_slices++] = (int32_t)i;
  }
  return LOOM_OK;
}

loom_status_t rt_sym_finish(loom_executable_t *e) {
  rt_symbols_t *d = e->dyn;
  if (!d) return LOOM_OK;
  LOOM_TRY(build_binders(e));
  d->staging_cap = core_calloc((size_t)e->n_inputs + 1, sizeof *d->staging_cap);
  if (!d->staging_cap) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  for (int i = 0; i < e->n_inputs; i++) {
    const guard_t *gd = &e->inputs[i];
    int64_t bytes = shape_numel(gd->rank, gd->shape) * (int64_t)loom_dtype_size(gd->dtype);
    d->staging_cap[i] = bytes ? bytes : 1;
  }
  if (e->interpreted || !e->slot_of_value) return LOOM_OK;
  LOOM_TRY(list_slices(e));
  LOOM_TRY(map_slots(e));
  LOOM_TRY(new_planned(d));
  return mem_replanner_create(d->n_req, &d->replanner);
}

bool rt_sym_sized(const loom_executable_t *e) { return e->dyn && e->dyn->planned; }

void rt_sym_free(loom_executable_t *e) {
  rt_symbols_t *d = e->dyn;
  if (!d) return;
  core_free(d->runtime);
  core_free(d->read);
  core_free(d->read_from);
  core_free(d->binders);
  core_free(d->req);
  core_free(d->req_of_slot);
  core_free(d->req_planned);
  core_free(d->slot_value);
  core_free(d->staging_cap);
  core_free(d->slices);
  mem_replanner_destroy(d->replanner);
  core_free(d);
  e->dyn = NULL;
}

/* ---- Reading the symbols ----------------------------------------------------- */

static const char *sym_name(const loom_executable_t *e, int32_t k) {
  for (int64_t i = 0; i < e->source->n_exprs; i++) {
    const ir_expr_t *x = &e->source->exprs[i];
    if (x->kind == IR_EXPR_SYM && x->c == k) return x->name;
  }
  return "?";
}

static loom_status_t read_binder(const loom_executable_t *e, loom_tensor_t *const *inputs,
                                 int32_t b_index, int64_t *read, int32_t *read_from) {
  const rt_binder_t *b = &e->dyn->binders[b_index];
  const loom_tensor_t *t = inputs[b->input];
  if (!t) return loom_fail(LOOM_ERR_INVALID, "input %d: tensor is null", b->input);
  if (t->rank != e->inputs[b->input].rank)
    return loom_fail(LOOM_ERR_BINDING, "input %d: the executable takes rank %d, got rank %d",
                     b->input, e->inputs[b->input].rank, t->rank);
  int64_t x = t->shape[b->dim], v = 0;
  int32_t k = b->sym;
  bool fits = !__builtin_sub_overflow(x, b->add, &v) && v >= 0 && v % b->mul == 0;
  if (fits && (read[k] < 0 || read[k] == v / b->mul)) {
    if (read[k] < 0) read_from[k] = b_index; /* the first, for messages */
    read[k] = v / b->mul;
    return LOOM_OK;
  }
  /* The message names the dim's expression and the symbol. */
  const char *name = sym_name(e, k);
  char text[64];
  ir_dim_str(e->source, e->source->values[e->source->inputs[b->input]].type.dims[b->dim],
             text, sizeof text);
  if (!fits)
    return loom_fail(LOOM_ERR_BINDING,
                     "input %d dim %d is %lld, which is not %s for any size of '%s'",
                     b->input, b->dim, (long long)x, text, name);
  const rt_binder_t *f = &e->dyn->binders[read_from[k]];
  return loom_fail(LOOM_ERR_BINDING,
                   "input %d dim %d is %lld (%s), so %s = %lld, but input %d dim %d "
                   "made %s = %lld", b->input, b->dim, (long long)x, text, name,
                   (long long)(v / b->mul), f->input, f->dim, name, (long long)read[k]);
}

/* The runtime symbols' values from the inputs into read[]. */
static loom_status_t read_symbols(const loom_executable_t *e, loom_tensor_t *const *inputs,
                                  int64_t *read, int32_t *read_from) {
  const rt_symbols_t *d = e->dyn;
  for (int k = 0; k < d->n_syms; k++) read[k] = -1;
  for (int b = 0; b < d->n_binders; b++)
    LOOM_TRY(read_binder(e, inputs, b, read, read_from));
  return LOOM_OK;
}

/* ---- Resizing ---------------------------------------------------------------------- */

static loom_status_t eval_shape(const loom_graph_t *g, int32_t v, const int64_t *syms,
                                int64_t *shape) {
  const ir_type_t *t = &g->values[v].type;
  for (int d = 0; d < t->rank; d++) {
    loom_status_t s = ir_dim_eval(g, t->dims[d], syms, &shape[d]);
    if (s == LOOM_OK && shape[d] >= 0) continue;
    char text[64];
    return loom_fail(LOOM_ERR_BINDING, "the inputs' sizes give value %%%d dim %d (%s) %s",
                     (int)v, d, ir_dim_str(g, t->dims[d], text, sizeof text),
                     s == LOOM_OK ? "a negative size" : loom_last_error());
  }
  return LOOM_OK;
}

static loom_status_t eval_bytes(const loom_executable_t *e, int32_t v, int64_t *bytes) {
  int64_t shape[LOOM_MAX_RANK];
  LOOM_TRY(eval_shape(e->graph, v, e->syms, shape));
  return ir_value_bytes(e->graph, "loom_executable_run", v, shape, bytes);
}

static void describe_symbols(const loom_executable_t *e, char *buf, size_t size);

/* A new arena when the plan outgrows the one held: a quarter more than
 * asked, so that sizes creeping up do not allocate at every run. */
static loom_status_t grow_arena(loom_executable_t *e) {
  int64_t need = e->mem.arena_bytes;
  if (need <= e->arena_bytes) return LOOM_OK;
  int64_t bytes = need + need / 4;
  void *arena = rt_arena_alloc(e, bytes);
  if (!arena)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a %lld-byte arena", (long long)bytes);
  rt_arena_free(e, e->arena);
  e->arena = arena;
  e->arena_bytes = bytes;
  return LOOM_OK;
}

/* Whether every request fits in the bytes it had when last planned: the
 * plan stays valid (a buffer within its old range overlaps nothing it
 * did not overlap before; in-place pairs have equal sizes), and sizes
 * that vary every run (an expert's token count) stop replanning once
 * the plan has seen their largest. */
static bool plan_fits(const rt_symbols_t *d) {
  for (int r = 0; r < d->n_req; r++)
    if (d->req_planned[r] < 0 || d->req[r].bytes > d->req_planned[r]) return false;
  return true;
}

static loom_status_t too_large(const loom_executable_t *e, int32_t v, int64_t bytes) {
  char syms[256], desc[128];
  describe_symbols(e, syms, sizeof syms);
  return loom_fail(LOOM_ERR_NOMEM, "loom_executable_run: the symbols read from the inputs "
                   "(%s) make %s need a buffer of %lld bytes, more than an arena holds (%lld)",
                   syms, ir_value_desc(e->graph, v, desc, sizeof desc), (long long)bytes,
                   (long long)MEM_PLAN_MAX_BYTES);
}

static loom_status_t replan_memory(loom_executable_t *e) {
  rt_symbols_t *d = e->dyn;
  for (int s = 0; s < e->n_slots; s++) {
    int32_t v = d->slot_value[s];
    if (v < 0) continue;
    LOOM_TRY(eval_bytes(e, v, &e->slot_bytes[s]));
    if (d->req_of_slot[s] >= 0 && e->slot_bytes[s] > MEM_PLAN_MAX_BYTES)
      return too_large(e, v, e->slot_bytes[s]);
  }
  for (int s = 0; s < e->n_slots; s++)
    if (d->req_of_slot[s] >= 0) d->req[d->req_of_slot[s]].bytes = e->slot_bytes[s];
  if (plan_fits(d)) return LOOM_OK;
  /* Plan for the larger of each request's sizes, so that sizes going
   * back and forth do not replan each time. */
  for (int r = 0; r < d->n_req; r++)
    if (d->req_planned[r] > d->req[r].bytes) d->req[r].bytes = d->req_planned[r];
  loom_status_t st = mem_replan(d->replanner, d->req, &e->mem);
  if (st == LOOM_OK) st = grow_arena(e);
  for (int r = 0; r < d->n_req; r++) d->req_planned[r] = st == LOOM_OK ? d->req[r].bytes : -1;
  LOOM_TRY(st);
  for (int s = 0; s < e->n_slots; s++)
    if (d->req_of_slot[s] >= 0) e->slots[s] = (char *)e->arena + e->mem.offsets[d->req_of_slot[s]];
  return LOOM_OK;
}

/* Guards take the new shapes; staging buffers grow when first used. */
static loom_status_t resize_guards(loom_executable_t *e) {
  const loom_graph_t *g = e->source;
  for (int i = 0; i < e->n_inputs + e->n_outputs; i++) {
    bool is_in = i < e->n_inputs;
    guard_t *gd = is_in ? &e->inputs[i] : &e->outputs[i - e->n_inputs];
    int32_t v = is_in ? g->inputs[i] : g->outputs[i - e->n_inputs];
    LOOM_TRY(eval_shape(g, v, e->syms, gd->shape));
  }
  return LOOM_OK;
}

loom_status_t rt_sym_staging(loom_executable_t *e, int i) {
  guard_t *gd = &e->inputs[i];
  int64_t bytes = shape_numel(gd->rank, gd->shape) * (int64_t)loom_dtype_size(gd->dtype);
  if (bytes <= e->dyn->staging_cap[i]) return LOOM_OK;
  void *staging = core_aligned_alloc((size_t)bytes);
  if (!staging)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory staging strided input %d", i);
  core_free(gd->staging);
  gd->staging = staging;
  e->dyn->staging_cap[i] = bytes;
  return LOOM_OK;
}

/* Kernels with prebuilt shapes (the reference back end's) take the new
 * ones; copies the new counts. */
static loom_status_t resize_steps(loom_executable_t *e) {
  for (int i = 0; i < e->n_steps; i++) {
    step_t *st = &e->steps[i];
    if (st->kind == STEP_COPY && st->group < 0) st->copy_bytes = e->slot_bytes[st->copy_to];
  }
  for (int k = 0; k < RT_PARTS; k++) {
    rt_part_t *p = &e->parts[k];
    if (p->program && p->backend->resize) LOOM_TRY(p->backend->resize(p->program, e->syms));
  }
  return LOOM_OK;
}

/* Every value of the compiled graph fits at the new sizes, also those
 * inside fused groups that no buffer holds: generated loops count their
 * elements in int64. */
static loom_status_t check_value_sizes(const loom_executable_t *e) {
  const loom_graph_t *g = e->graph;
  for (int64_t v = 0; v < g->n_values; v++) {
    ir_value_kind_t kind = g->values[v].kind;
    if (kind == IR_VALUE_PARAM || kind == IR_VALUE_CONST) continue;
    int64_t shape[LOOM_MAX_RANK];
    LOOM_TRY(eval_shape(g, (int32_t)v, e->syms, shape));
    LOOM_TRY(ir_check_window_output(g, "loom_executable_run", (int32_t)v, shape));
    if (shape_size(g->values[v].type.rank, shape,
                   loom_dtype_size(g->values[v].type.dtype), NULL, NULL))
      continue;
    char syms[256], what[320];
    describe_symbols(e, syms, sizeof syms);
    snprintf(what, sizeof what, "loom_executable_run: the symbols read from the inputs (%s)",
             syms);
    return ir_value_bytes(g, what, (int32_t)v, shape, NULL);
  }
  return LOOM_OK;
}

/* A slice over a symbolic axis has a symbolic count that holds on axes
 * long enough for its bounds (ir_shape_slice): a shorter one fails here,
 * before code sized by that count reads past the axis. */
static loom_status_t check_slices(const loom_executable_t *e) {
  const loom_graph_t *g = e->graph;
  for (int s = 0; s < e->dyn->n_slices; s++) {
    int64_t i = e->dyn->slices[s];
    const ir_node_t *n = &g->nodes[i];
    const ir_type_t *x = &g->values[n->in[0]].type, *y = &g->values[n->out[0]].type;
    ir_slice_bound_t b[IR_MAX_ATTR_INTS];
    int k = ir_slice_bounds(n->attrs, x->rank, b);
    for (int j = 0; j < k; j++) {
      int d = b[j].axis;
      if (ir_dim_is_const(x->dims[d])) continue;
      int64_t len, want, first, got;
      LOOM_TRY(ir_dim_eval(g, x->dims[d], e->syms, &len));
      LOOM_TRY(ir_dim_eval(g, y->dims[d], e->syms, &want));
      ir_slice_range(len, b[j].start, b[j].end, b[j].step, &first, &got);
      if (got != want) {
        char syms[256];
        describe_symbols(e, syms, sizeof syms);
        return loom_fail(LOOM_ERR_BINDING, "loom_executable_run: the symbols read from the "
                         "inputs (%s) make slice node %lld's axis %d %lld long, too short "
                         "for its bounds %lld:%lld (the compiled graph takes %lld elements "
                         "there, the axis gives %lld)", syms, (long long)i, d, (long long)len,
                         (long long)b[j].start, (long long)b[j].end, (long long)want,
                         (long long)got);
      }
    }
  }
  return LOOM_OK;
}

static loom_status_t resize(loom_executable_t *e) {
  LOOM_TRY(resize_guards(e));
  if (e->interpreted || !e->dyn->slot_value) return LOOM_OK;
  LOOM_TRY(check_slices(e));
  LOOM_TRY(check_value_sizes(e));
  LOOM_TRY(replan_memory(e));
  return resize_steps(e);
}

loom_status_t rt_sym_bind(loom_executable_t *e, loom_tensor_t *const *inputs) {
  rt_symbols_t *d = e->dyn;
  LOOM_TRY(read_symbols(e, inputs, d->read, d->read_from));
  bool same = d->planned;
  for (int k = 0; k < d->n_syms && same; k++) same = !d->runtime[k] || d->read[k] == e->syms[k];
  if (same) return LOOM_OK;
  for (int k = 0; k < d->n_syms; k++)
    if (d->runtime[k]) e->syms[k] = d->read[k];
  d->planned = false;
  LOOM_TRY(resize(e));
  d->planned = true;
  return LOOM_OK;
}

/* "n = 5 (input 0 dim 0), m = 3 (input 1 dim 1)" for the message. */
static void describe_symbols(const loom_executable_t *e, char *buf, size_t size) {
  const rt_symbols_t *d = e->dyn;
  size_t used = 0;
  buf[0] = '\0';
  for (int k = 0; k < d->n_syms && used < size; k++) {
    if (!d->runtime[k]) continue;
    const rt_binder_t *b = &d->binders[d->read_from[k]];
    used += (size_t)snprintf(buf + used, size - used, "%s%s = %lld (input %d dim %d)",
                             used ? ", " : "", sym_name(e, k), (long long)e->syms[k],
                             b->input, b->dim);
  }
}

loom_status_t rt_sym_mismatch(const loom_executable_t *e, const char *what, int i,
                              const guard_t *gd, const loom_tensor_t *t) {
  char syms[256], want[160], got[160];
  describe_symbols(e, syms, sizeof syms);
  return loom_fail(LOOM_ERR_BINDING, "%s %d: the symbols read from the inputs (%s) make it "
                   "%s %s, got %s %s", what, i, syms, loom_dtype_name(gd->dtype),
                   shape_str(gd->rank, gd->shape, want, sizeof want),
                   loom_dtype_name(t->dtype), shape_str(t->rank, t->shape, got, sizeof got));
}

loom_status_t rt_sym_output_shape(const loom_executable_t *e, loom_tensor_t *const *inputs,
                                  int i, int64_t *shape) {
  const rt_symbols_t *d = e->dyn;
  size_t n = (size_t)d->n_syms + 1;
  int64_t *syms = core_malloc(sizeof(int64_t) * n);
  int32_t *from = core_malloc(sizeof(int32_t) * n);
  loom_status_t s = syms && from ? LOOM_OK : loom_fail(LOOM_ERR_NOMEM, "out of memory");
  if (s == LOOM_OK) s = read_symbols(e, inputs, syms, from);
  for (int k = 0; k < d->n_syms && s == LOOM_OK; k++)
    if (!d->runtime[k]) syms[k] = e->syms[k];
  if (s == LOOM_OK) s = eval_shape(e->source, e->source->outputs[i], syms, shape);
  core_free(syms);
  core_free(from);
  return s;
}
