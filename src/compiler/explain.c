/* loom_executable_explain: what compilation made of a graph. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/text.h"
#include "runtime/executable.h"

static const char *step_kind_name(const loom_executable_t *e, const step_t *st) {
  return rt_step_is_reference(e, st) ? "reference"
         : st->kind == STEP_KERNEL   ? "generated"
         : st->kind == STEP_CONTROL  ? "control"
                                     : "copy";
}

static void put_steps(core_text_t *t, const loom_executable_t *e) {
  core_text_put(t, "== steps (%d) ==\n", e->n_steps);
  for (int i = 0; i < e->n_steps; i++) {
    const step_t *st = &e->steps[i];
    if (st->kind == STEP_COPY) {
      core_text_put(t, "  %3d copy slot %d -> slot %d (%lld bytes)\n", i, st->copy_from, st->copy_to,
          (long long)st->copy_bytes);
      continue;
    }
    const fuse_group_t *grp = &e->plan.groups[st->group];
    core_text_put(t, "  %3d %-9s g%d %s:", i, step_kind_name(e, st), st->group,
        fuse_kind_name(grp->kind));
    for (int k = 0; k < grp->n_nodes; k++)
      core_text_put(t, " %s", ir_ops[e->graph->nodes[grp->nodes[k]].op].name);
    core_text_put(t, "\n");
  }
}

/* Lost generated code, first: it costs the most (reference kernels run
 * 50-500x slower), and a module the compiler rejected is a bug to report. */
static void put_fallback(core_text_t *t, const loom_executable_t *e) {
  if (e->fallback == LOOM_FALLBACK_NONE) return;
  core_text_put(t, "== generated code lost (%s): reference kernels run instead ==\n%s\n",
                loom_fallback_name(e->fallback), e->fallback_reason ? e->fallback_reason : "");
}

/* Each back end's program source (the CPU's generated C), and where its
 * compiled form lives. */
static void put_sources(core_text_t *t, const loom_executable_t *e) {
  for (int k = 0; k < RT_PARTS; k++) {
    const rt_part_t *p = &e->parts[k];
    const char *where = "not compiled";
    const char *text = p->program && p->backend->source ? p->backend->source(p->program, &where)
                                                        : NULL;
    if (text) core_text_put(t, "== generated C (%s) ==\n%s", where, text);
  }
}

static loom_status_t explain(const loom_executable_t *e, char **out) {
  core_text_t t = {0};
  if (e->interpreted) core_text_put(&t, "The graph runs in the interpreter (no compiled code).\n");
  put_fallback(&t, e);
  char *passes = NULL;
  if (e->owns_graph && loom_graph_print(e->graph, &passes) == LOOM_OK)
    core_text_put(&t, "== IR after the passes ==\n%s", passes);
  core_free(passes);
  char *groups = NULL;
  if (!e->interpreted && fuse_plan_describe(e->graph, &e->plan, &groups) == LOOM_OK)
    core_text_put(&t, "== fusion groups (%d) ==\n%s", e->plan.n_groups, groups);
  core_free(groups);
  if (!e->interpreted) {
    put_steps(&t, e);
    core_text_put(&t, "== memory ==\n  arena %lld bytes, lower bound %lld, naive %lld, in place %d\n",
        (long long)e->mem.arena_bytes, (long long)e->mem.lower_bound_bytes,
        (long long)e->mem.naive_bytes, e->mem.n_inplace);
    double flops = rt_nodes_flops(e, NULL, e->graph->n_nodes);
    if (flops >= 0)
      core_text_put(&t, "== work ==\n  %.0f flops a run in contractions\n", flops);
  }
  put_sources(&t, e);
  return core_text_take(&t, "explaining an executable", out);
}

loom_status_t loom_executable_explain(const loom_executable_t *e, char **out) {
  LOOM_CHECK_ARG(e);
  LOOM_CHECK_ARG(out);
  rt_lanes_hold(e); /* runtime symbols: the last run's plan, not a run's midway */
  loom_status_t s = explain(e, out);
  rt_lanes_drop(e);
  return s;
}
