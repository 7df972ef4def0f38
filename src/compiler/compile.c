/* loom_compile: the pass pipeline, fusion (asking the target back end
 * what it can fuse), a schedule, slots and a memory plan, the target's
 * program for the groups (backend.h), and the steps. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/clock.h"
#include "core/alloc.h"
#include "core/cancel.h"
#include "core/log.h"
#include "core/sized.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/ref.h"
#include "passes/passes.h"
#include "runtime/executable.h"
#include "compiler/layout_place.h"
#include "compiler/inplace.h"
#include "runtime/symbols.h"

loom_status_t loom_compile_options_init_sized(loom_compile_options_t *o, size_t size) {
  loom_compile_options_t defaults = {.size = sizeof defaults, .fusion = 1, .passes = 1,
                                     .use_cc = 1};
  return core_sized_init(__func__, "loom_compile_options_t", o, size, &defaults,
                         sizeof defaults);
}

static double now_ms(void) { return (double)core_now_ns() / 1e6; }

/* ---- Symbols ---------------------------------------------------------- */

/* Whether symbol k appears in the type of one of g's inputs. */
static bool symbol_in_inputs(const loom_graph_t *g, int64_t k) {
  for (int64_t i = 0; i < g->n_inputs; i++) {
    const ir_type_t *t = &g->values[g->inputs[i]].type;
    for (int d = 0; d < t->rank; d++) {
      /* Expressions over inputs' symbols are resolved through them. */
      const ir_expr_t *x = ir_dim_expr(g, t->dims[d]);
      if (x && x->kind == IR_EXPR_SYM && x->c == k) return true;
    }
  }
  return false;
}

/* The options' symbols: each names a symbol of g and gives it a size. */
static loom_status_t check_symbol_options(const loom_graph_t *g,
                                          const loom_compile_options_t *o) {
  if (o->n_symbols < 0 || (o->n_symbols > 0 && (!o->symbol_names || !o->symbol_values)))
    return loom_fail(LOOM_ERR_INVALID, "loom_compile: n_symbols is %d with symbol_names "
                     "%s and symbol_values %s", o->n_symbols, o->symbol_names ? "set" : "null",
                     o->symbol_values ? "set" : "null");
  for (int k = 0; k < o->n_symbols; k++) {
    const char *name = o->symbol_names[k];
    char list[512];
    if (!name)
      return loom_fail(LOOM_ERR_INVALID, "loom_compile: symbol_names[%d] is null", k);
    if (!ir_symbol_find(g, name))
      return loom_fail(LOOM_ERR_INVALID, "loom_compile: symbol_names[%d] '%s' is not a "
                       "symbol of the graph (%s%s)", k, name,
                       g->n_symbols ? "its symbols: " : "it has none",
                       ir_symbols_str(g, list, sizeof list));
    if (o->symbol_values[k] < 0)
      return loom_fail(LOOM_ERR_INVALID, "loom_compile: symbol '%s' is given the negative "
                       "size %lld (symbol_values[%d])", name,
                       (long long)o->symbol_values[k], k);
  }
  return LOOM_OK;
}

/* Values for the symbols of g's inputs, from the options, by name.
 * Other symbols (a data-dependent count) stay unbound (-1). */
static loom_status_t resolve_symbols(loom_executable_t *e,
                                     const loom_compile_options_t *o) {
  const loom_graph_t *g = e->source;
  LOOM_TRY(check_symbol_options(g, o));
  e->syms = core_malloc(sizeof(int64_t) * (size_t)(g->n_symbols + 1));
  if (!e->syms) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  for (int64_t i = 0; i < g->n_exprs; i++) {
    const ir_expr_t *x = &g->exprs[i];
    if (x->kind != IR_EXPR_SYM) continue;
    e->syms[x->c] = -1;
    for (int k = 0; k < o->n_symbols; k++)
      if (!strcmp(o->symbol_names[k], x->name)) e->syms[x->c] = o->symbol_values[k];
    /* Left open, the symbol is read from the inputs at each run. */
    if (e->syms[x->c] < 0 && o->dynamic_symbols && rt_sym_readable(g, (int32_t)x->c)) {
      LOOM_TRY(rt_sym_mark(e, (int32_t)x->c));
      continue;
    }
    if (e->syms[x->c] < 0 && symbol_in_inputs(g, x->c))
      return loom_fail(LOOM_ERR_INVALID,
                       "loom_compile: symbol '%s' needs a value (compiled code "
                       "is specialized: give it in loom_compile_options_t)", x->name);
  }
  return LOOM_OK;
}

