/* Traces: the public API. Ops record into one graph through the node
 * hook; inputs, parameters and callback outputs enter it as graph inputs
 * bound to tensors; reads, scalars, callbacks and data-dependent ops cut
 * it into segments (segment.c). The top layer: it calls the others
 * (trace_internal.h lists them), and none of them calls it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/env.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/sized.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/ref.h"
#include "trace/trace_internal.h"

loom_status_t loom_trace_options_init_sized(loom_trace_options_t *o, size_t size) {
  loom_trace_options_t defaults = {.size = sizeof defaults, .compile = 1, .tiered = 1,
                                   .spec_workers = 1, .data_dims.kind = LOOM_DIM_SYMBOLIC,
                                   .input_dims.kind = LOOM_DIM_AUTO};
  return core_sized_init(__func__, "loom_trace_options_t", o, size, &defaults,
                         sizeof defaults);
}

/* ---- Policies ---------------------------------------------------------------- */

static loom_status_t check_policy(const loom_dim_policy_t *p, int dim) {
  if ((unsigned)p->kind > LOOM_DIM_AUTO)
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_input: dim %d: unknown "
                     "policy kind %d", dim, (int)p->kind);
  if (p->n_buckets < 0 || p->n_buckets > LOOM_MAX_BUCKETS)
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_input: dim %d: %d buckets "
                     "(0..%d)", dim, p->n_buckets, LOOM_MAX_BUCKETS);
  for (int i = 0; i < p->n_buckets; i++)
    if (p->buckets[i] <= 0 || (i && p->buckets[i] <= p->buckets[i - 1]))
      return loom_fail(LOOM_ERR_INVALID, "loom_trace_input: dim %d: buckets "
                       "must be positive and ascending (bucket %d is %lld)",
                       dim, i, (long long)p->buckets[i]);
  if (p->auto_after < 0 || p->auto_after > 16)
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_input: dim %d: auto_after "
                     "%d is outside 0..16", dim, p->auto_after);
  return LOOM_OK;
}

/* A new policy state called name. */
static loom_status_t add_policy(loom_trace_t *t, const char *name,
                                const loom_dim_policy_t *p, int32_t *out) {
  LOOM_TRY(core_grow((void **)&t->policies, &t->cap_policies,
                     t->n_policies + 1, sizeof *t->policies));
  tr_policy_t *q = &t->policies[t->n_policies];
  memset(q, 0, sizeof *q);
  q->name = core_strdup(name);
  if (!q->name) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a policy");
  q->p = *p;
  q->p.name = q->name;
  if (q->p.kind == LOOM_DIM_AUTO && q->p.auto_after == 0) q->p.auto_after = 1;
  *out = (int32_t)t->n_policies++;
  return LOOM_OK;
}

/* The persistent state of the policy called name (made on first use). */
static loom_status_t find_policy(loom_trace_t *t, const char *name,
                                 const loom_dim_policy_t *p, int32_t *out) {
  for (int64_t i = 0; i < t->n_policies; i++)
    if (!strcmp(t->policies[i].name, name)) {
      *out = (int32_t)i;
      return LOOM_OK;
    }
  return add_policy(t, name, p, out);
}

/* The state of unnamed automatic dim `dim` of the step's input number k,
 * found by position (a name lookup per dim would cost programs that
 * enter many inputs a step). */
static loom_status_t slot_policy(loom_trace_t *t, int k, int dim,
                                 const loom_dim_policy_t *p, int32_t *out) {
  int64_t at = (int64_t)k * LOOM_MAX_RANK + dim, old = t->cap_slots;
  if (at >= t->cap_slots) {
    LOOM_TRY(core_grow((void **)&t->slots, &t->cap_slots, at + 1, sizeof *t->slots));
    for (int64_t i = old; i < t->cap_slots; i++) t->slots[i] = -1;
  }
  if (t->slots[at] < 0) {
    char name[48];
    snprintf(name, sizeof name, "auto:in%d.%d", k, dim);
    LOOM_TRY(add_policy(t, name, p, &t->slots[at]));
    t->policies[t->slots[at]].unnamed = true;
  }
  *out = t->slots[at];
  return LOOM_OK;
}

/* LOOM_DIM_AUTO: remembers size; past auto_after distinct sizes, the
 * symbol turns symbolic for good. */
static void auto_observe(tr_policy_t *q, int64_t size) {
  if (q->p.kind != LOOM_DIM_AUTO || q->switched) return;
  for (int i = 0; i < q->n_seen; i++)
    if (q->seen[i] == size) return;
  if (q->n_seen < q->p.auto_after) {
    q->seen[q->n_seen++] = size;
    return;
  }
  q->switched = true;
  core_log(LOG_RECOMPILES, "dim '%s': %d distinct sizes seen, size %lld is "
           "new: symbolic from now on (LOOM_DIM_AUTO)", q->name, q->n_seen,
           (long long)size);
}

/* Binds symbol `sym` to size under policy `policy` (-1: exact). */
static loom_status_t bind_symbol(loom_trace_t *t, ir_dim_t d, int64_t size,
                                 int32_t policy, const char *what) {
  const ir_expr_t *e = ir_dim_expr(t->g, d);
  LOOM_TRY(tr_reserve_values(t));
  int64_t s = e->c;
  if (t->sym_values[s] >= 0 && t->sym_values[s] != size)
    return loom_fail(LOOM_ERR_SHAPE, "%s: size %lld, but dim '%s' is %lld in "
                     "this step", what, (long long)size, e->name,
                     (long long)t->sym_values[s]);
  if (t->sym_values[s] < 0 && policy >= 0) auto_observe(&t->policies[policy], size);
  t->sym_values[s] = size;
  if (t->sym_policy[s] == -1) t->sym_policy[s] = policy;
  return LOOM_OK;
}

