/* Placeholder until memory planning lands: every buffer on its own. */
#include "core/alloc.h"
#include "core/status.h"
#include "passes/memplan.h"

loom_status_t mem_plan_build(const mem_request_t *r, int n, mem_plan_t *out) {
  out->offsets = core_calloc((size_t)(n ? n : 1), sizeof *out->offsets);
  if (!out->offsets) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a memory plan");
  int64_t at = 0;
  for (int i = 0; i < n; i++) {
    out->offsets[i] = at;
    at += (r[i].bytes + 63) / 64 * 64;
  }
  out->arena_bytes = out->naive_bytes = out->lower_bound_bytes = at;
  out->n_inplace = 0;
  return LOOM_OK;
}

void mem_plan_free(mem_plan_t *plan) {
  core_free(plan->offsets);
  plan->offsets = NULL;
}
