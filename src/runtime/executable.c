/* Running an executable: one guard on the bindings, then the steps. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/sized.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/executable.h"
#include "runtime/interp.h"
#include "runtime/symbols.h"

static _Atomic int64_t compiles;

void rt_count_compile(void) { atomic_fetch_add(&compiles, 1); }

loom_status_t loom_stats_get(loom_stats_t *out) {
  be_stats_t t;
  be_stats(&t);
  loom_stats_t s = {.size = sizeof s,
                    .compiles = atomic_load(&compiles),
                    .cc_invocations = t.cc_invocations,
                    .disk_hits = t.disk_hits,
                    .disk_rebuilds = t.disk_rebuilds};
  return core_sized_write(__func__, "loom_stats_t", out, &s, sizeof s);
}

/* Checks t against a guard; names what differs. */
static loom_status_t check_binding(const loom_executable_t *e, const char *what, int i,
                                   const guard_t *gd, const loom_tensor_t *t) {
  if (!t) return loom_fail(LOOM_ERR_INVALID, "%s %d: tensor is null", what, i);
  bool same = t->dtype == gd->dtype && t->rank == gd->rank &&
              memcmp(t->shape, gd->shape, sizeof(int64_t) * (size_t)gd->rank) == 0;
  if (!same && e->dyn) return rt_sym_mismatch(e, what, i, gd, t);
  if (!same) {
    char want[160], got[160];
    return loom_fail(LOOM_ERR_BINDING,
                     "%s %d: the executable was compiled for %s %s, got %s %s", what, i,
                     loom_dtype_name(gd->dtype), shape_str(gd->rank, gd->shape, want, sizeof want),
                     loom_dtype_name(t->dtype), shape_str(t->rank, t->shape, got, sizeof got));
  }
  return LOOM_OK;
}

/* Checks the bindings against the guards (runtime symbols: read from
 * the inputs first, resizing the executable when they changed). Inlined,
 * as bind_slots and run_steps, into both run paths (plain and stable): a
 * call less per run (~1 ns each, bench/trace.c's ns_exec_run). */
__attribute__((always_inline)) static inline loom_status_t check_bindings(
    loom_executable_t *e, int n_inputs, loom_tensor_t *const *inputs, int n_outputs,
    loom_tensor_t *const *outputs) {
  if (n_inputs != e->n_inputs || n_outputs != e->n_outputs)
    return loom_fail(LOOM_ERR_BINDING,
                     "the executable takes %d inputs and %d outputs, got %d and %d",
                     e->n_inputs, e->n_outputs, n_inputs, n_outputs);
  if ((n_inputs && !inputs) || (n_outputs && !outputs))
    return loom_fail(LOOM_ERR_INVALID, "loom_executable_run: a binding array is null");
  if (e->dyn) LOOM_TRY(rt_sym_bind(e, inputs));
  for (int i = 0; i < n_inputs; i++)
    LOOM_TRY(check_binding(e, "input", i, &e->inputs[i], inputs[i]));
  for (int i = 0; i < n_outputs; i++) {
    LOOM_TRY(check_binding(e, "output", i, &e->outputs[i], outputs[i]));
    if (!tensor_is_contiguous(outputs[i]))
      return loom_fail(LOOM_ERR_BINDING, "output %d: the tensor must be contiguous", i);
  }
  return LOOM_OK;
}

/* Where strided input i is copied in run r: the guard's buffer, or the
 * lane's, made at its first use. */
static loom_status_t staging_of(loom_executable_t *e, rt_run_t *r, int i, size_t bytes,
                                void **out) {
  if (!r->staging) {
    if (e->dyn) LOOM_TRY(rt_sym_staging(e, i));
    *out = e->inputs[i].staging;
    return LOOM_OK;
  }
  if (!r->staging[i]) r->staging[i] = core_aligned_alloc(bytes ? bytes : 1);
  if (!r->staging[i])
    return loom_fail(LOOM_ERR_NOMEM, "out of memory staging strided input %d", i);
  *out = r->staging[i];
  return LOOM_OK;
}

