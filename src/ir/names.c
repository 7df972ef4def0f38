/* The names of a graph's inputs and parameters, one namespace: a second
 * input or parameter of a name fails when it is made (loom_graph_input,
 * loom_graph_param), rather than when a checkpoint is saved. The index is
 * an open-addressing table of value ids hashed by name, so that a graph of
 * many parameters is checked in linear time. Graphs Loom builds itself
 * (ir_graph_input) add leaves behind the index's back; it is rebuilt when
 * its count no longer matches the graph's. */
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "ir/ir.h"

/* FNV-1a. */
static uint64_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static const char *leaf_name(const loom_graph_t *g, int32_t id) {
  return g->values[id].name;
}

/* The slot holding name, or the empty slot where it would go. */
static int64_t find_slot(const loom_graph_t *g, const char *name) {
  uint64_t mask = (uint64_t)g->cap_names - 1;
  for (uint64_t i = name_hash(name) & mask;; i = (i + 1) & mask) {
    int32_t id = g->names[i];
    if (id < 0 || !strcmp(leaf_name(g, id), name)) return (int64_t)i;
  }
}

static void insert(loom_graph_t *g, int32_t id) {
  const char *name = leaf_name(g, id);
  if (!name) return;
  int64_t slot = find_slot(g, name);
  if (g->names[slot] < 0) g->names[slot] = id;
}

static void insert_list(loom_graph_t *g, const int32_t *ids, int64_t n) {
  for (int64_t i = 0; i < n; i++) insert(g, ids[i]);
}

/* A table of cap slots (a power of two) holding every named leaf. */
static loom_status_t rebuild(loom_graph_t *g, int64_t cap) {
  int32_t *slots = core_malloc(sizeof *slots * (size_t)cap);
  if (!slots) return loom_fail(LOOM_ERR_NOMEM, "out of memory for the graph's names");
  for (int64_t i = 0; i < cap; i++) slots[i] = -1;
  core_free(g->names);
  g->names = slots;
  g->cap_names = cap;
  insert_list(g, g->inputs, g->n_inputs);
  insert_list(g, g->params, g->n_params);
  g->n_names_indexed = g->n_inputs + g->n_params;
  return LOOM_OK;
}

/* The index up to date, with room for one more name at load <= 1/2. */
static loom_status_t sync(loom_graph_t *g) {
  int64_t leaves = g->n_inputs + g->n_params, cap = g->cap_names ? g->cap_names : 16;
  while (cap < 2 * (leaves + 1)) cap *= 2;
  if (g->n_names_indexed == leaves && cap == g->cap_names) return LOOM_OK;
  return rebuild(g, cap);
}

static const char *kind_name(const loom_graph_t *g, int32_t id) {
  return g->values[id].kind == IR_VALUE_INPUT ? "input" : "parameter";
}

loom_status_t ir_names_check(loom_graph_t *g, const char *fn, const char *name) {
  if (!name) return LOOM_OK;
  LOOM_TRY(sync(g));
  int32_t id = g->names[find_slot(g, name)];
  if (id < 0) return LOOM_OK;
  return loom_fail(LOOM_ERR_INVALID, "%s: the name '%s' is taken by %s %d of the graph; "
                   "the names of a graph's inputs and parameters must be unique", fn,
                   name, kind_name(g, id), g->values[id].index);
}

void ir_names_add(loom_graph_t *g, int32_t id) {
  /* ir_names_check made room; a stale index is rebuilt whole later. */
  if (g->n_names_indexed != g->n_inputs + g->n_params - 1) return;
  insert(g, id);
  g->n_names_indexed++;
}

void ir_names_forget(loom_graph_t *g) { g->n_names_indexed = -1; }