/* Makes the symbols of d exact for the rest of the step. */
static void pin_symbols(loom_trace_t *t, ir_dim_t d) {
  const ir_expr_t *e = ir_dim_expr(t->g, d);
  if (!e || e->kind == IR_EXPR_CONST) return;
  if (e->kind != IR_EXPR_SYM) {
    pin_symbols(t, e->a);
    pin_symbols(t, e->b);
    return;
  }
  if (t->sym_policy[e->c] == TR_PINNED || t->sym_policy[e->c] == -1) return;
  t->sym_policy[e->c] = TR_PINNED;
  t->stats.specialized++;
  const char *op = t->adding ? t->adding : "an op";
  for (int i = 0; i < t->n_pins_logged; i++)
    if (t->pins_logged[i] == op) return; /* said once per op */
  if (t->n_pins_logged == 8) return;
  t->pins_logged[t->n_pins_logged++] = op;
  core_log(LOG_RECOMPILES, "dim '%s' specialized to size %lld for this step: %s "
           "needs its size (segments that use it are keyed on it; said once "
           "per op)", e->name, (long long)t->sym_values[e->c], op);
}

/* The graph hook's pin_dim: d's size now, d exact from now on. */
static bool pin_dim(void *ctx, loom_graph_t *g, ir_dim_t d, int64_t *size) {
  loom_trace_t *t = ctx;
  if (g != t->g || tr_reserve_values(t) != LOOM_OK ||
      ir_dim_eval(g, d, t->sym_values, size) != LOOM_OK) {
    loom_clear_error();
    return false;
  }
  pin_symbols(t, d);
  return true;
}

static bool size_now(void *ctx, const loom_graph_t *g, ir_dim_t d, int64_t *size) {
  const loom_trace_t *t = ctx;
  /* a symbol made since the values were last reserved has none yet */
  if (g != t->g || g->n_symbols > t->cap_syms ||
      ir_dim_eval(g, d, t->sym_values, size) != LOOM_OK) {
    loom_clear_error();
    return false;
  }
  return true;
}

/* ---- The node hook ---------------------------------------------------------- */

/* Whether every symbol of d is exact this step. */
static bool exact_dim(const loom_trace_t *t, ir_dim_t d) {
  const ir_expr_t *e = ir_dim_expr(t->g, d);
  if (!e || e->kind == IR_EXPR_CONST) return true;
  if (e->kind == IR_EXPR_SYM) return tr_sym_mode(t, (int)e->c, NULL) == TR_EXACT;
  return exact_dim(t, e->a) && exact_dim(t, e->b);
}

/* A dim inside an attribute: its size when exact, else its expression
 * (a cut adds the sizes its segment's graph fixes: segment.c). */
static uint64_t hash_attr_dim(const loom_trace_t *t, ir_dim_t d) {
  if (!ir_dim_is_sym(d)) return (uint64_t)d;
  int64_t v = -1;
  if (exact_dim(t, d) && ir_dim_eval(t->g, d, t->sym_values, &v) == LOOM_OK)
    return tr_mix(0x5a, (uint64_t)v);
  return tr_mix(0xa5, (uint64_t)(d - IR_DIM_SYM_BASE));
}

/* Mixes n's attributes into *h and, but for their integers (sizes,
 * axes: a reshape to n*64 with an exact n is one site for every n),
 * into *site. */
static void hash_attrs(const loom_trace_t *t, const ir_node_t *n, uint64_t *hp,
                       uint64_t *site) {
  const ir_attrs_t *a = n->attrs;
  const char *subs[2];
  int n_subs = ir_subgraph_attrs(n->op, subs);
  uint64_t h = *hp;
  for (int i = 0; i < a->n; i++) {
    const ir_attr_t *x = &a->a[i];
    uint64_t name = 0; /* the name's first 8 bytes tell an op's attributes apart */
    memcpy(&name, x->name, strnlen(x->name, sizeof name));
    h = tr_mix(h, name ^ ((uint64_t)x->kind << 56));
    *site = tr_mix(*site, name ^ ((uint64_t)x->kind << 56) ^ ((uint64_t)x->n << 48));
    bool sub = false;
    for (int k = 0; k < n_subs; k++) sub |= !strcmp(x->name, subs[k]);
    if (sub) { /* its structure: the index changes from step to step */
      const loom_graph_t *g = ir_attrs_subgraph(t->g, a, x->name);
      h = tr_mix(h, g ? ir_graph_hash(g) : 0);
      *site = tr_mix(*site, g ? ir_graph_hash(g) : 0);
    } else if (x->kind == IR_ATTR_FLOAT) {
      uint64_t bits;
      memcpy(&bits, &x->f, sizeof bits);
      h = tr_mix(h, bits);
      *site = tr_mix(*site, bits);
    } else if (x->kind == IR_ATTR_INT) {
      h = tr_mix(h, (uint64_t)x->ints[0]);
    } else {
      h = tr_mix(h, (uint64_t)x->n);
      for (int k = 0; k < x->n; k++) h = tr_mix(h, hash_attr_dim(t, x->ints[k]));
    }
  }
  *hp = h;
}

