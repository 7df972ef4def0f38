/* Shards: parameters that hold one rank's part of a whole value
 * (ir.h). A short list, searched in order: a graph has one per
 * optimizer moment at most. */
#include "core/alloc.h"
#include "core/status.h"
#include "ir/ir.h"

loom_status_t ir_shard_add(loom_graph_t *g, int32_t value, int ranks, int rank,
                           const ir_type_t *whole) {
  ir_shard_t *grown = core_realloc(g->shards, (size_t)(g->n_shards + 1) * sizeof *grown);
  if (!grown) return loom_fail(LOOM_ERR_NOMEM, "ir_shard_add: out of memory");
  g->shards = grown;
  g->shards[g->n_shards++] = (ir_shard_t){.value = value, .ranks = ranks, .rank = rank,
                                          .whole = *whole};
  return LOOM_OK;
}

const ir_shard_t *ir_shard_of(const loom_graph_t *g, int32_t value) {
  for (int64_t i = 0; i < g->n_shards; i++)
    if (g->shards[i].value == value) return &g->shards[i];
  return NULL;
}
