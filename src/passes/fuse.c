/* Placeholder until fusion lands: every node is a reference group. */
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "passes/fuse.h"

const char *fuse_kind_name(fuse_kind_t kind) {
  static const char *const names[] = {"elementwise", "reduction", "contraction",
                                      "layout", "alias", "reference"};
  return (unsigned)kind < 6 ? names[kind] : "?";
}

void fuse_plan_free(fuse_plan_t *plan) {
  for (int i = 0; plan->groups && i < plan->n_groups; i++) {
    core_free(plan->groups[i].nodes);
    core_free(plan->groups[i].inputs);
    core_free(plan->groups[i].outputs);
  }
  core_free(plan->groups);
  core_free(plan->group_of_node);
  memset(plan, 0, sizeof *plan);
}

loom_status_t fuse_plan_build(const loom_graph_t *g, const fuse_options_t *o,
                              fuse_plan_t *out) {
  (void)o;
  memset(out, 0, sizeof *out);
  int64_t n = g->n_nodes;
  out->groups = core_calloc((size_t)(n ? n : 1), sizeof *out->groups);
  out->group_of_node = core_calloc((size_t)(n ? n : 1), sizeof *out->group_of_node);
  if (!out->groups || !out->group_of_node) {
    fuse_plan_free(out);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a fusion plan");
  }
  for (int64_t i = 0; i < n; i++) {
    const ir_node_t *node = &g->nodes[i];
    fuse_group_t *grp = &out->groups[out->n_groups++];
    grp->kind = FUSE_REFERENCE;
    grp->anchor = -1;
    grp->n_nodes = 1;
    grp->nodes = core_malloc(sizeof(int32_t));
    grp->inputs = core_malloc(sizeof(int32_t) * (size_t)(node->n_in + 1));
    grp->outputs = core_malloc(sizeof(int32_t) * (size_t)(node->n_out + 1));
    if (!grp->nodes || !grp->inputs || !grp->outputs) {
      fuse_plan_free(out);
      return loom_fail(LOOM_ERR_NOMEM, "out of memory for a fusion plan");
    }
    grp->nodes[0] = (int32_t)i;
    for (int k = 0; k < node->n_in; k++) {
      bool seen = false;
      for (int j = 0; j < grp->n_inputs; j++) seen |= grp->inputs[j] == node->in[k];
      if (!seen) grp->inputs[grp->n_inputs++] = node->in[k];
    }
    for (int k = 0; k < node->n_out; k++) grp->outputs[grp->n_outputs++] = node->out[k];
    out->group_of_node[i] = (int32_t)i;
  }
  return LOOM_OK;
}

loom_status_t fuse_plan_describe(const loom_graph_t *g, const fuse_plan_t *plan,
                                 char **out) {
  (void)g;
  (void)plan;
  *out = core_strdup("(fusion not built yet)\n");
  return *out ? LOOM_OK : loom_fail(LOOM_ERR_NOMEM, "out of memory");
}