/* A data-dependent op (nonzero): its inputs are made real, its reference
 * kernel runs now, and the sizes it produced bind its output symbols. */
static loom_status_t run_eager(loom_trace_t *t, int32_t node) {
  loom_graph_t *g = t->g;
  const ir_node_t *n = &g->nodes[node];
  tr_reason_t why = {"%s: output shape depends on data", ir_ops[n->op].name, 0};
  LOOM_TRY(seg_cut(t, n->n_in, n->in, &why));
  n = &g->nodes[node];
  const loom_tensor_t *ins[n->n_in > 0 ? n->n_in : 1];
  loom_tensor_t *outs[n->n_out > 0 ? n->n_out : 1];
  memset(outs, 0, sizeof outs);
  for (int i = 0; i < n->n_in; i++) ins[i] = tr_tensor(t, n->in[i]);
  ref_call_t call = {.g = g, .node = n, .attrs = n->attrs, .n_in = n->n_in,
                     .in = ins, .n_out = n->n_out, .out = outs};
  loom_status_t s = ref_kernels[n->op](&call);
  for (int k = 0; k < n->n_out && s == LOOM_OK; k++) {
    const ir_type_t *ty = &g->values[n->out[k]].type;
    for (int d = 0; d < ty->rank && s == LOOM_OK; d++) {
      const ir_expr_t *e = ir_dim_expr(g, ty->dims[d]);
      if (!e || e->kind != IR_EXPR_SYM) continue;
      int32_t policy = -1;
      if (t->opt.data_dims.kind != LOOM_DIM_EXACT)
        s = find_policy(t, e->name, &t->opt.data_dims, &policy);
      if (policy >= 0) t->policies[policy].data = true;
      if (s == LOOM_OK) s = bind_symbol(t, ty->dims[d], outs[k]->shape[d],
                                        policy, ir_ops[n->op].name);
    }
  }
  for (int k = 0; k < n->n_out; k++) {
    if (s == LOOM_OK) {
      t->vals[n->out[k]].t = outs[k];
      t->vals[n->out[k]].owned = true;
    } else {
      loom_tensor_destroy(outs[k]);
    }
  }
  t->stats.eager_ops++;
  return s;
}

/* A slice of a value already real, along dim 0 alone, in a contiguous
 * tensor and with no gradient to carry (x[t] of an RNN's input at step
 * t): copied out now, a block of rows, so that the segment reading it
 * takes it as an input. Recorded in the segment instead, its start
 * would make each step's segment a graph of its own (a compile per t). */
static bool slice_now_suits(const loom_trace_t *t, const ir_node_t *n) {
  if (n->op != IR_OP_SLICE || t->in_cut || t->vals[n->in[0]].grad) return false;
  const loom_tensor_t *x = tr_tensor(t, n->in[0]);
  const ir_type_t *y = &t->g->values[n->out[0]].type;
  if (!x || x->rank < 1 || !tensor_is_contiguous(x)) return false;
  for (int d = 0; d < y->rank; d++)
    if (!ir_dim_is_const(y->dims[d])) return false;
  ir_slice_bound_t b[IR_MAX_ATTR_INTS];
  int k = ir_slice_bounds(n->attrs, x->rank, b);
  for (int i = 0; i < k; i++) {
    bool whole = b[i].step == 1 && b[i].start == 0 && b[i].end >= x->shape[b[i].axis];
    if (b[i].axis != 0 && !whole) return false;
    if (b[i].axis == 0 && b[i].step != 1) return false;
  }
  return true;
}

static loom_status_t slice_now(loom_trace_t *t, int32_t node) {
  const ir_node_t *n = &t->g->nodes[node];
  const loom_tensor_t *x = tr_tensor(t, n->in[0]);
  ir_slice_bound_t b[IR_MAX_ATTR_INTS];
  int k = ir_slice_bounds(n->attrs, x->rank, b);
  int64_t first = 0, count = x->shape[0];
  for (int i = 0; i < k; i++)
    if (b[i].axis == 0) ir_slice_range(x->shape[0], b[i].start, b[i].end, 1, &first, &count);
  int64_t shape[LOOM_MAX_RANK], row = (int64_t)loom_dtype_size(x->dtype);
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
  shape[0] = count;
  for (int d = 1; d < x->rank; d++) row *= x->shape[d];
  loom_tensor_t *y = NULL;
  LOOM_TRY(tensor_new_uninit(x->dtype, x->rank, shape, &y));
  if (count > 0) memcpy(y->data, (const char *)x->data + first * row, (size_t)(count * row));
  t->vals[n->out[0]].t = y;
  t->vals[n->out[0]].owned = true;
  t->stats.eager_ops++;
  return LOOM_OK;
}

/* The graph hook: builders recording into the trace's graph claim it. */
static loom_status_t before_change(void *ctx, loom_graph_t *g, const char *what) {
  (void)g;
  loom_trace_t *t = ctx;
  LOOM_TRY(tr_claim(t, what));
  t->adding = what;
  return LOOM_OK;
}

/* Ops a trace does not record, refused before their node exists (one
 * left in the graph would run when the step ends). */
