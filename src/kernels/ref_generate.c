/* Generators, random numbers and data-dependent ops: reference kernels. */
#include "kernels/ref.h"

loom_status_t ref_arange(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_full(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_random_uniform(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_random_normal(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_dropout(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_nonzero(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