/* Whether the graph can only run in the interpreter: data-dependent
 * shapes, or assigns that read parameters other assigns write. */
static const char *needs_interpreter(const loom_graph_t *g) {
  bool swaps = false; /* an assign from a parameter: rare, checked apart */
  for (int64_t i = 0; i < g->n_nodes; i++) {
    const ir_node_t *n = &g->nodes[i];
    if (ir_node_data_shaped(g, n)) return "a data-dependent shape";
    swaps |= n->op == IR_OP_ASSIGN && g->values[n->in[1]].kind == IR_VALUE_PARAM;
  }
  for (int64_t i = 0; swaps && i < g->n_nodes; i++) {
    const ir_node_t *n = &g->nodes[i];
    if (n->op != IR_OP_ASSIGN || g->values[n->in[1]].kind != IR_VALUE_PARAM) continue;
    for (int64_t j = 0; j < g->n_nodes; j++)
      if (g->nodes[j].op == IR_OP_ASSIGN && g->nodes[j].in[0] == n->in[1])
        return "assigns that swap parameters";
  }
  return NULL;
}

/* ---- Sizes, slots and the arena ---------------------------------------- */

/* With runtime symbols the sizes here are nominal: one that overflows is
 * not the graph's fault, and each run checks its own sizes (symbols.c),
 * so it counts 0 bytes until then. */
static loom_status_t value_bytes(const loom_executable_t *e, int32_t v,
                                 int64_t *bytes) {
  int64_t shape[LOOM_MAX_RANK];
  LOOM_TRY(rt_value_shape(e, v, shape));
  loom_status_t s = ir_value_bytes(e->graph, "loom_compile", v, shape, bytes);
  if (s == LOOM_OK || !e->dyn) return s;
  loom_clear_error();
  *bytes = 0;
  return LOOM_OK;
}

/* A new slot of `bytes`; returns its index. */
static int32_t new_slot(loom_executable_t *e, int64_t bytes) {
  e->slot_bytes[e->n_slots] = bytes;
  return (int32_t)e->n_slots++;
}

/* Slots for inputs, outputs, parameters and constants: bound per run or
 * pointing at the graph's tensors. */
static loom_status_t assign_fixed_slots(loom_executable_t *e) {
  loom_graph_t *g = e->graph;
  for (int64_t i = 0; i < g->n_inputs; i++) {
    int64_t bytes;
    LOOM_TRY(value_bytes(e, g->inputs[i], &bytes));
    e->slot_of_value[g->inputs[i]] = new_slot(e, bytes);
  }
  for (int64_t v = 0; v < g->n_values; v++) {
    ir_value_kind_t kind = g->values[v].kind;
    if (kind != IR_VALUE_PARAM && kind != IR_VALUE_CONST) continue;
    int32_t s = new_slot(e, -1);
    e->slot_of_value[v] = s;
    e->slots[s] = g->values[v].data->data;
  }
  /* A node value that is an output writes straight into the caller's
   * tensor; any other output gets its own slot and a copy at the end. */
  for (int64_t i = 0; i < g->n_outputs; i++) {
    int32_t v = g->outputs[i];
    int64_t bytes;
    LOOM_TRY(value_bytes(e, v, &bytes));
    bool direct = g->values[v].kind == IR_VALUE_NODE && e->slot_of_value[v] < 0;
    int32_t s = new_slot(e, bytes);
    if (direct) e->slot_of_value[v] = s;
    e->output_slot[i] = s;
  }
  return LOOM_OK;
}

/* The position in the schedule of each group. */
static void schedule_positions(const loom_executable_t *e, int32_t *pos) {
  for (int i = 0; i < e->plan.n_groups; i++) pos[e->order[i]] = i;
}