static loom_status_t node_check(void *ctx, const loom_graph_t *g, ir_op_t op) {
  (void)ctx, (void)g;
  const ir_op_info_t *info = &ir_ops[op];
  if (info->flags & F_SIDE_EFFECT)
    return loom_fail(LOOM_ERR_UNSUPPORTED, "trace: %s writes persistent state; "
                     "traces update parameters with loom_trace_optimizer_step",
                     info->name);
  if (info->flags & F_COLLECTIVE)
    return loom_fail(LOOM_ERR_UNSUPPORTED, "trace: %s communicates with other ranks, whose "
                     "segments may differ; collectives run in built graphs (loom_compile)",
                     info->name);
  return LOOM_OK;
}

static loom_status_t on_node_added(void *ctx, loom_graph_t *g, int32_t node) {
  loom_trace_t *t = ctx;
  LOOM_TRY(tr_reserve_values(t));
  const ir_node_t *n = &g->nodes[node];
  const ir_op_info_t *info = &ir_ops[n->op];
  uint64_t h = tr_mix(0x1f, (uint64_t)n->op), site = h;
  if (n->attrs->n) hash_attrs(t, n, &h, &site);
  bool grad = false;
  for (int i = 0; i < n->n_in; i++) {
    tr_value_t *v = &t->vals[n->in[i]];
    v->uses++;
    grad |= v->grad;
  }
  grad &= !info->not_differentiable;
  for (int k = 0; k < n->n_out; k++) {
    h = tr_mix(h, (uint64_t)g->values[n->out[k]].type.dtype);
    site = tr_mix(site, (uint64_t)g->values[n->out[k]].type.dtype);
    t->vals[n->out[k]].grad = grad && dtype_is_float(g->values[n->out[k]].type.dtype);
  }
  t->node_hash[node] = h;
  t->node_site[node] = site;
  t->node_ran[node] = 0;
  t->stats.recorded_ops++;
  if (!t->in_cut) seg_follow_node(t, node);
  if (slice_now_suits(t, n)) return slice_now(t, node);
  if (ir_node_data_shaped(g, n) && !t->in_cut) return run_eager(t, node);
  return LOOM_OK;
}

/* ---- Creating and destroying ---------------------------------------------------- */

loom_status_t loom_trace_create(const loom_trace_options_t *o,
                                loom_trace_t **out) {
  LOOM_CHECK_ARG(out);
  *out = NULL;
  loom_trace_options_t opts;
  loom_trace_options_init(&opts);
  if (o) LOOM_TRY(core_sized_read(__func__, "loom_trace_options_t", &opts, o, sizeof opts));
  o = &opts;
  if (o->recompile_limit < LOOM_RECOMPILE_UNLIMITED || o->num_threads < 0 ||
      o->cache_bytes < 0 || o->spec_workers < 0)
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_create: recompile_limit must be at "
                     "least -1 (LOOM_RECOMPILE_UNLIMITED), and num_threads, cache_bytes "
                     "and spec_workers must not be negative");
  LOOM_TRY(check_policy(&o->data_dims, 0));
  LOOM_TRY(check_policy(&o->input_dims, 0));
  if (o->input_dims.name)
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_create: input_dims.name must be "
                     "NULL (it applies to every dim of its inputs)");
  loom_trace_t *t = core_calloc(1, sizeof *t);
  if (!t) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a trace");
  t->opt = *o;
  t->opt.data_dims.name = NULL;
  /* the cache's limit: 0 is none */
  t->opt.recompile_limit = o->recompile_limit == 0                          ? 8
                           : o->recompile_limit == LOOM_RECOMPILE_UNLIMITED ? 0
                                                                           : o->recompile_limit;
  t->run.prev_valid = true;
  const char *stitch = core_getenv("LOOM_STITCH");
  t->stitch = !stitch || strcmp(stitch, "0") != 0;
  loom_status_t s = loom_graph_create(&t->g);
  t->run.links = core_calloc(TR_LINKS, sizeof *t->run.links);
  if (s == LOOM_OK && !t->run.links)
    s = loom_fail(LOOM_ERR_NOMEM, "out of memory for a trace");
  if (s == LOOM_OK && o->cache) {
    t->cache = o->cache;
  } else if (s == LOOM_OK) {
    s = loom_cache_create(o->cache_bytes, o->spec_workers, &t->cache);
    t->own_cache = s == LOOM_OK;
  }
  if (s != LOOM_OK) {
    loom_trace_destroy(t);
    return s;
  }
  t->g->hook.node_check = node_check;
  t->g->hook.node_added = on_node_added;
  t->g->hook.before_change = before_change;
  t->g->hook.pin_dim = pin_dim;
  t->g->hook.size_now = size_now;
  t->g->hook.ctx = t;
  tr_live_add(t);
  *out = t;
  loom_clear_error();
  return LOOM_OK;
}

/* Frees this step's tensors and tables; the graph is emptied. */
static void release_step(loom_trace_t *t) {
  tape_clear(t);
  t->packs.stable.epoch++; /* parameters may change before the next step */
  for (int64_t v = 0; v < t->cap_vals; v++) {
    if (t->vals[v].owned) tr_tensor_free(t, t->vals[v].t);
    tr_tensor_free(t, t->vals[v].padded);
    memset(&t->vals[v], 0, sizeof t->vals[v]);
  }
  for (int64_t i = 0; i < t->cap_syms; i++) {
    t->sym_values[i] = -1;
    t->sym_policy[i] = -1;
  }
  for (int64_t i = 0; i < t->n_params; i++) t->params[i].value = -1;
  if (t->g) ir_graph_reset(t->g);
  t->region_start = 0;
  t->retains = 0;
  t->n_ran_cones = 0;
  t->follow.armed = false;
  t->n_step_inputs = 0;
  t->path = 0;
  t->run.prev = NULL;
  t->run.prev_valid = true;
  t->run.last_site = t->run.last_key = 0;
  tr_recycle_step_end(t);
}

