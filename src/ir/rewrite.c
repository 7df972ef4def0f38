/* Placeholder until the rewriter lands. */
#include "core/status.h"
#include "ir/rewrite.h"

loom_status_t ir_graph_clone(const loom_graph_t *src, loom_graph_t **out) {
  (void)src;
  *out = NULL;
  return loom_fail(LOOM_ERR_UNSUPPORTED, "graph rewriting is not built yet");
}
