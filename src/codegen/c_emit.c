/* Placeholder until the C emitter lands: no group is generated. */
#include "codegen/codegen.h"
#include "core/alloc.h"
#include "core/status.h"

bool cg_supports(const loom_graph_t *g, int64_t node) {
  (void)g;
  (void)node;
  return false;
}

loom_status_t cg_emit_module(const loom_graph_t *g, const fuse_plan_t *plan,
                             const int32_t *slot_of_value,
                             const int64_t *sym_values, cg_module_t *out) {
  (void)g;
  (void)slot_of_value;
  (void)sym_values;
  out->source = core_strdup("");
  out->length = 0;
  out->generated = core_calloc((size_t)(plan->n_groups + 1), sizeof(bool));
  if (!out->source || !out->generated) {
    cg_module_free(out);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a module");
  }
  return LOOM_OK;
}

void cg_module_free(cg_module_t *m) {
  core_free(m->source);
  core_free(m->generated);
  m->source = NULL;
  m->generated = NULL;
}