/* Points run r's input and output slots at the bound tensors (a strided
 * input at a contiguous copy). */
__attribute__((always_inline)) static inline loom_status_t bind_slots(
    loom_executable_t *e, rt_run_t *r, loom_tensor_t *const *inputs,
    loom_tensor_t *const *outputs) {
  for (int i = 0; i < e->n_inputs; i++) {
    const guard_t *gd = &e->inputs[i];
    if (gd->slot < 0) continue;
    if (tensor_is_contiguous(inputs[i])) {
      r->slots[gd->slot] = inputs[i]->data;
      continue;
    }
    size_t bytes = (size_t)shape_numel(gd->rank, gd->shape) * loom_dtype_size(gd->dtype);
    void *staging = NULL;
    LOOM_TRY(staging_of(e, r, i, bytes, &staging));
    LOOM_TRY(loom_tensor_read(inputs[i], staging, bytes));
    r->slots[gd->slot] = staging;
  }
  for (int i = 0; i < e->n_outputs; i++)
    if (e->outputs[i].slot >= 0) r->slots[e->outputs[i].slot] = outputs[i]->data;
  return LOOM_OK;
}

/* The interpreter fallback: runs the source graph, then copies out. */
static loom_status_t run_interpreted(loom_executable_t *e, int n_inputs,
                                     loom_tensor_t *const *inputs,
                                     loom_tensor_t *const *outputs) {
  loom_tensor_t *tmp[e->n_outputs > 0 ? e->n_outputs : 1];
  LOOM_TRY(ir_verify(e->source)); /* the caller's graph, changed since? */
  LOOM_TRY(rt_interpret(e->source, n_inputs, inputs, e->n_outputs, tmp, e->parts[0].backend,
                        NULL));
  loom_status_t s = LOOM_OK;
  for (int i = 0; i < e->n_outputs; i++) {
    size_t bytes = (size_t)loom_tensor_numel(tmp[i]) * loom_dtype_size(tmp[i]->dtype);
    if (s == LOOM_OK) s = loom_tensor_write(outputs[i], tmp[i]->data, bytes);
    loom_tensor_destroy(tmp[i]);
  }
  return s;
}

static loom_status_t run_step(loom_executable_t *e, rt_run_t *r, int i) {
  step_t *st = &e->steps[i];
  switch (st->kind) {
    case STEP_KERNEL: return st->launch(st->program, st->group, r->slots, e->syms, r->runs[st->part]);
    case STEP_CONTROL: return rt_control_run(e, st->control);
    case STEP_COPY: /* an output bound to its input's storage has it already */
      if (r->slots[st->copy_to] != r->slots[st->copy_from])
        memcpy(r->slots[st->copy_to], r->slots[st->copy_from], (size_t)st->copy_bytes);
      break;
  }
  return LOOM_OK;
}

/* The executable's own storage, as a run. */
static rt_run_t own_run(loom_executable_t *e) {
  rt_run_t r = {.slots = e->slots};
  for (int k = 0; k < RT_PARTS; k++) r.runs[k] = e->parts[k].run;
  return r;
}

/* Waits for every part's launches on r. */
static loom_status_t sync_parts(loom_executable_t *e, rt_run_t *r) {
  for (int k = 0; k < RT_PARTS; k++)
    if (e->parts[k].run && e->parts[k].backend->sync)
      LOOM_TRY(e->parts[k].backend->sync(e->parts[k].program, r->runs[k]));
  return LOOM_OK;
}

/* A step in the executable's own storage (step timings run there). */
static loom_status_t run_own_step(loom_executable_t *e, step_t *st) {
  rt_run_t r = own_run(e);
  return run_step(e, &r, (int)(st - e->steps));
}

/* Lends the target st's stable storage for the run in r (st NULL: takes
 * it back). A target without use for it, or st made by another back end,
 * runs as without. */