static loom_status_t too_large(const loom_graph_t *g, int32_t v, int64_t bytes) {
  char desc[128];
  return loom_fail(LOOM_ERR_NOMEM, "loom_compile: %s needs a buffer of %lld bytes, "
                   "more than an arena holds (%lld)", ir_value_desc(g, v, desc, sizeof desc),
                   (long long)bytes, (long long)MEM_PLAN_MAX_BYTES);
}

/* A step of an F_INPLACE op may write its output over its input where
 * that input is read for the last time (the planner decides), unless
 * slices read the input in place (holds): the op would read them there as
 * it writes over them. */
static void take_dying_inputs(loom_executable_t *e, mem_request_t *req,
                              const int32_t *req_of_slot, const uint8_t *holds) {
  const loom_graph_t *g = e->graph;
  for (int k = 0; k < e->plan.n_groups; k++) {
    const fuse_group_t *grp = &e->plan.groups[e->order[k]];
    if (grp->kind != FUSE_REFERENCE || grp->n_inputs < 1) continue;
    const ir_node_t *n = &g->nodes[grp->nodes[0]];
    if (!(ir_ops[n->op].flags & F_INPLACE)) continue;
    int32_t in = e->slot_of_value[n->in[0]], out = e->slot_of_value[n->out[0]];
    int32_t ri = in >= 0 ? req_of_slot[in] : -1, ro = out >= 0 ? req_of_slot[out] : -1;
    if (ri >= 0 && ro >= 0 && ri != ro && req[ri].last == k && req[ro].first == k &&
        req[ri].bytes == req[ro].bytes && !(holds[ri] & RT_HOLDS_VIEWS))
      req[ro].inplace_of = ri;
  }
}