void loom_trace_destroy(loom_trace_t *t) {
  if (!t) return;
  tr_live_remove(t);
  release_step(t);
  tr_recycle_free(t);
  tape_destroy(t);
  tr_optim_destroy(t);
  core_pool_release(t->fallback_pool);
  if (t->run.links && t->cache) seg_links_clear(t);
  seg_memo_clear(t);
  seg_halves_clear(t);
  seg_packs_free(t);
  seg_work_free(t);
  seg_follow_free(t);
  core_free(t->run.links);
  if (t->own_cache) loom_cache_destroy(t->cache);
  loom_graph_destroy(t->g);
  for (int64_t i = 0; i < t->n_policies; i++) core_free(t->policies[i].name);
  core_free(t->policies);
  core_free(t->vals);
  core_free(t->node_hash);
  core_free(t->node_site);
  core_free(t->node_ran);
  core_free(t->ran_cones);
  core_free(t->keep);
  core_free(t->sym_values);
  core_free(t->sym_policy);
  core_free(t->slots);
  core_free(t->params);
  core_free(t->dp_stage);
  core_free(t->run.sites);
  core_free(t->run.unpadded);
  core_free(t->breaks);
  core_free(t);
}

loom_graph_t *loom_trace_graph(loom_trace_t *t) { return t ? t->g : NULL; }

/* ---- Entering tensors ------------------------------------------------------------ */

/* A graph input of x's type with dims `dims`, bound to x. */
static loom_status_t enter(loom_trace_t *t, const char *name, loom_tensor_t *x,
                           bool owned, const loom_dim_t *dims,
                           loom_value_t *out) {
  loom_status_t s = ir_graph_input(t->g, name, x->dtype, x->rank, dims, out);
  if (s == LOOM_OK) s = tr_reserve_values(t);
  if (s != LOOM_OK) {
    if (owned) loom_tensor_destroy(x);
    return s;
  }
  t->vals[out->id].t = x;
  t->vals[out->id].owned = owned;
  return LOOM_OK;
}

/* The state of x's dim i under policy p (input number k of the step). */
static loom_status_t dim_policy(loom_trace_t *t, int k, int i,
                                const loom_dim_policy_t *p, int32_t *out) {
  if (!p->name && p->kind == LOOM_DIM_AUTO) return slot_policy(t, k, i, p, out);
  char fresh[48];
  const char *name = p->name;
  if (!name) {
    snprintf(fresh, sizeof fresh, "in%d.%d", k, i);
    name = fresh;
  }
  return find_policy(t, name, p, out);
}

/* The symbol of a dim of size `size` under policy q: the policy's name,
 * or (unnamed automatic dims) one per size, so that dims of one size in
 * a step are one symbol (duck sizing). NULL: the dim stays a constant
 * (an automatic dim not switched yet, or of size 0 or 1). */
static const char *dim_symbol(const tr_policy_t *q, int64_t size, char *buf,
                              size_t cap) {
  if (q->p.kind != LOOM_DIM_AUTO) return q->name;
  if (!q->switched || size <= 1) return NULL;
  if (!q->unnamed) return q->name;
  snprintf(buf, cap, "~%lld", (long long)size);
  return buf;
}

/* The dims of input number k of the step under its policies (NULL: the
 * options' input_dims): constants, or symbols bound to x's sizes. */
static loom_status_t input_dims(loom_trace_t *t, const loom_tensor_t *x,
                                const loom_dim_policy_t *policies,
                                loom_dim_t *dims, uint8_t *provisional) {
  *provisional = 0;
  for (int i = 0; i < x->rank; i++) {
    dims[i] = x->shape[i];
    const loom_dim_policy_t *p = policies ? &policies[i] : &t->opt.input_dims;
    if (p->kind == LOOM_DIM_EXACT) continue;
    if (policies) LOOM_TRY(check_policy(p, i));
    int32_t policy = -1;
    LOOM_TRY(dim_policy(t, t->n_step_inputs, i, p, &policy));
    auto_observe(&t->policies[policy], x->shape[i]);
    char buf[32];
    const tr_policy_t *q = &t->policies[policy];
    const char *name = dim_symbol(q, x->shape[i], buf, sizeof buf);
    if (!name && !q->switched) *provisional |= (uint8_t)(1u << i);
    if (!name) continue;
    LOOM_TRY(ir_dim_symbol(t->g, name, &dims[i]));
    char what[64];
    snprintf(what, sizeof what, "loom_trace_input: dim %d", i);
    LOOM_TRY(bind_symbol(t, dims[i], x->shape[i], policy, what));
  }
  return LOOM_OK;
}