static loom_status_t lend_stable(loom_executable_t *e, rt_run_t *r, rt_stable_t *st,
                                 const bool *stable_input) {
  rt_part_t *p = &e->parts[0];
  if (!p->program || !p->backend->stable) return LOOM_OK;
  if (!stable_input) return p->backend->stable(p->program, r->runs[0], r->slots, NULL);
  if (!st->cache) {
    st->cache = p->backend->cache_new();
    st->owner = p->backend;
  }
  if (!st->cache || st->owner != p->backend) return LOOM_OK;
  bool slot[e->n_slots + 1];
  memset(slot, 0, sizeof slot);
  for (int i = 0; i < e->n_inputs; i++)
    if (stable_input[i] && e->inputs[i].stable_use) slot[e->inputs[i].slot] = true;
  be_stable_t hint = {.cache = st->cache, .epoch = st->epoch, .slot = slot};
  return p->backend->stable(p->program, r->runs[0], r->slots, &hint);
}

__attribute__((always_inline)) static inline loom_status_t run_steps(loom_executable_t *e,
                                                                    rt_run_t *r, bool own) {
  if (own && core_log_enabled(LOG_STEPS)) LOOM_TRY(rt_profile_run(e, run_own_step));
  else
    for (int i = 0; i < e->n_steps; i++) LOOM_TRY(run_step(e, r, i));
  return sync_parts(e, r);
}

/* One run in r (NULL: the executable's own storage). */
static loom_status_t run_in(loom_executable_t *e, rt_run_t *r, int n_inputs,
                            loom_tensor_t *const *inputs, int n_outputs,
                            loom_tensor_t *const *outputs) {
  LOOM_TRY(check_bindings(e, n_inputs, inputs, n_outputs, outputs));
  if (e->interpreted) return run_interpreted(e, n_inputs, inputs, outputs);
  rt_run_t own = own_run(e);
  if (!r) r = &own;
  LOOM_TRY(bind_slots(e, r, inputs, outputs));
  return run_steps(e, r, r == &own);
}

/* run_in as b binds it: with storage that stays unchanged while b's
 * epoch lasts lent to the target, and with the guard check left to a
 * caller that has matched the bindings already. Apart from run_in, so
 * that plain runs pay nothing for it. */
__attribute__((noinline)) static loom_status_t run_in_bound(
    loom_executable_t *e, rt_run_t *r, int n_inputs, loom_tensor_t *const *inputs,
    int n_outputs, loom_tensor_t *const *outputs, const rt_binding_t *b) {
  bool matched = b->matched && !e->dyn && !e->interpreted && n_inputs == e->n_inputs &&
                 n_outputs == e->n_outputs;
  if (!matched) LOOM_TRY(check_bindings(e, n_inputs, inputs, n_outputs, outputs));
  if (e->interpreted) return run_interpreted(e, n_inputs, inputs, outputs);
  rt_run_t own = own_run(e);
  if (!r) r = &own;
  LOOM_TRY(bind_slots(e, r, inputs, outputs));
  rt_stable_t *st = b->stable_input ? b->stable : NULL;
  if (st) LOOM_TRY(lend_stable(e, r, st, b->stable_input));
  loom_status_t s = run_steps(e, r, r == &own);
  loom_status_t back = st ? lend_stable(e, r, st, NULL) : LOOM_OK;
  return s != LOOM_OK ? s : back;
}

loom_status_t rt_executable_run_bound(loom_executable_t *e, int n_inputs,
                                      loom_tensor_t *const *inputs, int n_outputs,
                                      loom_tensor_t *const *outputs, const rt_binding_t *b) {
  if (!b) return loom_executable_run(e, n_inputs, inputs, n_outputs, outputs);
  LOOM_CHECK_ARG(e);
  rt_lane_t *lane;
  LOOM_TRY(rt_lanes_enter(e, &lane));
  loom_status_t s = run_in_bound(e, lane ? rt_lane_run(lane) : NULL, n_inputs, inputs,
                                 n_outputs, outputs, b);
  rt_lanes_leave(e, lane);
  return s;
}

