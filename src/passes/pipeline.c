/* The pass pipeline: simplify, decompose, fold, simplify, cse, dce, each
 * building a new graph from the last. Intermediate graphs are dropped as
 * soon as the next exists; the constants they made move to their
 * successor first, since the successor borrows them. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/status.h"
#include "ir/rewrite.h"
#include "passes/passes.h"

void pass_options_init(pass_options_t *o) {
  *o = (pass_options_t){.fold = true, .cse = true, .simplify = true, .decompose = true, .dce = true};
}

/* The constants of a graph that own their tensors, by the tensor's
 * address: an open-addressed table, so that adopting each one is a
 * lookup rather than a scan of the other graph. */
typedef struct owned_table {
  int64_t cap;
  ir_value_t **slot; /* NULL: empty */
} owned_table_t;

static size_t slot_of(const owned_table_t *t, const void *data) {
  uint64_t h = (uint64_t)(uintptr_t)data * 0x9e3779b97f4a7c15ull;
  return (size_t)(h >> 32) & (size_t)(t->cap - 1);
}

static loom_status_t owned_table_build(owned_table_t *t, loom_graph_t *g) {
  int64_t n = 0;
  for (int64_t v = 0; v < g->n_values; v++)
    n += g->values[v].kind == IR_VALUE_CONST && !g->values[v].borrowed && g->values[v].data;
  for (t->cap = 16; t->cap < 2 * n; t->cap *= 2) {}
  t->slot = core_calloc((size_t)t->cap, sizeof *t->slot);
  if (!t->slot) return loom_fail(LOOM_ERR_NOMEM, "out of memory in the pass pipeline");
  for (int64_t v = 0; v < g->n_values; v++) {
    ir_value_t *val = &g->values[v];
    if (val->kind != IR_VALUE_CONST || val->borrowed || !val->data) continue;
    size_t i = slot_of(t, val->data);
    while (t->slot[i]) i = (i + 1) & (size_t)(t->cap - 1);
    t->slot[i] = val;
  }
  return LOOM_OK;
}

/* The owning constant of data not yet adopted, or NULL. */
static ir_value_t *owned_find(const owned_table_t *t, const void *data) {
  for (size_t i = slot_of(t, data); t->slot[i]; i = (i + 1) & (size_t)(t->cap - 1))
    if (t->slot[i]->data == data && !t->slot[i]->borrowed) return t->slot[i];
  return NULL;
}

/* Gives next the ownership of the constants it borrows from prev, which
 * is about to be destroyed: each of prev's tensors to the first constant
 * of next that borrows it. */
static loom_status_t adopt_constants(loom_graph_t *next, loom_graph_t *prev) {
  owned_table_t t;
  LOOM_TRY(owned_table_build(&t, prev));
  for (int64_t v = 0; v < next->n_values; v++) {
    ir_value_t *val = &next->values[v];
    if (val->kind != IR_VALUE_CONST || !val->borrowed) continue;
    ir_value_t *old = owned_find(&t, val->data);
    if (!old) continue;
    val->borrowed = false;
    old->borrowed = true;
  }
  core_free(t.slot);
  return LOOM_OK;
}

static void log_graph(const char *what, const loom_graph_t *g) {
  if (!core_log_enabled(LOG_PASSES)) return;
  char *text = NULL;
  if (loom_graph_print(g, &text) != LOOM_OK) return;
  core_log(LOG_PASSES, "after %s (%d nodes):", what, loom_graph_num_nodes(g));
  /* Line by line: a log line has a bounded length, a graph does not. */
  for (char *line = text, *end; line && *line; line = end ? end + 1 : NULL) {
    end = strchr(line, '\n');
    if (end) *end = '\0';
    core_log(LOG_PASSES, "  %s", line);
  }
  loom_free(text);
}

typedef struct pass_step {
  const char *name;
  pass_fn run;
  size_t enabled; /* offset of its flag in pass_options_t */
} pass_step_t;

static const pass_step_t steps[] = {
    {"simplify", pass_simplify, offsetof(pass_options_t, simplify)},
    {"decompose", pass_decompose, offsetof(pass_options_t, decompose)},
    {"const_fold", pass_const_fold, offsetof(pass_options_t, fold)},
    {"simplify", pass_simplify, offsetof(pass_options_t, simplify)},
    {"cse", pass_cse, offsetof(pass_options_t, cse)},
    {"dce", pass_dce, offsetof(pass_options_t, dce)},
    /* after CSE, which makes the repeats */
    {"concat_distinct", pass_concat_distinct, offsetof(pass_options_t, cse)},
};

loom_status_t pass_pipeline(const loom_graph_t *src, const pass_options_t *o,
                            loom_graph_t **out) {
  LOOM_CHECK_ARG(src);
  LOOM_CHECK_ARG(out);
  *out = NULL;
  pass_options_t all;
  if (!o) {
    pass_options_init(&all);
    o = &all;
  }
  loom_graph_t *cur = NULL; /* owned; NULL while still at src */
  log_graph("nothing (the input graph)", src);
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    if (!*(const bool *)((const char *)o + steps[i].enabled)) continue;
    loom_graph_t *next = NULL;
    loom_status_t s = steps[i].run(cur ? cur : src, &next);
    if (s != LOOM_OK) {
      loom_graph_destroy(cur);
      ir_graph_free_spare();
      return s;
    }
    if (cur) s = adopt_constants(next, cur);
    if (s != LOOM_OK) { /* cur keeps its tensors; next only borrowed them */
      loom_graph_destroy(next);
      loom_graph_destroy(cur);
      ir_graph_free_spare();
      return s;
    }
    ir_graph_recycle(cur); /* its arrays go to the next pass's graph */
    cur = next;
    log_graph(steps[i].name, cur);
  }
  ir_graph_free_spare();
  if (!cur) return ir_graph_clone(src, out);
  *out = cur;
  return LOOM_OK;
}