/* Arena slots for the remaining group outputs, then the memory plan. */
static loom_status_t plan_arena(loom_executable_t *e) {
  loom_graph_t *g = e->graph;
  int n_groups = e->plan.n_groups;
  int32_t *pos = core_malloc(sizeof(int32_t) * (size_t)(n_groups + 1));
  int32_t *req_of_slot = core_malloc(sizeof(int32_t) * (size_t)(e->n_slots + g->n_values + 1));
  mem_request_t *req = core_calloc((size_t)(g->n_values + 1), sizeof *req);
  loom_status_t s = (pos && req_of_slot && req) ? LOOM_OK
                    : loom_fail(LOOM_ERR_NOMEM, "out of memory planning memory");
  int n_req = 0;
  if (s == LOOM_OK) schedule_positions(e, pos);
  for (int i = 0; s == LOOM_OK && i < e->n_slots + g->n_values; i++) req_of_slot[i] = -1;
  /* Walk the groups in schedule order so that aliases find their source. */
  for (int k = 0; s == LOOM_OK && k < n_groups; k++) {
    const fuse_group_t *grp = &e->plan.groups[e->order[k]];
    /* A reference step writes every output of its node, even one that
     * nothing reads (a dead value when the passes are off). */
    const ir_node_t *single = grp->kind == FUSE_REFERENCE ? &g->nodes[grp->nodes[0]] : NULL;
    int n_out = single ? single->n_out : grp->n_outputs;
    for (int o = 0; o < n_out && s == LOOM_OK; o++) {
      int32_t v = single ? single->out[o] : grp->outputs[o];
      if (e->slot_of_value[v] >= 0) continue;
      if (grp->kind == FUSE_ALIAS) {
        e->slot_of_value[v] = e->slot_of_value[grp->inputs[0]];
        continue;
      }
      int64_t bytes;
      s = value_bytes(e, v, &bytes);
      if (s == LOOM_OK && bytes > MEM_PLAN_MAX_BYTES) {
        if (e->dyn) bytes = 0; /* nominal, as in value_bytes */
        else s = too_large(e->graph, v, bytes);
      }
      if (s != LOOM_OK) break;
      int32_t slot = new_slot(e, bytes);
      e->slot_of_value[v] = slot;
      req_of_slot[slot] = n_req;
      req[n_req++] = (mem_request_t){.bytes = bytes, .first = k, .last = k, .inplace_of = -1};
    }
  }
  /* A slot lives until the last group reading any value stored in it. */
  for (int k = 0; s == LOOM_OK && k < n_groups; k++) {
    const fuse_group_t *grp = &e->plan.groups[e->order[k]];
    for (int i = 0; i < grp->n_inputs; i++) {
      int32_t slot = e->slot_of_value[grp->inputs[i]];
      int32_t r = slot >= 0 ? req_of_slot[slot] : -1;
      if (r >= 0 && req[r].last < k) req[r].last = k;
    }
  }
  rt_inside_t *inside = s == LOOM_OK ? core_malloc(sizeof *inside * (size_t)(e->n_slots + 1))
                                     : NULL;
  uint8_t *holds = s == LOOM_OK ? core_malloc((size_t)e->n_slots + 1) : NULL;
  if (s == LOOM_OK && (!inside || !holds))
    s = loom_fail(LOOM_ERR_NOMEM, "out of memory planning memory");
  int placed = s == LOOM_OK ? rt_place_layouts(e, req, req_of_slot, inside, holds) : 0;
  if (s == LOOM_OK) take_dying_inputs(e, req, req_of_slot, holds);
  if (s == LOOM_OK) s = mem_plan_build(req, n_req, &e->mem);
  /* Runtime sizes plan at nominal ones: the first run's sizes allocate
   * the arena (runtime/symbols.c), not 64 images of a batch never run. */
  if (s == LOOM_OK && e->mem.arena_bytes > 0 && !e->dyn) {
    e->arena_bytes = e->mem.arena_bytes;
    e->arena = rt_arena_alloc(e, e->arena_bytes);
    if (!e->arena) s = loom_fail(LOOM_ERR_NOMEM, "out of memory for a %lld-byte arena",
                                 (long long)e->arena_bytes);
  }
  if (s == LOOM_OK && e->arena) {
    for (int slot = 0; slot < e->n_slots; slot++) {
      int32_t r = req_of_slot[slot] >= 0 ? req_of_slot[slot] : inside[slot].request;
      if (r >= 0)
        e->slots[slot] = (char *)e->arena + e->mem.offsets[r] +
                         (req_of_slot[slot] >= 0 ? 0 : inside[slot].at);
    }
  }
  if (placed > 0) core_log(LOG_MEMORY, "%d concats and slices in place (no copies)", placed);
  if (s == LOOM_OK && e->dyn) { /* kept to replan when the sizes change */
    rt_sym_keep_requests(e, req, n_req, req_of_slot);
    req = NULL;
    req_of_slot = NULL;
  }
  core_free(pos);
  core_free(req_of_slot);
  core_free(req);
  core_free(inside);
  core_free(holds);
  return s;
}

static loom_status_t alloc_tables(loom_executable_t *e) {
  loom_graph_t *g = e->graph;
  int64_t max_slots = g->n_values + g->n_outputs + 1;
  e->slot_of_value = core_malloc(sizeof(int32_t) * (size_t)(g->n_values + 1));
  e->slots = core_calloc((size_t)max_slots, sizeof(void *));
  e->slot_bytes = core_calloc((size_t)max_slots, sizeof(int64_t));
  e->order = core_malloc(sizeof(int32_t) * (size_t)(e->plan.n_groups + 1));
  e->in_place_groups = core_calloc((size_t)e->plan.n_groups + 1, sizeof(bool));
  e->output_slot = core_malloc(sizeof(int32_t) * (size_t)(g->n_outputs + 1));
  if (!e->slot_of_value || !e->slots || !e->slot_bytes || !e->order || !e->in_place_groups ||
      !e->output_slot)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  for (int64_t v = 0; v < g->n_values; v++) e->slot_of_value[v] = -1;
  return LOOM_OK;
}

/* ---- Guards --------------------------------------------------------------- */