loom_status_t loom_executable_run(loom_executable_t *e, int n_inputs,
                                  loom_tensor_t *const *inputs, int n_outputs,
                                  loom_tensor_t *const *outputs) {
  LOOM_CHECK_ARG(e);
  rt_lane_t *lane;
  LOOM_TRY(rt_lanes_enter(e, &lane));
  loom_status_t s = run_in(e, lane ? rt_lane_run(lane) : NULL, n_inputs, inputs, n_outputs,
                           outputs);
  rt_lanes_leave(e, lane);
  return s;
}

void rt_stable_free(rt_stable_t *st) {
  if (st->cache) st->owner->cache_free(st->cache);
  *st = (rt_stable_t){0};
}

loom_status_t loom_executable_new_output(const loom_executable_t *e, int i,
                                         loom_tensor_t **out) {
  LOOM_CHECK_ARG(e);
  LOOM_CHECK_ARG(out);
  if (i < 0 || i >= e->n_outputs)
    return loom_fail(LOOM_ERR_INVALID, "loom_executable_new_output: output %d of %d", i,
                     e->n_outputs);
  if (!e->dyn)
    return loom_tensor_create(e->outputs[i].dtype, e->outputs[i].rank, e->outputs[i].shape, out);
  /* The last run's shape: read while no run resizes it. */
  rt_lanes_hold(e);
  int64_t shape[LOOM_MAX_RANK];
  bool sized = rt_sym_sized(e);
  memcpy(shape, e->outputs[i].shape, sizeof shape);
  rt_lanes_drop(e);
  if (!sized)
    return loom_fail(LOOM_ERR_INVALID,
                     "loom_executable_new_output: output %d's shape depends on runtime "
                     "symbols, known after a run; use loom_executable_new_output_for", i);
  return loom_tensor_create(e->outputs[i].dtype, e->outputs[i].rank, shape, out);
}

loom_status_t loom_executable_new_output_for(const loom_executable_t *e, int n_inputs,
                                             loom_tensor_t *const *inputs, int i,
                                             loom_tensor_t **out) {
  LOOM_CHECK_ARG(e);
  LOOM_CHECK_ARG(out);
  if (!e->dyn) return loom_executable_new_output(e, i, out);
  if (i < 0 || i >= e->n_outputs)
    return loom_fail(LOOM_ERR_INVALID, "loom_executable_new_output_for: output %d of %d", i,
                     e->n_outputs);
  if (n_inputs != e->n_inputs || (n_inputs && !inputs))
    return loom_fail(LOOM_ERR_BINDING, "loom_executable_new_output_for: the executable takes "
                     "%d inputs, got %d", e->n_inputs, n_inputs);
  /* inputs that could not bind fail here, as the run would */
  for (int k = 0; k < n_inputs; k++) {
    const loom_tensor_t *t = inputs[k];
    const ir_type_t *ty = &e->source->values[e->source->inputs[k]].type;
    if (!t) return loom_fail(LOOM_ERR_INVALID, "loom_executable_new_output_for: input %d is null", k);
    if (t->dtype != ty->dtype || t->rank != ty->rank)
      return loom_fail(LOOM_ERR_BINDING, "loom_executable_new_output_for: input %d: the "
                       "executable takes %s of rank %d, got %s of rank %d", k,
                       loom_dtype_name(ty->dtype), ty->rank, loom_dtype_name(t->dtype), t->rank);
    for (int d = 0; d < t->rank; d++)
      if (ir_dim_is_const(ty->dims[d]) && t->shape[d] != ty->dims[d])
        return loom_fail(LOOM_ERR_BINDING, "loom_executable_new_output_for: input %d dim %d "
                         "is %lld, the executable takes %lld", k, d, (long long)t->shape[d],
                         (long long)ty->dims[d]);
  }
  int64_t shape[LOOM_MAX_RANK];
  LOOM_TRY(rt_sym_output_shape(e, inputs, i, shape));
  return loom_tensor_create(e->outputs[i].dtype, e->outputs[i].rank, shape, out);
}

