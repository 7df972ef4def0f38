/* Layout ops: reshape, permute, slice, concat, pad and friends: reference kernels. */
#include "kernels/ref.h"

loom_status_t ref_reshape(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_transpose(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_expand(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_slice(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_concat(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_split(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_pad(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_flip(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_tile(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