loom_status_t loom_trace_input(loom_trace_t *t, loom_tensor_t *x,
                               const loom_dim_policy_t *policies,
                               loom_value_t *out) {
  LOOM_CHECK_ARG(t);
  LOOM_CHECK_ARG(x);
  LOOM_CHECK_ARG(out);
  LOOM_TRY(tr_claim(t, __func__));
  loom_dim_t dims[LOOM_MAX_RANK];
  uint8_t provisional;
  LOOM_TRY(input_dims(t, x, policies, dims, &provisional));
  t->n_step_inputs++;
  bool copy = !tensor_is_contiguous(x);
  loom_tensor_t *bound = x;
  if (copy) LOOM_TRY(tensor_contiguous_copy(x, &bound));
  LOOM_TRY(enter(t, NULL, bound, copy, dims, out)); /* unnamed: no strdup */
  t->vals[out->id].provisional = provisional;
  loom_clear_error();
  return LOOM_OK;
}

loom_status_t loom_trace_param_forget(loom_trace_t *t, const loom_tensor_t *p) {
  LOOM_CHECK_ARG(t);
  LOOM_CHECK_ARG(p);
  LOOM_TRY(tr_claim(t, __func__));
  int64_t i = 0;
  while (i < t->n_params && t->params[i].t != p) i++;
  if (i == t->n_params)
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_param_forget: the tensor is not a "
                     "parameter of this trace");
  /* a gradient asked for outside a step's use (zeros) does not hold it */
  if (t->params[i].value >= 0)
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_param_forget: the current step uses "
                     "the parameter (forget it between steps)");
  tr_optim_forget(t, p);
  loom_tensor_destroy(t->params[i].grad);
  loom_tensor_destroy(t->params[i].last);
  memmove(&t->params[i], &t->params[i + 1], sizeof *t->params * (size_t)(t->n_params - i - 1));
  t->n_params--;
  /* Packed panels are kept by storage address: a new tensor may reuse it. */
  t->packs.stable.epoch++;
  loom_clear_error();
  return LOOM_OK;
}

loom_status_t loom_trace_param(loom_trace_t *t, loom_tensor_t *p,
                               loom_value_t *out) {
  LOOM_CHECK_ARG(t);
  LOOM_CHECK_ARG(p);
  LOOM_CHECK_ARG(out);
  LOOM_TRY(tr_claim(t, __func__));
  if (!dtype_is_float(p->dtype) || !tensor_is_contiguous(p))
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_param: a parameter must be "
                     "a contiguous float tensor (got %s)",
                     loom_dtype_name(p->dtype));
  int64_t i = 0;
  while (i < t->n_params && t->params[i].t != p) i++;
  if (i < t->n_params && t->params[i].value >= 0) {
    out->id = t->params[i].value;
    return LOOM_OK;
  }
  if (i == t->n_params) {
    LOOM_TRY(core_grow((void **)&t->params, &t->cap_params, t->n_params + 1,
                       sizeof *t->params));
    /* every rank starts from rank 0's values (loom_trace_data_parallel) */
    if (t->comm) LOOM_TRY(loom_comm_broadcast_tensor(t->comm, p, 0));
    t->params[t->n_params++] = (tr_param_t){.t = p, .value = -1};
  }
  LOOM_TRY(enter(t, NULL, p, false, p->shape, out));
  t->vals[out->id].grad = true;
  t->params[i].value = out->id;
  loom_clear_error();
  return LOOM_OK;
}

static loom_status_t check_value(const loom_trace_t *t, loom_value_t v,
                                 const char *fn) {
  if (!t) return loom_fail(LOOM_ERR_INVALID, "%s: the trace is null", fn);
  if (!ir_value_valid(t->g, v.id))
    return loom_fail(LOOM_ERR_INVALID, "%s: %%%d is not a value of this "
                     "step's trace", fn, v.id);
  return LOOM_OK;
}

loom_status_t loom_trace_shape(const loom_trace_t *t, loom_value_t v,
                               int *rank, int64_t *shape) {
  LOOM_CHECK_ARG(t);
  LOOM_CHECK_ARG(rank);
  LOOM_CHECK_ARG(shape);
  bool taken;
  LOOM_TRY(tr_claim_to_read(t, __func__, &taken));
  loom_status_t s = check_value(t, v, __func__);
  const ir_type_t *ty = s == LOOM_OK ? &t->g->values[v.id].type : NULL;
  if (s == LOOM_OK) s = tr_eval_type(t, ty, shape);
  if (s == LOOM_OK) *rank = ty->rank;
  tr_give_back(t, taken);
  return s;
}

/* ---- Making values real ----------------------------------------------------------- */

loom_status_t loom_trace_read(loom_trace_t *t, loom_value_t v,
                              const loom_tensor_t **out) {
  LOOM_CHECK_ARG(t);
  LOOM_TRY(tr_claim(t, __func__));
  LOOM_TRY(check_value(t, v, __func__));
  LOOM_CHECK_ARG(out);
  tr_reason_t why = {"loom_trace_read of %%%lld", NULL, v.id};
  if (!tr_tensor(t, v.id)) LOOM_TRY(seg_cut(t, 1, &v.id, &why));
  *out = tr_tensor(t, v.id);
  loom_clear_error();
  return LOOM_OK;
}