static loom_status_t build_guards(loom_executable_t *e) {
  loom_graph_t *g = e->graph;
  e->n_inputs = (int)g->n_inputs;
  e->n_outputs = (int)g->n_outputs;
  e->inputs = core_calloc((size_t)e->n_inputs + 1, sizeof *e->inputs);
  e->outputs = core_calloc((size_t)e->n_outputs + 1, sizeof *e->outputs);
  if (!e->inputs || !e->outputs) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  for (int i = 0; i < e->n_inputs + e->n_outputs; i++) {
    bool is_in = i < e->n_inputs;
    guard_t *gd = is_in ? &e->inputs[i] : &e->outputs[i - e->n_inputs];
    int32_t v = is_in ? g->inputs[i] : g->outputs[i - e->n_inputs];
    gd->dtype = g->values[v].type.dtype;
    gd->rank = g->values[v].type.rank;
    if (rt_value_shape(e, v, gd->shape) != LOOM_OK)
      return loom_fail(LOOM_ERR_UNSUPPORTED,
                       "loom_compile: %s %d has a shape known only when the graph "
                       "runs; run it with loom_interpret", is_in ? "input" : "output",
                       is_in ? i : i - e->n_inputs);
    gd->slot = -1;
    if (e->slot_of_value) gd->slot = is_in ? e->slot_of_value[v] : e->output_slot[i - e->n_inputs];
    int64_t bytes;
    LOOM_TRY(value_bytes(e, v, &bytes));
    if (is_in) {
      /* A strided input is copied here; allocated now, not per run. */
      gd->staging = core_aligned_alloc((size_t)(bytes ? bytes : 1));
      if (!gd->staging) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
    }
  }
  return LOOM_OK;
}

/* ---- Steps -------------------------------------------------------------- */

static loom_status_t add_output_copies(loom_executable_t *e, int *n_steps) {
  loom_graph_t *g = e->graph;
  for (int64_t i = 0; i < g->n_outputs; i++) {
    int32_t v = g->outputs[i];
    int32_t from = e->slot_of_value[v];
    if (from == e->output_slot[i]) continue;
    step_t *st = &e->steps[(*n_steps)++];
    st->kind = STEP_COPY;
    st->group = -1;
    st->copy_from = from;
    st->copy_to = e->output_slot[i];
    st->copy_bytes = e->slot_bytes[e->output_slot[i]];
  }
  return LOOM_OK;
}

/* Step st launches group gi's kernel in part k. */
static void bind_kernel(loom_executable_t *e, int k, step_t *st) {
  st->kind = STEP_KERNEL;
  st->part = k;
  st->program = e->parts[k].program;
  st->launch = e->parts[k].backend->launch;
  if (rt_step_is_reference(e, st)) e->n_reference++;
  else e->n_generated++;
}

/* part[gi]: the part whose program runs group gi, or -1. */
static loom_status_t add_steps(loom_executable_t *e, const int8_t *part,
                               const loom_compile_options_t *o) {
  int n = 0;
  bool copies_done = false;
  for (int k = 0; k < e->plan.n_groups; k++) {
    int32_t gi = e->order[k];
    const fuse_group_t *grp = &e->plan.groups[gi];
    /* Outputs are copied before assigns change any state. */
    if (!copies_done && rt_is_assign_group(e->graph, grp)) {
      LOOM_TRY(add_output_copies(e, &n));
      copies_done = true;
    }
    if (grp->kind == FUSE_ALIAS || e->in_place_groups[gi]) continue;
    step_t *st = &e->steps[n];
    st->group = gi;
    if (rt_is_assign_group(e->graph, grp)) {
      /* An assign is a copy into the parameter's storage: no kernel. */
      const ir_node_t *n = &e->graph->nodes[grp->nodes[0]];
      st->kind = STEP_COPY;
      st->copy_to = e->slot_of_value[n->in[0]];
      st->copy_from = e->slot_of_value[n->in[1]];
      LOOM_TRY(value_bytes(e, n->in[0], &st->copy_bytes));
      if (st->copy_to < 0 || st->copy_from < 0)
        return loom_fail(LOOM_ERR_GRAPH, "compile: assign of node %d has no storage",
                         grp->nodes[0]);
      if (st->copy_to == st->copy_from) continue; /* written in place */
    } else if (ir_ops[e->graph->nodes[grp->nodes[0]].op].flags & F_SUBGRAPH) {
      st->kind = STEP_CONTROL;
      LOOM_TRY(rt_control_build(e, grp->nodes[0], o, &st->control));
    } else if (part[gi] >= 0) {
      bind_kernel(e, part[gi], st);
    } else {
      return loom_fail(LOOM_ERR_UNSUPPORTED, "compile: group %d (%s, %d nodes) has no code",
                       gi, fuse_kind_name(grp->kind), grp->n_nodes);
    }
    n++;
  }
  if (!copies_done) LOOM_TRY(add_output_copies(e, &n));
  e->n_steps = n;
  return LOOM_OK;
}

