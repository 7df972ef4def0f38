/* Contractions: matmul and convolutions: reference kernels. */
#include "kernels/ref.h"

loom_status_t ref_matmul(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_conv2d(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

loom_status_t ref_conv_transpose2d(ref_call_t *c) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: kernel missing", ref_name(c));
}