/* v's one element, read after a cut if it is not real yet. */
static loom_status_t read_one(loom_trace_t *t, loom_value_t v,
                              const tr_reason_t *why, const char *fn,
                              double *out) {
  if (!tr_tensor(t, v.id)) LOOM_TRY(seg_cut(t, 1, &v.id, why));
  const loom_tensor_t *x = tr_tensor(t, v.id);
  if (loom_tensor_numel(x) != 1)
    return loom_fail(LOOM_ERR_SHAPE, "%s: %%%d has %lld elements, not one", fn,
                     v.id, (long long)loom_tensor_numel(x));
  LOOM_TRY(loom_tensor_get_f64(x, 0, out));
  loom_clear_error();
  return LOOM_OK;
}

loom_status_t loom_trace_scalar(loom_trace_t *t, loom_value_t v, double *out) {
  LOOM_CHECK_ARG(t);
  LOOM_TRY(tr_claim(t, __func__));
  LOOM_TRY(check_value(t, v, __func__));
  LOOM_CHECK_ARG(out);
  tr_reason_t why = {"scalar read (loom_trace_scalar of %%%lld)", NULL, v.id};
  return read_one(t, v, &why, __func__, out);
}

loom_status_t loom_trace_cond(loom_trace_t *t, loom_value_t v, int *taken) {
  LOOM_CHECK_ARG(t);
  LOOM_TRY(tr_claim(t, __func__));
  LOOM_TRY(check_value(t, v, __func__));
  LOOM_CHECK_ARG(taken);
  tr_reason_t why = {"condition read for a branch (loom_trace_cond of %%%lld)", NULL, v.id};
  double x;
  LOOM_TRY(read_one(t, v, &why, __func__, &x));
  *taken = x != 0;
  t->path = tr_mix(t->path ^ 0x5c, (uint64_t)*taken);
  return LOOM_OK;
}

loom_status_t loom_trace_branch(loom_trace_t *t, int64_t decision) {
  LOOM_CHECK_ARG(t);
  LOOM_TRY(tr_claim(t, __func__));
  t->path = tr_mix(t->path ^ 0xb7, (uint64_t)decision);
  return LOOM_OK;
}

loom_status_t loom_trace_sync(loom_trace_t *t) {
  LOOM_CHECK_ARG(t);
  LOOM_TRY(tr_claim(t, __func__));
  tr_reason_t why = {"sync", NULL, 0};
  LOOM_TRY(seg_cut(t, 0, NULL, &why));
  loom_clear_error();
  return LOOM_OK;
}

loom_status_t loom_trace_wait_compiles(loom_trace_t *t) {
  return loom_trace_wait_compiles_for(t, -1);
}

loom_status_t loom_trace_wait_compiles_for(loom_trace_t *t, double seconds) {
  LOOM_CHECK_ARG(t);
  if (seconds != seconds)
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_wait_compiles_for: seconds is NaN");
  rt_cache_drain_for(t->cache, seconds);
  return LOOM_OK;
}

/* ---- Host callbacks ----------------------------------------------------------------- */

static loom_status_t check_call(const loom_trace_t *t, const loom_host_op_t *op,
                                int n_in, const loom_value_t *in, int n_out,
                                const loom_dtype_t *dtypes, const int *ranks,
                                const int64_t *const *shapes) {
  if (!op || !op->forward || !op->name)
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_call: the op needs a name "
                     "and a forward function");
  if (n_in < 0 || n_out < 1 || (n_in && !in) || !dtypes || !ranks || !shapes)
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_call '%s': needs n_in >= 0 "
                     "inputs, n_out >= 1 outputs and their types", op->name);
  for (int i = 0; i < n_in; i++)
    if (!ir_value_valid(t->g, in[i].id))
      return loom_fail(LOOM_ERR_INVALID, "loom_trace_call '%s': input %d "
                       "(%%%d) is not a value of this step", op->name, i,
                       in[i].id);
  for (int k = 0; k < n_out; k++)
    if (ranks[k] < 0 || ranks[k] > LOOM_MAX_RANK || (ranks[k] && !shapes[k]))
      return loom_fail(LOOM_ERR_INVALID, "loom_trace_call '%s': output %d has "
                       "rank %d and %s shape", op->name, k, ranks[k],
                       shapes[k] ? "a" : "no");
  return LOOM_OK;
}

/* Runs op->forward into new tensors outs[0..n_out). */
static loom_status_t call_forward(loom_trace_t *t, const loom_host_op_t *op,
                                  int n_in, const loom_value_t *in, int n_out,
                                  const loom_dtype_t *dtypes, const int *ranks,
                                  const int64_t *const *shapes,
                                  loom_tensor_t **outs) {
  const loom_tensor_t *ins[n_in > 0 ? n_in : 1];
  for (int i = 0; i < n_in; i++) ins[i] = tr_tensor(t, in[i].id);
  loom_status_t s = LOOM_OK;
  for (int k = 0; k < n_out && s == LOOM_OK; k++) {
    s = tensor_check_shape("loom_trace_call output", dtypes[k], ranks[k], shapes[k]);
    if (s == LOOM_OK) s = tensor_new(dtypes[k], ranks[k], shapes[k], &outs[k]);
  }
  if (s == LOOM_OK) {
    loom_clear_error();
    s = op->forward(op->user, n_in, ins, n_out, outs);
    if (s != LOOM_OK) {
      char said[256]; /* the callback's own message, if it set one */
      snprintf(said, sizeof said, "%s", loom_last_error());
      loom_fail(s, "host callback '%s' failed (%s)%s%s", op->name,
                loom_status_name(s), said[0] ? ": " : "", said);
    }
  }
  t->stats.callbacks++;
  return s;
}

