/* Placeholder until the pass pipeline lands. */
#include "core/status.h"
#include "passes/passes.h"

void pass_options_init(pass_options_t *o) {
  *o = (pass_options_t){.fold = true, .cse = true, .simplify = true, .decompose = true, .dce = true};
}

loom_status_t pass_pipeline(const loom_graph_t *src, const pass_options_t *o,
                            loom_graph_t **out) {
  (void)src;
  (void)o;
  *out = NULL;
  return loom_fail(LOOM_ERR_UNSUPPORTED, "the pass pipeline is not built yet");
}
