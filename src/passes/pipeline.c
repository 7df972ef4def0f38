/* The pass pipeline: simplify, decompose, fold, simplify, cse, dce, each
 * building a new graph from the last. Intermediate graphs are dropped as
 * soon as the next exists; the constants they made move to their
 * successor first, since the successor borrows them. */
#include <stddef.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/status.h"
#include "ir/rewrite.h"
#include "passes/passes.h"

void pass_options_init(pass_options_t *o) {
  *o = (pass_options_t){.fold = true, .cse = true, .simplify = true, .decompose = true, .dce = true};
}

/* Gives next the ownership of the constants it borrows from prev, which
 * is about to be destroyed. */
static void adopt_constants(loom_graph_t *next, loom_graph_t *prev) {
  for (int64_t p = 0; p < prev->n_values; p++) {
    ir_value_t *old = &prev->values[p];
    if (old->kind != IR_VALUE_CONST || old->borrowed || !old->data) continue;
    for (int64_t v = 0; v < next->n_values; v++) {
      ir_value_t *val = &next->values[v];
      if (val->kind == IR_VALUE_CONST && val->borrowed && val->data == old->data) {
        val->borrowed = false;
        old->borrowed = true;
        break;
      }
    }
  }
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
      return s;
    }
    if (cur) adopt_constants(next, cur);
    loom_graph_destroy(cur);
    cur = next;
    log_graph(steps[i].name, cur);
  }
  if (!cur) return ir_graph_clone(src, out);
  *out = cur;
  return LOOM_OK;
}
