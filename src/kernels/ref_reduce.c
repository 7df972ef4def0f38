/* Reductions, scans and top-k: reference kernels. */
#include "kernels/ref.h"

loom_status_t ref_sum(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_mean(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_max(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_min(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_prod(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_logsumexp(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_variance(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_argmax(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_argmin(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_cumsum(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_topk(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