/* The executable's info, every field of this library's struct. */
static void executable_info(const loom_executable_t *e, loom_executable_info_t *out) {
  rt_lanes_hold(e); /* runtime symbols: the last run's sizes, not a run's midway */
  *out = (loom_executable_info_t){
      .size = sizeof *out,
      .n_nodes = e->graph ? (int)e->graph->n_nodes : 0,
      .n_groups = e->plan.n_groups,
      .n_generated = e->n_generated,
      .n_kernels = e->n_kernels,
      .n_reference = e->n_reference,
      .interpreted = e->interpreted,
      .threads = rt_threads(e),
      .arena_bytes = e->mem.arena_bytes,
      .lower_bound_bytes = e->mem.lower_bound_bytes,
      .naive_bytes = e->mem.naive_bytes,
      .compile_ms = e->compile_ms,
      .fallback = e->fallback,
      .fallback_reason = e->fallback_reason ? e->fallback_reason : "",
      .target = e->parts[0].backend ? e->parts[0].backend->name : "cpu",
      .device = e->parts[0].backend ? e->parts[0].backend->device : LOOM_DEVICE_CPU};
  for (int i = 0; i < e->n_steps; i++) out->n_copies += e->steps[i].kind == STEP_COPY;
  if (e->graph) out->flops = rt_nodes_flops(e, NULL, e->graph->n_nodes);
  rt_lanes_drop(e);
}

loom_status_t loom_executable_info(const loom_executable_t *e, loom_executable_info_t *out) {
  LOOM_CHECK_ARG(e);
  loom_executable_info_t info;
  executable_info(e, &info);
  return core_sized_write(__func__, "loom_executable_info_t", out, &info, sizeof info);
}

const char *loom_fallback_name(loom_fallback_t f) {
  static const char *const names[] = {
      [LOOM_FALLBACK_NONE] = "none",           [LOOM_FALLBACK_DISABLED] = "disabled",
      [LOOM_FALLBACK_NO_CC] = "no-cc",         [LOOM_FALLBACK_CC_FAILED] = "cc-failed",
      [LOOM_FALLBACK_NO_MODULE] = "no-module",
  };
  return (unsigned)f < sizeof names / sizeof *names ? names[f] : "?";
}

void rt_fallback_note(loom_executable_t *e, loom_fallback_t f, const char *reason) {
  if (e->fallback != LOOM_FALLBACK_NONE || f == LOOM_FALLBACK_NONE) return;
  e->fallback = f;
  /* Out of memory, the kind is kept without its message. */
  e->fallback_reason = core_strdup(reason ? reason : "");
}

void loom_executable_destroy(loom_executable_t *e) {
  if (!e) return;
  rt_profile_report(e);
  rt_profile_free(e);
  rt_lanes_free(e);
  for (int i = 0; e->steps && i < e->plan.n_groups + (e->graph ? (int)e->graph->n_outputs : 0) + 1; i++)
    if (e->steps[i].kind == STEP_CONTROL) rt_control_free(e->steps[i].control);
  core_free(e->steps);
  for (int i = 0; e->inputs && i < e->n_inputs; i++) core_free(e->inputs[i].staging);
  core_free(e->inputs);
  core_free(e->outputs);
  core_free(e->output_slot);
  rt_arena_free(e, e->arena);
  for (int k = 0; k < RT_PARTS; k++) {
    rt_part_t *p = &e->parts[k];
    if (p->run) p->backend->run_free(p->program, p->run);
    if (p->program) p->backend->destroy(p->program);
  }
  mem_plan_free(&e->mem);
  core_free(e->slots);
  core_free(e->slot_bytes);
  core_free(e->slot_of_value);
  core_free(e->order);
  core_free(e->in_place_groups);
  fuse_plan_free(&e->plan);
  rt_sym_free(e);
  core_free(e->syms);
  core_free(e->fallback_reason);
  if (e->owns_graph) loom_graph_destroy(e->graph);
  if (e->source) ir_graph_let_go(e->source);
  core_free(e);
}

loom_status_t rt_value_shape(const loom_executable_t *e, int32_t v, int64_t *shape) {
  const ir_type_t *t = &e->graph->values[v].type;
  for (int d = 0; d < t->rank; d++)
    LOOM_TRY(ir_dim_eval(e->graph, t->dims[d], e->syms, &shape[d]));
  return LOOM_OK;
}
