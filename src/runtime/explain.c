/* loom_executable_explain: what compilation made of a graph. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "runtime/executable.h"

typedef struct text {
  char *s;
  int64_t len, cap;
  bool failed;
} text_t;

static void put(text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text_t *t, const char *fmt, ...) {
  if (t->failed) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (core_grow((void **)&t->s, &t->cap, t->len + n + 1, 1) != LOOM_OK) {
    t->failed = true;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(t->s + t->len, (size_t)(t->cap - t->len), fmt, ap);
  va_end(ap);
  t->len += n;
}

static const char *step_kind_name(step_kind_t k) {
  return k == STEP_GENERATED ? "generated" : k == STEP_REFERENCE ? "reference" : "copy";
}

static void put_steps(text_t *t, const loom_executable_t *e) {
  put(t, "== steps (%d) ==\n", e->n_steps);
  for (int i = 0; i < e->n_steps; i++) {
    const step_t *st = &e->steps[i];
    if (st->kind == STEP_COPY) {
      put(t, "  %3d copy slot %d -> slot %d (%lld bytes)\n", i, st->copy_from, st->copy_to,
          (long long)st->copy_bytes);
      continue;
    }
    const fuse_group_t *grp = &e->plan.groups[st->group];
    put(t, "  %3d %-9s g%d %s:", i, step_kind_name(st->kind), st->group,
        fuse_kind_name(grp->kind));
    for (int k = 0; k < grp->n_nodes; k++)
      put(t, " %s", ir_ops[e->graph->nodes[grp->nodes[k]].op].name);
    put(t, "\n");
  }
}

loom_status_t loom_executable_explain(const loom_executable_t *e, char **out) {
  LOOM_CHECK_ARG(e);
  LOOM_CHECK_ARG(out);
  text_t t = {0};
  if (e->interpreted) put(&t, "The graph runs in the interpreter (no compiled code).\n");
  if (e->passes_text) put(&t, "== IR after the passes ==\n%s", e->passes_text);
  char *groups = NULL;
  if (!e->interpreted && fuse_plan_describe(e->graph, &e->plan, &groups) == LOOM_OK)
    put(&t, "== fusion groups (%d) ==\n%s", e->plan.n_groups, groups);
  core_free(groups);
  if (!e->interpreted) {
    put_steps(&t, e);
    put(&t, "== memory ==\n  arena %lld bytes, lower bound %lld, naive %lld, in place %d\n",
        (long long)e->mem.arena_bytes, (long long)e->mem.lower_bound_bytes,
        (long long)e->mem.naive_bytes, e->mem.n_inplace);
  }
  if (e->source_text)
    put(&t, "== generated C (%s) ==\n%s", e->module ? cpu_module_path(e->module) : "not compiled",
        e->source_text);
  if (t.failed || !t.s) {
    core_free(t.s);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory explaining an executable");
  }
  *out = t.s;
  return LOOM_OK;
}