loom_status_t loom_trace_call(loom_trace_t *t, const loom_host_op_t *op,
                              int n_in, const loom_value_t *in, int n_out,
                              const loom_dtype_t *dtypes, const int *ranks,
                              const int64_t *const *shapes,
                              loom_value_t *out) {
  LOOM_CHECK_ARG(t);
  LOOM_CHECK_ARG(out);
  LOOM_TRY(tr_claim(t, __func__));
  LOOM_TRY(check_call(t, op, n_in, in, n_out, dtypes, ranks, shapes));
  tr_reason_t why = {"host callback '%s'", op->name, 0};
  int32_t ids[n_in > 0 ? n_in : 1];
  for (int i = 0; i < n_in; i++) ids[i] = in[i].id;
  LOOM_TRY(seg_cut(t, n_in, ids, &why));
  loom_tensor_t *outs[n_out];
  memset(outs, 0, sizeof outs);
  loom_status_t s = call_forward(t, op, n_in, in, n_out, dtypes, ranks, shapes, outs);
  bool grad = false;
  for (int i = 0; i < n_in; i++) grad |= t->vals[in[i].id].grad;
  grad &= op->backward != NULL;
  int32_t out_ids[n_out];
  for (int k = 0; k < n_out; k++) {
    if (s != LOOM_OK) {
      loom_tensor_destroy(outs[k]);
      continue;
    }
    char name[96];
    snprintf(name, sizeof name, "%.64s:%d", op->name, k);
    s = enter(t, name, outs[k], true, outs[k]->shape, &out[k]);
    if (s == LOOM_OK) t->vals[out[k].id].grad = grad && dtype_is_float(dtypes[k]);
    out_ids[k] = out[k].id;
  }
  if (s == LOOM_OK && grad) s = tape_push_callback(t, op, n_in, ids, n_out, out_ids);
  if (s == LOOM_OK) loom_clear_error();
  return s;
}

/* ---- Steps, breaks and statistics ------------------------------------------------------ */

loom_status_t loom_trace_step_end(loom_trace_t *t) {
  LOOM_CHECK_ARG(t);
  LOOM_TRY(tr_claim(t, __func__));
  loom_status_t s = seg_cut(t, 0, NULL, NULL);
  release_step(t);
  atomic_store_explicit(&t->user, 0, memory_order_release);
  if (s == LOOM_OK) loom_clear_error();
  return s;
}

loom_status_t loom_trace_get_stats(const loom_trace_t *t,
                                   loom_trace_stats_t *out) {
  LOOM_CHECK_ARG(t);
  bool taken;
  LOOM_TRY(tr_claim_to_read(t, __func__, &taken));
  loom_trace_stats_t s = t->stats;
  tr_give_back(t, taken);
  s.size = sizeof s;
  s.cache = (loom_cache_stats_t)LOOM_CACHE_STATS_INIT;
  LOOM_TRY(loom_cache_get_stats(t->cache, &s.cache));
  return core_sized_write(__func__, "loom_trace_stats_t", out, &s, sizeof s);
}

static loom_status_t explain(const loom_trace_t *t, char **out) {
  const loom_trace_stats_t *s = &t->stats;
  core_text_t text = {0};
  core_text_put(&text, "trace: %lld ops recorded, %lld segments (%lld hits, "
                "%lld stitched, %lld misses, %lld recompiles, %lld "
                "interpreted), %lld eager ops, %lld callbacks\n",
                (long long)s->recorded_ops, (long long)s->segments,
                (long long)s->hits, (long long)s->stitched,
                (long long)s->misses, (long long)s->recompiles,
                (long long)s->interpreted, (long long)s->eager_ops,
                (long long)s->callbacks);
  if (s->deferred_grads)
    core_text_put(&text, "weight gradients: %lld parts deferred, summed in %lld products\n",
                  (long long)s->deferred_grads, (long long)s->deferred_products);
  core_text_put(&text, "graph breaks: %lld\n", (long long)s->breaks);
  for (int64_t i = 0; i < t->n_breaks; i++)
    core_text_put(&text, "  site %016llx: %s (x%lld)\n",
                  (unsigned long long)t->breaks[i].site, t->breaks[i].reason,
                  (long long)t->breaks[i].count);
  seg_replay_describe(t, &text);
  loom_status_t st = rt_cache_describe(t->cache, &text);
  if (st != LOOM_OK) {
    core_free(text.s);
    return st;
  }
  if (text.len > 0 && text.s[text.len - 1] != '\n') core_text_put(&text, "\n");
  return core_text_take(&text, "for the trace report", out);
}

loom_status_t loom_trace_explain(const loom_trace_t *t, char **out) {
  LOOM_CHECK_ARG(t);
  LOOM_CHECK_ARG(out);
  bool taken;
  LOOM_TRY(tr_claim_to_read(t, __func__, &taken));
  loom_status_t s = explain(t, out);
  tr_give_back(t, taken);
  return s;
}

loom_status_t loom_trace_list_keys(const loom_trace_t *t, loom_cache_keys_t **out,
                                   int64_t *n) {
  if (out) *out = NULL;
  if (n) *n = 0;
  LOOM_CHECK_ARG(t);
  bool taken;
  LOOM_TRY(tr_claim_to_read(t, __func__, &taken));
  loom_status_t s = loom_cache_list_keys(t->cache, out, n);
  tr_give_back(t, taken);
  return s;
}