static loom_status_t build_steps(loom_executable_t *e, const int8_t *part,
                                 const loom_compile_options_t *o) {
  int max_steps = e->plan.n_groups + (int)e->graph->n_outputs + 1;
  e->steps = core_calloc((size_t)max_steps, sizeof *e->steps);
  if (!e->steps) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  return add_steps(e, part, o);
}

/* ---- The driver ------------------------------------------------------------ */

static loom_status_t run_passes(loom_executable_t *e, const loom_compile_options_t *o) {
  e->graph = e->source;
  if (!o->passes) return LOOM_OK;
  pass_options_t po;
  pass_options_init(&po);
  loom_graph_t *opt;
  loom_status_t s = pass_pipeline(e->source, &po, &opt);
  if (s == LOOM_ERR_UNSUPPORTED) return LOOM_OK; /* no pipeline in this build */
  LOOM_TRY(s);
  e->graph = opt;
  e->owns_graph = true; /* explain prints it: nothing changes it after the passes */
  return LOOM_OK;
}

/* Records why the target's code was lost (reason: its message) and
 * warns, once per process for each kind: every later compile would say
 * the same. Code turned off by the options is no surprise: no warning. */
static void note_lost(loom_executable_t *e, loom_fallback_t f, const char *reason) {
  static atomic_bool warned[LOOM_FALLBACK_NO_MODULE + 1];
  rt_fallback_note(e, f, reason);
  if (f == LOOM_FALLBACK_DISABLED || f > LOOM_FALLBACK_NO_MODULE) return;
  const char *what = f == LOOM_FALLBACK_CC_FAILED
                         ? "the C compiler failed on the generated code (with a compiler "
                           "that works, a bug in Loom: loom_executable_explain shows the code)"
                         : "no compiled module";
  core_log(LOG_COMPILE, "%s [%s]: %s", what, loom_fallback_name(f), reason ? reason : "");
  /* An abandoned compile (a cache destroyed, a bounded wait over) is no
   * failure to warn of. */
  if (!core_cancelled() && !atomic_exchange(&warned[f], true))
    core_warn("%s: %s; running graphs in the fallback interpreter instead (eager kernels "
              "where the back end has them, reference kernels elsewhere)",
              what, reason ? reason : "");
}

static loom_status_t compile_plan(loom_executable_t *e, const loom_compile_options_t *o) {
  LOOM_TRY(run_passes(e, o));
  fuse_options_t fo = {.enabled = o->fusion != 0};
  LOOM_TRY(fuse_plan_build(e->graph, &fo, e->parts[0].backend->fuse, &e->plan));
  if (e->dyn) LOOM_TRY(rt_sym_split_groups(e));
  LOOM_TRY(alloc_tables(e));
  int64_t *bytes = core_malloc(sizeof(int64_t) * (size_t)(e->graph->n_values + 1));
  if (!bytes) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  loom_status_t s = LOOM_OK;
  /* The schedule sums sizes: capped, no sum of them overflows (a buffer
   * that large fails the memory plan anyway). */
  int64_t cap = INT64_MAX / 2 / (e->graph->n_values + 1);
  for (int64_t v = 0; v < e->graph->n_values && s == LOOM_OK; v++) {
    bytes[v] = -1;
    if (e->graph->values[v].kind == IR_VALUE_NODE) s = value_bytes(e, (int32_t)v, &bytes[v]);
    if (bytes[v] > cap) bytes[v] = cap;
  }
  if (s == LOOM_OK) s = sched_order(e->graph, &e->plan, bytes, e->order);
  core_free(bytes);
  LOOM_TRY(s);
  if (core_log_enabled(LOG_FUSION)) {
    char *text = NULL;
    if (fuse_plan_describe(e->graph, &e->plan, &text) == LOOM_OK)
      core_log(LOG_FUSION, "%d groups\n%s", e->plan.n_groups, text);
    core_free(text);
  }
  LOOM_TRY(assign_fixed_slots(e));
  LOOM_TRY(rt_alias_assigns(e));
  LOOM_TRY(plan_arena(e));
  core_log(LOG_MEMORY, "arena %lld bytes, lower bound %lld, naive %lld",
           (long long)e->mem.arena_bytes, (long long)e->mem.lower_bound_bytes,
           (long long)e->mem.naive_bytes);
  return build_guards(e);
}

