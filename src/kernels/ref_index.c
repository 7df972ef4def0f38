/* Indexing ops: gather, scatter, embedding, one-hot: reference kernels. */
#include "kernels/ref.h"

loom_status_t ref_gather(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_scatter_add(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_embedding(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_one_hot(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

