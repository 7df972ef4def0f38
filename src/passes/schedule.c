/* Placeholder until scheduling lands: the plan's own order. */
#include "passes/memplan.h"

loom_status_t sched_order(const loom_graph_t *g, const fuse_plan_t *plan,
                          const int64_t *bytes_of_value, int32_t *order) {
  (void)g;
  (void)bytes_of_value;
  for (int i = 0; i < plan->n_groups; i++) order[i] = i;
  return LOOM_OK;
}