/* Whether group grp reads a strided view (fuse.h), which a reference
 * kernel would take for a contiguous tensor. */
static bool reads_strided(const loom_executable_t *e, const fuse_group_t *grp) {
  for (int i = 0; i < grp->n_inputs; i++) {
    const ir_value_t *v = &e->graph->values[grp->inputs[i]];
    if (v->kind == IR_VALUE_NODE && e->plan.groups[e->plan.group_of_node[v->node]].strided)
      return true;
  }
  return false;
}

/* Whether every fused group got its code: a group of several nodes has
 * no buffers for its inner values, and a group reading a strided view or
 * writing its product through one does so through strides, so only its
 * generated function can run it. */
static bool fused_groups_generated(const loom_executable_t *e, const bool *generated) {
  for (int i = 0; i < e->plan.n_groups; i++) {
    const fuse_group_t *grp = &e->plan.groups[i];
    bool needs_code = !e->in_place_groups[i] &&
                      ((grp->n_nodes > 1 && grp->kind != FUSE_REFERENCE) ||
                       (grp->kind != FUSE_ALIAS && (grp->strided || reads_strided(e, grp))));
    if (needs_code && !generated[i]) return false;
  }
  return true;
}

/* Per group: whether a kernel step runs it (alias, assign and if/loop
 * groups are the runtime's own). */
static bool *wanted_groups(const loom_executable_t *e) {
  bool *want = core_calloc((size_t)e->plan.n_groups + 1, sizeof *want);
  for (int i = 0; want && i < e->plan.n_groups; i++) {
    const fuse_group_t *grp = &e->plan.groups[i];
    want[i] = grp->kind != FUSE_ALIAS && !e->in_place_groups[i] &&
              !rt_is_assign_group(e->graph, grp) &&
              !(ir_ops[e->graph->nodes[grp->nodes[0]].op].flags & F_SUBGRAPH);
  }
  return want;
}

/* Part k's program for the wanted groups, started; generated says which
 * groups it built (none when its code was lost). */
static loom_status_t build_part(loom_executable_t *e, int k, const loom_compile_options_t *o,
                                const bool *want, bool *generated) {
  rt_part_t *p = &e->parts[k];
  const be_backend_t *target = e->parts[0].backend;
  be_request_t req = {.graph = e->graph, .plan = &e->plan, .want = want,
                      .slot_of_value = e->slot_of_value, .n_slots = e->n_slots,
                      .slots = e->slots, .syms = e->syms, .sym_runtime = rt_sym_runtime(e),
                      .options = o};
  /* The reference part runs on host memory: a host target's eager kernels
   * serve it. */
  if (k == 1 && target->device == p->backend->device) req.eager = target->eager;
  be_result_t res = {.generated = generated};
  LOOM_TRY(p->backend->build(&req, &res, &p->program));
  if (res.lost != LOOM_FALLBACK_NONE) note_lost(e, res.lost, res.lost_reason);
  core_free(res.lost_reason);
  e->n_kernels += res.n_kernels;
  if (!p->program) return LOOM_OK;
  LOOM_TRY(p->backend->start(p->program, o->num_threads));
  for (int i = 0; k == 0 && p->backend->stable_use && i < e->n_inputs; i++)
    e->inputs[i].stable_use = e->inputs[i].slot >= 0 &&
                              p->backend->stable_use(p->program, e->inputs[i].slot);
  return p->backend->run_new(p->program, &p->run);
}

/* The groups the target left (single nodes, unless a fused group lost
 * its code: then *ok is false) go to the reference back end, in part 1. */
static loom_status_t build_rest(loom_executable_t *e, const loom_compile_options_t *o,
                                bool *want, bool *generated, int8_t *part, bool *ok) {
  bool rest = false;
  *ok = fused_groups_generated(e, generated);
  for (int i = 0; i < e->plan.n_groups; i++) {
    part[i] = generated[i] ? 0 : -1;
    want[i] = want[i] && !generated[i];
    rest |= want[i];
  }
  if (!*ok || !rest) return LOOM_OK;
  e->parts[1].backend = be_reference();
  LOOM_TRY(build_part(e, 1, o, want, generated));
  for (int i = 0; i < e->plan.n_groups; i++)
    if (want[i] && generated[i]) part[i] = 1;
  return LOOM_OK;
}

/* Builds the programs and steps; false in *compiled sends the graph to
 * the interpreter. */
static loom_status_t compile_code(loom_executable_t *e, const loom_compile_options_t *o,
                                  bool *compiled) {
  *compiled = false;
  bool *want = wanted_groups(e), ok = false;
  bool *generated = core_calloc((size_t)e->plan.n_groups + 1, sizeof *generated);
  int8_t *part = core_malloc((size_t)e->plan.n_groups + 1);
  loom_status_t s = want && generated && part
                        ? build_part(e, 0, o, want, generated)
                        : loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  if (s == LOOM_OK) s = build_rest(e, o, want, generated, part, &ok);
  if (s == LOOM_OK && !ok) core_log(LOG_COMPILE, "a fused group has no code");
  if (s == LOOM_OK && ok) {
    s = build_steps(e, part, o);
    *compiled = s == LOOM_OK;
  }
  core_free(want);
  core_free(generated);
  core_free(part);
  return s;
}

static loom_status_t unknown_target(const char *target) {
  char names[256];
  be_names(names, sizeof names);
  return loom_fail(LOOM_ERR_INVALID, "loom_compile: target '%s' is not a back end of this "
                   "build (registered: %s)", target, names);
}

loom_status_t loom_compile(loom_graph_t *g, const loom_compile_options_t *options,
                           loom_executable_t **out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  *out = NULL;
  LOOM_TRY(ir_verify(g));
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  if (options)
    LOOM_TRY(core_sized_read(__func__, "loom_compile_options_t", &o, options, sizeof o));
  double t0 = now_ms();
  loom_executable_t *e = core_calloc(1, sizeof *e);
  if (!e) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  e->source = g;
  ir_graph_hold(g); /* the parameters are shared: g lives while e does */
  loom_status_t s = resolve_symbols(e, &o);
  if (s == LOOM_OK) e->parts[0].backend = be_find(o.target);
  if (s == LOOM_OK && !e->parts[0].backend) s = unknown_target(o.target);
  const char *why = s == LOOM_OK ? needs_interpreter(g) : NULL;
  bool compiled = false;
  if (s == LOOM_OK && !why) s = compile_plan(e, &o);
  if (s == LOOM_OK && !why) s = compile_code(e, &o, &compiled);
  if (s != LOOM_OK) {
    loom_executable_destroy(e);
    return s;
  }
  if (!compiled) {
    core_log(LOG_COMPILE, "the graph runs in the interpreter (%s)",
             why ? why : "no generated code");
    e->interpreted = true;
    if (!e->graph) e->graph = e->source;
    if (!e->inputs) s = build_guards(e);
  }
  if (s == LOOM_OK) s = rt_sym_finish(e);
  if (s == LOOM_OK) s = rt_lanes_init(e);
  if (s != LOOM_OK) {
    loom_executable_destroy(e);
    return s;
  }
  e->compile_ms = now_ms() - t0;
  rt_count_compile();
  core_log(LOG_COMPILE, "compiled %lld nodes into %d steps (%d generated, %d reference) in %.1f ms",
           (long long)e->graph->n_nodes, e->n_steps, e->n_generated, e->n_reference,
           e->compile_ms);
  *out = e;
  loom_clear_error();
  return LOOM_OK;
}
